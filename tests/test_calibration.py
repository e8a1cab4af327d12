"""Calibration of NUTS credible intervals from the weak likelihood, by simulation (slow).

Prediction: if the weak residual is Gaussian with covariance S(p) (checked in the engine tests:
whitened residual variance 0.99 at the truth) and the priors are vague next to the likelihood,
the posterior is the sampling distribution of the estimator, so a central 90 % credible
interval covers the truth in 90 % of data sets. With N = 50 data sets the Monte Carlo standard
error of an empirical coverage is sqrt(0.9 * 0.1 / 50) = 0.042; we accept 0.90 +- 2.58 SE
(a 99 % band), separately per parameter.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_wendy as pmw

N_DATASETS = 50
NOMINAL = 0.90


def _covers(seed: int) -> np.ndarray:
    prob = pmw.get_problem("logistic")
    data = prob.simulate(n_points=129, noise_ratio=0.1, seed=seed)
    with pm.Model(coords={"param": prob.model.params}):
        p = pm.Normal("p", 0, 10, dims="param")
        pmw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
        idata = pmw.sample(
            500, tune=500, chains=2, random_seed=seed, progressbar=False, check=False
        )
    q = (
        idata.posterior["p"]
        .quantile([(1 - NOMINAL) / 2, (1 + NOMINAL) / 2], dim=("chain", "draw"))
        .values
    )
    return (q[0] <= data.p_true) & (data.p_true <= q[1])


@pytest.mark.slow
def test_credible_intervals_are_calibrated_on_logistic_growth():
    hits = np.array([_covers(seed) for seed in range(N_DATASETS)])
    coverage = hits.mean(axis=0)
    se = np.sqrt(NOMINAL * (1 - NOMINAL) / N_DATASETS)
    print(f"empirical coverage of {NOMINAL:.0%} intervals: {coverage} (MC s.e. {se:.3f})")
    assert np.all(np.abs(coverage - NOMINAL) <= 2.58 * se), coverage
