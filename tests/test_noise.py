"""Noise-level estimation by the high-order filter."""

import numpy as np
import pytest

from pymc_wendy.weak.noise import estimate_noise, noise_filter


def test_filter_annihilates_polynomials_and_has_unit_norm():
    w = noise_filter()
    assert w.size == 17
    np.testing.assert_allclose(np.linalg.norm(w), 1.0, rtol=1e-14)
    x = np.arange(-8, 9, dtype=float)
    for degree in range(6):  # a 6th-derivative stencil kills polynomials of degree < 6
        assert abs(w @ x**degree) < 1e-9 * np.abs(w).sum() * 8.0**degree


def test_estimate_recovers_known_noise_within_monte_carlo_error():
    rng = np.random.default_rng(0)
    t = np.linspace(0, 10, 2001)
    truth = np.column_stack([np.sin(t), 3 + np.cos(2 * t), np.exp(-t)])
    sigma = np.array([0.05, 0.2, 0.01])
    U = truth + sigma * rng.standard_normal(truth.shape)
    est = estimate_noise(U)
    # RMS of n (weakly correlated) filtered values: relative s.e. ~ sqrt(1/(2n)) times a
    # factor for the filter's correlation length (17 taps); 5 s.e. with that inflation
    n = t.size - 16
    tol = 5 * np.sqrt(17 / (2 * n))
    np.testing.assert_allclose(est, sigma, rtol=tol)


def test_smooth_data_give_tiny_estimate():
    t = np.linspace(0, 10, 1025)
    est = estimate_noise(np.column_stack([np.sin(t), np.cos(t)]))
    assert np.all(est < 1e-6)


def test_too_short_or_bad_input():
    with pytest.raises(ValueError, match="at least 7 time points"):
        estimate_noise(np.zeros((6, 1)))
    with pytest.raises(ValueError, match="at least 17 time points"):  # a stencil asked for
        estimate_noise(np.zeros((10, 1)), order=6, half_width=8)
    with pytest.raises(ValueError, match="NaN"):
        estimate_noise(np.full((40, 1), np.nan))


@pytest.mark.parametrize("n", [7, 11, 18])
def test_short_series_get_the_widest_stencil_that_fits(n):
    """Below 19 points the default stencil shrinks (3 filtered values at least) and still
    estimates white noise without bias on average: the mean of sigma^2 over many columns
    is within 4 Monte Carlo standard errors of the truth."""
    rng = np.random.default_rng(n)
    cols = 2000
    est = estimate_noise(0.3 * rng.standard_normal((n, cols)))
    var = est**2
    se = var.std() / np.sqrt(cols)
    assert abs(var.mean() - 0.09) < 4 * se
    # and annihilates a straight line and a parabola
    t = np.linspace(0, 1, n)
    assert np.all(estimate_noise(np.column_stack([t, t**2])) < 1e-8)
