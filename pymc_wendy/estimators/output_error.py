"""Output-error estimation: forward solves with sensitivities, fitted by least squares.

Output error (OE-LS, WENDy-MLE sec. 3.2) fits the parameters ``p`` *and* the initial state
``u0`` by minimising the misfit between the ODE solution and the data,

    sum_{m, d} ((Z(t_m; p, u0)_d - Z_md) / sigma_d)^2,

with ``Z = U`` for additive noise and ``Z = log U`` for log-normal noise; weighting by the
per-state noise level makes it the maximum-likelihood estimator of the data model (with one
noise level for every state, as in the papers' benchmarks, it is plain least squares).
Where the variance follows the solution (proportional, combined and count noise), each entry
is weighted by its own noise sd at the solution of the previous fit until the estimate
settles (:func:`_reweighted`).

The Jacobian comes from forward sensitivities: the state is integrated together with
``S = d u / d (p, u0)``, ``dS/dt = f_u S + [f_p, 0]``, ``S(t_0) = [0, I]``, with the model's
generated derivatives compiled by numba. A failed solve at a trial point is reported to the
optimiser as a very poor fit, so it backs off instead of stopping.

:func:`fit_initial_state` (``u0`` with ``p`` held fixed, Gauss-Newton on the variational
equations) is the special case used for predictive trajectories of the weak-form estimates
(:func:`pymc_wendy.estimate_initial_state`) and for the noise level from a fit's residuals
(:func:`residual_noise`, ``fit(..., sigma="residual")``). Models of order > 1 or with known
inputs are solved as their first-order companion systems, restarting at input breakpoints.
Nothing here depends on an estimator: ``fit(method="oels")``
(:mod:`pymc_wendy.estimators.oels`) builds on this module.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from pymc_wendy.estimators._bounds import strictly_inside
from pymc_wendy.model.compiled_solve import SolveFailed, compiled_solver, max_steps_for
from pymc_wendy.model.observation import as_observation, floored_state
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.piecewise_solve import PiecewiseSolver, supports_piecewise
from pymc_wendy.model.sensitivities import operator_sensitivity_rhs
from pymc_wendy.model.simulate import SimulationError, integrate, solve

__all__ = ["DEFAULT_SOLVER", "OutputErrorFit", "ResidualNoise", "output_error", "residual_noise"]

#: Forward-solver settings (output error and predictive draws): LSODA switches to a stiff
#: method by itself, the tolerances are far below any noise level, and the evaluation cap
#: ends solves from wild parameters (blow-up) in a fraction of a second instead of seconds.
DEFAULT_SOLVER: dict = {"method": "LSODA", "rtol": 1e-7, "atol": 1e-9, "max_nfev": 20_000}

# Residual reported for a trial point whose solve failed: large enough that the optimiser
# rejects the step, finite so that it can.
_FAILED_RESIDUAL = 1e8
# Output error with per-entry noise (:func:`_reweighted`): at most this many refits, until the
# estimate moves less than this many standard errors.
_MAX_REWEIGHTS = 20
_REWEIGHT_TOL = 1e-3
# Multiple of the data's largest absolute value beyond which a trial initial state's solution
# counts as diverged (:class:`_InitialState`).
_DIVERGED = 1e3


@dataclass
class OutputErrorFit:
    """Raw outcome of :func:`output_error` (``fit(method="oels")`` wraps it in a result)."""

    p: np.ndarray
    u0: np.ndarray
    cost: float  # 1/2 sum of squared weighted residuals
    jacobian: np.ndarray  # weighted residual Jacobian w.r.t. (p, u0) at the estimate
    n_residuals: int
    success: bool
    status: int
    message: str
    nfev: int
    njev: int
    n_failed_solves: int
    wall_time: float
    solve_failed: bool = False  # no forward solve succeeded at the final point
    no_fit: bool = False  # the solution explains none of a state's variation
    u0_known: bool = False  # solved from a known initial state: the Jacobian is in p alone
    #: per experiment, the observation model of the last weights (its unknown variance
    #: parameters refitted); None for one noise level per state
    observations: list | None = None


class _Problem:
    """Weighted residuals and their Jacobian, computed together by one sensitivity solve."""

    def __init__(self, model, t, Z, log, weights, solver, inputs=None, bound=None, known=None):
        self.model, self.Z, self.log = model, Z, log
        # a known initial state (InitialState): theta is p alone, the solve starts at its
        # t0, and a t0 before the data adds a first row that is not data
        self.known = known
        self.prepended = known is not None and known.t0 < t[0]
        self.t = np.concatenate([[known.t0], t]) if self.prepended else t
        # 1 / noise sd, per state (D,) or per entry (N, D)
        self.w = np.broadcast_to(np.asarray(weights, dtype=float), Z.shape)
        self.solver = solver
        # |u| beyond which a solve counts as diverged and stops (None: no limit)
        self.bound = bound
        self.operator = model.has_operator_terms
        self.compiled = None
        self.inputs = inputs  # numpy: the inputs are callables of time
        lsoda = solver["method"] == "LSODA"
        # models with derivative terms and other inputs: solve_ivp on the companion system
        if self.operator and lsoda and supports_piecewise(model, inputs or {}):
            # doses or held inputs: compiled stretch by stretch (piecewise_solve)
            self.compiled = PiecewiseSolver(model, self.t, inputs)
        elif not self.operator and lsoda:  # compiled stepping
            self.compiled = compiled_solver(model)
        elif not self.operator:
            self.rhs = compiled_solver(model).sensitivity_rhs
        self.D, self.J = len(model.companion_states), model.n_params
        self.cols = model.observed_columns
        self._cache: tuple | None = None
        self.n_failed = 0

    def _solve(self, theta: np.ndarray):
        """Weighted residuals and Jacobian at ``theta`` (a failed solve: a very poor fit)."""
        U, S = self._states(theta)
        if U is None:
            return np.full(self.Z.size, _FAILED_RESIDUAL), np.zeros((self.Z.size, theta.size))
        res = ((U - self.Z) * self.w).ravel()
        return res, (S * self.w[:, :, None]).reshape(res.size, -1)

    def _states(self, theta: np.ndarray):
        """The observed states on the residuals' scale and their sensitivities to ``theta``,
        or ``(None, None)`` where the solve fails; the last one is kept."""
        if self._cache is not None and np.array_equal(self._cache[0], theta):
            return self._cache[1], self._cache[2]
        D, J = self.D, self.J
        P = J + D
        p = theta[:J].copy()
        u0 = theta[J:] if self.known is None else self.known.u0
        y0 = np.concatenate([u0, np.zeros(D * P)])
        y0[D:].reshape(D, P)[:, J:] = np.eye(D)
        try:
            if self.compiled is not None:
                U, S = self._compiled_solve(p, u0)
            else:
                Y = self._integrate(p, y0)
                U, S = Y[:, :D], Y[:, D:].reshape(-1, D, P)
            first = int(self.prepended)
            U, S = U[first:, self.cols], S[first:, self.cols, : theta.size]
            if self.log:
                if np.any(U <= 0):
                    raise SimulationError("the solution left the positive orthant")
                S = S / U[:, :, None]
                U = np.log(U)
        except SimulationError:
            self.n_failed += 1
            U, S = None, None
        self._cache = (theta.copy(), U, S)
        return U, S

    def _compiled_solve(self, p: np.ndarray, u0: np.ndarray):
        opts = self.solver
        max_steps = max_steps_for(opts["max_nfev"], self.t.size)
        tolerances = {"rtol": opts["rtol"], "atol": opts["atol"], "max_steps": max_steps}
        try:
            if isinstance(self.compiled, PiecewiseSolver):
                U, S = self.compiled.sensitivities(p, u0, **tolerances)
            else:
                U, S = self.compiled.sensitivities(p, u0, self.t, **tolerances)
        except SolveFailed as exc:
            raise SimulationError(str(exc)) from None
        if self.bound is not None and not np.max(np.abs(U)) <= self.bound:
            raise SimulationError(f"the solution left |u| <= {self.bound:.3g}")
        return U, S

    def _integrate(self, p: np.ndarray, y0: np.ndarray) -> np.ndarray:
        if self.operator:
            rhs, breaks, jumps = operator_sensitivity_rhs(self.model, p, self.inputs, self.t)
        else:
            rhs, breaks, jumps = (lambda s, y: self.rhs(s, y, p)), None, None
        if self.bound is not None:
            rhs = _bounded(rhs, self.D, self.bound)
        return integrate(
            rhs,
            y0,
            self.t,
            method=self.solver["method"],
            rtol=self.solver["rtol"],
            atol=self.solver["atol"],
            max_nfev=self.solver["max_nfev"],
            name=self.model.name,
            breaks=breaks,
            jumps=jumps,
        )

    def solution(self, theta: np.ndarray) -> np.ndarray | None:
        """The observed states at ``theta``, or None where the solve fails."""
        U = self._states(theta)[0]
        if U is None:
            return None
        return np.exp(U) if self.log else U

    def _split(self, theta: np.ndarray) -> list[np.ndarray]:
        """``theta`` per experiment: this one's (as :class:`_JointProblem` splits)."""
        return [theta]

    def reweight(self, w: np.ndarray) -> None:
        """New weights (1 / noise sd per entry): the residuals change, the solve does not."""
        self.w = np.broadcast_to(np.asarray(w, dtype=float), self.Z.shape)

    def residual(self, theta):
        return self._solve(theta)[0]

    def jacobian(self, theta):
        return self._solve(theta)[1]


def _bounded(rhs, n: int, bound: float):
    """``rhs`` that stops the solve (a :class:`SimulationError` through ``integrate``) once
    the first ``n`` components leave ``|u| <= bound``."""

    def checked(s, y):
        if not np.max(np.abs(y[:n])) <= bound:  # also NaN
            raise FloatingPointError(f"the solution left |u| <= {bound:.3g} at t = {s:.6g}")
        return rhs(s, y)

    return checked


class _JointProblem:
    """Several experiments sharing ``p``: ``theta = (p, u0_1, ..., u0_E)``; residuals
    concatenated, the Jacobian block-sparse (experiment ``e`` sees ``p`` and its ``u0_e``)."""

    def __init__(self, problems: list[_Problem]):
        self.problems = problems
        self.J, self.D = problems[0].J, problems[0].D

    @property
    def n_failed(self) -> int:
        return sum(pr.n_failed for pr in self.problems)

    def _split(self, theta: np.ndarray) -> list[np.ndarray]:
        J, D = self.J, self.D
        return [
            np.concatenate([theta[:J], theta[J + e * D : J + (e + 1) * D]])
            for e in range(len(self.problems))
        ]

    def _solve(self, theta: np.ndarray):
        J, D = self.J, self.D
        parts = [pr._solve(th) for pr, th in zip(self.problems, self._split(theta), strict=True)]
        res = np.concatenate([r for r, _ in parts])
        jac = np.zeros((res.size, theta.size))
        row = 0
        for e, (r, jc) in enumerate(parts):
            jac[row : row + r.size, :J] = jc[:, :J]
            jac[row : row + r.size, J + e * D : J + (e + 1) * D] = jc[:, J:]
            row += r.size
        return res, jac

    def residual(self, theta):
        return self._solve(theta)[0]

    def jacobian(self, theta):
        return self._solve(theta)[1]


def _reweighted(prob, problems: list[_Problem], observations, sigmas, res, bounds, opts: dict):
    """Output error for noise whose variance follows the solution (proportional, combined,
    counts): least squares with each entry weighted by its noise sd at the last fit's
    solution, refitted until the estimate moves less than 1e-3 standard errors. Variance
    parameters the user left unknown (the negative binomial's ``alpha``) are refitted by
    maximum likelihood at each solution (:meth:`Observation.fitted`): the weak stage's
    moment estimate set ``alpha`` to its cap on the 14 influenza counts, whose forward
    residuals are twice the Poisson sd. ``observations``: ``(given, filled)`` pairs.

    The fixed point solves ``sum (Z - u) / v(u) du/dtheta = 0``: the quasi-likelihood
    (generalised least squares) estimator, the maximum-likelihood one for Poisson and for
    negative binomial counts of known dispersion. Refitting with ``v`` inside the residual
    would instead pull the solution towards larger variances (biased); the Gaussian
    likelihood's own ``log v(u)`` term is left out, as nlmixr2's and NONMEM's first-order
    methods do. Returns the last fit, whether the weights settled, and the observation
    models with the variance parameters of the last weights."""
    filled = [obs for _, obs in observations]
    for _ in range(_MAX_REWEIGHTS):
        theta = res.x
        parts = zip(problems, prob._split(theta), sigmas, observations, strict=True)
        for e, (pr, th, se, (given, _)) in enumerate(parts):
            u = pr.solution(th)
            if u is None:  # the fit failed; the caller reports it
                return res, True, filled
            u = floored_state(u, pr.Z)
            if not given.complete:
                filled[e] = given.fitted(pr.Z, u)
            w = filled[e].weights(u)
            pr.reweight(1.0 / (se * np.sqrt(np.ones_like(u) if w is None else w)))
        res = optimize.least_squares(prob.residual, theta, jac=prob.jacobian, bounds=bounds, **opts)
        step = prob.jacobian(res.x) @ (res.x - theta)  # in standard errors
        if step @ step < _REWEIGHT_TOL**2:
            return res, True, filled
    return res, False, filled


def output_error(
    model: ODEModel,
    t,
    U,
    p0: np.ndarray,
    u0,
    *,
    noise: str = "normal",
    sigma,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
    solver: Mapping | None = None,
    options: Mapping | None = None,
    inputs=None,
    observations: list | None = None,
    initial_state=None,
) -> OutputErrorFit:
    """Output-error least squares over ``(p, u0)`` (module docstring).

    ``t``, ``U`` are validated data; ``sigma`` (D,) the noise level per state on the scale of
    the residuals (``log U`` for log-normal noise); ``bounds`` optional ``(lower, upper)`` for
    ``p`` (``u0`` is unbounded). ``options`` go to :func:`scipy.optimize.least_squares`
    (default trust-region reflective, ``max_nfev=200``, ``x_scale="jac"``).

    Several experiments sharing ``p``: ``t`` and ``U`` lists, ``u0`` and ``sigma`` of shape
    (E, D); each experiment has its own initial state (``u0`` of the result is then (E, D)).
    For a model of order > 1 or with inputs, ``u0`` holds the companion states
    (``model.companion_states``) and ``inputs`` the validated inputs (a list of mappings for
    several experiments).

    ``observations`` (one ``(as given, variance parameters filled in)`` pair per
    experiment): where they say the variance follows the solution (proportional, combined or
    count noise), ``sigma`` is the models' noise level (1 for those that carry their own
    parameters) and every entry is weighted by its noise sd at the solution
    (:func:`_reweighted`), the unknown parameters refitted there.

    ``initial_state`` (:class:`~pymc_wendy.model.data.InitialState`, one experiment): the
    state known at its ``t0`` (at or before ``t[0]``); the fit is over ``p`` alone, every
    solve starts there with ``initial_state.solved_model(model)``, and ``u0`` is ignored.
    """
    start = time.perf_counter()
    several = isinstance(t, list | tuple)
    if initial_state is not None:
        if several:
            raise ValueError("output error takes a known initial state for one experiment")
        model, u0 = initial_state.solved_model(model), initial_state.u0
    ts, Us = (list(t), list(U)) if several else ([t], [U])
    E = len(ts)
    J, D, n0 = model.n_params, len(model.observed_columns), len(model.companion_states)
    u0s = np.asarray(u0, dtype=float).reshape(E, n0)
    sigmas = np.broadcast_to(np.asarray(sigma, dtype=float), (E, D))
    input_list = list(inputs) if several and inputs is not None else [inputs] * E
    log = as_observation(noise).log_scale
    opts_solver = {**DEFAULT_SOLVER, **(solver or {})}
    problems = []
    for te, Ue, se, we in zip(ts, Us, sigmas, input_list, strict=True):
        Z = np.log(Ue) if log else Ue
        scale = np.sqrt(np.mean(Z**2, axis=0))
        s = np.maximum(se, 1e-12 * np.maximum(scale, 1e-300))
        problems.append(_Problem(model, te, Z, log, 1.0 / s, opts_solver, we, known=initial_state))
    prob = _JointProblem(problems) if several else problems[0]
    free_u0 = u0s.ravel() if initial_state is None else np.empty(0)
    theta0 = np.concatenate([p0, free_u0])
    lo = np.full(theta0.size, -np.inf)
    hi = np.full(theta0.size, np.inf)
    if bounds is not None:
        lo[:J], hi[:J] = bounds
        theta0[:J] = strictly_inside(theta0[:J], lo[:J], hi[:J])  # trf: strictly feasible
    opts = {"method": "trf", "x_scale": "jac", "max_nfev": 200, **(options or {})}
    res = optimize.least_squares(prob.residual, theta0, jac=prob.jacobian, bounds=(lo, hi), **opts)
    settled, fitted = True, None
    if observations is not None and any(o.per_entry for _, o in observations):
        res, settled, fitted = _reweighted(
            prob, problems, observations, sigmas, res, (lo, hi), opts
        )
    resid, jac = prob._solve(res.x)
    blocks = np.split(resid, np.cumsum([pr.Z.size for pr in problems])[:-1])
    failed = [bool(np.all(r == _FAILED_RESIDUAL)) for r in blocks]
    failed_at_end = all(failed)
    success, message, no_fit = _outcome(res, problems, prob._split(res.x), failed, settled)
    fitted_u0 = u0s[0].copy() if initial_state is not None else res.x[J:].copy()
    return OutputErrorFit(
        p=res.x[:J].copy(),
        u0=res.x[J:].reshape(E, n0).copy() if several else fitted_u0,
        u0_known=initial_state is not None,
        observations=fitted,
        cost=float(0.5 * resid @ resid),
        jacobian=jac,
        n_residuals=resid.size,
        success=success,
        status=int(res.status),
        message=message,
        nfev=int(res.nfev),
        njev=int(res.njev or 0),
        n_failed_solves=prob.n_failed,
        wall_time=time.perf_counter() - start,
        solve_failed=failed_at_end,
        no_fit=no_fit,
    )


def _outcome(res, problems: list[_Problem], parts, failed: list[bool], settled: bool):
    """``(success, message, no fit)`` of an output-error fit: the optimiser's, unless a forward
    solve fails at the result, the per-entry weights did not settle, or the solution of an
    experiment explains none of the variation of any of its states (residual sd at least
    the data's own: a solution near 0 everywhere, reached by logistic growth's initial
    state running to 1e-15 while its ``p2`` ran to -2e10, reported converged before). One
    flat state alone is no evidence: its residuals are its noise, as large as its spread."""
    success = bool(res.success) and not any(failed) and settled
    message = res.message
    if not settled:
        message = f"the weights of the entries did not settle in {_MAX_REWEIGHTS} refits"
    if all(failed):
        return False, "the forward solve fails at every point the optimiser reached", False
    if any(failed):
        which = [e for e, f in enumerate(failed) if f]
        why = f"the forward solve of experiments {which} fails at the result; {message}"
        return False, why, False
    unexplained = []
    for e, (pr, theta) in enumerate(zip(problems, parts, strict=True)):
        U = pr._states(theta)[0]
        residual_sd = np.sqrt(np.nanmean((U - pr.Z) ** 2, axis=0))
        if np.all(residual_sd >= np.nanstd(pr.Z, axis=0, ddof=1)):
            unexplained.append(f"experiment {e}" if len(problems) > 1 else "the data")
    if unexplained:
        why = (
            f"the ODE solution at the estimate explains none of the variation of "
            f"{', '.join(unexplained)} (residual sd at least the data's in every state): a "
            f"poor local minimum; start from a weak-form estimate (method='hybrid') ({message})"
        )
        return False, why, True
    return success, message, False


class _InitialState:
    """Residuals of the solution from ``u0`` (``p`` fixed) against the first ``n`` rows of
    ``X`` and their Jacobian in ``u0`` (in ``log u0`` for log-normal noise): the columns for
    ``u0`` of output error's sensitivity solve (:class:`_Problem`, compiled for models
    without inputs or derivative terms)."""

    def __init__(self, model: ODEModel, t, X, noise: str, p, n: int, opts: dict, inputs):
        self.log = as_observation(noise).log_scale
        self.p = np.asarray(p, dtype=float)
        Z = X[:n]
        # A trial start whose solution runs far beyond the data (a logistic curve from a
        # negative start blows up) cannot fit them: stop its solve there rather than after
        # max_nfev steps (seconds per trial on a 41-point series otherwise).
        size = np.exp(Z) if self.log else Z
        bound = _DIVERGED * max(float(np.max(np.abs(size))), np.finfo(float).tiny)
        self.problem = _Problem(
            model, t[:n], Z, self.log, np.ones(Z.shape[1]), opts, inputs, bound=bound
        )

    def _theta(self, x0: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.concatenate([self.p, np.exp(x0) if self.log else x0])

    def residual(self, x0):
        return self.problem.residual(self._theta(x0))

    def jacobian(self, x0):
        theta = self._theta(x0)
        jac = self.problem.jacobian(theta)[:, self.p.size :]
        return jac * theta[self.p.size :][None, :] if self.log else jac  # d/d log u0


def fit_initial_state(
    model: ODEModel, t, X, noise: str, p, solver=None, *, inputs=None, n: int | None = None
) -> np.ndarray:
    """The initial state whose solution at fixed ``p`` fits the first data points best.

    Gauss-Newton (:func:`scipy.optimize.least_squares`) on the state and its variational
    equations, from the best of a few data-based guesses; if it fails, the best guess.

    Parameters
    ----------
    model : ODEModel
    t : ndarray (N,)
        Validated times.
    X : ndarray (N, D)
        The data on the likelihood's scale (``log U`` for log-normal noise).
    noise : {"normal", "lognormal"}
    p : array_like (J,)
        Parameters, held fixed.
    solver : mapping, optional
        Forward-solver settings over :data:`DEFAULT_SOLVER`.
    inputs : mapping, optional
        The validated inputs of a forced model.
    n : int, optional
        Fit to the first ``n`` rows; default the first quarter, at least 10 rows.

    Returns
    -------
    ndarray
        ``u0`` on the data's own scale; for a model of order > 1 or with inputs, the
        companion state (:attr:`~pymc_wendy.ODEModel.companion_states`).
    """
    n = min(max(10, t.size // 4) if n is None else int(n), t.size)
    prob = _InitialState(model, t, X, noise, p, n, {**DEFAULT_SOLVER, **(solver or {})}, inputs)
    # A noisy local fit can put a state's start where the solution blows up (a predator
    # population below zero): then the solve fails everywhere near it and least squares
    # cannot move. Start from the best of a few data-based guesses instead.
    if model.has_operator_terms:
        guesses = [polynomial_start(model.orders, t, X)]
    else:
        start = local_quadratic_start(t, X)
        guesses = [start, X[0], X[: min(5, n)].mean(axis=0), np.median(X[:n], axis=0)]
    costs = [float(np.sum(prob.residual(g) ** 2)) for g in guesses]
    best = guesses[int(np.argmin(costs))]
    fit = optimize.least_squares(prob.residual, best, jac=prob.jacobian, x_scale="jac")
    if fit.success and 2 * fit.cost <= min(costs):
        return _from_log(fit.x, noise)
    return _from_log(best, noise)


@dataclass
class ResidualNoise:
    """Noise level from the residuals of a forward solve (:func:`residual_noise`)."""

    sigma: np.ndarray  # (D,) on the likelihood's scale (log U for log-normal noise)
    u0: np.ndarray  # the fitted initial state (companion layout for order > 1)
    dof: float  # residual degrees of freedom per state
    rss: np.ndarray  # (D,) residual sums of squares


def residual_noise(likelihood, p, *, solver: Mapping | None = None) -> ResidualNoise:
    """Per-state noise level from the misfit of the ODE solution at ``p`` to all the data.

    The initial state is fitted by least squares to every data point with ``p`` held fixed;
    then ``sigma_d^2 = RSS_d / (N - (J + n_0) / D)``, the ``J`` parameters and ``n_0``
    initial values counted as spent degrees of freedom, shared evenly by the ``D`` states.
    Unlike the high-order filter of :func:`~pymc_wendy.weak.noise.estimate_noise`, it is not
    misled by kinks of the solution (an input pulse) and uses every point, which matters on
    short series (21 points leave the 17-point filter 5 values). It assumes the solution at
    ``p`` tracks the data over the whole span (not for chaotic systems over long spans).
    ``likelihood`` is a single-experiment :class:`~pymc_wendy.WeakLikelihood`.
    """
    lik = likelihood
    return residual_noise_of_data(
        lik.base_model, lik.t, lik.X, lik.noise, p, lik.inputs, solver,
        initial=lik.initial_state, observation=lik.weak_observation,
    )  # fmt: skip


def residual_noise_of_data(
    model, t, X, noise, p, inputs, solver, u0=None, initial=None, observation=None
) -> ResidualNoise:
    """:func:`residual_noise` from the data themselves rather than a likelihood.

    Parameters
    ----------
    model : ODEModel
    t : ndarray (N,)
    X : ndarray (N, D)
        The data on the likelihood's scale (``log U`` for log-normal noise).
    noise : {"normal", "lognormal"}
    p : array_like (J,)
    inputs : mapping or None
        The validated inputs of a forced model.
    solver : mapping or None
        Forward-solver settings over :data:`DEFAULT_SOLVER`.
    u0 : array_like, optional
        An initial state to use as it is (output error's own); fitted when not given.
    initial : InitialState, optional
        A state known at ``initial.t0 <= t[0]`` (:func:`~pymc_wendy.model.data.as_initial_state`):
        the solve starts there and no initial value is fitted.
    observation : Observation, optional
        A model whose variance changes with the solution (proportional error): each residual
        is then divided by the square root of its weight at the solution, so that ``sigma``
        is that model's (relative) noise level.

    Returns
    -------
    ResidualNoise
    """
    p = np.asarray(p, dtype=float)
    N, D = X.shape
    n0 = len(model.companion_states) if initial is None else 0
    dof = N - (model.n_params + n0) / D
    if dof < 1:
        raise ValueError(
            f"{model.name}: {N} time points leave no residual degrees of freedom for "
            f"{model.n_params} parameters and {n0} initial values"
        )
    opts = {**DEFAULT_SOLVER, **(solver or {})}
    if initial is not None:  # solve from the known state; report the state at t[0]
        before = initial.t0 < t[0]
        times = np.concatenate([[initial.t0], t]) if before else t
        U = solve(model, p, initial.u0, times, inputs=inputs or None, **opts)[int(before) :]
        u0 = U[0]
        U = U[:, model.observed_columns]
    else:
        if u0 is None:
            u0 = fit_initial_state(model, t, X, noise, p, solver, inputs=inputs, n=N)
        U = solve(model, p, u0, t, inputs=inputs or None, **opts)[:, model.observed_columns]
    log = as_observation(noise).log_scale
    if log and np.any(U <= 0):
        raise SimulationError(f"{model.name}: the solution at p leaves the positive orthant")
    Z = np.log(U) if log else U
    sq = (Z - X) ** 2
    if observation is not None and observation.per_entry:
        w = observation.weights(np.abs(Z))
        sq = sq / np.maximum(w, np.finfo(float).tiny)
    rss = np.sum(sq, axis=0)
    return ResidualNoise(sigma=np.sqrt(rss / dof), u0=np.asarray(u0), dof=float(dof), rss=rss)


def initial_state_guess(model: ODEModel, t: np.ndarray, Z: np.ndarray, noise: str) -> np.ndarray:
    """A quick initial state from the first data points, without solving the ODE.

    :func:`polynomial_start` for a model of order > 1 or with inputs; otherwise
    :func:`local_quadratic_start`, taken back from the log scale for log-normal noise.
    ``Z`` (N, D) are the data on the likelihood's scale (``log U`` for log-normal noise).
    """
    if model.has_operator_terms:
        return polynomial_start(model.orders, t, Z)
    return _from_log(local_quadratic_start(t, Z), noise)


def local_quadratic_start(t: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Value at ``t_0`` of a parabola fitted to the first ``clip(n // 20, 7, 31)`` points.

    ``t`` (N,) times, ``X`` (N, D) data; returns (D,)."""
    n = min(max(7, min(t.size // 20, 31)), t.size)
    V = np.vander(t[:n] - t[0], 3)
    return np.linalg.lstsq(V, X[:n], rcond=None)[0][-1]


def polynomial_start(orders, t: np.ndarray, X: np.ndarray) -> np.ndarray:
    """A companion state at ``t[0]`` from the first data points.

    Each state's value and its derivatives up to its order - 1, from a least-squares
    polynomial of degree ``order + 1`` through the first ``3 (order + 2)`` points (fewer if
    the data are shorter). ``orders`` are the states' orders (``ODEModel.orders``), ``t``
    (N,) times, ``X`` (N, D) data; returns the companion state
    (:attr:`~pymc_wendy.ODEModel.companion_states`)."""
    out = []
    for d, q in enumerate(orders):
        deg = min(q + 1, t.size - 1)
        n = min(t.size, 3 * (q + 2))
        poly = np.polynomial.Polynomial.fit(t[:n], X[:n, d], deg)
        out += [poly.deriv(k)(t[0]) if k else poly(t[0]) for k in range(q)]
    return np.array(out, dtype=float)


def _from_log(x0: np.ndarray, noise: str) -> np.ndarray:
    return np.exp(x0) if as_observation(noise).log_scale else x0
