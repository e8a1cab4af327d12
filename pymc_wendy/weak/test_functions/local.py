"""Local test functions: un-reduced bumps of one radius at strided centres, stored as windows.

WENDy's default construction (:mod:`.build`) stacks bumps of four radii at every centre and
keeps the leading right singular vectors: orthonormal rows that each span the whole grid,
so the weak-residual covariance ``S`` is dense (``O(K^3)`` per evaluation) and the SVD of
the ``~4M x (M+1)`` stack costs about ``M^3`` (152 s and 4.2 GB at 4097 points).

:func:`build_local_test_functions` (``test_functions="local"`` of
:class:`~pymc_wendy.WeakLikelihood`, :func:`~pymc_wendy.fit` and the PyMC distribution)
skips the reduction: copies of the bump at one radius, centred every ``stride`` points,
each scaled to unit norm. A row is non-zero on ``2 r + 1`` points only, ``S`` is a band
matrix (:mod:`pymc_wendy.weak.banded`) and the likelihood costs ``O(M)`` at a fixed radius
in points. The rows are kept as windows (:class:`~pymc_wendy.weak.banded.LocalRows`): the
``K x (M+1)`` matrices ``phi`` / ``dphi`` are built only when something asks for them
(:class:`LocalTestFunctions`), and refused when they would pass
:data:`DENSE_LIMIT_BYTES`.

Radius
    The corner rule's minimum radius (:func:`~.radius.select_min_radius`, floored at
    ``min_points`` grid spacings as in :func:`~.build.build_test_functions`) times
    ``multiplier`` (default 2, the second radius of WENDy's ladder: the narrowest bumps of
    the ladder have a 4-5 point radius at 1025-4097 points, where the trapezoid rule and the
    noise's second-order terms both hurt; ``docs/performance.md`` has the comparison), or
    ``radius`` in time units as given.
Stride
    Default ``max(1, round(r / 2))`` grid points for a radius of ``r`` points: every point
    lies under about four bumps and neighbouring rows overlap by three quarters, so the
    rows still resolve what a bump of that radius can see (a shift of half a radius is
    about the bump's correlation length) while the half-bandwidth of ``S`` in test
    functions stays at ``w = 3`` whatever the radius. Halving the stride doubles ``K`` and
    the band (8x the banded work) for nearly collinear rows; the measurements are in
    ``docs/performance.md``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from pymc_wendy._validation import check_data
from pymc_wendy.weak.banded import LocalRows
from pymc_wendy.weak.test_functions.families import TestFunctionFamily, local_family
from pymc_wendy.weak.test_functions.grid import (
    SNAP_RTOL,
    check_positive,
    make_grid,
    too_few_points,
)
from pymc_wendy.weak.test_functions.radius import select_min_radius
from pymc_wendy.weak.test_functions.result import TestFunctions

__all__ = ["DENSE_LIMIT_BYTES", "LocalTestFunctions", "build_local_test_functions"]

#: The most memory ``phi`` and ``dphi`` of :class:`LocalTestFunctions` may take when densified
#: (what the dense kernels, the compiled Op and the dense covariance need).
DENSE_LIMIT_BYTES = 512 * 2**20

_OPTIONS = frozenset({"radius_range", "n_candidates", "per_candidate", "subsample_rate"})


def _frozen(a: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None
    a = np.array(a, dtype=float)
    a.flags.writeable = False
    return a


def _no_assignment(self, value) -> None:
    # the dataclass __init__ assigns the inherited fields; phi and dphi come from the windows
    if value is not None:
        raise AttributeError("LocalTestFunctions keep phi and dphi as windows")


@dataclass(frozen=True, eq=False, repr=False)
class LocalTestFunctions(TestFunctions):
    """:class:`~.result.TestFunctions` stored as windows (:func:`build_local_test_functions`).

    Attributes
    ----------
    windows : LocalRows
        Start index and values of every row on its support, ordered by centre.
    stride : int
        Grid points between neighbouring centres.
    phi, dphi : numpy.ndarray, shape (K, M+1)
        Built from :attr:`windows` on first use (and cached); a ValueError when the pair
        would take more than :data:`DENSE_LIMIT_BYTES`. The banded likelihood never asks.
    """

    __test__ = False

    windows: Any = None
    stride: int = 1

    def __post_init__(self) -> None:
        for name in ("t", "radii", "centres", "widths", "scales", "breaks", "kinks"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        if not isinstance(self.windows, LocalRows):
            raise TypeError("LocalTestFunctions need their windows (a LocalRows)")

    @functools.cached_property
    def _dense(self) -> tuple[np.ndarray, np.ndarray]:
        need = 2 * 8 * self.K * self.n_points
        if need > DENSE_LIMIT_BYTES:
            raise ValueError(
                f"these {self.K} local test functions on {self.n_points} points are stored as "
                f"windows; the dense matrices phi and dphi would take {need / 2**30:.2g} GiB "
                f"(limit {DENSE_LIMIT_BYTES / 2**30:.2g} GiB). The banded likelihood (value, "
                "gradient, Newton model, finite-difference Hessian, covariances) does not need "
                "them; what asked for them (the compiled Op, the exact dense covariance or "
                "factor, the bias correction's score mean) does: use a shorter series, a "
                "larger stride, or the default test functions"
            )
        phi, dphi = self.windows.to_dense()
        return _frozen(phi), _frozen(dphi)

    phi = property(lambda self: self._dense[0], _no_assignment)
    dphi = property(lambda self: self._dense[1], _no_assignment)

    @property
    def K(self) -> int:
        return self.windows.K

    @property
    def n_points(self) -> int:
        return self.windows.n_points

    def evaluate(self, times: np.ndarray, derivative: bool | int = False) -> np.ndarray:
        """Unweighted values (or derivatives) of the rows at ``times``, shape (K, n)."""
        order = int(derivative)
        if order < 0:
            raise ValueError(f"derivative must be an order >= 0; got {derivative!r}")
        times = np.atleast_1d(np.asarray(times, dtype=float))
        s = (times[None, :] - self.centres[:, None]) / self.widths[:, None]
        scale = self.scales / self.widths**order
        return self.family.shape(s, order) * scale[:, None]

    def __repr__(self) -> str:
        return (
            f"LocalTestFunctions(K={self.K}, n_points={self.n_points}, "
            f"radius={float(self.radii[0]):.6g}, stride={self.stride}, w={self.windows.w})"
        )


def build_local_test_functions(
    t: np.ndarray,
    U: np.ndarray,
    *,
    radius: float | None = None,
    multiplier: float = 2.0,
    stride: int | None = None,
    family: str | TestFunctionFamily = "bump",
    eta: float | None = None,
    min_points: float = 4,
    quadrature: str = "auto",
    **selection_options: Any,
) -> LocalTestFunctions:
    """Bumps of one radius at every ``stride``-th admissible centre, as windows.

    Parameters
    ----------
    t : array_like, shape (M+1,)
        Strictly increasing times; uniform, or any grid with ``quadrature="trapezoid"``.
    U : array_like, shape (M+1, D)
        Data; used only by the radius search.
    radius : float, optional
        Radius in time units (no search). Default: ``multiplier`` times the corner rule's
        minimum radius (floored at ``min_points`` spacings), capped at the largest that fits.
    multiplier : float, default 2
        Multiple of the searched minimum radius (module docstring).
    stride : int, optional
        Grid points between centres; default ``max(1, round(r / 2))`` for a radius of ``r``
        points.
    family, eta, min_points, quadrature
        As for :func:`~.build.build_test_functions`; the family must be local and the rule
        the trapezoid rule.
    **selection_options
        ``radius_range``, ``n_candidates``, ``per_candidate``, ``subsample_rate`` of
        :func:`~.radius.select_min_radius`.

    Returns
    -------
    LocalTestFunctions

    Raises
    ------
    ValueError
        A radius that does not fit on the grid, too few points for any test function, a
        stride below 1, unknown options, or a grid that needs product integration.
    """
    t, U = check_data(t, U)
    unknown = set(selection_options) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown options for local test functions: {sorted(unknown)}")
    grid = make_grid(t, quadrature, local=False)
    if grid.product is not None:
        raise ValueError(
            "local test functions use the trapezoid rule: this grid is not uniform, so pass "
            "quadrature='trapezoid' (or use the default test functions, whose product rule "
            "handles non-uniform grids)"
        )
    shape = local_family(family, eta)
    selection = None
    if radius is None:
        multiplier = check_positive("multiplier", multiplier)
        # the default construction's search (candidates up to T / 16), so that the radius is
        # a multiple of the default's smallest one
        selection = select_min_radius(t, U, family=shape, **selection_options)
        floor = check_positive("min_points", min_points) * grid.unit
        r_min = max(selection.radius, min(floor, grid.r_fit))
        r = float(grid.floor(grid.to_points(min(r_min * multiplier, grid.r_fit)))) * grid.unit
        if r <= 0:
            raise too_few_points(grid, r_min, "the smallest radius")
    else:
        r = check_positive("radius", radius)
    if r > grid.r_fit + grid.tol or grid.centres(r).size == 0:
        raise too_few_points(grid, r, "the radius of the local test functions")
    points = r / grid.unit
    if points < 2 - SNAP_RTOL:
        raise ValueError(
            f"the radius {r:.6g} is {points:.3g} grid spacings: a bump needs a radius of at "
            "least 2 spacings to have a usable derivative"
        )
    if stride is None:
        stride = max(1, int(round(points / 2)))
    elif int(stride) != stride or stride < 1:
        raise ValueError(f"stride must be a positive integer number of points; got {stride!r}")
    stride = int(stride)
    admissible = grid.centres(r)
    # the strided centres placed symmetrically within the admissible ones
    offset = ((admissible.size - 1) % stride) // 2
    idx = admissible[offset::stride]
    start, rows, drows, scales = grid.window_rows(shape, r, idx)
    windows = LocalRows.from_windows(start, rows, drows, t.size)
    return LocalTestFunctions(
        phi=None,
        dphi=None,
        t=t,
        radii=np.array([r]),
        min_radius=r,
        selection=selection,
        centres=t[idx],
        widths=np.full(idx.size, r),
        scales=scales,
        eta=getattr(shape, "eta", float("nan")),
        family=shape,
        quadrature="trapezoid",
        windows=windows,
        stride=stride,
    )
