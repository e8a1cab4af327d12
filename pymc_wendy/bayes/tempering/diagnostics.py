"""What a run of :func:`~pymc_wendy.sample_sft` says about itself: :class:`SFTWarning`, the
ladder's communication barrier estimated from the swaps, the number of rungs it calls for,
and the warnings on swaps, divergences and disagreeing chains."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats


class SFTWarning(UserWarning):
    """Swaps that never happen, divergences or disagreeing chains in
    :func:`~pymc_wendy.sample_sft`."""


# Swap acceptance per pair that the advice on the number of rungs aims for (the middle of the
# 0.2-0.5 range in which states travel the ladder well).
_TARGET_SWAP = 0.35


def _barrier_per_pair(accept: np.ndarray) -> np.ndarray:
    """Barrier between two rungs from their swap acceptance, under Gaussian energy differences.

    Near-by rungs reject with probability ``b`` = their share of the global communication
    barrier (Syed et al. 2022). With a Gaussian log swap ratio (``N(-mu, 2 mu)``, the form
    detailed balance imposes) acceptance is ``2 Phi(-sqrt(mu / 2))`` and small gaps reject
    ``sqrt(mu / pi)``, so ``b = -Phi^-1(a / 2) sqrt(2 / pi)``: equal to ``1 - a`` for close
    rungs, but growing past 1 for pairs that rarely swap, where ``1 - a`` saturates.
    """
    return -stats.norm.ppf(np.asarray(accept) / 2.0) * np.sqrt(2.0 / np.pi)


def communication_barrier(acc: np.ndarray, att: np.ndarray) -> float:
    """The ladder's global communication barrier from the swaps of all chains (pooled)."""
    n = np.maximum(att.sum(0), 1)
    accept = np.clip(acc.sum(0) / n, 0.5 / n, 1.0)  # no swap in n tries: at most about 1/(2n)
    return float(_barrier_per_pair(accept).sum())


def _rungs_for(barrier: float, accept: float = _TARGET_SWAP) -> int:
    """Rungs whose equalised pairs would each swap with probability about ``accept``."""
    return 1 + max(1, math.ceil(barrier / float(_barrier_per_pair(accept))))


def warn_about_swaps(dt, acc, att, C) -> None:
    """:class:`SFTWarning` for pairs that never swapped or rarely swap, divergences in the top
    rung and chains that disagree (``acc``, ``att``: swap acceptances and attempts per chain
    and pair; ``C`` chains). Called from ``results.assemble_result``, itself called from
    ``sample_sft``, which ``stacklevel=3`` names as the warnings' origin."""
    import arviz as az

    never = [
        (c, k) for c in range(C) for k in range(acc.shape[1]) if att[c, k] > 0 and acc[c, k] == 0
    ]
    if never:
        pairs = sorted({k for _, k in never})
        warnings.warn(
            f"swaps between rungs {[(k, k + 1) for k in pairs]} were never accepted in "
            f"{len({c for c, _ in never})} of {C} chains: the ladder is too coarse there; use "
            "more rungs (or a ladder with smaller steps)",
            SFTWarning,
            stacklevel=3,
        )
    pooled = acc.sum(0) / np.maximum(att.sum(0), 1)
    if pooled.size and pooled.min() < 0.2:
        barrier = dt["sample_stats"].attrs["communication_barrier"]
        about = "at least" if pooled.min() == 0 else "about"  # a pair that never swapped
        warnings.warn(
            f"swap acceptance is {pooled.min():.2f}-{pooled.max():.2f} per pair, below the "
            f"0.2-0.5 in which states travel the ladder well; the ladder's communication "
            f"barrier is {about} {barrier:.1f}, so about {_rungs_for(barrier)} rungs (now "
            f"{pooled.size + 1}) would swap with probability {_TARGET_SWAP} per pair",
            SFTWarning,
            stacklevel=3,
        )
    n_div = int(dt["sample_stats"]["diverging"].sum())
    if n_div:
        warnings.warn(f"{n_div} divergences in the top rung", SFTWarning, stacklevel=3)
    if C > 1:
        rhat = az.rhat(dt)
        worst = max(float(rhat[v].max()) for v in rhat.data_vars) if rhat.data_vars else 1.0
        if worst > 1.01:
            warnings.warn(
                f"the chains disagree (max R-hat {worst:.3f} > 1.01): run longer or add rungs",
                SFTWarning,
                stacklevel=3,
            )
