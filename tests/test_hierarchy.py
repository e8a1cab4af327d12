"""``pw.hierarchical_normal``: an exact reparametrisation of ``Normal(mu, tau)`` that removes
the funnel of a hierarchical model whose units are about as well determined as their spread."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytest

import pymc_wendy as pw

N_UNITS, SE = 5, 0.05


def _units():
    """Five units whose own data pin them to 0.05 with a spread of 0.08 between them: the
    geometry of the model in ``docs/experiments.md``, with an exactly Gaussian likelihood."""
    rng = np.random.default_rng(7)
    theta = rng.normal(3.0, 0.08, N_UNITS)
    return theta + SE * rng.normal(size=N_UNITS)


def _model(y, form: str) -> pm.Model:
    with pm.Model(coords={"unit": range(N_UNITS)}) as m:
        mu, tau = pm.Normal("mu", 3, 2), pm.HalfNormal("tau", 1)
        if form == "centred":
            theta = pm.Normal("theta", mu, tau, dims="unit")
        elif form == "non-centred":
            theta = pw.hierarchical_normal("theta", mu, tau, dims="unit")
        else:
            se = np.full(N_UNITS, SE)
            theta = pw.hierarchical_normal("theta", mu, tau, estimate=y, stderr=se, dims="unit")
        pm.Normal("y", theta, SE, observed=y)
    return m


@pytest.mark.parametrize("form", ["informed", "non-centred"])
def test_the_density_is_the_centred_one_times_the_jacobian(form):
    """In ``(mu, log tau, z)`` the log density equals the centred model's at ``theta(z)`` plus
    ``log |d theta / d z|``: the same posterior, whatever the estimates."""
    y = _units()
    m, centred = _model(y, form), _model(y, "centred")
    logp, logp_c = m.compile_logp(), centred.compile_logp()
    (theta_graph,) = m.replace_rvs_by_values([m["theta"]])
    theta_fn = pytensor.function(m.value_vars, theta_graph, on_unused_input="ignore")
    rng = np.random.default_rng(0)
    for _ in range(5):
        mu, log_tau = rng.normal(3, 0.3), rng.normal(-2.5, 1.5)
        z = rng.normal(size=N_UNITS)
        point = {"mu": mu, "tau_log__": log_tau, "theta_z": z}
        theta = theta_fn(mu, log_tau, z)
        tau = np.exp(log_tau)
        if form == "informed":
            jac = -0.5 * np.log(1 / SE**2 + 1 / tau**2) * N_UNITS
        else:
            jac = np.log(tau) * N_UNITS
        expected = logp_c({"mu": mu, "tau_log__": log_tau, "theta": theta}) + jac
        np.testing.assert_allclose(logp(point), expected, rtol=1e-12, atol=1e-9)


def test_prior_draws_are_normal_mu_sigma():
    """Given constants ``mu`` and ``sigma`` the values are ``Normal(mu, sigma)`` even with
    estimates far from them (Monte Carlo tolerances: 5 standard errors)."""
    n = 40_000
    with pm.Model():
        theta = pw.hierarchical_normal(
            "theta", 1.0, 2.0, estimate=[10.0, -5.0, 0.0], stderr=[0.1, 3.0, 1e-3]
        )
    draws = pm.draw(theta, n, random_seed=1)
    np.testing.assert_allclose(draws.mean(0), 1.0, atol=5 * 2 / np.sqrt(n))
    np.testing.assert_allclose(draws.std(0), 2.0, atol=5 * 2 / np.sqrt(2 * n))


@pytest.mark.slow
def test_informed_form_samples_where_the_classic_forms_do_not():
    """At ``target_accept=0.95`` (what ``pw.sample`` uses for such models) the centred form
    diverges on every seed; the informed form has no divergence and R-hat <= 1.01."""
    y = _units()
    for seed in (0, 1):
        runs = {}
        for form in ("centred", "informed"):
            with _model(y, form), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = pm.sample(
                    1000, tune=1000, chains=2, random_seed=seed, progressbar=False,
                    nuts_sampler="nutpie", target_accept=0.95, compute_convergence_checks=False,
                )  # fmt: skip
            runs[form] = (
                int(idata.sample_stats["diverging"].sum()),
                float(az.summary(idata, kind="diagnostics")["r_hat"].max()),
            )
        assert runs["centred"][0] > 0, runs
        assert runs["informed"][0] == 0 and runs["informed"][1] <= 1.01, runs


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"estimate": [1.0, 2.0]}, "both estimate and stderr"),
        ({"stderr": [1.0, 2.0]}, "both estimate and stderr"),
        ({"estimate": [1.0, 2.0], "stderr": [0.1, 0.0]}, "stderr must be > 0"),
        ({"estimate": [1.0, 2.0], "stderr": [0.1, np.nan]}, "stderr must be > 0"),
        ({"estimate": [1.0, np.nan], "stderr": [0.1, 0.1]}, "finite where stderr is"),
        ({"estimate": [1.0, 2.0], "stderr": [0.1]}, "the same shape"),
        ({"estimate": [1.0, 2.0, 3.0], "stderr": [0.1] * 3, "dims": "unit"}, "length 2"),
        ({"estimate": [1.0, 2.0], "stderr": [0.1] * 2, "shape": 3}, "shape=3"),
    ],
)
def test_bad_unit_fits_are_refused(kwargs, match):
    with pm.Model(coords={"unit": range(2)}):
        mu, tau = pm.Normal("mu"), pm.HalfNormal("tau")
        with pytest.raises(ValueError, match=match):
            pw.hierarchical_normal("theta", mu, tau, **kwargs)


def test_a_mu_of_the_wrong_shape_is_named():
    """Issue 54, defect 11: pytensor's "Incompatible Elemwise input shapes" before."""
    fits = {"estimate": [[1.0, 2.0]] * 3, "stderr": [[0.1, 0.1]] * 3}  # 3 units, 2 parameters
    with pm.Model():
        mu = pm.Normal("mu", shape=3)  # one per unit: not what broadcasts over the last axis
        with pytest.raises(ValueError, match=r"mu has shape \(3,\), which does not broadcast"):
            pw.hierarchical_normal("theta", mu, 1.0, **fits)
        with pytest.raises(ValueError, match="sigma has shape"):
            pw.hierarchical_normal("theta", 0.0, np.ones(4), **fits)
        ok = pw.hierarchical_normal("theta", pm.Normal("m2", shape=2), 1.0, **fits)
        assert ok.eval().shape == (3, 2)


@pytest.mark.parametrize("sigma", [0.0, -1.0, np.nan])
def test_a_constant_sigma_must_be_positive(sigma):
    with pm.Model(), pytest.raises(ValueError, match="sigma must be > 0"):
        pw.hierarchical_normal("theta", 0.0, sigma, estimate=[1.0], stderr=[0.1])


def test_an_infinite_stderr_gives_the_non_centred_form():
    """A unit without a usable fit (stderr inf, estimate NaN) is parametrised as
    ``mu + sigma * z``; the others are not; the values are (units, parameters) here."""
    est = np.array([[1.0, 2.0], [np.nan, 3.0]])
    se = np.array([[0.1, 0.2], [np.inf, 0.3]])
    with pm.Model(coords={"unit": range(2), "param": ["a", "b"]}) as m:
        mu = pm.Normal("mu", dims="param")
        tau = pm.HalfNormal("tau", dims="param")
        pw.hierarchical_normal("theta", mu, tau, estimate=est, stderr=se, dims=("unit", "param"))
    (theta,) = m.replace_rvs_by_values([m["theta"]])
    f = pytensor.function(m.value_vars, theta)
    mu, log_tau, z = np.array([0.5, -0.5]), np.array([0.1, -1.0]), np.array([[1.0, -1.0]] * 2)
    out = f(mu, log_tau, z)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[1, 0], mu[0] + np.exp(log_tau[0]) * z[1, 0], rtol=1e-14)
    assert not np.isclose(out[0, 0], mu[0] + np.exp(log_tau[0]) * z[0, 0])
