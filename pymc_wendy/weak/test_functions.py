"""Test functions for the weak form: C-infinity bumps, minimum-radius search, SVD reduction.

WENDy multiplies the ODE by smooth, compactly supported test functions and integrates by parts,
so the likelihood needs two matrices on the data grid ``t_0 < ... < t_M``::

    Phi[k, m]  = phi_k(t_m)  w_m        (K, M+1)
    dPhi[k, m] = phi_k'(t_m) w_m        (K, M+1)

with trapezoid weights ``w_m``.  The construction follows WENDy 2023 (sec. 2.3), WENDy-MLE
(Appendix A) and WENDy.jl (``src/wendyTestFunctions.jl``):

1. Bumps ``psi(s) = exp(-eta / (1 - s^2))`` on ``|s| < 1`` (``eta = 9``), centred on data points,
   ``phi_i(t) = psi((t - c_i) / r)`` with the whole support ``[c_i - r, c_i + r]`` inside
   ``[t_0, t_M]``.  Each weighted row ``phi_i(t_m) w_m`` is scaled to unit 2-norm and the derivative
   row ``phi_i'(t_m) w_m`` gets the same factor, so it stays the exact derivative of that row.
2. A minimum radius is chosen from the data (:func:`select_min_radius`): for each candidate
   radius one Fourier mode of ``phi_i * u`` at about ``M / s`` (``s`` = sub-sampling rate)
   estimates the quadrature error; the corner of ``log(error)`` versus radius separates the
   integration-error regime (small radii) from the noise floor (large radii).
3. Radii ``{1, 2, 4, 8} x`` the minimum radius (those below the maximum radius), all admissible
   centres, stacked into ``Phi_full`` / ``dPhi_full``.
4. ``Phi_full = Q diag(s) V^T``; keep ``K = min(K_cond, K_info, Kmax)`` rows: ``Phi = V_K^T``
   (orthonormal rows) and ``dPhi = diag(1/s_K) Q_K^T dPhi_full`` (the exact derivative of the kept
   rows, not a spectral approximation).

On a uniform grid radii are whole numbers of grid spacings and everything reduces to the
WENDy.jl construction (the row normalisation cancels the constant weight ``dt``).  Non-uniform
(strictly increasing) grids are supported: bumps are evaluated at the actual times, the weights
enter before normalisation, and the Fourier mode of the radius search is evaluated as a
trapezoid-rule integral (see :func:`select_min_radius`).

Deliberate differences from WENDy.jl, all at the level of a few test functions or one index:

- Supports may end exactly at ``t_0`` / ``t_M`` (the bump is zero there).  WENDy.jl keeps one
  extra grid point of margin on each side (two fewer shifts per radius); without it, its
  ``radiusMax = floor(M/2)`` is exactly the largest radius that fits.
- The error surrogate uses Fourier mode ``floor(M/s)`` as in WENDy 2023; WENDy.jl takes the
  1-based FFT column ``floor(M/s)``, i.e. mode ``floor(M/s) - 1``.
- The at most ``per_candidate`` test functions of a candidate radius are spread evenly over the
  admissible centres (WENDy.jl: fixed gap plus a few extra at the end); candidates that fit
  no test function at all are dropped.
- ``K_info`` uses all singular values (WENDy.jl bounds the tail when it uses a partial SVD).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pymc_wendy._threads import one_blas_thread
from pymc_wendy._validation import check_data, check_times

__all__ = [
    "bump",
    "bump_derivative",
    "quadrature_weights",
    "RadiusSelection",
    "TestFunctions",
    "select_min_radius",
    "build_test_functions",
    "from_matrices",
]

# Relative spacing deviation below which a grid counts as uniform (WENDy.jl uses 1e-6 absolute).
_UNIFORM_RTOL = 1e-6
# Slack, relative to the grid spacing, for "support inside the domain" and point conversions;
# radii computed as n * dt carry rounding errors far below it.
_SNAP_RTOL = 1e-9
# The smallest radius WENDy.jl allows, in grid spacings: a bump of radius 1 has a single
# non-zero sample and no usable derivative.
_MIN_RADIUS_POINTS = 2


# --- the reference bump ----------------------------------------------------------------------


def bump(s: np.ndarray, eta: float = 9.0) -> np.ndarray:
    """Evaluate the C-infinity bump ``exp(-eta / (1 - s^2))`` on ``|s| < 1``, zero elsewhere.

    Parameters
    ----------
    s : array_like
        Points in the reference coordinate ``s = (t - c) / r``.
    eta : float, default 9.0
        Shape parameter; larger values concentrate the bump around ``s = 0``.

    Returns
    -------
    numpy.ndarray
        Bump values, same shape as ``s``.  No normalising constant is applied.
    """
    s = np.asarray(s, dtype=float)
    inside = np.abs(s) < 1.0
    # A safe denominator keeps the masked-out branch free of division warnings.
    denominator = np.where(inside, 1.0 - s * s, 1.0)
    return np.where(inside, np.exp(-eta / denominator), 0.0)


def bump_derivative(s: np.ndarray, eta: float = 9.0, order: int = 1) -> np.ndarray:
    """Evaluate the ``order``-th derivative in ``s`` of :func:`bump`.

    ``psi^(k)(s) = psi(s) N_k(s) / (1 - s^2)^(2k)`` with polynomials ``N_0 = 1``,
    ``N_{k+1} = q (q N_k' + 4 k s N_k) - 2 eta s N_k`` (``q = 1 - s^2``); ``N_1 = -2 eta s``
    gives ``psi' = psi (-2 eta s / (1 - s^2)^2)``. Every derivative vanishes at ``|s| = 1``,
    which is what lets the weak form move ``order`` derivatives onto the test function.

    Parameters
    ----------
    s : array_like
        Points in the reference coordinate.
    eta : float, default 9.0
        Shape parameter.
    order : int, default 1
        Order of the derivative (0 is :func:`bump` itself).

    Returns
    -------
    numpy.ndarray
        Derivative values, same shape as ``s`` (zero outside ``|s| < 1``).
    """
    order = int(order)
    if order < 0:
        raise ValueError(f"order must be >= 0; got {order}")
    s = np.asarray(s, dtype=float)
    inside = np.abs(s) < 1.0
    denominator = np.where(inside, 1.0 - s * s, 1.0)
    numerator = _bump_numerator(order, float(eta))
    value = np.exp(-eta / denominator) * numerator(s) / denominator ** (2 * order)
    return np.where(inside, value, 0.0)


def _bump_numerator(order: int, eta: float) -> np.polynomial.Polynomial:
    """``N_order`` of :func:`bump_derivative`."""
    P = np.polynomial.Polynomial
    q, x = P([1.0, 0.0, -1.0]), P([0.0, 1.0])
    N = P([1.0])
    for k in range(order):
        N = q * (q * N.deriv() + 4 * k * x * N) - 2 * eta * x * N
    return N


def quadrature_weights(t: np.ndarray) -> np.ndarray:
    """Trapezoid-rule weights for the grid ``t``.

    Parameters
    ----------
    t : array_like, shape (M+1,)
        Strictly increasing, finite time points (at least two).

    Returns
    -------
    numpy.ndarray, shape (M+1,)
        ``w_0 = (t_1 - t_0)/2``, ``w_m = (t_{m+1} - t_{m-1})/2``, ``w_M = (t_M - t_{M-1})/2``;
        on a uniform grid the interior weights equal ``dt``.
    """
    t = check_times(t)
    h = np.diff(t)
    w = np.empty_like(t)
    w[0] = h[0] / 2.0
    w[-1] = h[-1] / 2.0
    w[1:-1] = (h[:-1] + h[1:]) / 2.0
    return w


# --- result containers -----------------------------------------------------------------------


def _frozen(a: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None
    a = np.array(a, dtype=float)
    # The containers are frozen dataclasses; read-only arrays make that promise real.
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False, repr=False)
class RadiusSelection:
    """The minimum-radius search: candidate radii, error surrogate, chosen corner.

    Attributes
    ----------
    candidates : numpy.ndarray
        Candidate radii in time units, increasing.
    errors : numpy.ndarray
        Integration-error surrogate per candidate: the 2-norm over test functions and states of
        the imaginary part of one Fourier mode of ``phi_i * U`` (WENDy.jl's ``_minRadius``).
    index : int
        Index of the chosen corner of ``log(errors)`` versus ``candidates``.
    """

    candidates: np.ndarray
    errors: np.ndarray
    index: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", _frozen(self.candidates))
        object.__setattr__(self, "errors", _frozen(self.errors))
        object.__setattr__(self, "index", int(self.index))

    @property
    def radius(self) -> float:
        """The selected minimum radius in time units (``candidates[index]``)."""
        return float(self.candidates[self.index])

    def __repr__(self) -> str:
        return (
            f"RadiusSelection(radius={self.radius:.6g}, index={self.index}, "
            f"n_candidates={self.candidates.size}, "
            f"range=[{self.candidates[0]:.6g}, {self.candidates[-1]:.6g}])"
        )


@dataclass(frozen=True, eq=False, repr=False)
class TestFunctions:
    """Weighted test-function matrices ``Phi`` and ``dPhi`` with everything needed to inspect them.

    Attributes
    ----------
    phi : numpy.ndarray, shape (K, M+1)
        Test-function values times quadrature weights; orthonormal rows when built by
        :func:`build_test_functions`.
    dphi : numpy.ndarray, shape (K, M+1)
        Time derivatives of the same functions times the same weights.
    t : numpy.ndarray or None, shape (M+1,)
        The time grid (``None`` only when :func:`from_matrices` was given no grid).
    radii : numpy.ndarray
        Radii of the underlying bumps, in time units (empty for user matrices).
    min_radius : float or None
        Smallest radius used, in time units (``None`` for user matrices).
    singular_values : numpy.ndarray or None
        All singular values of ``Phi_full``.
    selection : RadiusSelection or None
        The minimum-radius search, ``None`` when radii or the minimum radius were given.
    coefficients : numpy.ndarray or None, shape (K, K_full)
        ``phi_k(t) = sum_i coefficients[k, i] * scales[i] * bump((t - centres[i]) / widths[i])``.
    centres, widths, scales : numpy.ndarray or None, shape (K_full,)
        Centre (time), radius (time) and row-normalisation factor of every bump in ``Phi_full``.
    eta : float
        Bump shape parameter, used by :meth:`evaluate`.
    """

    # Keeps pytest from trying to collect this class when a test module imports it.
    __test__ = False

    phi: np.ndarray
    dphi: np.ndarray
    t: np.ndarray | None
    radii: np.ndarray
    min_radius: float | None
    singular_values: np.ndarray | None = None
    selection: RadiusSelection | None = None
    coefficients: np.ndarray | None = None
    centres: np.ndarray | None = None
    widths: np.ndarray | None = None
    scales: np.ndarray | None = None
    eta: float = 9.0

    def __post_init__(self) -> None:
        for name in (
            "phi",
            "dphi",
            "t",
            "radii",
            "singular_values",
            "coefficients",
            "centres",
            "widths",
            "scales",
        ):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @property
    def K(self) -> int:
        """Number of test functions (rows)."""
        return int(self.phi.shape[0])

    @property
    def n_points(self) -> int:
        """Number of time points ``M + 1`` (columns)."""
        return int(self.phi.shape[1])

    def evaluate(self, times: np.ndarray, derivative: bool | int = False) -> np.ndarray:
        """Values (or time derivatives) of the kept test functions at arbitrary times.

        Parameters
        ----------
        times : array_like, shape (n,)
            Evaluation times; outside the supports the functions are zero.
        derivative : bool or int, default False
            Order of the time derivative: ``True`` is 1 (``phi_k'``), ``2`` gives
            ``phi_k''`` and so on; ``False`` / 0 the values.

        Returns
        -------
        numpy.ndarray, shape (K, n)
            Unweighted values: ``evaluate(t) * quadrature_weights(t)`` reproduces ``phi``.

        Raises
        ------
        ValueError
            If the test functions came from user matrices (no analytic representation).
        """
        if self.coefficients is None:
            raise ValueError(
                "these test functions were supplied as matrices and have no analytic form; "
                "evaluate() needs test functions from build_test_functions()"
            )
        order = int(derivative)
        if order < 0:
            raise ValueError(f"derivative must be an order >= 0; got {derivative!r}")
        times = np.atleast_1d(np.asarray(times, dtype=float))
        if times.ndim != 1:
            raise ValueError(f"times must be 1-D, got shape {times.shape}")
        s = (times[None, :] - self.centres[:, None]) / self.widths[:, None]
        scale = self.scales / self.widths**order  # d/dt = (1 / width) d/ds
        basis = bump_derivative(s, self.eta, order) * scale[:, None]
        return self.coefficients @ basis

    def derivative_matrix(self, order: int) -> np.ndarray:
        """``Phi^(order)[k, m] = phi_k^(order)(t_m) w_m`` on the data grid, shape (K, M+1).

        Order 0 is :attr:`phi`, order 1 :attr:`dphi`; higher orders (for models of order
        ``p``, whose weak form moves ``p`` derivatives onto the test functions) are
        evaluated from the analytic representation with the same quadrature weights.
        """
        order = int(order)
        if order == 0:
            return self.phi
        if order == 1:
            return self.dphi
        if self.t is None:
            raise ValueError("derivative_matrix needs the time grid of the test functions")
        return self.evaluate(self.t, derivative=order) * quadrature_weights(self.t)

    def __repr__(self) -> str:
        radii = np.array2string(np.asarray(self.radii), precision=4, separator=", ")
        min_radius = "None" if self.min_radius is None else f"{self.min_radius:.6g}"
        return (
            f"TestFunctions(K={self.K}, n_points={self.n_points}, radii={radii}, "
            f"min_radius={min_radius})"
        )


# --- validation and grid bookkeeping ---------------------------------------------------------


@dataclass(frozen=True)
class _Grid:
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
        return np.floor(x + _SNAP_RTOL) if self.uniform else x

    def ceil(self, x: float | np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return np.ceil(x - _SNAP_RTOL) if self.uniform else x

    def centres(self, r: float) -> np.ndarray:
        """Indices of the data points whose bump of radius ``r`` lies inside ``[t_0, t_M]``."""
        t = self.t
        ok = (t - r >= t[0] - self.tol) & (t + r <= t[-1] + self.tol)
        return np.flatnonzero(ok)


def _grid(t: np.ndarray) -> _Grid:
    h = np.diff(t)
    dt = (t[-1] - t[0]) / (t.size - 1)
    uniform = bool(np.max(np.abs(h - dt)) <= _UNIFORM_RTOL * dt)
    tol = _SNAP_RTOL * float(np.min(h))
    if uniform:
        unit = float(dt)
        r_fit = ((t.size - 1) // 2) * unit
        # Nearly uniform grids are treated as uniform; their drift from the ideal grid must not
        # push the widest bump (radius M/2 points) out of the domain.
        ideal = t[0] + dt * np.arange(t.size)
        tol += float(np.max(np.abs(t - ideal)))
    else:
        unit = float(np.max(h))
        r_fit = float(np.max(np.minimum(t - t[0], t[-1] - t)))
    return _Grid(
        t=t,
        weights=quadrature_weights(t),
        uniform=uniform,
        unit=unit,
        r_fit=float(r_fit),
        tol=tol,
    )


def _too_few_points(grid: _Grid, needed_radius: float, what: str, hint: str = "") -> ValueError:
    n = grid.t.size
    if grid.uniform:
        need_pts = 2 * math.ceil(needed_radius / grid.unit - _SNAP_RTOL) + 1
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


def _check_positive(name: str, value: float) -> float:
    value = float(value)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


# --- bump rows -------------------------------------------------------------------------------


def _bump_rows(
    grid: _Grid, radius: float, centre_idx: np.ndarray, eta: float, derivative: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Unit-norm weighted rows of the bumps of one radius (and their derivative rows).

    Returns ``(rows, derivative_rows or None, scales)`` where ``scales[i]`` is the factor that
    made row ``i`` unit norm; the derivative rows share it.
    """
    c = grid.t[centre_idx]
    s = (grid.t[None, :] - c[:, None]) / radius
    rows = bump(s, eta) * grid.weights
    scales = 1.0 / np.linalg.norm(rows, axis=1)
    rows *= scales[:, None]
    if not derivative:
        return rows, None, scales
    drows = bump_derivative(s, eta) * (grid.weights * scales[:, None] / radius)
    return rows, drows, scales


# --- minimum radius --------------------------------------------------------------------------


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


def _max_radius_points(grid: _Grid, radius_range: tuple[float, float]) -> float:
    """WENDy.jl's ``radiusMax``: ``min(floor(radius_range[1]/dt), floor(M/2))`` in points."""
    return float(grid.floor(grid.to_points(min(radius_range[1], grid.r_fit))))


def _candidate_points(
    grid: _Grid,
    radius_range: tuple[float, float],
    n_candidates: int,
    max_multiplier: float,
) -> np.ndarray:
    """Candidate minimum radii in points (whole numbers on a uniform grid)."""
    lo = max(float(grid.ceil(grid.to_points(radius_range[0]))), float(_MIN_RADIUS_POINTS))
    hi = float(grid.floor(_max_radius_points(grid, radius_range) / max_multiplier))
    if hi < lo:
        # WENDy.jl: the range is too short for the multipliers; search up to ten times the start.
        hi = 10.0 * lo
    if hi <= lo:
        return np.array([lo])
    if grid.uniform:
        step = math.ceil((hi - lo) / n_candidates - _SNAP_RTOL)
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
    radius_range: tuple[float, float] = (0.01, 5.0),
    n_candidates: int = 100,
    per_candidate: int = 100,
    subsample_rate: float = 2.0,
    eta: float = 9.0,
    max_multiplier: float = 8,
) -> RadiusSelection:
    """Choose the minimum test-function radius from the data (WENDy 2023 sec. 2.3.1).

    Candidate radii run from ``max(radius_range[0], 2 grid spacings)`` to
    ``radius_max / max_multiplier`` (``radius_max = min(radius_range[1], T/2)``; if that is below
    the start, to ten times the start), about ``n_candidates`` of them.  For each candidate at
    most ``per_candidate`` unit-norm bumps are spread evenly over the admissible centres and the
    error surrogate is::

        err = || Im sum_m Phi_r[k, m] U[m, d] exp(-2 pi i nu (t_m - t_0)) ||_2   over (k, d)

    with ``nu = IX / (T (M+1)/M)``, ``IX = floor(M / subsample_rate)``.  On a uniform grid
    ``nu (t_m - t_0) = IX m / (M+1)``, i.e. the ``IX``-th DFT coefficient of each row as in
    WENDy.jl, computed directly because only one mode is needed.  On a non-uniform grid the
    same frequency is used and, because ``Phi_r`` carries the trapezoid weights, the sum is the
    trapezoid rule for the corresponding Fourier integral.  The minimum radius is the corner of
    ``log(err)`` versus radius found by WENDy.jl's two-secant rule.

    On a non-uniform grid "grid spacing" means the largest spacing, so that every bump covers a
    few samples; candidates are then equally spaced reals rather than whole points.

    Parameters
    ----------
    t : array_like, shape (M+1,)
        Strictly increasing times.
    U : array_like, shape (M+1, D)
        Data, one row per time point.
    radius_range : (float, float), default (0.01, 5.0)
        Smallest candidate and largest overall radius, in time units.
    n_candidates : int, default 100
        Approximate number of candidate radii.
    per_candidate : int, default 100
        Maximum number of test functions per candidate.
    subsample_rate : float, default 2.0
        Coarsening factor ``s`` of the error estimate, ``2 <= s < 4``.
    eta : float, default 9.0
        Bump shape parameter.
    max_multiplier : float, default 8
        Largest radius multiplier used afterwards; caps the candidates at ``radius_max /
        max_multiplier`` so the largest multiple still fits.

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
    The corner rule divides by ``log(err)`` (relative L1 deviations), so, as in WENDy.jl, it is
    not invariant to rescaling ``U``, and ``radius_range`` is in absolute time units; both can
    move the chosen radius by a few points.  When the noise floor is reached within a couple
    of candidates (typical above about 10 % noise) the choice sits at the first flat point.
    """
    t, U = check_data(t, U)
    grid = _grid(t)
    _validate_selection_options(radius_range, n_candidates, per_candidate, subsample_rate, eta)
    max_multiplier = _check_positive("max_multiplier", max_multiplier)
    points = _candidate_points(grid, radius_range, int(n_candidates), max_multiplier)
    radii = points * grid.unit
    # Candidates without a single admissible centre (possible after the 10x fallback) are dropped.
    radii = radii[radii <= grid.r_fit + grid.tol]
    if radii.size == 0:
        raise _too_few_points(
            grid,
            float(points[0] * grid.unit),
            "the smallest candidate",
            hint=" (radius_range is in time units; lower radius_range[0] for a short domain)",
        )

    M = grid.M
    ix = math.floor(M / subsample_rate)
    nu = ix / (grid.span * (M + 1) / M)
    # Im(sum g e^{-i theta}) = -sum g sin(theta); the sign does not affect the norm.
    weighted = U * np.sin(2.0 * np.pi * nu * (t - t[0]))[:, None]
    errors = np.empty(radii.size)
    for i, r in enumerate(radii):
        idx = _spread(grid.centres(r), per_candidate)
        rows, _, _ = _bump_rows(grid, r, idx, eta, derivative=False)
        errors[i] = np.linalg.norm(rows @ weighted)
    with np.errstate(divide="ignore"):
        index = _corner(np.log(errors), radii)
    return RadiusSelection(candidates=radii, errors=errors, index=index)


def _validate_selection_options(
    radius_range: tuple[float, float],
    n_candidates: int,
    per_candidate: int,
    subsample_rate: float,
    eta: float,
) -> None:
    if len(radius_range) != 2:
        raise ValueError(f"radius_range must be (min, max), got {radius_range!r}")
    lo = _check_positive("radius_range[0]", radius_range[0])
    hi = _check_positive("radius_range[1]", radius_range[1])
    if hi < lo:
        raise ValueError(f"radius_range must be increasing, got {radius_range!r}")
    if int(n_candidates) < 1 or int(per_candidate) < 1:
        raise ValueError(
            f"n_candidates and per_candidate must be >= 1, got {n_candidates}, {per_candidate}"
        )
    if not 2.0 <= float(subsample_rate) < 4.0:
        raise ValueError(f"subsample_rate must satisfy 2 <= s < 4, got {subsample_rate!r}")
    _check_positive("eta", eta)


# --- full construction -----------------------------------------------------------------------


def _radii_from_min(
    grid: _Grid, min_radius: float, multipliers: np.ndarray, r_max: float, strict: bool
) -> np.ndarray:
    """Multiples of the minimum radius that are kept (time units, unique, in order)."""
    n = grid.to_points(min_radius)
    if grid.uniform and abs(n - round(float(n))) <= _SNAP_RTOL * max(1.0, float(n)):
        # WENDy.jl: floor(multiplier * radius_points), so radii stay whole numbers of points.
        radii = np.floor(multipliers * round(float(n)) + _SNAP_RTOL) * grid.unit
    else:
        radii = multipliers * min_radius
    keep = radii < r_max - grid.tol if strict else radii <= r_max + grid.tol
    radii = radii[keep & (radii > 0)]
    return np.array(list(dict.fromkeys(radii.tolist())), dtype=float)


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
    eta: float = 9.0,
    min_points: float = 4,
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
    eta : float, default 9.0
        Bump shape parameter.
    min_points : float, default 4
        Floor on the automatically selected minimum radius, in grid spacings (largest
        spacing on a non-uniform grid), as long as the largest multiple still fits. On coarse
        grids the corner rule can pick a radius of 2 spacings, whose bumps the trapezoid rule
        integrates badly: on FitzHugh-Nagumo with 129 points and 10 % noise that doubled the
        coefficient error (17 % against 8 % with the floor). Not applied to a given
        ``min_radius`` or ``radii``.
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
        On invalid data or options, radii that do not fit, too few time points, or ``K``
        larger than the rank.
    """
    t, U = check_data(t, U)
    grid = _grid(t)
    eta = _check_positive("eta", eta)
    min_points = _check_positive("min_points", min_points)
    unknown = set(selection_options) - {
        "radius_range",
        "n_candidates",
        "per_candidate",
        "subsample_rate",
        "max_multiplier",
    }
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")
    if min_radius is not None and radii is not None:
        raise ValueError("give either min_radius or radii, not both")
    if K is not None:
        if int(K) != K or K < 1:
            raise ValueError(f"K must be a positive integer, got {K!r}")
        K = int(K)
    if int(Kmax) < 1:
        raise ValueError(f"Kmax must be >= 1, got {Kmax!r}")
    _check_positive("max_cond", max_cond)
    if not 0.0 < float(max_info) <= 1.0:
        raise ValueError(f"max_info must lie in (0, 1], got {max_info!r}")

    selection = None
    if radii is not None:
        radii_arr = np.atleast_1d(np.asarray(radii, dtype=float))
        if radii_arr.ndim != 1 or radii_arr.size == 0:
            raise ValueError(f"radii must be a non-empty 1-D sequence, got shape {radii_arr.shape}")
        if not np.all(np.isfinite(radii_arr)) or np.any(radii_arr <= 0):
            raise ValueError(f"radii must be positive and finite, got {radii_arr.tolist()}")
        too_big = radii_arr[radii_arr > grid.r_fit + grid.tol]
        if too_big.size:
            raise _too_few_points(grid, float(too_big[0]), "the given radius")
        used = np.array(list(dict.fromkeys(radii_arr.tolist())), dtype=float)
    else:
        mult = np.asarray(multipliers, dtype=float).ravel()
        if mult.size == 0 or not np.all(np.isfinite(mult)) or np.any(mult <= 0):
            raise ValueError(f"multipliers must be positive and finite, got {multipliers!r}")
        if min_radius is not None:
            min_radius = _check_positive("min_radius", min_radius)
            if min_radius > grid.r_fit + grid.tol:
                raise _too_few_points(grid, min_radius, "min_radius")
            used = _radii_from_min(grid, min_radius, mult, grid.r_fit, strict=False)
            if used.size == 0:
                raise _too_few_points(grid, float(np.min(mult) * min_radius), "every multiple")
        else:
            options = dict(selection_options)
            options.setdefault("max_multiplier", float(np.max(mult)))
            selection = select_min_radius(t, U, eta=eta, **options)
            radius_range = options.get("radius_range", (0.01, 5.0))
            r_max = _max_radius_points(grid, radius_range) * grid.unit
            r_min = max(selection.radius, min(min_points * grid.unit, r_max / np.max(mult)))
            used = _radii_from_min(grid, r_min, mult, r_max, strict=True)
            if used.size == 0:
                used = np.array([r_max])

    rows, drows, centres, widths, scales = [], [], [], [], []
    for r in used:
        idx = grid.centres(r)
        v, dv, sc = _bump_rows(grid, r, idx, eta, derivative=True)
        rows.append(v)
        drows.append(dv)
        centres.append(t[idx])
        widths.append(np.full(idx.size, r))
        scales.append(sc)
    phi_full = np.concatenate(rows)
    dphi_full = np.concatenate(drows)

    # Columns outside every support (at least t_0 and t_M) are exactly zero; leaving them out of
    # the SVD keeps them exactly zero in phi instead of rounding-level noise.
    active = np.flatnonzero(np.any(phi_full != 0.0, axis=0))
    with one_blas_thread():  # why: pymc_wendy._threads
        q, s, vt = np.linalg.svd(phi_full[:, active], full_matrices=False)
    s = np.concatenate([s, np.zeros(min(phi_full.shape) - s.size)])
    K = _select_K(s, K, int(Kmax), float(max_cond), float(max_info), t.size)
    coefficients = q[:, :K].T / s[:K, None]
    phi = np.zeros((K, t.size))
    phi[:, active] = vt[:K]
    return TestFunctions(
        phi=phi,
        dphi=coefficients @ dphi_full,
        t=t,
        radii=used,
        min_radius=float(np.min(used)),
        singular_values=s,
        selection=selection,
        coefficients=coefficients,
        centres=np.concatenate(centres),
        widths=np.concatenate(widths),
        scales=np.concatenate(scales),
        eta=eta,
    )


def from_matrices(phi: np.ndarray, dphi: np.ndarray, t: np.ndarray | None = None) -> TestFunctions:
    """Wrap user-supplied test-function matrices (already weighted, used as given).

    Parameters
    ----------
    phi, dphi : array_like, shape (K, M+1)
        Test-function values and derivatives times quadrature weights.  Not orthonormalised.
    t : array_like, shape (M+1,), optional
        The time grid, checked against the number of columns.

    Returns
    -------
    TestFunctions
        With ``radii`` empty and all construction details ``None``.

    Raises
    ------
    ValueError
        If the matrices are not 2-D, differ in shape, are empty or not finite, or ``t`` does
        not match.
    """
    phi = np.asarray(phi, dtype=float)
    dphi = np.asarray(dphi, dtype=float)
    for name, a in (("phi", phi), ("dphi", dphi)):
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D (K, n_times), got shape {a.shape}")
        if a.size == 0:
            raise ValueError(f"{name} is empty (shape {a.shape})")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} contains NaN or infinite values")
    if phi.shape != dphi.shape:
        raise ValueError(f"phi and dphi must have the same shape, got {phi.shape} and {dphi.shape}")
    if t is not None:
        t = check_times(t)
        if t.size != phi.shape[1]:
            raise ValueError(f"t has {t.size} points but the matrices have {phi.shape[1]} columns")
    return TestFunctions(phi=phi, dphi=dphi, t=t, radii=np.empty(0), min_radius=None)
