"""Does the ODE solution at a weak-form estimate fit the data? (issue 55)

A weak-form estimate (``"mle"``, ``"irls"``, ``"wls"``) never solves the ODE, so nothing in the
fit itself says whether the solution at the estimate goes through the data: a wrong known
initial state, too few points per oscillation or a misspecified model can give a converged
fit whose trajectory misses the data by many noise levels. After such a fit of one experiment
of an :class:`~pymc_wendy.ODEModel`, :func:`pymc_wendy.fit` calls :func:`forward_check`:

1. The initial state: the known one (``initial_state=``), else fitted with the parameters
   held at the estimate: to the first quarter of the data
   (:func:`~pymc_wendy.estimators.output_error.fit_initial_state`), then to more points step
   by step up to all of them, each step at most doubling them and letting the norm of
   ``du/du0`` grow by at most :data:`GROWTH_STEP` (:func:`stages`). Where the compiled solver
   gives no ``du/du0`` (models with inputs or of order > 1, whose sensitivity solves cost
   0.1-0.3 s each), the first-quarter state is kept if the test passes from it, else refitted
   to all the data in one step. Fitted to all the data at once, from guesses taken from the
   first points, it ended in a wrong local minimum (residuals 2-8 noise sd at the *true*
   parameters) on Lotka-Volterra over 20 time units and Hindmarsh-Rose over 10 at 20 %
   noise, and on 8 of 12 Lorenz series over 15 time units (5 and 20 % noise); plain doubling
   found the first ones but failed on 6 of the Lorenz series, the growth limit on none.
2. One forward solve from it, and per state the residual sd ``s_d = sqrt(RSS_d / nu)`` with
   ``nu = N - (J + n_0) / D`` degrees of freedom, against the noise sd ``sigma_d`` the fit
   used (:func:`~pymc_wendy.estimators.output_error.residual_noise_of_data`).
3. The test (:func:`excess`): a state fails when ``s_d^2 / sigma_d^2`` is beyond its
   ``1 - FALSE_ALARM / D`` quantile under a correct fit, *and* ``s_d > MATERIAL sigma_d``.
   Under a correct fit with Gaussian noise ``RSS_d / sigma_d^2`` is about chi-square with
   ``nu`` degrees of freedom (the estimate is not the least-squares one, which adds a
   few residual degrees of freedom' worth at most); when ``sigma`` was itself estimated the
   ratio is F-distributed, with the estimate's own effective degrees of freedom
   (:func:`filter_dof`: about a quarter of the filtered values for the high-order filter).
   Bonferroni over the states keeps the family-wise false-alarm rate of a good fit below
   ``FALSE_ALARM``. The statistical part alone would, on long series, flag misfits of a few
   per cent of the noise level (a filter estimate a little low, a model slightly off) that
   change no conclusion: the material part asks for a residual sd half as large again as
   the noise. On short series the statistical part is the stricter one (21 points, given
   ``sigma``: ``s_d > 1.57 sigma_d``).
4. Where a failed test could come from the forward solve rather than the estimate, it is
   not trusted: when the solver's error, amplified by the growth of ``du/du0`` over the data,
   is a share of the noise level above
   :data:`~pymc_wendy.model.chaos.CHAOS_NOISE_SHARE` (the guard of
   :func:`~pymc_wendy.check_weak`, computed from the first step's initial state before the
   rest of the fit: Lorenz over 30 time units, most over 20 at 5 % noise); and when the
   initial state is fitted and the same procedure fails on any of :data:`RECOVERY_DRAWS`
   data sets simulated at the estimate itself (the trajectory from the fitted initial state
   plus Gaussian noise of the fit's level, seeds 0, 1, ...): then the initial state cannot be
   recovered reliably over this span, and a misfit on the real data says nothing about the
   parameters. The recovery guard costs nothing unless the test fails.

The entry ``FitResult.history["forward_check"]`` records the numbers whether or not the
test fails; ``verdict`` is ``"passed"``, ``"misfit"``, ``"skipped"`` (with ``note``) or
``"solve_failed"``.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import linalg as sla
from scipy import optimize, stats

from pymc_wendy.estimators.output_error import (
    DEFAULT_SOLVER,
    _InitialState,
    fit_initial_state,
    residual_noise_of_data,
)
from pymc_wendy.model.chaos import CHAOS_NOISE_SHARE, solver_error_share
from pymc_wendy.model.compiled_solve import (
    SolveFailed,
    compiled_solver,
    max_steps_for,
    supports,
)
from pymc_wendy.model.observation import as_observation
from pymc_wendy.model.simulate import SimulationError, solve
from pymc_wendy.weak.noise import noise_filter

__all__ = [
    "FALSE_ALARM", "INFORMATION_FLOOR", "MATERIAL", "compare_information", "excess",
    "filter_dof", "forward_check", "overconfidence_message",
]  # fmt: skip

#: family-wise false-alarm rate of the test on a correct fit (Bonferroni over the states)
FALSE_ALARM = 1e-3
#: residual sd, in noise sds, below which no misfit is reported however significant
MATERIAL = 1.5
#: data sets simulated at the estimate by the recovery guard (noise seeds 0, 1, ...): where
#: the initial-state fit fails on a share of noise draws (Lorenz over 20 time units: on 1 of
#: 5 draws at one estimate, 2 of 5 at the truth), one draw misses it too often
RECOVERY_DRAWS = 3
#: growth of ``|du/du0|`` allowed within one step of the initial state's continuation
GROWTH_STEP = 3.0
#: evaluations per least-squares step of the initial state's continuation
_STAGE_NFEV = 100
#: the longest series checked whole; a longer one is checked on its first this many points
WINDOW_POINTS = 4097
#: the least ratio of a weak-form variance to the forward model's Cramer-Rao bound, over all
#: directions, that passes (:func:`compare_information`): a weak standard error 0.6 of the
#: bound's. Measured (``benchmarks/forward_check.py``): 0.80-1.31 on 300 well-posed catalogue
#: fits at 513 points, 0.43-1.3 on Lotka-Volterra at 21; 0.008-0.28 at the logistic's
#: carrying capacity and 0.11-0.30 on Goodwin 3D at 10 % (estimates 2.4-12 se off)
INFORMATION_FLOOR = 0.36


def filter_dof(n: int) -> float:
    """Effective degrees of freedom of the high-order filter's noise estimate on ``n`` points.

    The estimate is the RMS of ``n_f`` filtered values, a quadratic form ``e^T A e`` of the
    noise whose variance is ``2 tr(A^2) sigma^4``: it is worth ``(tr A)^2 / tr(A^2)`` values,
    ``n_f`` times ``r_0^2 / sum_l r_l^2`` with ``r`` the stencil's autocorrelation (0.25 for
    the 17-point stencil of order 6). Stencil as in :func:`~pymc_wendy.weak.noise.estimate_noise`.
    """
    half_width = min(8, (n - 3) // 2)
    if half_width < 2:
        return 1.0
    w = noise_filter(min(6, 2 * half_width), half_width)
    r = np.correlate(w, w, "full")
    n_f = n - w.size + 1
    return float(max(n_f * r[w.size - 1] ** 2 / np.sum(r**2), 1.0))


def excess(ratio: np.ndarray, dof: float, noise_dof: float) -> tuple[np.ndarray, np.ndarray]:
    """``(fails, p_value)`` per state: the residual sd over the noise sd ``ratio`` is too
    large for a correct fit (module docstring, step 3). ``noise_dof`` is ``inf`` for a known
    noise level."""
    ratio = np.asarray(ratio, dtype=float)
    x = ratio**2
    if np.isinf(noise_dof):
        p = stats.chi2.sf(x * dof, dof)
    else:
        p = stats.f.sf(x, dof, noise_dof)
    fails = (p < FALSE_ALARM / ratio.size) & (ratio > MATERIAL)
    return fails, p


def _first_stage(t: np.ndarray) -> int:
    """Points the continuation of the initial-state fit starts on (a quarter, at least 10)."""
    return min(max(10, t.size // 4), t.size)


def stages(n: int, N: int, profile: np.ndarray | None = None) -> list[int]:
    """Row counts of the continuation's steps after the first ``n`` rows, up to ``N``.

    Given the running maximum ``profile`` (N,) of ``|du(t)/du0|``, each step at most doubles
    the rows (a last step of under a quarter more is merged into the one before) and lets
    ``profile`` grow by at most :data:`GROWTH_STEP`. Without it (models the compiled solver
    does not take, whose sensitivity solves cost 0.1-0.3 s each), one step to all rows."""
    if profile is None:
        return [N] if n < N else []
    out = []
    while n < N:
        m = min(2 * n, N)
        if N - m < m // 4:
            m = N
        # the first row beyond the allowed growth (profile is non-decreasing)
        j = int(np.searchsorted(profile, GROWTH_STEP * profile[n - 1], side="right"))
        m = min(m, max(j, n + 1))
        out.append(m)
        n = m
    return out


def continue_initial_state(
    model, t, X, noise, p, solver, inputs, u0, n, profile=None
) -> np.ndarray:
    """The initial state ``u0``, fitted to the first ``n`` rows of ``X`` with ``p`` fixed,
    refitted on more rows step by step (:func:`stages`) up to all of them; a step that does
    not lower the misfit is not taken. Each least-squares step is capped at
    :data:`_STAGE_NFEV` evaluations: from the previous step's state a solution converges in a
    few. Where the solution from the previous step's state diverges on the longer span (a
    start fitted to the first noisy points, below zero), the step starts afresh from the
    data (:func:`~pymc_wendy.estimators.output_error.fit_initial_state` on its rows)."""
    log = as_observation(noise).log_scale
    x = np.log(u0) if log else np.asarray(u0, dtype=float)
    opts = {**DEFAULT_SOLVER, **(solver or {})}
    for m in stages(n, t.size, profile):
        prob = _InitialState(model, t, X, noise, p, m, opts, inputs)
        start = float(np.sum(prob.residual(x) ** 2))
        if prob.problem.n_failed:
            fresh = fit_initial_state(model, t, X, noise, p, solver, inputs=inputs, n=m)
            x = np.log(fresh) if log else fresh
            start = float(np.sum(prob.residual(x) ** 2))
        fit = optimize.least_squares(
            prob.residual, x, jac=prob.jacobian, x_scale="jac", max_nfev=_STAGE_NFEV
        )
        if 2 * fit.cost <= start:
            x = fit.x
    return np.exp(x) if log else x


def fit_initial_state_all(model, t, X, noise, p, solver, inputs) -> np.ndarray:
    """The initial state fitted to all the data with ``p`` fixed, by continuation over the
    data (module docstring, step 1); the companion state for models of order > 1."""
    n = _first_stage(t)
    u0 = fit_initial_state(model, t, X, noise, p, solver, inputs=inputs, n=n)
    opts = {**DEFAULT_SOLVER, **(solver or {})}
    S0 = _sensitivity(model, p, u0, t, opts)
    profile = None if S0 is None else _profile(S0)
    return continue_initial_state(model, t, X, noise, p, solver, inputs, u0, n, profile)


def forward_check(
    model, t, X, U, noise: str, p, sigma, *, inputs=None, solver=None, known=None,
    noise_dof: float = np.inf, noise_source: str = "given",
) -> dict:  # fmt: skip
    """The forward check of the estimate ``p`` (module docstring): the history entry.

    ``X`` (N, D) the data on the likelihood's scale (``log U`` for log-normal noise), ``U``
    on their own; ``sigma`` (D,) the noise level the fit used, ``noise_dof`` the degrees of
    freedom of its estimate (``inf`` when given) and ``noise_source`` how it was obtained;
    ``known`` a known :class:`~pymc_wendy.model.data.InitialState`. Above
    :data:`WINDOW_POINTS` points, the first that many only (``entry["window"]``: their first
    and last time; None when the whole series is checked).
    """
    start = time.perf_counter()
    sigma = np.broadcast_to(np.asarray(sigma, dtype=float), (X.shape[1],)).copy()
    # A long series is checked on its first WINDOW_POINTS points. Over the whole of it the
    # check costs minutes and rarely says anything: Lotka-Volterra over 10^5 points (1950
    # time units) took 480 s to find that its initial state cannot be recovered there (du/du0
    # grows 1e4-fold), and skipped. Within the window the solve is reliable, and an estimate
    # that does not describe the data there (p = 0 from test functions wider than the
    # dynamics, issue 58) is found in a second or two.
    window = None
    if t.size > WINDOW_POINTS:
        window = (float(t[0]), float(t[WINDOW_POINTS - 1]))
        t, X, U = t[:WINDOW_POINTS], X[:WINDOW_POINTS], U[:WINDOW_POINTS]
    case = _Case(model, t, X, U, noise, np.asarray(p, dtype=float), sigma, inputs, solver, known)
    entry = {
        "verdict": "passed", "residual_sd": None, "noise_sd": sigma, "ratio": None,
        "p_value": None, "dof": None, "noise_dof": float(noise_dof),
        "noise_source": noise_source, "initial_state": "fitted" if known is None else "known",
        "u0": None, "failing": (), "growth": None, "solver_share": None,
        "recovery_ratio": None, "false_alarm": FALSE_ALARM, "material": MATERIAL,
        "window": window, "information": None,
        "information_note": "not computed: only for a passed check of the whole series",
    }  # fmt: skip
    verdict, note = _run(case, entry)
    entry.update(verdict=verdict, note=note, time_s=time.perf_counter() - start)
    return entry


class _Case:
    """What the check works on: the model, the data and the estimate."""

    def __init__(self, model, t, X, U, noise, p, sigma, inputs, solver, known):
        self.model, self.t, self.X, self.U, self.noise = model, t, X, U, noise
        self.p, self.sigma, self.inputs, self.solver, self.known = p, sigma, inputs, solver, known
        self.opts = {**DEFAULT_SOLVER, **(solver or {})}

    def residuals(self, u0, n, profile, noise_dof):
        """:func:`residual_noise_of_data` from the known state, or from ``u0`` fitted to the
        first ``n`` rows, refitted to all the rows (:func:`continue_initial_state`). Without
        ``du/du0`` (``profile`` None: models with inputs or of order > 1, whose sensitivity
        solves take 0.1-0.3 s each) ``u0`` is kept as it is if the test passes from there: a
        better fit of the initial state could only lower the residuals."""
        m, t, X, noise, p = self.model, self.t, self.X, self.noise, self.p
        if self.known is not None:
            return residual_noise_of_data(
                m, t, X, noise, p, self.inputs, self.solver, initial=self.known
            )
        if profile is None:
            try:
                est = residual_noise_of_data(m, t, X, noise, p, self.inputs, self.solver, u0=u0)
                if not excess(est.sigma / self.sigma, est.dof, noise_dof)[0].any():
                    return est
            except SimulationError:
                pass
        u0 = continue_initial_state(m, t, X, noise, p, self.solver, self.inputs, u0, n, profile)
        try:
            return residual_noise_of_data(m, t, X, noise, p, self.inputs, self.solver, u0=u0)
        except SimulationError:  # the fit of all the data at once, as the last resort
            return residual_noise_of_data(m, t, X, noise, p, self.inputs, self.solver)


def _run(case: _Case, entry: dict) -> tuple[str, str]:
    """Fill ``entry`` with the check's numbers; return its verdict and note."""
    try:
        # the chaos guard first, from the known state or the initial state fitted to the first
        # quarter: on a chaotic span the rest of the initial-state fit is long and pointless
        u0 = n = profile = None
        if case.known is not None:
            S0 = _sensitivity(case.model, case.p, case.known.u0, case.t, case.opts, case.known.t0)
        else:
            n = _first_stage(case.t)
            u0 = fit_initial_state(
                case.model, case.t, case.X, case.noise, case.p, case.solver, inputs=case.inputs,
                n=n,
            )  # fmt: skip
            S0 = _sensitivity(case.model, case.p, u0, case.t, case.opts)
        if S0 is not None:
            share = solver_error_share(S0, case.sigma, case.U, case.noise, case.opts["rtol"])
            entry["growth"], entry["solver_share"] = share
            profile = _profile(S0)
            if entry["solver_share"] > CHAOS_NOISE_SHARE:
                return "skipped", _chaos_note(entry, case.opts)
        est = case.residuals(u0, n, profile, entry["noise_dof"])
    except SimulationError as exc:
        return "solve_failed", (
            f"the ODE solve at the estimate fails over the data ({exc}), so the estimate "
            "could not be checked against them; a weak-form estimate whose solution cannot be "
            "computed over the data is suspect: refit with method='hybrid'"
        )
    except ValueError as exc:  # too few points for the degrees of freedom
        return "skipped", f"no forward check: {exc}"
    ratio = est.sigma / case.sigma
    fails, pval = excess(ratio, est.dof, entry["noise_dof"])
    entry.update(residual_sd=est.sigma, ratio=ratio, p_value=pval, dof=est.dof)
    entry["u0"] = np.asarray(est.u0, dtype=float)
    entry["failing"] = tuple(case.model.observed_states[i] for i in np.flatnonzero(fails))
    if not fails.any():
        if entry["window"] is None:
            entry["information"], entry["information_note"] = _information(case, entry["u0"])
        return "passed", ""
    for seed in range(RECOVERY_DRAWS if case.known is None else 0):
        recovered = _recovery(case, entry["u0"], seed)
        worst = entry["recovery_ratio"]
        if recovered is None or worst is None or np.max(recovered) > np.max(worst):
            entry["recovery_ratio"] = recovered
        if recovered is None or excess(recovered, est.dof, np.inf)[0].any():
            return "skipped", _recovery_note(entry)
    return "misfit", ""


def _chaos_note(entry: dict, opts: dict) -> str:
    return (
        f"chaotic over this span: du/du0 grows by {entry['growth']:.1e} over the data, so the "
        f"solver's error (relative tolerance {opts['rtol']:g}) reaches "
        f"{entry['solver_share']:.2g} of the noise level, and the forward residuals would say "
        "nothing about the estimate"
    )


def _recovery_note(entry: dict) -> str:
    recovered = entry["recovery_ratio"]
    what = "the solve failed" if recovered is None else f"residual sd {_fmt(recovered)} noise sd"
    growth = entry["growth"]
    grew = "" if growth is None else f"; du/du0 grows by {growth:.1e} over the data"
    return (
        "chaotic over this span (or as sensitive to the initial state): on data simulated at "
        f"the estimate the initial state cannot be recovered ({what}{grew}), so the forward "
        f"residuals on these data (sd {_fmt(entry['ratio'])} noise sd) say nothing about the "
        "estimate"
    )


def _sensitivity(model, p, u0, t, opts, t0=None) -> np.ndarray | None:
    """``du/du0`` (n, D, n0) of the solution from ``u0`` at ``t0`` (default ``t[0]``) at the
    data times ``t``; None for a model the compiled solver does not take (inputs, order > 1),
    or a failed solve."""
    solved = _sensitivities(model, p, u0, t, opts, t0)
    return None if solved is None else solved[1][:, model.observed_columns, model.n_params :]


def _sensitivities(model, p, u0, t, opts, t0=None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(U, S)`` at the data times: the solution from ``u0`` at ``t0`` (default ``t[0]``)
    and its derivatives in ``(p, u0)`` (n, D, J + D); None as for :func:`_sensitivity`."""
    if not supports(model):
        return None
    before = t0 is not None and t0 < t[0]
    times = np.concatenate([[t0], t]) if before else t
    try:
        U, S = compiled_solver(model).sensitivities(
            p, np.asarray(u0, dtype=float), times, rtol=opts["rtol"], atol=opts["atol"],
            max_steps=max_steps_for(opts["max_nfev"], times.size),
        )  # fmt: skip
    except SolveFailed:
        return None
    return U[int(before) :], S[int(before) :]


def _information(case: _Case, u0: np.ndarray) -> tuple[np.ndarray | None, str]:
    """The forward model's Fisher information of the parameters at the estimate, (J, J),
    with a fitted initial state profiled out (the Schur complement of its block); or None
    and why not.

    With Gaussian noise of a constant level on the likelihood's scale it is ``A^T A``, ``A``
    the sensitivities of the observed solution (of its log for log-normal noise) divided by
    the noise sd, at the data present: its inverse is the Cramer-Rao bound of the exact
    model at these data.
    """
    model, observation = case.model, as_observation(case.noise)
    if observation.per_entry:
        return None, "not computed: the noise level changes with the solution"
    known = case.known
    start, t0 = (u0, None) if known is None else (known.u0, known.t0)
    solved = _sensitivities(model, case.p, start, case.t, case.opts, t0)
    if solved is None:
        return None, "not computed: no compiled sensitivity solve for this model"
    U, S = solved
    cols = model.observed_columns
    S = S[:, cols, :]
    if observation.log_scale:
        S = S / U[:, cols, None]
    A = np.where(np.isfinite(case.X)[:, :, None], S / case.sigma[None, :, None], 0.0)
    A = A.reshape(-1, S.shape[-1])
    F = A.T @ A
    J = model.n_params
    if known is not None:
        return F[:J, :J], ""
    Fpu, Fuu = F[:J, J:], F[J:, J:]
    return F[:J, :J] - Fpu @ sla.pinvh(Fuu) @ Fpu.T, ""


def compare_information(entry: dict, cov: np.ndarray, names) -> bool:
    """Whether the weak covariance ``cov`` claims more than the forward model's information
    ``entry["information"]`` allows; fills ``entry["information_ratio"]`` (the least weak
    variance over the Cramer-Rao one, over all directions) and ``entry["overconfident"]``
    (the parameters of that direction, when below :data:`INFORMATION_FLOOR`).

    No estimator of the ODE model's parameters that is unbiased can have a smaller variance
    than the inverse of the forward information, so a weak-form covariance below it in some
    direction is not information from the data: there the estimate rests on the weak
    likelihood's covariance model (whose log-determinant pulls a combination the residuals
    do not see towards small rates; logistic data at the carrying capacity: ratio 0.01-0.09,
    the estimate 3.5-3.8 standard errors from a generating [1, 1] that fits as well).
    Well-posed fits sit near 1 (:data:`INFORMATION_FLOOR` has the measurements).
    """
    F = entry.get("information")
    entry["information_ratio"], entry["overconfident"] = None, ()
    cov = np.asarray(cov, dtype=float)
    if F is None or not np.all(np.isfinite(cov)) or not np.all(np.isfinite(F)):
        return False
    try:
        L = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        return False
    mu, V = np.linalg.eigh(L.T @ F @ L)
    entry["information_ratio"] = float(mu[0])
    if mu[0] >= INFORMATION_FLOOR:
        return False
    # the direction in parameter space, scaled by the weak standard errors so that the
    # parameters' units do not decide which take part
    d = (L @ V[:, 0]) / np.sqrt(np.diag(cov))
    d = d / np.linalg.norm(d)
    entry["overconfident"] = tuple(n for n, x in zip(names, d, strict=True) if x**2 >= 0.1)
    return True


def overconfidence_message(entry: dict, advice: str | None = None) -> str:
    """The reason of a failed :func:`compare_information`, for ``FitResult.message``;
    ``advice`` replaces the pointer to ``method='hybrid'``."""
    names = ", ".join(entry["overconfident"])
    ratio = np.sqrt(entry["information_ratio"])
    return (
        f"the weak-form standard errors claim more than the data hold: along a combination "
        f"of {names} the weak standard error is {ratio:.2g} of the least one the ODE model "
        "allows at these data (its Cramer-Rao bound, from the forward sensitivities). The "
        "data determine that combination poorly, and the estimate and its interval there "
        "rest on the weak likelihood's covariance model, not on the data. "
        f"{advice or _REFIT_OVERCONFIDENT}; for posteriors, pw.sample's exact stage"
    )


def _profile(S0: np.ndarray) -> np.ndarray:
    """Running maximum over the data of the largest singular value of ``du(t)/du0``."""
    return np.maximum.accumulate(np.linalg.norm(S0, ord=2, axis=(1, 2)))


def _recovery(case: _Case, u0: np.ndarray, seed: int) -> np.ndarray | None:
    """Residual sd over noise sd after the initial-state fit on data simulated at the
    estimate from ``u0`` with the fit's noise level (on the likelihood's scale, noise drawn
    with ``seed``); None if a solve fails."""
    m, t, p, noise, sigma = case.model, case.t, case.p, case.noise, case.sigma
    try:
        Z = solve(m, p, u0, t, inputs=case.inputs or None, **case.opts)[:, m.observed_columns]
        if as_observation(noise).log_scale:
            if np.any(Z <= 0):
                return None
            Z = np.log(Z)
        Xs = Z + sigma * np.random.default_rng(seed).standard_normal(Z.shape)
        u0s = fit_initial_state_all(m, t, Xs, noise, p, case.solver, case.inputs)
        est = residual_noise_of_data(m, t, Xs, noise, p, case.inputs, case.solver, u0=u0s)
    except SimulationError:
        return None
    return est.sigma / sigma


def misfit_message(
    entry: dict, states, advice: str | None = None, output_error: bool = False
) -> str:
    """The reason of a failed check, for ``FitResult.message``; ``advice`` replaces the
    pointer to ``method='hybrid'``; ``output_error``: the estimate is output error's (from
    a known initial state), whose causes differ."""
    idx = [list(states).index(s) for s in entry["failing"]]
    names = ", ".join(entry["failing"])
    sd = np.asarray(entry["residual_sd"])[idx]
    noise = np.asarray(entry["noise_sd"])[idx]
    known = " from the known initial state" if entry["initial_state"] == "known" else ""
    window = entry.get("window")
    data = "the data" if window is None else f"the data over t in [{window[0]:g}, {window[1]:g}]"
    head = (
        f"the ODE solution at the estimate{known} does not fit {data}: forward residual sd "
        f"of {names} {_fmt(sd)} against noise sd {_fmt(noise)} ({entry['noise_source']}; "
        f"ratio {_fmt(sd / noise)}, p-value {_fmt(np.asarray(entry['p_value'])[idx])}). "
    )
    if output_error:  # fitted to the data by forward solves: the estimate is not the cause
        return head + (
            "Output error, solved from the known initial state, fits no better: the known "
            "state may be wrong, the model or its noise model (over-dispersed counts: "
            "pw.NegativeBinomial(alpha)) may not describe the data, or a given noise level "
            "may be too small"
        )
    return head + (
        "The weak-form estimate may be far from the exact (forward-solve) one (too few points "
        "per oscillation or transient, a wrong known initial state), the model may not "
        f"describe the data, or a given noise level may be too small. {advice or _REFIT_MISFIT}"
        "; for posteriors, pw.forward_correction"
    )


_REFIT_OVERCONFIDENT = (
    "Refit with method='hybrid' (output error, whose standard errors use the forward solution)"
)
_REFIT_MISFIT = "Refit with method='hybrid' (output error started from this estimate)"


def _fmt(x) -> str:
    return np.array2string(np.asarray(x, dtype=float), precision=3)
