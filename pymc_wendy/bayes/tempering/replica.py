"""One chain on one rung (a replica): its state, step size and mass matrix, its NUTS move on
the rung's target, and the exact Metropolis-Hastings exchange of states between neighbouring
rungs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from pymc_wendy.bayes.tempering.adaptation import (
    DualAverage,
    covariance_factor,
    initial_factor,
)
from pymc_wendy.bayes.tempering.nuts import compiled_transition

if TYPE_CHECKING:
    from pymc_wendy.bayes.tempering.ladder import Ladder
    from pymc_wendy.bayes.tempering.model import TemperedModel


@dataclass
class _State:
    x: np.ndarray
    lp: float = np.nan
    grad: np.ndarray | None = None
    prior: float = np.nan
    lik: float = np.nan
    stale: bool = True  # lp/grad not valid for the rung's current target


@dataclass
class Replica:
    """One chain of one population: its state, step size and mass matrix."""

    state: _State
    factor: np.ndarray
    eps: float
    da: DualAverage
    ref_factor: np.ndarray  # the rung's curvature at the WENDy-MLE: the fallback metric
    window: list = field(default_factory=list)
    segment: int = 0  # incremented when a swap brings a state from another basin
    window_segment: list = field(default_factory=list)

    def end_window(self) -> None:
        """Re-estimate the metric from the states of the window just ended (falling back to
        the reference one) and restart the step-size adaptation for the new metric."""
        self.factor = covariance_factor(
            np.array(self.window), np.array(self.window_segment), self.ref_factor
        )
        self.window, self.window_segment = [], []
        self.da.restart(self.eps)


def new_replicas(
    target: TemperedModel,
    lad: Ladder,
    x: np.ndarray,
    ref_factors: list[np.ndarray],
    target_accept: float,
) -> list[Replica]:
    """The replicas of one population, one per rung, all starting at ``x``.

    Parameters
    ----------
    target : TemperedModel
        The tempered model.
    lad : Ladder
        The starting ladder.
    x : numpy.ndarray
        The population's unconstrained start point.
    ref_factors : list of numpy.ndarray
        Each rung's metric at the WENDy-MLE, the fallback where ``x`` is no local mode.
    target_accept : float
        Target of the step-size adaptation.

    Returns
    -------
    list of Replica
        From the easiest rung to the model.
    """
    eps = 0.5 / target.n**0.25
    row = []
    for r in range(lad.s.size):
        # the curvature where the chain starts, if that is a local mode of the rung
        factor = initial_factor(target, x, lad.alpha[r], lad.beta[r], ref_factors[r])
        row.append(
            Replica(_State(x.copy()), factor, eps, DualAverage(eps, target_accept), ref_factors[r])
        )
    return row


def nuts_move(target, rep: Replica, alpha, beta, rng, max_depth) -> dict:
    """One NUTS transition of a replica on its rung, in coordinates whitened by its metric
    (compiled: :func:`~pymc_wendy.bayes.tempering.nuts.compiled_transition`)."""
    st = rep.state
    if st.stale:
        st.lp, st.grad, st.prior, st.lik = target.value_grad(st.x, alpha, beta)
        st.stale = False
    x, lp, g, prior, lik, accept, n_steps, depth, diverging, energy = compiled_transition()(
        target.compiled, np.ascontiguousarray(rep.factor, dtype=float),
        float(alpha), float(beta), np.ascontiguousarray(st.x, dtype=float), float(st.lp),
        np.ascontiguousarray(st.grad, dtype=float),
        float(st.prior), float(st.lik), float(rep.eps), int(max_depth),
        rng,
    )  # fmt: skip
    rep.state = _State(x, lp, g, prior, lik, stale=False)
    return {
        "accept": accept, "n_steps": n_steps, "depth": depth, "diverging": diverging,
        "energy": energy,
    }  # fmt: skip


def _jump(rep: Replica, new: np.ndarray) -> bool:
    """Whether a swap moves a rung's state further than two independent draws of the rung's
    current metric would be apart (squared distance beyond the 99.99 % point of 2 chi2_n):
    a jump between basins, which starts a new segment for the metric estimate."""
    d = np.linalg.solve(rep.factor, new - rep.state.x)
    return bool(d @ d > 2.0 * _chi2_9999(d.size))


@lru_cache
def _chi2_9999(n: int) -> float:
    from scipy.stats import chi2

    return float(chi2.ppf(0.9999, n))


def propose_swap(target, row: list[Replica], k: int, lad: Ladder, rng) -> bool:
    """Exact Metropolis-Hastings exchange of the states of rungs ``k`` and ``k + 1``."""
    a, b = row[k], row[k + 1]
    for rep, r in ((a, k), (b, k + 1)):
        if rep.state.stale:
            rep.state.lp, rep.state.grad, rep.state.prior, rep.state.lik = target.value_grad(
                rep.state.x, lad.alpha[r], lad.beta[r]
            )
            rep.state.stale = False
    alpha, beta = lad.alpha, lad.beta
    if alpha[k] == alpha[k + 1]:
        lik_a_at_b, lik_b_at_a = b.state.lik, a.state.lik  # same likelihood on every rung
    else:
        lik_a_at_b = target.parts(b.state.x, alpha[k])[1]  # rung k's likelihood at b's state
        lik_b_at_a = target.parts(a.state.x, alpha[k + 1])[1]
    # the priors cancel: pi_k(x_b) pi_{k+1}(x_a) / (pi_k(x_a) pi_{k+1}(x_b))
    log_r = (
        beta[k] * lik_a_at_b
        + beta[k + 1] * lik_b_at_a
        - beta[k] * a.state.lik
        - beta[k + 1] * b.state.lik
    )
    if not (np.isfinite(log_r) and math.log(rng.random()) < log_r):
        return False
    for rep, new in ((a, b.state.x), (b, a.state.x)):
        rep.segment += _jump(rep, new)
    a.state, b.state = b.state, a.state
    a.state.stale = b.state.stale = True  # lp and gradient belong to the other rung
    if alpha[k] != alpha[k + 1]:
        a.state.lik, b.state.lik = lik_a_at_b, lik_b_at_a
    return True
