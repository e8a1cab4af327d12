"""Weak least squares, ``fit(method="wls")``: ``min_p ||r(p)||^2``.

One linear solve when the model is linear in the parameters, Gauss-Newton with step halving
otherwise (``scipy.optimize.lsq_linear`` / ``least_squares`` inside bounds). The residual's
errors are in the variables, so the estimate is biased at high noise; it is the start of the
other weak-form estimators.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import linalg, optimize, stats

from pymc_wendy.estimators._bounds import check_closed_box
from pymc_wendy.estimators._problem import FitProblem, safe_nll
from pymc_wendy.estimators.registry import Estimator
from pymc_wendy.estimators.results import FitResult
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.protocol import Likelihood

__all__ = ["default_start", "default_starts", "screened_start", "weak_least_squares"]


def solve_wls(lik: Likelihood, p0, max_iter: int = 50, tol: float = 1e-10, bounds=None):
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
            # BLAS nrm2 scales: a trial residual of 1e200 is "larger", not an overflow warning
            if r_new is not None and linalg.norm(r_new, check_finite=False) < linalg.norm(
                r, check_finite=False
            ):
                break
            step = step / 2
        else:
            return p, it, True  # no descent along the Gauss-Newton direction: stationary
        p, r = p + step, r_new
        if np.linalg.norm(step) <= tol * max(np.linalg.norm(p), 1.0):
            return p, it, True
    return p, max_iter, False


def _wls_bounded(lik: Likelihood, p, bounds, max_iter: int):
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
    lik: Likelihood, p0=None, *, max_iter: int = 50, tol: float = 1e-10
) -> np.ndarray:
    """Minimise ``||r(p)||^2`` by Gauss-Newton steps with the analytic ``dr/dp``.

    One step is exact when the model is linear in the parameters (``p0`` is then irrelevant);
    otherwise iterate from ``p0`` (default all ones) with step halving until the step is
    below ``tol`` relative to ``p``. :func:`fit` with ``method="wls"`` wraps this in a result.
    """
    return solve_wls(lik, p0, max_iter, tol)[0]


def _wls_message(linear: bool, bounded: bool, ok: bool) -> str:
    if linear and not bounded:
        return "closed form (linear in the parameters)"
    how = "bounded linear least squares" if linear else "nonlinear least squares"
    return f"{how} {'converged' if ok else 'stopped before convergence'}"


#: Points of the scrambled Sobol design screened for a start when a model is nonlinear in its
#: parameters (``docs/estimators.md``: on Goodwin 2D the box's centre led to a local minimum).
_SCREEN_STARTS = 16


def default_start(lik: Likelihood | None, model: ODEModel, bounds) -> np.ndarray:
    """Weak least squares for linear-in-parameter models; otherwise the best of bounded weak
    least squares from the box's centre and a Sobol design in the box, by residual (a
    ValueError when a bound is infinite: then ``p0`` is needed)."""
    return default_starts(lik, model, bounds, by_nll=False)[0]


def default_starts(
    lik: Likelihood | None, model: ODEModel, bounds, by_nll: bool = True
) -> list[np.ndarray]:
    """The starts :func:`default_start` screens for: its own first, then, if different (and
    ``by_nll``), the point of lowest weak NLL among the screened points and the fits from
    them (two NLLs per point, which weak least squares alone does not need).

    Neither ranking finds the MLE's basin alone, so WENDy-MLE runs from both and keeps the
    lower NLL (``docs/estimators.md``). Where parameters divide the data's terms, the
    residual shrinks as they grow or vanish: on Hes1 observed in P and M (513 points, seed 0)
    the fits from all 17 points ran to the box's lower bounds (NLL 51468), while the best
    design point (NLL 2428) leads to the MLE. On Goodwin 2D (513 points, 10 % noise, seeds
    2 and 3) the fit of lowest NLL leads to a local minimum with ``p1`` at its bound (NLL
    1478 and 1517), the fit of lowest residual to the MLE (1305 and 1301)."""
    if model.is_linear_in_params and lik is not None:
        p = weak_least_squares(lik)
        return [p if bounds is None else np.clip(p, *bounds)]
    if bounds is None:
        raise ValueError(
            f"{model.name} is nonlinear in its parameters: give a starting point p0, or "
            "bounds (then the search starts from the best of weak least squares fits "
            "started in them)"
        )
    check_closed_box(bounds, model.params)
    if lik is None:
        return [0.5 * (bounds[0] + bounds[1])]

    def fit_from(s):
        p = _wls_bounded(lik, s, bounds, 20)[0]
        r = lik.residual(p)
        if not by_nll:
            return ((p, float(r @ r)),)
        nll_s, nll_p = safe_nll(lik, s), safe_nll(lik, p)
        return (p, float(r @ r)), ((p, nll_p) if nll_p <= nll_s else (s, nll_s))

    return screened_starts(bounds, fit_from)


def screened_start(bounds, fit_from: Callable[[np.ndarray], tuple[np.ndarray, float]]):
    """The best of ``fit_from(s) -> (p, misfit)`` over the box's centre and a scrambled Sobol
    design of ``_SCREEN_STARTS`` points in it (the centre itself when every fit fails); the
    start for models nonlinear in the parameters, whichever misfit a method minimises.
    The box must be finite (:func:`default_start` says so first)."""
    return screened_starts(bounds, lambda s: (fit_from(s),))[0]


def screened_starts(bounds, fit_from) -> list[np.ndarray]:
    """:func:`screened_start` for several criteria: ``fit_from(s)`` returns one ``(p,
    misfit)`` per criterion; the best point of each, in the criteria's order, without
    repeats."""
    lo, hi = bounds
    centre = 0.5 * (lo + hi)
    design = stats.qmc.Sobol(lo.size, seed=0).random(_SCREEN_STARTS)
    best: list[tuple[np.ndarray, float]] = []
    for s in (centre, *stats.qmc.scale(design, lo, hi)):
        try:
            found = fit_from(s)
        except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
            continue
        best = best or [(centre, np.inf)] * len(found)
        best = [
            (p, m) if np.isfinite(m) and m < b[1] else b
            for (p, m), b in zip(found, best, strict=True)
        ]
    starts = [centre] if not best else []
    for p, _ in best:
        if not any(np.array_equal(p, q) for q in starts):
            starts.append(p)
    return starts


def run(problem: FitProblem) -> FitResult:
    """``fit(method="wls")``."""
    lik, model = problem.likelihood, problem.model
    p0 = problem.p0
    if p0 is None and not model.is_linear_in_params:  # the closed form needs no start
        p0 = default_start(lik, model, problem.bounds)
    p, nit, ok = solve_wls(lik, p0, bounds=problem.bounds, **problem.options)
    r = lik.residual(p)
    return FitResult(
        x=p,
        method="wls",
        success=ok,
        status="converged" if ok else "max_iter",
        message=_wls_message(model.is_linear_in_params, problem.bounds is not None, ok),
        nit=nit,
        nfev=nit + 1,
        wall_time=0.0,
        fun=0.5 * float(r @ r),
        nll=safe_nll(lik, p),
        covariance_kind="sandwich",
        **problem.common(),
    )


ESTIMATOR = Estimator(
    name="wls",
    run=run,
    options=frozenset({"max_iter", "tol"}),
    summary="weak least squares: one linear solve, or Gauss-Newton (biased at high noise)",
    covariance="sandwich",
    alternatives=("gls", "hessian"),
    needs_start=False,
    operator_models=True,
    initial_state=True,
    weak_only=True,
)
