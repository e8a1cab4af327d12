"""Frequentist estimators behind one entry point, :func:`fit`.

=========  ==================================================================================
method     estimator
=========  ==================================================================================
"mle"      WENDy-MLE: trust-region Newton on the weak negative log-likelihood with the
           analytic gradient and Hessian (``trust-exact``; ``trust-constr`` with box bounds),
           optionally from several starts, keeping the lowest NLL.
"irls"     WENDy-IRLS (WENDy 2023, Algorithm 2): generalised least squares with the weight
           ``S(p_prev)^{-1}`` updated each iteration, stopping on a fixed point, an iteration
           cap, or a failed Shapiro-Wilk test of the whitened residual after 10 iterations.
           Nonlinear-in-parameters models solve a weighted nonlinear least-squares problem
           per iteration.
"wls"      Weak least squares ``min ||r(p)||^2`` (one linear solve when linear in ``p``;
           Gauss-Newton otherwise). Biased at high noise (errors in variables).
"oels"     Output-error least squares over ``(p, u0)`` with forward sensitivities
           (:mod:`pymc_wendy.output_error`).
"hybrid"   WENDy-MLE, then output error started from it; the output-error estimate is kept
           unless its weak NLL is worse than the MLE's by more than 5 % of ``|l(p_MLE)|``.
=========  ==================================================================================

Choices and their reasons are collected in ``docs/estimators.md``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Literal

import numpy as np
from scipy import linalg as sla
from scipy import optimize, stats

from pymc_wendy import bias
from pymc_wendy._threads import single_blas_thread
from pymc_wendy._validation import check_data, check_positive_data
from pymc_wendy.experiments import JointLikelihood
from pymc_wendy.kernels import WeakLikelihoodError
from pymc_wendy.likelihood import Noise, WeakLikelihood
from pymc_wendy.noise import estimate_noise
from pymc_wendy.ode import ODEModel
from pymc_wendy.results import BiasCorrection, FitResult, FitWarning
from pymc_wendy.test_functions import TestFunctions

__all__ = ["fit", "weak_least_squares", "wendy_mle"]

Method = Literal["mle", "irls", "wls", "oels", "hybrid"]
METHODS = ("mle", "irls", "wls", "oels", "hybrid")

#: Default covariance kind per method (see ``docs/estimators.md`` for the measurements).
DEFAULT_COVARIANCE = {
    "mle": "hessian",
    "irls": "gls",
    "wls": "sandwich",
    "oels": "oe",
}

_IRLS_DEFAULTS = {"max_iter": 100, "tol": 1e-6, "sw_tol": 1e-4, "sw_start": 10}
# scipy.optimize.minimize's trust-exact and trust-constr options (each run gets its own)
_TRUST_EXACT = {"maxiter", "gtol", "initial_trust_radius", "max_trust_radius", "eta"}
_TRUST_CONSTR = {
    "maxiter",
    "gtol",
    "xtol",
    "barrier_tol",
    "initial_tr_radius",
    "initial_constr_penalty",
    "initial_barrier_parameter",
}
_OPTIONS = {
    "mle": _TRUST_EXACT | _TRUST_CONSTR | {"warm_start"},
    "irls": set(_IRLS_DEFAULTS),
    "wls": {"max_iter", "tol"},
    # scipy.optimize.least_squares
    "oels": {"method", "ftol", "xtol", "gtol", "x_scale", "loss", "f_scale", "max_nfev"}
    | {"diff_step", "tr_solver", "tr_options", "verbose"},
}
_COUNTS = {"maxiter", "max_iter", "max_nfev"}
_TOLERANCES = {"tol", "gtol", "xtol", "ftol", "sw_tol", "barrier_tol"}
_HYBRID_TOLERANCE = 0.05


# --- weak least squares --------------------------------------------------------------------


def _wls(lik: WeakLikelihood, p0, max_iter: int = 50, tol: float = 1e-10, bounds=None):
    """Weak least squares; returns ``(p, nit, converged)``."""
    J = lik.model.n_params
    p = np.ones(J) if p0 is None else np.array(p0, dtype=float)
    if bounds is not None:
        return _wls_bounded(lik, p, bounds, max_iter)
    if lik.model.is_linear_in_params:
        p = p + np.linalg.lstsq(lik.dr_dp(p), -lik.residual(p), rcond=None)[0]
        return p, 1, True
    r = lik.residual(p)
    for it in range(1, max_iter + 1):
        step = np.linalg.lstsq(lik.dr_dp(p), -r, rcond=None)[0]
        for _ in range(30):  # halve until ||r|| decreases
            try:
                r_new = lik.residual(p + step)
            except WeakLikelihoodError:
                r_new = None
            if r_new is not None and r_new @ r_new < r @ r:
                break
            step = step / 2
        else:
            return p, it, True  # no descent along the Gauss-Newton direction: stationary
        p, r = p + step, r_new
        if np.linalg.norm(step) <= tol * max(np.linalg.norm(p), 1.0):
            return p, it, True
    return p, max_iter, False


def _wls_bounded(lik: WeakLikelihood, p, bounds, max_iter: int):
    if lik.model.is_linear_in_params:
        G = lik.dr_dp(p)
        res = optimize.lsq_linear(G, -(lik.residual(p) - G @ p), bounds=bounds)
        return res.x, int(res.nit), bool(res.success)
    n = lik.n_residuals
    p = np.clip(p, *bounds)

    def res(q):
        try:
            return lik.residual(q)
        except WeakLikelihoodError:
            return np.full(n, 1e8)

    out = optimize.least_squares(
        res, p, jac=lik.dr_dp, bounds=bounds, x_scale="jac", max_nfev=max_iter * 10
    )
    return out.x, int(out.nfev), bool(out.success)


def weak_least_squares(
    lik: WeakLikelihood, p0=None, *, max_iter: int = 50, tol: float = 1e-10
) -> np.ndarray:
    """Minimise ``||r(p)||^2`` by Gauss-Newton steps with the analytic ``dr/dp``.

    One step is exact when the model is linear in the parameters (``p0`` is then irrelevant);
    otherwise iterate from ``p0`` (default all ones) with step halving until the step is
    below ``tol`` relative to ``p``. :func:`fit` with ``method="wls"`` wraps this in a result.
    """
    return _wls(lik, p0, max_iter, tol)[0]


# --- WENDy-MLE -----------------------------------------------------------------------------


def _value_and_grad(lik: WeakLikelihood):
    def fun(p):
        try:
            return lik.nll_grad(p)
        except WeakLikelihoodError:
            return np.inf, np.zeros_like(p)

    return fun


def _hessian(lik: WeakLikelihood):
    # trust-constr evaluates the Hessian at trial points too; where the likelihood is
    # undefined the trial is rejected on its value, so any finite matrix will do
    def hess(p):
        try:
            return lik.hessian(p)
        except WeakLikelihoodError:
            return np.eye(p.size)

    return hess


class _NewtonModel:
    """Value and gradient, and at the same point the matrix of the Newton model, sharing one
    evaluation of the likelihood (general path, models nonlinear in the parameters).

    ``hess`` leaves out the log-determinant's trace terms (``kernels.hessian(exact=False)``):
    it costs about as much as the gradient it reuses, where the exact Hessian costs 3-6
    gradients, and it takes the trust-region iterations to the same optimum in as many
    steps (Goodwin 3D: 14-26 iterations either way). :func:`_polish` then takes exact
    Newton steps, so the optimum is the exact one to rounding.
    """

    def __init__(self, lik: WeakLikelihood):
        self.lik = lik
        self._x: np.ndarray | None = None
        self._value = np.inf
        self._grad: np.ndarray | None = None
        self._state: tuple | None = None

    def fun(self, p):
        # scipy's trust-region methods ask for the Hessian at each trial point before its
        # value, and for the value twice: one evaluation per point serves all three
        if self._x is None or not np.array_equal(p, self._x):
            self._x = np.array(p, dtype=float)
            try:
                self._value, self._grad, self._state = self.lik._newton_point(p)
            except WeakLikelihoodError:
                self._value, self._grad, self._state = np.inf, np.zeros_like(self._x), None
        return self._value, self._grad.copy()

    def hess(self, p, exact: bool = False):
        self.fun(p)
        if self._state is None:
            # undefined here: the trial is rejected on its value, so any finite matrix will do
            return np.eye(p.size)
        try:
            return self.lik._newton_hessian(self._state, exact)
        except WeakLikelihoodError:
            return np.eye(p.size)


class _ExactModel:
    """Value and gradient with the exact Hessian, in the interface of :class:`_NewtonModel`:
    the linear-in-parameters fast path (and joint likelihoods), where the precomputed
    coefficient matrices make the exact Hessian cheap."""

    def __init__(self, lik):
        self.fun = _value_and_grad(lik)
        self._hess = _hessian(lik)

    def hess(self, p, exact: bool = True):
        return self._hess(p)


def _objective(lik) -> _NewtonModel | _ExactModel:
    """The MLE's objective: the cheap Newton model off the linear fast path, else the exact
    Hessian. Either way :func:`_polish` finishes with Newton steps, so the optimum does not
    depend on where scipy's gradient tolerance happened to stop (up to 1e-8 of ``p``: a joint
    fit and the same data stacked then differed by that much)."""
    if isinstance(lik, WeakLikelihood) and lik._linear_form(lik.sigma**2) is None:
        return _NewtonModel(lik)
    return _ExactModel(lik)


def _free_set(x, grad, bounds) -> np.ndarray:
    """The parameters not pushing against an active bound (all of them without bounds)."""
    free = np.ones(x.size, dtype=bool)
    if bounds is not None:
        lo, hi = bounds
        span = hi - lo
        free &= ~((x <= lo + 1e-8 * span) & (grad > 0))
        free &= ~((x >= hi - 1e-8 * span) & (grad < 0))
    return free


def _polish(model: _NewtonModel | _ExactModel, x, bounds, exact: bool = False, max_steps: int = 5):
    """Newton steps over the free parameters from the end of the trust-region run.

    scipy stops at ``|g| < gtol``, which with the cheap model leaves up to ``3e-7`` relative
    error in ``p`` on Goodwin 3D; a few full steps, each cutting the error by the model's
    0-4 %, take it to rounding. A step is kept while it stays in the box, the value does
    not rise beyond rounding and the Newton decrement ``g' H^-1 g / 2`` (in the matrix of
    the point it started from) falls; the loop ends after a step that moved no parameter by
    more than ``1e-8`` relative (the decrement alone is no guide: along the weakest
    direction of Goodwin 3D, ``1e-14`` nats is still ``1e-7`` of ``p``). ``exact=True``
    steps with the exact Hessian instead. Returns ``(x, value, grad)``.
    """
    value, grad = model.fun(x)
    for _ in range(max_steps):
        if not np.isfinite(value):
            break
        free = _free_set(x, grad, bounds)
        if not free.any():
            break
        try:
            Lh = np.linalg.cholesky(model.hess(x, exact=exact)[np.ix_(free, free)])
        except np.linalg.LinAlgError:
            break  # not a minimum of the model: leave it to _stationary
        z = sla.solve_triangular(Lh, grad[free], lower=True)
        dec = 0.5 * z @ z
        step = sla.solve_triangular(Lh, z, lower=True, trans="T")
        if np.all(np.abs(step) <= 1e-10 * np.maximum(np.abs(x[free]), 1e-8)):
            break  # not worth an evaluation
        tiny = 1e-14 * (1.0 + abs(value))  # rounding of the value
        y = x.copy()
        y[free] -= step
        if bounds is not None and not np.all((y >= bounds[0]) & (y <= bounds[1])):
            break
        v, g = model.fun(y)
        z_new = sla.solve_triangular(Lh, g[free], lower=True)
        if not (np.isfinite(v) and v <= value + tiny and 0.5 * z_new @ z_new < dec):
            break
        x, value, grad = y, v, g
        if np.all(np.abs(step) <= 1e-8 * np.maximum(np.abs(x[free]), 1e-8)):
            break  # the next step would be 0-4 % of this one: below 4e-10 of p
    return x, value, grad


def wendy_mle(lik: WeakLikelihood, p0=None, **options) -> optimize.OptimizeResult:
    """WENDy-MLE: trust-region Newton on the weak negative log-likelihood from ``p0``.

    ``p0`` defaults to :func:`weak_least_squares`. Uses the analytic gradient and Hessian
    (``scipy.optimize.minimize(method="trust-exact")``); ``options`` go to ``minimize``.
    Off the linear-in-parameters fast path the steps use the cheap Newton model
    (:class:`_NewtonModel`); every path ends with full Newton steps (:func:`_polish`), as in
    :func:`fit`. The low-level building block of :func:`fit` (``method="mle"``), which adds
    bounds, multi-start, convergence checks and a result object.
    """
    start = weak_least_squares(lik) if p0 is None else np.asarray(p0, dtype=float)
    model = _objective(lik)
    fun, hess = model.fun, model.hess
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # trial points outside the domain
        res = optimize.minimize(
            fun, start, jac=True, hess=hess, method="trust-exact", options=options
        )
    res.x, res.fun, res.jac = _polish(model, np.asarray(res.x, dtype=float), None)
    return res


def _mle_run(args) -> dict:
    """One WENDy-MLE optimisation (module level so that process pools can pickle it).

    With bounds, the unconstrained trust-region Newton method runs first: when its minimum
    lies inside the box it is also the constrained one, and it needs a fraction of the
    Hessian evaluations of ``trust-constr`` (measured: 29 against 112-169 on Goodwin 3D). When
    it leaves the box, Newton steps over the parameters off their bounds follow
    (:func:`_active_set_newton`); only if those do not settle does ``trust-constr`` (interior
    point) run, from the start.

    Off the linear-in-parameters fast path, every stage steps with the cheap Newton model of
    :class:`_NewtonModel` (no exact Hessian) and :func:`_polish` finishes with full Newton
    steps (Goodwin 3D, 513 points: 8-14 s per fit before, 1-2 s after, same optimum to
    ``1e-9``; ``docs/performance.md``).
    """
    lik, start, bounds, options = args
    options = dict(options)
    warm = options.pop("warm_start", True)
    model = _objective(lik)
    fun, hess = model.fun, model.hess
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)  # trust-constr's "delta_grad == 0"
        x0 = _warm_start(lik, start, bounds, fun) if warm else start
        res = optimize.minimize(
            fun,
            x0,
            jac=True,
            hess=hess,
            method="trust-exact",
            options={"maxiter": 200, **_subset(options, _TRUST_EXACT)},
        )
        nit, nfev = int(res.nit), int(res.nfev)
        inside = bounds is None or bool(np.all((res.x >= bounds[0]) & (res.x <= bounds[1])))
        if not inside:
            active = _active_set_newton(fun, hess, res.x, bounds, options)
            if active is not None:
                res, inside = active, True
                nit, nfev = nit + int(res.nit), nfev + int(res.nfev)
        if not inside:
            opts = {"maxiter": 1000, "gtol": 1e-8, "xtol": 1e-12, **_subset(options, _TRUST_CONSTR)}
            res = optimize.minimize(
                fun,
                x0,
                jac=True,
                hess=hess,
                method="trust-constr",
                bounds=optimize.Bounds(*bounds, keep_feasible=True),
                options=opts,
            )
            nit, nfev = nit + int(res.nit), nfev + int(res.nfev)
    res.x, value, grad = _polish(model, np.asarray(res.x, dtype=float), bounds)
    message = str(res.message)
    converged = bool(res.success)
    if not converged and _stationary(lik, res.x, value, grad, bounds):
        converged = True
        message = f"converged: predicted further decrease < 1e-6 (optimiser: {message})"
    return {
        "x": np.asarray(res.x, dtype=float),
        "nll": float(value),
        "success": converged and np.isfinite(value),
        "message": message,
        "nit": nit,
        "nfev": nfev,
        "start": np.asarray(start, dtype=float),
    }


def _active_set_newton(fun, hess, x, bounds, options) -> optimize.OptimizeResult | None:
    """Trust-region Newton over the parameters off their bounds, the others held at them.

    Started from the unconstrained minimum clipped into the box: the components it pushed
    out are held at their bounds, the rest minimised (``trust-exact`` on the reduced
    problem); a component that leaves the box is added to the held set, and a held one whose
    gradient points into the box (a KKT violation) is released, the largest first. Returns
    None when that does not settle (then ``trust-constr`` runs). On Goodwin 2D at 5 % noise,
    where the MLE sits on a bound, it reaches ``trust-constr``'s optimum in a fraction of its
    time (``docs/performance.md``).
    """
    lo, hi = bounds
    x = np.clip(x, lo, hi)
    held = (x <= lo) | (x >= hi)
    opts = {"maxiter": 200, **_subset(options, _TRUST_EXACT)}
    nit = nfev = 0
    res = None
    for _ in range(2 * x.size + 2):
        free = ~held
        if free.any():
            base = x.copy()

            def f_free(z, base=base, free=free):
                y = base.copy()
                y[free] = z
                value, grad = fun(y)
                return value, grad[free]

            def h_free(z, base=base, free=free):
                y = base.copy()
                y[free] = z
                return hess(y)[np.ix_(free, free)]

            if not np.isfinite(fun(x)[0]):
                return None
            res = optimize.minimize(
                f_free, x[free], jac=True, hess=h_free, method="trust-exact", options=opts
            )
            nit, nfev = nit + int(res.nit), nfev + int(res.nfev)
            x = base.copy()
            x[free] = res.x
            out = free & ((x < lo) | (x > hi))
            if out.any():
                x = np.clip(x, lo, hi)
                held |= out
                continue
        value, grad = fun(x)
        wrong = held & (((x <= lo) & (grad < 0)) | ((x >= hi) & (grad > 0)))
        if not wrong.any():
            ok = res is None or bool(res.success)
            return optimize.OptimizeResult(
                x=x,
                fun=value,
                jac=grad,
                success=ok,
                message=f"active-set Newton, {int(held.sum())} parameter(s) at a bound"
                + ("" if res is None else f" ({res.message})"),
                nit=nit,
                nfev=nfev,
            )
        held[np.argmax(np.where(wrong, np.abs(grad), -np.inf))] = False
    return None


def _subset(options: Mapping, keys: set[str]) -> dict:
    return {k: v for k, v in options.items() if k in keys}


def _check_options(method: str, options: Mapping, where: str = "options") -> None:
    """Unknown option names and invalid counts or tolerances, before any work is done."""
    if method == "hybrid":
        unknown = set(options) - {"mle", "oels"}
        if unknown:
            raise ValueError(
                f"unknown hybrid {where} {sorted(unknown)}: give a dict with keys 'mle' and "
                "'oels', each holding that method's options"
            )
        for stage in ("mle", "oels"):
            _check_options(stage, dict(options.get(stage) or {}), f"{where}['{stage}']")
        return
    unknown = set(options) - _OPTIONS[method]
    if unknown:
        raise ValueError(
            f"unknown {method} {where} {sorted(unknown)}; valid: {sorted(_OPTIONS[method])}"
        )
    for key, value in options.items():
        if key in _COUNTS and not (
            isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1
        ):
            raise ValueError(f"{where}[{key!r}] must be an integer >= 1; got {value!r}")
        if key in _TOLERANCES and not (
            isinstance(value, int | float | np.number) and np.isfinite(value) and value >= 0
        ):
            raise ValueError(f"{where}[{key!r}] must be a number >= 0; got {value!r}")
    if "warm_start" in options and not isinstance(options["warm_start"], bool | np.bool_):
        raise ValueError(f"{where}['warm_start'] must be True or False")


def _warm_start(lik: WeakLikelihood, start: np.ndarray, bounds, fun) -> np.ndarray:
    """The lowest-NLL point among ``start``, weak least squares from it and, for models
    linear in the parameters, a few IRLS iterations from that.

    None of these needs a forward solve or a Hessian. Weak least squares cuts the Newton
    iterations from far-away starts (SIR-TDI from a random start: 94 to 18-23); IRLS matters
    at high noise, where weak least squares is so biased (logistic at 30 %: estimates of
    either sign) that Newton can end in a spurious minimum (1 of 24 data sets), while IRLS
    lands next to the MLE.
    """
    candidates = [start]
    try:
        p = _wls(lik, start, bounds=bounds)[0]
        candidates.append(p)
        if lik.model.is_linear_in_params:
            q = _irls(lik, p, {"max_iter": 20}, bounds)[0]["x"]
            candidates.append(q if bounds is None else np.clip(q, *bounds))
    except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
        pass
    values = [fun(c)[0] if np.all(np.isfinite(c)) else np.inf for c in candidates]
    return candidates[int(np.argmin(values))]


def _stationary(lik, x, value, grad, bounds, tol: float = 1e-6) -> bool:
    """Whether ``x`` is a local minimum to within ``tol`` nats of predicted improvement.

    scipy's trust-region methods stop with "A bad approximation caused failure to predict
    improvement" when the quadratic model cannot improve any further at machine precision,
    which happens at minima of badly scaled problems. This accepts such a stop when the
    Newton decrement ``g^T H^{-1} g / 2`` (the predicted decrease, in log-likelihood units,
    invariant to the scaling of the parameters) is below ``tol`` over the parameters not held
    at a bound, and the Hessian there is positive definite.
    """
    if not np.isfinite(value):
        return False
    free = np.ones(x.size, dtype=bool)
    if bounds is not None:  # components pushing against an active bound do not count
        lo, hi = bounds
        span = hi - lo
        free &= ~((x <= lo + 1e-8 * span) & (grad > 0))
        free &= ~((x >= hi - 1e-8 * span) & (grad < 0))
    if not free.any():
        return True
    try:
        H = lik.hessian(x)[np.ix_(free, free)]
        Lh = np.linalg.cholesky(H)
    except (WeakLikelihoodError, np.linalg.LinAlgError):
        return False
    z = sla.solve_triangular(Lh, grad[free], lower=True)
    return bool(0.5 * z @ z <= tol)


def _mle(lik, starts, bounds, options, executor):
    jobs = [(lik, s, bounds, dict(options)) for s in starts]
    runs = list(executor.map(_mle_run, jobs) if executor is not None else map(_mle_run, jobs))
    finite = [i for i, r in enumerate(runs) if np.isfinite(r["nll"])]
    best = min(finite, key=lambda i: runs[i]["nll"]) if finite else 0
    out = dict(runs[best])
    out["nfev"] = sum(r["nfev"] for r in runs)
    history = {}
    if len(runs) > 1:
        history = {
            "starts": np.array([r["start"] for r in runs]),
            "estimates": np.array([r["x"] for r in runs]),
            "nll": np.array([r["nll"] for r in runs]),
            "success": np.array([r["success"] for r in runs]),
            "best": best,
        }
    return out, history


# --- WENDy-IRLS ----------------------------------------------------------------------------


def _gls_step(lik: WeakLikelihood, C: np.ndarray, p: np.ndarray, bounds=None) -> np.ndarray:
    """``argmin_q |C^{-1} r(q)|^2`` from ``p``: closed form when linear in the parameters,
    else trust-region reflective least squares inside ``bounds``."""

    def whiten(v):
        return sla.solve_triangular(C, v, lower=True, check_finite=False)

    if lik.model.is_linear_in_params:
        G = lik.dr_dp(p)
        r0 = lik.residual(p) - G @ p
        return np.linalg.lstsq(whiten(G), -whiten(r0), rcond=None)[0]
    n = lik.n_residuals

    def res(q):
        try:
            return whiten(lik.residual(q))
        except WeakLikelihoodError:
            return np.full(n, 1e8)

    def jac(q):
        try:
            return whiten(lik.dr_dp(q))
        except WeakLikelihoodError:
            return np.zeros((n, q.size))

    box = (-np.inf, np.inf)
    if bounds is not None:
        lo, hi = bounds
        width = hi - lo
        p = np.clip(p, lo + 1e-9 * width, hi - 1e-9 * width)  # trf needs a strictly feasible start
        box = (lo, hi)
    return optimize.least_squares(res, p, jac=jac, bounds=box, method="trf", x_scale="jac").x


def _irls(
    lik: WeakLikelihood, p_init: np.ndarray, options: Mapping, bounds=None
) -> tuple[dict, dict]:
    opts = {**_IRLS_DEFAULTS, **options}
    unknown = set(opts) - set(_IRLS_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown IRLS options {sorted(unknown)}; known: {list(_IRLS_DEFAULTS)}")
    s2 = lik.sigma**2
    p = np.asarray(p_init, dtype=float)
    iterates, pvalues, objective = [p], [np.nan], [np.nan]
    status, message = "max_iter", f"reached max_iter = {opts['max_iter']} iterations"
    chosen = None  # index of the returned iterate when it is not the last one
    for n in range(1, int(opts["max_iter"]) + 1):
        try:
            C = lik._evaluation(p, s2).C
            p_new = _gls_step(lik, C, p, bounds)
            w = sla.solve_triangular(C, lik.residual(p_new), lower=True, check_finite=False)
        except (WeakLikelihoodError, np.linalg.LinAlgError) as exc:
            status, message = "failed", f"iteration {n}: {exc}"
            break
        change = np.linalg.norm(p_new - p) / max(np.linalg.norm(p), np.finfo(float).tiny)
        p = p_new
        iterates.append(p)
        objective.append(0.5 * float(w @ w))
        pvalues.append(stats.shapiro(w).pvalue if n > opts["sw_start"] else np.nan)
        if change < opts["tol"]:
            status = "converged"
            message = f"relative change {change:.2g} < tol = {opts['tol']:g} after {n} iterations"
            break
        if n > opts["sw_start"] and pvalues[-1] < opts["sw_tol"]:
            status = "normality"
            best = int(np.nanargmax(pvalues))
            message = (
                f"Shapiro-Wilk p-value {pvalues[-1]:.2g} < {opts['sw_tol']:g} at iteration {n}; "
                f"returning iteration {best} (largest p-value, {pvalues[best]:.2g})"
            )
            p, chosen = iterates[best], best
            break
    history = {
        "iterates": np.array(iterates),
        "shapiro_pvalue": np.array(pvalues),
        "objective": np.array(objective),
    }
    idx = len(iterates) - 1 if chosen is None else chosen
    if status != "failed" and not np.isfinite(_safe_nll(lik, p)):
        # a fixed point of the reweighting may lie where the weak likelihood cannot be
        # evaluated (S(p) singular or not finite); never report that as success
        status = "failed"
        message += "; the weak likelihood is undefined at the result (try bounds)"
    out = {
        "x": p,
        "fun": float(objective[idx]) if idx > 0 else np.nan,
        # a Shapiro-Wilk stop is one of Algorithm 2's rules, not a failure
        "success": status in ("converged", "normality"),
        "status": status,
        "message": message,
        "nit": len(iterates) - 1,
    }
    return out, history


# --- entry point ---------------------------------------------------------------------------


def _check_bounds(bounds, J: int, names) -> tuple[np.ndarray, np.ndarray] | None:
    if bounds is None:
        return None
    if isinstance(bounds, optimize.Bounds):
        lo, hi = np.broadcast_to(bounds.lb, (J,)), np.broadcast_to(bounds.ub, (J,))
    else:
        b = np.asarray(bounds, dtype=float)
        if b.shape != (J, 2):
            raise ValueError(
                f"bounds must be {J} (lower, upper) pairs, one per parameter {list(names)}; "
                f"got shape {b.shape}"
            )
        lo, hi = b[:, 0], b[:, 1]
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    bad = ~(lo < hi) | np.isnan(lo) | np.isnan(hi)
    if np.any(bad):
        j = int(np.argmax(bad))
        raise ValueError(f"bounds for {names[j]} must satisfy lower < upper; got {lo[j], hi[j]}")
    return lo, hi


def _check_p0(p0, J: int, names, bounds) -> np.ndarray | None:
    if p0 is None:
        return None
    p = np.asarray(p0, dtype=float)
    if p.shape != (J,):
        raise ValueError(f"p0 must have {J} entries ({list(names)}); got shape {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"p0 must be finite; got {p}")
    if bounds is not None:
        outside = (p < bounds[0]) | (p > bounds[1])
        if np.any(outside):
            j = int(np.argmax(outside))
            raise ValueError(
                f"p0 for {names[j]} = {p[j]:g} is outside its bounds "
                f"({bounds[0][j]:g}, {bounds[1][j]:g})"
            )
    return p


#: Points of the scrambled Sobol design screened for a start when a model is nonlinear in its
#: parameters (``docs/estimators.md``: on Goodwin 2D the box's centre led to a local minimum).
_SCREEN_STARTS = 16


def _default_start(lik: WeakLikelihood | None, model: ODEModel, bounds) -> np.ndarray:
    """Weak least squares for linear-in-parameter models; otherwise the best of bounded weak
    least squares from the box's centre and a Sobol design in the box."""
    if model.is_linear_in_params and lik is not None:
        p = weak_least_squares(lik)
        return p if bounds is None else np.clip(p, *bounds)
    if bounds is None:
        raise ValueError(
            f"{model.name} is nonlinear in its parameters: give a starting point p0, or "
            "bounds (then the search starts from the best of weak least squares fits "
            "started in them)"
        )
    lo, hi = bounds
    centre = 0.5 * (lo + hi)
    if lik is None or not np.all(np.isfinite(centre)):
        return centre
    design = stats.qmc.Sobol(lo.size, seed=0).random(_SCREEN_STARTS)
    best, best_rss = centre, np.inf
    for s in (centre, *stats.qmc.scale(design, lo, hi)):
        try:
            p = _wls_bounded(lik, s, bounds, 20)[0]
            r = lik.residual(p)
        except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
            continue
        rss = float(r @ r)
        if np.isfinite(rss) and rss < best_rss:
            best, best_rss = p, rss
    return best


def _starts(first: np.ndarray, n_starts: int, bounds, seed) -> list[np.ndarray]:
    if n_starts < 1:
        raise ValueError(f"n_starts must be >= 1; got {n_starts}")
    if n_starts == 1:
        return [first]
    if bounds is None or not np.all(np.isfinite(np.concatenate(bounds))):
        raise ValueError(
            "n_starts > 1 draws starting points uniformly in bounds: give finite bounds"
        )
    rng = np.random.default_rng(seed)
    draws = rng.uniform(bounds[0], bounds[1], size=(n_starts - 1, first.size))
    return [first, *draws]


def _likelihood_of(model, t, U, noise, sigma, test_functions, ridge):
    if isinstance(model, WeakLikelihood | JointLikelihood):
        if t is not None or U is not None:
            raise ValueError("pass either a likelihood, or a model with t and U; not both")
        given = {"noise": noise != "normal", "sigma": sigma is not None}
        given |= {"test_functions": test_functions is not None, "ridge": ridge != 1e-10}
        clash = [k for k, v in given.items() if v]
        if clash:
            raise ValueError(
                f"{clash} are fixed by the {type(model).__name__} passed; do not pass them"
            )
        return model
    if not isinstance(model, ODEModel):
        raise TypeError(
            "model must be an ODEModel or a WeakLikelihood (or JointLikelihood); "
            f"got {type(model)!r}"
        )
    if t is None or U is None:
        raise ValueError("t and U are required with an ODEModel")
    if _several(t, U):
        return _joint_likelihood(model, t, U, noise, sigma, test_functions, ridge)
    return WeakLikelihood(
        model, t, U, noise=noise, sigma=sigma, test_functions=test_functions, ridge=ridge
    )


def _several(t, U) -> bool:
    """Whether ``t`` and ``U`` are lists of experiments (``[t1, t2]``, ``[U1, U2]``)."""
    many_t = isinstance(t, list | tuple) and any(np.ndim(x) >= 1 for x in t)
    many_U = isinstance(U, list | tuple) and len(U) > 0 and all(np.ndim(x) >= 2 for x in U)
    if many_t != many_U:
        raise ValueError(
            "for several experiments give t and U as lists of the same length, one time "
            "array and one (M_e+1, D) data array per experiment ([t1, t2], [U1, U2]); got "
            f"{'a list' if many_t else 'one array'} of times and "
            f"{'a list' if many_U else 'one array'} of data"
        )
    if many_t and len(t) != len(U):
        raise ValueError(f"{len(t)} time arrays but {len(U)} data arrays")
    return many_t


def _per_experiment(value, E: int, what: str, is_single) -> list:
    """``value`` for each of ``E`` experiments: one shared value or a sequence of ``E``."""
    if value is None or is_single(value):
        return [value] * E
    if not isinstance(value, list | tuple | np.ndarray) or len(value) != E:
        raise ValueError(
            f"{what} for {E} experiments: give one value for all, or a list with one entry "
            f"per experiment; got {value!r}"
        )
    return list(value)


def _is_scalar(v) -> bool:
    return not isinstance(v, list | tuple) and np.ndim(v) == 0


def _is_one_test_function_spec(v) -> bool:
    """Options, ready test functions, or one ``(phi, dphi)`` pair of matrices."""
    if isinstance(v, Mapping | TestFunctions):
        return True
    return isinstance(v, list | tuple) and len(v) == 2 and all(np.ndim(m) == 2 for m in v)


def _joint_likelihood(model, t, U, noise, sigma, test_functions, ridge) -> JointLikelihood:
    E = len(t)
    sigmas = _per_experiment(sigma, E, "sigma", _is_scalar)
    specs = _per_experiment(test_functions, E, "test_functions", _is_one_test_function_spec)
    experiments = []
    for i in range(E):
        try:
            experiments.append(
                WeakLikelihood(
                    model,
                    t[i],
                    U[i],
                    noise=noise,
                    sigma=sigmas[i],
                    test_functions=specs[i],
                    ridge=ridge,
                )
            )
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"experiment {i}: {exc}") from None
    return JointLikelihood(experiments)


def _oe_data(model: ODEModel, t, U, noise, sigma):
    """Validated data and noise level for output error without a weak likelihood."""
    if noise not in ("normal", "lognormal"):
        raise ValueError(f"noise must be 'normal' or 'lognormal'; got {noise!r}")
    t, U = check_data(t, U, model.n_states)
    if noise == "lognormal":
        check_positive_data(t, U, model.states)
    Z = np.log(U) if noise == "lognormal" else U
    if sigma is None:
        return t, U, estimate_noise(Z), True
    s = np.broadcast_to(np.asarray(sigma, dtype=float), (model.n_states,)).copy()
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"sigma must be finite and positive; got {s}")
    return t, U, s, False


@single_blas_thread
def fit(
    model: ODEModel | WeakLikelihood,
    t=None,
    U=None,
    method: Method = "mle",
    *,
    p0=None,
    bounds=None,
    noise: Noise = "normal",
    sigma=None,
    u0=None,
    test_functions=None,
    ridge: float = 1e-10,
    n_starts: int = 1,
    seed: int | None = None,
    executor: Executor | None = None,
    solver: Mapping | None = None,
    options: Mapping | None = None,
    bias_correction: str | None = None,
) -> FitResult:
    """Estimate the parameters of an ODE from noisy data.

    Parameters
    ----------
    model : ODEModel, WeakLikelihood or JointLikelihood
        The ODE, or a ready weak likelihood of one or several experiments (then ``t``,
        ``U``, ``noise``, ``sigma``, ``test_functions`` and ``ridge`` come from it).
    t : array, shape (M+1,), or list of arrays
        Strictly increasing observation times; for several experiments sharing the
        parameters, a list with one time array per experiment (each its own grid).
    U : array, shape (M+1, D), or list of arrays
        Observations; a list ``[U1, U2, ...]`` matching ``t`` for several experiments.
        Their weak residuals are independent, so the objective is the sum of the
        experiments' (:class:`~pymc_wendy.experiments.JointLikelihood`;
        ``docs/experiments.md``).
    method : {"mle", "irls", "wls", "oels", "hybrid"}
        Estimator (module docstring).
    p0 : array, shape (J,), optional
        Starting point. Default: weak least squares for models linear in the parameters;
        otherwise the centre of ``bounds`` refined by weak least squares (a nonlinear model
        needs ``p0`` or ``bounds``).
    bounds : sequence of (lower, upper) or scipy.optimize.Bounds, optional
        Box constraints on ``p`` (``"mle"``, ``"oels"``, ``"hybrid"``, ``"wls"``, and the
        inner solves of ``"irls"`` for nonlinear-in-parameters models; IRLS's closed-form
        steps for linear models are unconstrained) and the box multi-start points are drawn
        from.
    noise : {"normal", "lognormal"}
        Additive Gaussian or multiplicative log-normal noise.
    sigma : float or array (D,), optional
        Noise standard deviation per state (of ``log U`` for log-normal noise); estimated
        from the data with the high-order filter when omitted. For several experiments, a
        scalar for all, or a list with one entry (None, scalar or (D,)) per experiment.
    u0 : array (D,), optional
        Starting initial state for output error (default: the value at ``t[0]`` of a
        parabola fitted to the first points of the data); shape (E, D), a row per
        experiment, for several experiments (each has its own initial state).
    test_functions : TestFunctions, dict, or (phi, dphi), optional
        See :class:`WeakLikelihood`. For several experiments, a dict of options for all, or
        a list with one entry per experiment.
    ridge : float
        Covariance relaxation ``S <- (1 - ridge) S + ridge I`` (IRLS's ``alpha``).
    n_starts : int
        ``"mle"``/``"hybrid"``: number of starting points; the first is ``p0`` (or its
        default), the others are drawn uniformly in ``bounds`` with ``seed``. The lowest
        finite NLL wins.
    seed : int, optional
        Seed of the multi-start draws.
    executor : concurrent.futures.Executor, optional
        Runs the multi-start optimisations (e.g. a ``ProcessPoolExecutor`` or a Dask
        client's executor); default: one after another in this process.
    solver : dict, optional
        Forward-solver options for output error (:data:`output_error.DEFAULT_SOLVER`).
    options : dict, optional
        Method options: for ``"mle"`` those of ``scipy.optimize.minimize`` (``maxiter``,
        ``gtol``, ...); for ``"irls"`` ``max_iter`` (100), ``tol`` (1e-6), ``sw_tol`` (1e-4),
        ``sw_start`` (10); for ``"oels"`` those of ``scipy.optimize.least_squares``; for
        ``"wls"`` ``max_iter`` and ``tol`` of the Gauss-Newton iteration; for ``"hybrid"`` a
        dict with keys ``"mle"`` and ``"oels"``.
    bias_correction : {None, "auto", "analytic", "profile"}
        ``method="mle"`` only. Remove the weak form's ``O(sigma^2)`` bias
        (:mod:`pymc_wendy.bias`, ``docs/bias.md``): ``"profile"`` minimises the quadratic
        form without the log-determinant; ``"analytic"`` (what ``"auto"`` picks) also
        subtracts the closed-form mean of its score. The result's estimate, covariances and
        intervals are the corrected ones; ``result.bias_correction`` keeps the uncorrected
        fit, the shift and the cost. ``None`` (default) is WENDy-MLE.

    Returns
    -------
    FitResult
        Estimate, covariances, intervals, status. An estimator that did not converge sets
        ``success=False`` and issues a :class:`FitWarning`.

    Examples
    --------
    >>> import pymc_wendy as pw
    >>> data = pw.get_problem("logistic").simulate(noise_ratio=0.05, subsample=2, seed=1)
    >>> res = pw.fit(pw.get_problem("logistic").model, data.t, data.U)
    >>> res.success, res.x.round(1)
    (True, array([1., 1.]))
    """
    start_time = time.perf_counter()
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    correction = bias.resolve(bias_correction)
    if correction is not None and method != "mle":
        raise ValueError(
            f"bias_correction applies to method='mle' (the corrected objective replaces the "
            f"weak likelihood); got method={method!r}"
        )
    if isinstance(model, WeakLikelihood | JointLikelihood) and model.correction_method:
        raise ValueError(
            "the likelihood is already bias-corrected; fit the uncorrected likelihood "
            "with bias_correction= instead"
        )
    options = dict(options or {})
    _check_options(method, options)
    if method == "oels":
        if isinstance(model, WeakLikelihood | JointLikelihood):
            lik = model
            base, t_, U_, s, s_est = lik.base_model, lik.t, lik.U, lik.sigma, lik.sigma_estimated
            noise = lik.noise
        else:
            if not isinstance(model, ODEModel):
                raise TypeError(f"model must be an ODEModel or a WeakLikelihood; got {model!r}")
            lik, base = None, model
            if _several(t, U):
                E = len(t)
                sigmas = _per_experiment(sigma, E, "sigma", _is_scalar)
                parts = [_oe_data(model, t[e], U[e], noise, sigmas[e]) for e in range(E)]
                t_, U_ = tuple(p[0] for p in parts), tuple(p[1] for p in parts)
                s, s_est = np.array([p[2] for p in parts]), any(p[3] for p in parts)
            else:
                t_, U_, s, s_est = _oe_data(model, t, U, noise, sigma)
    else:
        lik = _likelihood_of(model, t, U, noise, sigma, test_functions, ridge)
        base, t_, U_, s, s_est, noise = (
            lik.base_model,
            lik.t,
            lik.U,
            lik.sigma,
            lik.sigma_estimated,
            lik.noise,
        )
    J, names = base.n_params, base.params
    box = _check_bounds(bounds, J, names)
    p_start = _check_p0(p0, J, names, box)
    if p_start is None and not (method == "wls" and base.is_linear_in_params):
        if lik is None and base.is_linear_in_params:  # output error: start at weak LS
            if isinstance(t_, tuple):
                tf_lik = _joint_likelihood(base, t_, U_, noise, list(s), None, ridge)
            else:
                tf_lik = WeakLikelihood(base, t_, U_, noise=noise, sigma=s, ridge=ridge)
            p_start = _default_start(tf_lik, base, box)
        else:
            p_start = _default_start(lik, base, box)
    common = {
        "model": base,
        "sigma": np.asarray(s, dtype=float),
        "sigma_estimated": bool(s_est),
        "noise": noise,
        "t": t_,
        "U": U_,
        "likelihood": lik,
    }

    if method == "wls":
        p, nit, ok = _wls(lik, p_start, bounds=box, **options)
        r = lik.residual(p)
        res = FitResult(
            x=p,
            method=method,
            success=ok,
            status="converged" if ok else "max_iter",
            message=_wls_message(base.is_linear_in_params, box is not None, ok),
            nit=nit,
            nfev=nit + 1,
            wall_time=0.0,
            fun=0.5 * float(r @ r),
            nll=_safe_nll(lik, p),
            covariance_kind=DEFAULT_COVARIANCE["wls"],
            **common,
        )
    elif method == "irls":
        out, history = _irls(lik, p_start, options, box)
        res = FitResult(
            x=out["x"],
            method=method,
            success=out["success"],
            status=out["status"],
            message=out["message"],
            nit=out["nit"],
            nfev=out["nit"],
            wall_time=0.0,
            fun=out["fun"],
            nll=_safe_nll(lik, out["x"]),
            covariance_kind=DEFAULT_COVARIANCE["irls"],
            history=history,
            **common,
        )
    elif method == "oels":
        res = _fit_oe(base, t_, U_, p_start, u0, noise, s, s_est, box, solver, options, common)
    else:
        mle_opts = options.get("mle", {}) if method == "hybrid" else options
        starts = _starts(p_start, n_starts, box, seed)
        out, history = _mle(lik, starts, box, mle_opts, executor)
        res = FitResult(
            x=out["x"],
            method="mle",
            success=out["success"],
            status="converged" if out["success"] else "not_converged",
            message=out["message"],
            nit=out["nit"],
            nfev=out["nfev"],
            wall_time=0.0,
            fun=out["nll"],
            nll=out["nll"],
            covariance_kind=DEFAULT_COVARIANCE["mle"],
            history=history,
            **common,
        )
        if method == "hybrid":
            res = _hybrid(res, u0, box, solver, options.get("oels", {}), common)
        elif correction is not None:
            res.wall_time = time.perf_counter() - start_time
            res = _bias_corrected(res, correction, box, mle_opts, common)
    res.wall_time = time.perf_counter() - start_time
    if not res.success:
        warnings.warn(f"{method}: {res.message}", FitWarning, stacklevel=2)
    return res


def _bias_corrected(mle: FitResult, method: str, box, options, common) -> FitResult:
    """Minimise the corrected objective of ``method`` from the MLE (:mod:`pymc_wendy.bias`).

    ``"profile"`` is one minimisation of the quadratic form from the MLE. ``"analytic"``
    starts there too and then minimises the tilted objective with the score mean evaluated
    at the profile estimate (a second evaluation moved the estimate by < 1 % of a standard
    error in the measurements of ``docs/bias.md``).
    """
    start = time.perf_counter()
    lik = common["likelihood"]
    opts = {**options, "warm_start": False}
    stages: dict[str, np.ndarray] = {}
    nit = nfev = 0
    x, success, messages, clik = mle.x, mle.success, [], None
    for stage in ("profile", "analytic")[: 1 + (method == "analytic")]:
        try:
            trial = bias.corrected_likelihood(lik, stage, x)
        except WeakLikelihoodError as exc:  # d2f/du2 undefined at the data, say
            success = False
            messages.append(f"{stage}: {exc}")
            break
        out, _ = _mle(trial, [x], box, opts, None)
        clik, x = trial, out["x"]
        stages[stage] = x.copy()
        nit, nfev = nit + out["nit"], nfev + out["nfev"]
        success = success and out["success"]
        messages.append(f"{stage}: {out['message']}")
    if clik is None:
        raise WeakLikelihoodError(f"bias correction failed at the MLE: {messages[0]}")
    value = clik.nll(x) if np.all(np.isfinite(x)) else np.inf
    record = BiasCorrection(
        method=method,
        uncorrected=mle,
        shift=x - mle.x,
        tilt=clik.tilt,
        reference=clik._correction["reference"].copy(),
        stages=stages,
        nit=nit,
        nfev=nfev,
        wall_time=time.perf_counter() - start,
    )
    return FitResult(
        x=x,
        method="mle",
        success=bool(success),
        status="converged" if success else "not_converged",
        message=f"bias-corrected ({method}); " + "; ".join(messages),
        nit=mle.nit + nit,
        nfev=mle.nfev + nfev,
        wall_time=0.0,
        fun=float(value),
        nll=_safe_nll(lik, x),
        covariance_kind=DEFAULT_COVARIANCE["mle"],
        history=mle.history,
        bias_correction=record,
        **{**common, "likelihood": clik},
    )


def _wls_message(linear: bool, bounded: bool, ok: bool) -> str:
    if linear and not bounded:
        return "closed form (linear in the parameters)"
    how = "bounded linear least squares" if linear else "nonlinear least squares"
    return f"{how} {'converged' if ok else 'stopped before convergence'}"


def _safe_nll(lik: WeakLikelihood, p) -> float:
    try:
        return float(lik.nll(p))
    except WeakLikelihoodError:
        return np.inf


def _solves(model: ODEModel, p, u0, t, solver) -> bool:
    from pymc_wendy.output_error import DEFAULT_SOLVER
    from pymc_wendy.problems import SimulationError, solve

    try:
        return bool(
            np.all(np.isfinite(solve(model, p, u0, t, **{**DEFAULT_SOLVER, **(solver or {})})))
        )
    except (SimulationError, ValueError):
        return False


def _fit_oe(model, t, U, p_start, u0, noise, sigma, sigma_est, box, solver, options, common):
    from pymc_wendy.output_error import (
        _fit_initial_state,
        _from_log,
        _local_quadratic_start,
        output_error,
    )

    D = model.n_states
    several = isinstance(t, tuple)
    if u0 is None:
        starts = []
        for te, Ue in zip(t, U, strict=True) if several else [(t, U)]:
            Z = np.log(Ue) if noise == "lognormal" else Ue
            start = _from_log(_local_quadratic_start(te, Z), noise)
            if several and not _solves(model, p_start, start, te, solver):
                # The local fit's start blows up (a noisy small state below zero, say); one
                # such experiment would stop the joint fit. A single experiment keeps the
                # papers' protocol, which docs/validation.md reproduces (with this fallback,
                # output error on logistic growth at 30 % noise no longer fails: median
                # coefficient error 0.061 against 1.1, WENDy-MLE 0.057).
                start = _fit_initial_state(model, te, Z, noise, p_start, solver)
            starts.append(start)
        u0 = np.array(starts) if several else starts[0]
    else:
        u0 = np.asarray(u0, dtype=float)
        shape = (len(t), D) if several else (D,)
        if u0.shape != shape or not np.all(np.isfinite(u0)):
            what = f"{len(t)} x {D} (one row per experiment)" if several else f"{D}"
            raise ValueError(f"u0 must be {what} finite values; got {u0!r}")
    oe = output_error(
        model,
        list(t) if several else t,
        list(U) if several else U,
        p_start,
        u0,
        noise=noise,
        sigma=sigma,
        bounds=box,
        solver=solver,
        options=options,
    )
    J = model.n_params
    if oe.solve_failed:  # no trajectory, so no Jacobian: nothing to say about uncertainty
        cov = np.full((J, J), np.nan)
    else:
        cov = np.linalg.pinv(oe.jacobian.T @ oe.jacobian)[:J, :J]
    if sigma_est:  # scale by the reduced chi-square of the fit
        cov = cov * (2.0 * oe.cost / max(oe.n_residuals - oe.jacobian.shape[1], 1))
    lik = common["likelihood"]
    message = oe.message
    if oe.n_failed_solves:
        message += f" ({oe.n_failed_solves} forward solves failed at trial points)"
    return FitResult(
        x=oe.p,
        method="oels",
        success=oe.success,
        status="failed" if oe.solve_failed else "converged" if oe.success else "not_converged",
        message=message,
        nit=oe.njev,
        nfev=oe.nfev,
        wall_time=oe.wall_time,
        fun=oe.cost,
        nll=None if lik is None else _safe_nll(lik, oe.p),
        covariance_kind="oe",
        u0=oe.u0,
        history={"n_failed_solves": oe.n_failed_solves},
        _oe_covariance=cov,
        **common,
    )


def _hybrid(mle: FitResult, u0, box, solver, options, common) -> FitResult:
    from pymc_wendy.output_error import estimate_initial_state

    lik = common["likelihood"]
    if u0 is None and np.isfinite(mle.nll):
        if isinstance(lik, JointLikelihood):
            u0 = np.array(
                [estimate_initial_state(e, mle.x, solver=solver) for e in lik.experiments]
            )
        else:
            u0 = estimate_initial_state(lik, mle.x, solver=solver)
    oe = _fit_oe(
        mle.model,
        mle.t,
        mle.U,
        mle.x,
        u0,
        mle.noise,
        mle.sigma,
        mle.sigma_estimated,
        box,
        solver,
        options,
        common,
    )
    threshold = mle.nll + _HYBRID_TOLERANCE * abs(mle.nll)
    keep_oe = oe.success and oe.nll is not None and oe.nll <= threshold
    chosen = oe if keep_oe else mle
    if keep_oe:
        why = f"output error kept: weak NLL {oe.nll:.6g} <= {threshold:.6g}"
    elif not oe.success:
        why = "WENDy-MLE kept: output error failed"
    else:
        why = f"WENDy-MLE kept: output error weak NLL {oe.nll:.6g} > {threshold:.6g}"
    return FitResult(
        x=chosen.x,
        method="hybrid",
        success=mle.success and (oe.success or not keep_oe),
        status="output_error" if keep_oe else "fallback",
        message=f"{why} (MLE: {mle.message}; output error: {oe.message})",
        nit=mle.nit + oe.nit,
        nfev=mle.nfev + oe.nfev,
        wall_time=0.0,
        fun=chosen.fun,
        nll=chosen.nll,
        covariance_kind=chosen.covariance_kind,
        u0=oe.u0 if keep_oe else None,
        history={"mle": mle, "oels": oe},
        _oe_covariance=oe._oe_covariance if keep_oe else None,
        **common,
    )
