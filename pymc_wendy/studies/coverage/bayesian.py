"""The Bayesian runs of a coverage study: ``nuts``, ``sft``, ``laplace`` and ``forward``, with
their priors.

:func:`run_bayes` builds a PyMC model with the priors of :func:`default_priors` and one
:class:`~pymc_wendy.WeakODELikelihood` per experiment (for ``+correction`` methods the
bias-corrected likelihood, from a corrected fit as the frequentist study makes it), draws
from the posterior, and records its mean and equal-tailed interval.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from pymc_wendy.model.observation import as_observation
from pymc_wendy.problems.catalogue import Problem
from pymc_wendy.studies.coverage.methods import split_estimator

if TYPE_CHECKING:
    from pymc_wendy.studies.coverage.runners import Task

__all__ = ["default_priors", "run_bayes"]


def default_priors(problem: Problem):
    """The priors the study's Bayesian methods use, as a function ``(name) -> vector RV``.

    Uniform on the problem's bounds (the box the frequentist multi-start uses) when it has
    them, otherwise independent ``Normal(0, 10)``: weakly informative for every benchmark
    parameter (all below 60 in magnitude and resolved by the data to a few percent).
    """
    import pymc as pm

    def make(name: str = "p"):
        if problem.bounds is not None:
            lo, hi = np.array(problem.bounds, dtype=float).T
            return pm.Uniform(name, lo, hi, dims="param")
        return pm.Normal(name, 0.0, 10.0, dims="param")

    return make


def run_bayes(task: Task, data, record: dict) -> None:
    """Fill ``record`` with the posterior mean, interval and diagnostics of ``task``'s method
    on ``data`` (one data set, or a list of them for several experiments)."""
    method, correction = split_estimator(task.estimator)
    datasets = data if isinstance(data, list) else [data]
    corrections = [correction] * len(datasets)
    if correction is not None:
        corrections = _corrected_fits(task, datasets, correction)
    several = isinstance(data, list)
    # the forward method infers the noise level unless the study gives it
    infer = method == "forward" and not _given_sigma(task.fit_options.get("sigma"))
    model = _posterior_model(task, datasets, corrections, several, infer)
    opts = dict(task.sample_options)
    seed = opts.pop("random_seed", task.data_seed)
    if method == "forward":
        draws = _forward_draws(model, seed, opts, record)
    elif method in ("nuts", "sft"):
        draws = _mcmc_draws(method, model, seed, opts, record)
    else:
        draws = _laplace_draws(model, seed, record)
    tail = (1.0 - task.level) / 2.0
    lo, hi = np.quantile(draws, [tail, 1.0 - tail], axis=0)
    record["estimate"] = draws.mean(axis=0).tolist()
    record["intervals"]["posterior"] = np.column_stack([lo, hi]).tolist()


def _corrected_fits(task: Task, datasets: list, correction: str) -> list:
    """The corrected objective fitted like the frequentist study does, one fit per data set:
    what the bias-corrected likelihood is built from."""
    import warnings

    from pymc_wendy.estimators import fit
    from pymc_wendy.estimators.results import FitWarning

    prob = task.problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        return [
            fit(
                prob.model,
                d.t,
                d.U,
                bounds=prob.bounds,
                noise=prob.noise,
                bias_correction=correction,
                inputs=d.inputs,
                sigma=_sigma_of(task.fit_options.get("sigma"), i, len(datasets) > 1),
                test_functions=task.fit_options.get("test_functions"),
            )
            for i, d in enumerate(datasets)
        ]


def _given_sigma(sigma) -> bool:
    """Whether the study's ``fit_options["sigma"]`` is a noise level (a number, an array, or
    one per experiment) rather than the name of an estimate."""
    return sigma is not None and not isinstance(sigma, str)


def _sigma_of(sigma, i: int, several: bool):
    """Experiment ``i``'s entry of the study's ``sigma`` (a list has one per experiment)."""
    return sigma[i] if several and isinstance(sigma, list) else sigma


def _posterior_model(
    task: Task, datasets: list, corrections: list, several: bool, infer_sigma: bool = False
):
    """The PyMC model: :func:`default_priors` and one weak likelihood per data set (with the
    study's ``fit_options["test_functions"]``, if any); with ``infer_sigma`` a noise level
    per state, ``HalfNormal`` on the data's scale (so that the posterior does not depend on
    units), else the study's ``fit_options["sigma"]``."""
    import pymc as pm

    from pymc_wendy.bayes.distribution import WeakODELikelihood

    prob = task.problem
    coords = {"param": list(prob.params), "state": list(prob.states)}
    with pm.Model(coords=coords) as model:
        p = default_priors(prob)("p")
        sigma = task.fit_options.get("sigma")
        if infer_sigma:
            U = np.concatenate([np.asarray(d.U, dtype=float) for d in datasets])
            scale = np.nanstd(np.log(U) if as_observation(prob.noise).log_scale else U, axis=0)
            sigma = pm.HalfNormal("sigma", scale, dims="state")
        for i, (d, c) in enumerate(zip(datasets, corrections, strict=True)):
            WeakODELikelihood(
                f"U{i}" if several else "U",
                ode=prob.model,
                params=p,
                t=d.t,
                observed=d.U,
                noise=prob.noise,
                # a corrected fit holds its noise level; the likelihood must use the same
                sigma=_sigma_of(sigma, i, several) if c is None else c.sigma,
                bias_correction=c,
                inputs=d.inputs,
                test_functions=task.fit_options.get("test_functions"),
            )
    return model


def _mcmc_draws(method: str, model, seed, opts: dict, record: dict) -> np.ndarray:
    """Posterior draws ``(draw, param)`` from NUTS or tempering; convergence diagnostics into
    ``record`` (a run succeeds when R-hat < 1.05 and nothing diverged)."""
    import arviz as az

    from pymc_wendy.bayes.sampling import sample

    # the weak posterior itself (the "forward" method measures the exact one)
    kwargs = {"tune": 1000, "chains": 2, "cores": 1, "progressbar": False, "check": False, **opts}
    if method == "sft":
        import warnings

        from pymc_wendy.bayes.tempering import SFTWarning, sample_sft

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SFTWarning)  # the record keeps R-hat and ESS
            idata = sample_sft(model=model, random_seed=seed, keep_rungs=False, **kwargs)
    else:
        idata = sample(model=model, random_seed=seed, **kwargs)
    rhat, div, converged = _converged(idata)
    ess = float(az.ess(idata, var_names=["p"])["p"].min())
    record["extra"] = {"r_hat_max": rhat, "ess_bulk_min": ess, "divergences": div}
    record["success"] = converged
    record["message"] = f"r_hat max {rhat:.3f}, min ESS {ess:.0f}, {div} divergences"
    return _draws(idata)


def _converged(idata) -> tuple[float, int, bool]:
    """Max R-hat of ``p``, divergences, and whether the run counts as converged (R-hat <
    1.05 and nothing diverged)."""
    import arviz as az

    rhat = float(az.rhat(idata, var_names=["p"])["p"].max())
    div = int(idata.sample_stats["diverging"].sum()) if "diverging" in idata.sample_stats else 0
    return rhat, div, bool(rhat < 1.05 and div == 0)


def _draws(idata) -> np.ndarray:
    return idata.posterior["p"].stack(s=("chain", "draw")).transpose("s", "param").values


def _forward_draws(model, seed, opts: dict, record: dict) -> np.ndarray:
    """Draws ``(draw, param)`` of the forward-solve posterior: NUTS on the weak model, then
    :func:`~pymc_wendy.forward_correction`; its route and diagnostics into ``record``.

    A run succeeds when the correction's route is trustworthy (its Pareto ``k`` and variance
    ``k``, or the forward NUTS's convergence) and, where the kept proposal is the moved weak
    draws, whose density is the weak posterior's, when the weak chains converged too. A t proposal's
    density is exact, so divergent weak chains there cost efficiency, not correctness."""
    from pymc_wendy.bayes.check import check_weak
    from pymc_wendy.bayes.correction import forward_correction
    from pymc_wendy.bayes.sampling import sample

    kwargs = {"tune": 1000, "chains": 2, "cores": 1, "progressbar": False, "check": False, **opts}
    start = time.perf_counter()
    weak = sample(model=model, random_seed=seed, **kwargs)
    weak_time = time.perf_counter() - start
    check = check_weak(weak, model, random_seed=seed, warn=False)
    idata = forward_correction(weak, model, random_seed=seed, progressbar=False)
    a = idata.attrs
    keys = ("route", "proposal", "pareto_k", "pareto_k_variance", "importance_ess")
    keys += ("n_forward_solves",)
    extra = {k: a[k] for k in keys}
    extra.update(_check_record(check, weak, idata), weak_time_s=weak_time)
    extra["weak_r_hat_max"], extra["weak_divergences"], weak_ok = _converged(weak)
    if a["route"] == "nuts":
        extra["r_hat_max"], extra["divergences"], ok = _converged(idata)
    else:
        k = max(a["pareto_k"], a["pareto_k_variance"])
        ok = k <= a["khat_threshold"] and (weak_ok or a["proposal"] != "moved")
    record["extra"] = extra
    record["success"] = ok
    record["message"] = f"{a['route']}, k {a['pareto_k']:.2f}, {a['n_forward_solves']} solves"
    return _draws(idata)


def _laplace_draws(model, seed, record: dict) -> np.ndarray:
    """Draws ``(draw, param)`` of the Laplace approximation at the posterior mode."""
    from pymc_wendy.bayes.sampling import laplace

    idata = laplace(model, random_seed=seed)
    record["success"] = bool(idata["fit"].attrs["success"])
    record["message"] = str(idata["fit"].attrs["message"])
    return idata.posterior["p"].values[0]


def _check_record(check, weak, exact) -> dict:
    """The weak-versus-exact check of a weak posterior beside what the full correction found:
    the largest shift of a posterior mean (exact - weak) in weak sds over the variables the
    check covers, and the exact/weak sd ratios (the check's classifier study,
    ``benchmarks/weak_check.py``)."""
    shifts, ratios = [], []
    for name in check.data_vars:
        w = weak.posterior[name].stack(s=("chain", "draw"))
        e = exact.posterior[name].stack(s=("chain", "draw"))
        sd = w.std("s").values
        shifts.append(np.ravel((e.mean("s").values - w.mean("s").values) / sd))
        ratios.append(np.ravel(e.std("s").values / sd))
    a = check.attrs
    return {
        "check_verdict": a["verdict"],
        "check_k": a["pareto_k"],
        "check_max_shift": a["max_shift"],
        "check_sd_ratio_range": [a.get("min_sd_ratio", np.nan), a.get("max_sd_ratio", np.nan)],
        "check_time_s": a["time_s"],
        "exact_max_shift": float(np.max(np.abs(np.concatenate(shifts)))) if shifts else None,
        "exact_sd_ratios": np.concatenate(ratios).round(3).tolist() if ratios else [],
    }
