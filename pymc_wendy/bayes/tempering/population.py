"""A population: one chain of :func:`~pymc_wendy.sample_sft`, a full ladder of replicas that
move by NUTS on their rungs and then swap states with their neighbours, iteration after
iteration, adapting while tuning and recording the draws afterwards."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pymc_wendy.bayes.tempering.adaptation import initial_factor, metric_windows
from pymc_wendy.bayes.tempering.replica import new_replicas, nuts_move, propose_swap

if TYPE_CHECKING:
    from pymc_wendy.bayes.tempering.ladder import Ladder
    from pymc_wendy.bayes.tempering.model import TemperedModel
    from pymc_wendy.bayes.tempering.replica import Replica


def _pairs(it: int, n_pairs: int, swap: str, rng) -> list[int]:
    """The neighbouring pairs ``(k, k + 1)`` that try a swap at iteration ``it``."""
    if swap == "deo":
        return list(range(it % 2, n_pairs, 2))
    return [int(rng.integers(n_pairs))] if rng.random() < 0.5 else []


class Population:
    """One chain of :func:`sample_sft`: a full ladder of replicas, its swaps and its records."""

    def __init__(self, replicas, rng, tune, draws, swap, max_depth, keep_rungs, n):
        R = len(replicas)
        self.replicas: list[Replica] = replicas
        self.rng = rng
        self.tune, self.swap, self.max_depth = tune, swap, max_depth
        self.windows = metric_windows(tune)
        self.s: np.ndarray | None = None
        self.att = np.zeros(R - 1)
        self.acc = np.zeros(R - 1)
        self.rung_accept = np.zeros(R)
        self.top: dict[str, list] = {
            k: [] for k in ("x", "accept", "n_steps", "depth", "diverging", "eps", "lp", "energy")
        }
        self.rungs = np.empty((draws, R, n)) if keep_rungs else None

    def run(self, begin: int, stop: int, target, lad: Ladder):
        """Iterations ``begin`` to ``stop - 1``: a NUTS move on every rung, then swaps.
        Returns the swap attempts and acceptances made while tuning (for the ladder)."""
        if self.s is None or not np.array_equal(self.s, lad.s):
            for rep in self.replicas:  # lp and gradient belong to the old rungs
                rep.state.stale = True
            self.s = lad.s.copy()
        alpha, beta = lad.alpha, lad.beta
        R, tune, top = len(self.replicas), self.tune, self.top
        win_att = np.zeros(R - 1)
        win_acc = np.zeros(R - 1)
        for it in range(begin, stop):
            tuning = it < tune
            for r, rep in enumerate(self.replicas):
                st = nuts_move(target, rep, alpha[r], beta[r], self.rng, self.max_depth)
                if tuning:
                    rep.eps = rep.da.update(st["accept"])
                    if it >= 75 or tune < 200:
                        rep.window.append(rep.state.x.copy())
                        rep.window_segment.append(rep.segment)
                    continue
                self.rung_accept[r] += st["accept"]
                if r == R - 1:
                    top["accept"].append(st["accept"])
                    top["n_steps"].append(st["n_steps"])
                    top["depth"].append(st["depth"])
                    top["diverging"].append(st["diverging"])
                    top["eps"].append(rep.eps)
                    top["energy"].append(st["energy"])
            for k in _pairs(it, R - 1, self.swap, self.rng):
                ok = propose_swap(target, self.replicas, k, lad, self.rng)
                if tuning:
                    win_att[k] += 1
                    win_acc[k] += ok
                else:
                    self.att[k] += 1
                    self.acc[k] += ok
            if not tuning:
                st_top = self.replicas[-1].state
                top["x"].append(st_top.x.copy())
                # prior and likelihood stay valid across a swap (the lik is re-evaluated)
                top["lp"].append(st_top.prior + beta[-1] * st_top.lik)
                if self.rungs is not None:
                    for r, rep in enumerate(self.replicas):
                        self.rungs[it - tune, r] = rep.state.x
            elif it + 1 in self.windows:
                for rep in self.replicas:
                    rep.end_window()
            if it + 1 == tune:
                for rep in self.replicas:
                    rep.eps = rep.da.final
        return win_att, win_acc, self.acc.sum(), self.att.sum()

    def result(self) -> dict:
        return {
            "top": {k: np.asarray(v) for k, v in self.top.items()},
            "rungs": self.rungs,
            "att": self.att,
            "acc": self.acc,
            "rung_accept": self.rung_accept / max(len(self.top["x"]), 1),
            "eps": np.array([rep.eps for rep in self.replicas]),
        }


def make_populations(
    target: TemperedModel,
    lad: Ladder,
    xs: list[np.ndarray],
    rng: np.random.Generator,
    *,
    target_accept: float,
    tune: int,
    draws: int,
    swap: str,
    max_depth: int,
    keep_rungs: bool,
) -> list[Population]:
    """One population per start point, each with its own random stream.

    Parameters
    ----------
    target : TemperedModel
        The tempered model.
    lad : Ladder
        The starting ladder.
    xs : list of numpy.ndarray
        Unconstrained start points, one per population (all its rungs start there).
    rng : numpy.random.Generator
        The run's generator: the populations' streams are spawned from its seed sequence,
        so each population draws the same numbers wherever it runs.
    target_accept, tune, draws, swap, max_depth, keep_rungs
        As in :func:`~pymc_wendy.sample_sft` (``max_depth`` is ``max_treedepth``).

    Returns
    -------
    list of Population
    """
    rngs = [np.random.default_rng(s) for s in rng.bit_generator.seed_seq.spawn(len(xs))]
    ref_factors = [
        initial_factor(target, target.x0.data, lad.alpha[r], lad.beta[r]) for r in range(lad.s.size)
    ]
    return [
        Population(
            new_replicas(target, lad, x, ref_factors, target_accept),
            rng_c,
            tune,
            draws,
            swap,
            max_depth,
            keep_rungs,
            target.n,
        )
        for x, rng_c in zip(xs, rngs, strict=True)
    ]
