"""Pointwise weak log-likelihood (leave-one-out densities of the residual) and pw.compare."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
import sympy as sp
import xarray as xr

import pymc_wendy as pw
from pymc_wendy.weak import kernels

LV = pw.get_problem("lotka_volterra")


def _conditional_log_density(S: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``log N(r_i; E[r_i | r_-i], Var[r_i | r_-i])`` by partitioning ``S``, entry by entry."""
    n = r.size
    out = np.empty(n)
    for i in range(n):
        o = np.r_[0:i, i + 1 : n]
        w = np.linalg.solve(S[np.ix_(o, o)], S[o, i])
        mean, var = w @ r[o], S[i, i] - S[o, i] @ w
        out[i] = -0.5 * np.log(2 * np.pi * var) - 0.5 * (r[i] - mean) ** 2 / var
    return out


def test_loo_density_is_the_gaussian_conditional():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(12, 12))
    S = A @ A.T + 0.5 * np.eye(12)
    r = rng.multivariate_normal(np.zeros(12), S)
    C = np.linalg.cholesky(S)
    got = kernels.loo_log_density(np.linalg.solve(S, r), kernels.precision_diagonal(C))
    np.testing.assert_allclose(got, _conditional_log_density(S, r), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kernels.precision_diagonal(C), np.diag(np.linalg.inv(S)), rtol=1e-10)


def test_weak_likelihood_loo_values_dense_and_banded():
    data = LV.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = pw.WeakLikelihood(LV.model, data.t, data.U)
    p = LV.p_true * 1.02
    got = lik.loo_log_likelihood(p)
    assert got.shape == (lik.n_residuals,)
    ref = _conditional_log_density(lik.covariance(p), lik.residual(p))
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-9)
    # an explicit noise level is the one used
    got2 = lik.loo_log_likelihood(p, sigma=2 * lik.sigma)
    ref2 = _conditional_log_density(lik.covariance(p, 2 * lik.sigma), lik.residual(p))
    np.testing.assert_allclose(got2, ref2, rtol=1e-8, atol=1e-9)
    # local test functions on the banded path: diag(S^-1) from the band of the inverse
    long = LV.simulate(n_points=1025, noise_ratio=0.05, seed=1)
    band = pw.WeakLikelihood(LV.model, long.t, long.U, test_functions="local")
    assert band.banded
    ev = band.form.dense_evaluation(p, band.sigma**2)
    np.testing.assert_allclose(
        band.loo_log_likelihood(p),
        kernels.loo_log_density(ev.a, ev.precision_diagonal()),
        rtol=1e-9,
        atol=1e-9,
    )


def test_higher_order_and_joint_likelihoods_have_loo_values():
    prob = pw.get_problem("head_acceleration")
    data = prob.simulate(n_points=51, noise_ratio=0.05, seed=1)
    lik = pw.WeakLikelihood(prob.model, data.t, data.U, inputs=prob.inputs, sigma=data.sigma)
    p = prob.p_true
    np.testing.assert_allclose(
        lik.loo_log_likelihood(p),
        _conditional_log_density(lik.covariance(p), lik.residual(p)),
        rtol=1e-8,
        atol=1e-9,
    )
    d1 = LV.simulate(n_points=65, noise_ratio=0.05, seed=1)
    d2 = LV.simulate(n_points=65, noise_ratio=0.05, seed=2, u0=[2.0, 0.5])
    joint = pw.JointLikelihood([pw.WeakLikelihood(LV.model, d.t, d.U) for d in (d1, d2)])
    parts = [e.loo_log_likelihood(LV.p_true) for e in joint.experiments]
    np.testing.assert_allclose(joint.loo_log_likelihood(LV.p_true), np.concatenate(parts))


def test_observation_key_tells_what_the_residual_observes():
    data = LV.simulate(n_points=129, noise_ratio=0.05, seed=1)
    other = LV.simulate(n_points=129, noise_ratio=0.05, seed=2)
    a = pw.WeakLikelihood(LV.model, data.t, data.U)
    wrong = pw.ODEModel(
        lambda t, u, p: [p[0] * u[0] + p[1] * u[1], p[2] * u[1] + p[3] * u[0] * u[1]],
        states=["x", "y"],
        params=["p1", "p2", "p3", "p4"],
    )
    # another model, same data and test functions: the same observations
    assert (
        pw.WeakLikelihood(wrong, data.t, data.U, test_functions=a.test_functions).observation_key
        == a.observation_key
    )
    assert pw.WeakLikelihood(LV.model, other.t, other.U).observation_key != a.observation_key
    radius = {"radii": [float(a.test_functions.radii[0]) + 2]}
    assert (
        pw.WeakLikelihood(LV.model, data.t, data.U, test_functions=radius).observation_key
        != a.observation_key
    )


def test_bias_corrected_likelihood_has_no_loo_density():
    data = LV.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = pw.WeakLikelihood(LV.model, data.t, data.U)
    corrected = lik.corrected("test", np.zeros(4), LV.p_true)
    with pytest.raises(ValueError, match="no leave-one-out density"):
        corrected.loo_log_likelihood(LV.p_true)


def _logistic(t, u, p):
    return [p[0] * u[0] - p[1] * u[0] ** 2]


def _gompertz(t, u, p):
    return [p[0] * u[0] - p[1] * u[0] * sp.log(u[0])]


@pytest.fixture(scope="module")
def growth():
    """Logistic data (log-normal noise), the logistic and the Gompertz model, Laplace draws."""
    logistic = pw.ODEModel(_logistic, states=["u"], params=["a", "b"])
    gompertz = pw.ODEModel(_gompertz, states=["u"], params=["a", "b"])
    data = pw.simulate(
        logistic, [1, 1], u0=[0.01], t_span=(0, 10), n_points=129, noise="lognormal",
        noise_ratio=0.05, seed=3,
    )  # fmt: skip
    tf = pw.build_test_functions(data.t, np.log(data.U))
    out = {}
    for name, ode in (("logistic", logistic), ("gompertz", gompertz)):
        with pm.Model(coords={"param": ode.params}) as model:
            p = pm.Normal("p", 0, 10, dims="param")
            sigma = pm.HalfNormal("sigma", 1.0)
            pw.WeakODELikelihood(
                "U", ode=ode, params=p, t=data.t, observed=data.U, noise="lognormal",
                sigma=sigma, test_functions=tf,
            )  # fmt: skip
            idata = pw.laplace(draws=400, random_seed=1)
        out[name] = (model, idata)
    return data, tf, out


def test_compute_log_likelihood_gives_labelled_loo_values(growth):
    data, tf, fits = growth
    model, idata = fits["logistic"]
    pw.compute_log_likelihood(idata, model, progressbar=False)
    ll = idata.log_likelihood["U"]
    lik = model["U"].owner.op.likelihood
    assert ll.dims == ("chain", "draw", "U_test_function", "state")
    assert ll.shape[2:] == (lik.K, 1) and list(ll.state.values) == ["u"]
    assert ll.attrs["observation_key"] == lik.observation_key
    # one draw: the draw's parameters and noise level, read back through the model's graph
    draw = idata.posterior.isel(chain=0, draw=7)
    want = lik.loo_log_likelihood(draw["p"].values, float(draw["sigma"]))
    np.testing.assert_allclose(ll.isel(chain=0, draw=7).values[:, 0], want, rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(idata, var_name="U")
    assert loo.n_data_points == lik.K


def test_compare_ranks_the_true_model_first(growth):
    data, tf, fits = growth
    results = {}
    for name, (model, idata) in fits.items():
        results[name] = pw.compute_log_likelihood(idata.copy(), model, progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gompertz is a bad fit: high Pareto k
        table = pw.compare(results)
    assert list(table.index) == ["logistic", "gompertz"]
    # ArviZ reports the difference to the best model (negative)
    assert -float(table.loc["gompertz", "elpd_diff"]) > 4 * float(table.loc["gompertz", "dse"])


def test_compare_refuses_what_does_not_compare(growth):
    data, tf, fits = growth
    model, idata = fits["logistic"]
    ok = pw.compute_log_likelihood(idata.copy(), model, progressbar=False)
    # PyMC's log-likelihood: one joint value per draw
    joint = idata.copy()
    with model:
        pm.compute_log_likelihood(joint, progressbar=False)
    with pytest.raises(ValueError, match="no pointwise log-likelihood"):
        pw.compare({"a": ok, "b": joint})
    with pytest.raises(ValueError, match="no log_likelihood group"):
        pw.compare({"a": ok, "b": fits["gompertz"][1].copy()})
    # a result without a posterior: said, not xarray's KeyError (issue 54, defect 11)
    with pytest.raises(TypeError, match="a DataTree with a posterior group"):
        pw.compute_log_likelihood(idata.posterior.to_dataset(), model)
    with pytest.raises(TypeError, match="a DataTree with a posterior group"):
        pw.compute_log_likelihood(xr.DataTree(), model)
    # the same model on other test functions: a density of another vector
    with pm.Model(coords={"param": ["a", "b"]}) as other:
        p = pm.Normal("p", 0, 10, dims="param")
        sigma = pm.HalfNormal("sigma", 1.0)
        pw.WeakODELikelihood(
            "U", ode=model["U"].owner.op.likelihood.base_model, params=p, t=data.t,
            observed=data.U, noise="lognormal", sigma=sigma,
            test_functions={"radii": [float(tf.radii[0]) + 3]},
        )  # fmt: skip
    moved = pw.compute_log_likelihood(idata.copy(), other, progressbar=False)
    with pytest.raises(ValueError, match="observe different things"):
        pw.compare({"a": ok, "b": moved})
    # an exact (corrected) posterior beside a weak one: different likelihoods
    exact = ok.copy()
    exact["posterior"] = xr.DataTree(ok.posterior.to_dataset().assign_attrs(corrected=1))
    with pytest.raises(ValueError, match=r"\['b'\] are exact .* same correction="):
        pw.compare({"a": ok, "b": exact})


def test_sample_stores_pointwise_values_and_experiments_stay_joint():
    d1 = LV.simulate(n_points=65, noise_ratio=0.1, seed=1)
    d2 = LV.simulate(n_points=65, noise_ratio=0.1, seed=2, u0=[2.0, 0.5])
    with pm.Model() as m:
        p = pm.Normal("p", 0, 10, shape=4)
        pw.WeakODELikelihood("U1", ode=LV.model, params=p, t=d1.t, observed=d1.U)
        pw.WeakODELikelihood("U2", ode=LV.model, params=p, t=d2.t, observed=d2.U)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pw.sample(
                100, tune=100, chains=1, random_seed=1, progressbar=False, check=False,
                idata_kwargs={"log_likelihood": True},
            )  # fmt: skip
    assert idata.log_likelihood["U1"].dims == ("chain", "draw", "U1_test_function", "state")
    ll = pw.experiment_log_likelihood(idata, m)
    # the joint density per experiment, not the sum of the pointwise values
    logp = m.compile_logp(vars=[m["U1"]])
    first = idata.posterior["p"].isel(chain=0, draw=0).values
    assert float(ll.isel(chain=0, draw=0, experiment=0)) == pytest.approx(
        logp({"p": first}), rel=1e-10
    )
    assert idata.log_likelihood["U1"].dims[-1] == "state"  # the pointwise values are kept
    # pw.compare pools the terms' entries: each entry's PSIS is unchanged, so elpds add up
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pw.compare({"a": idata, "b": idata.copy()}, round_to="none")
        parts = [az.loo(idata, var_name=n) for n in ("U1", "U2")]
    assert float(table.loc["a", "elpd"]) == pytest.approx(sum(x.elpd for x in parts), rel=1e-9)
    # leaving out whole experiments instead: the joint values, named explicitly
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two experiments: high Pareto k
        by_experiment = pw.compare(
            {"a": idata, "b": idata.copy()}, var_name="experiments", round_to="none"
        )
        loo = az.loo(idata, var_name="experiments")
    assert float(by_experiment.loc["a", "elpd"]) == pytest.approx(loo.elpd, rel=1e-9)


def test_hostile_comparison_inputs(growth):
    data, tf, fits = growth
    model, idata = fits["logistic"]
    with pytest.raises(ValueError, match="are not observed variables"):
        pw.compute_log_likelihood(idata.copy(), model, var_names=["V"], progressbar=False)
    with pytest.raises(ValueError, match="at least two models"):
        pw.compare({"a": idata})
    ok = pw.compute_log_likelihood(idata.copy(), model, progressbar=False)
    with pytest.raises(ValueError, match="no log-likelihood variable 'W'"):
        pw.compare({"a": ok, "b": ok.copy()}, var_name="W")
