"""The public entry point :func:`sample_sft`: it checks the arguments, compiles the tempered
model, builds the ladder and the populations, runs them block by block (adapting the shared
ladder while tuning, with a progress bar) and returns their records as a ``DataTree``."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection

from pymc_wendy._progress import ProgressBar
from pymc_wendy._threads import one_blas_thread
from pymc_wendy.bayes.sampling import check_count, check_result_options, exact_by_default
from pymc_wendy.bayes.tempering.ladder import Relaxation, make_ladder
from pymc_wendy.bayes.tempering.model import TemperedModel
from pymc_wendy.bayes.tempering.pool import Runner, worker_count
from pymc_wendy.bayes.tempering.population import make_populations
from pymc_wendy.bayes.tempering.results import assemble_result


def sample_sft(
    draws: int = 1000,
    *,
    model: pm.Model | None = None,
    tune: int = 1000,
    chains: int = 4,
    rungs: int = 6,
    ladder: Sequence[float] | None = None,
    relaxation: Relaxation = "hybrid",
    adapt_ladder: bool | None = None,
    swap: Literal["deo", "random"] = "deo",
    target_accept: float = 0.8,
    max_treedepth: int = 8,
    initvals: Mapping | Sequence[Mapping] | None = None,
    random_seed: int | None = None,
    progressbar: bool = True,
    keep_rungs: bool = True,
    cores: int | None = None,
    correction: str | None = "auto",
    correction_kwargs: dict | None = None,
    check: bool = True,
):
    """Sample a model with weak likelihoods by replica exchange over relaxed rungs.

    Parameters
    ----------
    draws : int
        Draws per chain after tuning (of every rung; the top rung's form the posterior).
    model : pm.Model, optional
        Defaults to the model on the context stack.
    tune : int
        Tuning iterations: step sizes, mass matrices and (unless fixed) the ladder adapt.
    chains : int
        Independent replica populations; each is a full ladder, so R-hat compares chains
        that never exchange states.
    rungs : int
        Number of rungs (including the exact one) when ``ladder`` is not given.
    ladder : sequence of float, optional
        The rungs, from the easiest to the model: ``alpha`` values decreasing to 0
        (covariance), ``beta`` values increasing to 1 (power) or levels ``s`` increasing to 1
        (hybrid). Given, it is kept fixed unless ``adapt_ladder=True``.
    relaxation : {"hybrid", "covariance", "power"}
        What the rungs relax (:mod:`pymc_wendy.bayes.tempering`, ``docs/tempering.md``).
        ``"power"`` also works for models without weak likelihoods.
    adapt_ladder : bool, optional
        Equalise swap acceptance across pairs during tuning. Default: True unless ``ladder``
        is given.
    swap : {"deo", "random"}
        Deterministic even-odd pairs every iteration, or one random pair with probability
        1/2 per iteration (Campbell & Steele).
    target_accept : float
        Target mean acceptance statistic of the NUTS step-size adaptation.
    max_treedepth : int
        Maximum NUTS tree depth.
    initvals : dict or sequence of dicts, optional
        Starting values (original scale) for all populations, or one dict per population;
        variables not given start at :func:`~pymc_wendy.initial_values` (the WENDy-MLE), else
        at the model's initial point. Every rung of a population starts at the same point.
    random_seed : int, optional
        Seed; the whole run is reproducible from it.
    progressbar : bool
        Show a progress bar.
    keep_rungs : bool
        Store the draws of every rung in the ``rungs`` group.
    cores : int, optional
        Worker processes the populations are spread over (default: the number of CPUs, at
        most ``chains``). Workers are forked, so this applies on Linux; elsewhere, and with
        ``cores=1``, the populations run one after another in this process. The draws are
        the same either way.
    correction, correction_kwargs, check :
        The check of the top rung's draws against the exact (forward-solve) posterior and
        the result where they differ, as in :func:`~pymc_wendy.sample` (default: the exact
        posterior where the weak one is off; the weak draws then in ``weak_posterior``, the
        rungs and swap statistics unchanged).

    Returns
    -------
    xarray.DataTree
        ``posterior``: the top rung (the model's posterior), ready for ``az.summary``;
        ``sample_stats``: the top rung's NUTS statistics (``diverging``, ``tree_depth``,
        ``n_steps``, ``step_size``, ``acceptance_rate``, ``lp``) plus ``swap_accept``
        (chain, pair), ``rung_acceptance`` and ``rung_step_size`` (chain, rung), and the
        final ladder ``alpha``, ``beta``, ``level`` (rung); ``rungs`` (if ``keep_rungs``): the
        draws of every rung with a ``rung`` dimension.

    Raises
    ------
    ValueError
        Before anything is compiled: an unknown ``relaxation`` or ``swap``, ``target_accept``
        outside (0, 1), a model without free variables, or a count that is not an integer in
        range (``draws``, ``chains``, ``cores``, ``max_treedepth`` >= 1, ``tune`` >= 0,
        ``rungs`` >= 2).

    Warns
    -----
    SFTWarning
        When a neighbouring pair never swapped during the draws (the ladder is too coarse:
        add rungs), when a pair swaps with probability below 0.2 (the message gives the
        number of rungs for about 0.35, from the ladder's communication barrier, which
        ``sample_stats.attrs["communication_barrier"]`` holds), when the top rung diverged,
        or when its chains disagree (R-hat > 1.01).
    """
    model = pm.modelcontext(model)
    _check_arguments(model, relaxation, swap, target_accept)
    check_result_options(correction, check)
    _check_counts(draws, tune, chains, cores, max_treedepth, None if ladder is not None else rungs)
    C, T, D = int(chains), int(tune), int(draws)
    workers = worker_count(cores, C)
    rng = np.random.default_rng(random_seed)
    # the ladder's scale and the first mass matrices come from the WENDy-MLE, not from
    # wherever a chain is started (possibly a spurious mode)
    starts, reference = _starts(model, initvals, C)
    target = TemperedModel(model, reference, relaxation)
    lad = make_ladder(relaxation, rungs, ladder, target.alpha_min)
    xs = [DictToArrayBijection.map({k: start[k] for k in target.point0}).data for start in starts]
    populations = make_populations(
        target,
        lad,
        xs,
        rng,
        target_accept=target_accept,
        tune=T,
        draws=D,
        swap=swap,
        max_depth=max_treedepth,
        keep_rungs=keep_rungs,
    )
    adapt = ladder is None if adapt_ladder is None else adapt_ladder
    start_time = time.perf_counter()
    results = _run_blocks(target, lad, populations, workers, T, D, adapt, progressbar)
    elapsed = time.perf_counter() - start_time
    idata = assemble_result(model, target, lad, results, C, D, elapsed, relaxation, swap)
    return exact_by_default(
        idata, model, correction, check, correction_kwargs,
        random_seed=random_seed, progressbar=progressbar, weak_seconds=elapsed,
    )  # fmt: skip


def _check_arguments(model, relaxation, swap, target_accept) -> None:
    """Raise ``ValueError`` for arguments of :func:`sample_sft` it cannot use, before anything
    is compiled."""
    if relaxation not in ("covariance", "power", "hybrid"):
        raise ValueError(
            f"relaxation must be 'covariance', 'power' or 'hybrid'; got {relaxation!r}"
        )
    if swap not in ("deo", "random"):
        raise ValueError(f"swap must be 'deo' or 'random'; got {swap!r}")
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be in (0, 1); got {target_accept}")
    if not model.value_vars:
        raise ValueError("the model has no free variables to sample")


def _check_counts(draws, tune, chains, cores, max_treedepth, rungs) -> None:
    """Raise ``ValueError`` naming a count of :func:`sample_sft` that is not an integer in
    range (``rungs`` None: a given ladder sets them), before anything is compiled."""
    check_count(draws, "draws", 1)
    check_count(tune, "tune", 0)
    check_count(chains, "chains", 1)
    check_count(cores, "cores", 1, allow_none=True)
    check_count(max_treedepth, "max_treedepth", 1)
    if rungs is not None:
        check_count(rungs, "rungs", 2)


def _starts(model: pm.Model, initvals, chains: int) -> tuple[list[dict], dict]:
    """Unconstrained start points, one per population, and the reference point (the
    WENDy-MLE where available, whatever the populations' starts)."""
    from pymc_wendy.bayes.sampling import _unconstrained_point, initial_values

    if initvals is None or isinstance(initvals, Mapping):
        per_chain = [dict(initvals or {})] * chains
    else:
        per_chain = [dict(v) for v in initvals]
        if len(per_chain) != chains:
            raise ValueError(f"initvals has {len(per_chain)} entries for {chains} chains")
    base = initial_values(model)
    starts = []
    for given in per_chain:
        point = _unconstrained_point(model, {**base, **given})
        for name in given:
            if not np.all(np.isfinite(point[model.rvs_to_values[model[name]].name])):
                raise ValueError(f"initvals[{name!r}] is outside the variable's support")
        starts.append(point)
    return starts, _unconstrained_point(model, base)


def _schedule(tune: int, draws: int, adapt_ladder: bool) -> tuple[set[int], list[int]]:
    """The iterations after which the ladder is updated, and those where blocks of iterations
    end: at every update (the ladder is shared by all populations, which run independently
    in between, in this process or in worker processes), every 20 iterations (when the
    progress bar moves) and at the end."""
    ladder_every = max(10, tune // 25)
    ladder_stop = int(0.8 * tune)
    total = tune + draws
    updates = (
        {it + 1 for it in range(tune) if (it + 1) % ladder_every == 0 and it < ladder_stop}
        if adapt_ladder
        else set()
    )
    return updates, sorted(updates | set(range(20, total, 20)) | {total})


def _run_blocks(
    target: TemperedModel,
    lad,
    populations: list,
    workers: int,
    tune: int,
    draws: int,
    adapt_ladder: bool,
    progressbar: bool,
) -> list[dict]:
    """Run the populations through tuning and draws, block by block, equalising the swap
    acceptance of the ladder ``lad`` (in place) between tuning blocks if ``adapt_ladder``.

    Returns
    -------
    list of dict
        Every population's records (``Population.result``), in chain order.
    """
    updates, ends = _schedule(tune, draws, adapt_ladder)
    n_updates = 0
    bar = None
    # the likelihood's factorisations are small: threads only contend with each other
    limits = one_blas_thread()
    runner = Runner(target, lad, populations, workers)
    try:
        bar = _Progress(progressbar, tune + draws, len(populations))
        begin = 0
        for stop in ends:
            win_att, win_acc, swap_rate = runner.run(begin, stop, lad.s)
            if stop in updates:
                rates = np.where(win_att > 0, win_acc / np.maximum(win_att, 1), np.nan)
                lad.equalise(rates, 2.0 / math.sqrt(1.0 + n_updates))
                n_updates += 1
            bar.update(stop - 1, swap_rate if stop > tune else np.nan)
            begin = stop
        return runner.results()
    finally:
        runner.close()
        if bar is not None:
            bar.close()
        limits.restore_original_limits()


class _Progress:
    """The progress bar of :func:`sample_sft`, with the swap acceptance once tuning is over."""

    def __init__(self, enabled: bool, total: int, chains: int):
        self._bar = ProgressBar(
            enabled, f"SFT ({chains} chains)", total, "swap acc. {task.fields[swap]}", swap="tuning"
        )

    def update(self, it: int, swap_rate: float) -> None:
        text = "tuning" if not np.isfinite(swap_rate) else f"{swap_rate:.2f}"
        self._bar.update(completed=it + 1, swap=text)

    def close(self) -> None:
        self._bar.close()
