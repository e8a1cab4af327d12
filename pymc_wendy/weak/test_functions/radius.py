"""The minimum test-function radius: the corner of the integration-error curve.

For each candidate radius one Fourier mode of ``phi_i * U`` at about ``M / s`` (``s`` =
sub-sampling rate) estimates the quadrature error; the corner of ``log(error)`` versus radius
separates the integration-error regime (small radii) from the noise floor (large radii)
(WENDy 2023 sec. 2.3.1, WENDy.jl's ``_minRadius``).
"""

from __future__ import annotations

import math

import numpy as np

from pymc_wendy._validation import check_data
from pymc_wendy.weak.test_functions.families import LocalFamily, local_family
from pymc_wendy.weak.test_functions.grid import (
    SNAP_RTOL,
    Grid,
    check_positive,
    make_grid,
    too_few_points,
)
from pymc_wendy.weak.test_functions.result import RadiusSelection

__all__ = ["max_radius_points", "select_min_radius"]

# The smallest radius WENDy.jl allows, in grid spacings: a bump of radius 1 has a single
# non-zero sample and no usable derivative.
_MIN_RADIUS_POINTS = 2

#: Above this many time points the error surrogate evaluates each test function on its
#: support only (:meth:`~.grid.Grid.window_rows`); at or below it, on the whole grid as
#: before, so that the choices on the series the validation measured do not move by rounding.
LONG_SERIES = 4097

#: Above :data:`LONG_SERIES` points (and without a ``radius_range``) the corner rule runs on
#: this many windows of :data:`LONG_SERIES` points spread over the series, and the median of
#: their radii is the choice (:func:`_windowed_selection`).
N_WINDOWS = 5


def _corner(y: np.ndarray, x: np.ndarray) -> int:
    """WENDy.jl's ``_getcorner``: the point where two secant lines fit ``y`` best (relative L1).

    For each ``k`` the secants from point 0 to ``k`` and from ``k`` to the last point are
    compared with ``y`` (scaled by ``N / max|y|``); endpoints give 0/0 and are never chosen
    unless every candidate is undefined.
    """
    y = np.asarray(y, dtype=float)
    x = np.asarray(x, dtype=float)
    n = y.size
    if n < 3:
        return 0
    with np.errstate(divide="ignore", invalid="ignore"):
        y = y / np.max(np.abs(y)) * n
        k = np.arange(n)[:, None]
        j = np.arange(n)[None, :]
        yk = y[:, None]
        xk = x[:, None]
        slope1 = (yk - y[0]) / (xk - x[0])
        slope2 = (y[-1] - yk) / (x[-1] - xk)
        line1 = slope1 * (x[None, :] - xk) + yk
        line2 = slope2 * (x[None, :] - xk) + yk
        dev1 = np.where(j <= k, np.abs((line1 - y) / y), 0.0)
        dev2 = np.where(j >= k, np.abs((line2 - y) / y), 0.0)
        errs = dev1.sum(axis=1) + dev2.sum(axis=1)
    errs[np.isnan(errs)] = np.inf
    return int(np.argmin(errs))


def max_radius_points(grid: Grid, radius_range: tuple[float, float] | None) -> float:
    """WENDy.jl's ``radiusMax``: ``min(floor(radius_range[1]/dt), floor(M/2))`` in points;
    ``floor(M/2)`` (half the span) when ``radius_range`` is None."""
    hi = grid.r_fit if radius_range is None else min(radius_range[1], grid.r_fit)
    points = float(grid.floor(grid.to_points(hi)))
    if radius_range is not None and points < _MIN_RADIUS_POINTS:
        # below that, a test function spans too few samples to be integrated (the SVD of
        # such rows did not converge)
        raise ValueError(
            f"radius_range {tuple(radius_range)}: its largest radius is {points:g} time steps; "
            f"test functions need at least {_MIN_RADIUS_POINTS} (radius >= "
            f"{_MIN_RADIUS_POINTS * grid.unit:g} in the data's time unit)"
        )
    return points


def _candidate_points(
    grid: Grid,
    radius_range: tuple[float, float] | None,
    n_candidates: int,
    max_multiplier: float,
) -> np.ndarray:
    """Candidate minimum radii in points (whole numbers on a uniform grid)."""
    lo = float(_MIN_RADIUS_POINTS)
    if radius_range is not None:
        lo = max(float(grid.ceil(grid.to_points(radius_range[0]))), lo)
    hi = float(grid.floor(max_radius_points(grid, radius_range) / max_multiplier))
    if hi < lo:
        # WENDy.jl: the range is too short for the multipliers; search up to ten times the start.
        hi = 10.0 * lo
    if hi <= lo:
        return np.array([lo])
    if grid.uniform:
        step = math.ceil((hi - lo) / n_candidates - SNAP_RTOL)
        return np.arange(lo, hi + 0.5, step)
    return np.linspace(lo, hi, n_candidates)


def _spread(idx: np.ndarray, n: int) -> np.ndarray:
    if idx.size <= n:
        return idx
    return idx[np.unique(np.round(np.linspace(0, idx.size - 1, n)).astype(int))]


def select_min_radius(
    t: np.ndarray,
    U: np.ndarray,
    *,
    radius_range: tuple[float, float] | None = None,
    n_candidates: int = 100,
    per_candidate: int = 100,
    subsample_rate: float = 2.0,
    eta: float | None = None,
    max_multiplier: float = 8,
    family: str | LocalFamily = "bump",
) -> RadiusSelection:
    """Choose the minimum test-function radius from the data (WENDy 2023 sec. 2.3.1).

    Candidate radii run from ``max(radius_range[0], 2 grid spacings)`` to
    ``radius_max / max_multiplier`` (``radius_max = min(radius_range[1], T/2)``; if that is below
    the start, to ten times the start), about ``n_candidates`` of them. By default
    (``radius_range=None``) they run from 2 grid spacings to ``T / (2 max_multiplier)``: the
    choice depends on the grid and the data only through ratios, so rescaling time rescales
    the radii and nothing else.  For each candidate at
    most ``per_candidate`` unit-norm test functions are spread evenly over the admissible
    centres and the error surrogate is::

        err = || Im sum_m Phi_r[k, m] U[m, d] exp(-2 pi i nu (t_m - t_0)) ||_2   over (k, d)

    with ``nu = IX / (T (M+1)/M)``, ``IX = floor(M / subsample_rate)``.  On a uniform grid
    ``nu (t_m - t_0) = IX m / (M+1)``, i.e. the ``IX``-th DFT coefficient of each row as in
    WENDy.jl, computed directly because only one mode is needed.  On a non-uniform grid the
    same frequency is used and, because ``Phi_r`` carries the trapezoid weights, the sum is the
    trapezoid rule for the corresponding Fourier integral.  The minimum radius is the corner of
    ``log(err)`` versus radius found by WENDy.jl's two-secant rule.

    On a non-uniform grid "grid spacing" means the largest spacing, so that every bump covers a
    few samples; candidates are then equally spaced reals rather than whole points.

    Above :data:`LONG_SERIES` points (4097) without a ``radius_range``, the rule runs on
    :data:`N_WINDOWS` windows of 4097 points spread over the series and returns the selection
    of the window with the median radius: the radius then follows the dynamics and the time
    step, not the span (:func:`_windowed_selection` says why).

    Parameters
    ----------
    t : array_like, shape (M+1,)
        Strictly increasing times.
    U : array_like, shape (M+1, D)
        Data, one row per time point.
    radius_range : (float, float), optional
        Smallest candidate and largest overall radius, in time units. Default None: 2 grid
        spacings and half the time span. WENDy.jl's default is ``(0.01, 5)`` in the units of
        its examples; pass it to reproduce WENDy.jl (``docs/test_functions.md``).
    n_candidates : int, default 100
        Approximate number of candidate radii.
    per_candidate : int, default 100
        Maximum number of test functions per candidate.
    subsample_rate : float, default 2.0
        Coarsening factor ``s`` of the error estimate, ``2 <= s < 4``.
    eta : float, optional
        Shape parameter of the bump family (default 9.0); only with ``family="bump"``.
    max_multiplier : float, default 8
        Largest radius multiplier used afterwards; caps the candidates at ``radius_max /
        max_multiplier`` so the largest multiple still fits.
    family : str or LocalFamily, default "bump"
        The test-function family (a registered name or an instance).

    Returns
    -------
    RadiusSelection
        Candidates (time units), error surrogate per candidate and the chosen index.

    Raises
    ------
    ValueError
        On invalid data or options, or when no candidate radius fits on the grid.

    Notes
    -----
    The corner rule divides by ``log(err)`` (relative L1 deviations), so it is not invariant
    to rescaling ``err``. WENDy.jl applies it to the raw data; here each state is divided by
    its root mean square first, so that rescaling a state (changing its units) does not move
    the choice, and states of very different size weigh alike.  When the noise floor is
    reached within a couple of candidates (typical above about 10 % noise) the choice sits at
    the first flat point.
    """
    t, U = check_data(t, U)
    grid = make_grid(t)
    _validate_selection_options(radius_range, n_candidates, per_candidate, subsample_rate)
    shape = local_family(family, eta)
    max_multiplier = check_positive("max_multiplier", max_multiplier)
    options = (int(n_candidates), int(per_candidate), subsample_rate, max_multiplier, shape)
    if radius_range is None and t.size > LONG_SERIES:
        return _windowed_selection(t, U, options)
    # long series (a radius_range given): each row on its support only, O(r) instead of O(M)
    # per row (100 000 points: 34 s -> well under a second), the same sums up to rounding; at
    # or below LONG_SERIES points on the whole grid as before, so that the choices on the
    # series the validation measured do not move by rounding
    return _selection(grid, U, radius_range, options, on_support=t.size > LONG_SERIES)


def _selection(
    grid: Grid, U: np.ndarray, radius_range, options: tuple, on_support: bool
) -> RadiusSelection:
    """The corner rule on one grid; ``options`` as :func:`_windowed_selection` takes them."""
    n_candidates, per_candidate, subsample_rate, max_multiplier, shape = options
    points = _candidate_points(grid, radius_range, n_candidates, max_multiplier)
    radii = points * grid.unit
    # Candidates without a single admissible centre (possible after the 10x fallback) are dropped.
    radii = radii[radii <= grid.r_fit + grid.tol]
    if radii.size == 0:
        raise too_few_points(
            grid,
            float(points[0] * grid.unit),
            "the smallest candidate",
            hint=" (radius_range is in time units; lower radius_range[0] for a short domain)",
        )
    errors = _error_surrogate(
        grid, _unit_rms(U), radii, shape, per_candidate, subsample_rate, on_support
    )
    with np.errstate(divide="ignore"):
        index = _corner(np.log(errors), radii)
    return RadiusSelection(candidates=radii, errors=errors, index=index)


def _windowed_selection(t: np.ndarray, U: np.ndarray, options: tuple) -> RadiusSelection:
    """The corner rule on :data:`N_WINDOWS` windows of :data:`LONG_SERIES` points, evenly
    spread (overlapping on series shorter than that many windows); the selection of the
    window whose radius is the median. ``options``: ``(n_candidates, per_candidate,
    subsample_rate, max_multiplier, family)``.

    Why: the candidates run up to a sixteenth of the span in about 100 steps, so on a long
    series their spacing grows with the span, not with the dynamics. On Lotka-Volterra at a
    time step of 5/256 the rule chose 0.19 at 4097 points, 2.5 at 10^5 and 24.5 at 10^6:
    test functions over 16 periods, under which the weak residual sees only the data's mean
    and ``p = 0`` fitted with ``success=True`` (issue 58). A window of 4097 points gives the
    radius the rule gives a series of that length at the same time step, whatever the span,
    and the information then grows with the number of points."""
    starts = np.unique(np.round(np.linspace(0, t.size - LONG_SERIES, N_WINDOWS)).astype(int))
    picks = []
    for i in starts:
        window = slice(i, i + LONG_SERIES)
        picks.append(_selection(make_grid(t[window]), U[window], None, options, True))
    radii = np.array([sel.radius for sel in picks])
    return picks[int(np.argsort(radii, kind="stable")[(radii.size - 1) // 2])]


def _unit_rms(U: np.ndarray) -> np.ndarray:
    """Each column divided by its root mean square (columns of zeros stay zero)."""
    rms = np.sqrt(np.mean(U**2, axis=0))
    return U / np.where(rms > 0, rms, 1.0)


def _error_surrogate(
    grid: Grid,
    U: np.ndarray,
    radii: np.ndarray,
    family: LocalFamily,
    per_candidate: int,
    subsample_rate: float,
    on_support: bool,
) -> np.ndarray:
    """The integration-error surrogate of every candidate radius (one Fourier mode);
    ``on_support``: each row summed over its support only (trapezoid rule)."""
    t, M = grid.t, grid.M
    ix = math.floor(M / subsample_rate)
    nu = ix / (grid.span * (M + 1) / M)
    # Im(sum g e^{-i theta}) = -sum g sin(theta); the sign does not affect the norm.
    weighted = U * np.sin(2.0 * np.pi * nu * (t - t[0]))[:, None]
    windowed = grid.product is None and on_support
    errors = np.empty(radii.size)
    for i, r in enumerate(radii):
        idx = _spread(grid.centres(r), per_candidate)
        if windowed and grid.uniform:
            # on a uniform grid every row is the same window shifted: one row, and the data
            # on each window as a strided view
            start, rows, _, _ = grid.window_rows(family, r, idx[:1])
            at = idx - idx[0] + start[0]
            view = np.lib.stride_tricks.sliding_window_view(weighted, rows.shape[1], axis=0)
            errors[i] = np.linalg.norm(view[at] @ rows[0])
            continue
        if windowed:
            start, rows, _, _ = grid.window_rows(family, r, idx)
            at = start[:, None] + np.arange(rows.shape[1])[None, :]
            errors[i] = np.linalg.norm(np.einsum("kj,kjd->kd", rows, weighted[at]))
            continue
        rows, _, _ = grid.rows(family, r, idx, derivative=False)
        errors[i] = np.linalg.norm(rows @ weighted)
    return errors


def _validate_selection_options(
    radius_range: tuple[float, float] | None,
    n_candidates: int,
    per_candidate: int,
    subsample_rate: float,
) -> None:
    if radius_range is not None:
        if len(radius_range) != 2:
            raise ValueError(f"radius_range must be (min, max), got {radius_range!r}")
        lo = check_positive("radius_range[0]", radius_range[0])
        hi = check_positive("radius_range[1]", radius_range[1])
        if hi < lo:
            raise ValueError(f"radius_range must be increasing, got {radius_range!r}")
    if int(n_candidates) < 1 or int(per_candidate) < 1:
        raise ValueError(
            f"n_candidates and per_candidate must be >= 1, got {n_candidates}, {per_candidate}"
        )
    if not 2.0 <= float(subsample_rate) < 4.0:
        raise ValueError(f"subsample_rate must satisfy 2 <= s < 4, got {subsample_rate!r}")
