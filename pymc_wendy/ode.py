"""ODE models: a user's right-hand side traced once with sympy, with generated derivatives.

The user writes ``rhs(t, u, p)`` with ordinary arithmetic and math functions (``math.exp``,
``numpy.exp``, ``sympy.exp`` all work) and names the states and parameters.  :class:`ODEModel`
traces it symbolically and generates vectorised code for ``f`` and every derivative the weak
likelihood, its gradient and its Hessian use::

    f        (n, D)          f_d(p, u_m, t_m)
    f_u      (n, D, D)       df_d/du_e
    f_uu     (n, D, D, D)    d2f_d/(du_e du_e')
    f_p      (n, D, J)       df_d/dp_j
    f_up     (n, D, D, J)    d2f_d/(du_e dp_j)
    f_pp     (n, D, J, J)    d2f_d/(dp_i dp_j)
    f_upp    (n, D, D, J, J) d3f_d/(du_e dp_i dp_j)

Linearity in the parameters is detected from the symbolic second derivatives, and the
log-state model used for multiplicative log-normal noise (``dx/dt = f(p, e^x, t) / e^x``) is
derived from the same expressions by :meth:`ODEModel.log_transformed`.
"""

from __future__ import annotations

import builtins
import math
import types
from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np
import sympy as sp

from pymc_wendy import _codegen

__all__ = ["ODEModel", "ODEDefinitionError"]


class ODEDefinitionError(ValueError):
    """The right-hand side or the names given for an ODE model are unusable."""


# --- tracing -------------------------------------------------------------------------------

_SYMPY_FUNCTIONS: dict[str, Callable] = {
    "exp": sp.exp,
    "log": sp.log,
    "log2": lambda x: sp.log(x, 2),
    "log10": lambda x: sp.log(x, 10),
    "log1p": lambda x: sp.log(1 + x),
    "expm1": lambda x: sp.exp(x) - 1,
    "sqrt": sp.sqrt,
    "cbrt": sp.cbrt,
    "square": lambda x: x**2,
    "power": lambda x, y: x**y,
    "pow": lambda x, y: x**y,
    "sin": sp.sin,
    "cos": sp.cos,
    "tan": sp.tan,
    "arcsin": sp.asin,
    "arccos": sp.acos,
    "arctan": sp.atan,
    "asin": sp.asin,
    "acos": sp.acos,
    "atan": sp.atan,
    "atan2": sp.atan2,
    "arctan2": sp.atan2,
    "sinh": sp.sinh,
    "cosh": sp.cosh,
    "tanh": sp.tanh,
    "arcsinh": sp.asinh,
    "arccosh": sp.acosh,
    "arctanh": sp.atanh,
    "asinh": sp.asinh,
    "acosh": sp.acosh,
    "atanh": sp.atanh,
    "abs": sp.Abs,
    "fabs": sp.Abs,
    "absolute": sp.Abs,
    "maximum": sp.Max,
    "minimum": sp.Min,
    "erf": sp.erf,
    "erfc": sp.erfc,
    "where": lambda c, a, b: sp.Piecewise((a, c), (b, True)),
    "heaviside": lambda x, h0=0.5: sp.Heaviside(x, h0),
    "pi": sp.pi,
    "e": sp.E,
    "asarray": lambda x, *a, **k: np.asarray(x, dtype=object),
    "array": lambda x, *a, **k: np.asarray(x, dtype=object),
    "stack": lambda xs, *a, **k: list(xs),
    "hstack": lambda xs, *a, **k: [x for part in xs for x in np.atleast_1d(part)],
    "concatenate": lambda xs, *a, **k: [x for part in xs for x in np.atleast_1d(part)],
}


class _SymbolicNamespace(types.ModuleType):
    """Stands in for ``numpy``/``math`` while a right-hand side is traced."""

    def __init__(self, name: str):
        super().__init__(name)
        self._name = name

    def __getattr__(self, attr: str):
        try:
            return _SYMPY_FUNCTIONS[attr]
        except KeyError:
            raise ODEDefinitionError(
                f"{self._name}.{attr} cannot be traced symbolically; write the right-hand side "
                "with arithmetic and elementary functions (exp, log, sqrt, sin, tanh, ...)"
            ) from None


def _symbolic_stand_in(value):
    """Return the sympy stand-in for a numpy/math module or function, or None."""
    if value is np:
        return _SymbolicNamespace("numpy")
    if value is math:
        return _SymbolicNamespace("math")
    name = getattr(value, "__name__", None)
    module = getattr(value, "__module__", None) or ""
    is_numpy_fn = isinstance(value, np.ufunc) or module.startswith("numpy")
    is_math_fn = (
        isinstance(value, types.BuiltinFunctionType) and getattr(math, name or "", None) is value
    )
    if (is_numpy_fn or is_math_fn) and name in _SYMPY_FUNCTIONS:
        return _SYMPY_FUNCTIONS[name]
    if value is builtins.abs or value is builtins.max or value is builtins.min:
        return {"abs": sp.Abs, "max": sp.Max, "min": sp.Min}[value.__name__]
    return None


def _symbolic_copy(fn: Callable) -> Callable:
    """Copy ``fn`` with numpy/math globals and closure values replaced by sympy equivalents."""
    if not isinstance(fn, types.FunctionType):
        return fn
    globals_ = dict(fn.__globals__)
    for name in fn.__code__.co_names:
        if name in globals_:
            stand_in = _symbolic_stand_in(globals_[name])
            if stand_in is not None:
                globals_[name] = stand_in
    closure = None
    if fn.__closure__:
        cells = []
        for cell in fn.__closure__:
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                cells.append(cell)
                continue
            stand_in = _symbolic_stand_in(value)
            cells.append(types.CellType(stand_in if stand_in is not None else value))
        closure = tuple(cells)
    copy = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, closure)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def _check_names(names: Sequence[str], what: str) -> tuple[str, ...]:
    if isinstance(names, str):
        raise ODEDefinitionError(f"{what} must be a sequence of names, not the string {names!r}")
    names = tuple(names)
    if not names:
        raise ODEDefinitionError(f"{what} must name at least one entry")
    for n in names:
        if not isinstance(n, str) or not n:
            raise ODEDefinitionError(f"{what} must be non-empty strings; got {n!r}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ODEDefinitionError(f"{what} contain duplicates: {dupes}")
    return names


def _check_disjoint(states: tuple[str, ...], params: tuple[str, ...]) -> None:
    # labelled outputs (summaries, xarray, ArviZ coords) key states and parameters by name
    shared = sorted(set(states) & set(params))
    if shared:
        raise ODEDefinitionError(
            f"{shared} name both a state and a parameter; give them different names"
        )


# --- the model -----------------------------------------------------------------------------


class ODEModel:
    """An ODE ``du/dt = f(t, u, p)`` with symbolic derivatives and generated numeric code.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, u, p)`` returning a sequence of D expressions. ``u`` and ``p`` arrive as
        arrays of symbols (index them or unpack them), ``t`` as a symbol. Use arithmetic and
        elementary functions from ``math``, ``numpy`` or ``sympy``; Python control flow on
        states or parameters cannot be traced (use ``numpy.where`` or ``sympy.Piecewise``).
    states, params : sequence of str
        Names of the D states and J parameters, in the order ``u`` and ``p`` are indexed.
    name : str, optional
        A label for printing and results.

    Examples
    --------
    >>> def lotka_volterra(t, u, p):
    ...     x, y = u
    ...     return [p[0] * x + p[1] * x * y, p[2] * y + p[3] * x * y]
    >>> model = ODEModel(lotka_volterra, states=["prey", "predator"], params=["a", "b", "c", "d"])
    >>> model.is_linear_in_params
    True
    """

    def __init__(
        self,
        rhs: Callable,
        states: Sequence[str],
        params: Sequence[str],
        *,
        name: str | None = None,
    ):
        self.states = _check_names(states, "states")
        self.params = _check_names(params, "params")
        _check_disjoint(self.states, self.params)
        self.name = name or getattr(rhs, "__name__", "ode")
        self.rhs = rhs
        self.transform: str | None = None
        t, u, p = self._symbols()
        exprs = self._trace(rhs, t, u, p)
        self._set_expressions(exprs)

    # construction helpers
    def _symbols(self):
        t = sp.Symbol("t", real=True)
        u = [sp.Symbol(f"u{d}", real=True) for d in range(len(self.states))]
        p = [sp.Symbol(f"p{j}", real=True) for j in range(len(self.params))]
        return t, u, p

    def _trace(self, rhs: Callable, t, u, p) -> list[sp.Expr]:
        if not callable(rhs):
            raise ODEDefinitionError(f"rhs must be callable as rhs(t, u, p); got {type(rhs)!r}")
        D = len(self.states)
        traced = _symbolic_copy(rhs)
        try:
            out = traced(t, np.array(u, dtype=object), np.array(p, dtype=object))
        except ODEDefinitionError:
            raise
        except ValueError as exc:
            if "unpack" in str(exc):
                raise ODEDefinitionError(
                    f"the right-hand side unpacks u or p into a different number of names than "
                    f"given: {len(self.states)} states {list(self.states)}, {len(self.params)} "
                    f"params {list(self.params)} ({exc})"
                ) from exc
            raise ODEDefinitionError(f"could not trace the right-hand side: {exc}") from exc
        except IndexError as exc:
            raise ODEDefinitionError(
                f"the right-hand side indexes u or p beyond the {D} states / "
                f"{len(self.params)} params given ({exc})"
            ) from exc
        except TypeError as exc:
            hint = ""
            if "truth value" in str(exc) or "Relational" in str(exc):
                hint = (
                    "; branching on states or parameters cannot be traced, use numpy.where "
                    "or sympy.Piecewise instead"
                )
            raise ODEDefinitionError(f"could not trace the right-hand side: {exc}{hint}") from exc
        except Exception as exc:
            raise ODEDefinitionError(f"could not trace the right-hand side: {exc!r}") from exc
        if isinstance(out, (sp.Basic, int, float)) and D == 1:
            out = [out]
        try:
            out = list(np.asarray(out, dtype=object).ravel())
        except Exception as exc:
            raise ODEDefinitionError(f"rhs returned {type(out)!r}, not a sequence") from exc
        if len(out) != D:
            raise ODEDefinitionError(
                f"rhs returned {len(out)} components but {D} states were named {list(self.states)}"
            )
        exprs = []
        allowed = {t, *u, *p}
        for d, e in enumerate(out):
            try:
                e = sp.sympify(e)
            except (sp.SympifyError, TypeError) as exc:
                raise ODEDefinitionError(
                    f"component {d} of rhs is not an expression: {e!r}"
                ) from exc
            extra = e.free_symbols - allowed
            if extra:
                raise ODEDefinitionError(
                    f"component {d} ({self.states[d]}) uses unknown symbols "
                    f"{sorted(map(str, extra))}"
                )
            if e.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
                raise ODEDefinitionError(f"component {d} ({self.states[d]}) is not finite: {e}")
            exprs.append(e)
        used = set().union(*(e.free_symbols for e in exprs))
        unused = [name for name, sym in zip(self.params, p, strict=True) if sym not in used]
        if unused:
            raise ODEDefinitionError(f"parameters {unused} do not appear in the right-hand side")
        return exprs

    def _set_expressions(self, exprs: Sequence[sp.Expr]):
        self._t, self._u, self._p = self._symbols()
        self.expressions = tuple(exprs)

    @classmethod
    def from_expressions(
        cls,
        exprs: Sequence[sp.Expr],
        states: Sequence[str],
        params: Sequence[str],
        *,
        name: str = "ode",
    ) -> ODEModel:
        """Build a model from sympy expressions in the symbols ``t``, ``u0..``, ``p0..``."""
        obj = cls.__new__(cls)
        obj.states = _check_names(states, "states")
        obj.params = _check_names(params, "params")
        _check_disjoint(obj.states, obj.params)
        obj.name = name
        obj.rhs = None
        obj.transform = None
        obj._set_expressions([sp.sympify(e) for e in exprs])
        return obj

    def __getstate__(self) -> dict:
        # Generated functions live only in memory and the user's function may be a lambda:
        # pickle the expressions (enough to rebuild everything) so models cross process pools.
        state = self.__dict__.copy()
        state.pop("_functions", None)
        state["rhs"] = None
        return state

    # sizes and symbolic structure
    @property
    def n_states(self) -> int:
        return len(self.states)

    @property
    def n_params(self) -> int:
        return len(self.params)

    def __repr__(self) -> str:
        lines = [
            f"ODEModel {self.name!r}" + (f" ({self.transform} states)" if self.transform else "")
        ]
        subs = {s: sp.Symbol(n) for s, n in zip(self._u, self.states, strict=True)}
        subs |= {s: sp.Symbol(n) for s, n in zip(self._p, self.params, strict=True)}
        for name, e in zip(self.states, self.expressions, strict=True):
            lines.append(f"  d{name}/dt = {e.xreplace(subs)}")
        return "\n".join(lines)

    @cached_property
    def _jacobians(self) -> dict[str, sp.Array]:
        F = sp.Array(self.expressions)
        u, p = self._u, self._p
        f_u = sp.derive_by_array(F, u).transpose()  # (D, D): [d, e]
        f_uu = sp.Array(
            [[[sp.diff(f_u[d, e], v) for v in u] for e in range(len(u))] for d in range(len(u))]
        )
        f_p = sp.derive_by_array(F, p).transpose()  # (D, J)
        f_up = sp.Array(
            [[[sp.diff(f_u[d, e], pj) for pj in p] for e in range(len(u))] for d in range(len(u))]
        )
        f_pp = sp.Array(
            [[[sp.diff(f_p[d, i], pj) for pj in p] for i in range(len(p))] for d in range(len(u))]
        )
        f_upp = sp.Array(
            [
                [
                    [[sp.diff(f_up[d, e, i], pj) for pj in p] for i in range(len(p))]
                    for e in range(len(u))
                ]
                for d in range(len(u))
            ]
        )
        return {
            "f": F,
            "f_u": f_u,
            "f_uu": f_uu,
            "f_p": f_p,
            "f_up": f_up,
            "f_pp": f_pp,
            "f_upp": f_upp,
        }

    @cached_property
    def is_linear_in_params(self) -> bool:
        """True when every ``d2f/dp2`` is identically zero (``f = sum_j p_j theta_j + theta_0``)."""
        return all(sp.expand(e) == 0 for e in np.asarray(self._jacobians["f_pp"].tolist()).ravel())

    @cached_property
    def _functions(self) -> dict[tuple[str, str], Callable]:
        return {}

    def _cached(self, key: tuple[str, str], build: Callable[[ODEModel], Callable]) -> Callable:
        """``build(self)``, compiled once per model and kept with its generated functions
        (the sensitivity right-hand side of output error, the fixed-step kernel of ``deq``)."""
        fn = self._functions.get(key)
        if fn is None:
            fn = self._functions[key] = build(self)
        return fn

    def _compiled(self, which: str, style: str = "numpy") -> Callable:
        fn = self._functions.get((which, style))
        if fn is None:
            entries = _codegen.nonzero_entries(
                np.array(self._jacobians[which].tolist(), dtype=object)
            )
            fn = _codegen.generate(
                f"_{which}", entries, t=self._t, u=self._u, p=self._p, style=style
            )
            if style == "loop":
                import numba  # deferred: only the compiled likelihood needs it

                fn = numba.njit(fn)
            self._functions[(which, style)] = fn
        return fn

    def numba_function(self, which: str) -> Callable:
        """A numba-compiled ``fn(t, U, p, out)`` filling ``out`` (zeroed, shape (n, ...)).

        ``which`` is one of ``"f", "f_u", "f_uu", "f_p", "f_up", "f_pp", "f_upp"`` (see
        :meth:`evaluate`);
        ``out`` must be zero-initialised because structurally zero entries are not written.
        """
        if which not in self._jacobians:
            raise ValueError(f"unknown derivative {which!r}")
        return self._compiled(which, "loop")

    def _shape(self, which: str) -> tuple[int, ...]:
        D, J = self.n_states, self.n_params
        return {
            "f": (D,),
            "f_u": (D, D),
            "f_uu": (D, D, D),
            "f_p": (D, J),
            "f_up": (D, D, J),
            "f_pp": (D, J, J),
            "f_upp": (D, D, J, J),
        }[which]

    def evaluate(self, which: str, t, U, p) -> np.ndarray:
        """Evaluate ``which`` (``"f"``, ``"f_u"``, ...) at every row of ``U`` (module doc)."""
        t = np.asarray(t, dtype=float)
        U = np.asarray(U, dtype=float)
        p = np.asarray(p, dtype=float)
        if U.ndim != 2 or U.shape[1] != self.n_states:
            raise ValueError(f"U must have shape (n, {self.n_states}); got {U.shape}")
        if p.shape != (self.n_params,):
            raise ValueError(f"p must have shape ({self.n_params},); got {p.shape}")
        t = np.broadcast_to(t, (U.shape[0],))
        out = np.zeros((U.shape[0], *self._shape(which)))
        with np.errstate(all="ignore"):
            return self._compiled(which)(t, U, p, out)

    def f(self, t, U, p) -> np.ndarray:
        """Right-hand side at each row of ``U``: shape (n, D)."""
        return self.evaluate("f", t, U, p)

    def __call__(self, t: float, u, p) -> np.ndarray:
        """Right-hand side at a single time and state, for ODE solvers: shape (D,)."""
        return self.evaluate("f", np.atleast_1d(t), np.atleast_2d(u), p)[0]

    def jacobian(self, t: float, u, p) -> np.ndarray:
        """``df/du`` at a single time and state, for stiff solvers: shape (D, D)."""
        return self.evaluate("f_u", np.atleast_1d(t), np.atleast_2d(u), p)[0]

    # log-normal noise
    def log_transformed(self) -> ODEModel:
        """The model for ``x = log u``: ``dx_d/dt = f_d(p, exp(x), t) / exp(x_d)``.

        Multiplicative log-normal noise on ``u`` is additive Gaussian noise on ``x``
        (WENDy-MLE sec. 2.6), so the weak likelihood of ``log U`` under this model is the
        log-normal weak likelihood. The states keep their names.
        """
        if self.transform == "log":
            raise ValueError("the model is already log-transformed")
        # derived once per model: the sympy simplification and the code generation cost
        # about 0.8 s, which every log-normal WeakLikelihood (every fit) would pay again
        cached = self.__dict__.get("_log_model")
        if cached is not None:
            return cached
        subs = {ud: sp.exp(ud) for ud in self._u}
        exprs = [
            sp.simplify(sp.powsimp(sp.expand(e.xreplace(subs) * sp.exp(-ud))))
            for e, ud in zip(self.expressions, self._u, strict=True)
        ]
        obj = ODEModel.from_expressions(exprs, self.states, self.params, name=self.name)
        obj.transform = "log"
        self._log_model = obj
        return obj
