"""Starting points inside a box whose sides may be infinite (``bounds=[(0, np.inf), ...]``)."""

from __future__ import annotations

import numpy as np

#: Relative distance from a finite bound of a strictly feasible start
_RSTEP = 1e-9


def margin(x, lo, hi, rtol: float) -> np.ndarray:
    """``rtol`` times the box's width per component, finite even where a side is infinite
    (then of ``max(|finite bound|, |x|)``; zero where both are). ``rtol * (hi - lo)`` is
    ``inf`` for ``(0, inf)``, which made every point "at" the lower bound."""
    x = np.asarray(x, dtype=float)
    lo = np.broadcast_to(np.asarray(lo, dtype=float), x.shape)
    hi = np.broadcast_to(np.asarray(hi, dtype=float), x.shape)
    fin_lo, fin_hi = np.isfinite(lo), np.isfinite(hi)
    with np.errstate(invalid="ignore"):
        one_sided = np.maximum(np.abs(np.where(fin_lo, lo, hi)), np.abs(x))
        width = np.where(fin_lo & fin_hi, hi - lo, one_sided)
    return rtol * np.where(np.isfinite(width), width, 0.0)  # both sides infinite: no margin


def strictly_inside(x, lo, hi) -> np.ndarray:
    """``x`` clipped into ``[lo, hi]`` and moved off each finite bound by ``1e-9`` of the
    box's width (of ``max(|bound|, |x|)`` where the other side is infinite), as the
    trust-region reflective method wants; a side at infinity adds no constraint (the old
    ``lo + 1e-9 * (hi - lo)`` was NaN there)."""
    x = np.asarray(x, dtype=float)
    lo = np.broadcast_to(np.asarray(lo, dtype=float), x.shape)
    hi = np.broadcast_to(np.asarray(hi, dtype=float), x.shape)
    x = np.clip(x, lo, hi)
    m = margin(x, lo, hi, _RSTEP)
    return np.clip(
        x, np.where(np.isfinite(lo), lo + m, -np.inf), np.where(np.isfinite(hi), hi - m, np.inf)
    )


def check_closed_box(bounds, names) -> None:
    """A start searched in the box (its centre, a design in it) needs both sides of every
    bound: a ValueError naming the open ones otherwise."""
    lo, hi = bounds
    open_ = [n for n, a, b in zip(names, lo, hi, strict=True) if not np.isfinite(b - a)]
    if open_:
        raise ValueError(
            f"the bounds of {open_} are open on a side, so there is no box to search a start "
            "in: give a starting point p0 (any bounds, one-sided included, are then respected)"
        )
