"""Whitened sampling: the reparameterised model is the same density, and NUTS in it gives the
same posterior as the plain run, in the model's own variables."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from pymc.blocking import DictToArrayBijection

import pymc_wendy as pw
from pymc_wendy.bayes.sampling import _unconstrained_point, initial_values
from pymc_wendy.bayes.whitening import WHITENED, posterior_mode, whitened_model


@pytest.fixture(scope="module")
def logistic():
    prob = pw.get_problem("logistic")
    data = prob.simulate(n_points=129, noise_ratio=0.1, seed=3)
    with pm.Model(coords={"param": prob.model.params}) as model:
        # a positive parameter and a free noise level: two transforms in the whitened map
        p = pm.LogNormal("p", np.log(prob.p_true), 1.0, dims="param")
        sigma = pm.HalfNormal("sigma", 1.0)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, sigma=sigma, t=data.t, observed=data.U)
        pm.Deterministic("ratio", p[0] / p[1])
    return prob, data, model


def test_whitened_model_is_the_same_density_and_maps_back(logistic):
    _, _, model = logistic
    point = _unconstrained_point(model, initial_values(model))
    mode, H, res = posterior_mode(model, point)
    assert res.success
    new, L = whitened_model(model, mode, H)
    np.testing.assert_allclose(L @ L.T @ H, np.eye(H.shape[0]), atol=1e-8)
    logp_new = new.compile_logp()
    logp_old = model.compile_logp()
    values = new.compile_fn(
        new.replace_rvs_by_values([new["p"], new["sigma"], new["ratio"]]),
        inputs=new.value_vars,
        point_fn=False,
    )
    rng = np.random.default_rng(0)
    for z in rng.standard_normal((5, H.shape[0])):
        x = mode.data + L @ z
        old_point = DictToArrayBijection.rmap(type(mode)(x, mode.point_map_info))
        # the constant log|det L| is left out of the whitened density
        np.testing.assert_allclose(logp_new({WHITENED: z}), logp_old(old_point), rtol=1e-12)
        p, sigma, ratio = values(z)
        np.testing.assert_allclose(np.log(p), old_point["p_log__"], rtol=1e-12)
        np.testing.assert_allclose(np.log(sigma), old_point["sigma_log__"], rtol=1e-12)
        np.testing.assert_allclose(ratio, p[0] / p[1], rtol=1e-12)
    # the origin is the mode, a stationary point of the original density
    assert np.allclose(values(np.zeros(H.shape[0]))[0], np.exp(mode.data[:2]))


@pytest.mark.slow
def test_whitened_nuts_gives_the_plain_posterior(logistic):
    _, data, model = logistic
    kwargs = dict(
        chains=2, random_seed=7, progressbar=False, check=False,
        idata_kwargs={"log_likelihood": True},
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = pw.sample(1000, model=model, tune=500, whiten=False, **kwargs)
        white = pw.sample(1000, model=model, whiten=True, discard_tuned_samples=False, **kwargs)
    assert white.posterior.attrs["whitened"] == 1 and "whitened" not in plain.posterior.attrs
    assert white.warmup_posterior.sizes["draw"] == pw.bayes.sampling.WHITENED_TUNE
    assert set(white.posterior.data_vars) == {"p", "sigma", "ratio"}
    assert list(white.posterior["p"].coords["param"].values) == list(
        plain.posterior["p"].coords["param"].values
    )
    np.testing.assert_array_equal(white.observed_data["U"], data.U)
    assert white.log_likelihood["U"].shape == plain.log_likelihood["U"].shape
    for idata in (plain, white):
        assert float(az.rhat(idata)["p"].max()) < 1.01
        assert int(idata.sample_stats.diverging.sum()) == 0
    # two independent runs: means and sds agree within Monte Carlo error (4 combined MCSE)
    for var in ("p", "sigma", "ratio"):
        a, b = plain.posterior[var], white.posterior[var]
        for stat, method in ((np.mean, "mean"), (np.std, "sd")):
            diff = stat(a.values.reshape(-1, *a.shape[2:]), axis=0) - stat(
                b.values.reshape(-1, *b.shape[2:]), axis=0
            )
            mcse = np.hypot(
                az.mcse(plain, var_names=[var], method=method)[var].values,
                az.mcse(white, var_names=[var], method=method)[var].values,
            )
            assert np.all(np.abs(diff) < 4 * mcse), (var, method, diff, mcse)


def test_auto_leaves_a_model_with_unstarted_variables_alone(logistic):
    prob, data, _ = logistic
    with pm.Model() as model:
        scale = pm.HalfNormal("scale", 1.0)  # a hyperparameter: no WENDy estimate for it
        p = pm.Normal("p", 0.0, 10.0 * scale, shape=2)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pw.sample(
            50, model=model, tune=50, chains=1, random_seed=1, progressbar=False, check=False
        )
    assert "whitened" not in idata.posterior.attrs
    assert set(idata.posterior.data_vars) == {"scale", "p"}


def test_whiten_true_where_it_cannot_is_a_clear_error(logistic):
    prob, data, _ = logistic
    with pm.Model() as model:
        p = pm.Normal("p", 0.0, 10.0, shape=2)
        pm.Flat("unused")  # a flat direction: the Hessian is singular
        pw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    with pytest.raises(ValueError, match="cannot whiten.*not positive definite"):
        pw.sample(10, model=model, whiten=True)
    with pytest.raises(ValueError, match="whiten must be"):
        pw.sample(10, model=model, whiten="yes")
