"""Point estimators on a :class:`WeakLikelihood`: weak least squares and WENDy-MLE.

These are the building blocks the samplers use for starting points and the command-line demo
uses for its fit; the full estimator interface (``fit`` with IRLS, output error, hybrid and
result objects) builds on them.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import optimize

from pymc_wendy.kernels import WeakLikelihoodError
from pymc_wendy.likelihood import WeakLikelihood

__all__ = ["weak_least_squares", "wendy_mle"]


def weak_least_squares(
    lik: WeakLikelihood, p0=None, *, max_iter: int = 50, tol: float = 1e-10
) -> np.ndarray:
    """Minimise ``||r(p)||^2`` by Gauss-Newton steps with the analytic ``dr/dp``.

    One step is exact when the model is linear in the parameters (``p0`` is then irrelevant);
    otherwise iterate from ``p0`` (default all ones) with step halving until the step is
    below ``tol`` relative to ``p``.
    """
    J = lik.model.n_params
    p = np.ones(J) if p0 is None else np.array(p0, dtype=float)
    if lik.model.is_linear_in_params:
        return p + np.linalg.lstsq(lik.dr_dp(p), -lik.residual(p), rcond=None)[0]
    r = lik.residual(p)
    for _ in range(max_iter):
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
            break
        p, r = p + step, r_new
        if np.linalg.norm(step) <= tol * max(np.linalg.norm(p), 1.0):
            break
    return p


def wendy_mle(lik: WeakLikelihood, p0=None, **options) -> optimize.OptimizeResult:
    """WENDy-MLE: trust-region Newton on the weak negative log-likelihood from ``p0``.

    ``p0`` defaults to :func:`weak_least_squares`. Uses the analytic gradient and Hessian
    (``scipy.optimize.minimize(method="trust-exact")``); ``options`` go to ``minimize``.
    """
    start = weak_least_squares(lik) if p0 is None else np.asarray(p0, dtype=float)

    def fun(p):
        try:
            return lik.nll_grad(p)
        except WeakLikelihoodError:
            return np.inf, np.zeros_like(p)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # trial points outside the domain
        return optimize.minimize(
            fun, start, jac=True, hess=lik.hessian, method="trust-exact", options=options
        )
