"""What each replica adapts while tuning: its step size (dual averaging toward a target
acceptance) and its dense mass matrix (the inverse Hessian at the start, then the covariance
of its draws over Stan's doubling windows)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pymc_wendy.bayes.tempering.model import TemperedModel


class DualAverage:
    """Hoffman & Gelman (2014) step-size adaptation toward a mean acceptance statistic."""

    def __init__(self, eps: float, target: float):
        self.target = target
        self.restart(eps)

    def restart(self, eps: float) -> None:
        self.mu = math.log(10.0 * eps)
        self.hbar = 0.0
        self.log_bar = math.log(eps)
        self.t = 0

    def update(self, accept: float) -> float:
        self.t += 1
        eta = 1.0 / (self.t + 10.0)
        self.hbar = (1.0 - eta) * self.hbar + eta * (self.target - accept)
        log_eps = self.mu - math.sqrt(self.t) / 0.05 * self.hbar
        w = self.t**-0.75
        self.log_bar = w * log_eps + (1.0 - w) * self.log_bar
        return math.exp(log_eps)

    @property
    def final(self) -> float:
        return math.exp(self.log_bar)


def metric_windows(tune: int) -> set[int]:
    """Iterations after which the mass matrix is re-estimated: Stan's doubling windows."""
    if tune < 40:
        return set()
    start, end = (75, 50) if tune >= 200 else (int(0.15 * tune), int(0.1 * tune))
    ends, width, it = set(), 25 if tune >= 200 else max(5, int(0.075 * tune)), start
    while it + width < tune - end:
        nxt = it + width
        if nxt + 2 * width >= tune - end:
            nxt = tune - end
        ends.add(nxt)
        it, width = nxt, 2 * width
    return ends


def covariance_factor(samples: np.ndarray, segment: np.ndarray, fallback: np.ndarray):
    """Cholesky factor of the pooled within-segment covariance (shrunk toward its diagonal).

    A segment is a run of iterations without a swap that jumped between basins
    (``replica._jump``). Deviations are taken from each segment's own mean, so a rung whose
    states come from several basins gets the metric of one basin (what the integrator sees)
    rather than the spread between basins, which would force a step size far too small for
    either. Only the second half of the window is used.
    """
    half = samples.shape[0] // 2
    samples, segment = samples[half:], segment[half:]
    _, idx, counts = np.unique(segment, return_inverse=True, return_counts=True)
    dof = samples.shape[0] - counts.size
    if dof < 10 or np.unique(samples, axis=0).shape[0] < 10:  # too little to measure anything
        return fallback
    means = np.zeros((counts.size, samples.shape[1]))
    np.add.at(means, idx, samples)
    dev = samples - means[idx] / counts[idx, None]
    cov = dev.T @ dev / dof
    shrink = 5.0 / (dof + 5.0)
    cov = (1.0 - shrink) * cov + shrink * np.diag(np.diag(cov))
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        return fallback


def initial_factor(target: TemperedModel, x, alpha, beta, fallback=None) -> np.ndarray:
    """Inverse-Hessian metric at ``x`` (central differences of the gradient); where the
    Hessian is not negative definite, ``fallback`` or else a diagonal one."""
    n = x.size
    h = 1e-5 * np.maximum(1.0, np.abs(x))
    H = np.empty((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = h[i]
        H[:, i] = (
            target.value_grad(x + e, alpha, beta)[1] - target.value_grad(x - e, alpha, beta)[1]
        ) / (2.0 * h[i])
    H = -0.5 * (H + H.T)
    try:
        np.linalg.cholesky(H)  # positive definite: a local mode of the rung
        return np.linalg.cholesky(np.linalg.inv(H))
    except np.linalg.LinAlgError:
        if fallback is not None:
            return fallback.copy()
        d = np.abs(np.diag(H))
        d = np.where(np.isfinite(d) & (d > 0), d, 1.0)
        return np.diag(1.0 / np.sqrt(d))
