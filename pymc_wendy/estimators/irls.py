"""WENDy-IRLS, ``fit(method="irls")`` (WENDy 2023, Algorithm 2).

Generalised least squares with the weight ``S(p_prev)^{-1}`` updated each iteration,
stopping on a fixed point, an iteration cap, or a failed Shapiro-Wilk test of the whitened
residual after ``sw_start`` iterations (then the iterate with the largest p-value is
returned). Models nonlinear in the parameters solve a weighted nonlinear least-squares
problem per iteration. With ``bounds`` every step stays in the box: for models linear in the
parameters each step is bounded linear least squares on the whitened system
(``scipy.optimize.lsq_linear``), so the fixed point is the bounded GLS estimate (the closed
form clipped afterwards would not be).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import linalg as sla
from scipy import optimize, stats

from pymc_wendy.estimators._bounds import strictly_inside
from pymc_wendy.estimators._problem import FitProblem, safe_nll
from pymc_wendy.estimators.registry import Estimator
from pymc_wendy.estimators.results import FitResult
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.protocol import Likelihood

_DEFAULTS = {"max_iter": 100, "tol": 1e-6, "sw_tol": 1e-4, "sw_start": 10}


def _whitener(lik: Likelihood, p: np.ndarray):
    """``v -> C^-1 v`` at ``p``: the likelihood's own (banded for local test functions), or
    from its dense covariance factor."""
    own = getattr(lik, "whitener", None)
    if own is not None:
        return own(p)
    C = lik.covariance_factor(p)
    return lambda v: sla.solve_triangular(C, v, lower=True, check_finite=False)


def _gls_step(lik: Likelihood, whiten, p: np.ndarray, bounds=None) -> np.ndarray:
    """``argmin_q |C^{-1} r(q)|^2`` inside ``bounds`` from ``p`` (``whiten`` applies
    ``C^-1``): linear least squares when linear in the parameters (closed form, or
    ``lsq_linear`` on the whitened system with bounds), else trust-region reflective least
    squares."""

    if lik.model.is_linear_in_params:
        G = lik.dr_dp(p)
        A, b = whiten(G), -whiten(lik.residual(p) - G @ p)
        # unit columns: lstsq's rank cut-off is relative to the largest singular value, so
        # parameters of very different units would otherwise lose digits (issue 33)
        scale = np.linalg.norm(A, axis=0)
        scale[scale == 0] = 1.0
        A = A / scale
        if bounds is None:
            return np.linalg.lstsq(A, b, rcond=None)[0] / scale
        # the fixed point of bounded GLS steps is the bounded IRLS estimate; an unbounded
        # closed form clipped afterwards would not be (nor a minimum of anything)
        box = (bounds[0] * scale, bounds[1] * scale)
        return optimize.lsq_linear(A, b, bounds=box, method="bvls").x / scale
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
        p = strictly_inside(p, *bounds)  # trf needs a strictly feasible start
        box = bounds
    return optimize.least_squares(res, p, jac=jac, bounds=box, method="trf", x_scale="jac").x


def run_irls(
    lik: Likelihood, p_init: np.ndarray, options: Mapping, bounds=None
) -> tuple[dict, dict]:
    """WENDy-IRLS iterations from ``p_init`` (the MLE's warm start uses them too); returns
    the chosen iterate's fields and the iteration history."""
    opts = {**_DEFAULTS, **options}
    unknown = set(opts) - set(_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown IRLS options {sorted(unknown)}; known: {list(_DEFAULTS)}")
    p = np.asarray(p_init, dtype=float)
    iterates, pvalues, objective = [p], [np.nan], [np.nan]
    status, message = "max_iter", f"reached max_iter = {opts['max_iter']} iterations"
    chosen = None  # index of the returned iterate when it is not the last one
    for n in range(1, int(opts["max_iter"]) + 1):
        try:
            whiten = _whitener(lik, p)
            p_new = _gls_step(lik, whiten, p, bounds)
            w = whiten(lik.residual(p_new))
            w_old = whiten(lik.residual(p))
        except (WeakLikelihoodError, np.linalg.LinAlgError) as exc:
            status, message = "failed", f"iteration {n}: {exc}"
            break
        # the step measured by what it does to the whitened residual, relative to its size:
        # unlike |dp| / |p| it does not depend on the units of the parameters (issue 33)
        change = np.linalg.norm(w - w_old) / max(np.linalg.norm(w), np.finfo(float).tiny)
        p = p_new
        iterates.append(p)
        objective.append(0.5 * float(w @ w))
        pvalues.append(stats.shapiro(w).pvalue if n > opts["sw_start"] else np.nan)
        if change < opts["tol"]:
            status = "converged"
            message = (
                f"relative change of the whitened residual {change:.2g} < tol = {opts['tol']:g} "
                f"after {n} iterations"
            )
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
    if status != "failed" and not np.isfinite(safe_nll(lik, p)):
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


def run(problem: FitProblem) -> FitResult:
    """``fit(method="irls")``."""
    lik = problem.likelihood
    out, history = run_irls(lik, problem.start, problem.options, problem.bounds)
    return FitResult(
        x=out["x"],
        method="irls",
        success=out["success"],
        status=out["status"],
        message=out["message"],
        nit=out["nit"],
        nfev=out["nit"],
        wall_time=0.0,
        fun=out["fun"],
        nll=safe_nll(lik, out["x"]),
        covariance_kind="gls",
        history=history,
        **problem.common(),
    )


ESTIMATOR = Estimator(
    name="irls",
    run=run,
    options=frozenset(_DEFAULTS),
    summary="WENDy-IRLS: reweighted generalised least squares (WENDy 2023, Algorithm 2)",
    covariance="gls",
    alternatives=("hessian", "sandwich"),
    operator_models=True,
    initial_state=True,
    weak_only=True,
)
