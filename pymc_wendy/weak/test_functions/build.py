"""WENDy's test functions: shapes at many centres and radii, reduced by an SVD.

1. Copies ``phi_i(t) = psi((t - c_i) / r)`` of a local family's shape (WENDy's bump by
   default), centred on data points, with the whole support ``[c_i - r, c_i + r]`` inside
   ``[t_0, t_M]``.  Each weighted row ``phi_i(t_m) w_m`` is scaled to unit 2-norm and the
   derivative row ``phi_i'(t_m) w_m`` gets the same factor, so it stays the exact derivative of
   that row.
2. Radii ``{1, 2, 4, 8} x`` the minimum radius (:func:`~.radius.select_min_radius`, those
   below the maximum radius), all admissible centres, stacked into ``Phi_full`` /
   ``dPhi_full``.
3. ``Phi_full = Q diag(s) V^T``; keep ``K = min(K_cond, K_info, Kmax)`` rows: ``Phi = V_K^T``
   (orthonormal rows) and ``dPhi = diag(1/s_K) Q_K^T dPhi_full`` (the exact derivative of the
   kept rows, not a spectral approximation). The automatic ``K`` takes ``s`` and ``V`` from
   the eigendecomposition of ``Phi_full^T Phi_full`` (:func:`_gram_svd`, 4x faster).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import sparse

from pymc_wendy._threads import one_blas_thread
from pymc_wendy._validation import check_data
from pymc_wendy.weak.test_functions.families import LocalFamily, TestFunctionFamily, local_family
from pymc_wendy.weak.test_functions.grid import (
    SNAP_RTOL,
    Grid,
    check_positive,
    make_grid,
    too_few_points,
)
from pymc_wendy.weak.test_functions.radius import max_radius_points, select_min_radius
from pymc_wendy.weak.test_functions.result import RadiusSelection, TestFunctions

__all__ = ["build_test_functions"]

_SELECTION_OPTIONS = frozenset(
    {"radius_range", "n_candidates", "per_candidate", "subsample_rate", "max_multiplier"}
)


def build_test_functions(
    t: np.ndarray,
    U: np.ndarray,
    *,
    min_radius: float | None = None,
    radii: Sequence[float] | np.ndarray | None = None,
    multipliers: Sequence[float] = (1, 2, 4, 8),
    K: int | None = None,
    Kmax: int = 200,
    max_cond: float = 1e4,
    max_info: float = 0.95,
    eta: float | None = None,
    min_points: float = 4,
    family: str | TestFunctionFamily = "bump",
    quadrature: str = "auto",
    breaks: Sequence[float] | np.ndarray = (),
    kinks: Sequence[float] | np.ndarray = (),
    dense_radii: bool | None = None,
    **selection_options: Any,
) -> TestFunctions:
    """Build orthonormal weak-form test functions for data ``U`` on grid ``t``.

    Parameters
    ----------
    t : array_like, shape (M+1,)
        Strictly increasing times (uniform or not).
    U : array_like, shape (M+1, D)
        Data; used only by the minimum-radius search.
    min_radius : float, optional
        Minimum radius in time units; skips the search.  Radii are ``multipliers * min_radius``
        (on a uniform grid and a whole number of points: ``floor(multiplier * points)``), those
        that fit on the grid.  Must fit at least one test function.
    radii : sequence of float, optional
        Radii in time units, used as given (no search, no multipliers); each must fit.
    multipliers : sequence of float, default (1, 2, 4, 8)
        Multiples of the minimum radius.  With the automatic search, multiples at or above the
        maximum radius ``min(radius_range[1], T/2)`` are dropped; if none remain, the maximum
        radius alone is used (WENDy.jl).
    K : int, optional
        Exact number of test functions to keep; must not exceed the numerical rank of
        ``Phi_full``.  Default: ``min(K_cond, K_info, Kmax, M+1)``.
    Kmax : int, default 200
        Cap on the automatic ``K``.
    max_cond : float, default 1e4
        ``K_cond`` = last ``k`` with ``s_1 / s_k <= max_cond``.
    max_info : float, default 0.95
        ``K_info`` = last ``k`` with ``cumsum(s)[k] / sum(s) <= max_info``.
    eta : float, optional
        Shape parameter of the bump (default 9.0); only with ``family="bump"``.
    min_points : float, default 4
        Floor on the automatically selected minimum radius, in grid spacings (largest
        spacing on a non-uniform grid), as long as it fits (multiples that then do not fit
        are left out, rather than every radius shrunk; with a given ``radius_range``, as
        long as the largest multiple fits). On coarse
        grids the corner rule can pick a radius of 2 spacings, whose bumps the trapezoid rule
        integrates badly: on FitzHugh-Nagumo with 129 points and 10 % noise that doubled the
        coefficient error (17 % against 8 % with the floor). Not applied to a given
        ``min_radius`` or ``radii``.
    family : str or LocalFamily, default "bump"
        The shape placed at every centre and radius: a registered name
        (:func:`~.families.families`) or an instance of a local family.
    quadrature : {"auto", "trapezoid", "product"}, default "auto"
        How the rows are weighted: the trapezoid rule (WENDy's; spectrally accurate for the
        bumps on a uniform grid) or product integration (the data's local cubic interpolant
        integrated exactly against the bump, :class:`~.quadrature.ProductRule`; ``O(h^4)`` on
        any grid). ``"auto"``: trapezoid on uniform grids, product on non-uniform ones, where
        radii are then counted in the median spacing instead of the largest
        (``docs/data.md``).
    breaks, kinks : sequence of float, optional
        Times where the data jump (a bolus dose into a measured state), and where only their
        derivative jumps (a dose into an unmeasured state, or into the derivative of a
        higher-order model). The rows are then weighted by product integration with each
        side interpolated separately. The likelihoods pass the dose times of
        :class:`~pymc_wendy.Doses` inputs themselves.
    dense_radii : bool, optional
        On a non-uniform grid with product integration, whether the radius ladder also
        extends downwards, by halvings of the smallest radius, until it is as many of the
        densest stretch's spacings (:func:`~.grid.local_spacing`, averaged over four
        intervals) as the smallest radius has median spacings, or fewer. A geometric design
        (dense early, where a fast rise is sampled) then gets bumps narrow enough to see the
        rise: on one-compartment oral data at 20 points from 0.5 h to 24 h this took the
        standard error of the absorption rate from 11 to 0.20-0.26, against 0.20 for the
        exact likelihood (``docs/data.md``). Only for a stretch at least twice as dense as
        the median: other grids (gaps in a uniform series) are unchanged. Default: yes,
        unless ``radii`` or ``min_radius`` is given.
    **selection_options
        Passed to :func:`select_min_radius` (``radius_range``, ``n_candidates``,
        ``per_candidate``, ``subsample_rate``, ``max_multiplier``; the last defaults to
        ``max(multipliers)``).

    Returns
    -------
    TestFunctions
        ``phi`` (orthonormal rows), ``dphi`` (exact derivatives of the kept rows) and the
        construction details.

    Raises
    ------
    ValueError
        On invalid data or options, radii that do not fit, too few time points, ``K``
        larger than the rank, or a family that is not local.
    """
    t, U = check_data(t, U)
    if dense_radii is None:
        dense_radii = radii is None and min_radius is None
    grid = make_grid(t, quadrature, breaks, kinks, local=bool(dense_radii))
    shape = local_family(family, eta)
    min_points = check_positive("min_points", min_points)
    K = _check_options(selection_options, min_radius, radii, K, Kmax, max_cond, max_info)
    if radii is not None:
        used, selection = _given_radii(grid, radii), None
    else:
        mult = np.asarray(multipliers, dtype=float).ravel()
        if mult.size == 0 or not np.all(np.isfinite(mult)) or np.any(mult <= 0):
            raise ValueError(f"multipliers must be positive and finite, got {multipliers!r}")
        if min_radius is not None:
            used, selection = _multiples_of(grid, min_radius, mult), None
        else:
            used, selection = _searched_radii(grid, U, shape, mult, min_points, selection_options)
    if radii is None:
        used = np.concatenate([_dense_radii(grid, used), used])
    full = _full_matrices(grid, shape, used)
    return _reduce(grid, full, used, selection, shape, K, (int(Kmax), max_cond, max_info))


def _check_options(
    selection_options: Mapping[str, Any],
    min_radius: float | None,
    radii: Sequence[float] | np.ndarray | None,
    K: int | None,
    Kmax: int,
    max_cond: float,
    max_info: float,
) -> int | None:
    """Validate the options that do not depend on the grid; ``K`` as an int (or None)."""
    unknown = set(selection_options) - _SELECTION_OPTIONS
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")
    if min_radius is not None and radii is not None:
        raise ValueError("give either min_radius or radii, not both")
    if K is not None:
        if int(K) != K or K < 1:
            raise ValueError(f"K must be a positive integer, got {K!r}")
        K = int(K)
    if isinstance(Kmax, bool) or not isinstance(Kmax, numbers.Integral | float) or Kmax < 1:
        raise ValueError(f"Kmax must be an integer >= 1 (default 200), got {Kmax!r}")
    check_positive("max_cond", max_cond)
    if not 0.0 < float(max_info) <= 1.0:
        raise ValueError(f"max_info must lie in (0, 1], got {max_info!r}")
    return K


# --- the radii -------------------------------------------------------------------------------


def _unique(radii: np.ndarray) -> np.ndarray:
    return np.array(list(dict.fromkeys(radii.tolist())), dtype=float)


def _given_radii(grid: Grid, radii: Sequence[float] | np.ndarray) -> np.ndarray:
    """``radii=...``: used as given, each checked to fit."""
    radii_arr = np.atleast_1d(np.asarray(radii, dtype=float))
    if radii_arr.ndim != 1 or radii_arr.size == 0:
        raise ValueError(f"radii must be a non-empty 1-D sequence, got shape {radii_arr.shape}")
    if not np.all(np.isfinite(radii_arr)) or np.any(radii_arr <= 0):
        raise ValueError(f"radii must be positive and finite, got {radii_arr.tolist()}")
    too_big = radii_arr[radii_arr > grid.r_fit + grid.tol]
    if too_big.size:
        raise too_few_points(grid, float(too_big[0]), "the given radius")
    return _unique(radii_arr)


def _multiples_of(grid: Grid, min_radius: float, mult: np.ndarray) -> np.ndarray:
    """``min_radius=...``: its multiples that fit (at least one must)."""
    min_radius = check_positive("min_radius", min_radius)
    if min_radius > grid.r_fit + grid.tol:
        raise too_few_points(grid, min_radius, "min_radius")
    used = _radii_from_min(grid, min_radius, mult, grid.r_fit, strict=False)
    if used.size == 0:
        raise too_few_points(grid, float(np.min(mult) * min_radius), "every multiple")
    return used


def _searched_radii(
    grid: Grid,
    U: np.ndarray,
    family: LocalFamily,
    mult: np.ndarray,
    min_points: float,
    selection_options: Mapping[str, Any],
) -> tuple[np.ndarray, RadiusSelection]:
    """The automatic choice: the corner radius (floored at ``min_points`` spacings) and its
    multiples below the maximum radius, or the maximum radius alone."""
    options = dict(selection_options)
    options.setdefault("max_multiplier", float(np.max(mult)))
    selection = select_min_radius(grid.t, U, family=family, **options)
    radius_range = options.get("radius_range")
    r_max = max_radius_points(grid, radius_range) * grid.unit
    # By default the floor holds even where the largest multiples then do not fit (they are
    # dropped): on short series, shrinking every radius to fit them costs more in quadrature
    # error than the extra radii give (docs/data.md, "Short series"). A given radius_range
    # (WENDy.jl's, say) keeps the earlier rule, capped so the largest multiple fits.
    cap = r_max if radius_range is None else r_max / np.max(mult)
    r_min = max(selection.radius, min(min_points * grid.unit, cap))
    used = _radii_from_min(grid, r_min, mult, r_max, strict=True)
    if used.size == 0:
        used = np.array([r_max])
    return used, selection


def _radii_from_min(
    grid: Grid, min_radius: float, multipliers: np.ndarray, r_max: float, strict: bool
) -> np.ndarray:
    """Multiples of the minimum radius that are kept (time units, unique, in order)."""
    n = grid.to_points(min_radius)
    if grid.uniform and abs(n - round(float(n))) <= SNAP_RTOL * max(1.0, float(n)):
        # WENDy.jl: floor(multiplier * radius_points), so radii stay whole numbers of points.
        radii = np.floor(multipliers * round(float(n)) + SNAP_RTOL) * grid.unit
    else:
        radii = multipliers * min_radius
    keep = radii < r_max - grid.tol if strict else radii <= r_max + grid.tol
    radii = radii[keep & (radii > 0)]
    return _unique(radii)


def _dense_radii(grid: Grid, radii: np.ndarray) -> np.ndarray:
    """Halvings of the smallest radius for the grid's dense stretches (``dense_radii``),
    placed at every centre where they fit (keeping them to the dense stretch, tried with the
    earlier quadrature on the pieces' own nodes, gave up to 3x larger standard errors of the
    absorption rate on 20 geometric points; not retried since)."""
    # only for a stretch at least twice as dense as the median: a rounding-level variation
    # of the spacing (8 of 257 uniform points) must not add a radius
    if radii.size == 0 or grid.dense > 0.5:
        return np.zeros(0)
    # until at or below grid.dense * smallest: on 20 geometric points, stopping just above it
    # cost 25 % of the absorption rate's standard error
    halvings = math.ceil(-math.log2(grid.dense) - 1e-9)
    lower = float(np.min(radii)) * 0.5 ** np.arange(halvings, 0, -1)
    # one within a third of the smallest would add near-copies of its rows
    return lower[lower < np.min(radii) / 1.5]


# --- the full matrices and their SVD reduction -----------------------------------------------


class _Full(NamedTuple):
    """``Phi_full``, ``dPhi_full`` and the centre, width and scale of every row."""

    phi: np.ndarray
    dphi: np.ndarray
    centres: np.ndarray
    widths: np.ndarray
    scales: np.ndarray


def _full_matrices(grid: Grid, family: LocalFamily, radii: np.ndarray) -> _Full:
    rows, drows, centres, widths, scales = [], [], [], [], []
    for r in radii:
        idx = grid.centres(r)
        v, dv, sc = grid.rows(family, r, idx, derivative=True)
        rows.append(v)
        drows.append(dv)
        centres.append(grid.t[idx])
        widths.append(np.full(idx.size, r))
        scales.append(sc)
    return _Full(*(np.concatenate(a) for a in (rows, drows, centres, widths, scales)))


def _select_K(
    s: np.ndarray, K: int | None, Kmax: int, max_cond: float, max_info: float, n_points: int
) -> int:
    rank = int(np.sum(s > s[0] * max(s.size, n_points) * np.finfo(float).eps))
    if K is not None:
        if K > rank:
            raise ValueError(
                f"K = {K} exceeds the numerical rank {rank} of the full test-function matrix "
                f"({s.size} singular values); choose K <= {rank}"
            )
        return K
    with np.errstate(divide="ignore"):
        k_cond = int(np.sum(s[0] / s <= max_cond))
    k_info = int(np.sum(np.cumsum(s) / np.sum(s) <= max_info))
    # WENDy.jl ignores a criterion that no k satisfies.
    limits = [k_cond, min(Kmax, s.size, n_points)]
    if k_info > 0:
        limits.append(k_info)
    return max(1, min(min(limits), rank))


#: The largest ``max_cond`` served by the Gram route of :func:`_gram_svd`: a kept singular
#: value is then accurate to about ``n eps max_cond^2`` (2e-5 relative at 1e5, n = 1000).
_GRAM_MAX_COND = 1e5


def _gram_svd(a: sparse.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """Singular values (descending) and right singular vectors of a tall ``a``, from the
    eigendecomposition of ``a^T a``: 4x faster than LAPACK's SVD on a 3980 x 1023
    ``Phi_full`` (0.23 s against 1.0 s, one thread), which was 75 % of a default fit at
    1025 points. Values below ``sqrt(eps) s_1`` are rounding noise. ``a`` is sparse (each
    row is one compactly supported function: 3 % of the entries at 1025 points), which
    halves the cost of the product."""
    w, v = np.linalg.eigh((a.T @ a).toarray())
    return np.sqrt(np.clip(w[::-1], 0.0, None)), v[:, ::-1]


def _reduce(
    grid: Grid,
    full: _Full,
    radii: np.ndarray,
    selection: RadiusSelection | None,
    family: LocalFamily,
    K: int | None,
    limits: tuple[int, float, float],
) -> TestFunctions:
    """The SVD reduction to ``K`` orthonormal rows; ``limits`` = ``(Kmax, max_cond,
    max_info)`` of the automatic ``K``."""
    t = grid.t
    # Columns outside every support (at least t_0 and t_M) are exactly zero; leaving them out of
    # the SVD keeps them exactly zero in phi instead of rounding-level noise.
    active = np.flatnonzero(np.any(full.phi != 0.0, axis=0))
    a = full.phi[:, active]
    Kmax, max_cond, max_info = limits
    # The Gram route's singular values lose relative accuracy like eps (s_1 / s_k)^2, so it
    # serves only the automatic K, whose condition limit keeps every kept s_k accurate; a
    # requested K is checked against the numerical rank, which needs the SVD's tail.
    gram = K is None and float(max_cond) <= _GRAM_MAX_COND and a.shape[0] >= a.shape[1]
    with one_blas_thread():  # why: pymc_wendy._threads
        if gram:
            a_rows = sparse.csr_array(a)
            s, v = _gram_svd(a_rows)
        else:
            q, s, vt = np.linalg.svd(a, full_matrices=False)
        s = np.concatenate([s, np.zeros(min(full.phi.shape) - s.size)])
        K = _select_K(s, K, Kmax, float(max_cond), float(max_info), t.size)
        phi = np.zeros((K, t.size))
        if gram:
            phi[:, active] = v[:, :K].T
            coefficients = (a_rows @ v[:, :K]).T / s[:K, None] ** 2  # = Q_K^T / s_K
        else:
            phi[:, active] = vt[:K]
            coefficients = q[:, :K].T / s[:K, None]
        dphi = (sparse.csr_array(full.dphi).T @ coefficients.T).T
    return TestFunctions(
        phi=phi,
        dphi=dphi,
        t=t,
        radii=radii,
        min_radius=float(np.min(radii)),
        singular_values=s,
        selection=selection,
        coefficients=coefficients,
        centres=full.centres,
        widths=full.widths,
        scales=full.scales,
        eta=getattr(family, "eta", float("nan")),
        family=family,
        quadrature=grid.quadrature,
        breaks=grid.breaks,
        kinks=grid.kinks,
    )
