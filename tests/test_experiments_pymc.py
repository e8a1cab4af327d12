"""Several WeakODELikelihood terms in one PyMC model: shared and per-experiment parameters."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_wendy as pw

LV = pw.get_problem("lotka_volterra")


@pytest.fixture(scope="module")
def two():
    d1 = LV.simulate(n_points=129, noise_ratio=0.1, seed=1)
    d2 = LV.simulate(n_points=129, noise_ratio=0.1, seed=2, u0=[2.0, 0.5])
    return d1, d2


def _shared_model(two, prior=None):
    d1, d2 = two
    with pm.Model() as m:
        p = prior() if prior else pm.Normal("p", 0, 10, shape=4)
        pw.WeakODELikelihood("U1", ode=LV.model, params=p, t=d1.t, observed=d1.U)
        pw.WeakODELikelihood("U2", ode=LV.model, params=p, t=d2.t, observed=d2.U)
    return m


def test_initial_values_and_find_map_are_the_joint_mle(two):
    d1, d2 = two
    joint = pw.fit(LV.model, [d1.t, d2.t], [d1.U, d2.U])
    m = _shared_model(two, prior=lambda: pm.Flat("p", shape=4))
    with m:
        start = pw.initial_values()
        np.testing.assert_allclose(start["p"], joint.x, rtol=1e-6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            mode = pm.find_MAP(initvals={"p": joint.x * 1.05}, progressbar=False)
    np.testing.assert_allclose(mode["p"], joint.x, rtol=1e-4)


@pytest.fixture(scope="module")
def posterior(two):
    m = _shared_model(two)
    with m, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pw.sample(300, tune=300, chains=2, random_seed=1, progressbar=False, check=False)
    return m, idata


# two experiments are two "points": leaving one out is a large change, and ArviZ says so
@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
def test_log_likelihood_per_experiment_and_loo(two, posterior):
    m, idata = posterior
    ll = pw.experiment_log_likelihood(idata, m)
    assert ll.dims == ("chain", "draw", "experiment")
    assert list(ll.experiment.values) == ["U1", "U2"]
    # each experiment's value is its own weak log-likelihood at the draw
    d1, d2 = two
    p = idata.posterior["p"].values[1, 7]
    for name, d in (("U1", d1), ("U2", d2)):
        lik = pw.WeakLikelihood(LV.model, d.t, d.U)
        assert float(ll.sel(experiment=name).values[1, 7]) == pytest.approx(-lik.nll(p), rel=1e-9)
    assert "experiments" in idata["log_likelihood"].data_vars
    loo = az.loo(idata, var_name="experiments")
    assert np.isfinite(loo.elpd) and loo.n_data_points == 2
    with pytest.raises(ValueError, match="at least two experiments"):
        pw.experiment_log_likelihood(idata, m, var_names=["U1"])
    with pytest.raises(ValueError, match="not observed variables"):
        pw.experiment_log_likelihood(idata, m, var_names=["U1", "V"])


def test_posterior_is_the_joint_likelihood_and_predictive_draws_each_experiment(two, posterior):
    m, idata = posterior
    d1, d2 = two
    joint = pw.fit(LV.model, [d1.t, d2.t], [d1.U, d2.U])
    post = idata.posterior["p"].values.reshape(-1, 4)
    # the posterior centres on the joint MLE with the joint (not a single-experiment) spread
    z = (post.mean(0) - joint.x) / joint.stderr
    assert np.all(np.abs(z) < 0.5), z
    np.testing.assert_allclose(post.std(0) / joint.stderr, 1, atol=0.25)
    with m, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        pp = pm.sample_posterior_predictive(
            idata.sel(draw=slice(0, 9)), random_seed=2, progressbar=False
        )
    for name, d in (("U1", d1), ("U2", d2)):
        draws = pp.posterior_predictive[name].values
        assert draws.shape == (2, 10, *d.U.shape)
        assert np.all(np.isfinite(draws)), name
        # a draw is the data up to noise of the data's level
        resid = draws.mean(axis=(0, 1)) - d.U
        assert np.sqrt(np.mean(resid**2)) < 2 * np.mean(pw.estimate_noise(d.U))


@pytest.mark.slow
def test_sample_sft_runs_on_several_experiments(two):
    m = _shared_model(two)
    with m, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pw.sample_sft(
            150, tune=150, rungs=3, chains=2, random_seed=3, progressbar=False, check=False
        )
    post = res.posterior["p"].values.reshape(-1, 4)
    d1, d2 = two
    joint = pw.fit(LV.model, [d1.t, d2.t], [d1.U, d2.U])
    assert np.all(np.abs(post.mean(0) - joint.x) < 0.6 * joint.stderr)


def test_hierarchical_units_start_from_their_own_estimates():
    # the prey growth rate differs per unit; the other three parameters are shared
    rates = [2.6, 3.0, 3.4]
    data = [
        LV.simulate(n_points=129, noise_ratio=0.05, seed=30 + i, p=[r, -1.0, -6.0, 1.0])
        for i, r in enumerate(rates)
    ]
    with pm.Model():
        mu = pm.Normal("mu", 3, 1)
        tau = pm.HalfNormal("tau", 0.5)
        a = pm.Normal("a", mu, tau, shape=3)
        b = pm.Normal("b", -1, 1)
        c = pm.Normal("c", -6, 2)
        e = pm.Normal("e", 1, 1)
        for i, d in enumerate(data):
            pw.WeakODELikelihood(f"U{i}", ode=LV.model, params=[a[i], b, c, e], t=d.t, observed=d.U)
        start = pw.initial_values()
    # a[i] is an expression, not a free variable: not started; the shared scalars get the
    # mean of the units' own estimates
    singles = [pw.fit(LV.model, d.t, d.U).x for d in data]
    assert "a" not in start
    for j, name in ((1, "b"), (2, "c"), (3, "e")):
        assert float(start[name]) == pytest.approx(np.mean([s[j] for s in singles]), rel=1e-6)
