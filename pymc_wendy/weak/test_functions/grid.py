"""The time grid as the test-function construction sees it, and the rows of one radius.

Everything about ``t`` that :mod:`.radius` and :mod:`.build` need is computed once
(:func:`make_grid`): trapezoid weights, whether the grid is uniform, the unit in which radii
are counted ("points"), the largest radius that fits and the rounding slack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pymc_wendy.weak.test_functions.families import LocalFamily
from pymc_wendy.weak.test_functions.quadrature import (
    ProductRule,
    quadrature_weights,
    relevant_breaks,
)

__all__ = [
    "QUADRATURES",
    "SNAP_RTOL",
    "Grid",
    "check_positive",
    "local_spacing",
    "make_grid",
    "too_few_points",
]

#: the quadrature rules the test-function rows can be weighted with (``"auto"`` picks one)
QUADRATURES = ("auto", "trapezoid", "product")

# Relative spacing deviation below which a grid counts as uniform (WENDy.jl uses 1e-6 absolute).
UNIFORM_RTOL = 1e-6
# Slack, relative to the grid spacing, for "support inside the domain" and point conversions;
# radii computed as n * dt carry rounding errors far below it.
SNAP_RTOL = 1e-9
# Intervals either side over which the local spacing is averaged: one short interval (two
# nearly simultaneous samples) does not make a dense stretch.
_SPACING_WINDOW = 2


@dataclass(frozen=True)
class Grid:
    """Everything about ``t`` the construction needs, computed once."""

    t: np.ndarray
    weights: np.ndarray
    uniform: bool
    # Unit for radii counted in "points": dt on a uniform grid; on a non-uniform grid the
    # largest spacing, so that a 2-point bump always covers a few samples.
    unit: float
    # Largest radius with at least one admissible centre.
    r_fit: float
    tol: float
    # How rows are weighted: the trapezoid rule, or product integration (ProductRule)
    quadrature: str = "trapezoid"
    product: ProductRule | None = None
    # Times in [t_0, t_M) where the data jump or kink (bolus doses)
    breaks: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # Times in [t_0, t_M) where the data's derivative jumps (doses into unmeasured states)
    kinks: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # The local spacing at every point (:func:`local_spacing`): the radius ladder extends down
    # to its densest stretch (None: it does not)
    spacing: np.ndarray | None = None

    @property
    def dense(self) -> float:
        """The densest stretch's spacing over :attr:`unit` (at most 1)."""
        if self.spacing is None:
            return 1.0
        return min(1.0, float(np.min(self.spacing)) / self.unit)

    @property
    def M(self) -> int:
        return self.t.size - 1

    @property
    def span(self) -> float:
        return float(self.t[-1] - self.t[0])

    def to_points(self, r: float | np.ndarray) -> np.ndarray:
        return np.asarray(r, dtype=float) / self.unit

    def floor(self, x: float | np.ndarray) -> np.ndarray:
        """Round a radius in points down to a whole number on a uniform grid only."""
        x = np.asarray(x, dtype=float)
        return np.floor(x + SNAP_RTOL) if self.uniform else x

    def ceil(self, x: float | np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return np.ceil(x - SNAP_RTOL) if self.uniform else x

    def centres(self, r: float) -> np.ndarray:
        """Indices of the data points whose bump of radius ``r`` lies inside ``[t_0, t_M]``."""
        t = self.t
        ok = (t - r >= t[0] - self.tol) & (t + r <= t[-1] + self.tol)
        return np.flatnonzero(ok)

    def rows(
        self, family: LocalFamily, radius: float, centre_idx: np.ndarray, derivative: bool
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Unit-norm weighted rows of the functions of one radius (and their derivative rows).

        Returns ``(rows, derivative_rows or None, scales)`` where ``scales[i]`` is the factor
        that made row ``i`` unit norm; the derivative rows share it.
        """
        c = self.t[centre_idx]
        if self.product is not None:
            lo, hi = c - radius, c + radius

            def rule(order):
                return self.product.local_weights(
                    lo, hi, lambda x: family.shape((x - c[:, None, None]) / radius, order)
                )

            rows = rule(0)
            scales = 1.0 / np.linalg.norm(rows, axis=1)
            rows *= scales[:, None]
            if not derivative:
                return rows, None, scales
            return rows, rule(1) * (scales[:, None] / radius), scales
        s = (self.t[None, :] - c[:, None]) / radius
        rows = family.shape(s, 0) * self.weights
        scales = 1.0 / np.linalg.norm(rows, axis=1)
        rows *= scales[:, None]
        if not derivative:
            return rows, None, scales
        drows = family.shape(s, 1) * (self.weights * scales[:, None] / radius)
        return rows, drows, scales

    def window_rows(
        self, family: LocalFamily, radius: float, centre_idx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`rows` with derivatives, evaluated on each support only (trapezoid rule).

        Returns ``(start, rows, derivative_rows, scales)``: ``rows[k, j]`` is the unit-norm
        weighted row ``k`` at time index ``start[k] + j``, every window as long as the
        longest support (padded with points outside the support, where the shape is zero).
        The same numbers as :meth:`rows` (up to the order of the norm's sum), without the
        ``K x (M+1)`` matrix: ``O(K r)`` instead of ``O(K M)``.

        Raises
        ------
        ValueError
            With product integration, whose rows mix neighbouring intervals.
        """
        if self.product is not None:
            raise ValueError(
                "rows on windows need the trapezoid rule (a uniform grid, or "
                "quadrature='trapezoid'); this grid uses product integration"
            )
        t = self.t
        c = t[centre_idx]
        lo = np.searchsorted(t, c - radius - self.tol, side="left")
        hi = np.searchsorted(t, c + radius + self.tol, side="right")
        width = int(np.max(hi - lo)) if c.size else 1
        start = np.minimum(lo, t.size - width).astype(np.int64)
        idx = start[:, None] + np.arange(width)[None, :]
        s = (t[idx] - c[:, None]) / radius
        w = self.weights[idx]
        rows = family.shape(s, 0) * w
        scales = 1.0 / np.linalg.norm(rows, axis=1)
        rows *= scales[:, None]
        drows = family.shape(s, 1) * (w * scales[:, None] / radius)
        return start, rows, drows, scales


def make_grid(
    t: np.ndarray, quadrature: str = "auto", breaks=(), kinks=(), local: bool = True
) -> Grid:
    """The :class:`Grid` of checked, strictly increasing times ``t``.

    ``quadrature="auto"`` is the trapezoid rule on a uniform grid (spectrally accurate for
    the smooth bumps) and product integration on a non-uniform one (:class:`ProductRule`);
    radii are then counted in the median spacing rather than the largest. ``breaks`` (times
    where the data jump: bolus doses) inside the span need the product rule, which
    interpolates each side separately; the trapezoid rule is first order across a jump.
    ``kinks`` (where the data's derivative jumps) make ``"auto"`` choose it too.

    ``local``: on a non-uniform grid with product integration, record the local spacing
    (:attr:`Grid.spacing`), so that the radius ladder can extend down into its dense
    stretches (``dense_radii`` of :func:`~.build.build_test_functions`).
    """
    if quadrature not in QUADRATURES:
        raise ValueError(f"quadrature must be one of {QUADRATURES}; got {quadrature!r}")
    breaks, kinks = relevant_breaks(t, breaks), relevant_breaks(t, kinks)
    if breaks.size and quadrature == "trapezoid":
        raise ValueError(
            f"the data jump at {breaks.tolist()} (doses); the trapezoid rule integrates across "
            "a jump to first order only: use quadrature='product' (or 'auto')"
        )
    h = np.diff(t)
    dt = (t[-1] - t[0]) / (t.size - 1)
    uniform = bool(np.max(np.abs(h - dt)) <= UNIFORM_RTOL * dt)
    tol = SNAP_RTOL * float(np.min(h))
    if uniform:
        unit = float(dt)
        r_fit = ((t.size - 1) // 2) * unit
        # Nearly uniform grids are treated as uniform; their drift from the ideal grid must not
        # push the widest bump (radius M/2 points) out of the domain.
        ideal = t[0] + dt * np.arange(t.size)
        tol += float(np.max(np.abs(t - ideal)))
    else:
        r_fit = float(np.max(np.minimum(t - t[0], t[-1] - t)))
    if quadrature == "auto":
        smooth = not (breaks.size or kinks.size)
        quadrature = "trapezoid" if (uniform and smooth) or t.size < 4 else "product"
    spacing = None
    if not uniform:
        # trapezoid rows need a bump to cover a few samples everywhere (the largest spacing);
        # product integration integrates the bump exactly, whatever its width between samples
        unit = float(np.median(h) if quadrature == "product" else np.max(h))
        if quadrature == "product" and local:
            spacing = local_spacing(t)
    return Grid(
        t=t,
        weights=quadrature_weights(t),
        uniform=uniform,
        unit=unit,
        r_fit=float(r_fit),
        tol=tol,
        quadrature=quadrature,
        product=ProductRule.on(t, breaks, kinks) if quadrature == "product" else None,
        breaks=breaks,
        kinks=kinks,
        spacing=spacing,
    )


def local_spacing(t: np.ndarray, half_window: int = _SPACING_WINDOW) -> np.ndarray:
    """The mean spacing of ``t`` over ``half_window`` intervals either side of every point
    (fewer at the ends)."""
    i = np.arange(t.size)
    lo = np.maximum(i - half_window, 0)
    hi = np.minimum(i + half_window, t.size - 1)
    return (t[hi] - t[lo]) / (hi - lo)


def too_few_points(grid: Grid, needed_radius: float, what: str, hint: str = "") -> ValueError:
    """The error for a radius that fits no test function on ``grid``, saying what would."""
    n = grid.t.size
    if grid.uniform:
        need_pts = 2 * math.ceil(needed_radius / grid.unit - SNAP_RTOL) + 1
        need = (
            f"at least {need_pts} points at spacing {grid.unit:.6g} for {what} "
            f"(radius {needed_radius:.6g})"
        )
    else:
        need = f"a radius of at most {grid.r_fit:.6g} to fit, but {what} has {needed_radius:.6g}"
    return ValueError(
        f"too few time points for any admissible test function: t has {n} points on "
        f"[{grid.t[0]:.6g}, {grid.t[-1]:.6g}] (largest radius that fits: {grid.r_fit:.6g}); "
        f"need {need}{hint}"
    )


def check_positive(name: str, value: float) -> float:
    """``value`` as a float; a ValueError naming ``name`` unless it is positive and finite."""
    value = float(value)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value
