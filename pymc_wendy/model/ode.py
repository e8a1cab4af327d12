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
import copy as _copy
import math
import types
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import NamedTuple

import numpy as np
import sympy as sp

from pymc_wendy.model import codegen, total_derivative

# Generated and compiled functions by model structure (ODEModel._functions).
_SHARED_FUNCTIONS: dict[tuple, dict[tuple[str, str], Callable]] = {}

__all__ = ["ODEModel", "ODEDefinitionError"]


class ModelSymbols(NamedTuple):
    """The sympy symbols of a model's expressions (:attr:`ODEModel.symbols`)."""

    t: sp.Symbol
    u: tuple[sp.Symbol, ...]
    p: tuple[sp.Symbol, ...]


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


def _check_orders(order, D: int) -> tuple[int, ...]:
    orders = (order,) * D if np.ndim(order) == 0 else tuple(order)
    if len(orders) != D:
        raise ODEDefinitionError(f"order must be one integer or one per state ({D}); got {order!r}")
    for q in orders:
        if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or q < 1:
            raise ODEDefinitionError(f"order must hold integers >= 1; got {order!r}")
    return tuple(int(q) for q in orders)


def _check_input_names(inputs, states, params) -> tuple[str, ...]:
    if isinstance(inputs, str):
        raise ODEDefinitionError(f"inputs must be a sequence of names, not the string {inputs!r}")
    if not len(inputs):
        return ()
    inputs = _check_names(inputs, "inputs")
    shared = sorted(set(inputs) & (set(states) | set(params)))
    if shared:
        raise ODEDefinitionError(f"{shared} name both an input and a state or parameter")
    return inputs


def _derivative_name(states: Sequence[str], d: int, k: int) -> str:
    """How the k-th derivative of state d is printed: x, x', x'', x''', then x^(4)."""
    return states[d] + ("'" * k if k <= 3 else f"^({k})")


def _check_disjoint(states: tuple[str, ...], params: tuple[str, ...]) -> None:
    # labelled outputs (summaries, xarray, ArviZ coords) key states and parameters by name
    shared = sorted(set(states) & set(params))
    if shared:
        raise ODEDefinitionError(
            f"{shared} name both a state and a parameter; give them different names"
        )


def _add_total_derivative(d, k, G, u, params, linear: dict, nonlinear: dict) -> None:
    """File ``d^k/dt^k G`` of equation ``d``: under ``linear`` (``(d, e, k) -> coefficient``)
    when ``G`` is linear in the states with coefficients of the parameters alone, the cheaper
    and forward-solvable kind; otherwise under ``nonlinear`` (``(d, k) -> G``)."""
    coeffs = [sp.diff(G, ue) for ue in u]
    if (
        all(c.free_symbols <= params for c in coeffs)
        and sp.expand(G - sum(c * ue for c, ue in zip(coeffs, u, strict=True))) == 0
    ):
        for e, c in enumerate(coeffs):
            if c != 0:
                linear[(d, e, k)] = linear.get((d, e, k), sp.Integer(0)) + c
        return
    nonlinear[(d, k)] = G


def _first_order_system(model: ODEModel) -> ODEModel:
    """:meth:`ODEModel.first_order_system` (built once per model structure)."""
    companion = model._companion_symbols()
    states = [sp.Symbol(f"u{i}", real=True) for i in range(len(companion))]
    rename = dict(zip(companion, states, strict=True))
    exprs, i = [], 0
    for d, q in enumerate(model.orders):
        exprs += states[i + 1 : i + q]
        exprs.append(model.explicit_expressions[d].xreplace(rename))
        i += q
    states_named = [n.replace("'", "_d") for n in model.companion_states]
    return ODEModel.from_expressions(exprs, states_named, model.params, name=model.name)


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
        With ``inputs`` the signature is ``rhs(t, u, p, w)``, ``w`` the known inputs.
    states, params : sequence of str
        Names of the D states and J parameters, in the order ``u`` and ``p`` are indexed.
    name : str, optional
        A label for printing and results.
    order : int or sequence of int, default 1
        Order of the equation of each state (one value for all). For a state of order
        ``q > 1``, ``u`` holds the state and its derivatives up to ``q - 1`` in a row
        (the companion layout: ``x, x', y, y', y''`` for orders ``(2, 3)``) and ``rhs``
        returns its ``q``-th derivative. Derivatives may enter the right-hand side only
        linearly with coefficients that depend on the parameters alone (``-c * x'``, not
        ``x * x'``): integration by parts then moves them onto the test functions and the
        weak form needs no derivative data (``docs/higher_order.md``).
    inputs : sequence of str, optional
        Names of known forcing inputs ``w(t)`` (their values are data, given to the
        likelihood). Inputs may enter only linearly with parameter-only coefficients
        (``b * w[0]``), so that they enter the weak form through the exact integrals
        ``int phi(t) w(t) dt``, which stay exact for discontinuous pulses.

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
        order: int | Sequence[int] = 1,
        inputs: Sequence[str] = (),
    ):
        self.states = _check_names(states, "states")
        self.params = _check_names(params, "params")
        _check_disjoint(self.states, self.params)
        self.orders = _check_orders(order, len(self.states))
        self.inputs = _check_input_names(inputs, self.states, self.params)
        self.name = name or getattr(rhs, "__name__", "ode")
        self.rhs = rhs
        self.transform: str | None = None
        # an input-output equation (pw.input_output): the model it came from and the index of
        # the observed state in it, for forward solves (its derivative inputs have no values)
        self.latent: tuple[ODEModel, int] | None = None
        t, u, p = self._symbols()
        exprs = self._trace(rhs, t, self._companion_symbols(), p, self._input_symbols())
        self._set_expressions(exprs)

    # construction helpers
    def _symbols(self):
        t = sp.Symbol("t", real=True)
        u = [sp.Symbol(f"u{d}", real=True) for d in range(len(self.states))]
        p = [sp.Symbol(f"p{j}", real=True) for j in range(len(self.params))]
        return t, u, p

    def _companion_symbols(self) -> list[sp.Symbol]:
        """State symbols in the companion layout: ``u_d`` then its derivatives ``u_d_k``."""
        out = []
        for d, q in enumerate(self.orders):
            out.append(sp.Symbol(f"u{d}", real=True))
            out += [sp.Symbol(f"u{d}_{k}", real=True) for k in range(1, q)]
        return out

    def _input_symbols(self) -> list[sp.Symbol]:
        return [sp.Symbol(f"w{i}", real=True) for i in range(len(self.inputs))]

    def _trace(self, rhs: Callable, t, u, p, w=()) -> list[sp.Expr]:
        if not callable(rhs):
            signature = "rhs(t, u, p, w)" if w else "rhs(t, u, p)"
            raise ODEDefinitionError(f"rhs must be callable as {signature}; got {type(rhs)!r}")
        out = self._call_symbolically(rhs, t, u, p, w)
        exprs = self._components(out, allowed={t, *u, *p, *w})
        used = set().union(*(e.free_symbols for e in exprs))
        unused = [name for name, sym in zip(self.params, p, strict=True) if sym not in used]
        if unused:
            raise ODEDefinitionError(f"parameters {unused} do not appear in the right-hand side")
        return exprs

    def _call_symbolically(self, rhs: Callable, t, u, p, w):
        """``rhs`` called on the symbols (numpy functions swapped for sympy's), its failures
        explained in terms of the model's names."""
        D = len(self.states)
        traced = _symbolic_copy(rhs)
        args = [t, np.array(u, dtype=object), np.array(p, dtype=object)]
        if w:
            args.append(np.array(w, dtype=object))
        try:
            return traced(*args)
        except ODEDefinitionError:
            raise
        except ValueError as exc:
            if "unpack" in str(exc):
                raise ODEDefinitionError(
                    f"the right-hand side unpacks u or p into a different number of names than "
                    f"given: {len(u)} states {list(self.companion_states)}, {len(self.params)} "
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

    def _components(self, out, allowed: set) -> list[sp.Expr]:
        """The value returned by the traced right-hand side as one finite sympy expression per
        state, each in the ``allowed`` symbols only."""
        D = len(self.states)
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
        return exprs

    def _set_expressions(self, exprs: Sequence[sp.Expr]):
        """Split the traced right-hand sides into the weak form's three kinds of term.

        ``expressions`` keeps the pointwise part ``f(t, u, p)`` in the observed states (what
        the generated derivatives evaluate at the data); derivative terms and inputs, which
        enter linearly with parameter-only coefficients, go to ``derivative_terms``
        (``(d, e, k) -> coefficient of the k-th derivative of state e in equation d``) and
        ``input_terms`` (``(d, i) -> coefficient of input i``).
        """
        self._t, self._u, self._p = self._symbols()
        self.full_expressions = tuple(exprs)
        inputs = self._input_symbols()
        derivs = {}
        for d, q in enumerate(self.orders):
            for k in range(1, q):
                derivs[sp.Symbol(f"u{d}_{k}", real=True)] = (d, k)
        linear_syms = [*derivs, *inputs]
        params = set(self._p)
        pointwise, deriv_terms, input_terms, totals = [], {}, {}, {}
        for d, e in enumerate(exprs):
            try:
                e, total = total_derivative.split(
                    e, self.orders[d], self._u, params, self.named,
                    f"equation {d} ({self.states[d]})",
                )  # fmt: skip
            except ValueError as exc:
                raise ODEDefinitionError(str(exc)) from None
            for k, G in total.items():
                _add_total_derivative(d, k, G, self._u, params, deriv_terms, totals)
            for sym in linear_syms:
                coeff = sp.diff(e, sym)
                if coeff == 0:
                    continue
                if not coeff.free_symbols <= params:
                    what = (
                        f"input {self.inputs[inputs.index(sym)]!r}"
                        if sym in inputs
                        else _derivative_name(self.states, *derivs[sym])
                    )
                    raise ODEDefinitionError(
                        f"equation {d} ({self.states[d]}): {what} must enter linearly with a "
                        f"coefficient of the parameters alone; its coefficient is "
                        f"{self.named(coeff)}"
                    )
                if sym in inputs:
                    input_terms[(d, inputs.index(sym))] = coeff
                else:
                    state, k = derivs[sym]
                    # added to a total derivative of a linear expression of the same order
                    deriv_terms[(d, state, k)] = deriv_terms.get((d, state, k), 0) + coeff
            rest = e.xreplace({sym: 0 for sym in linear_syms}) if linear_syms else e
            pointwise.append(rest)
        self.expressions = tuple(pointwise)
        self.derivative_terms = deriv_terms
        self.input_terms = input_terms
        #: ``(d, k) -> G``: equation ``d`` holds ``d^k/dt^k G(u, p)`` (:mod:`.total_derivative`);
        #: total derivatives of expressions linear in the states are in ``derivative_terms``
        self.total_derivative_terms = totals

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
        obj.orders = (1,) * len(obj.states)
        obj.inputs = ()
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

    @property
    def has_operator_terms(self) -> bool:
        """True for models of order > 1, with inputs or with total derivative terms: their
        weak residual carries parameter-dependent derivative operators and input integrals
        (:mod:`pymc_wendy.weak.operator`), not only the pointwise ``Phi f + dPhi U``."""
        return (
            any(q > 1 for q in self.orders)
            or bool(self.inputs)
            or bool(self.derivative_terms)
            or bool(self.total_derivative_terms)
        )

    @property
    def companion_states(self) -> tuple[str, ...]:
        """Names of the first-order companion system's states (``x, x', y, ...``): the
        layout of ``u`` in ``rhs`` and of initial conditions for forward simulation."""
        return tuple(
            _derivative_name(self.states, d, k) for d, q in enumerate(self.orders) for k in range(q)
        )

    @property
    def observed_columns(self) -> np.ndarray:
        """Positions of the states themselves (not their derivatives) in the companion layout
        :attr:`companion_states`: the columns of a companion solution that data observe
        (only those of :meth:`observing`'s states on such a view)."""
        columns = np.cumsum(self.orders) - np.asarray(self.orders)
        chosen = self.__dict__.get("_observed")
        return columns if chosen is None else columns[chosen]

    @property
    def observed_states(self) -> tuple[str, ...]:
        """The states data measure: all of them, or :meth:`observing`'s on such a view."""
        chosen = self.__dict__.get("_observed")
        return self.states if chosen is None else tuple(self.states[i] for i in chosen)

    def observing(self, states: Sequence[str]) -> ODEModel:
        """The same equations with data on ``states`` alone: a view whose
        :attr:`observed_columns` are theirs, so that every forward solve (predictions, the
        forward check, the exact stage) compares those columns with the data. It is what a
        known initial state of a model with hidden states is solved with
        (:func:`~pymc_wendy.model.input_output.eliminate_hidden`)."""
        unknown = [s for s in states if s not in self.states]
        if unknown or not states:
            raise ValueError(f"{self.name} observed in {list(states)}: states are {self.states}")
        view = _copy.copy(self)  # shares the generated functions: the equations are the same
        view._observed = np.array([self.states.index(s) for s in states])
        return view

    @property
    def symbols(self) -> ModelSymbols:
        """The sympy symbols the traced expressions use: time ``t``, the observed states ``u``
        and the parameters ``p`` (for code that builds its own expressions or functions from
        the model, e.g. the operator coefficients or a plain pytensor graph)."""
        return ModelSymbols(self._t, tuple(self._u), tuple(self._p))

    def derivative_expressions(self, which: str) -> sp.Array:
        """The symbolic array behind :meth:`evaluate`'s ``which`` (``"f"``, ``"f_u"``, ...)."""
        if which not in self._jacobians:
            raise ValueError(f"unknown derivative {which!r}; one of {sorted(self._jacobians)}")
        return self._jacobians[which]

    def named(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` with internal symbols replaced by the user's names (for messages)."""
        pairs = [
            *zip(self._companion_symbols(), self.companion_states, strict=True),
            *zip(self._p, self.params, strict=True),
            *zip(self._input_symbols(), self.inputs, strict=True),
        ]
        return expr.xreplace({s: sp.Symbol(n) for s, n in pairs})

    def __repr__(self) -> str:
        lines = [
            f"ODEModel {self.name!r}" + (f" ({self.transform} states)" if self.transform else "")
        ]
        for d, e in enumerate(self.full_expressions):
            q = self.orders[d]
            lhs = f"d{self.states[d]}/dt" if q == 1 else _derivative_name(self.states, d, q)
            lines.append(f"  {lhs} = {self.named(e)}")
        return "\n".join(lines)

    @property
    def _key(self) -> tuple:
        """What identifies the equations: two models with equal keys are the same ODE."""
        return (
            self.states,
            self.params,
            self.orders,
            self.inputs,
            tuple(map(str, self.full_expressions)),
        )

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
        """True when every ``d2f/dp2`` is identically zero (``f = sum_j p_j theta_j + theta_0``)
        and the coefficients of derivative terms and inputs are affine in the parameters."""
        pointwise = all(
            sp.expand(e) == 0 for e in np.asarray(self._jacobians["f_pp"].tolist()).ravel()
        )
        coeffs = [*self.derivative_terms.values(), *self.input_terms.values()]
        return pointwise and all(
            sp.expand(sp.diff(c, a, b)) == 0
            for c in [*coeffs, *self.total_derivative_terms.values()]
            for a in self._p
            for b in self._p
        )

    @cached_property
    def is_linear_in_states(self) -> bool:
        """True when every ``d2f/du2`` of the pointwise part is identically zero (with
        derivative terms and inputs, which are linear by construction: a linear ODE)."""
        pointwise = np.asarray(self._jacobians["f_uu"].tolist()).ravel()
        return not self.total_derivative_terms and all(sp.expand(e) == 0 for e in pointwise)

    @cached_property
    def explicit_expressions(self) -> tuple[sp.Expr, ...]:
        """:attr:`full_expressions` with every total derivative expanded by the chain rule in
        the companion states (:func:`~.total_derivative.explicit`): what a forward solve
        integrates; implicit equations are solved for their highest derivatives. A ValueError
        when they cannot be."""
        companion = self._companion_symbols()
        chain, i = {}, 0
        for q in self.orders:
            for k in range(q):
                chain[companion[i + k]] = companion[i + k + 1] if k < q - 1 else None
            i += q
        try:
            return total_derivative.explicit(self.full_expressions, chain, self._t)
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}; it cannot be solved forward") from None

    @cached_property
    def _functions(self) -> dict[tuple[str, str], Callable]:
        # Shared by every model of the same structure in this process: a model unpickled in
        # a worker (one per task of a coverage study) reuses the compiled functions instead
        # of compiling them again (seconds per task for the numba sensitivity solve).
        return _SHARED_FUNCTIONS.setdefault(self._structure, {})

    @property
    def _structure(self) -> tuple:
        """What the generated functions are built from (names, orders, inputs and the
        expressions); equal for equal models, whatever their Python identity."""
        return (
            tuple(self.states),
            tuple(self.params),
            tuple(self.orders),
            tuple(self.inputs),
            self.transform,
            sp.srepr(self.full_expressions),
        )

    def cached(self, key: tuple[str, str], build: Callable[[ODEModel], Callable]) -> Callable:
        """``build(self)``, built once per model and kept with its generated functions (the
        sensitivity right-hand side of output error, the fixed-step kernel of ``deq``, the
        operator coefficients): ``key`` names it, and must be unique to its builder."""
        fn = self._functions.get(key)
        if fn is None:
            fn = self._functions[key] = build(self)
        return fn

    def _compiled(self, which: str, style: str = "numpy") -> Callable:
        fn = self._functions.get((which, style))
        if fn is None:
            entries = codegen.nonzero_entries(
                np.array(self._jacobians[which].tolist(), dtype=object)
            )
            fn = codegen.generate(
                f"_{which}", entries, t=self._t, u=self._u, p=self._p, style=style,
                shape=self._shape(which),
            )  # fmt: skip
            if style == "loop":
                import numba  # deferred: only the compiled likelihood needs it

                fn = numba.njit(fn, error_model="numpy")  # inf at 1/0 (_codecache.jitted)
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

    def point_function(self, which: str) -> Callable:
        """``fn(t, y, p, out, base)`` at one time point, writing ``which``'s entries to the
        flat ``out[base:]`` (row-major; structurally zero entries are not written): plain
        Python for ``numba.njit``, its source in ``fn.__source__``
        (:func:`~pymc_wendy.model.codegen.generate`'s ``style="point"``)."""
        if which not in self._jacobians:
            raise ValueError(f"unknown derivative {which!r}")
        return self._compiled(which, "point")

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

    def __call__(self, t: float, u, p, w=None) -> np.ndarray:
        """Right-hand side at a single time and state, for ODE solvers: shape (D,).

        For a model with derivative terms or inputs, the right-hand side of the first-order
        companion system: ``u`` in the layout of :attr:`companion_states`, ``w`` the input
        values at ``t``; shape ``(len(companion_states),)``.
        """
        if not self.has_operator_terms:
            return self.evaluate("f", np.atleast_1d(t), np.atleast_2d(u), p)[0]
        y = self._companion_point(u, w)
        # as in evaluate: a blow-up far from the data is the solver's to report, as a
        # failed solve, not a floating-point warning per step
        with np.errstate(all="ignore"):
            full = self._companion_function("rhs")(
                np.atleast_1d(float(t)), y, np.asarray(p, float), np.zeros((1, self.n_states))
            )[0]
        out = np.empty(y.shape[1] - len(self.inputs))
        out[:-1] = y[0, 1 : out.size]
        out[self._top] = full
        return out

    def jacobian(self, t: float, u, p, w=None) -> np.ndarray:
        """``df/du`` at a single time and state, for stiff solvers: shape (D, D) (the
        companion system's Jacobian for a model with derivative terms or inputs)."""
        if not self.has_operator_terms:
            return self.evaluate("f_u", np.atleast_1d(t), np.atleast_2d(u), p)[0]
        y = self._companion_point(u, w)
        n = y.shape[1] - len(self.inputs)
        out = np.zeros((n, n))
        out[np.arange(n - 1), np.arange(1, n)] = 1.0
        with np.errstate(all="ignore"):
            rows = self._companion_function("jac")(
                np.atleast_1d(float(t)), y, np.asarray(p, float), np.zeros((1, self.n_states, n))
            )[0]
        out[self._top] = rows
        return out

    def parameter_jacobian(self, t: float, u, p, w=None) -> np.ndarray:
        """``df/dp`` at a single time and state, for forward sensitivities: shape (D, J)
        (the companion system's, ``(len(companion_states), J)``, for a model with derivative
        terms or inputs: zero except the rows of the highest derivatives)."""
        if not self.has_operator_terms:
            return self.evaluate("f_p", np.atleast_1d(t), np.atleast_2d(u), p)[0]
        y = self._companion_point(u, w)
        n = y.shape[1] - len(self.inputs)
        out = np.zeros((n, self.n_params))
        out[self._top] = self._companion_function("jac_p")(
            np.atleast_1d(float(t)),
            y,
            np.asarray(p, float),
            np.zeros((1, self.n_states, self.n_params)),
        )[0]
        return out

    @property
    def _top(self) -> np.ndarray:
        """Rows of the companion system that hold each state's highest derivative."""
        return np.cumsum(self.orders) - 1

    def _companion_point(self, u, w) -> np.ndarray:
        u = np.asarray(u, dtype=float).ravel()
        n = sum(self.orders)
        if u.size != n:
            raise ValueError(
                f"u must hold the {n} companion states {list(self.companion_states)}; "
                f"got {u.size} values"
            )
        w = np.zeros(0) if w is None else np.asarray(w, dtype=float).ravel()
        if w.size != len(self.inputs):
            raise ValueError(f"w must hold the {len(self.inputs)} inputs {list(self.inputs)}")
        return np.concatenate([u, w])[None, :]

    def _companion_function(self, which: str) -> Callable:
        """Generated ``rhs`` (the highest derivatives), ``jac`` (their gradients in the
        companion states) or ``jac_p`` (in the parameters) of the full equations, in the
        companion states and the inputs."""

        def build(model: ODEModel) -> Callable:
            y = model._companion_symbols()
            exprs = sp.Array(model.explicit_expressions)
            if which == "rhs":
                arr = exprs
            else:
                arr = sp.derive_by_array(exprs, y if which == "jac" else model._p).transpose()
            entries = codegen.nonzero_entries(np.array(arr.tolist(), dtype=object))
            return codegen.generate(
                f"_companion_{which}",
                entries,
                t=model._t,
                u=[*y, *model._input_symbols()],
                p=model._p,
            )

        return self.cached(("companion", which), build)

    def first_order_system(self) -> ODEModel:
        """The companion system of a model of higher order (or with total derivative terms) as
        a first-order model in :attr:`companion_states`, for solvers that take first-order
        models only (the compiled solver, :mod:`~pymc_wendy.model.compiled_solve`); the model
        itself when it is first order. Models with inputs have none (ValueError)."""
        if not self.has_operator_terms:
            return self
        if self.inputs:
            raise ValueError(f"{self.name}: a model with inputs has no first-order system here")
        return self.cached(("companion", "first_order"), _first_order_system)

    # log-normal noise
    def log_transformed(self) -> ODEModel:
        """The model for ``x = log u``: ``dx_d/dt = f_d(p, exp(x), t) / exp(x_d)``.

        Multiplicative log-normal noise on ``u`` is additive Gaussian noise on ``x``
        (WENDy-MLE sec. 2.6), so the weak likelihood of ``log U`` under this model is the
        log-normal weak likelihood. The states keep their names.
        """
        if self.transform == "log":
            raise ValueError("the model is already log-transformed")
        if self.has_operator_terms:
            raise ValueError(
                f"{self.name}: log-normal noise is not supported for models of order > 1 or "
                "with inputs (the log transform would make their derivative terms nonlinear)"
            )
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
