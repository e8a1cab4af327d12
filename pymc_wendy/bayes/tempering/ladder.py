"""The ladder of rungs: levels ``s`` in [0, 1] (1 = the model), their map to the covariance
relaxation ``alpha`` and likelihood power ``beta``, their adaptation to equal swap acceptance,
and the ladder a user passes to :func:`~pymc_wendy.sample_sft`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

Relaxation = Literal["covariance", "power", "hybrid"]


@dataclass
class Ladder:
    """Rung levels ``s`` in [0, 1] (1 = the model) and their map to ``alpha`` or ``beta``."""

    relaxation: Relaxation
    s: np.ndarray
    alpha_min: float = 1e-6
    beta_min: float = 1e-3

    @property
    def alpha(self) -> np.ndarray:
        if self.relaxation == "power":
            return np.zeros_like(self.s)
        a = self.alpha_min
        return np.clip((a**self.s - a) / (1.0 - a), 0.0, 1.0)

    @property
    def beta(self) -> np.ndarray:
        if self.relaxation == "covariance":
            return np.ones_like(self.s)
        return self.beta_min ** (1.0 - self.s)

    def level_of(self, value: float) -> float:
        """The level ``s`` of a relaxation value (``alpha``, ``beta`` or, hybrid, ``s``)."""
        if self.relaxation == "hybrid":
            return value
        if self.relaxation == "power":
            return 1.0 - math.log(value) / math.log(self.beta_min)
        a = self.alpha_min
        return math.log(value * (1.0 - a) + a) / math.log(a)

    def equalise(self, rates: np.ndarray, step: float) -> None:
        """Widen gaps whose swaps are accepted more often than average, narrow the others."""
        ok = np.isfinite(rates)
        if ok.sum() < 2:
            return
        gaps = np.diff(self.s)
        logg = np.log(gaps)
        logg[ok] += step * (rates[ok] - rates[ok].mean())
        gaps = np.exp(logg)
        gaps /= gaps.sum()
        gaps = np.maximum(gaps, 1e-4)  # keep rungs distinct
        self.s = np.concatenate([[0.0], np.cumsum(gaps / gaps.sum())])
        self.s[-1] = 1.0


def make_ladder(relaxation: Relaxation, rungs, ladder, alpha_min: float) -> Ladder:
    """The starting ladder: ``rungs`` evenly spaced levels, or the user's ``ladder`` checked
    and mapped to levels.

    Parameters
    ----------
    relaxation : {"hybrid", "covariance", "power"}
        What the rungs relax.
    rungs : int
        Number of rungs when ``ladder`` is None.
    ladder : sequence of float or None
        ``alpha`` values (covariance), ``beta`` values (power) or levels ``s`` (hybrid), from
        the easiest rung to the model.
    alpha_min : float
        Where the covariance ladder's geometric part begins (the tempered model's).

    Returns
    -------
    Ladder
    """
    lad = Ladder(relaxation, np.zeros(1), alpha_min=alpha_min)
    if ladder is None:
        R = int(rungs)
        if R < 2:
            raise ValueError(f"rungs must be at least 2; got {rungs}")
        lad.s = np.linspace(0.0, 1.0, R)
        return lad
    values = np.asarray(ladder, dtype=float)
    if values.ndim != 1 or values.size < 2 or not np.all(np.isfinite(values)):
        raise ValueError(f"ladder must be a finite sequence of at least 2 values; got {ladder}")
    if relaxation == "covariance":
        if values[-1] != 0.0 or np.any(np.diff(values) >= 0) or values[0] > 1 or values[-1] < 0:
            raise ValueError(
                "a covariance ladder lists alpha values in [0, 1], strictly decreasing from the "
                f"easiest rung to the model's alpha = 0; got {list(values)}"
            )
        lad.alpha_min = float(min(lad.alpha_min, values[-2] / 10.0))
    elif relaxation == "hybrid":
        if values[-1] != 1.0 or np.any(np.diff(values) <= 0) or values[0] < 0:
            raise ValueError(
                "a hybrid ladder lists levels s in [0, 1], strictly increasing to the model's "
                f"s = 1; got {list(values)}"
            )
    else:
        if values[-1] != 1.0 or np.any(np.diff(values) <= 0) or values[0] <= 0:
            raise ValueError(
                "a power ladder lists beta values in (0, 1], strictly increasing to the model's "
                f"beta = 1; got {list(values)}"
            )
        lad.beta_min = float(values[0])
    lad.s = np.array([lad.level_of(v) for v in values])
    lad.s[0], lad.s[-1] = max(lad.s[0], 0.0), 1.0
    return lad
