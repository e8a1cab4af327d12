r"""Unobserved states: the input-output equation of a linear model in one observed state.

A model linear in its states with known inputs, ``x' = A(p) x + B(p) w(t)``, observed in one
state ``y = x_j`` only, satisfies one equation of order ``D`` in ``y`` alone (Cayley-Hamilton,
or the transfer function ``y = e_j' (sI - A)^{-1} B w``)::

    y^(D) + c_{D-1}(p) y^(D-1) + ... + c_0(p) y = sum_i sum_k n_ik(p) w_i^(k)

with ``det(sI - A) = s^D + sum c_k s^k`` and ``n_i(s) = e_j' adj(sI - A) B_i``. It is a
higher-order model with derivative terms and inputs whose coefficients depend on the
parameters alone, which the weak form fits without derivative data
(:mod:`pymc_wendy.weak.operator`); an input's derivative ``w^(k)`` enters through
``int phi w^(k) dt = (-1)^k int phi^(k) w dt``, exact for doses (:class:`DerivativeInput`).
This is the linear case of the input-output equations of Heitzman-Breen, Dukic and Bortz
(2025); ``docs/doses.md`` says why this method and which models it covers.

Refused, with a message: models nonlinear in the states (SIR observed in ``I``), states that
the observed one does not see (the observability matrix is rank deficient), constant terms,
and several observed states among unobserved ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from scipy import optimize

from pymc_wendy.model.data import LatentInitialState, hidden_states, observed_part
from pymc_wendy.model.elimination import eliminate
from pymc_wendy.model.inputs import Input, as_inputs
from pymc_wendy.model.ode import ODEModel

__all__ = [
    "DerivativeInput",
    "InputOutput",
    "eliminate_hidden",
    "forward_system",
    "input_output",
]


class DerivativeInput(Input):
    """The ``order``-th derivative of a known input, for the weak form only.

    ``int phi w^(k) dt = (-1)^k int phi^(k) w dt`` (the test functions vanish with all their
    derivatives at the ends of their supports), so its integrals are the base input's
    against derivatives of the test functions. It has no pointwise values (the derivative of
    a bolus is not a function): a forward solve refuses it, and is done with the latent
    model instead.
    """

    def __init__(self, base: Input, order: int):
        if order < 1:
            raise ValueError(f"order must be >= 1; got {order}")
        self.base = base
        self.order = int(order)
        self.name = f"{base.name or 'input'}_d{order}"
        self.kind = base.kind
        self.t, self.values, self._fn = base.t, base.values, base._fn
        self.domain, self.breakpoints = base.domain, base.breakpoints

    @property
    def jump_times(self) -> np.ndarray:
        return getattr(self.base, "jump_times", np.zeros(0))

    def __call__(self, times) -> np.ndarray:
        raise ValueError(
            f"{self.name} is derivative {self.order} of the input {self.base.name!r}; it acts "
            "only through integrals against test functions, so an input-output equation "
            "cannot be solved forward: solve the latent model (InputOutput.latent) instead"
        )

    def integrate(self, test_functions, derivative: int = 0) -> np.ndarray:
        if test_functions.n_boundary and not self._zero_before(float(test_functions.t[0])):
            # a half bump jumps at t0, so moving the derivative onto it leaves terms in the
            # input's derivatives at t0-, which vanish only if the input starts at t0 or later
            raise ValueError(
                f"{self.name}: with a known initial state, the input {self.base.name!r} must be "
                "doses given at or after t0 (zero before t0)"
            )
        return (-1) ** self.order * self.base.integrate(test_functions, derivative + self.order)

    def _zero_before(self, t0: float) -> bool:
        starts = getattr(self.base, "infusions", (np.zeros(0),))[0]
        times = np.concatenate([getattr(self.base, "bolus_times", np.zeros(0)), starts])
        return hasattr(self.base, "bolus_times") and bool(np.all(times >= t0))

    def __repr__(self) -> str:
        return f"DerivativeInput({self.base!r}, order={self.order})"


def forward_system(model: ODEModel, inputs, u0) -> tuple[ODEModel, dict, np.ndarray]:
    """What a forward solve of ``model`` from the companion state ``u0`` solves: ``(model,
    inputs, columns)``, ``columns`` the observed states' positions in its solution.

    An input-output equation (:func:`input_output`) at rest (``u0`` all zero) is its latent
    model at rest, observed in one state: that solve needs no values of the derivative
    inputs. Away from rest an equation with derivative inputs has no forward solve (a
    ValueError says so); any other model is itself.
    """
    inputs = dict(inputs or {})
    if model.latent is not None and u0 is not None and not np.any(u0):
        latent, j = model.latent
        return latent, {k: v for k, v in inputs.items() if k in latent.inputs}, np.array([j])
    if any(isinstance(w, DerivativeInput) for w in inputs.values()):
        raise ValueError(
            f"{model.name} is an input-output equation with derivatives of its inputs; it is "
            "solved forward through its latent model, from rest only (a known initial_state "
            "of zeros)"
        )
    return model, inputs, model.observed_columns


@dataclass(frozen=True)
class InputOutput:
    """The input-output equation of a model observed in one state (:func:`input_output`).

    Attributes
    ----------
    model : ODEModel
        Order ``D`` in the observed state, with the latent model's parameters; inputs are the
        latent model's and their derivatives (named ``name_d1``, ...) where they enter.
    latent : ODEModel
        The model it was derived from (for forward solves and predictions).
    observed : str or tuple of str
        The observed state (the observed states, when several: a nonlinear model's).
    characteristic : sympy.Expr or None
        ``det(sI - A(p))`` in ``s`` and the parameters' names; None for a nonlinear model
        (:mod:`~pymc_wendy.model.elimination`).
    numerators : dict
        Input name to ``e_j' adj(sI - A) B_i`` (a polynomial in ``s``).
    derivative_inputs : dict
        IO input name to ``(latent input name, derivative order)``.
    coefficients : tuple of sympy.Expr
        Every coefficient of the equation (``c_0 .. c_{D-1}``, then the inputs'), in the
        internal parameter symbols ``p0, p1, ...``: what the data can determine.
    hidden : dict
        A nonlinear model's eliminated state to its expression in the observed states and
        their derivatives (``V'`` is the derivative of ``V``).
    dropped : tuple of str
        Hidden states no observed state depends on, dropped with their equations.
    """

    model: ODEModel
    latent: ODEModel
    observed: str | tuple[str, ...]
    characteristic: sp.Expr | None
    numerators: dict
    derivative_inputs: dict
    coefficients: tuple = ()
    hidden: dict = field(default_factory=dict)
    dropped: tuple[str, ...] = ()

    def equivalent(self, p, *, n_starts: int = 64, seed: int = 0) -> np.ndarray:
        """Parameter vectors with the same equation as ``p``: the same observed curve for any
        doses, so data of the observed state cannot tell them apart (flip-flop twins).

        Found by least squares on the equation's coefficients from ``n_starts`` starts within
        a factor 100 of ``p`` (each parameter keeping its sign). Returns the distinct
        solutions, shape (n, J), ``p`` first; one row means none was found.
        """
        p = np.asarray(p, dtype=float)
        symbols = sp.symbols(f"p0:{p.size}", real=True)
        fn = sp.lambdify(symbols, list(self.coefficients), "numpy")
        target = np.asarray(fn(*p), dtype=float)
        scale = np.maximum(np.abs(target), 1e-300)
        sign = np.where(p < 0, -1.0, 1.0)

        def residual(z):
            return (np.asarray(fn(*(sign * np.exp(z))), dtype=float) - target) / scale

        rng = np.random.default_rng(seed)
        found = [p]
        for _ in range(n_starts):
            z0 = np.log(np.abs(p) + 1e-300) + rng.uniform(-np.log(100), np.log(100), p.size)
            sol = optimize.least_squares(residual, z0, xtol=1e-14, ftol=1e-14, gtol=1e-14)
            q = sign * np.exp(sol.x)
            if np.max(np.abs(residual(sol.x))) < 1e-8 and all(
                np.max(np.abs(q / f - 1)) > 1e-4 for f in found
            ):
                found.append(q)
        return np.array(found)

    def inputs(self, inputs, t=None) -> dict[str, Input]:
        """The IO model's inputs from the latent model's (a mapping of names to values, as
        :func:`~pymc_wendy.fit` takes them; ``t``: the data times, for values on a grid)."""
        base = as_inputs(self.latent.inputs, inputs, np.zeros(2) if t is None else t)
        out = {}
        for name, (src, k) in self.derivative_inputs.items():
            out[name] = base[src] if k == 0 else DerivativeInput(base[src], k)
        return out


def input_output(model: ODEModel, observed: str | Sequence[str]) -> InputOutput:
    """The input-output equation of ``model`` in the state ``observed``.

    Parameters
    ----------
    model : ODEModel
        First order, linear in the states with coefficients of the parameters alone
        (``x' = A(p) x + B(p) w``), no constant terms.
    observed : str or sequence of one str
        The observed state.

    Returns
    -------
    InputOutput

    Raises
    ------
    ValueError
        For any model outside that class or an observed state that does not see every
        other state, naming the reason.

    Examples
    --------
    One-compartment oral absorption, the gut unobserved:

    >>> oral = ODEModel(
    ...     lambda t, u, p, w: [-p[0] * u[0] + w[0], p[0] * u[0] / p[2] - p[1] * u[1]],
    ...     states=["gut", "C"], params=["ka", "ke", "V"], inputs=["dose"])
    >>> io = input_output(oral, "C")
    >>> io.model.orders
    (2,)
    """
    if not isinstance(model, ODEModel):
        raise TypeError(f"model must be an ODEModel; got {type(model).__name__}")
    if _nonlinear(model, observed):
        found = eliminate(model, observed)
        return InputOutput(
            model=found.model,
            latent=model,
            observed=found.observed[0] if len(found.observed) == 1 else found.observed,
            characteristic=None,
            numerators={},
            derivative_inputs={},
            hidden=found.hidden,
            dropped=found.dropped,
        )
    name = _observed_state(model, observed)
    j = model.states.index(name)
    A, B = _linear_system(model)
    _check_observable(model, A, j)
    s = sp.Symbol("s")
    M = s * sp.eye(model.n_states) - A
    char = sp.Poly(sp.expand(M.det()), s)
    adj_row = (M.adjugate()[j, :] * B) if model.inputs else sp.zeros(1, 0)
    numerators, derivative_inputs, terms = {}, {}, []  # terms: (IO input index, coefficient)
    for i, src in enumerate(model.inputs):
        poly = sp.Poly(sp.expand(adj_row[0, i]), s)
        numerators[src] = model.named(poly.as_expr())
        for k, c in enumerate(poly.all_coeffs()[::-1]):
            if c != 0:
                derivative_inputs[src if k == 0 else f"{src}_d{k}"] = (src, k)
                terms.append((len(derivative_inputs) - 1, sp.simplify(c)))
    coeffs = [sp.simplify(c) for c in char.all_coeffs()[::-1][:-1]]  # c_0 .. c_{D-1}
    _check_parameters_remain(model, name, [*coeffs, *(c for _, c in terms)])
    equation = _equation(model, name, coeffs, terms, list(derivative_inputs))
    equation.latent = (model, j)
    return InputOutput(
        model=equation,
        latent=model,
        observed=name,
        characteristic=model.named(char.as_expr()),
        numerators=numerators,
        derivative_inputs=derivative_inputs,
        coefficients=tuple(coeffs) + tuple(c for _, c in terms),
    )


def _nonlinear(model: ODEModel, observed) -> bool:
    """Whether ``model`` goes to :func:`~.elimination.eliminate`: a first-order model without
    inputs that is not ``x' = A(p) x`` (nonlinear, or with constant terms), or several
    observed states."""
    if model.inputs or model.has_operator_terms or model.transform is not None:
        return False
    several = not isinstance(observed, str) and len(observed) > 1
    u, params = sp.Matrix(model.symbols.u), set(model.symbols.p)
    exprs = sp.Matrix(model.full_expressions)
    A = exprs.jacobian(u)
    linear = all(sp.sympify(a).free_symbols <= params for a in A)
    return several or not linear or any(sp.simplify(e) != 0 for e in exprs - A * u)


def _check_parameters_remain(model: ODEModel, name: str, coefficients) -> None:
    """A parameter absent from every coefficient of the equation is one the observed state
    cannot determine: say so, naming it (otherwise the equation's model would be refused for
    a parameter "not in its right-hand side", which the user's model does use)."""
    used = set().union(*(c.free_symbols for c in coefficients))
    lost = [n for n, p in zip(model.params, model.symbols.p, strict=True) if p not in used]
    if lost:
        raise ValueError(
            f"the input-output equation of {model.name} in {name!r} does not depend on the "
            f"parameters {lost}: the data of {name!r} cannot determine them (fix them at known "
            "values, or observe a state they act on)"
        )


def _observed_state(model: ODEModel, observed) -> str:
    if isinstance(observed, str):
        names = [observed]
    elif isinstance(observed, (list, tuple)) and all(isinstance(n, str) for n in observed):
        names = list(observed)
    else:
        raise TypeError(
            f"observed must be the name of a state of {model.name} ({list(model.states)}) or a "
            f"list of one name; got {observed!r}"
        )
    unknown = [n for n in names if n not in model.states]
    if unknown:
        raise ValueError(f"observed states {unknown} are not states of {model.name}")
    if len(names) != 1:
        raise ValueError(
            f"{model.name}: input-output equations are derived for one observed state; got "
            f"{names} (all states observed needs no derivation)"
        )
    if any(q > 1 for q in model.orders):
        raise ValueError(f"{model.name}: input-output equations need a first-order model")
    if model.transform is not None:
        raise ValueError(f"{model.name}: derive the equation from the untransformed model")
    return names[0]


def _linear_system(model: ODEModel) -> tuple[sp.Matrix, sp.Matrix]:
    """``(A(p), B(p))`` of ``x' = A x + B w``, or an error naming what is not of that form."""
    D = model.n_states
    u = sp.Matrix(sp.symbols(f"u0:{D}", real=True))
    w = sp.Matrix(sp.symbols(f"w0:{len(model.inputs)}", real=True))
    exprs = sp.Matrix(model.full_expressions)
    A = exprs.jacobian(u)
    B = exprs.jacobian(w) if model.inputs else sp.zeros(D, 0)
    params = set(sp.symbols(f"p0:{model.n_params}", real=True))
    for (row, col), a in np.ndenumerate(np.array(A.tolist(), dtype=object)):
        if not sp.sympify(a).free_symbols <= params:
            raise ValueError(
                f"{model.name} is not linear in its states with coefficients of the parameters "
                f"alone (equation {model.states[row]}: d/d{model.states[col]} = "
                f"{model.named(a)}); input-output equations are derived for linear models "
                "only (a nonlinear model such as SIR observed in I needs its equation written "
                "by hand, docs/doses.md)"
            )
    rest = exprs - A * u - (B * w if model.inputs else sp.zeros(D, 1))
    rest = sp.simplify(rest)
    if any(e != 0 for e in rest):
        raise ValueError(
            f"{model.name} has terms without a state or input ({[model.named(e) for e in rest]}"
            "); give them as an input of value 1 to derive its input-output equation"
        )
    return A, B


def _equation(model: ODEModel, name: str, coeffs, terms, inputs) -> ODEModel:
    """``y^(D) = -sum_k c_k(p) y^(k) + sum n(p) v`` as a model of order D in ``name``."""
    P = sp.symbols(f"p0:{model.n_params}", real=True)

    def rhs(t, y, p, v=()):
        sub = dict(zip(P, p, strict=True))
        out = -sum(c.xreplace(sub) * y[k] for k, c in enumerate(coeffs))
        return [out + sum(c.xreplace(sub) * v[i] for i, c in terms)]

    return ODEModel(
        rhs,
        states=[name],
        params=model.params,
        order=model.n_states,
        inputs=inputs,
        name=f"{model.name}[{name}]",
    )


def _check_observable(model: ODEModel, A: sp.Matrix, j: int) -> None:
    """Refuse when the observed state does not see every state: the observability matrix
    ``[e_j; e_j A; ...; e_j A^(D-1)]`` is rank deficient at generic parameter values."""
    D = model.n_states
    rng = np.random.default_rng(0)
    P = sp.symbols(f"p0:{model.n_params}", real=True)
    fn = sp.lambdify(P, A, "numpy")
    # two generic points: a rank drop at both is structural, not a coincidence of values
    ranks = []
    for _ in range(2):
        a = np.asarray(fn(*rng.uniform(0.5, 2.0, model.n_params)), dtype=float)
        rows = [np.eye(D)[j]]
        for _ in range(D - 1):
            rows.append(rows[-1] @ a)
        O = np.array(rows)
        ranks.append(np.linalg.matrix_rank(O / np.linalg.norm(O, axis=1, keepdims=True)))
    if max(ranks) < D:
        raise ValueError(
            f"{model.name}: the state {model.states[j]!r} does not see every other state (the "
            f"observability matrix has rank {max(ranks)} < {D}): the unseen part of the model "
            "cannot be estimated from it; observe another state or remove that part"
        )


def eliminate_hidden(model, U, sigma=None, initial_state=None):
    """``(model, U, sigma, initial_state, io)`` for data that never measure some states.

    When ``U`` has hidden states (:func:`~pymc_wendy.model.data.hidden_states`: a column
    of NaN, or one a DataFrame lacks), the model becomes the equations of the observed
    states (:func:`input_output`, ``io``), ``U`` their columns and a per-state ``sigma``
    their entries; otherwise everything is returned unchanged with ``io`` None.

    A known initial state is one of every state of the model given. The equations of the
    observed states would need the observed states' derivatives at ``t0``, which depend on
    the parameters, so the weak form leaves it out (it is fitted to the data alone) and
    every forward solve (the forward check, predictions, the exact stage) starts from it
    with the model given: it comes back as a
    :class:`~pymc_wendy.model.data.LatentInitialState`.
    """
    if not isinstance(model, ODEModel):
        return model, U, sigma, initial_state, None
    hidden = hidden_states(U, model.states)
    if not hidden:
        return model, U, sigma, initial_state, None
    observed = [s for s in model.states if s not in hidden]
    if not observed:
        raise ValueError(f"U measures none of the states of {model.name} {list(model.states)}")
    if model.inputs:
        raise ValueError(
            f"{model.name} has inputs, and the data never measure {list(hidden)} (columns of "
            f"missing values): fit the input-output equation of the observed state, "
            f"pw.input_output(model, {observed[0]!r}), with its inputs io.inputs(...) "
            "(docs/doses.md)"
        )
    io = input_output(model, observed)
    if sigma is not None and not isinstance(sigma, str) and np.size(sigma) == model.n_states:
        keep = [model.states.index(s) for s in observed]
        sigma = np.asarray(sigma, dtype=float).ravel()[keep]
    if initial_state is not None:
        initial_state = LatentInitialState(initial_state, model.observing(observed))
    return io.model, observed_part(U, model.states, observed), sigma, initial_state, io
