"""Data2LD, ``fit(method="data2ld")`` (Carey & Ramsay): parameter cascading for linear ODEs.

A version of parameter cascading for one observed state ``x`` of order ``p`` obeying a
*linear* differential equation (the paper's eq. 1),

``x^(p) = sum_{k<p} a_k(theta) x^(k) + sum_i b_i(theta) w_i(t)``,

with parameter-only coefficients ``a_k``, ``b_i`` and known inputs ``w_i``. Write
``L x = x^(p) - sum_k a_k x^(k)`` and ``g = sum_i b_i w_i``. Steps:

1. **Basis.** ``x(t) ~ sum_k c_k phi_k(t) = Phi c`` (eq. 8) in B-splines of order ``O``
   (``spline_order``, default ``p + 3``; the paper used order 5 for its second-order
   example), clamped at the first and last observation times, with interior knots at the
   observation times (``K = N + O - 2`` basis functions, the paper's advice) or at the
   ``knots`` given. Every breakpoint of an input inside the span is a knot of multiplicity
   ``O - p``, so that ``x^(p)`` can jump where the input jumps (three knots at 14 and at 15
   for the head-acceleration pulse, as in the paper's section 4); a breakpoint of an input
   given as values read linearly between grid times (a kink, not a jump) gets multiplicity
   ``O - p - 1`` (at least 1). Breakpoints of callables are taken as jumps.
2. **Penalty.** ``R(theta) = int (L phi)(L phi)^T dt`` and ``S(theta) = -int (L phi) g dt``,
   so that ``c^T R c + 2 c^T S + int g^2 = int (L x - g)^2`` (eq. 9). The integrals are
   Gauss-Legendre sums with ``n_quad`` nodes (default ``O + 1``) on every knot interval:
   exact for the polynomial products ``phi^(k) phi^(l)`` and for piecewise-polynomial inputs
   whose breakpoints are knots. The products of basis derivatives and inputs are integrated
   once per data set; ``R`` and ``S`` are then quadratic and bilinear combinations of the
   coefficients ``alpha = (-a_0, .., -a_{p-1}, 1)`` and ``b``, whose values and first and
   second ``theta``-derivatives are generated with sympy from the model.
3. **Inner problem.** For fixed ``theta`` and ``rho``, ``c_hat`` minimises
   ``J(c) = (1 - rho)/N |y - Phi c|^2 + rho/T (c^T R c + 2 c^T S + int g^2)``
   (eq. 10, ``T = t_N - t_1``), in closed form (eq. 11):
   ``c_hat = M [(1 - rho)/N Phi^T y - rho/T S]``, ``M = [(1 - rho)/N Phi^T Phi + rho/T R]^-1``
   (a Cholesky factorisation).
4. **Outer problem.** ``theta_hat(rho) = argmin H(theta | rho) = |y - Phi c_hat(theta, rho)|^2``
   (eq. 12), by ``scipy.optimize.least_squares`` (trust-region reflective, ``x_scale="jac"``,
   within ``bounds`` when given) with the analytic Jacobian
   ``-Phi dc_hat/dtheta_j = Phi M rho/T (R_j c_hat + S_j)`` (implicit differentiation of the
   normal equations of eq. 11; ``R_j``, ``S_j`` the ``theta_j``-derivatives).
5. **rho continuation** (the paper's section 3.2): ``rho = 1 / (1 + exp(-gamma))`` with
   ``gamma`` starting at ``logit(rho_start)`` (default ``rho_start = 1/(1 + e^4)``, the
   paper's ``gamma_0 = -4``) and each stage warm-started from the previous estimate. After a
   stage whose criterion rose by less than ``rho_tol`` (default 0.2, the paper's
   ``epsilon_0``) relative to the previous stage's, ``gamma`` grows by ``rho_step`` (default
   1, the paper's); otherwise by half the previous step, but never less than ``rho_step / 8``
   (the paper gives no floor; without one the ladder can stall, since ``H`` grows from
   nearly zero where the spline almost interpolates at small ``rho``). The ladder stops, as
   the paper's step 4 does, once ``theta`` moves by at most ``theta_tol`` (default 1e-4, the
   paper's ``epsilon_1``; relative to ``|theta|`` when that exceeds 1) between two stages,
   but not before ``rho = 0.99``, the paper's final value in its examples (so a pause of
   ``theta`` on the way cannot end it early); ``rho_max`` (default ``1 - 1e-6``) caps it.
   The paper's examples end at ``rho = 0.99``; with eq. 10's weights that is too weak a
   penalty on a basis with a knot at every observation: on head acceleration the effective
   degrees of freedom are still about 10 there (the paper reports 2.45 for its data) and the
   root-mean-square errors are about twice those of output-error least squares, while the
   parameters settle (step 4) at ``rho`` between 0.9999 and 0.999995, where the degrees of
   freedom are close to ``p`` and the errors match output error's (``docs/estimators.md``).
   ``rho_max=0.99`` reproduces the paper's endpoint. An explicit increasing ladder ``rho``
   replaces the adaptive one and is run to its end. The starting ``theta`` is ``p0`` if
   given, else the weak least-squares start of ``fit`` (the paper starts from the exterior
   point ``theta = 0.01``; from there the ladder reaches the same estimate).
6. **Intervals** (the paper's section 3.3, its supplementary formulas derived here): with
   ``rho`` fixed at its final value, ``theta_hat(y)`` is defined implicitly by
   ``dH/dtheta = 0``, so ``dtheta/dy = -[d2H/dtheta2]^-1 d2H/(dtheta dy)``, both exact
   (second derivatives of ``c_hat`` included), and
   ``Cov(theta_hat) = sigma^2 (dtheta/dy)(dtheta/dy)^T``. ``sigma^2`` is the ``sigma``
   passed to ``fit``; when none was given it is the paper's
   ``|y - Phi c_hat|^2 / (N - df)`` with ``df = tr(2 A - A^2)``, ``A = (1 - rho)/N Phi M Phi^T``
   the smoother's hat matrix (the degrees of freedom of ``x_hat``; they tend to ``p`` as
   ``rho -> 1``). That estimate is what the result reports as ``sigma``. The variance is
   conditional on ``rho`` and ignores the ``theta`` dependence of the fitted curve in the
   degrees of freedom, as the paper's does. It is ``res.covariance("data2ld")``, the default.

Scope
-----
One state (``D = 1``) of any order ``p >= 1``; ``D > 1`` is a ValueError (the paper sets out
the single equation; a system would need a block penalty over states). The pointwise part
of the equation must be linear in the state with a coefficient of the parameters alone
(``-k x``, not ``-k x^3`` or ``-k t x``): the paper's eq. 1 allows time-varying coefficients
``beta_r(t | theta)``, which this implementation refuses (they would break the one-off
integration of basis products). A term of the parameters alone (``+ b``) is a constant
input. Terms in ``t`` without the state (``p1 sin(t)``) must be declared as inputs. Additive
normal noise, one experiment.

Options
-------
``spline_order`` (``O``, an integer ``>= p + 1``, default ``p + 3``); ``knots`` (interior
knots, strictly inside the observation span; default the observation times); ``n_quad``
(Gauss nodes per knot interval, default ``O + 1``); the adaptive ladder's ``rho_start``
(default ``1/(1+e^4)``), ``rho_max`` (``1 - 1e-6``), ``rho_step`` (logit step, 1.0),
``rho_tol`` (0.2) and ``theta_tol`` (1e-4; None runs the ladder to ``rho_max``), or
an explicit increasing ladder ``rho`` in (0, 1); ``max_nfev``, ``xtol``, ``ftol``, ``gtol``
(each stage's ``least_squares``; defaults ``100 J``, ``1e-10``, ``1e-10``, ``1e-10``).

``history`` keys
----------------
``"rho"``, ``"theta"`` (one row per stage), ``"H"`` (``H(theta_hat | rho)`` per stage),
``"stage_nfev"``, ``"stage_success"``, ``"ladder_converged"`` (whether ``theta_tol`` was met,
or the explicit ladder run), ``"knots"`` (the full knot vector), ``"spline_order"``,
``"n_basis"``, ``"coefficients"`` (``c_hat`` at the end), ``"spline"`` (the fitted
``x_hat`` as a :class:`scipy.interpolate.BSpline`), ``"df"``, ``"residual_sigma"``,
``"penalty"`` (``int (L x_hat - g)^2``), ``"dtheta_dy"`` (shape (J, N)), ``"u0"`` (the
spline's value and derivatives up to order ``p - 1`` at ``t_1``; not set as ``result.u0``:
the spline's derivatives at the end of the span are its least accurate, so
:meth:`FitResult.simulate` fits the initial state as for the other weak-form estimates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import sympy as sp
from scipy import linalg, optimize
from scipy.interpolate import BSpline
from scipy.special import expit, logit

from pymc_wendy.estimators._problem import FitProblem, safe_nll
from pymc_wendy.estimators.registry import Estimator
from pymc_wendy.estimators.results import FitResult
from pymc_wendy.model.inputs import Input
from pymc_wendy.model.observation import as_observation
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak.test_functions import gauss_legendre

__all__ = ["OPTIONS", "LinearStructure", "linear_structure", "prepare_criterion"]

#: Option names accepted by ``fit(method="data2ld", options=...)``
OPTIONS = frozenset(
    {"spline_order", "knots", "n_quad", "rho", "rho_start", "rho_max", "rho_step", "rho_tol"}
    | {"theta_tol", "max_nfev", "xtol", "ftol", "gtol"}
)
_DEFAULTS = {
    "rho_start": float(expit(-4.0)),
    "rho_max": 1 - 1e-6,
    "rho_step": 1.0,
    "rho_tol": 0.2,
    "theta_tol": 1e-4,
    "xtol": 1e-10,
    "ftol": 1e-10,
    "gtol": 1e-10,
}
#: Smallest logit step of the adaptive ladder, as a fraction of ``rho_step``
_MIN_STEP_FRACTION = 1 / 8
#: The ladder stops on converged parameters only from here on (the paper's final rho)
_RHO_STOP = 0.99


# --- options -------------------------------------------------------------------------------
def _is_int(v, lo: int) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= lo


def _is_number(v) -> bool:
    return isinstance(v, int | float | np.number) and not isinstance(v, bool) and np.isfinite(v)


def _check_options(options: Mapping, where: str = "options") -> None:
    """Values of the ``data2ld``-specific options (names, ``max_nfev`` and the least-squares
    tolerances are the generic check's)."""
    for key in ("rho_start", "rho_max"):
        if key in options and not (_is_number(options[key]) and 0 < options[key] < 1):
            raise ValueError(f"{where}[{key!r}] must be a number in (0, 1); got {options[key]!r}")
    lo = options.get("rho_start", _DEFAULTS["rho_start"])
    hi = options.get("rho_max", _DEFAULTS["rho_max"])
    if lo > hi:
        raise ValueError(f"{where}['rho_start'] = {lo:g} exceeds {where}['rho_max'] = {hi:g}")
    if "rho" in options:
        if {"rho_start", "rho_max", "rho_step", "rho_tol", "theta_tol"} & set(options):
            raise ValueError(
                f"give {where}['rho'] (an explicit ladder) or rho_start/rho_max/rho_step/"
                "rho_tol/theta_tol (the adaptive one), not both"
            )
        r = options["rho"]
        ok = isinstance(r, Sequence | np.ndarray) and len(r) > 0
        ok = ok and all(_is_number(v) for v in np.ravel(np.asarray(r, dtype=object)))
        arr = np.asarray(r, dtype=float).ravel() if ok else None
        if not ok or np.any(arr <= 0) or np.any(arr >= 1) or np.any(np.diff(arr) <= 0):
            raise ValueError(
                f"{where}['rho'] must be a strictly increasing sequence of numbers in (0, 1); "
                f"got {r!r}"
            )
    for key in ("rho_step", "rho_tol"):
        if key in options and not (_is_number(options[key]) and options[key] > 0):
            raise ValueError(f"{where}[{key!r}] must be a number > 0; got {options[key]!r}")
    tt = options.get("theta_tol")
    if tt is not None and not (_is_number(tt) and tt > 0):
        raise ValueError(f"{where}['theta_tol'] must be None or a number > 0; got {tt!r}")
    if "spline_order" in options and not _is_int(options["spline_order"], 2):
        raise ValueError(
            f"{where}['spline_order'] must be an integer >= 2; got {options['spline_order']!r}"
        )
    if "n_quad" in options and not _is_int(options["n_quad"], 1):
        raise ValueError(f"{where}['n_quad'] must be an integer >= 1; got {options['n_quad']!r}")
    if "knots" in options:
        k = np.asarray(options["knots"], dtype=float) if _is_array_like(options["knots"]) else None
        if k is None or k.ndim != 1 or not np.all(np.isfinite(k)):
            raise ValueError(f"{where}['knots'] must be a 1-d sequence of finite numbers")


def _is_array_like(v) -> bool:
    try:
        np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return False
    return True


# --- the linear equation -------------------------------------------------------------------
@dataclass(frozen=True)
class LinearStructure:
    """The model as ``L x = g``: coefficients as functions of ``theta``.

    ``alpha(theta)`` (length ``p + 1``) gives ``L x = sum_k alpha_k x^(k)`` with
    ``alpha_p = 1``; ``beta(theta)`` the coefficients of the forcing functions (the model's
    inputs, then a constant 1 when the equation has a parameter-only term).
    """

    order: int
    n_params: int
    #: names of the forcing functions: the model's inputs, then "1" for a constant term
    forcing: tuple[str, ...]
    _fn: object

    def coefficients(self, theta, level: int = 0) -> tuple[np.ndarray, ...]:
        """``(alpha, beta)`` at ``theta``; with ``level`` 1 also their Jacobians, shapes
        (p+1, J) and (I, J); with ``level`` 2 also their Hessians, (p+1, J, J), (I, J, J)."""
        a, b, da, db, dda, ddb = self._fn(np.asarray(theta, dtype=float))
        P1, I, J = self.order + 1, len(self.forcing), self.n_params
        out = (_arr(a, (P1,)), _arr(b, (I,)))
        if level >= 1:
            out += (_arr(da, (P1, J)), _arr(db, (I, J)))
        if level >= 2:
            out += (_arr(dda, (P1, J, J)), _arr(ddb, (I, J, J)))
        return out


def _arr(v, shape) -> np.ndarray:
    return np.asarray(v, dtype=float).reshape(shape)


def _build_structure(model: ODEModel) -> LinearStructure:
    if model.n_states != 1:
        raise ValueError(
            f"method='data2ld' fits one observed state (the paper's single linear equation); "
            f"{model.name} has {model.n_states} states {list(model.states)}"
        )
    p = model.orders[0]
    u = model.symbols.u[0]
    params = set(model.symbols.p)
    a0, const = sp.Integer(0), sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(model.expressions[0])):
        if term.has(u):
            coeff = sp.simplify(term / u)
            if coeff.has(u):
                raise ValueError(
                    f"method='data2ld' needs a linear ODE: the term {model.named(term)} of "
                    f"{model.name} is nonlinear in {model.states[0]}"
                )
            if not coeff.free_symbols <= params:
                raise ValueError(
                    f"method='data2ld' needs coefficients of the parameters alone: the term "
                    f"{model.named(term)} of {model.name} has a time-varying coefficient"
                )
            a0 += coeff
        elif not term.free_symbols <= params:
            raise ValueError(
                f"method='data2ld': the term {model.named(term)} of {model.name} depends on t; "
                "declare time-dependent forcing as an input (ODEModel(..., inputs=[...]))"
            )
        else:
            const += term
    a = [a0] + [model.derivative_terms.get((0, 0, k), sp.Integer(0)) for k in range(1, p)]
    alpha = [-c for c in a] + [sp.Integer(1)]
    beta = [model.input_terms.get((0, i), sp.Integer(0)) for i in range(len(model.inputs))]
    forcing = tuple(model.inputs)
    if const != 0:
        beta.append(const)
        forcing += ("1",)
    th = list(model.symbols.p)
    da = [[sp.diff(c, x) for x in th] for c in alpha]
    db = [[sp.diff(c, x) for x in th] for c in beta]
    dda = [[[sp.diff(c, x, y) for y in th] for x in th] for c in alpha]
    ddb = [[[sp.diff(c, x, y) for y in th] for x in th] for c in beta]
    fn = sp.lambdify([th], [alpha, beta, da, db, dda, ddb], modules="numpy")
    return LinearStructure(order=p, n_params=len(th), forcing=forcing, _fn=fn)


def linear_structure(model: ODEModel) -> LinearStructure:
    """The model as ``L x = g`` (built once per model); a ValueError naming the offending
    term when it is not a single linear equation with parameter-only coefficients."""
    return model.cached(("data2ld", "structure"), _build_structure)


# --- basis, quadrature and the integrals that do not depend on theta ----------------------
def _breakpoint_multiplicity(w: Input, jump: int) -> int:
    """Knot multiplicity at an input's breakpoints: a jump in value for callables and
    held values, a kink for values read linearly between grid times."""
    if w.values is not None and w.kind == "linear":
        return max(1, jump - 1)
    return jump


def _knot_vector(t, interior, inputs: Sequence[Input], O: int, p: int) -> np.ndarray:
    """Clamped knots of order ``O`` on ``[t_1, t_N]``: the interior knots once each, every
    input breakpoint inside the span ``O - p`` times (or ``O - p - 1`` for a kink)."""
    t0, t1 = float(t[0]), float(t[-1])
    tol = 1e-9 * (t1 - t0)
    knots = np.unique(np.asarray(interior, dtype=float))
    if knots.size and (knots[0] <= t0 + tol or knots[-1] >= t1 - tol):
        raise ValueError(
            f"options['knots'] must lie strictly inside the observation span ({t0:g}, {t1:g})"
        )
    mult = np.ones(knots.size, dtype=int)
    for w in inputs:
        m = _breakpoint_multiplicity(w, O - p)
        for bp in w.breakpoints:
            if not t0 + tol < bp < t1 - tol:
                continue
            near = np.flatnonzero(np.abs(knots - bp) <= tol)
            if near.size:  # a knot already there (an observation time): raise its count
                mult[near[0]] = max(mult[near[0]], m)
            else:
                at = np.searchsorted(knots, bp)
                knots, mult = np.insert(knots, at, bp), np.insert(mult, at, m)
    return np.r_[np.full(O, t0), np.repeat(knots, mult), np.full(O, t1)]


@dataclass(frozen=True)
class _Basis:
    """The spline space of ``x`` and the theta-free integrals of the penalty."""

    knots: np.ndarray
    order: int  # O, the B-spline order (degree O - 1)
    Phi: np.ndarray  # (N, K) basis at the observation times
    #: ``G[k, l] = int phi^(k) phi^(l)^T dt``, shape (p+1, p+1, K, K)
    G: np.ndarray
    #: ``F[k, i] = int phi^(k) w_i dt``, shape (p+1, I, K)
    F: np.ndarray
    #: ``W[i, j] = int w_i w_j dt``, shape (I, I)
    W: np.ndarray

    @property
    def K(self) -> int:
        return self.Phi.shape[1]


def _forcing_values(struct: LinearStructure, inputs: Sequence[Input], tq) -> np.ndarray:
    """The forcing functions at the nodes, shape (Q, I): the inputs, then 1."""
    cols = [w(tq) for w in inputs]
    if "1" in struct.forcing:
        cols.append(np.ones_like(tq))
    return np.column_stack(cols) if cols else np.zeros((tq.size, 0))


def _make_basis(
    struct: LinearStructure, t, inputs: Sequence[Input], O: int, interior, n_quad: int
) -> _Basis:
    p = struct.order
    knots = _knot_vector(t, interior, inputs, O, p)
    K = knots.size - O
    tq, wq = gauss_legendre(knots, n_quad)  # n_quad nodes on every non-empty knot interval
    eye = BSpline(knots, np.eye(K), O - 1, extrapolate=False)
    B = np.stack([eye(tq, nu=k) for k in range(p + 1)])  # (p+1, Q, K)
    Bw = B * wq[None, :, None]
    G = np.tensordot(Bw, B, axes=([1], [1])).transpose(0, 2, 1, 3)
    Wq = _forcing_values(struct, inputs, tq)
    F = np.einsum("kqm,qi->kim", Bw, Wq)
    W = (Wq * wq[:, None]).T @ Wq
    Phi = BSpline.design_matrix(t, knots, O - 1).toarray()
    return _Basis(knots=knots, order=O, Phi=Phi, G=G, F=F, W=W)


# --- the criterion at one rho --------------------------------------------------------------
@dataclass
class _State:
    """Everything at one ``theta``: coefficients, factorised system, ``c_hat``."""

    theta: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    dalpha: np.ndarray
    dbeta: np.ndarray
    R: np.ndarray
    S: np.ndarray
    factor: tuple
    c: np.ndarray


class _Criterion:
    """``H(theta | rho)`` and its derivatives for one data set and one ``rho``."""

    def __init__(self, struct: LinearStructure, basis: _Basis, y: np.ndarray, span: float):
        self.struct, self.basis, self.y = struct, basis, y
        self.N, self.T = y.size, span
        self.PtP = basis.Phi.T @ basis.Phi
        self.Pty = basis.Phi.T @ y
        self.rho = 0.5
        self._last: _State | None = None
        self.nfev = 0

    def set_rho(self, rho: float) -> None:
        self.rho = float(rho)
        self._last = None

    @property
    def weights(self) -> tuple[float, float]:
        """``((1 - rho)/N, rho/T)``: the data and penalty weights of eq. 10."""
        return (1 - self.rho) / self.N, self.rho / self.T

    # penalty pieces
    def penalty_matrices(self, alpha, beta) -> tuple[np.ndarray, np.ndarray, float]:
        """``R``, ``S`` and ``int g^2`` for coefficients ``alpha``, ``beta``."""
        G, F, W = self.basis.G, self.basis.F, self.basis.W
        R = np.tensordot(np.outer(alpha, alpha), G, axes=2)
        S = -np.einsum("k,i,kim->m", alpha, beta, F)
        return R, S, float(beta @ W @ beta)

    def _R_times(self, c, a1, a2) -> np.ndarray:
        """``sum_kl a1_k a2_l (G_kl + G_kl^T) c``, vectorised over trailing axes of ``a1``."""
        V = np.tensordot(self.basis.G, c, axes=([3], [0]))  # V[k, l] = int phi^(k) x^(l)
        return np.einsum("k...,l,klm->m...", a1, a2, V) + np.einsum("l...,k,klm->m...", a1, a2, V)

    def state(self, theta) -> _State:
        theta = np.asarray(theta, dtype=float)
        if self._last is not None and np.array_equal(theta, self._last.theta):
            return self._last
        alpha, beta, dalpha, dbeta = self.struct.coefficients(theta, level=1)
        R, S, _ = self.penalty_matrices(alpha, beta)
        a, b = self.weights
        system = a * self.PtP + b * R
        try:
            factor = ("chol", linalg.cho_factor(system))
        except linalg.LinAlgError:  # indefinite only by rounding: fall back to LU
            factor = ("lu", linalg.lu_factor(system))
        c = self._solve(factor, a * self.Pty - b * S)
        self._last = _State(theta.copy(), alpha, beta, dalpha, dbeta, R, S, factor, c)
        self.nfev += 1
        return self._last

    @staticmethod
    def _solve(factor, rhs) -> np.ndarray:
        kind, f = factor
        return linalg.cho_solve(f, rhs) if kind == "chol" else linalg.lu_solve(f, rhs)

    def _dS(self, st: _State) -> np.ndarray:
        """``dS/dtheta``, shape (K, J)."""
        F = self.basis.F
        return -(
            np.einsum("kj,i,kim->mj", st.dalpha, st.beta, F)
            + np.einsum("k,ij,kim->mj", st.alpha, st.dbeta, F)
        )

    def dc(self, st: _State) -> np.ndarray:
        """``d c_hat / d theta``, shape (K, J): ``-rho/T M (R_j c + S_j)``."""
        _, b = self.weights
        rhs = self._R_times(st.c, st.dalpha, st.alpha) + self._dS(st)
        return -b * self._solve(st.factor, rhs)

    # the outer least-squares problem
    def residual(self, theta) -> np.ndarray:
        """``y - Phi c_hat(theta)``."""
        return self.y - self.basis.Phi @ self.state(theta).c

    def jacobian(self, theta) -> np.ndarray:
        """``d residual / d theta = -Phi dc_hat/dtheta``, shape (N, J)."""
        return -self.basis.Phi @ self.dc(self.state(theta))

    # second order: the implicit derivative of theta_hat in y
    def sensitivity(self, theta) -> tuple[np.ndarray, np.ndarray]:
        """``(dtheta_hat/dy, Hessian of H/2)`` at a stationary ``theta`` of ``H``.

        ``theta_hat(y)`` solves ``r^T dr/dtheta = 0``; differentiating in ``y`` gives
        ``dtheta/dy = -Hess^-1 B`` with ``Hess = r_th^T r_th + sum_n r_n r_n,thth`` and
        ``B_j = (dr/dy)^T r_j + (d r_j / dy)^T r``.
        """
        st = self.state(theta)
        a, b = self.weights
        Phi = self.basis.Phi
        _, _, _, _, ddalpha, ddbeta = self.struct.coefficients(st.theta, level=2)
        J = st.theta.size
        c, dc = st.c, self.dc(st)
        r = self.y - Phi @ c
        rj = -Phi @ dc  # (N, J)
        # second derivatives of c: M c_ij = -b (R_ij c + R_i c_j + R_j c_i + S_ij)
        G, F = self.basis.G, self.basis.F
        V = np.tensordot(G, c, axes=([3], [0]))  # (p+1, p+1, K)
        Rij_c = (
            np.einsum("kij,l,klm->mij", ddalpha, st.alpha, V)
            + np.einsum("ki,lj,klm->mij", st.dalpha, st.dalpha, V)
            + np.einsum("kj,li,klm->mij", st.dalpha, st.dalpha, V)
            + np.einsum("k,lij,klm->mij", st.alpha, ddalpha, V)
        )
        Ri = np.einsum("ki,l,klmn->imn", st.dalpha, st.alpha, G)
        Ri = Ri + Ri.transpose(0, 2, 1)  # R_i, shape (J, K, K)
        Ri_cj = np.einsum("imn,nj->mij", Ri, dc)
        Sij = -(
            np.einsum("kij,l,klm->mij", ddalpha, st.beta, F)
            + np.einsum("ki,lj,klm->mij", st.dalpha, st.dbeta, F)
            + np.einsum("kj,li,klm->mij", st.dalpha, st.dbeta, F)
            + np.einsum("k,lij,klm->mij", st.alpha, ddbeta, F)
        )
        rhs = Rij_c + Ri_cj + Ri_cj.transpose(0, 2, 1) + Sij
        K = c.size
        dcc = -b * self._solve(st.factor, rhs.reshape(K, J * J)).reshape(K, J, J)
        hess = rj.T @ rj - np.einsum("n,nij->ij", r, np.tensordot(Phi, dcc, axes=1))
        # dr/dy = I - a Phi M Phi^T (symmetric); d r_j/dy = a b Phi M R_j M Phi^T
        Mt_r = self._solve(st.factor, Phi.T @ r)  # M Phi^T r
        Mt_rj = self._solve(st.factor, Phi.T @ rj)  # M Phi^T r_j
        B = rj.T - a * (Phi @ Mt_rj).T  # (J, N): ((I - a Phi M Phi^T) r_j)^T
        inner = np.einsum("imn,n->mi", Ri, Mt_r)  # R_j M Phi^T r, (K, J)
        B = B + a * b * (Phi @ self._solve(st.factor, inner)).T
        dtheta_dy = -np.linalg.solve(hess, B)
        return dtheta_dy, hess

    def hat_trace(self, theta) -> float:
        """Effective degrees of freedom ``tr(2 A - A^2)`` of the smoother
        ``A = (1 - rho)/N Phi M Phi^T``."""
        st = self.state(theta)
        a, _ = self.weights
        MPtP = a * self._solve(st.factor, self.PtP)  # M Phi^T Phi, scaled: tr(A) = tr(this)
        return float(2 * np.trace(MPtP) - np.sum(MPtP * MPtP.T))


# --- the rho ladder ------------------------------------------------------------------------
def _stage(crit: _Criterion, theta, bounds, opts) -> tuple[np.ndarray, float, int, bool, str]:
    """``argmin_theta H(theta | rho)`` from ``theta``: ``(theta, H, nfev, success, message)``."""
    kw = {k: opts[k] for k in ("xtol", "ftol", "gtol") if opts.get(k) is not None}
    if "max_nfev" in opts:
        kw["max_nfev"] = int(opts["max_nfev"])
    lo, hi = bounds if bounds is not None else (-np.inf, np.inf)
    x0 = theta if bounds is None else np.clip(theta, lo, hi)
    res = optimize.least_squares(
        crit.residual, x0, jac=crit.jacobian, bounds=(lo, hi), x_scale="jac", **kw
    )
    r = crit.residual(res.x)
    return res.x, float(r @ r), int(res.nfev), bool(res.status > 0), str(res.message)


def _continuation(crit: _Criterion, theta0, bounds, opts) -> dict:
    """Minimise ``H(theta | rho)`` along the ladder of ``rho``, each stage warm-started."""
    fixed = opts.get("rho")
    rhos, thetas, Hs, nfevs, oks, msgs = [], [], [], [], [], []
    theta = np.asarray(theta0, dtype=float)
    converged = fixed is not None  # an explicit ladder is run to its end
    if fixed is not None:
        ladder = iter(np.asarray(fixed, dtype=float))
    else:
        gamma, g_max = float(logit(opts["rho_start"])), float(logit(opts["rho_max"]))
        step = full = float(opts["rho_step"])
        theta_tol = opts["theta_tol"]
    while True:
        if fixed is not None:
            rho = next(ladder, None)
            if rho is None:
                break
        else:
            rho = float(expit(gamma))
        crit.set_rho(rho)
        new, H, nfev, ok, msg = _stage(crit, theta, bounds, opts)
        moved = float(np.linalg.norm(new - theta))
        theta = new
        rhos.append(rho), thetas.append(theta.copy()), Hs.append(H)
        nfevs.append(nfev), oks.append(ok), msgs.append(msg)
        if fixed is not None:
            continue
        if (
            theta_tol is not None
            and len(rhos) > 1
            and rho >= min(_RHO_STOP, opts["rho_max"])
            and moved <= theta_tol * max(1.0, float(np.linalg.norm(theta)))
        ):
            converged = True
            break
        if gamma >= g_max:
            converged = theta_tol is None
            break
        if len(Hs) > 1 and (Hs[-1] - Hs[-2]) > opts["rho_tol"] * Hs[-2]:
            step = max(step / 2, full * _MIN_STEP_FRACTION)
        else:
            step = full
        gamma = min(gamma + step, g_max)
    return {
        "rho": np.array(rhos),
        "theta": np.array(thetas),
        "H": np.array(Hs),
        "stage_nfev": np.array(nfevs),
        "stage_success": np.array(oks),
        "ladder_converged": converged,
        "messages": msgs,
    }


# --- the estimator --------------------------------------------------------------------------
def _inputs_of(problem: FitProblem) -> list[Input]:
    return [problem.inputs[name] for name in problem.model.inputs]


def prepare_criterion(problem: FitProblem) -> tuple[LinearStructure, _Basis, _Criterion, dict]:
    """The structure, basis and criterion of ``problem`` (checks included), and the options
    with defaults filled in. Exposed for tests and diagnostics."""
    if problem.several:
        raise ValueError("method='data2ld' fits one experiment; got several")
    if as_observation(problem.noise).log_scale:
        raise ValueError("method='data2ld' supports additive normal noise only")
    model = problem.model
    struct = linear_structure(model)
    opts = {**_DEFAULTS, **problem.options}
    p, J = struct.order, model.n_params
    O = int(opts.get("spline_order", p + 3))
    if O < p + 1:
        raise ValueError(
            f"options['spline_order'] = {O} is too low for an equation of order {p}: "
            f"the penalty needs x^({p}) (order >= {p + 1}; default {p + 3})"
        )
    opts["spline_order"] = O
    opts.setdefault("n_quad", O + 1)
    t = np.asarray(problem.t, dtype=float)
    y = np.asarray(problem.U, dtype=float)[:, 0]
    n_min = p + J + 2
    if y.size < n_min:
        raise ValueError(
            f"method='data2ld' needs at least p + J + 2 = {n_min} observations for an equation "
            f"of order {p} with {J} parameters; got {y.size}"
        )
    interior = opts.get("knots", t[1:-1])
    basis = _make_basis(struct, t, _inputs_of(problem), O, interior, int(opts["n_quad"]))
    return struct, basis, _Criterion(struct, basis, y, float(t[-1] - t[0])), opts


def run(problem: FitProblem) -> FitResult:
    """``fit(method="data2ld")``."""
    struct, basis, crit, opts = prepare_criterion(problem)
    path = _continuation(crit, problem.start, problem.bounds, opts)
    theta = path["theta"][-1]
    crit.set_rho(path["rho"][-1])
    r = crit.residual(theta)
    rss = float(r @ r)
    df = crit.hat_trace(theta)
    residual_sigma = np.sqrt(rss / max(crit.N - df, 1e-12))
    sigma = residual_sigma if problem.sigma_estimated else float(np.ravel(problem.sigma)[0])
    dtheta_dy, cov = _interval_parts(crit, theta, sigma)
    fitted = _fit_details(struct, basis, crit, theta, float(np.asarray(problem.t)[0]))
    history = {
        **{k: v for k, v in path.items() if k != "messages"},
        **{k: fitted[k] for k in ("knots", "spline_order", "n_basis", "coefficients", "spline")},
        "df": df,
        "residual_sigma": float(residual_sigma),
        "penalty": fitted["penalty"],
        "dtheta_dy": dtheta_dy,
        "u0": fitted["u0"],
    }
    ok = bool(path["stage_success"][-1])
    common = problem.common()
    common["sigma"] = np.array([sigma], dtype=float)
    lik = common["likelihood"]
    return FitResult(
        x=theta,
        method="data2ld",
        success=ok,
        status="converged" if ok else "not_converged",
        message=_message(path, basis),
        nit=path["rho"].size,
        nfev=crit.nfev,
        wall_time=0.0,
        fun=rss,
        nll=None if lik is None else safe_nll(lik, theta),
        covariance_kind="data2ld",
        history=history,
        covariances={"data2ld": cov},
        **common,
    )


def _interval_parts(crit: _Criterion, theta, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """``(dtheta_hat/dy, Cov(theta_hat))``; NaN when the Hessian of ``H`` is singular."""
    try:
        dtheta_dy, _ = crit.sensitivity(theta)
    except np.linalg.LinAlgError:  # a singular Hessian: no interval
        J = theta.size
        return np.full((J, crit.N), np.nan), np.full((J, J), np.nan)
    return dtheta_dy, sigma**2 * dtheta_dy @ dtheta_dy.T


def _fit_details(struct, basis: _Basis, crit: _Criterion, theta, t0: float) -> dict:
    """The fitted spline, its coefficients, penalty and initial state (``history`` entries)."""
    st = crit.state(theta)
    R, S, g2 = crit.penalty_matrices(st.alpha, st.beta)
    spline = BSpline(basis.knots, st.c, basis.order - 1)
    return {
        "knots": basis.knots,
        "spline_order": basis.order,
        "n_basis": basis.K,
        "coefficients": st.c.copy(),
        "spline": spline,
        "penalty": float(st.c @ R @ st.c + 2 * st.c @ S + g2),
        "u0": np.array([float(spline(t0, nu=k)) for k in range(struct.order)]),
    }


def _message(path: dict, basis: _Basis) -> str:
    rho = path["rho"][-1]
    ladder = "" if path["ladder_converged"] else ", theta still moving by more than theta_tol"
    return (
        f"{path['messages'][-1]}; {path['rho'].size} stages of rho up to 1 - {1 - rho:.2g}"
        f"{ladder}; {basis.K} B-splines of order {basis.order}"
    )


ESTIMATOR = Estimator(
    name="data2ld",
    run=run,
    options=OPTIONS,
    summary="Data2LD: parameter cascading for linear ODEs with rho continuation (Carey & Ramsay)",
    covariance="data2ld",
    check_options=_check_options,
    operator_models=True,
)
