"""One run of a coverage study: one estimator applied to one simulated data set.

A :class:`Task` carries everything a run needs and pickles, so that any executor can run it;
:func:`run_task` (module level, found by import in worker processes) simulates the data set
from the task's seed (:func:`data_seed`), applies the frequentist estimator here or the
Bayesian one (:mod:`.bayesian`), and returns a JSON record: a run that fails is recorded with
its reason, so one failure does not stop a study.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from pymc_wendy._threads import one_blas_thread
from pymc_wendy.model.simulate import SimulationError, solve
from pymc_wendy.problems.catalogue import Problem
from pymc_wendy.studies.coverage.bayesian import run_bayes
from pymc_wendy.studies.coverage.methods import BAYES, split_estimator
from pymc_wendy.studies.coverage.store import jsonable

__all__ = ["Task", "data_seed", "run_task", "task_key"]


@dataclass(frozen=True)
class Task:
    """One estimator applied to one data set; everything a worker needs, picklable."""

    problem: Problem
    estimator: str
    kinds: tuple[str, ...]
    noise_ratio: float
    n_points: int
    dataset: int
    data_seed: int
    level: float
    fit_options: Mapping = field(default_factory=dict)
    sample_options: Mapping = field(default_factory=dict)
    experiments: tuple[dict, ...] | None = None

    @property
    def key(self) -> str:
        return task_key(self.estimator, self.noise_ratio, self.n_points, self.dataset)


def task_key(estimator: str, noise_ratio: float, n_points: int, dataset: int) -> str:
    """The key of a run in the store: what identifies it across resumed studies."""
    return f"{estimator}|{noise_ratio!r}|{n_points}|{dataset}"


def data_seed(seed: int, noise_ratio: float, n_points: int, dataset: int) -> int:
    """The seed of a data set: from the study's seed and the cell, not from the method."""
    # Noise ratios enter through their decimal representation so that 0.1 is 0.1 on resume.
    key = [int(seed), int(round(noise_ratio * 1e9)), int(n_points), int(dataset)]
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def run_task(task: Task) -> dict:
    """Simulate the data set and apply the estimator; never raises (failures are recorded)."""
    start = time.perf_counter()
    prob = task.problem
    record = {
        "key": task.key,
        "estimator": task.estimator,
        "noise_ratio": task.noise_ratio,
        "n_points": task.n_points,
        "dataset": task.dataset,
        "data_seed": task.data_seed,
        "estimate": [np.nan] * prob.model.n_params,
        "intervals": {},
        "success": False,
        "message": "",
        "extra": {},
    }
    try:
        data = _simulate(task)
        task = _with_true_sigma(task, data)
        with one_blas_thread():
            if split_estimator(task.estimator)[0] in BAYES:
                run_bayes(task, data, record)
            else:
                _frequentist(task, data, record)
        record["fsim_error"], record["fsim_failed"] = _forward_error(prob, data, record)
    except Exception as exc:  # a study must survive any single failure; the record says why
        record["success"] = False
        record["message"] = f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc(limit=5)
        record.setdefault("fsim_error", np.nan)
        record.setdefault("fsim_failed", True)
    record["wall_time"] = time.perf_counter() - start
    return jsonable(record)


def _simulate(task: Task):
    """The run's data set, or for a study of several experiments a list of them (each with
    its own seed, derived from the run's)."""
    prob = task.problem
    if task.experiments is None:
        return prob.simulate(
            n_points=task.n_points, noise_ratio=task.noise_ratio, seed=task.data_seed
        )
    seeds = np.random.SeedSequence(task.data_seed).generate_state(len(task.experiments))
    return [
        prob.simulate(
            n_points=int(e.get("n_points", task.n_points)),
            noise_ratio=task.noise_ratio,
            seed=int(s),
            u0=e.get("u0"),
        )
        for e, s in zip(task.experiments, seeds, strict=True)
    ]


def _with_true_sigma(task: Task, data) -> Task:
    """``fit_options={"sigma": "true"}``: every method is given the noise level that generated
    the data set (per experiment), as a user who knows the instrument's noise would."""
    sigma = task.fit_options.get("sigma")
    if not (isinstance(sigma, str) and sigma == "true"):
        return task
    known = [d.sigma for d in data] if isinstance(data, list) else data.sigma
    return replace(task, fit_options={**task.fit_options, "sigma": known})


def _times_and_data(data):
    """``(t, U)`` for :func:`~pymc_wendy.fit`: arrays, or lists for several experiments."""
    if isinstance(data, list):
        return [d.t for d in data], [d.U for d in data]
    return data.t, data.U


def _inputs_of(data):
    """The known inputs of the data set(s), as ``fit(inputs=...)`` takes them (None if none)."""
    if isinstance(data, list):
        return [d.inputs for d in data] if data[0].inputs else None
    return data.inputs or None


def _frequentist(task: Task, data, record: dict) -> None:
    import warnings

    from pymc_wendy.estimators import fit
    from pymc_wendy.estimators.results import FitWarning

    prob = task.problem
    options = dict(task.fit_options)
    options.setdefault("bounds", prob.bounds)
    method, correction = split_estimator(task.estimator)
    if correction is not None:
        options["bias_correction"] = correction
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)  # recorded as success=False instead
        res = fit(
            prob.model, *_times_and_data(data), method=method, noise=prob.noise,
            inputs=_inputs_of(data), **options,
        )  # fmt: skip
    record["estimate"] = res.x.tolist()
    record["success"] = bool(res.success)
    record["message"] = res.message
    record["extra"] = {"nll": res.nll, "fit_time": res.wall_time, "status": res.status}
    if res.bias_correction is not None:
        bc = res.bias_correction
        record["extra"]["uncorrected"] = bc.uncorrected.x.tolist()
        record["extra"]["stages"] = {k: v.tolist() for k, v in bc.stages.items()}
        record["extra"]["correction_time"] = bc.wall_time
    for kind in task.kinds:
        try:
            record["intervals"][kind] = res.conf_int(task.level, kind).tolist()
        except Exception as exc:  # an indefinite Hessian etc.: a missing interval, not a crash
            record["intervals"][kind] = None
            record["message"] += f" | {kind} interval: {exc}"


def _forward_error(prob: Problem, data, record: dict) -> tuple[float, bool]:
    """WENDy-MLE Table 1 eq. 13: ``|U(p_hat, u0*) - U*|_F / |U*|_F``; failure if the solve
    fails. For several experiments, over all of them (each from its own true ``u0``)."""
    p = np.asarray(record["estimate"], dtype=float)
    if not np.all(np.isfinite(p)):
        return float("nan"), True
    misfit = size = 0.0
    for d in data if isinstance(data, list) else [data]:
        try:
            # simulate from the true initial condition at the start of the grid (t_span[0])
            grid = np.concatenate([[prob.t_span[0]], d.t]) if d.dropped_times else d.t
            U = solve(prob.model, p, d.u0, grid, stiff=prob.stiff, inputs=d.inputs)
            U = (U[1:] if d.dropped_times else U)[:, prob.model.observed_columns]
        except (SimulationError, ValueError, FloatingPointError):
            return float("nan"), True
        if not np.all(np.isfinite(U)):
            return float("nan"), True
        misfit += float(np.sum((U - d.U_true) ** 2))
        size += float(np.sum(d.U_true**2))
    return float(np.sqrt(misfit / size)), False
