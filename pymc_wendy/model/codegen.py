"""Generate vectorised numpy functions from sympy expressions.

Each generated function fills a pre-allocated array whose leading axis runs over time points,
evaluating every non-zero entry of a derivative tensor with common subexpressions shared.
The default style is plain vectorised numpy, which needs no compilation step. The ``"loop"``
style writes one scalar loop over time points for numba (no temporaries, one pass over memory);
the compiled likelihood uses it. The source is kept on the function (``__source__``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter


class _Printer(NumPyPrinter):
    """NumPy printer that keeps scalars as floats and prints symbols by their internal names."""

    def _print_Integer(self, expr):  # noqa: N802 - sympy printer protocol
        return repr(float(expr))

    def _print_Rational(self, expr):  # noqa: N802
        return repr(float(expr))


class _ScalarPrinter(PythonCodePrinter):
    """Scalar ``math`` code for numba; integer powers stay integer (cheap repeated products)."""

    def _print_Rational(self, expr):  # noqa: N802
        return repr(float(expr))


def generate(
    name: str,
    entries: Mapping[tuple[int, ...], sp.Expr],
    *,
    t: sp.Symbol,
    u: Sequence[sp.Symbol],
    p: Sequence[sp.Symbol],
    style: Literal["numpy", "loop", "point"] = "numpy",
    shape: tuple[int, ...] | None = None,
) -> Callable:
    """Compile ``entries`` into ``fn(t, U, p, out)`` that writes ``out[:, *idx] = expr``.

    ``t`` has shape (n,), ``U`` shape (n, D), ``p`` shape (J,), ``out`` shape (n, ...).
    Entries that are absent are left untouched (callers pass a zeroed ``out``). With
    ``style="loop"`` the returned function is plain Python meant for ``numba.njit``. With
    ``style="point"`` it is ``fn(t, y, p, out, base)`` at one time point, writing the entry
    ``idx`` of an array of ``shape`` (row-major) to the flat ``out[base + offset(idx)]``: no
    array views, for the compiled solver's right-hand side, which a first-class function call
    reaches (:mod:`~pymc_wendy.model.dopri`).
    """
    keys = list(entries)
    exprs = [sp.sympify(entries[k]) for k in keys]
    replacements, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_c"), optimizations="basic")
    if style == "numpy":
        printer = _Printer({"fully_qualified_modules": True, "allow_unknown_functions": False})
        row, pad, head = ":", "    ", []
    elif style == "loop":
        printer = _ScalarPrinter({"fully_qualified_modules": True})
        row, pad, head = "_i", "        ", ["    for _i in range(U.shape[0]):"]
    elif style == "point":
        return _generate_point(name, keys, replacements, reduced, t=t, u=u, p=p, shape=shape)
    else:
        raise ValueError(f"style must be 'numpy', 'loop' or 'point'; got {style!r}")
    lines = [f"def {name}(t_, U, p, out):"]
    lines += [f"    {s.name} = p[{j}]" for j, s in enumerate(p)]
    lines += head
    lines += [f"{pad}{s.name} = U[{row}, {i}]" for i, s in enumerate(u)]
    lines.append(f"{pad}{t.name} = t_[{row}]")
    for sym, expr in replacements:
        lines.append(f"{pad}{sym.name} = {printer.doprint(expr)}")
    for key, expr in zip(keys, reduced, strict=True):
        idx = ", ".join(str(i) for i in key)
        lines.append(f"{pad}out[{row}, {idx}] = {printer.doprint(expr)}")
    lines.append("    return out")
    return _defined(name, lines)


def _generate_point(name, keys, replacements, reduced, *, t, u, p, shape) -> Callable:
    """:func:`generate`'s ``style="point"``."""
    if shape is None:
        raise ValueError("style='point' needs the shape of the array the entries index")
    strides = np.cumprod((1, *shape[:0:-1]))[::-1]
    printer = _ScalarPrinter({"fully_qualified_modules": True})
    lines = [f"def {name}(t_, y, p, out, base):"]
    lines += [f"    {s.name} = p[{j}]" for j, s in enumerate(p)]
    lines += [f"    {s.name} = y[{i}]" for i, s in enumerate(u)]
    lines.append(f"    {t.name} = t_")
    for sym, expr in replacements:
        lines.append(f"    {sym.name} = {printer.doprint(expr)}")
    for key, expr in zip(keys, reduced, strict=True):
        offset = int(np.dot(key, strides)) if key else 0
        lines.append(f"    out[base + {offset}] = {printer.doprint(expr)}")
    return _defined(name, lines)


def _defined(name: str, lines: list[str]) -> Callable:
    """The function ``name`` that ``lines`` define, its source kept in ``__source__``."""
    source = "\n".join(lines) + "\n"
    namespace: dict = {"numpy": np, "math": math}
    exec(compile(source, f"<pymc_wendy generated {name}>", "exec"), namespace)  # noqa: S102
    fn = namespace[name]
    fn.__source__ = source
    return fn


def nonzero_entries(array: sp.NDimArray | np.ndarray) -> dict[tuple[int, ...], sp.Expr]:
    """Map index tuples to the structurally non-zero entries of a sympy/object array."""
    arr = np.asarray(array, dtype=object)
    out = {}
    for idx in itertools.product(*(range(n) for n in arr.shape)):
        expr = sp.sympify(arr[idx])
        if expr != 0:
            out[idx] = expr
    return out
