"""Tests for pymc_wendy.weak.test_functions: bumps, radius search, SVD-reduced test functions."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_wendy.weak.test_functions import (
    RadiusSelection,
    TestFunctions,
    build_test_functions,
    bump,
    bump_derivative,
    from_matrices,
    quadrature_weights,
    select_min_radius,
)
from pymc_wendy.weak.test_functions.quadrature import ProductRule
from pymc_wendy.weak.test_functions.radius import _corner

T_END = 10.0


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


def logistic(t: np.ndarray) -> np.ndarray:
    """Exact solution of u' = u - u^2, u(0) = 0.01."""
    return 1.0 / (1.0 + 99.0 * np.exp(-t))


def noisy(x: np.ndarray, ratio: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = x.reshape(x.shape[0], -1)
    return x + ratio * rms(x) * rng.standard_normal(x.shape)


def warped_grid(n: int) -> np.ndarray:
    """A smooth, strictly increasing non-uniform grid on [0, T_END]; nested when n -> 2n - 1."""
    x = np.linspace(0.0, 1.0, n)
    return T_END * (x + 0.3 * np.sin(2 * np.pi * x) / (2 * np.pi))


@pytest.fixture(scope="module")
def uniform_tf() -> TestFunctions:
    t = np.linspace(0.0, T_END, 513)
    return build_test_functions(t, noisy(logistic(t), 0.05, seed=0))


@pytest.fixture(scope="module")
def nonuniform_tf() -> TestFunctions:
    t = warped_grid(401)
    U = np.column_stack([np.sin(t), np.cos(t)])
    return build_test_functions(t, noisy(U, 0.02, seed=1))


@pytest.fixture(params=["uniform", "nonuniform"])
def tf(request, uniform_tf, nonuniform_tf) -> TestFunctions:
    return uniform_tf if request.param == "uniform" else nonuniform_tf


# --- the bump and the weights ----------------------------------------------------------------


def test_bump_values_and_support():
    assert bump(np.array(0.0)) == pytest.approx(np.exp(-9.0), rel=1e-15)
    assert bump(np.array(0.5), eta=2.0) == pytest.approx(np.exp(-2.0 / 0.75), rel=1e-15)
    s = np.array([-2.0, -1.0, 1.0, 1.5])
    np.testing.assert_array_equal(bump(s), 0.0)
    np.testing.assert_array_equal(bump_derivative(s), 0.0)
    x = np.linspace(-0.9, 0.9, 7)
    np.testing.assert_allclose(bump(x), bump(-x), rtol=1e-15)


def test_bump_derivative_matches_finite_differences():
    s = np.linspace(-0.95, 0.95, 41)
    h = 1e-6
    fd = (bump(s + h) - bump(s - h)) / (2 * h)
    exact = bump_derivative(s)
    assert np.max(np.abs(fd - exact)) / np.max(np.abs(exact)) < 1e-7


@pytest.mark.parametrize("order", [2, 3, 4])
def test_higher_bump_derivatives_match_finite_differences(order):
    s = np.linspace(-0.95, 0.95, 41)
    h = 1e-6
    lower = bump_derivative(s + h, order=order - 1) - bump_derivative(s - h, order=order - 1)
    exact = bump_derivative(s, order=order)
    assert np.max(np.abs(lower / (2 * h) - exact)) / np.max(np.abs(exact)) < 1e-6
    np.testing.assert_array_equal(bump_derivative(np.array([-1.0, 1.0, 1.5]), order=order), 0.0)


def test_order_zero_and_one_are_the_bump_and_its_derivative():
    s = np.linspace(-0.99, 0.99, 17)
    np.testing.assert_allclose(bump_derivative(s, order=0), bump(s), rtol=1e-15)
    q = 1 - s * s
    np.testing.assert_allclose(bump_derivative(s), bump(s) * (-18.0 * s / q**2), rtol=1e-14)
    with pytest.raises(ValueError, match="order"):
        bump_derivative(s, order=-1)


def test_quadrature_weights_uniform_and_nonuniform():
    t = np.linspace(0.0, 2.0, 11)
    w = quadrature_weights(t)
    np.testing.assert_allclose(w[1:-1], 0.2, rtol=1e-13)
    np.testing.assert_allclose(w[[0, -1]], 0.1, rtol=1e-13)
    t = warped_grid(31)
    w = quadrature_weights(t)
    # The trapezoid rule integrates linear functions exactly on any grid.
    assert w @ (3.0 * t + 1.0) == pytest.approx(1.5 * T_END**2 + T_END, rel=1e-13)


# --- structure of the built test functions ---------------------------------------------------


def test_rows_are_orthonormal(tf):
    np.testing.assert_allclose(tf.phi @ tf.phi.T, np.eye(tf.K), atol=1e-10)


def test_support_inside_domain(tf):
    t = tf.t
    assert np.all(tf.centres - tf.widths >= t[0] - 1e-12)
    assert np.all(tf.centres + tf.widths <= t[-1] + 1e-12)
    # product integration (non-uniform grids) spreads a bump over the cubic stencils of the
    # intervals it touches, which include t_0 and t_M for the narrow bumps of a dense stretch
    # that reach into the first or last interval: the end columns then carry weight, and the
    # weak form still holds (the bump vanishes at its support's ends)
    if tf.quadrature == "trapezoid":
        assert np.max(np.abs(tf.phi[:, [0, -1]])) < 1e-14 * np.max(np.abs(tf.phi))
        assert np.max(np.abs(tf.dphi[:, [0, -1]])) < 1e-14 * np.max(np.abs(tf.dphi))
    outside = np.array([t[0] - 1.0, t[-1] + 0.5])
    np.testing.assert_array_equal(tf.evaluate(outside), 0.0)


@pytest.mark.parametrize("order", [2, 3])
def test_higher_derivative_matrices_integrate_by_parts(order):
    """sum_m Phi^(p)[k, m] x(t_m) = (-1)^p sum_m Phi[k, m] x^(p)(t_m) for a smooth x when
    the bumps are resolved by the grid (here radii of 24 points and more; the quadrature of
    ``phi''`` needs wider bumps than that of ``phi'``: at 6 points it is 40 % off)."""
    t = np.linspace(0.0, T_END, 513)
    U = logistic(t)[:, None]
    tf = build_test_functions(t, U, min_radius=24 * (t[1] - t[0]))
    x = np.sin(0.7 * t) + 0.1 * t**2
    xp = {2: -0.49 * np.sin(0.7 * t) + 0.2, 3: -0.343 * np.cos(0.7 * t)}[order]
    lhs = tf.derivative_matrix(order) @ x
    rhs = (-1) ** order * (tf.phi @ xp)
    assert np.max(np.abs(lhs - rhs)) < 1e-6 * np.max(np.abs(rhs))
    np.testing.assert_array_equal(tf.derivative_matrix(0), tf.phi)
    np.testing.assert_array_equal(tf.derivative_matrix(1), tf.dphi)


def test_dphi_is_the_derivative_of_the_kept_rows(tf):
    times = np.linspace(tf.t[0], tf.t[-1], 301)
    h = 1e-6
    fd = (tf.evaluate(times + h) - tf.evaluate(times - h)) / (2 * h)
    exact = tf.evaluate(times, derivative=True)
    assert np.max(np.abs(fd - exact)) / np.max(np.abs(exact)) < 1e-6

    np.testing.assert_allclose(
        tf.dphi, _weighted(tf, derivative=True), rtol=0, atol=1e-12 * np.abs(tf.dphi).max()
    )
    # The SVD rows and the analytic representation describe the same functions.
    np.testing.assert_allclose(tf.phi, _weighted(tf), rtol=0, atol=1e-9)


def _weighted(tf, derivative=False):
    """The analytic functions weighted by the test functions' own quadrature rule."""
    if tf.quadrature == "product":
        # every bump on its own support's nodes, as the construction places them
        c, w, order = tf.centres, tf.widths, int(derivative)
        full = ProductRule.on(tf.t).local_weights(
            c - w,
            c + w,
            lambda x: tf.family.shape((x - c[:, None, None]) / w[:, None, None], order),
        )
        return tf.coefficients @ (full * (tf.scales / w**order)[:, None])
    return tf.evaluate(tf.t, derivative=derivative) * quadrature_weights(tf.t)


def test_integration_by_parts_is_spectral_on_a_uniform_grid():
    t = np.linspace(0.0, T_END, 513)
    dt = t[1] - t[0]
    tf = build_test_functions(t, np.sin(t)[:, None], radii=[32 * dt, 64 * dt])
    g = np.sin(3 * t) + np.cos(0.5 * t)
    dg = 3 * np.cos(3 * t) - 0.5 * np.sin(0.5 * t)
    lhs = tf.phi @ dg
    rhs = -tf.dphi @ g
    assert np.max(np.abs(lhs - rhs)) / np.max(np.abs(lhs)) < 1e-10


def test_integration_by_parts_is_second_order_on_a_nonuniform_grid():
    coarse = warped_grid(101)
    tf = build_test_functions(coarse, np.sin(coarse)[:, None], radii=[1.0, 2.0])
    errors = []
    # The same test functions (centres on the coarse grid) on nested refinements.
    for n in (101, 201, 401):
        t = warped_grid(n)
        w = quadrature_weights(t)
        phi = tf.evaluate(t) * w
        dphi = tf.evaluate(t, derivative=True) * w
        g, dg = np.sin(2 * t), 2 * np.cos(2 * t)
        lhs = phi @ dg
        errors.append(np.max(np.abs(lhs + dphi @ g)) / np.max(np.abs(lhs)))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert errors[0] > 1e-8  # genuinely non-uniform: the error is not spectrally small
    np.testing.assert_allclose(ratios, 4.0, rtol=0.15)


def test_product_quadrature_is_fourth_order_on_a_nonuniform_grid():
    """What ``"auto"`` picks on non-uniform grids: the integration by parts is exact up to
    the data's cubic interpolation, so its error falls 16-fold per halving, where the
    trapezoid rule's (above) falls 4-fold."""
    errors = []
    for n in (101, 201, 401):
        t = warped_grid(n)
        tf = build_test_functions(t, np.sin(t)[:, None], radii=[1.0, 2.0])
        assert tf.quadrature == "product"
        g, dg = np.sin(2 * t), 2 * np.cos(2 * t)
        lhs = tf.phi @ dg
        errors.append(np.max(np.abs(lhs + tf.dphi @ g)) / np.max(np.abs(lhs)))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(ratios > 12), ratios
    t = warped_grid(101)
    trap = build_test_functions(t, np.sin(t)[:, None], radii=[1.0, 2.0], quadrature="trapezoid")
    assert trap.quadrature == "trapezoid" and errors[0] < 0.2 * _ibp_error(trap, t)  # 9x
    uniform = np.linspace(0.0, T_END, 101)
    assert build_test_functions(uniform, np.sin(uniform)[:, None]).quadrature == "trapezoid"
    with pytest.raises(ValueError, match="quadrature must be one of"):
        build_test_functions(uniform, np.sin(uniform)[:, None], quadrature="simpson")


def _ibp_error(tf, t):
    g, dg = np.sin(2 * t), 2 * np.cos(2 * t)
    lhs = tf.phi @ dg
    return np.max(np.abs(lhs + tf.dphi @ g)) / np.max(np.abs(lhs))


# --- minimum radius --------------------------------------------------------------------------


def test_corner_rule_finds_the_kink():
    x = np.arange(1.0, 41.0)
    # Steep decay to a flat noise floor at x = 15, kept away from zero as log-errors usually are.
    y = np.where(x <= 15, 5.0 - 0.6 * (x - 1), 5.0 - 0.6 * 14 - 0.01 * (x - 15))
    assert _corner(y, x) == 14
    assert _corner(np.full(5, np.nan), np.arange(5.0)) == 0


@pytest.mark.parametrize(
    "make_data",
    [
        pytest.param(lambda t: logistic(t)[:, None], id="logistic"),
        pytest.param(lambda t: np.column_stack([np.sin(t), np.cos(t)]), id="sin-cos"),
    ],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_min_radius_grows_as_noise_falls(make_data, seed):
    t = np.linspace(0.0, T_END, 1025)
    clean = make_data(t)
    ratios = (0.1, 0.01, 0.001)
    chosen = [select_min_radius(t, noisy(clean, r, seed)).radius for r in ratios]
    assert np.all(np.diff(chosen) >= 0), chosen
    assert chosen[-1] > chosen[0], chosen
    assert select_min_radius(t, clean).radius >= chosen[-1]


def test_error_surrogate_is_the_imaginary_part_of_one_dft_mode():
    # Few enough points that every admissible shift is used for every candidate.
    t = np.linspace(0.0, 2.0, 81)
    M = t.size - 1
    U = noisy(np.column_stack([np.exp(-t), np.sin(3 * t)]), 0.05, seed=4)
    sel = select_min_radius(t, U, per_candidate=1000, subsample_rate=2.5)
    ix = int(np.floor(M / 2.5))
    dt = t[1] - t[0]
    for radius, error in zip(sel.candidates, sel.errors, strict=True):
        n = round(radius / dt)
        stencil = bump(np.arange(-n, n + 1) / n)
        rows = np.zeros((M - 2 * n + 1, M + 1))
        for k in range(rows.shape[0]):
            rows[k, k : k + 2 * n + 1] = stencil / np.linalg.norm(stencil)
        # each state at unit root mean square (units must not move the choice)
        Un = U / np.sqrt(np.mean(U**2, axis=0))
        modes = np.fft.fft(rows[:, None, :] * Un.T[None, :, :], axis=-1)[..., ix]
        assert error == pytest.approx(np.linalg.norm(modes.imag), rel=1e-10)


def test_radius_selection_is_inspectable_and_on_whole_points():
    t = np.linspace(0.0, T_END, 1025)
    dt = t[1] - t[0]
    sel = select_min_radius(t, noisy(logistic(t), 0.1, seed=0))
    assert isinstance(sel, RadiusSelection)
    points = sel.candidates / dt
    np.testing.assert_allclose(points, np.round(points), atol=1e-9)
    # WENDy.jl: from max(ceil(0.01/dt), 2) points to floor(floor(M/2)/8) points.
    assert round(points[0]) == 2 and round(points[-1]) == (1024 // 2) // 8
    assert np.all(np.diff(sel.candidates) > 0)
    assert sel.errors.shape == sel.candidates.shape and np.all(sel.errors > 0)
    assert sel.radius == sel.candidates[sel.index]


def test_uniform_defaults_match_the_wendy_construction(uniform_tf):
    tf = uniform_tf
    t = tf.t
    dt = t[1] - t[0]
    M = t.size - 1
    points = tf.radii / dt
    np.testing.assert_allclose(points, np.round(points), atol=1e-9)
    n_min = round(tf.min_radius / dt)
    assert tf.selection is not None and tf.selection.radius == pytest.approx(tf.min_radius)
    expected = [m * n_min for m in (1, 2, 4, 8) if m * n_min < min(int(5.0 / dt), M // 2)]
    np.testing.assert_array_equal(np.round(points).astype(int), expected)
    assert 1 <= tf.K <= 200
    assert tf.singular_values.size == min(tf.centres.size, M + 1)
    for n in expected:
        on_radius = np.isclose(tf.widths, n * dt)
        # All shifts whose support [c - n, c + n] lies in [0, M].
        assert on_radius.sum() == M - 2 * n + 1
        # Unit-norm rows of psi(j / n), j = -n..n, as in WENDy.jl.
        stencil_norm = np.linalg.norm(bump(np.arange(-n, n + 1) / n))
        np.testing.assert_allclose(tf.scales[on_radius] * dt * stencil_norm, 1.0, rtol=1e-12)


def expected_K(s: np.ndarray, Kmax: int, max_cond: float, max_info: float) -> int:
    """WENDy.jl's rule, written out independently: the last k meeting each limit."""
    positive = s[s > 0]
    k_cond = np.flatnonzero(positive[0] / positive <= max_cond)[-1] + 1
    k_info = np.flatnonzero(np.cumsum(s) / np.sum(s) <= max_info)[-1] + 1
    return int(min(k_cond, k_info, Kmax))


@pytest.mark.parametrize(
    ("options", "binding"),
    [
        ({"Kmax": 1000, "max_cond": 3.0}, "cond"),
        ({"Kmax": 1000}, "info"),
        ({"Kmax": 20}, "Kmax"),
    ],
)
def test_default_K_follows_condition_and_information_limits(options, binding):
    t = np.linspace(0.0, T_END, 257)
    dt = t[1] - t[0]
    tf = build_test_functions(t, np.sin(t)[:, None], radii=[20 * dt, 40 * dt], **options)
    s = tf.singular_values
    Kmax = options["Kmax"]
    max_cond = options.get("max_cond", 1e4)
    assert tf.K == expected_K(s, Kmax, max_cond, 0.95)
    limits = {
        "cond": int(np.sum(s[0] / s[s > 0] <= max_cond)),
        "info": int(np.sum(np.cumsum(s) / s.sum() <= 0.95)),
        "Kmax": Kmax,
    }
    assert tf.K == limits[binding] < min(v for k, v in limits.items() if k != binding)


def test_default_K_is_capped_at_200(uniform_tf):
    s = uniform_tf.singular_values
    assert uniform_tf.K == expected_K(s, 200, 1e4, 0.95) == 200


def test_gram_route_matches_the_svd():
    """The automatic K's Gram route (eigendecomposition of Phi_full^T Phi_full) gives the
    SVD's K, singular values and row space, and dphi stays the exact derivative of phi's
    rows: both routes combine the same full rows, so ``dphi`` follows ``phi`` up to signs."""
    t = np.linspace(0.0, T_END, 1025)
    U = noisy(logistic(t), 0.05, seed=3)
    auto = build_test_functions(t, U)  # Gram route
    svd = build_test_functions(t, U, radii=auto.radii, K=auto.K)  # LAPACK's SVD
    s, ref = auto.singular_values, svd.singular_values
    kept = slice(0, auto.K)
    np.testing.assert_allclose(s[kept], ref[kept], rtol=1e-9)
    assert auto.K == expected_K(ref, 200, 1e4, 0.95)
    # same rows up to sign: phi_auto = diag(+-1) phi_svd, and dphi follows with the same signs
    signs = np.sign(np.sum(auto.phi * svd.phi, axis=1))
    np.testing.assert_allclose(auto.phi, signs[:, None] * svd.phi, atol=1e-8)
    scale = np.abs(svd.dphi).max()
    np.testing.assert_allclose(auto.dphi, signs[:, None] * svd.dphi, atol=1e-8 * scale)
    np.testing.assert_allclose(auto.phi @ auto.phi.T, np.eye(auto.K), atol=1e-12)


def test_long_series_radius_follows_the_dynamics_not_the_span():
    """Above LONG_SERIES points the corner rule runs on windows of that length (issue 58):
    about the same radius at 4097 and 40 000 points of one system at one time step (the
    rule over the whole span chose 13x larger at 10^5 points), and rescaling time rescales
    it."""
    from pymc_wendy.weak.test_functions.radius import LONG_SERIES, select_min_radius

    t = np.arange(40_000) * 0.02
    U = noisy(np.column_stack([np.sin(2 * t), np.cos(3 * t)]), 0.05, seed=4)
    window = select_min_radius(t[:LONG_SERIES], U[:LONG_SERIES])
    short, long = window.radius, select_min_radius(t, U).radius
    step = np.diff(window.candidates)[0]  # 3 points: windows differ by a step or two
    assert abs(long - short) <= 2 * step + 1e-12
    assert select_min_radius(10 * t, U).radius == pytest.approx(10 * long, rel=1e-12)
    # a radius_range keeps the one search over the given range
    ranged = select_min_radius(t, U, radius_range=(0.05, 400.0))
    assert ranged.candidates[-1] > 10 * long


# --- user overrides --------------------------------------------------------------------------


def test_given_radii_are_used_as_is():
    t = np.linspace(0.0, T_END, 257)
    U = noisy(logistic(t), 0.1, seed=2)
    tf = build_test_functions(t, U, radii=[0.5, 1.3])
    np.testing.assert_array_equal(tf.radii, [0.5, 1.3])
    np.testing.assert_array_equal(np.unique(tf.widths), [0.5, 1.3])
    assert tf.selection is None and tf.min_radius == 0.5


def test_given_min_radius_uses_the_multiples_that_fit():
    t = np.linspace(0.0, T_END, 257)
    dt = t[1] - t[0]
    U = noisy(logistic(t), 0.1, seed=2)
    tf = build_test_functions(t, U, min_radius=5 * dt)
    np.testing.assert_allclose(tf.radii / dt, [5, 10, 20, 40], atol=1e-9)
    assert tf.selection is None and tf.min_radius == pytest.approx(5 * dt)
    tf = build_test_functions(t, U, min_radius=0.3 * T_END, multipliers=(1, 2))
    np.testing.assert_allclose(tf.radii, [0.3 * T_END])


def test_given_K_is_respected_and_checked_against_the_rank():
    t = np.linspace(0.0, T_END, 129)
    dt = t[1] - t[0]
    U = noisy(logistic(t), 0.1, seed=3)
    tf = build_test_functions(t, U, radii=[6 * dt, 12 * dt], K=17)
    assert tf.K == 17 and tf.phi.shape == tf.dphi.shape == (17, 129)
    np.testing.assert_allclose(tf.phi @ tf.phi.T, np.eye(17), atol=1e-10)
    # One radius of 60 points leaves 9 shifts: rank 9.
    with pytest.raises(ValueError, match="exceeds the numerical rank 9"):
        build_test_functions(t, U, radii=[60 * dt], K=10)


def test_from_matrices_round_trip(uniform_tf):
    tf = from_matrices(uniform_tf.phi, uniform_tf.dphi, uniform_tf.t)
    np.testing.assert_array_equal(tf.phi, uniform_tf.phi)
    np.testing.assert_array_equal(tf.dphi, uniform_tf.dphi)
    np.testing.assert_array_equal(tf.t, uniform_tf.t)
    assert (tf.K, tf.n_points) == (uniform_tf.K, uniform_tf.n_points)
    assert tf.min_radius is None and tf.selection is None and tf.coefficients is None
    with pytest.raises(ValueError, match="no analytic form"):
        tf.evaluate(uniform_tf.t)
    assert from_matrices(np.eye(3), np.eye(3)).t is None


def test_results_are_read_only_and_summarised(uniform_tf):
    assert not uniform_tf.phi.flags.writeable
    with pytest.raises(ValueError):
        uniform_tf.dphi[0, 0] = 1.0
    text = repr(uniform_tf)
    assert f"K={uniform_tf.K}" in text and "min_radius=" in text
    assert "radius=" in repr(uniform_tf.selection)


# --- validation ------------------------------------------------------------------------------

T_OK = np.linspace(0.0, 1.0, 50)
U_OK = np.sin(T_OK)[:, None]


@pytest.mark.parametrize(
    ("t", "U", "kwargs", "match"),
    [
        (T_OK[None, :], U_OK, {}, "t must be a 1-D"),
        (np.r_[T_OK[:-1], np.nan], U_OK, {}, "NaN or infinite"),
        (np.r_[T_OK[:10], T_OK[9], T_OK[11:]], U_OK, {}, "strictly increasing"),
        (T_OK, U_OK[:, 0], {}, "U must be 2-D"),
        (T_OK, U_OK[:-1], {}, "49 rows but t has 50"),
        (T_OK, np.r_[U_OK[:-1], [[np.inf]]], {}, "U contains NaN"),
        (T_OK[:4], U_OK[:4], {}, "t has 4 points.*at least 5 points"),
        (T_OK, U_OK, {"min_radius": 0.6}, "t has 50 points.*at least 61 points"),
        (T_OK, U_OK, {"min_radius": -0.1}, "min_radius must be a positive"),
        (T_OK, U_OK, {"radii": [0.1, 0.0]}, "radii must be positive"),
        (T_OK, U_OK, {"radii": [0.1, 0.7]}, "too few time points"),
        (T_OK, U_OK, {"radii": [0.1], "min_radius": 0.1}, "either min_radius or radii"),
        (T_OK, U_OK, {"K": 0}, "K must be a positive integer"),
        (T_OK, U_OK, {"K": 51}, "exceeds the numerical rank"),
        (T_OK, U_OK, {"subsample_rate": 4.0}, "2 <= s < 4"),
        (T_OK, U_OK, {"bogus": 1}, "unknown options"),
    ],
)
def test_bad_inputs_raise(t, U, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_test_functions(t, U, **kwargs)


def test_bad_matrices_raise():
    with pytest.raises(ValueError, match="same shape"):
        from_matrices(np.ones((3, 5)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="must be 2-D"):
        from_matrices(np.ones(5), np.ones(5))
    with pytest.raises(ValueError, match="NaN or infinite"):
        from_matrices(np.full((2, 5), np.nan), np.ones((2, 5)))
    with pytest.raises(ValueError, match="t has 4 points but the matrices have 5"):
        from_matrices(np.ones((2, 5)), np.ones((2, 5)), t=np.arange(4.0))


def test_select_min_radius_validates_inputs():
    with pytest.raises(ValueError, match="t has 3 points"):
        select_min_radius(np.arange(3.0), np.ones((3, 1)))
    with pytest.raises(ValueError, match="radius_range must be increasing"):
        select_min_radius(T_OK, U_OK, radius_range=(0.5, 0.1))


def test_five_points_is_the_smallest_usable_grid():
    t = np.linspace(0.0, 1.0, 5)
    tf = build_test_functions(t, np.sin(t)[:, None])
    # One bump of radius 2 points centred in the middle.
    assert tf.K == 1 and tf.radii == pytest.approx([0.5])
    np.testing.assert_allclose(tf.phi @ tf.phi.T, 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="t has 4 points"):
        build_test_functions(t[:4], np.sin(t[:4])[:, None])
