"""Newton machinery of WENDy-MLE: objective models, active-set steps, the final polish.

The trust-region runs themselves are scipy's (``trust-exact``, ``trust-constr``); this
module holds what they step with and what finishes them: the cheap Newton model of the
general path (:class:`_NewtonModel`) or the exact Hessian (:class:`_ExactModel`), Newton
steps over the parameters off their bounds (:func:`_active_set_newton`), exact Newton
polish steps (:func:`_polish`) and the stationarity test that accepts scipy's "failure to
predict improvement" at a minimum (:func:`_stationary`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import linalg as sla
from scipy import optimize

from pymc_wendy.estimators._bounds import margin
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.protocol import Likelihood

# scipy.optimize.minimize's trust-exact and trust-constr options (each run gets its own)
TRUST_EXACT = frozenset({"maxiter", "gtol", "initial_trust_radius", "max_trust_radius", "eta"})
TRUST_CONSTR = frozenset(
    {
        "maxiter",
        "gtol",
        "xtol",
        "barrier_tol",
        "initial_tr_radius",
        "initial_constr_penalty",
        "initial_barrier_parameter",
    }
)


def _value_and_grad(lik: Likelihood):
    def fun(p):
        try:
            value, grad = lik.nll_grad(p)
        except WeakLikelihoodError:
            return np.inf, np.zeros_like(p)
        if not np.isfinite(value):
            # an overflow outside the domain gives inf with a NaN gradient: scipy's
            # trust-region subproblem then fails on the NaN ("array must not contain infs
            # or NaNs", pk_oral at a trial point with V < 0); the trial is rejected on its value
            return np.inf, np.zeros_like(p)
        return value, grad

    return fun


def _hessian(lik: Likelihood):
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

    def __init__(self, lik: Likelihood):
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
                self._value, self._grad, self._state = self.lik.newton_point(p)
            except WeakLikelihoodError:
                self._value = np.inf
            if not np.isfinite(self._value):  # as in _value_and_grad: inf with NaN gradient
                self._value, self._grad, self._state = np.inf, np.zeros_like(self._x), None
        return self._value, self._grad.copy()

    def hess(self, p, exact: bool = False):
        self.fun(p)
        if self._state is None:
            # undefined here: the trial is rejected on its value, so any finite matrix will do
            return np.eye(p.size)
        try:
            return self.lik.newton_hessian(self._state, exact)
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
    return _ExactModel(lik) if lik.exact_hessian_is_cheap else _NewtonModel(lik)


def _free_set(x, grad, bounds) -> np.ndarray:
    """The parameters not pushing against an active bound (all of them without bounds)."""
    free = np.ones(x.size, dtype=bool)
    if bounds is not None:
        lo, hi = bounds
        near = margin(x, lo, hi, 1e-8)  # finite for one-sided bounds
        free &= ~((x <= lo + near) & (grad > 0))
        free &= ~((x >= hi - near) & (grad < 0))
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
    opts = {"maxiter": 200, **_subset(options, TRUST_EXACT)}
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
    free = _free_set(x, grad, bounds)  # components pushing against a bound do not count
    if not free.any():
        return True
    try:
        H = lik.hessian(x)[np.ix_(free, free)]
        Lh = np.linalg.cholesky(H)
    except (WeakLikelihoodError, np.linalg.LinAlgError):
        return False
    z = sla.solve_triangular(Lh, grad[free], lower=True)
    return bool(0.5 * z @ z <= tol)
