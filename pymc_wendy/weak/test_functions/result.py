"""What the construction returns: :class:`TestFunctions` (and :func:`from_matrices` for user
matrices) and :class:`RadiusSelection`, the record of the minimum-radius search."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from pymc_wendy._validation import check_times
from pymc_wendy.weak.test_functions.families import BumpFamily, LocalFamily
from pymc_wendy.weak.test_functions.quadrature import ProductRule, quadrature_weights

__all__ = ["RadiusSelection", "TestFunctions", "from_matrices"]


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
        Radii of the underlying shapes, in time units (empty for user matrices).
    min_radius : float or None
        Smallest radius used, in time units (``None`` for user matrices).
    singular_values : numpy.ndarray or None
        All singular values of ``Phi_full``.
    selection : RadiusSelection or None
        The minimum-radius search, ``None`` when radii or the minimum radius were given.
    coefficients : numpy.ndarray or None, shape (K, K_full)
        ``phi_k(t) = sum_i coefficients[k, i] * scales[i] * psi((t - centres[i]) / widths[i])``
        with ``psi`` the shape of :attr:`family`.
    centres, widths, scales : numpy.ndarray or None, shape (K_full,)
        Centre (time), radius (time) and row-normalisation factor of every row of ``Phi_full``.
    eta : float
        Shape parameter of the bump family (``nan`` for another family).
    family : LocalFamily or None
        The family behind the rows, used by :meth:`evaluate`; ``None`` for user matrices, and
        the bump with ``eta`` when analytic details are given without a family.
    n_boundary : int
        The last ``n_boundary`` rows do not vanish at ``t[0]``, a known initial time
        (:mod:`.boundary`); ``dphi``'s first column then also holds their boundary term.
    boundary_widths, boundary_scales : numpy.ndarray or None, shape (n_boundary,)
        Radius and normalisation of each boundary row: ``phi(t) = scale * psi((t - t[0]) /
        radius)`` for ``t >= t[0]`` (``psi`` the bump with ``eta``), zero before.
    quadrature : {"trapezoid", "product"}
        The rule the weights come from (:mod:`.quadrature`).
    breaks, kinks : numpy.ndarray
        Times in ``[t_0, t_M)`` where the data jump (bolus doses into a measured state), and
        where only their derivative jumps; the product rule interpolates the data on each
        side separately (:class:`~.quadrature.ProductRule`).
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
    family: LocalFamily | None = None
    n_boundary: int = 0
    quadrature: str = "trapezoid"
    boundary_widths: np.ndarray | None = None
    boundary_scales: np.ndarray | None = None
    breaks: np.ndarray = field(default_factory=lambda: np.zeros(0))
    kinks: np.ndarray = field(default_factory=lambda: np.zeros(0))

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
            "boundary_widths",
            "boundary_scales",
            "breaks",
            "kinks",
        ):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        if self.family is None and self.coefficients is not None:
            object.__setattr__(self, "family", BumpFamily(self.eta))

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
            Unweighted values: times the trapezoid weights (or through the product rule,
            :attr:`quadrature`) they reproduce ``phi``.

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
        basis = self.family.shape(s, order) * scale[:, None]
        values = self.coefficients @ basis
        if not self.n_boundary:
            return values
        # the half bumps at t[0]: the bump's right half, zero before t[0]
        r = self.boundary_widths[:, None]
        s = (times[None, :] - self.t[0]) / r
        half = BumpFamily(self.eta).shape(s, order) * (self.boundary_scales[:, None] / r**order)
        return np.vstack([values, np.where(s >= 0.0, half, 0.0)])

    @functools.cached_property
    def product_rule(self) -> ProductRule:
        """The :class:`~.quadrature.ProductRule` of the grid, its :attr:`breaks` and
        :attr:`kinks`."""
        if self.t is None:
            raise ValueError("the product rule needs the time grid of the test functions")
        return ProductRule.on(self.t, self.breaks, self.kinks)

    def derivative_matrix(self, order: int) -> np.ndarray:
        """``Phi^(order)[k, m] = phi_k^(order)(t_m) w_m`` on the data grid, shape (K, M+1).

        Order 0 is :attr:`phi`, order 1 :attr:`dphi`; higher orders (for models of order
        ``p``, whose weak form moves ``p`` derivatives onto the test functions) are
        evaluated from the analytic representation with the same quadrature rule.
        """
        order = int(order)
        if order == 0:
            return self.phi
        if order == 1:
            return self.dphi
        if self.t is None:
            raise ValueError("derivative_matrix needs the time grid of the test functions")
        if self.quadrature == "product":
            rule = self.product_rule
            values = self.evaluate(rule.nodes.ravel(), derivative=order)
            return rule.weights(values.reshape(-1, *rule.nodes.shape))
        return self.evaluate(self.t, derivative=order) * quadrature_weights(self.t)

    def __repr__(self) -> str:
        radii = np.array2string(np.asarray(self.radii), precision=4, separator=", ")
        min_radius = "None" if self.min_radius is None else f"{self.min_radius:.6g}"
        return (
            f"TestFunctions(K={self.K}, n_points={self.n_points}, radii={radii}, "
            f"min_radius={min_radius})"
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
