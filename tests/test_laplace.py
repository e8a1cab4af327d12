"""pymc_wendy.laplace against posteriors known in closed form."""

from __future__ import annotations

import numpy as np
import pymc as pm

import pymc_wendy as pw


def test_laplace_is_exact_for_a_gaussian_posterior():
    # y_i ~ N(mu, 1), mu ~ N(0, 10): the posterior is N(sum y / (n + 0.01), 1 / (n + 0.01))
    y = np.random.default_rng(3).normal(2.0, 1.0, 20)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=y)
    draws = 20_000
    dt = pw.laplace(model, draws=draws, random_seed=0)
    prec = y.size + 0.01
    mean, sd = y.sum() / prec, prec**-0.5
    x = dt.posterior["mu"].values.ravel()
    assert x.size == draws and dt["fit"].attrs["success"]
    assert abs(x.mean() - mean) < 4 * sd / np.sqrt(draws)
    assert abs(x.std() / sd - 1) < 4 * np.sqrt(0.5 / draws)  # s.e. of a sample s.d.
    np.testing.assert_allclose(dt["fit"]["mode"].values, [mean], rtol=1e-6)
    np.testing.assert_allclose(dt["fit"]["covariance"].values, [[sd**2]], rtol=1e-4)


def test_laplace_works_on_the_unconstrained_scale():
    # sigma ~ HalfNormal: the Gaussian is on log(sigma), so every draw is positive
    y = np.random.default_rng(4).normal(0.0, 0.5, 50)
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", 0.0, sigma, observed=y)
    x = pw.laplace(model, draws=4000, random_seed=1).posterior["sigma"].values.ravel()
    assert np.all(x > 0)
    # the mode of log(sigma) (with the log-Jacobian) is near log(rms(y)) for 50 points
    assert abs(np.median(x) / np.sqrt(np.mean(y**2)) - 1) < 0.05
