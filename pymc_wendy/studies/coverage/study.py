"""Running a coverage study: :func:`run_coverage`.

The study's settings are checked, turned into one :class:`~.runners.Task` per estimator and
data set, and the tasks not already in the store (:mod:`.store`) are run (:mod:`.pool`); the
records become the study's dataset (:mod:`.dataset`).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from pymc_wendy.problems.catalogue import Problem, get_problem
from pymc_wendy.studies.coverage.dataset import to_dataset
from pymc_wendy.studies.coverage.methods import BAYES, parse_methods, split_estimator
from pymc_wendy.studies.coverage.pool import run_tasks
from pymc_wendy.studies.coverage.runners import Task, data_seed
from pymc_wendy.studies.coverage.store import Store, study_config

__all__ = ["run_coverage"]


def run_coverage(
    problem: str | Problem,
    *,
    methods: Sequence[str] = ("mle-hessian", "mle-sandwich"),
    noise_ratios: Sequence[float] = (0.05, 0.1, 0.2),
    n_points: Sequence[int] = (513,),
    n_datasets: int = 100,
    level: float = 0.95,
    seed: int = 0,
    store: str | os.PathLike | None = None,
    executor: cf.Executor | None = None,
    max_workers: int | None = None,
    progress: bool = True,
    fit_options: Mapping | None = None,
    sample_options: Mapping | None = None,
    experiments: Sequence[Mapping] | None = None,
    execute: bool = True,
) -> xr.Dataset:
    """Run a coverage study and return its per-run results as a labelled dataset.

    Parameters
    ----------
    problem : str or Problem
        A benchmark name (:func:`~pymc_wendy.list_problems`) or a :class:`Problem` built for
        your own ODE (its ``p_true``, ``u0``, ``t_span`` and ``noise`` generate the data).
    methods : sequence of str
        Method names (:mod:`pymc_wendy.studies.coverage`), e.g. ``["mle-hessian",
        "mle-sandwich", "nuts"]``.
    noise_ratios : sequence of float
        Noise ratios ``nr`` (:func:`~pymc_wendy.problems.add_noise`).
    n_points : sequence of int
        Numbers of observation times on ``t_span`` (the papers' 1025, 513, 257 are 1024,
        512, 256 intervals).
    n_datasets : int
        Data sets per (noise ratio, number of points).
    level : float
        Nominal level of the intervals.
    seed : int
        Study seed; each data set's seed is derived from it
        (:mod:`pymc_wendy.studies.coverage`).
    store : path, optional
        Directory to keep finished runs in and resume from; the final dataset is also written
        to ``<store>/results.nc``.
    executor : concurrent.futures.Executor, optional
        Where runs execute, e.g. ``distributed.Client(...).get_executor()`` for Dask. Default:
        a local process pool with ``max_workers`` processes (``os.cpu_count()``), one BLAS
        thread each, each replaced after 100 runs (numba does not free compiled code, so a
        worker compiling a model per Bayesian run would otherwise keep growing);
        ``max_workers=1`` runs everything in this process. The local workers are started
        with "spawn" and run the main script again, so a script must call
        ``run_coverage`` under ``if __name__ == "__main__":`` (as any script starting
        processes); without the guard it raises a ``RuntimeError`` saying so before any
        worker starts, rather than quietly running in one process (several times slower)
        or ending in ``BrokenProcessPool``. Notebooks and ``python -c`` need no guard.
    progress : bool
        Show a progress bar.
    fit_options : dict, optional
        Extra keyword arguments of :func:`~pymc_wendy.fit` (``n_starts``, ``options``, ...;
        ``bounds`` defaults to the problem's). ``sigma="true"`` gives every method the noise
        level that generated the data set (a known instrument noise).
    sample_options : dict, optional
        Extra keyword arguments of :func:`~pymc_wendy.sample` for ``nuts`` or of
        :func:`~pymc_wendy.sample_sft` for ``sft`` (``draws``, ``tune``, ``chains``, ...;
        defaults 1000, 1000, 2 and one core per run). ``laplace`` uses 4000 draws.
    experiments : sequence of dict, optional
        Make every data set several experiments sharing the parameters, one per entry:
        ``{"u0": initial state, "n_points": points}`` (both optional; defaults the problem's
        ``u0`` and the cell's ``n_points``), each with its own noise draw. Estimators fit
        them jointly (``fit(model, [t1, t2, ...], [U1, U2, ...])``; ``docs/experiments.md``);
        ``nuts``/``laplace`` use one ``WeakODELikelihood`` per experiment.
    execute : bool
        False runs nothing: the result holds what ``store`` has finished (NaN elsewhere), for
        looking at a study that is still running or was interrupted.

    Raises
    ------
    ValueError
        For settings out of range (a fractional ``n_points``, ``n_datasets`` or ``seed``
        included), and for a ``store`` whose ``study.json`` holds other settings, is damaged,
        or is missing while ``runs.jsonl`` holds runs. Lines of ``runs.jsonl`` that are not
        run records are skipped with a ``RuntimeWarning`` and their runs redone.
    RuntimeError
        For local workers started from a script's top-level code outside an
        ``if __name__ == "__main__":`` block (``executor`` above).

    Returns
    -------
    xarray.Dataset
        Dimensions ``estimator`` (the method names; not ``method``, which ``.sel`` takes as
        a keyword), ``noise_ratio``, ``n_points``, ``dataset``, ``param`` (and ``bound`` =
        lower/upper). Variables: ``estimate``, ``interval``, ``covered``,
        ``success``, ``fsim_error``, ``fsim_failed``, ``coef_error``, ``wall_time``,
        ``message``; coordinate ``truth`` (param). Runs not finished (an interrupted study)
        are NaN. Attributes record the settings.
    """
    prob = get_problem(problem) if isinstance(problem, str) else problem
    if not isinstance(prob, Problem):
        raise TypeError(f"problem must be a benchmark name or a Problem; got {problem!r}")
    labels = parse_methods(methods)
    noise_ratios = [float(x) for x in np.atleast_1d(noise_ratios)]
    n_points = [_whole(n, "n_points") for n in np.atleast_1d(n_points)]
    n_datasets, seed = _whole(n_datasets, "n_datasets"), _whole(seed, "seed")
    fit_options = dict(fit_options or {})
    sample_options = dict(sample_options or {})
    _check_settings(noise_ratios, n_points, n_datasets, level, seed, fit_options)
    experiments = _check_experiments(experiments, prob)
    tasks = _tasks(
        prob, labels, noise_ratios, n_points, int(n_datasets), seed, float(level),
        fit_options, sample_options, experiments,
    )  # fmt: skip

    config = study_config(prob, seed, level, fit_options, sample_options, experiments)
    st = Store(store, config) if store is not None else None
    done = st.load() if st is not None else {}
    pending = _pending(tasks, done)
    records = {t.key: done[t.key] for t in tasks if t.key in done}
    if not execute:
        if st is None:
            raise ValueError("execute=False reads a store: pass store=")
        pending = []
    run_tasks(
        pending, records, st, executor=executor, max_workers=max_workers,
        progress=progress, total=len(tasks), name=prob.name,
    )  # fmt: skip

    ds = to_dataset(prob.params, labels, records, noise_ratios, n_points, int(n_datasets), config)
    if st is not None:
        ds.to_netcdf(st.path / "results.nc", engine="h5netcdf")
    return ds


def _whole(value, name: str) -> int:
    """``value`` as an int, refusing a fraction (100.7 points would silently be 100)."""
    if isinstance(value, bool | np.bool_) or not float(value).is_integer():
        raise ValueError(f"{name} must be a whole number; got {value}")
    return int(value)


def _check_settings(noise_ratios, n_points, n_datasets, level, seed, fit_options) -> None:
    if not noise_ratios or any(not 0 < x < np.inf for x in noise_ratios):
        raise ValueError(
            f"noise ratios must be positive and finite (at least one); got {noise_ratios}"
        )
    if not n_points:
        raise ValueError("n_points must list at least one number of points")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed}")
    if any(n < 8 for n in n_points):
        raise ValueError(f"n_points must be at least 8 per data set; got {n_points}")
    if int(n_datasets) < 1:
        raise ValueError(f"n_datasets must be at least 1; got {n_datasets}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level}")
    bad = {"method", "noise", "bias_correction"} & set(fit_options)
    if bad:
        raise ValueError(f"fit_options must not set {sorted(bad)}: the study chooses them")


def _check_experiments(experiments, prob: Problem) -> tuple[dict, ...] | None:
    if experiments is None:
        return None
    experiments = list(experiments)
    if not experiments:
        raise ValueError("experiments must list at least one experiment")
    out = []
    for i, e in enumerate(experiments):
        if not isinstance(e, Mapping) or set(e) - {"u0", "n_points"}:
            raise ValueError(
                f"experiment {i} must be a dict with keys among 'u0' and 'n_points'; got {e!r}"
            )
        entry = {}
        if e.get("u0") is not None:
            u0 = np.asarray(e["u0"], dtype=float)
            if u0.shape != (prob.model.n_states,) or not np.all(np.isfinite(u0)):
                raise ValueError(
                    f"experiment {i}: u0 must be {prob.model.n_states} finite values; got {e['u0']}"
                )
            entry["u0"] = u0.tolist()
        if e.get("n_points") is not None:
            if _whole(e["n_points"], f"experiment {i}: n_points") < 8:
                raise ValueError(
                    f"experiment {i}: n_points must be at least 8; got {e['n_points']}"
                )
            entry["n_points"] = int(e["n_points"])
        out.append(entry)
    return tuple(out)


def _tasks(
    prob, labels, noise_ratios, n_points, n_datasets, seed, level, fit_options, sample_options,
    experiments,
) -> list[Task]:  # fmt: skip
    """One task per estimator (shared by the methods naming it, with all their interval
    kinds) and data set, in the order the study runs them."""
    kinds: dict[str, list[str]] = {}
    for base, kind in labels.values():
        kinds.setdefault(base, [])
        if kind is not None and kind not in kinds[base]:
            kinds[base].append(kind)
    return [
        Task(
            problem=prob,
            estimator=base,
            kinds=tuple(k),
            noise_ratio=nr,
            n_points=n,
            dataset=i,
            data_seed=data_seed(seed, nr, n, i),
            level=level,
            fit_options=fit_options,
            sample_options=sample_options,
            experiments=experiments,
        )
        for nr in noise_ratios
        for n in n_points
        for i in range(n_datasets)
        for base, k in kinds.items()
    ]


def _pending(tasks: list[Task], done: dict[str, dict]) -> list[Task]:
    """The tasks still to run, given the stored records ``done``."""
    # A finished run counts only if it has every interval now asked for; a rerun computes the
    # ones it had as well, so the new record replaces the old without losing any.
    pending = []
    for t in tasks:
        have = tuple(done[t.key]["intervals"]) if t.key in done else ()
        if t.key not in done or set(t.kinds) - set(have):
            bayes = split_estimator(t.estimator)[0] in BAYES
            kinds = () if bayes else tuple(dict.fromkeys(have + t.kinds))
            pending.append(dataclasses.replace(t, kinds=kinds))
    return pending
