"""Is the weak posterior the exact one? A cheap check by importance ratios.

The weak likelihood approximates the exact (forward-solve) likelihood of the same model
(:func:`~pymc_wendy.bayes.forward.forward_model`). :func:`check_weak` measures, on a
subsample of the weak posterior's draws, how far apart the two posteriors are:

1. A Laplace fit of the forward model (L-BFGS from the weak posterior mean, the initial
   states the weak likelihood never needs fitted first; the Hessian from differences of the
   gradient), as the first step of :func:`~pymc_wendy.forward_correction`.
2. A subsample of the weak draws, moved affinely onto that Laplace approximation (a new
   initial state drawn from its conditional), and one forward solve each: the log-ratio of
   the exact posterior density to the moved weak one, ``log w``.
3. Pareto-smoothed (ArviZ's PSIS), the weights give ``k`` and the exact posterior means:
   the **shift** of each mean, in weak posterior sds, is how far the exact posterior's mean
   lies from the weak one's. The moved draws start at the Laplace approximation, so the
   weights only correct its skew: far fewer draws give a stable mean than weighting the
   weak draws themselves (on Lotka-Volterra at 129 points their importance ESS was 10-20 %
   of the draws, and 200 of them gave shifts that varied by 0.3 sd between seeds).

The exact posterior's sds come from the same weights: the **sd ratio** of each variable is
its exact sd over its weak sd. The weak posterior "agrees" when ``k <= 0.7``, every shift is
at most 0.3 sd and every sd ratio lies in [0.8, 1.25]. Otherwise it "differs", and
:func:`~pymc_wendy.forward_correction` gives the exact posterior. Where no forward solve is
meaningful the check is "skipped" with a note: models the forward solver does not take yet,
and solutions so sensitive to their initial state (chaotic systems over long spans) that the
solver's own error, amplified by the growth of ``du/du0`` over the data, exceeds
:data:`CHAOS_NOISE_SHARE` of the noise level: the exact likelihood is then not computable at
the solver's tolerance, let alone a reference.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pymc as pm
import xarray as xr

from pymc_wendy.bayes.correction import (
    MIN_DRAWS,
    _fit_laplace,
    _Forward,
    _Gradient,
    _moved,
    _posterior_values,
    _smoothed,
    _Space,
    _starts,
    _weak_logp,
    require_posterior,
)
from pymc_wendy.bayes.forward import SOLVER_OPTIONS, NoForwardSolve, forward_model
from pymc_wendy.model.chaos import CHAOS_NOISE_SHARE, solver_error_share

__all__ = [
    "CHAOS_NOISE_SHARE",
    "K_THRESHOLD",
    "MIN_DRAWS",
    "SD_RATIO_RANGE",
    "SHIFT_THRESHOLD",
    "WeakPosteriorWarning",
    "check_weak",
]

#: Pareto k of the exact-over-weak ratios above which the posteriors differ (PSIS's limit of
#: reliable importance sampling, Vehtari et al. 2024)
K_THRESHOLD = 0.7
#: shift of a posterior mean, in weak posterior sds, above which the posteriors differ
SHIFT_THRESHOLD = 0.3
#: range of the exact-over-weak sd ratio within which the sds agree (a 25 % wider or
#: narrower interval is a different answer; the ratio's Monte Carlo error on 200 moved draws
#: is about 0.07)
SD_RATIO_RANGE = (0.8, 1.25)
#: weak draws the check moves and solves by default. The check's time is mostly its fixed
#: part (the Laplace fit, compilation): 200, 400 and 800 draws took 0.7-1.3, 0.8-1.4 and
#: 0.8-1.4 s on FitzHugh-Nagumo and logistic growth at 513 points, while the shift's spread
#: over four seeds fell from 0.14-0.26 to 0.16-0.20 (logistic, exact 0.21); FitzHugh-Nagumo
#: gave 0.87, 0.58 and 0.63 (one seed each). Near the 0.3 threshold a verdict on 200 draws
#: is a coin toss (docs/validation.md, the check as a classifier)
N_DRAWS = 800


class WeakPosteriorWarning(UserWarning):
    """The weak posterior differs from the exact (forward-solve) one, or could not be checked."""


def check_weak(
    idata,
    model: pm.Model | None = None,
    *,
    n_draws: int = N_DRAWS,
    initial_state=None,
    random_seed: int | None = None,
    warn: bool = True,
) -> xr.Dataset:
    """Check a weak posterior against the exact (forward-solve) posterior of its model.

    Parameters
    ----------
    idata : DataTree
        Posterior draws of ``model`` (``pw.sample``, ``pw.sample_sft`` or ``pm.sample``).
    model : pm.Model, optional
        The model with :class:`~pymc_wendy.WeakODELikelihood` terms; default the one in
        context.
    n_draws : int
        Draws checked (a random subsample; all when there are fewer): one forward solve
        each; default :data:`N_DRAWS` (800).
    initial_state : distribution or mapping, optional
        Prior of the initial states the forward model adds, as in
        :func:`~pymc_wendy.forward_correction` (use the same one there).
    random_seed : int, optional
        Seed of the subsample and of the initial states' proposal.
    warn : bool
        Issue a :class:`WeakPosteriorWarning` when the posteriors differ or the check failed.

    Returns
    -------
    xarray.Dataset
        One variable per free variable of ``model`` (its dims after a ``statistic``
        dimension, no chain or draw): ``"shift"``, the shift of its posterior mean,
        ``(exact - weak) / weak sd``, and ``"sd_ratio"``, exact sd / weak sd. ``attrs``:
        ``verdict`` (``"agrees"``, ``"differs"``, ``"skipped"`` or ``"failed"``),
        ``pareto_k``, ``max_shift``, ``min_sd_ratio``, ``max_sd_ratio``, ``k_threshold``,
        ``shift_threshold``, ``sd_ratio_range``, ``n_draws``, ``n_failed``
        (checked draws whose forward solve failed), ``importance_ess``, ``note`` (why it
        differs or why it was skipped), ``time_s``. ``pw.sample`` stores it as the group
        ``weak_check``.

    Raises
    ------
    TypeError
        ``idata`` has no posterior group.
    ValueError
        The posterior has fewer than :data:`MIN_DRAWS` draws, or ``n_draws`` is not an
        integer >= :data:`MIN_DRAWS`.
    """
    start = time.perf_counter()
    _check_arguments(idata, n_draws)
    model = pm.modelcontext(model)
    try:
        fmodel, terms = forward_model(model, initial_state=initial_state)
    except NoForwardSolve as exc:
        return _finish(model, "skipped", f"no forward solve: {exc}", start, warn=False)
    weak = _Space(model, [t.name for t in terms])
    values = _posterior_values(idata, model)
    Zw = weak.from_constrained(values)
    finite = np.all(np.isfinite(Zw), axis=1)
    if finite.sum() < MIN_DRAWS:
        note = f"only {finite.sum()} draws have finite values; the check needs {MIN_DRAWS}"
        return _finish(model, "failed", note, start, warn)
    rng = np.random.default_rng(random_seed)
    rows = np.sort(rng.choice(np.flatnonzero(finite), min(n_draws, finite.sum()), replace=False))
    log_qw = _weak_logp(idata, model, Zw, rows)
    forward = _Forward(fmodel, terms)
    shared = np.concatenate([forward.space.where[rv.name] for rv in weak.rvs])
    new = np.setdiff1d(np.arange(forward.space.size), shared)
    starts, step = _starts(forward, Zw[rows], log_qw, shared, new, rng)
    growth, share = _sensitivity_growth(forward, starts[0])
    gradient = _Gradient(fmodel, forward.space)  # compiled once: each build is a compile
    mode, cov = None, None
    if share > CHAOS_NOISE_SHARE:
        # an initial state the weak model does not have starts at a prior draw, whose orbit
        # can be far more sensitive than the data's (a wide Lotka-Volterra cycle: 2e6 where
        # the fitted one gives 1e2): judge at the forward model's mode where it has one
        mode, cov = _fit_laplace(gradient, starts[:1], new, step)
        if cov is not None:
            growth, share = _sensitivity_growth(forward, mode)
    if share > CHAOS_NOISE_SHARE:
        note = (
            f"chaotic: du/du0 grows by {growth:.1e} over the data, so the solver's error "
            f"(relative tolerance {SOLVER_OPTIONS['rtol']:g}) reaches {share:.2g} of the noise "
            "level and the exact likelihood cannot be computed"
        )
        return _finish(model, "skipped", note, start, warn=False)
    if mode is None:
        mode, cov = _fit_laplace(gradient, starts[:1], new, step)
    if cov is None:  # from the weak draw of largest density instead of the weak mean
        mode, cov = _fit_laplace(gradient, starts[1:], new, step)
    if cov is None:
        return _finish(model, "failed", _NO_MODE_NOTE, start, warn)
    Z, log_q = _moved(Zw[rows], log_qw, mode, cov, shared, new, rng)
    log_p = forward.logp(Z)
    counts = {"n_draws": rows.size, "n_failed": int(np.sum(~np.isfinite(log_p)))}
    weighted = _smoothed(log_p - log_q, Z)
    if weighted["ess"] == 0.0:
        note = "the forward solve failed at every checked draw"
        return _finish(model, "failed", note, start, warn, **counts)
    exact = forward.constrained(Z)
    w = np.exp(weighted["log_weight"])
    moments = {
        rv.name: _moments(np.asarray(values[rv.name], dtype=float)[finite], w, exact[rv.name])
        for rv in weak.rvs
    }
    verdict, note, numbers = _verdict(moments, float(weighted["k"]))
    return _finish(
        model, verdict, note, start, warn, moments=moments,
        importance_ess=float(weighted["ess"]), **numbers, **counts,
    )  # fmt: skip


# Hindmarsh-Rose at 513 points (docs/validation.md): the exact mode lies outside the basin
# of the weak posterior, and local fits stop on a rugged likelihood
_NO_MODE_NOTE = (
    "the forward model's Laplace fit, started at the weak posterior's mean and at its densest "
    "draw, has no proper covariance where it stopped: the exact posterior's mode may lie "
    "beyond the weak posterior's reach (a rugged exact likelihood), from where the "
    "correction starts too"
)


def _verdict(moments: dict, k: float) -> tuple[str, str, dict]:
    """``(verdict, note, numbers)`` from each variable's ``[shift, sd ratio]`` and the
    weights' Pareto ``k`` (module doc)."""
    shifts = {name: m[0] for name, m in moments.items()}
    ratios = {name: m[1] for name, m in moments.items()}
    max_shift = float(max(np.max(np.abs(s), initial=0.0) for s in shifts.values()))
    low = float(min(np.min(r, initial=np.inf) for r in ratios.values()))
    high = float(max(np.max(r, initial=-np.inf) for r in ratios.values()))
    reasons = []
    if k > K_THRESHOLD:
        reasons.append(f"the exact/weak density ratios have Pareto k {k:.2f} > {K_THRESHOLD}")
    if max_shift > SHIFT_THRESHOLD:
        name, index = _largest(shifts)
        reasons.append(f"the mean of {name}{index} moves {max_shift:.2f} weak posterior sd")
    lo, hi = SD_RATIO_RANGE
    if high > hi or low < lo:
        # a ratio of 0 (the weights on one draw; pk_iv_doses from stuck weak chains) is the
        # largest departure: no log(0) warning, no division by it
        with np.errstate(divide="ignore"):
            name, index = _largest({n: np.abs(np.log(r)) for n, r in ratios.items()})
        r = high if high * low > hi * lo else low
        reasons.append(f"the sd of {name}{index} is {r:.2f} times the weak one")
    numbers = {"pareto_k": k, "max_shift": max_shift, "min_sd_ratio": low, "max_sd_ratio": high}
    return "differs" if reasons else "agrees", "; ".join(reasons), numbers


def _check_arguments(idata, n_draws) -> None:
    require_posterior(idata)
    whole = isinstance(n_draws, int | np.integer) and not isinstance(n_draws, bool)
    if not whole or n_draws < MIN_DRAWS:
        raise ValueError(f"n_draws must be an integer >= {MIN_DRAWS}; got {n_draws!r}")
    post = idata.posterior
    total = post.sizes.get("chain", 0) * post.sizes.get("draw", 0)
    if total < MIN_DRAWS:
        raise ValueError(
            f"the posterior has {total} draws; the check needs at least {MIN_DRAWS} (Pareto "
            "smoothing of the weights fits their largest 20 %)"
        )


def _moments(weak: np.ndarray, w: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """``[(exact mean - weak mean) / weak sd, exact sd / weak sd]`` of one variable: weak
    draws ``(S, ...)``, the weighted exact draws ``exact`` with normalised weights ``w``;
    shift 0 and ratio 1 where the weak sd is 0 (a fixed value)."""
    sd = weak.std(axis=0)
    mean = np.tensordot(w, exact, axes=1)
    exact_sd = np.sqrt(np.tensordot(w, (exact - mean) ** 2, axes=1))
    moved = mean - weak.mean(axis=0)
    shift = np.divide(moved, sd, out=np.zeros_like(moved), where=sd > 0)
    ratio = np.divide(exact_sd, sd, out=np.ones_like(moved), where=sd > 0)
    return np.stack([shift, ratio])


def _sensitivity_growth(forward: _Forward, x: np.ndarray) -> tuple[float, float]:
    """The largest singular value of ``du(t)/du0`` over the data times of every term at the
    point ``x`` of the forward model's space, and the solver's relative tolerance amplified
    by it as a share of the noise level (relative to the data's size; log-normal noise is
    relative already). A term whose solve fails counts as no evidence."""
    out = forward.space.evaluate(x[None])
    growth, share = 1.0, 0.0
    for k, term in enumerate(forward.terms):
        lik = term.likelihood
        p, sigma, u0 = forward.term_inputs(out, 0, k)
        sigma = np.broadcast_to(sigma, lik.exact_U.shape).min(axis=0)
        # per-entry noise (a relative level, counts): the entries' RMS sd, on U's scale
        sigma = lik.rms_noise_sd(sigma)
        U, S = term.op.solve(p, u0)  # the observed states at the data times
        if not np.all(np.isfinite(U)):
            continue
        J = lik.base_model.n_params
        g, s = solver_error_share(
            S[:, :, J:], sigma, lik.exact_U, lik.noise, SOLVER_OPTIONS["rtol"]
        )
        growth, share = max(growth, g), max(share, s)
    return growth, share


def _largest(shifts: dict) -> tuple[str, str]:
    """The variable and index of the largest absolute shift."""
    best, where_, top = "", "", -1.0
    for name, s in shifts.items():
        a = np.abs(np.asarray(s))
        if a.size and a.max() > top:
            top = float(a.max())
            best = name
            index = np.unravel_index(int(a.argmax()), a.shape)
            where_ = "" if a.ndim == 0 else str([int(i) for i in index])
    return best, where_


def _finish(model, verdict, note, start, warn, *, moments=None, **numbers) -> xr.Dataset:
    """The check's Dataset (module doc), with its warning."""
    data, coords = {}, {"statistic": ["shift", "sd_ratio"]}
    for name, m in (moments or {}).items():
        m = np.asarray(m)
        dims = model.named_vars_to_dims.get(name) or tuple(
            f"{name}_dim_{i}" for i in range(m.ndim - 1)
        )
        data[name] = (("statistic", *dims), m)
        for d in dims:
            if model.coords.get(d) is not None:
                coords[d] = list(model.coords[d])
    attrs = {
        "verdict": verdict,
        "pareto_k": np.nan,
        "max_shift": np.nan,
        "min_sd_ratio": np.nan,
        "max_sd_ratio": np.nan,
        "k_threshold": K_THRESHOLD,
        "shift_threshold": SHIFT_THRESHOLD,
        "sd_ratio_range": list(SD_RATIO_RANGE),
        "n_draws": 0,
        "n_failed": 0,
        "importance_ess": np.nan,
        **numbers,
        "note": note,
        "time_s": time.perf_counter() - start,
    }
    result = xr.Dataset(data, coords=coords, attrs=attrs)
    if warn:
        warn_check(result, stacklevel=4)
    return result


def warn_check(result: xr.Dataset, stacklevel: int) -> None:
    """The :class:`WeakPosteriorWarning` of a check that found a difference or failed."""
    verdict, note = result.attrs["verdict"], result.attrs["note"]
    if verdict not in ("differs", "failed"):
        return
    if verdict == "differs":
        what = "the weak posterior differs from the exact (forward-solve) posterior of this model"
        fix = "pw.forward_correction(idata) gives the exact posterior"
    else:
        what = "the weak posterior could not be checked against the exact one"
        fix = "pw.forward_correction(idata) tries the exact stage from the weak draws"
    warnings.warn(
        f"{what}: {note}. {fix} (or pw.sample(..., correction='forward'))",
        WeakPosteriorWarning,
        stacklevel=stacklevel,
    )
