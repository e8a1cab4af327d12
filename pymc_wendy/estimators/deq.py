"""Discretization-error quantification (DEQ), ``fit(method="deq")``.

Matsuda and Miyatake, *Estimation of ordinary differential equation models with
discretization error quantification* (SIAM/ASA JUQ 2021), section 3. The ODE is solved by
a fixed-step explicit Runge-Kutta scheme, and the difference between that numerical
solution and the exact one (the discretization error) is modelled as independent Gaussian
noise whose variance grows with time:

    y_kj = x~_j(t_k; theta) + e_kj,   e_kj ~ N(0, gamma_j^2 + sigma_kj^2),
    0 <= sigma_1j^2 <= sigma_2j^2 <= ... <= sigma_Kj^2                      (3.3)

with ``gamma_j`` the observation-noise sd of state ``j`` (``sigma`` of ``fit``). The
estimate maximises this likelihood over ``theta`` and the variances by the paper's
iteratively reweighted least squares (Algorithm 3.1), alternating

* the variance update (3.10): for each state the isotonic (non-decreasing) least-squares
  regression of the squared residuals ``r_kj^2``, by the pool-adjacent-violators algorithm
  of :func:`scipy.optimize.isotonic_regression`, floored at ``gamma_j^2`` (Theorem 3.5:
  the isotonic regression is the order-restricted MLE of Gamma scale parameters, and the
  constraint ``sigma^2 >= 0`` only clips it), and
* the parameter update (3.11): weighted least squares with weights
  ``w_kj = 1 / (gamma_j^2 + sigma_kj^2)``, solved by trust-region reflective least squares
  (:func:`scipy.optimize.least_squares`) with the exact Jacobian.

Exact gradients. The Jacobian of the *discrete* solution is propagated alongside the scheme
by forward sensitivities of the one-step map: for each stage ``K_i = f(t + c_i h, Y_i, p)``,
``Y_i = x + h sum_j a_ij K_j``, we carry ``dK_i = f_u(Y_i) dY_i + [f_p(Y_i), 0]`` and update
``S <- S + h sum_i b_i dK_i`` with ``S = dx~/d(p, u0)``. This is the derivative of the
numerical solution itself (exact up to round-off, the property the paper obtains with the
adjoint of a symplectic partitioned Runge-Kutta pair), not of the ODE. We chose forward
sensitivities over the adjoint because they give the whole residual Jacobian in one pass,
which a Gauss-Newton / trust-region step needs (the adjoint gives one gradient per pass);
with ``J + D`` at most a few tens the extra cost is small. The scheme, sensitivities
included, is one numba-compiled loop over all fine steps.

Schemes (``options["scheme"]``): ``"euler"`` (explicit Euler), ``"heun"`` (explicit
trapezoid, order 2), ``"rk4"`` (classical 4-stage Runge-Kutta), each with ``n_steps``
equal steps per observation interval (or the step ``dt``, rounded up to a whole number of
steps per interval); the grid need not be uniform.

Initial state. Estimated jointly with ``p`` (``theta = (p, u0)``, as the paper's Lorenz
experiment and output error do), started from ``fit(u0=...)`` or a parabola fitted to the
first data points; ``fit_u0=False`` holds it at the given ``u0`` (the paper's
FitzHugh-Nagumo experiment), which is then required.

Options
-------
scheme : {"euler", "heun", "rk4"}
    Fixed-step scheme (default ``"rk4"``).
n_steps : int
    Steps per observation interval (default 1). Exclusive with ``dt``.
dt : float
    Largest step; each interval gets ``ceil(interval / dt)`` equal steps.
max_iter : int
    IRLS iterations (default 20: the paper identifies IRLS(20) with IRLS).
tol : float
    Stop when ``||theta_l - theta_{l-1}|| <= tol (||theta_{l-1}|| + tol)`` (default 1e-7).
max_nfev : int
    Evaluations per weighted least-squares solve (default 200).
fit_u0 : bool
    Estimate the initial state jointly (default True).
observed : sequence of int or str
    The observed states (the rows of the paper's ``H``); the other columns of ``U`` are
    ignored (any finite value). Default: all.
update_variance : bool
    False gives the conventional fixed-step estimator (2.4) (weights ``1/gamma_j^2``, one
    weighted least-squares solve): the baseline the paper compares with.
qml_start : bool
    Also run IRLS from the conventional estimate (itself fitted from the start) and keep
    the run with the smaller objective (3.9) (default True). IRLS is alternating
    minimisation of a non-convex objective: from a poor start the first variance update
    gives late observations, which the trajectory misses, large variances, and later
    updates need not restore them. False is the paper's Algorithm 3.1 from the start alone.
profile_ci : bool
    Also compute the paper's profile-likelihood intervals (section 3.5) for every entry of
    ``theta`` (costly: one IRLS per trial point); see :func:`profile_intervals`.
ci_level : float
    Their level (default 0.95).

Result
------
``x`` is ``p``, ``u0`` the fitted initial state, ``fun`` the objective (3.9)
``g = sum_kj (log v_kj + r_kj^2 / v_kj)`` (``-2 log L`` up to a constant) at the end,
``covariance_kind="deq"``: ``(J_w^T J_w)^{-1}`` (``p`` block) with ``J_w`` the weighted
residual Jacobian at the final weights (the variances held fixed; not rescaled, since the
weights already standardise the residuals); NaN, with ``success=False`` and the parameters
named in the message, when ``J_w`` is rank deficient (``FitResult.identifiability``, whose
test is :func:`~pymc_wendy.estimators.identifiability.jacobian_identifiability`).
``history`` holds:

``"discretization_variance"``
    (K, D) ``sigma_kj^2`` at the estimate (NaN for unobserved states): the final variance
    update is made at the returned ``theta``, so it matches ``"residuals"``.
``"discretization_sd"``
    Its square root.
``"weights"``
    (K, D) ``w_kj = 1 / (gamma_j^2 + sigma_kj^2)`` (NaN for unobserved states).
``"residuals"``
    (K, D) ``y - x~(theta)`` on the fitted scale (``log`` for log-normal noise).
``"gamma"``
    (D,) the observation-noise sd used (the weight caps).
``"theta"``, ``"theta_names"``, ``"theta_covariance"``
    The full estimate ``(p, u0)`` or ``p``, its names, and the covariance of the free entries.
``"iterations"``
    Per IRLS iteration: ``"theta"`` (L+1, P) from the start, ``"objective"`` (L,) ``g`` after
    each parameter update, ``"nfev"`` (L,) forward solves.
``"solver"``
    ``{"scheme", "n_steps", "steps" (per interval), "dt" (per interval), "fit_u0",
    "observed", "update_variance", "max_iter", "tol", "max_nfev"}``.
``"profile_intervals"``, ``"ci_level"``
    With ``profile_ci=True``: (P, 2) interval per entry of ``theta``.

:func:`plot_discretization_error` draws ``sigma_kj`` against time with the absolute
residuals.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
from scipy import optimize, stats

from pymc_wendy.estimators._bounds import strictly_inside
from pymc_wendy.estimators._problem import FitProblem
from pymc_wendy.estimators.identifiability import jacobian_identifiability
from pymc_wendy.estimators.output_error import fit_initial_state, local_quadratic_start
from pymc_wendy.estimators.registry import Estimator
from pymc_wendy.estimators.results import FitResult
from pymc_wendy.model.observation import as_observation
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak import kernels

__all__ = ["SCHEMES", "discrete_solution", "plot_discretization_error", "profile_intervals"]

#: Butcher tableaux ``(A, b, c)`` of the explicit schemes
SCHEMES: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
    "euler": (np.zeros((1, 1)), np.array([1.0]), np.array([0.0])),
    "heun": (np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([0.5, 0.5]), np.array([0.0, 1.0])),
    "rk4": (
        np.array([[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1.0, 0]], dtype=float),
        np.array([1, 2, 2, 1], dtype=float) / 6.0,
        np.array([0.0, 0.5, 0.5, 1.0]),
    ),
}

OPTIONS = frozenset(
    {"scheme", "n_steps", "dt", "max_iter", "tol", "max_nfev", "fit_u0", "observed"}
    | {"update_variance", "qml_start", "profile_ci", "ci_level"}
)
_DEFAULTS = {
    "scheme": "rk4",
    "n_steps": None,
    "dt": None,
    "max_iter": 20,
    "tol": 1e-7,
    "max_nfev": 200,
    "fit_u0": True,
    "observed": None,
    "update_variance": True,
    "qml_start": True,
    "profile_ci": False,
    "ci_level": 0.95,
}
# Residual reported where the scheme blew up: the optimiser must back off, so large but finite
_FAILED_RESIDUAL = 1e8


# --- options ------------------------------------------------------------------------------
def _check_options(options: Mapping, where: str = "options") -> None:
    """The scheme first, then what the generic check (names, counts, tolerances, flags)
    does not know: ``dt``, ``n_steps`` exclusive with it, ``ci_level``."""
    scheme = options.get("scheme", "rk4")
    if not isinstance(scheme, str) or scheme.lower() not in SCHEMES:
        raise ValueError(f"{where}['scheme'] must be one of {sorted(SCHEMES)}; got {scheme!r}")
    dt = options.get("dt")
    if dt is not None and not (
        isinstance(dt, int | float | np.number) and np.isfinite(dt) and dt > 0
    ):
        raise ValueError(f"{where}['dt'] must be a number > 0; got {dt!r}")
    if options.get("n_steps") is not None and dt is not None:
        raise ValueError(f"give {where}['n_steps'] or {where}['dt'], not both")
    level = options.get("ci_level", 0.95)
    if not (isinstance(level, float | int | np.number) and 0 < level < 1):
        raise ValueError(f"{where}['ci_level'] must be in (0, 1); got {level!r}")


def _observed_mask(observed, model: ODEModel) -> np.ndarray:
    D = model.n_states
    if observed is None:
        return np.ones(D, dtype=bool)
    items = [observed] if isinstance(observed, str | int | np.integer) else list(observed)
    mask = np.zeros(D, dtype=bool)
    for item in items:
        if isinstance(item, str):
            if item not in model.states:
                raise ValueError(f"observed state {item!r} is not one of {list(model.states)}")
            mask[model.states.index(item)] = True
        elif isinstance(item, int | np.integer) and not isinstance(item, bool) and 0 <= item < D:
            mask[int(item)] = True
        else:
            raise ValueError(f"observed must name states or give indices 0..{D - 1}; got {item!r}")
    if not mask.any():
        raise ValueError("observed must include at least one state")
    return mask


def _steps_per_interval(t: np.ndarray, n_steps, dt) -> np.ndarray:
    if dt is not None:
        # the tolerance keeps dt = interval / n (in floating point) at n steps, not n + 1
        return np.maximum(np.ceil(np.diff(t) / dt * (1 - 1e-9)), 1).astype(np.int64)
    return np.full(t.size - 1, 1 if n_steps is None else int(n_steps), dtype=np.int64)


# --- the discrete solution and its sensitivities --------------------------------------------
def _kernel(model: ODEModel):
    """numba ``integrate(t, steps, p, x0, A, b, c, sens, X, S) -> n_ok`` for ``model``."""
    return model.cached(("deq", "kernel"), _compile_kernel)


def _compile_kernel(model: ODEModel):
    import numba

    f, f_u, f_p = (model.numba_function(which) for which in ("f", "f_u", "f_p"))
    D, J, P = model.n_states, model.n_params, model.n_states + model.n_params
    start = _kernel_start(D, J)

    # One loop with no calls but the model's: it runs inside every residual evaluation, and
    # splitting the stages and updates into jitted helpers made it 1.2 to 1.3 times slower
    # inlined, 1.75 times called (lorenz and protein_transduction, RK4 with sensitivities).
    @numba.njit(cache=False)
    def integrate(t_obs, steps, p, x0, A, b, c, sens, X, S_out):
        # One pass over every fine step; returns the number of observation times reached
        # with a finite state (K on success), so a blow-up stops the loop early.
        s, K = b.size, t_obs.size
        x, S, tt, Y, Fb, Ab, Bb, k, dk, dY = start(x0, s, sens, X, S_out)
        for m in range(K - 1):
            n = steps[m]
            h = (t_obs[m + 1] - t_obs[m]) / n
            for q in range(n):
                t0 = t_obs[m] + q * h
                for i in range(s):
                    tt[0] = t0 + c[i] * h
                    for d in range(D):
                        acc = x[d]
                        for j in range(i):
                            acc += h * A[i, j] * k[j, d]
                        Y[0, d] = acc
                    F = f(tt, Y, p, Fb)
                    for d in range(D):
                        k[i, d] = F[0, d]
                    if sens:
                        for d in range(D):
                            for r in range(P):
                                acc = S[d, r]
                                for j in range(i):
                                    acc += h * A[i, j] * dk[j, d, r]
                                dY[d, r] = acc
                        Am = f_u(tt, Y, p, Ab)
                        Bm = f_p(tt, Y, p, Bb)
                        for d in range(D):
                            for r in range(P):
                                acc = Bm[0, d, r] if r < J else 0.0
                                for e in range(D):
                                    acc += Am[0, d, e] * dY[e, r]
                                dk[i, d, r] = acc
                for d in range(D):
                    acc = 0.0
                    for i in range(s):
                        acc += b[i] * k[i, d]
                    x[d] += h * acc
                if sens:
                    for d in range(D):
                        for r in range(P):
                            acc = 0.0
                            for i in range(s):
                                acc += b[i] * dk[i, d, r]
                            S[d, r] += h * acc
            for d in range(D):
                if not np.isfinite(x[d]):
                    return m + 1
            # loops, not row assignments (numba's shape messages, seconds to compile)
            for d in range(D):
                X[m + 1, d] = x[d]
                if sens:
                    for r in range(P):
                        S_out[m + 1, d, r] = S[d, r]
        return K

    return integrate


def _kernel_start(D: int, J: int):
    """numba ``start(x0, s, sens, X, S_out)``, the set-up of :func:`_compile_kernel`'s loop
    for ``D`` states, ``J`` parameters and an ``s``-stage scheme (once per solve).

    Stores the initial state ``x0`` (and, with ``sens``, its sensitivities ``[0, I]`` to
    ``(p, u0)``) as the first rows of ``X`` (``S_out``) and returns the working arrays: the
    state ``x`` and sensitivities ``S``, the stage time ``tt`` and value ``Y``, the output
    buffers ``Fb``, ``Ab``, ``Bb`` of ``f``, ``f_u``, ``f_p``, the stage slopes ``k``, their
    sensitivities ``dk`` and the stage value's ``dY``.
    """
    import numba

    P = J + D

    # inlined (numba IR), the loop runs as fast as when it allocated the arrays itself;
    # called, about 7 % slower
    @numba.njit(cache=False, inline="always")
    def start(x0, s, sens, X, S_out):
        x = x0.copy()
        S = np.zeros((D, P))
        for d in range(D):
            S[d, J + d] = 1.0
        for d in range(D):
            X[0, d] = x[d]
            if sens:
                for r in range(P):
                    S_out[0, d, r] = S[d, r]
        # generated functions write only structurally non-zero entries: one zeroed buffer
        # each, reused, keeps the zeros
        Fb, Ab, Bb = np.zeros((1, D)), np.zeros((1, D, D)), np.zeros((1, D, J))
        k, dk = np.zeros((s, D)), np.zeros((s, D, P))
        return x, S, np.empty(1), np.empty((1, D)), Fb, Ab, Bb, k, dk, np.empty((D, P))

    return start


def discrete_solution(
    model: ODEModel, p, u0, t, *, scheme: str = "rk4", n_steps: int = 1, sensitivities=False
):
    """The fixed-step numerical solution ``x~(t_k)`` and, optionally, ``dx~/d(p, u0)``.

    Parameters
    ----------
    model : ODEModel
    p : array (J,)
    u0 : array (D,)
        State at ``t[0]``.
    t : array (K,)
        Strictly increasing output times.
    scheme : {"euler", "heun", "rk4"}
    n_steps : int or array (K-1,)
        Equal steps per interval.
    sensitivities : bool
        Also return the exact derivative of the discrete solution, shape (K, D, J + D).

    Returns
    -------
    X : ndarray (K, D)
        NaN from the first interval where the scheme blew up.
    S : ndarray (K, D, J + D), only with ``sensitivities``
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}; got {scheme!r}")
    t = np.asarray(t, dtype=float)
    steps = np.broadcast_to(np.asarray(n_steps, dtype=np.int64), (t.size - 1,)).copy()
    D, J = model.n_states, model.n_params
    X = np.full((t.size, D), np.nan)
    S = np.full((t.size, D, J + D), np.nan) if sensitivities else np.empty((1, D, J + D))
    A, b, c = SCHEMES[scheme]
    _kernel(model)(
        t, steps, np.asarray(p, dtype=float), np.asarray(u0, dtype=float), A, b, c,
        bool(sensitivities), X, S,
    )  # fmt: skip
    return (X, S) if sensitivities else X


class _Discrete:
    """Predictions ``x~(theta)`` on the fitted scale and their Jacobian, cached by ``theta``.

    ``theta = (p, u0)`` always (``u0`` held or not is the caller's business).
    """

    def __init__(self, model, t, steps, scheme, log):
        self.model, self.t, self.steps, self.log = model, t, steps, log
        self.tableau = SCHEMES[scheme]
        self.kernel = _kernel(model)
        self.J, self.D = model.n_params, model.n_states
        self.nfev = 0
        self._cache = None

    def __call__(self, theta: np.ndarray):
        """``(pred (K, D), sens (K, D, P))``, or ``None`` where the scheme blew up."""
        if self._cache is not None and np.array_equal(self._cache[0], theta):
            return self._cache[1]
        J, D, K = self.J, self.D, self.t.size
        X = np.empty((K, D))
        S = np.empty((K, D, J + D))
        self.nfev += 1
        ok = self.kernel(
            self.t, self.steps, theta[:J].copy(), theta[J:].copy(), *self.tableau, True, X, S
        )
        out = None
        if ok == K and np.all(np.isfinite(S[-1])):
            if self.log:
                if np.all(X > 0):
                    out = (np.log(X), S / X[:, :, None])
            else:
                out = (X, S)
        self._cache = (theta.copy(), out)
        return out


# --- the two IRLS updates -----------------------------------------------------------------
def _variance_update(r2: np.ndarray, gamma2: np.ndarray) -> np.ndarray:
    """Total variances ``v_kj = gamma_j^2 + sigma_kj^2`` minimising (3.9) at fixed ``theta``.

    ``r2`` (K, n) squared residuals of the observed states; ``gamma2`` (n,). Non-decreasing
    in ``k`` and at least ``gamma_j^2`` (Theorem 3.5).
    """
    v = np.empty_like(r2)
    for j in range(r2.shape[1]):  # a handful of states; PAVA itself is compiled
        v[:, j] = optimize.isotonic_regression(r2[:, j], increasing=True).x
    return np.maximum(v, gamma2)


def _objective(r2: np.ndarray, v: np.ndarray) -> float:
    """(3.9): ``sum log v + r^2 / v`` (``-2 log L`` up to a constant)."""
    return float(np.sum(np.log(v) + r2 / v))


class _Irls:
    """Algorithm 3.1 for one data set; also runs the profiles of section 3.5."""

    def __init__(self, disc, Z, mask, gamma2, lo, hi, max_iter, tol, max_nfev):
        self.disc, self.Z, self.mask = disc, Z[:, mask], mask
        self.gamma2 = gamma2[mask]
        self.lo, self.hi = lo, hi  # over the full theta (infinite where unbounded)
        self.max_iter, self.tol, self.max_nfev = max_iter, tol, max_nfev

    def residual(self, theta):
        """Residuals of the observed states (K, n) and their Jacobian (K, n, P), or None."""
        out = self.disc(theta)
        if out is None:
            return None
        pred, sens = out
        return pred[:, self.mask] - self.Z, sens[:, self.mask, :]

    def r2(self, theta) -> np.ndarray:
        out = self.residual(theta)
        return np.full(self.Z.shape, _FAILED_RESIDUAL**2) if out is None else out[0] ** 2

    def weighted_fit(self, theta, v, free):
        sw = 1.0 / np.sqrt(v)
        idx = np.flatnonzero(free)
        base = theta.copy()
        size = self.Z.size

        def full(z):
            th = base.copy()
            th[idx] = z
            return th

        def res(z):
            out = self.residual(full(z))
            return np.full(size, _FAILED_RESIDUAL) if out is None else (out[0] * sw).ravel()

        def jac(z):
            out = self.residual(full(z))
            if out is None:
                return np.zeros((size, idx.size))
            return (out[1][:, :, idx] * sw[:, :, None]).reshape(size, idx.size)

        lo, hi = self.lo[idx], self.hi[idx]
        z0 = theta[idx].copy()
        bounded = bool(np.any(np.isfinite(lo) | np.isfinite(hi)))

        def fun_grad(z):
            r = res(z)
            return float(r @ r), 2.0 * (jac(z).T @ r)

        # The paper's quasi-Newton step first: from its Lorenz start, Gauss-Newton /
        # trust-region steps (trf, lm, dogbox alike) stop in a local minimum of the weighted
        # misfit (weighted SSR 314 against 21 at the truth, seed 0) that BFGS steps past.
        z0 = np.clip(z0, lo, hi)
        qn = optimize.minimize(
            fun_grad, z0, jac=True, method="L-BFGS-B" if bounded else "BFGS",
            bounds=optimize.Bounds(lo, hi) if bounded else None,
            options={"maxiter": self.max_nfev},
        )  # fmt: skip
        better = np.isfinite(qn.fun) and qn.fun <= fun_grad(z0)[0]
        z1 = qn.x if better and np.all(np.isfinite(qn.x)) else z0
        # then a trust-region polish with the exact Jacobian: BFGS's gradient tolerance
        # leaves the minimiser loose; Gauss-Newton from inside the basin converges fast.
        z1 = strictly_inside(z1, lo, hi)  # trf: strictly feasible
        sol = optimize.least_squares(
            res, z1, jac=jac, bounds=(lo, hi), method="trf", x_scale="jac",
            max_nfev=self.max_nfev,
        )  # fmt: skip
        if not np.all(np.isfinite(sol.x)):
            # from a point where the scheme blows up (zero Jacobian) trf can step to NaN;
            # stay put, so that the caller sees no progress rather than a NaN estimate
            sol.x, sol.success = z1, False
        return full(sol.x), sol

    def run(self, theta0, free, update_variance=True, v0=None):
        """Alternate (3.10) and (3.11) from ``theta0``; the final variances are updated at the
        returned ``theta`` (so ``g`` is the profile over the variances there)."""
        # trial points where the scheme nearly blows up overflow in the squares and the
        # optimisers' algebra; the outcome is judged by its residuals, so these floating-point
        # warnings are noise
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return self._run(theta0, free, update_variance, v0)

    def _run(self, theta0, free, update_variance, v0):
        theta = theta0.copy()
        path, objective, nfev = [theta.copy()], [], []
        converged = False
        n_iter = self.max_iter if update_variance else 1
        msg = ""
        for _ in range(n_iter):
            before = self.disc.nfev
            if update_variance:
                v = _variance_update(self.r2(theta), self.gamma2)
            else:
                v = np.broadcast_to(self.gamma2, self.Z.shape).copy() if v0 is None else v0
            new, sol = self.weighted_fit(theta, v, free)
            objective.append(_objective(self.r2(new), v))
            nfev.append(self.disc.nfev - before)
            step = np.linalg.norm(new - theta)
            scale = np.linalg.norm(theta)
            theta = new
            path.append(theta.copy())
            msg = sol.message
            if update_variance and step <= self.tol * (scale + self.tol):
                converged = True
                break
        if not update_variance:
            converged = bool(sol.success)
        r2 = self.r2(theta)
        v = _variance_update(r2, self.gamma2) if update_variance else v
        return {
            "theta": theta,
            "v": v,
            "g": _objective(r2, v),
            "converged": converged,
            "message": msg,
            "path": np.array(path),
            "objective": np.array(objective),
            "nfev": np.array(nfev, dtype=int),
        }


# --- the estimator --------------------------------------------------------------------------
def _setup(model, t, U, noise, sigma, bounds, u0, opts):
    """Validated pieces for :class:`_Irls`: everything checked before the first solve."""
    log = as_observation(noise).log_scale  # prepare's _forward_noise refused the others
    J, D = model.n_params, model.n_states
    mask = _observed_mask(opts["observed"], model)
    K = t.size
    P = J + (D if opts["fit_u0"] else 0)
    if K < 3 or K * int(mask.sum()) <= P:
        raise ValueError(
            f"deq needs at least 3 time points and more observations ({K} x {int(mask.sum())} "
            f"observed) than unknowns ({P})"
        )
    Z = np.log(U) if log else np.asarray(U, dtype=float)
    gamma = np.broadcast_to(np.asarray(sigma, dtype=float), (D,)).copy()
    if not np.all(np.isfinite(gamma[mask])) or np.any(gamma[mask] <= 0):
        raise ValueError(f"sigma (the noise sd, a lower bound on it suffices) must be > 0: {gamma}")
    if u0 is None:
        if not opts["fit_u0"] or not mask.all():
            raise ValueError(
                "deq needs u0 when the initial state is held fixed (fit_u0=False) or not "
                "every state is observed"
            )
        x0 = local_quadratic_start(t, Z)
        x0 = np.exp(x0) if log else x0
    else:
        x0 = np.asarray(u0, dtype=float)
        if x0.shape != (D,) or not np.all(np.isfinite(x0)):
            raise ValueError(f"u0 must be {D} finite values; got {u0!r}")
    lo = np.full(J + D, -np.inf)
    hi = np.full(J + D, np.inf)
    if bounds is not None:
        lo[:J], hi[:J] = bounds
    steps = _steps_per_interval(t, opts["n_steps"], opts["dt"])
    return mask, Z, gamma, x0, lo, hi, steps


def _deq(model, t, U, p0, u0, *, noise, sigma, bounds, options) -> dict:
    """The fit, as a plain dict (``run`` wraps it in a :class:`FitResult`)."""
    opts = {**_DEFAULTS, **options}
    opts["scheme"] = opts["scheme"].lower()
    mask, Z, gamma, x0, lo, hi, steps = _setup(model, t, U, noise, sigma, bounds, u0, opts)
    J, D = model.n_params, model.n_states
    disc = _Discrete(model, t, steps, opts["scheme"], as_observation(noise).log_scale)
    irls = _Irls(disc, Z, mask, gamma**2, lo, hi, opts["max_iter"], opts["tol"], opts["max_nfev"])
    theta0 = np.concatenate([np.asarray(p0, dtype=float), x0])
    if u0 is None and irls.residual(theta0) is None:
        # The parabola's start can put a small state where the solution blows up (logistic
        # growth at 5 % noise: u0 = 0.01 against a noise sd of 0.035; 37 of 100 fits failed
        # in benchmarks/baselines.py). Then fit u0 to the first quarter of the data with p
        # held at its start, by forward solves (output error's fallback for several
        # experiments).
        theta0[J:] = fit_initial_state(model, t, Z, noise, p0)
    free = np.ones(J + D, dtype=bool)
    free[J:] = opts["fit_u0"]
    out = irls.run(theta0, free, update_variance=opts["update_variance"])
    out["starts"] = {"start": out["g"]}
    if opts["update_variance"] and opts["qml_start"]:
        # Alternating minimisation can settle where late residuals carry tiny weights
        # because the trajectory misses them, and then never looks at them again (Lorenz,
        # Euler, dt = 1e-3, paper's start: g = 1952 there against -387 from the
        # conventional estimate). A second start at the conventional fixed-step estimate,
        # keeping the lower g, costs one weighted solve and one more IRLS run.
        qml = irls.run(theta0, free, update_variance=False)
        second = irls.run(qml["theta"], free)
        out["starts"]["qml"] = second["g"]
        if second["g"] < out["g"]:
            second["starts"] = out["starts"]
            out = second
        out["starts"]["chosen"] = "qml" if out is second else "start"
    out.update(irls=irls, free=free, mask=mask, gamma=gamma, steps=steps, opts=opts, Z=Z)
    return out


def _history(out, model, t) -> dict:
    irls, free, mask, opts = out["irls"], out["free"], out["mask"], out["opts"]
    theta, v = out["theta"], out["v"]
    J, D = model.n_params, model.n_states
    K = t.size
    res = irls.residual(theta)
    failed = res is None
    resid = np.full((K, D), np.nan)
    var = np.full((K, D), np.nan)
    w = np.full((K, D), np.nan)
    n_free = int(free.sum())
    cov = np.full((n_free, n_free), np.nan)
    if not failed:
        resid[:, mask] = -res[0]  # data minus solution
        var[:, mask] = v - out["gamma"][mask] ** 2
        w[:, mask] = 1.0 / v
    names = list(model.params) + [f"{s}(t0)" for s in model.states]
    free_names = [n for n, keep in zip(names, free, strict=True) if keep]
    ident = None
    if not failed:
        Jw = (res[1][:, :, free] / np.sqrt(v)[:, :, None]).reshape(-1, n_free)
        # a pseudo-inverse would give zero variance along a direction the data do not
        # see (a zero-width interval); a rank-deficient Jacobian gives NaN instead
        ident = jacobian_identifiability(Jw, free_names, "weighted residuals")
        if ident.identifiable:
            cov = kernels.gls_covariance(Jw)
    return {
        "discretization_variance": var,
        "discretization_sd": np.sqrt(var),
        "weights": w,
        "residuals": resid,
        "gamma": out["gamma"],
        "theta": theta[free] if opts["fit_u0"] else theta[:J],
        "theta_names": free_names,
        "theta_covariance": cov,
        "starts": out["starts"],
        "iterations": {"theta": out["path"], "objective": out["objective"], "nfev": out["nfev"]},
        "solver": {
            "scheme": opts["scheme"],
            "n_steps": opts["n_steps"],
            "steps": out["steps"],
            "dt": np.diff(t) / out["steps"],
            "fit_u0": opts["fit_u0"],
            "observed": [model.states[d] for d in np.flatnonzero(mask)],
            "update_variance": opts["update_variance"],
            "qml_start": opts["qml_start"],
            "max_iter": opts["max_iter"],
            "tol": opts["tol"],
            "max_nfev": opts["max_nfev"],
            "bounds": None if not np.any(np.isfinite(irls.lo)) else (irls.lo[:J], irls.hi[:J]),
        },
        "_failed": failed,
        "_identifiability": ident,
    }


def run(problem: FitProblem) -> FitResult:
    """``fit(method="deq")``."""
    start = time.perf_counter()
    if problem.several:
        raise ValueError("deq fits one experiment; got several")
    model, t = problem.model, problem.t
    out = _deq(
        model, t, problem.U, problem.start, problem.u0, noise=problem.noise,
        sigma=problem.sigma, bounds=problem.bounds, options=problem.options,
    )  # fmt: skip
    hist = _history(out, model, t)
    failed = hist.pop("_failed")
    ident = hist.pop("_identifiability")
    J = model.n_params
    theta = out["theta"]
    opts = out["opts"]
    iters = len(out["objective"])
    if failed:
        status, message = "failed", "the fixed-step solution blows up at the estimate"
    elif out["converged"]:
        status = "converged"
        message = (
            f"IRLS converged in {iters} iterations"
            if opts["update_variance"]
            else f"conventional fixed-step least squares: {out['message']}"
        )
    else:
        status = "max_iter"
        message = f"IRLS stopped at max_iter={opts['max_iter']} (theta still moving)"
    cov = hist["theta_covariance"][:J, :J]
    result = FitResult(
        x=theta[:J].copy(),
        method="deq",
        success=status == "converged",
        status=status,
        message=message,
        nit=iters,
        nfev=int(out["irls"].disc.nfev),
        wall_time=0.0,
        fun=out["g"],
        nll=None,
        covariance_kind="deq",
        covariances={"deq": cov},
        u0=theta[J:].copy(),
        history=hist,
        identifiability=ident,
        **problem.common(),
    )
    if opts["profile_ci"] and not failed:
        level = float(opts["ci_level"])
        result.history["profile_intervals"] = profile_intervals(result, level=level)
        result.history["ci_level"] = level
    result.wall_time = time.perf_counter() - start
    return result


def _irls_of(result: FitResult) -> _Irls:
    """The IRLS of a finished fit, rebuilt from its result (kept out of ``history`` so that
    results stay picklable; the compiled scheme is cached on the model)."""
    sv = result.history["solver"]
    model, t = result.model, result.t
    mask = np.isin(np.array(model.states), sv["observed"])
    J, D = model.n_params, model.n_states
    lo, hi = np.full(J + D, -np.inf), np.full(J + D, np.inf)
    if sv["bounds"] is not None:
        lo[:J], hi[:J] = sv["bounds"]
    log = as_observation(result.noise).log_scale
    Z = np.log(result.U) if log else np.asarray(result.U, dtype=float)
    disc = _Discrete(model, t, sv["steps"], sv["scheme"], log)
    gamma2 = result.history["gamma"] ** 2
    return _Irls(disc, Z, mask, gamma2, lo, hi, sv["max_iter"], sv["tol"], sv["max_nfev"])


# --- profile-likelihood intervals (section 3.5) --------------------------------------------
def profile_intervals(result: FitResult, level: float = 0.95, *, which=None, xtol=0.01):
    """The paper's profile-likelihood confidence intervals (section 3.5) of a deq fit.

    For entry ``i`` of ``theta`` the profile ``g_i(v) = min g(theta, Sigma)`` over the other
    entries and the variances with ``theta_i = v`` is computed by IRLS with ``theta_i`` held
    (warm-started from the neighbouring profile point); the interval ends are where
    ``g_i(v) - g(theta_hat) = chi2_1^{-1}(level)``. Brent's method on a bracket found by
    stepping out in multiples of the Wald standard error replaces the paper's bisection
    (same ends, fewer profile fits); ``xtol`` is the end tolerance in standard errors.

    Parameters
    ----------
    result : FitResult
        From ``fit(method="deq")``.
    level : float
    which : sequence of int or str, optional
        Entries of ``history["theta_names"]`` (default all).
    xtol : float
        Tolerance on the ends, in Wald standard errors.

    Returns
    -------
    ndarray (n, 2)
        Lower and upper ends; NaN where the profile did not reach the threshold within 64
        standard errors.
    """
    if result.method != "deq" or "solver" not in result.history:
        raise ValueError("profile_intervals needs a result of fit(method='deq')")
    hist = result.history
    irls = _irls_of(result)
    names = hist["theta_names"]
    J = result.model.n_params
    fit_u0 = hist["solver"]["fit_u0"]
    theta_hat = np.concatenate([result.x, result.u0])
    free = np.ones(theta_hat.size, dtype=bool)
    free[J:] = fit_u0
    free_idx = np.flatnonzero(free)
    g_hat = float(result.fun)
    q = float(stats.chi2.ppf(level, 1))
    se = np.sqrt(np.abs(np.diag(hist["theta_covariance"])))
    if which is None:
        sel = range(len(names))
    else:
        sel = [names.index(w) if isinstance(w, str) else int(w) for w in which]
    ends = np.full((len(sel), 2), np.nan)
    for row, i in enumerate(sel):
        k = free_idx[i]
        fr = free.copy()
        fr[k] = False
        s = se[i] if np.isfinite(se[i]) and se[i] > 0 else max(abs(theta_hat[k]), 1.0) * 1e-2
        for side, sign in enumerate((-1.0, 1.0)):
            warm = {"theta": theta_hat.copy()}

            def drop(v, warm=warm, k=k, fr=fr):
                th = warm["theta"].copy()
                th[k] = v
                out = irls.run(th, fr)
                warm["theta"] = out["theta"]
                return out["g"] - g_hat - q

            inner, step = theta_hat[k], 1.96 * s
            outer = inner + sign * step
            lo_k, hi_k = irls.lo[k], irls.hi[k]
            found = False
            while abs(outer - theta_hat[k]) <= 64 * s:
                if not lo_k <= outer <= hi_k:
                    break
                if drop(outer) > 0:
                    found = True
                    break
                inner, step = outer, step * 2
                outer = inner + sign * step
            if found:
                # warm starts follow the search; re-anchor them at the inner end
                warm["theta"] = theta_hat.copy()
                a, b = sorted((inner, outer))
                ends[row, side] = optimize.brentq(drop, a, b, xtol=xtol * s)
    return ends


# --- plot -------------------------------------------------------------------------------
def plot_discretization_error(result: FitResult, ax=None, *, residuals: bool = True):
    """Estimated discretization-error sd ``sigma_kj`` against time, one line per state.

    Parameters
    ----------
    result : FitResult
        From ``fit(method="deq")``.
    ax : matplotlib Axes, optional
    residuals : bool
        Also show ``|y_kj - x~_j(t_k)|`` as faint points (what the isotonic fit summarises).

    Returns
    -------
    matplotlib Axes
    """
    import matplotlib.pyplot as plt

    if result.method != "deq":
        raise ValueError(f"needs a result of fit(method='deq'); got method={result.method!r}")
    if ax is None:
        _, ax = plt.subplots()
    hist = result.history
    sd = hist["discretization_sd"]
    for d, name in enumerate(result.model.states):
        if np.all(np.isnan(sd[:, d])):
            continue  # unobserved
        (line,) = ax.plot(result.t, sd[:, d], label=f"$\\hat\\sigma$ {name}")
        if residuals:
            ax.plot(
                result.t, np.abs(hist["residuals"][:, d]), ".", ms=2, alpha=0.3,
                color=line.get_color(),
            )  # fmt: skip
    solver = hist["solver"]
    dt = float(np.max(solver["dt"]))
    ax.set_xlabel("t")
    ax.set_ylabel("discretization error sd")
    ax.set_title(f"{result.model.name}: {solver['scheme']}, dt = {dt:.3g}")
    ax.legend()
    return ax


ESTIMATOR = Estimator(
    name="deq",
    run=run,
    options=OPTIONS,
    summary="fixed-step output error with isotonic discretization-error variances (IRLS)",
    covariance="deq",
    weak_likelihood=False,
    check_options=_check_options,
)
