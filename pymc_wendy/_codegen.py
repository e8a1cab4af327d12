"""Generate vectorised numpy functions from sympy expressions.

Each generated function fills a pre-allocated array whose leading axis runs over time points,
evaluating every non-zero entry of a derivative tensor with common subexpressions shared.
The code is plain numpy so it needs no compilation step; the source is kept on the function
(``__source__``) so it can be read and, later, handed to numba.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import sympy as sp
from sympy.printing.numpy import NumPyPrinter


class _Printer(NumPyPrinter):
    """NumPy printer that keeps scalars as floats and prints symbols by their internal names."""

    def _print_Integer(self, expr):  # noqa: N802 - sympy printer protocol
        return repr(float(expr))

    def _print_Rational(self, expr):  # noqa: N802
        return repr(float(expr))


def generate(
    name: str,
    entries: Mapping[tuple[int, ...], sp.Expr],
    *,
    t: sp.Symbol,
    u: Sequence[sp.Symbol],
    p: Sequence[sp.Symbol],
) -> Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]:
    """Compile ``entries`` into ``fn(t, U, p, out)`` that writes ``out[:, *idx] = expr``.

    ``t`` has shape (n,), ``U`` shape (n, D), ``p`` shape (J,), ``out`` shape (n, ...).
    Entries that are absent are left untouched (callers pass a zeroed ``out``).
    """
    printer = _Printer({"fully_qualified_modules": True, "allow_unknown_functions": False})
    keys = list(entries)
    exprs = [sp.sympify(entries[k]) for k in keys]
    replacements, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("_c"), optimizations="basic")
    lines = [f"def {name}(t, U, p, out):"]
    lines += [f"    {s.name} = U[:, {i}]" for i, s in enumerate(u)]
    lines += [f"    {s.name} = p[{j}]" for j, s in enumerate(p)]
    lines.append(f"    {t.name} = t")
    for sym, expr in replacements:
        lines.append(f"    {sym.name} = {printer.doprint(expr)}")
    for key, expr in zip(keys, reduced, strict=True):
        idx = ", ".join(str(i) for i in key)
        lines.append(f"    out[:, {idx}] = {printer.doprint(expr)}")
    lines.append("    return out")
    source = "\n".join(lines) + "\n"
    namespace: dict = {"numpy": np}
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
