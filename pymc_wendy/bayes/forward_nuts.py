"""The correction's NUTS route: the forward-solve model sampled from a proposal, on a budget.

:func:`~pymc_wendy.bayes.correction.forward_correction` samples the forward model with NUTS
where importance weights cannot be trusted. Two samplers, one contract (draws of the forward
model, chains started near the proposal, a mass matrix from it, stopped by a time budget):

* :func:`nutpie_nuts` where every forward solution is compiled natively
  (:func:`~pymc_wendy.bayes.forward_numba.compiled_natively`) and nutpie is installed: the
  model whitened by the proposal's centre and covariance
  (:func:`~pymc_wendy.bayes.whitening.whitened_model`, nutpie takes no mass matrix), the
  log-density and its gradient compiled by numba, the solves included, chains as threads.
  No Python between leapfrog steps.
* :func:`pymc_nuts` otherwise: PyMC's NUTS, each chain started at a proposal draw, the mass
  matrix given, the log-density on PyTensor's C VM around the solves' Python Op.

Both stop when the budget is spent, or as soon as :data:`PACE_AFTER` of the iterations are
done and their pace projects more than :data:`PACE_MARGIN` times the budget
(:class:`OverBudget`).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection, RaveledVars

from pymc_wendy.bayes.forward import quiet_c_backend
from pymc_wendy.bayes.whitening import to_model_trace, whitened_model

__all__ = ["PACE_AFTER", "PACE_MARGIN", "OverBudget", "nutpie_nuts", "pymc_nuts"]

# The route's pre-run estimate (a Laplace fit's seconds per gradient times a guessed tree
# size) was 4 times too low on Theophylline's hierarchy, which then ran for its whole budget
# of 27 min to be stopped at 3 619 of 6 000 iterations. After this share of the iterations
# (tuning's, whose trees are the deepest, included) the run's own pace is the better
# estimate, and a projection beyond this margin over the budget stops it there.
PACE_AFTER = 0.2
PACE_MARGIN = 1.5
# how often nutpie's run is looked at (its progress arrives from its own threads)
_POLL_SECONDS = 0.1


class OverBudget(Exception):
    """A NUTS run stopped because its deadline passed or its pace projected beyond it."""

    def __init__(self, done: int, total: int, elapsed: float, projected: float):
        self.done, self.total = done, total
        self.elapsed, self.projected = elapsed, projected
        super().__init__(f"{done} of {total} iterations")


def _over_budget(budget: float | None, total: int, done: int, elapsed: float):
    """The :class:`OverBudget` of a run ``done`` of ``total`` iterations and ``elapsed``
    seconds in, or None while it may go on."""
    if budget is None:
        return None
    projected = elapsed * total / max(done, 1)
    paced = done >= PACE_AFTER * total and projected > PACE_MARGIN * budget
    if elapsed > budget or paced:
        return OverBudget(done, total, elapsed, projected)
    return None


def _cores(chains: int) -> int:
    return max(1, min(chains, len(os.sched_getaffinity(0))))


def pymc_nuts(
    fmodel: pm.Model, cov: np.ndarray, initvals: list[dict], *, draws: int, tune: int,
    target_accept: float, seed: int, progressbar: bool, budget: float | None = None,
):  # fmt: skip
    """PyMC's NUTS on ``fmodel``, chain ``c`` started at ``initvals[c]``, the mass matrix
    ``cov`` (step size adapted in ``tune`` steps); raises :class:`OverBudget`."""
    chains = len(initvals)
    total, start, done = chains * (draws + tune), time.perf_counter(), 0

    def callback(trace, draw):
        nonlocal done
        done += 1
        stop = _over_budget(budget, total, done, time.perf_counter() - start)
        if stop is not None:
            raise stop  # PyMC closes its chains' processes when a callback raises

    with fmodel, quiet_c_backend():
        step = pm.NUTS(
            scaling=cov, is_cov=True, target_accept=target_accept, compile_kwargs={"mode": "CVM"}
        )
        return pm.sample(
            draws, tune=tune, chains=chains, step=step, initvals=initvals,
            cores=_cores(chains), random_seed=seed, progressbar=progressbar,
            compile_kwargs={"mode": "CVM"}, callback=callback if budget is not None else None,
        )  # fmt: skip


def nutpie_nuts(
    fmodel: pm.Model, centre: np.ndarray, cov: np.ndarray, *, draws: int, tune: int,
    chains: int, target_accept: float, seed: int, progressbar: bool,
    budget: float | None = None,
):  # fmt: skip
    """nutpie on ``fmodel`` whitened at ``centre`` (a point of its unconstrained space, in
    PyMC's raveled order) with covariance ``cov``, chains jittered around the centre; the
    trace in ``fmodel``'s variables. Raises :class:`OverBudget`."""
    import nutpie
    from pymc.backends.arviz import patch_nutpie_idata
    from pymc.progress_bar import NutpieProgressBarManager

    wmodel, _ = whitened_model(fmodel, _raveled(fmodel, centre), np.linalg.inv(cov))
    compiled = nutpie.compile_pymc_model(wmodel, backend="numba", jitter_rvs=set(wmodel.free_RVs))
    total, done = chains * (draws + tune), [0]
    bar = NutpieProgressBarManager(chains=chains, draws=draws, progressbar=progressbar)

    def progress(chain_progresses):
        done[0] = sum(cp.finished_draws for cp in chain_progresses)
        bar.update(chain_progresses)

    start = time.perf_counter()
    with bar:
        run = nutpie.sample(
            compiled, draws=draws, tune=tune, chains=chains, cores=_cores(chains), seed=seed,
            target_accept=target_accept, progress_bar=False, progress_callback=progress,
            blocking=False,
        )  # fmt: skip
        while not _finished(run):
            time.sleep(_POLL_SECONDS)
            stop = _over_budget(budget, total, done[0], time.perf_counter() - start)
            if stop is not None:
                run.cancel()
                raise stop
        idata = run.wait()
    patch_nutpie_idata(idata, wmodel, sampling_time=time.perf_counter() - start)
    return to_model_trace(idata, fmodel)


def _finished(run) -> bool:
    # nutpie's check takes a lock its running chains hold, and raises TimeoutError then
    try:
        return run.is_finished
    except TimeoutError:
        return False


def _raveled(model: pm.Model, x: np.ndarray) -> RaveledVars:
    """``x``, a vector of ``model``'s unconstrained space, as PyMC's raveled point (the
    layout :func:`~pymc_wendy.bayes.whitening.posterior_mode` gives its mode)."""
    point = model.initial_point()
    layout = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars})
    return RaveledVars(np.asarray(x, dtype=float), layout.point_map_info)
