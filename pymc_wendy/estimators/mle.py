"""WENDy-MLE, ``fit(method="mle")``: the minimum of the weak negative log-likelihood.

Trust-region Newton with the analytic gradient and Hessian (``trust-exact``; with box
bounds, Newton steps over the parameters off their bounds and, only if those do not
settle, ``trust-constr``), from a warm start, optionally from several starts keeping the
lowest NLL, and finished by exact Newton polish steps (:mod:`._newton`). With
``bias_correction`` the corrected objective of :mod:`pymc_wendy.weak.bias` is minimised from the
MLE.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from scipy import optimize

# _newton is the MLE's own optimiser, split out for length: its helpers serve this module only
from pymc_wendy.estimators._newton import (
    TRUST_CONSTR,
    TRUST_EXACT,
    _active_set_newton,
    _objective,
    _polish,
    _stationary,
    _subset,
)
from pymc_wendy.estimators._problem import FitProblem, safe_nll
from pymc_wendy.estimators.irls import run_irls
from pymc_wendy.estimators.registry import Estimator
from pymc_wendy.estimators.results import BiasCorrection, FitResult
from pymc_wendy.estimators.wls import solve_wls, weak_least_squares
from pymc_wendy.weak import bias
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.protocol import Likelihood

__all__ = ["wendy_mle"]


def wendy_mle(
    lik: Likelihood, p0=None, *, warm_start: bool = False, **options
) -> optimize.OptimizeResult:
    """WENDy-MLE: trust-region Newton on the weak negative log-likelihood from ``p0``.

    ``p0`` defaults to :func:`weak_least_squares`. ``warm_start=True`` starts instead from
    the lowest-NLL point among ``p0``, weak least squares from it and, for a model linear in
    its parameters, IRLS from that, as :func:`fit` does (head acceleration at 10 % noise:
    from weak least squares alone Newton stops at NLL 1960, from IRLS at 281). Uses the
    analytic gradient and Hessian
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
        if warm_start:
            start = _warm_start(lik, start, None, fun)
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
            options={"maxiter": 200, **_subset(options, TRUST_EXACT)},
        )
        nit, nfev = int(res.nit), int(res.nfev)
        inside = bounds is None or bool(np.all((res.x >= bounds[0]) & (res.x <= bounds[1])))
        if not inside:
            active = _active_set_newton(fun, hess, res.x, bounds, options)
            if active is not None:
                res, inside = active, True
                nit, nfev = nit + int(res.nit), nfev + int(res.nfev)
        if not inside:
            opts = {"maxiter": 1000, "gtol": 1e-8, "xtol": 1e-12, **_subset(options, TRUST_CONSTR)}
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


def _warm_start(lik: Likelihood, start: np.ndarray, bounds, fun) -> np.ndarray:
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
        p = solve_wls(lik, start, bounds=bounds)[0]
        candidates.append(p)
        if lik.model.is_linear_in_params:
            q = run_irls(lik, p, {"max_iter": 20}, bounds)[0]["x"]
            candidates.append(q if bounds is None else np.clip(q, *bounds))
    except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
        pass
    values = [fun(c)[0] if np.all(np.isfinite(c)) else np.inf for c in candidates]
    return candidates[int(np.argmin(values))]


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


def _bias_corrected(mle: FitResult, method: str, problem: FitProblem, options) -> FitResult:
    """Minimise the corrected objective of ``method`` from the MLE (:mod:`pymc_wendy.weak.bias`).

    ``"profile"`` is one minimisation of the quadratic form from the MLE. ``"analytic"``
    starts there too and then minimises the tilted objective with the score mean evaluated
    at the profile estimate (a second evaluation moved the estimate by < 1 % of a standard
    error in the measurements of ``docs/bias.md``).
    """
    start = time.perf_counter()
    lik, box = problem.likelihood, problem.bounds
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
        reference=clik.correction.reference.copy(),
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
        nll=safe_nll(lik, x),
        covariance_kind="hessian",
        history=mle.history,
        bias_correction=record,
        **{**problem.common(), "likelihood": clik},
    )


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


def run(problem: FitProblem) -> FitResult:
    """``fit(method="mle")``, with its bias correction when asked for."""
    start = time.perf_counter()
    result = fit_mle(problem, problem.options)
    if problem.bias_correction is None:
        return result
    result.wall_time = time.perf_counter() - start  # the uncorrected fit's own time
    return _bias_corrected(result, problem.bias_correction, problem, problem.options)


def fit_mle(problem: FitProblem, options) -> FitResult:
    """The WENDy-MLE of ``problem`` with MLE ``options`` (multi-start included)."""
    starts = _starts(problem.start, problem.n_starts, problem.bounds, problem.seed)
    starts += list(problem.runner_ups)
    out, history = _mle(problem.likelihood, starts, problem.bounds, options, problem.executor)
    return FitResult(
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
        covariance_kind="hessian",
        history=history,
        **problem.common(),
    )


ESTIMATOR = Estimator(
    name="mle",
    run=run,
    options=TRUST_EXACT | TRUST_CONSTR | {"warm_start"},
    summary="WENDy-MLE: trust-region Newton on the weak negative log-likelihood",
    covariance="hessian",
    alternatives=("sandwich", "gls"),
    operator_models=True,
    initial_state=True,
    weak_only=True,
    bias_correction=True,
)
