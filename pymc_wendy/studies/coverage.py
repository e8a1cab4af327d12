"""Coverage and accuracy studies: many seeded data sets, several methods, one labelled result.

A study simulates ``n_datasets`` data sets of a :class:`~pymc_wendy.Problem` for every
combination of noise ratio and number of points, applies every method to every data set, and
collects estimates, intervals, timings and failures in an :class:`xarray.Dataset`
(:func:`run_coverage`). :func:`summarize` turns it into the metrics of WENDy-MLE Table 1 with
Monte Carlo standard errors; :func:`to_table` into a paper-style table.

Methods are named ``"<estimator>"`` or ``"<estimator>-<covariance>"``:

==================  ===========================================================================
``mle-hessian``     :func:`~pymc_wendy.fit` ``method="mle"``, Wald interval from the inverse
                    Hessian (``mle`` alone means this); ``mle-sandwich`` (WENDy eq. 9) and
                    ``mle-gls`` use the same fit with the other covariances.
``irls-gls`` ...    likewise for ``irls``, ``wls``, ``oels`` (``oels-oe``) and ``hybrid``.
``nuts``            posterior mean and equal-tailed credible interval from NUTS through
                    :class:`~pymc_wendy.WeakODELikelihood` (:func:`pymc_wendy.sample`).
``sft``             the same from the top rung of replica-exchange tempering
                    (:func:`pymc_wendy.sample_sft`, default ladder).
``laplace``         posterior mean and equal-tailed interval of the Laplace approximation at
                    the posterior mode (:func:`pymc_wendy.laplace`).
``mle+analytic``    a bias correction (:mod:`pymc_wendy.weak.bias`) appended to ``mle``, ``nuts``
                    or ``laplace`` with ``+``: ``mle+analytic-hessian``, ``nuts+profile``.
==================  ===========================================================================

Methods sharing an estimator share one fit per data set. The Bayesian methods use the priors
of :func:`default_priors` (uniform on the problem's bounds, else ``Normal(0, 10)``) and the
noise level estimated from the data, like the frequentist ones (``fit_options={"sigma":
"residual"}`` switches both to the residual estimate). Problems with known inputs
(``Problem.inputs``) pass each data set's inputs to every method.

Every run is reproducible on its own: its data are drawn with a seed derived from the study's
``seed``, the noise ratio, the number of points and the data set index (not the method), so all
methods see the same data sets. With ``store=`` each finished run is appended to
``<store>/runs.jsonl`` as soon as it completes; calling :func:`run_coverage` again with the same
store skips what is done (a study can be interrupted, resumed, or extended with more data sets,
noise ratios or methods), and the assembled result is saved to ``<store>/results.nc``.
:func:`open_coverage` reads a store back, finished or still running, without its settings.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import multiprocessing
import os
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xarray as xr
from scipy import stats

from pymc_wendy._progress import ProgressBar
from pymc_wendy._threads import one_blas_thread
from pymc_wendy.model.simulate import SimulationError, solve
from pymc_wendy.problems.catalogue import Problem, get_problem

__all__ = ["default_priors", "open_coverage", "run_coverage", "summarize", "to_table"]

_BAYES = ("nuts", "sft", "laplace")
_STORE_VERSION = 1


# --- method names --------------------------------------------------------------------------


def _parse_methods(methods: Iterable[str]) -> dict[str, tuple[str, str | None]]:
    """``{label: (estimator, covariance kind or None)}``, validated, in the given order."""
    if isinstance(methods, str):
        methods = [methods]
    from pymc_wendy.estimators import registry
    from pymc_wendy.weak.bias import resolve

    fit_kinds = {m: registry.kinds(m) for m in registry.names()}
    out: dict[str, tuple[str, str | None]] = {}
    for name in methods:
        base, _, kind = str(name).strip().lower().partition("-")
        base, plus, correction = base.partition("+")
        if plus:
            if base not in ("mle", *_BAYES):
                raise ValueError(
                    f"method {name!r}: a bias correction applies to "
                    + ", ".join(map(repr, ("mle", *_BAYES[:-1])))
                    + f" or {_BAYES[-1]!r}"
                )
            correction = resolve(correction)
            base_label = f"{base}+{correction}"
        else:
            base_label = base
        if base in _BAYES and not kind:
            out[base_label] = (base_label, None)
            continue
        if base not in fit_kinds:
            raise ValueError(
                f"unknown method {name!r}: use one of {sorted(fit_kinds) + list(_BAYES)}, "
                "optionally with a covariance, e.g. 'mle-sandwich'"
            )
        kind = kind or fit_kinds[base][0]
        if kind not in fit_kinds[base]:
            raise ValueError(
                f"method {name!r}: covariance {kind!r} is not available for {base!r} "
                f"(choose from {list(fit_kinds[base])})"
            )
        out[f"{base_label}-{kind}"] = (base_label, kind)
    if not out:
        raise ValueError("methods must name at least one method")
    return out


# --- one run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Task:
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
        return _key(self.estimator, self.noise_ratio, self.n_points, self.dataset)


def _key(estimator: str, noise_ratio: float, n_points: int, dataset: int) -> str:
    return f"{estimator}|{noise_ratio!r}|{n_points}|{dataset}"


def _data_seed(seed: int, noise_ratio: float, n_points: int, dataset: int) -> int:
    # Noise ratios enter through their decimal representation so that 0.1 is 0.1 on resume.
    key = [int(seed), int(round(noise_ratio * 1e9)), int(n_points), int(dataset)]
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def _run_task(task: _Task) -> dict:
    """Simulate the data set and apply the estimator; never raises (failures are recorded)."""
    start = time.perf_counter()
    prob = task.problem
    J = prob.model.n_params
    record = {
        "key": task.key,
        "estimator": task.estimator,
        "noise_ratio": task.noise_ratio,
        "n_points": task.n_points,
        "dataset": task.dataset,
        "data_seed": task.data_seed,
        "estimate": [np.nan] * J,
        "intervals": {},
        "success": False,
        "message": "",
        "extra": {},
    }
    try:
        data = _simulate(task)
        with one_blas_thread():
            if _split(task.estimator)[0] in _BAYES:
                _bayes(task, data, record)
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
    return _jsonable(record)


def _simulate(task: _Task):
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


def _split(estimator: str) -> tuple[str, str | None]:
    """``"mle+analytic"`` -> ``("mle", "analytic")``; ``"mle"`` -> ``("mle", None)``."""
    base, _, correction = estimator.partition("+")
    return base, correction or None


def _frequentist(task: _Task, data, record: dict) -> None:
    import warnings

    from pymc_wendy.estimators import fit
    from pymc_wendy.estimators.results import FitWarning

    prob = task.problem
    options = dict(task.fit_options)
    options.setdefault("bounds", prob.bounds)
    method, correction = _split(task.estimator)
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


def _bayes(task: _Task, data, record: dict) -> None:
    import pymc as pm

    from pymc_wendy.bayes.distribution import WeakODELikelihood
    from pymc_wendy.bayes.sampling import laplace, sample

    prob = task.problem
    method, correction = _split(task.estimator)
    several = isinstance(data, list)
    datasets = data if several else [data]
    corrections = [correction] * len(datasets)
    if correction is not None:  # the corrected objective, fitted like the frequentist study
        import warnings

        from pymc_wendy.estimators import fit
        from pymc_wendy.estimators.results import FitWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FitWarning)
            corrections = [
                fit(
                    prob.model,
                    d.t,
                    d.U,
                    bounds=prob.bounds,
                    noise=prob.noise,
                    bias_correction=correction,
                    inputs=d.inputs,
                    sigma=task.fit_options.get("sigma"),
                )
                for d in datasets
            ]
    with pm.Model(coords={"param": list(prob.params)}) as model:
        p = default_priors(prob)("p")
        for i, (d, c) in enumerate(zip(datasets, corrections, strict=True)):
            WeakODELikelihood(
                f"U{i}" if several else "U",
                ode=prob.model,
                params=p,
                t=d.t,
                observed=d.U,
                noise=prob.noise,
                # a corrected fit holds its noise level; the likelihood must use the same
                sigma=task.fit_options.get("sigma") if c is None else c.sigma,
                bias_correction=c,
                inputs=d.inputs,
            )
    opts = dict(task.sample_options)
    seed = opts.pop("random_seed", task.data_seed)
    if method in ("nuts", "sft"):
        kwargs = {"tune": 1000, "chains": 2, "cores": 1, "progressbar": False, **opts}
        if method == "sft":
            import warnings

            from pymc_wendy.bayes.tempering import SFTWarning, sample_sft

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SFTWarning)  # the record keeps R-hat and ESS
                idata = sample_sft(model=model, random_seed=seed, keep_rungs=False, **kwargs)
        else:
            idata = sample(model=model, random_seed=seed, **kwargs)
        draws = idata.posterior["p"].stack(s=("chain", "draw")).transpose("s", "param").values
        import arviz as az

        rhat = float(az.rhat(idata, var_names=["p"])["p"].max())
        ess = float(az.ess(idata, var_names=["p"])["p"].min())
        div = int(idata.sample_stats["diverging"].sum()) if "diverging" in idata.sample_stats else 0
        record["extra"] = {"r_hat_max": rhat, "ess_bulk_min": ess, "divergences": div}
        record["success"] = bool(rhat < 1.05 and div == 0)
        record["message"] = f"r_hat max {rhat:.3f}, min ESS {ess:.0f}, {div} divergences"
    else:
        idata = laplace(model, random_seed=seed)
        draws = idata.posterior["p"].values[0]
        record["success"] = bool(idata["fit"].attrs["success"])
        record["message"] = str(idata["fit"].attrs["message"])
    tail = (1.0 - task.level) / 2.0
    lo, hi = np.quantile(draws, [tail, 1.0 - tail], axis=0)
    record["estimate"] = draws.mean(axis=0).tolist()
    record["intervals"]["posterior"] = np.column_stack([lo, hi]).tolist()


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


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None  # JSON has no NaN; read back as NaN
    return obj


# --- the store -----------------------------------------------------------------------------


class _Store:
    """``runs.jsonl`` (one finished run per line, appended and flushed as runs complete) and
    ``study.json`` (the settings a resumed study must share)."""

    def __init__(self, path: str | os.PathLike, config: dict):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        cfg_file = self.path / "study.json"
        if cfg_file.exists():
            old = json.loads(cfg_file.read_text())
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            if diff:
                raise ValueError(
                    f"store {str(self.path)!r} holds a study with different settings ({diff}); "
                    "use another store directory, or the same settings to resume"
                )
        else:
            cfg_file.write_text(json.dumps(config, indent=1))
        self.runs_file = self.path / "runs.jsonl"
        self._checked_end = False

    def load(self) -> dict[str, dict]:
        return self.read(self.path)

    @staticmethod
    def read(path: Path) -> dict[str, dict]:
        """The finished runs in ``path``/runs.jsonl by key (the last record of a key wins)."""
        done: dict[str, dict] = {}
        runs_file = path / "runs.jsonl"
        if not runs_file.exists():
            return done
        with runs_file.open() as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by an interruption: that run is redone
                done[rec["key"]] = rec
        return done

    def append(self, record: dict) -> None:
        if not self._checked_end:  # after a crash mid-line, start a new line
            self._checked_end = True
            if self.runs_file.exists() and self.runs_file.stat().st_size:
                with self.runs_file.open("rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        with self.runs_file.open("a") as out:
                            out.write("\n")
        with self.runs_file.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _config(prob: Problem, seed: int, level: float, fit_options, sample_options) -> dict:
    return _jsonable(
        {
            "version": _STORE_VERSION,
            "problem": prob.name,
            "p_true": prob.p_true.tolist(),
            "u0": prob.u0.tolist(),
            "t_span": list(prob.t_span),
            "noise": prob.noise,
            "seed": int(seed),
            "level": float(level),
            "fit_options": repr(sorted(dict(fit_options).items())),
            "sample_options": repr(sorted(dict(sample_options).items())),
        }
    )


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
            if int(e["n_points"]) < 8:
                raise ValueError(
                    f"experiment {i}: n_points must be at least 8; got {e['n_points']}"
                )
            entry["n_points"] = int(e["n_points"])
        out.append(entry)
    return tuple(out)


# --- running a study -----------------------------------------------------------------------


def _worker_init() -> None:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["OMP_NUM_THREADS"] = "1"


class _Serial(cf.Executor):
    """Runs each task when submitted, in this process (``max_workers=1``; easy to debug)."""

    def submit(self, fn, /, *args, **kwargs):
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller via the future
            future.set_exception(exc)
        return future


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
        Method names (module docstring), e.g. ``["mle-hessian", "mle-sandwich", "nuts"]``.
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
        Study seed; each data set's seed is derived from it (module docstring).
    store : path, optional
        Directory to keep finished runs in and resume from; the final dataset is also written
        to ``<store>/results.nc``.
    executor : concurrent.futures.Executor, optional
        Where runs execute, e.g. ``distributed.Client(...).get_executor()`` for Dask. Default:
        a local process pool with ``max_workers`` processes (``os.cpu_count()``), one BLAS
        thread each, each replaced after 100 runs (numba does not free compiled code, so a
        worker compiling a model per Bayesian run would otherwise keep growing);
        ``max_workers=1`` runs everything in this process.
    progress : bool
        Show a progress bar.
    fit_options : dict, optional
        Extra keyword arguments of :func:`~pymc_wendy.fit` (``n_starts``, ``options``, ...;
        ``bounds`` defaults to the problem's).
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
    labels = _parse_methods(methods)
    noise_ratios = [float(x) for x in np.atleast_1d(noise_ratios)]
    n_points = [int(n) for n in np.atleast_1d(n_points)]
    if any(not 0 < x for x in noise_ratios):
        raise ValueError(f"noise ratios must be positive; got {noise_ratios}")
    if any(n < 8 for n in n_points):
        raise ValueError(f"n_points must be at least 8 per data set; got {n_points}")
    if int(n_datasets) < 1:
        raise ValueError(f"n_datasets must be at least 1; got {n_datasets}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level}")
    fit_options = dict(fit_options or {})
    sample_options = dict(sample_options or {})
    bad = {"method", "noise", "bias_correction"} & set(fit_options)
    if bad:
        raise ValueError(f"fit_options must not set {sorted(bad)}: the study chooses them")
    experiments = _check_experiments(experiments, prob)

    kinds: dict[str, list[str]] = {}
    for base, kind in labels.values():
        kinds.setdefault(base, [])
        if kind is not None and kind not in kinds[base]:
            kinds[base].append(kind)
    tasks = [
        _Task(
            problem=prob,
            estimator=base,
            kinds=tuple(k),
            noise_ratio=nr,
            n_points=n,
            dataset=i,
            data_seed=_data_seed(seed, nr, n, i),
            level=float(level),
            fit_options=fit_options,
            sample_options=sample_options,
            experiments=experiments,
        )
        for nr in noise_ratios
        for n in n_points
        for i in range(int(n_datasets))
        for base, k in kinds.items()
    ]

    config = _config(prob, seed, level, fit_options, sample_options)
    if experiments is not None:  # absent from single-experiment stores, which stay valid
        config["experiments"] = json.dumps(_jsonable(list(experiments)))
    st = _Store(store, config) if store is not None else None
    done = st.load() if st is not None else {}
    # A finished run counts only if it has every interval now asked for; a rerun computes the
    # ones it had as well, so the new record replaces the old without losing any.
    pending = []
    for t in tasks:
        have = tuple(done[t.key]["intervals"]) if t.key in done else ()
        if t.key not in done or set(t.kinds) - set(have):
            bayes = _split(t.estimator)[0] in _BAYES
            kinds = () if bayes else tuple(dict.fromkeys(have + t.kinds))
            pending.append(dataclasses.replace(t, kinds=kinds))
    records = {t.key: done[t.key] for t in tasks if t.key in done}

    if not execute:
        if st is None:
            raise ValueError("execute=False reads a store: pass store=")
        pending = []
    bar = _progress(progress and bool(pending), len(tasks), len(tasks) - len(pending), prob.name)
    workers = min(max_workers or os.cpu_count() or 1, len(pending))
    try:
        if executor is not None:
            _execute(executor, pending, records, st, bar)
        elif workers <= 1:
            _execute(_Serial(), pending, records, st, bar)
        else:
            # fresh processes every _TASKS_PER_WORKER runs each (see there); pools rather
            # than ProcessPoolExecutor(max_tasks_per_child=): that hung on Python 3.13.0
            # once the first workers retired
            chunk = workers * _TASKS_PER_WORKER
            for start in range(0, len(pending), chunk):
                pool = cf.ProcessPoolExecutor(
                    max_workers=workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_init,
                )
                try:
                    _execute(pool, pending[start : start + chunk], records, st, bar)
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
                pool.shutdown(wait=True)
    finally:
        bar.close()

    ds = _to_dataset(prob.params, labels, records, noise_ratios, n_points, int(n_datasets), config)
    if st is not None:
        ds.to_netcdf(st.path / "results.nc", engine="h5netcdf")
    return ds


#: runs per worker process before the local pool is replaced by a fresh one: numba never
#: frees compiled code, and a Bayesian run compiles its model's graph (about 20 MB each for
#: NUTS on the head-acceleration model), so long-lived workers of a large study would grow by
#: gigabytes
_TASKS_PER_WORKER = 100


def _execute(executor, pending, records, st, bar) -> None:
    futures = {}
    try:
        if isinstance(executor, _Serial):  # submit lazily so progress shows while running
            for task in pending:
                _collect(executor.submit(_run_task, task), records, st, bar)
            return
        futures = {executor.submit(_run_task, t): t for t in pending}
        for fut in cf.as_completed(futures):
            _collect(fut, records, st, bar)
    except BaseException:  # KeyboardInterrupt included: stop the rest, keep what finished
        for fut in futures:
            fut.cancel()
        raise


def _collect(fut: cf.Future, records: dict, st: _Store | None, bar) -> None:
    rec = fut.result()
    records[rec["key"]] = rec
    if st is not None:
        st.append(rec)
    bar.advance(rec)


class _progress:
    """A progress bar (or nothing) counting finished runs and failures."""

    def __init__(self, enabled: bool, total: int, completed: int, name: str):
        self.failed = 0
        self._bar = ProgressBar(
            enabled,
            f"coverage {name}",
            total,
            "{task.fields[failed]} not ok",
            completed=completed,
            failed=0,
        )

    def advance(self, rec: dict) -> None:
        self.failed += not rec["success"]
        self._bar.update(advance=1, failed=self.failed)

    def close(self) -> None:
        self._bar.close()


# --- assembling the dataset ----------------------------------------------------------------


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
    """
    path = Path(store)
    cfg_file = path / "study.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{str(path)!r} is not a coverage store: it has no study.json")
    config = json.loads(cfg_file.read_text())
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
    from pymc_wendy.estimators import registry

    records = _Store.read(path)
    labels: dict[str, tuple[str, str | None]] = {}
    for rec in records.values():
        base = rec["estimator"]
        if _split(base)[0] in _BAYES:
            labels.setdefault(base, (base, None))
            continue
        # a run that failed before its intervals names none; the estimator's default then
        for kind in rec["intervals"] or [registry.kinds(_split(base)[0])[0]]:
            labels.setdefault(f"{base}-{kind}", (base, kind))
    noise_ratios = sorted({float(r["noise_ratio"]) for r in records.values()})
    n_points = sorted({int(r["n_points"]) for r in records.values()})
    n_datasets = 1 + max((int(r["dataset"]) for r in records.values()), default=-1)
    return _to_dataset(prob.params, labels, records, noise_ratios, n_points, n_datasets, config)


def _to_dataset(params, labels, records, noise_ratios, n_points, n_datasets, config) -> xr.Dataset:
    J = len(params)
    shape = (len(labels), len(noise_ratios), len(n_points), n_datasets)
    est = np.full((*shape, J), np.nan)
    interval = np.full((*shape, J, 2), np.nan)
    success = np.zeros(shape, dtype=bool)
    done = np.zeros(shape, dtype=bool)
    fsim = np.full(shape, np.nan)
    fsim_failed = np.zeros(shape, dtype=bool)
    wall = np.full(shape, np.nan)
    message = np.full(shape, "", dtype=object)
    for a, (base, kind) in enumerate(labels.values()):
        for b, nr in enumerate(noise_ratios):
            for c, n in enumerate(n_points):
                for d in range(n_datasets):
                    rec = records.get(_key(base, nr, n, d))
                    if rec is None:
                        continue
                    idx = (a, b, c, d)
                    done[idx] = True
                    est[idx] = _floats(rec["estimate"])
                    ci = rec["intervals"].get(kind or "posterior")
                    if ci is not None:
                        interval[idx] = _floats(ci)
                    success[idx] = rec["success"]
                    fsim[idx] = _floats(rec.get("fsim_error"))
                    fsim_failed[idx] = bool(rec.get("fsim_failed", True))
                    wall[idx] = _floats(rec["wall_time"])
                    message[idx] = rec["message"]
    truth = np.asarray(config["p_true"], dtype=float)
    dims = ("estimator", "noise_ratio", "n_points", "dataset")
    covered = (interval[..., 0] <= truth) & (truth <= interval[..., 1])
    has_ci = np.all(np.isfinite(interval), axis=-1)
    coef = np.linalg.norm(est - truth, axis=-1) / np.linalg.norm(truth)
    ds = xr.Dataset(
        {
            "estimate": ((*dims, "param"), est),
            "interval": ((*dims, "param", "bound"), interval),
            "covered": ((*dims, "param"), np.where(has_ci, covered, np.nan)),
            "coef_error": (dims, coef),
            "fsim_error": (dims, fsim),
            "fsim_failed": (dims, np.where(done, fsim_failed, np.nan)),
            "success": (dims, np.where(done, success, np.nan)),
            "wall_time": (dims, wall),
            "message": (dims, message.astype(str)),
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


def _floats(x):
    if x is None:
        return np.nan
    return np.array(x, dtype=float) if isinstance(x, list) else float(x)


# --- metrics -------------------------------------------------------------------------------


def summarize(ds: xr.Dataset) -> xr.Dataset:
    """The metrics of WENDy-MLE Table 1 over data sets, with Monte Carlo standard errors.

    Per ``(estimator, noise_ratio, n_points, param)``: ``coverage`` (share of intervals that
    contain the truth), ``bias`` and ``rel_bias`` (mean error, absolute and relative to
    ``p*``), ``variance`` (the usual sample variance, ``ddof=1``), ``mse`` and ``rel_mse``,
    ``sq_rel_bias`` (eq. 15), ``rel_variance`` (eq. 16, ``ddof=0``), ``width`` (mean interval
    length), ``zscore_mean`` and ``zscore_sd`` (of the standardised error
    ``(p_hat - p*) / s``, where ``s`` is the interval's half-width divided by the normal
    quantile of the level: for calibrated intervals about 0 and 1; a ``zscore_sd`` above 1
    says by how much the intervals are too narrow, a ``zscore_mean`` away from 0 is bias in
    units of the claimed standard error). Per ``(estimator, noise_ratio, n_points)``:
    ``coef_error`` and ``fsim_error`` (mean
    and median), ``failure_rate`` (forward simulation of the estimate fails, eq. 14),
    ``not_ok_rate`` (the method reported no success), ``wall_time`` (mean), ``n``.
    Each ``*_se`` variable is the Monte Carlo standard error of the one it is named after.

    All statistics skip runs whose estimate is missing (not run yet, or failed to produce a
    number); ``n`` and ``n_ci`` count what entered.
    """
    truth = ds["truth"]
    err = ds["estimate"] - truth
    ok = np.isfinite(ds["estimate"])
    n = ok.sum("dataset")
    mean_err = err.mean("dataset")
    sd = err.std("dataset", ddof=1)
    sq = err**2
    cov = ds["covered"]
    n_ci = np.isfinite(cov).sum("dataset")
    c = cov.mean("dataset")
    half = (ds["interval"].sel(bound="upper") - ds["interval"].sel(bound="lower")) / 2
    width = 2 * half.mean("dataset")
    q = stats.norm.ppf(0.5 + ds.attrs["level"] / 2)
    z = err / (half / q).where(half > 0)
    n_z = np.isfinite(z).sum("dataset")
    z_sd = z.std("dataset", ddof=1)
    scale = abs(truth)
    out = xr.Dataset(
        {
            "coverage": c,
            "coverage_se": np.sqrt(c * (1 - c) / n_ci),
            "n_ci": n_ci,
            "bias": mean_err,
            "bias_se": sd / np.sqrt(n),
            "rel_bias": mean_err / truth,
            "rel_bias_se": sd / np.sqrt(n) / scale,
            "sq_rel_bias": (mean_err / truth) ** 2,
            "variance": err.var("dataset", ddof=1),
            "rel_variance": err.var("dataset", ddof=0) / truth**2,
            "mse": sq.mean("dataset"),
            "mse_se": sq.std("dataset", ddof=1) / np.sqrt(n),
            "rel_mse": sq.mean("dataset") / truth**2,
            "rel_mse_se": sq.std("dataset", ddof=1) / np.sqrt(n) / truth**2,
            "width": width,
            "zscore_mean": z.mean("dataset"),
            "zscore_mean_se": z_sd / np.sqrt(n_z),
            "zscore_sd": z_sd,
            # normal theory: the s.e. of a sample standard deviation is sd / sqrt(2 (n - 1))
            "zscore_sd_se": z_sd / np.sqrt(2 * (n_z - 1).where(n_z > 1)),
            "n": n,
        }
    )
    done = np.isfinite(ds["wall_time"])
    m = done.sum("dataset")
    for name in ("coef_error", "fsim_error"):
        v = ds[name]
        out[f"{name}_mean"] = v.mean("dataset")
        out[f"{name}_mean_se"] = v.std("dataset", ddof=1) / np.sqrt(np.isfinite(v).sum("dataset"))
        out[f"{name}_median"] = v.median("dataset")
    out["failure_rate"] = ds["fsim_failed"].mean("dataset")
    out["not_ok_rate"] = 1 - ds["success"].mean("dataset")
    out["wall_time"] = ds["wall_time"].mean("dataset")
    out["n_runs"] = m
    out.attrs = dict(ds.attrs)
    return out


def to_table(summary: xr.Dataset, columns: Sequence[str] = ("rel_bias", "rel_mse", "coverage")):
    """A paper-style table (pandas DataFrame) of :func:`summarize` output.

    One row per estimator, noise ratio, number of points and (if any requested column is
    per parameter) parameter; each requested column is followed by its ``_se`` where there is
    one. Aggregate columns (``coef_error_mean``, ``failure_rate``, ...) repeat on every
    parameter's row. Save with ``.to_csv(path)`` or ``.to_markdown()`` (needs ``tabulate``).
    """
    names = []
    for c in columns:
        if c not in summary:
            raise KeyError(f"{c!r} is not a summary variable; choose from {list(summary)}")
        names.append(c)
        if f"{c}_se" in summary:
            names.append(f"{c}_se")
    if any("param" in summary[c].dims for c in names):
        sub = xr.Dataset({c: summary[c].broadcast_like(summary["coverage"]) for c in names})
    else:
        sub = summary[names]
    return sub.drop_vars("truth", errors="ignore").to_dataframe()[names]
