"""Does the ODE solution at a weak-form estimate fit the data? (issue 55)

A weak-form estimate (``"mle"``, ``"irls"``, ``"wls"``) never solves the ODE, so nothing in the
fit itself says whether the solution at the estimate goes through the data: a wrong known
initial state, too few points per oscillation or a misspecified model can give a converged
fit whose trajectory misses the data by many noise levels. After such a fit of one experiment
of an :class:`~pymc_wendy.ODEModel`, :func:`pymc_wendy.fit` calls :func:`forward_check`:

1. The initial state: the known one (``initial_state=``), else fitted to all the data with
   the parameters held at the estimate, by continuation: to the first quarter of the data
   (:func:`~pymc_wendy.estimators.output_error.fit_initial_state`), then to twice as many
   points from there, up to all of them. Fitted to all the data at once, from guesses taken
   from the first points, it ended in a wrong local minimum (residuals 2-8 noise sd at the
   *true* parameters) on Lotka-Volterra over 20 time units and Hindmarsh-Rose over 10 at 20 %
   noise; the continuation found the trajectory on every one of them.
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
   ``sigma``: ``s_d > 1.56 sigma_d``).
4. Where a failed test could come from the forward solve rather than the estimate, it is
   not trusted: when the solver's error, amplified by the growth of ``du/du0`` over the data,
   is a share of the noise level above
   :data:`~pymc_wendy.model._sensitivity.CHAOS_NOISE_SHARE` (the guard of
   :func:`~pymc_wendy.check_weak`); and when the initial state is fitted and the same
   procedure fails on data simulated at the estimate itself (the trajectory from the fitted
   initial state plus Gaussian noise of the fit's level, seed 0): then the initial state
   cannot be recovered over this span (chaotic, or as sensitive to it), and a misfit on the
   real data says nothing about the parameters. Lorenz over 20 time units fails the test at
   its true parameters on every data set tried; this guard skips it.

The entry ``FitResult.history["forward_check"]`` records the numbers whether or not the
test fails; ``verdict`` is ``"passed"``, ``"misfit"``, ``"skipped"`` (with ``note``) or
``"solve_failed"``.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import optimize, stats

from pymc_wendy.estimators.output_error import (
    DEFAULT_SOLVER,
    _InitialState,
    fit_initial_state,
    residual_noise_of_data,
)
from pymc_wendy.model._sensitivity import CHAOS_NOISE_SHARE, solver_error_share
from pymc_wendy.model.compiled_solve import (
    SolveFailed,
    compiled_solver,
    max_steps_for,
    supports,
)
from pymc_wendy.model.simulate import SimulationError, solve
from pymc_wendy.weak.noise import noise_filter

__all__ = ["FALSE_ALARM", "MATERIAL", "excess", "filter_dof", "forward_check"]

#: family-wise false-alarm rate of the test on a correct fit (Bonferroni over the states)
FALSE_ALARM = 1e-3
#: residual sd, in noise sds, below which no misfit is reported however significant
MATERIAL = 1.5
#: seed of the noise of the data simulated at the estimate (the recovery guard)
_SEED = 0


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


def fit_initial_state_all(model, t, X, noise, p, solver, inputs) -> np.ndarray:
    """The initial state fitted to all the data with ``p`` fixed, by continuation over the
    data (module docstring, step 1); the companion state for models of order > 1."""
    N = t.size
    n = min(max(10, N // 4), N)
    u0 = fit_initial_state(model, t, X, noise, p, solver, inputs=inputs, n=n)
    log = noise == "lognormal"
    x = np.log(u0) if log else np.asarray(u0, dtype=float)
    opts = {**DEFAULT_SOLVER, **(solver or {})}
    while n < N:
        n = min(2 * n, N)
        prob = _InitialState(model, t, X, noise, p, n, opts, inputs)
        start = float(np.sum(prob.residual(x) ** 2))
        fit = optimize.least_squares(prob.residual, x, jac=prob.jacobian, x_scale="jac")
        if fit.success and 2 * fit.cost <= start:
            x = fit.x
    return np.exp(x) if log else x


def _residuals(model, t, X, noise, p, inputs, solver, known):
    """``(residual sd (D,), dof, u0 at t[0])`` of the solution at ``p``."""
    if known is not None:
        est = residual_noise_of_data(model, t, X, noise, p, inputs, solver, initial=known)
    else:
        u0 = fit_initial_state_all(model, t, X, noise, p, solver, inputs)
        est = residual_noise_of_data(model, t, X, noise, p, inputs, solver, u0=u0)
    return est.sigma, est.dof, np.asarray(est.u0, dtype=float)


def forward_check(
    model, t, X, U, noise: str, p, sigma, *, inputs=None, solver=None, known=None,
    noise_dof: float = np.inf, noise_source: str = "given",
) -> dict:  # fmt: skip
    """The forward check of the estimate ``p`` (module docstring): the history entry.

    ``X`` (N, D) the data on the likelihood's scale (``log U`` for log-normal noise), ``U``
    on their own; ``sigma`` (D,) the noise level the fit used, ``noise_dof`` the degrees of
    freedom of its estimate (``inf`` when given) and ``noise_source`` how it was obtained;
    ``known`` a known :class:`~pymc_wendy.model.data.InitialState`.
    """
    start = time.perf_counter()
    p = np.asarray(p, dtype=float)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=float), (X.shape[1],)).copy()
    entry = {
        "verdict": "passed",
        "residual_sd": None,
        "noise_sd": sigma,
        "ratio": None,
        "p_value": None,
        "dof": None,
        "noise_dof": float(noise_dof),
        "noise_source": noise_source,
        "initial_state": "known" if known is not None else "fitted",
        "u0": None,
        "failing": (),
        "growth": None,
        "solver_share": None,
        "recovery_ratio": None,
        "false_alarm": FALSE_ALARM,
        "material": MATERIAL,
        "note": "",
    }

    def done(verdict: str, note: str = "") -> dict:
        entry.update(verdict=verdict, note=note, time_s=time.perf_counter() - start)
        return entry

    try:
        sd, dof, u0 = _residuals(model, t, X, noise, p, inputs, solver, known)
    except SimulationError as exc:
        return done(
            "solve_failed",
            f"the ODE solve at the estimate fails over the data ({exc}), so the estimate "
            "could not be checked against them; a weak-form estimate whose solution cannot be "
            "computed over the data is suspect: refit with method='hybrid'",
        )
    except ValueError as exc:  # too few points for the degrees of freedom
        return done("skipped", f"no forward check: {exc}")
    ratio = sd / sigma
    fails, pval = excess(ratio, dof, noise_dof)
    entry.update(residual_sd=sd, ratio=ratio, p_value=pval, dof=dof, u0=u0)
    entry["failing"] = tuple(model.states[i] for i in np.flatnonzero(fails))
    if not fails.any():
        return done("passed")
    opts = {**DEFAULT_SOLVER, **(solver or {})}
    growth, share = _growth(model, p, u0, t, U, sigma, noise, opts)
    entry.update(growth=growth, solver_share=share)
    if share is not None and share > CHAOS_NOISE_SHARE:
        return done(
            "skipped",
            f"chaotic over this span: du/du0 grows by {growth:.1e} over the data, so the "
            f"solver's error (relative tolerance {opts['rtol']:g}) reaches {share:.2g} of the "
            f"noise level; the forward residuals (sd {_fmt(ratio)} noise sd) say nothing "
            "about the estimate",
        )
    if known is None:
        recovered = _recovery(model, t, p, u0, sigma, noise, inputs, solver, opts)
        entry["recovery_ratio"] = recovered
        if recovered is None or excess(recovered, dof, np.inf)[0].any():
            what = (
                "the solve failed"
                if recovered is None
                else f"its residual sd is {_fmt(recovered)} noise sd"
            )
            grew = "" if growth is None else f"; du/du0 grows by {growth:.1e} over the data"
            return done(
                "skipped",
                "chaotic over this span (or as sensitive to the initial state): on data "
                "simulated at the estimate the initial state cannot be recovered "
                f"({what}{grew}), so the forward residuals on these data (sd {_fmt(ratio)} "
                "noise sd) say nothing about the estimate",
            )
    return done("misfit")


def _growth(model, p, u0, t, U, sigma, noise, opts) -> tuple[float | None, float | None]:
    """:func:`~pymc_wendy.model._sensitivity.solver_error_share` at ``(p, u0)``; None for a
    model the compiled solver does not take, or a failed solve."""
    if not supports(model):
        return None, None
    try:
        _, S = compiled_solver(model).sensitivities(
            p, u0, t, rtol=opts["rtol"], atol=opts["atol"],
            max_steps=max_steps_for(opts["max_nfev"], t.size),
        )  # fmt: skip
    except SolveFailed:
        return None, None
    return solver_error_share(S[:, :, model.n_params :], sigma, U, noise, opts["rtol"])


def _recovery(model, t, p, u0, sigma, noise, inputs, solver, opts) -> np.ndarray | None:
    """Residual sd over noise sd after the initial-state fit on data simulated at ``(p,
    u0)`` with noise ``sigma`` (on the likelihood's scale); None if a solve fails."""
    try:
        Z = solve(model, p, u0, t, inputs=inputs or None, **opts)[:, model.observed_columns]
        if noise == "lognormal":
            if np.any(Z <= 0):
                return None
            Z = np.log(Z)
        rng = np.random.default_rng(_SEED)
        Xs = Z + sigma * rng.standard_normal(Z.shape)
        sd, _, _ = _residuals(model, t, Xs, noise, p, inputs, solver, None)
    except SimulationError:
        return None
    return sd / sigma


def misfit_message(entry: dict, states) -> str:
    """The reason of a failed check, for ``FitResult.message``."""
    idx = [list(states).index(s) for s in entry["failing"]]
    names = ", ".join(entry["failing"])
    sd = np.asarray(entry["residual_sd"])[idx]
    noise = np.asarray(entry["noise_sd"])[idx]
    known = " from the known initial state" if entry["initial_state"] == "known" else ""
    return (
        f"the ODE solution at the estimate{known} does not fit the data: forward residual sd "
        f"of {names} {_fmt(sd)} against noise sd {_fmt(noise)} ({entry['noise_source']}; "
        f"ratio {_fmt(sd / noise)}, p-value {_fmt(np.asarray(entry['p_value'])[idx])}). The "
        "weak-form estimate is likely far from the exact (forward-solve) one: too few points "
        "per oscillation or transient, a wrong known initial state, or a model that does not "
        "describe the data. Refit with method='hybrid' (output error started from this "
        "estimate); for posteriors, pw.forward_correction"
    )


def _fmt(x) -> str:
    return np.array2string(np.asarray(x, dtype=float), precision=3)
