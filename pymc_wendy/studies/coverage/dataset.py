"""The result of a coverage study as an :class:`xarray.Dataset`, from its run records.

:func:`to_dataset` lays the records out over method, noise ratio, number of points and data
set (NaN where a run is missing) and derives coverage and errors; :func:`open_coverage` does
the same for a store on disk without the settings that made it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import xarray as xr

from pymc_wendy.problems.catalogue import Problem, get_problem
from pymc_wendy.studies.coverage.methods import BAYES, split_estimator
from pymc_wendy.studies.coverage.runners import task_key
from pymc_wendy.studies.coverage.store import Store, read_config

__all__ = ["open_coverage", "to_dataset"]


def open_coverage(store: str | os.PathLike, problem: str | Problem | None = None) -> xr.Dataset:
    """Read a stored study, finished or still running, as :func:`run_coverage` returns it.

    Only the store is needed, not the settings that made it: methods, noise ratios, numbers
    of points and data sets are those of the runs it holds, in the order they were first
    stored. Nothing runs and nothing is written, so a study can be looked at while another
    process is still adding to it.

    Parameters
    ----------
    store : path
        The ``store`` directory of :func:`run_coverage` (``study.json`` and ``runs.jsonl``).
    problem : str or Problem, optional
        Only for the parameter names of a study of your own problem; a benchmark problem is
        found by the name the store records.

    Returns
    -------
    xarray.Dataset
        As :func:`run_coverage`: the product of the stored noise ratios, numbers of points and
        data set indices, NaN where a run is not (yet) stored.

    Raises
    ------
    FileNotFoundError
        If ``store`` has no ``study.json``.
    ValueError
        If ``study.json`` is damaged (the message names the file). Lines of ``runs.jsonl``
        that are not run records are skipped with a ``RuntimeWarning`` instead.
    """
    path = Path(store)
    cfg_file = path / "study.json"
    if not cfg_file.exists():
        held = (
            " (it has runs.jsonl: put its study.json back)"
            if (path / "runs.jsonl").exists()
            else ""
        )
        raise FileNotFoundError(
            f"{str(path)!r} is not a coverage store: it has no study.json{held}"
        )
    config = read_config(path)
    prob = _stored_problem(config, problem)
    records = Store.read(path, len(prob.params))
    noise_ratios = sorted({float(r["noise_ratio"]) for r in records.values()})
    n_points = sorted({int(r["n_points"]) for r in records.values()})
    n_datasets = 1 + max((int(r["dataset"]) for r in records.values()), default=-1)
    labels = _stored_labels(records)
    return to_dataset(prob.params, labels, records, noise_ratios, n_points, n_datasets, config)


def _stored_problem(config: dict, problem: str | Problem | None) -> Problem:
    """The problem a store's study ran: ``problem`` if given, else the benchmark it names;
    its number of parameters checked against the stored truth."""
    truth = np.asarray(config["p_true"], dtype=float)
    if problem is None:
        try:
            prob = get_problem(config["problem"])
        except KeyError:
            raise ValueError(
                f"the store holds a study of {config['problem']!r}, which is not a benchmark "
                "problem: pass problem= (the Problem the study ran) for its parameter names"
            ) from None
    else:
        prob = get_problem(problem) if isinstance(problem, str) else problem
    if len(prob.params) != truth.size:
        raise ValueError(
            f"problem {prob.name!r} has {len(prob.params)} parameters; the stored study has "
            f"{truth.size}"
        )
    return prob


def _stored_labels(records: dict[str, dict]) -> dict[str, tuple[str, str | None]]:
    """The methods the stored runs give, as :func:`~.methods.parse_methods` labels them:
    every interval kind ever stored, in first-stored order."""
    from pymc_wendy.estimators import registry

    labels: dict[str, tuple[str, str | None]] = {}
    for rec in records.values():
        base = rec["estimator"]
        if split_estimator(base)[0] in BAYES:
            labels.setdefault(base, (base, None))
            continue
        # a run that failed before its intervals names none; the estimator's default then
        for kind in rec["intervals"] or [registry.kinds(split_estimator(base)[0])[0]]:
            labels.setdefault(f"{base}-{kind}", (base, kind))
    return labels


def to_dataset(params, labels, records, noise_ratios, n_points, n_datasets, config) -> xr.Dataset:
    """The study's dataset (:func:`run_coverage` describes it) from its run records."""
    a = _record_arrays(len(params), labels, records, noise_ratios, n_points, n_datasets)
    done = a["done"]
    truth = np.asarray(config["p_true"], dtype=float)
    dims = ("estimator", "noise_ratio", "n_points", "dataset")
    interval = a["interval"]
    covered = (interval[..., 0] <= truth) & (truth <= interval[..., 1])
    has_ci = np.all(np.isfinite(interval), axis=-1)
    coef = np.linalg.norm(a["estimate"] - truth, axis=-1) / np.linalg.norm(truth)
    ds = xr.Dataset(
        {
            "estimate": ((*dims, "param"), a["estimate"]),
            "interval": ((*dims, "param", "bound"), interval),
            "covered": ((*dims, "param"), np.where(has_ci, covered, np.nan)),
            "coef_error": (dims, coef),
            "fsim_error": (dims, a["fsim_error"]),
            "fsim_failed": (dims, np.where(done, a["fsim_failed"], np.nan)),
            "success": (dims, np.where(done, a["success"], np.nan)),
            "wall_time": (dims, a["wall_time"]),
            "message": (dims, a["message"].astype(str)),
        },
        coords={
            "estimator": list(labels),
            "noise_ratio": noise_ratios,
            "n_points": n_points,
            "dataset": np.arange(n_datasets),
            "param": list(params),
            "bound": ["lower", "upper"],
            "truth": ("param", truth.copy()),
        },
        attrs={
            **{k: v for k, v in config.items() if k not in ("p_true", "u0", "t_span")},
            "u0": list(config["u0"]),
            "t_span": list(config["t_span"]),
            "n_done": int(done.sum()),
            "n_runs": int(done.size),
        },
    )
    ds["estimate"].attrs["description"] = "point estimate (posterior mean for nuts/laplace)"
    ds["interval"].attrs["description"] = f"{100 * config['level']:g} % interval"
    ds["fsim_error"].attrs["description"] = "|U(p_hat, u0*) - U*|_F / |U*|_F (Table 1 eq. 13)"
    ds["wall_time"].attrs["units"] = "s"
    return ds


def _record_arrays(J, labels, records, noise_ratios, n_points, n_datasets) -> dict[str, np.ndarray]:
    """The records' fields as arrays over (method, noise ratio, points, data set[, param[,
    bound]]), NaN (or empty, False) where a run is missing; ``done`` marks the runs found."""
    shape = (len(labels), len(noise_ratios), len(n_points), n_datasets)
    out = {
        "estimate": np.full((*shape, J), np.nan),
        "interval": np.full((*shape, J, 2), np.nan),
        "success": np.zeros(shape, dtype=bool),
        "done": np.zeros(shape, dtype=bool),
        "fsim_error": np.full(shape, np.nan),
        "fsim_failed": np.zeros(shape, dtype=bool),
        "wall_time": np.full(shape, np.nan),
        "message": np.full(shape, "", dtype=object),
    }
    for a, (base, kind) in enumerate(labels.values()):
        for b, nr in enumerate(noise_ratios):
            for c, n in enumerate(n_points):
                for d in range(n_datasets):
                    rec = records.get(task_key(base, nr, n, d))
                    if rec is not None:
                        _fill(out, (a, b, c, d), rec, kind)
    return out


def _fill(out: dict[str, np.ndarray], idx: tuple, rec: dict, kind: str | None) -> None:
    """Put one run's record at ``idx``; ``kind`` names its interval (None: the posterior's)."""
    out["done"][idx] = True
    out["estimate"][idx] = _floats(rec["estimate"])
    ci = rec["intervals"].get(kind or "posterior")
    if ci is not None:
        out["interval"][idx] = _floats(ci)
    out["success"][idx] = rec["success"]
    out["fsim_error"][idx] = _floats(rec.get("fsim_error"))
    out["fsim_failed"][idx] = bool(rec.get("fsim_failed", True))
    out["wall_time"][idx] = _floats(rec["wall_time"])
    out["message"][idx] = rec["message"]


def _floats(x):
    if x is None:
        return np.nan
    return np.array(x, dtype=float) if isinstance(x, list) else float(x)
