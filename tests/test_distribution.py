"""WeakODELikelihood inside pm.Model: MAP, NUTS, SMC, predictive draws, ArviZ, bad input."""

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from conftest import relative_error

import pymc_wendy as pmw
from pymc_wendy.bayes.distribution import WeakODELikelihood, estimate_initial_state
from pymc_wendy.estimators import weak_least_squares, wendy_mle
from pymc_wendy.problems import get_problem
from pymc_wendy.weak.likelihood import WeakLikelihood


def _data(name, n_points, noise_ratio, seed, noise="normal"):
    prob = get_problem(name)
    return prob, prob.simulate(n_points=n_points, noise_ratio=noise_ratio, noise=noise, seed=seed)


def _model(prob, data, prior="normal", **kwargs):
    with pm.Model(coords={"param": prob.model.params, "state": prob.model.states}) as model:
        if prior == "flat":
            p = pm.Flat("p", dims="param")
        else:
            p = pm.Normal("p", 0, 10, dims="param")
        WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U, **kwargs)
    return model


def _interval(idata, var, prob):
    q = idata.posterior[var].quantile([(1 - prob) / 2, (1 + prob) / 2], dim=("chain", "draw"))
    return q.values[0], q.values[1]


# WENDy 2023: FitzHugh-Nagumo about 6 % coefficient error at 10 % noise with 128 points;
# Lotka-Volterra below 10 % even at 30 % noise with 64 points.
@pytest.mark.parametrize(
    ("name", "noise_ratio", "bound"),
    [("lotka_volterra", 0.1, 0.05), ("fitzhugh_nagumo", 0.1, 0.06)],
)
def test_find_map_with_flat_priors_is_the_wendy_mle(name, noise_ratio, bound):
    prob, data = _data(name, 257, noise_ratio, seed=7)
    model = _model(prob, data, prior="flat")
    lik = WeakLikelihood(prob.model, data.t, data.U)
    start = {"p": weak_least_squares(lik)}  # a consistent start that is not the MLE
    with model:
        point = pm.find_MAP(
            initvals=start, progressbar=False, jitter=False, return_inferencedata=True
        ).posterior.isel(chain=0, draw=0)
    mle = wendy_mle(lik).x
    assert relative_error(start["p"], mle) > 1e-3
    assert relative_error(point["p"], mle) < 1e-4
    assert relative_error(point["p"], data.p_true) < bound


@pytest.mark.parametrize(("name", "n_points"), [("logistic", 257), ("lotka_volterra", 129)])
def test_nuts_at_default_settings_converges_and_covers_the_truth(name, n_points):
    prob, data = _data(name, n_points, 0.1, seed=11)
    model = _model(prob, data)
    with warnings.catch_warnings(record=True) as caught, model:
        warnings.simplefilter("always")
        idata = pmw.sample(random_seed=5, progressbar=False, check=False)
    assert not [w for w in caught if "object mode" in str(w.message).lower()]
    assert idata.posterior.attrs["inference_library"] == "nutpie"
    summary = az.summary(idata)
    assert (summary["r_hat"] < 1.01).all(), summary
    assert int(idata.sample_stats["diverging"].sum()) == 0
    lo, hi = _interval(idata, "p", 0.95)
    assert np.all((lo < data.p_true) & (data.p_true < hi)), (lo, hi)
    # names and dims flow into the result
    assert list(idata.posterior["p"].coords["param"].values) == list(prob.model.params)


def test_plain_pm_sample_runs_nutpie_natively():
    prob, data = _data("logistic", 257, 0.1, seed=11)
    with warnings.catch_warnings(record=True) as caught, _model(prob, data):
        warnings.simplefilter("always")
        idata = pm.sample(300, tune=300, chains=2, random_seed=5, progressbar=False)
    assert not [w for w in caught if "object mode" in str(w.message).lower()]
    assert idata.posterior.attrs["inference_library"] == "nutpie"
    lo, hi = _interval(idata, "p", 0.99)
    assert np.all((lo < data.p_true) & (data.p_true < hi)), (lo, hi)


def test_pymc_nuts_runs_natively_and_params_may_be_a_list_of_scalars():
    prob, data = _data("logistic", 129, 0.05, seed=2)
    with pm.Model() as model:
        r = pm.Normal("r", 0, 10)
        k = pm.Normal("k", 0, 10)
        WeakODELikelihood("U", ode=prob.model, params=[r, k], t=data.t, observed=data.U)
    with warnings.catch_warnings(record=True) as caught, model:
        warnings.simplefilter("always")
        idata = pm.sample(
            300, tune=300, chains=2, nuts_sampler="pymc", random_seed=3, progressbar=False
        )
    assert not [w for w in caught if "object mode" in str(w.message).lower()]
    for name, truth in zip(["r", "k"], data.p_true, strict=True):
        lo, hi = _interval(idata, name, 0.99)
        assert lo < truth < hi
    # the list and the vector spellings define the same log-density
    vec = _model(prob, data)
    point = {"p": data.p_true}
    expected = vec.compile_logp(vars=[vec["U"]])(point)
    got = model.compile_logp(vars=[model["U"]])({"r": data.p_true[0], "k": data.p_true[1]})
    assert got == pytest.approx(expected, rel=1e-12)


def test_random_sigma_posterior_concentrates_near_the_true_noise_level():
    prob, data = _data("lotka_volterra", 257, 0.05, seed=1)
    with pm.Model(coords={"param": prob.model.params, "state": prob.model.states}) as model:
        p = pm.Normal("p", 0, 10, dims="param")
        sigma = pm.HalfNormal("sigma", 1, dims="state")
        WeakODELikelihood("U", ode=prob.model, params=p, sigma=sigma, t=data.t, observed=data.U)
    with model:
        idata = pmw.sample(500, tune=500, chains=2, random_seed=4, progressbar=False, check=False)
    post = idata.posterior["sigma"]
    mean, sd = post.mean(("chain", "draw")).values, post.std(("chain", "draw")).values
    # measured: posterior means 0.92 and 0.84 of the truth, sd about 6 % (1/sqrt(2K), K = 149)
    assert np.all(np.abs(mean / data.sigma - 1) < 0.2), mean / data.sigma
    assert np.all(sd / mean < 0.1)
    assert float(az.rhat(idata)["sigma"].max()) < 1.01
    lo, hi = _interval(idata, "p", 0.99)
    assert np.all((lo < data.p_true) & (data.p_true < hi))


def test_smc_agrees_with_nuts():
    prob, data = _data("logistic", 129, 0.05, seed=2)
    model = _model(prob, data)
    with model:
        smc = pm.sample_smc(500, chains=2, random_seed=1, progressbar=False)
        nuts = pm.sample(500, tune=500, chains=2, random_seed=1, progressbar=False)
    for idata in (smc, nuts):
        lo, hi = _interval(idata, "p", 0.99)
        assert np.all((lo < data.p_true) & (data.p_true < hi))
    m_smc = smc.posterior["p"].mean(("chain", "draw")).values
    m_nuts = nuts.posterior["p"].mean(("chain", "draw")).values
    sd = nuts.posterior["p"].std(("chain", "draw")).values
    assert np.all(np.abs(m_smc - m_nuts) < 0.3 * sd)


def test_predictive_draws_simulate_the_ode_with_noise():
    prob, data = _data("lotka_volterra", 129, 0.05, seed=3)
    model = _model(prob, data)
    with model:
        idata = pmw.sample(200, tune=300, chains=2, random_seed=2, progressbar=False, check=False)
        pp = pm.sample_posterior_predictive(idata, random_seed=3, progressbar=False)
    draws = pp.posterior_predictive["U"]
    assert draws.shape == (2, 200, *data.U.shape)
    # named by the model without coords or dims from the user: times and state names
    assert draws.dims == ("chain", "draw", "U_time", "state")
    np.testing.assert_array_equal(draws["U_time"], data.t)
    assert list(pp.observed_data["U"]["state"].values) == list(prob.model.states)
    mean = draws.mean(("chain", "draw")).values
    spread = draws.std(("chain", "draw")).values
    # the predictive mean estimates the true trajectory better than the data do (RMS sigma);
    # measured 0.35 sigma: parameter and initial-state uncertainty, little draw noise
    assert np.sqrt(np.mean((mean - data.U_true) ** 2)) < 0.5 * data.sigma[0]
    assert np.median(spread) == pytest.approx(data.sigma[0], rel=0.1)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # solves from wild prior draws fail
        prior = pm.sample_prior_predictive(20, random_seed=1)
    assert prior.prior_predictive["U"].shape == (1, 20, *data.U.shape)


def test_lognormal_predictive_draws_are_positive():
    prob, data = _data("lotka_volterra", 129, 0.05, seed=3, noise="lognormal")
    model = _model(prob, data, noise="lognormal")
    with model:
        point = {"p": data.p_true}
        draw = pm.draw(model["U"], givens={model["p"]: data.p_true}, random_seed=1)
    assert draw.shape == data.U.shape and np.all(draw > 0)
    assert np.isfinite(model.compile_logp()(point))


@pytest.mark.parametrize("noise", ["normal", "lognormal"])
def test_initial_state_estimate_is_close_to_the_truth(noise):
    prob, data = _data("lotka_volterra", 257, 0.05, seed=3, noise=noise)
    lik = WeakLikelihood(prob.model, data.t, data.U, noise=noise)
    u0 = estimate_initial_state(lik)
    err = np.log(u0 / data.U_true[0]) if noise == "lognormal" else u0 - data.U_true[0]
    # least squares over 64 points: standard error a fraction of sigma
    assert np.all(np.abs(err) < 0.5 * data.sigma), err / data.sigma


def test_initial_values_are_the_wendy_estimate_where_allowed():
    prob, data = _data("lotka_volterra", 129, 0.05, seed=3)
    with pm.Model() as model:
        p = pm.Normal("p", 0, 10, shape=4)
        q = pm.HalfNormal("q", 10, shape=4)  # the truth has negative entries: outside support
        s = pm.HalfNormal("s", 1, shape=2)
        r = [pm.Normal(f"r{j}", 0, 10) for j in range(4)]
        WeakODELikelihood("U", ode=prob.model, params=p, sigma=s, t=data.t, observed=data.U)
        WeakODELikelihood("V", ode=prob.model, params=q, t=data.t, observed=data.U)
        WeakODELikelihood("W", ode=prob.model, params=r, t=data.t, observed=data.U)
    start = pmw.initial_values(model)
    assert set(start) == {"p", "s", "r0", "r1", "r2", "r3"}
    assert relative_error(start["p"], data.p_true) < 0.05
    assert np.allclose(start["s"], model["U"].owner.op.likelihood.sigma)
    assert np.allclose([start[f"r{j}"] for j in range(4)], start["p"])
    # nothing is stored on the model, so SMC still starts from prior draws
    assert all(model.rvs_to_initial_values[v] is None for v in model.free_RVs)


def test_initial_values_of_a_model_nonlinear_in_its_parameters_screen_prior_draws():
    """Issue 54: from the prior's centre alone, oral PK at 97 points stopped at a spurious
    minimum (``[0.11, 0.10, -3.9]``, NLL 109) where ``pmw.fit`` with the problem's bounds
    reaches NLL 68; and IV boluses divided by a volume of 0. Prior draws as further starts
    find the fit's minimum and a finite start, without warnings from the pole."""
    prob = pmw.get_problem("pk_oral")
    data = prob.simulate(n_points=97, noise_ratio=0.1, seed=0)
    with pm.Model() as model:
        p = pm.Normal("p", 0.0, 10.0, shape=3)
        U = WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    lik = U.owner.op.likelihood
    reference = pmw.fit(prob.model, data.t, data.U, bounds=prob.bounds)
    start = pmw.initial_values(model)["p"]
    assert lik.nll(start) <= lik.nll(reference.x) + 1e-6
    np.testing.assert_allclose(start, reference.x, rtol=1e-4)
    iv = pmw.get_problem("pk_iv_doses")
    d = iv.simulate(n_points=129, noise_ratio=0.1, seed=0)
    with pm.Model() as model:
        p = pm.Normal("p", 0.0, 10.0, shape=2)
        WeakODELikelihood("U", ode=iv.model, params=p, t=d.t, observed=d.U, inputs=d.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start = pmw.initial_values(model)["p"]
    assert relative_error(start, iv.p_true) < 0.1


def test_initial_values_with_a_prior_pymc_cannot_draw_from():
    """A prior with a log-density only (``pm.CustomDist`` without ``random``): no prior draws
    to screen, the start from the model's initial point, and no error."""
    prob = pmw.get_problem("pk_oral")
    data = prob.simulate(n_points=97, noise_ratio=0.05, seed=0)
    with pm.Model() as model:
        p = pm.CustomDist(
            "p", logp=lambda v: -0.5 * pt.sum((pt.log(v) - np.log(prob.p_true)) ** 2),
            shape=3, initval=prob.p_true * 1.2,
        )  # fmt: skip
        WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor numba's object-mode warning of the failed draw
        start = pmw.initial_values(model)["p"]
    assert relative_error(start, prob.p_true) < 0.2


def test_initial_values_start_newton_where_fit_does():
    """Head acceleration (second order, a pulse input, linear in its parameters) at 10 %
    noise: Newton from the weak least squares estimate stopped at NLL 1960 (the demo's MAP
    0.86 / 0.06 / 0.04 against the truth 0.05 / 0.15 / 0.39); from IRLS, as ``pw.fit``
    starts, it reaches the fit's minimum."""
    prob = pmw.get_problem("head_acceleration")
    data = prob.simulate(n_points=513, noise_ratio=0.1, seed=0)
    with pm.Model() as model:
        p = pm.Normal("p", 0.0, 10.0, shape=3)
        U = WeakODELikelihood(
            "U", ode=prob.model, params=p, t=data.t, observed=data.U, inputs=data.inputs
        )
    lik = U.owner.op.likelihood
    reference = pmw.fit(prob.model, data.t, data.U, inputs=data.inputs)
    start = pmw.initial_values(model)["p"]
    assert lik.nll(start) <= lik.nll(reference.x) + 1e-6
    assert np.all(np.abs(start - prob.p_true) < 4 * reference.stderr)


def test_log_likelihood_group_holds_one_joint_value_per_draw():
    prob, data = _data("logistic", 129, 0.05, seed=2)
    model = _model(prob, data)
    with model:
        idata = pm.sample(100, tune=200, chains=2, random_seed=1, progressbar=False)
        pm.compute_log_likelihood(idata, progressbar=False)
    ll = idata.log_likelihood["U"]
    assert ll.dims == ("chain", "draw")
    logp = model.compile_logp(vars=[model["U"]])
    first = idata.posterior["p"].isel(chain=0, draw=0).values
    assert float(ll.isel(chain=0, draw=0)) == pytest.approx(logp({"p": first}), rel=1e-10)


def test_bad_inputs_give_clear_errors():
    prob, data = _data("lotka_volterra", 129, 0.05, seed=3)
    ode = prob.model
    with pm.Model():
        p = pm.Normal("p", 0, 10, shape=4)
        with pytest.raises(TypeError, match="needs observed data"):
            WeakODELikelihood("A", ode=ode, params=p, t=data.t)
        with pytest.raises(ValueError, match="4 parameters"):
            WeakODELikelihood("B", ode=ode, params=[p[0], p[1]], t=data.t, observed=data.U)
        with pytest.raises(ValueError, match="vector of the 4 parameters"):
            WeakODELikelihood("C", ode=ode, params=pt.stack([p, p]), t=data.t, observed=data.U)
        with pytest.raises(ValueError, match="2"):
            WeakODELikelihood("D", ode=ode, params=p, t=data.t, observed=data.U[:, :1])
        with pytest.raises(ValueError, match="increasing"):
            WeakODELikelihood("E", ode=ode, params=p, t=data.t[::-1], observed=data.U)
        with pytest.raises(ValueError, match="positive"):
            WeakODELikelihood(
                "F", ode=ode, params=p, t=data.t, observed=data.U - 10, noise="lognormal"
            )
        with pytest.raises(TypeError, match="fixed array"):
            WeakODELikelihood("G", ode=ode, params=p, t=data.t, observed=pm.Data("d", data.U))
        with pytest.raises(ValueError, match="length 2"):
            WeakODELikelihood(
                "H", ode=ode, params=p, sigma=pm.HalfNormal("s", shape=3), t=data.t,
                observed=data.U,
            )  # fmt: skip
        U_inf = data.U.copy()
        U_inf[5, 1] = np.inf
        with pytest.raises(ValueError, match="NaN|finite"):
            WeakODELikelihood("I", ode=ode, params=p, t=data.t, observed=U_inf)
        # NaN is a missing value: its time point is left out (tests/test_hostile_data.py)


def test_parameters_outside_the_domain_give_minus_infinity():
    prob, data = _data("lotka_volterra", 129, 0.05, seed=3, noise="lognormal")
    with pm.Model() as model:
        p = pm.Normal("p", 0, 10, shape=4)
        s = pm.Normal("s", 0.05, 1, shape=2)  # a prior that allows the invalid sigma = 0
        WeakODELikelihood(
            "U", ode=prob.model, params=p, sigma=s, t=data.t, observed=data.U, ridge=0.0,
            noise="lognormal",
        )  # fmt: skip
    logp = model.compile_logp()
    dlogp = model.compile_dlogp()
    bad = {"p": data.p_true, "s": np.zeros(2)}
    assert logp(bad) == -np.inf
    assert np.all(np.isfinite(dlogp(bad)))
    assert np.isfinite(logp({"p": data.p_true, "s": np.full(2, 0.05)}))


def test_sample_runs_chains_on_every_usable_cpu(monkeypatch):
    # PyMC's own default counts physical cores only: one core for all chains on a 2-CPU VM
    from pymc_wendy.bayes import sampling

    prob, data = _data("logistic", 129, 0.05, 0)
    seen = []
    monkeypatch.setattr(sampling.pm, "sample", lambda draws, **kw: seen.append(kw))
    monkeypatch.setattr(sampling, "_usable_cpus", lambda: 3)
    with _model(prob, data):  # pm.sample is mocked: no trace to map back from whitening
        pmw.sample(10, whiten=False)
        pmw.sample(10, cores=1, whiten=False)
    monkeypatch.setattr(sampling, "_usable_cpus", lambda: 16)
    with _model(prob, data):
        pmw.sample(10, whiten=False)
    assert [kw["cores"] for kw in seen] == [3, 1, 4]


def test_predictive_draws_use_their_own_data_set():
    """Two models of the same sizes: the second's draws must solve from its own estimated
    initial state (pytensor keyed compiled draw functions by the op's text, which does not
    identify the data, so the second model reused the first one's object-mode callback)."""
    import xarray as xr

    prob = get_problem("lotka_volterra")
    draws, data = [], []
    for u0 in ([1.0, 1.0], [2.0, 0.5]):
        d = pmw.simulate(prob.model, prob.p_true, u0=u0, t_span=(0, 5), n_points=101,
                         noise_ratio=0.01, seed=0)  # fmt: skip
        with pm.Model():
            p = pm.Normal("p", prob.p_true, 0.01)
            WeakODELikelihood("U", ode=prob.model, params=p, sigma=0.05, t=d.t, observed=d.U)
            post = xr.Dataset({"p": (("chain", "draw", "p_dim_0"), prob.p_true[None, None])})
            pp = pm.sample_posterior_predictive(post, random_seed=1, progressbar=False)
        draws.append(pp.posterior_predictive["U"].values[0, 0])
        data.append(d.U)
    for own, other, draw in ((0, 1, draws[0]), (1, 0, draws[1])):
        assert np.abs(draw - data[own]).mean() < 0.2 * np.abs(draw - data[other]).mean()


def test_predictive_draw_functions_are_keyed_by_what_a_draw_depends_on():
    """The compiled draw function is cached under a fingerprint of the equations, data and
    solver options: equal for the same model built twice, different for other data or other
    solver options (so a cached function never solves another data set's ODE)."""
    from pymc_wendy.bayes.distribution import _fingerprint

    prob, data = _data("lotka_volterra", 41, 0.05, seed=0)

    def op(U, solver=None):
        with pm.Model():
            p = pm.Normal("p", 0, 10, shape=4)
            rv = WeakODELikelihood(
                "U", ode=prob.model, params=p, t=data.t, observed=U, sigma=0.05, solver=solver
            )
        return rv.owner.op

    key = _fingerprint(op(data.U))
    assert isinstance(key, int) and key == _fingerprint(op(data.U))
    assert _fingerprint(op(data.U * 1.01)) != key
    assert _fingerprint(op(data.U, solver={"rtol": 1e-8})) != key


def test_observed_terms_name_their_dims_from_the_data():
    """Each term gets its own time dim (the kept times, datetimes as given) and shares the
    state dim; the user's dims win, and a differing ``state`` coordinate is not reused."""
    import pandas as pd

    prob, data = _data("lotka_volterra", 41, 0.05, seed=0)
    ode = prob.model
    days = pd.date_range("2021-03-01", periods=data.t.size, freq="D")
    U = pd.DataFrame(data.U, index=days, columns=ode.states)
    U.iloc[3, 0] = np.nan  # a missing entry: its row is left out of the term and its dim
    with pm.Model(coords={"t": data.t, "s": ["a", "b"]}) as model:
        p = pm.Normal("p", 0, 10, shape=len(ode.params))
        with pytest.warns(pmw.MissingDataWarning, match="1 of 41 time points"):
            WeakODELikelihood("A", ode=ode, params=p, observed=U)
        WeakODELikelihood("B", ode=ode, params=p, t=data.t[::2], observed=data.U[::2])
        WeakODELikelihood("C", ode=ode, params=p, t=data.t, observed=data.U, dims=("t", "s"))
    assert model.named_vars_to_dims["A"] == ("A_time", "state")
    assert model.named_vars_to_dims["B"] == ("B_time", "state")
    assert model.named_vars_to_dims["C"] == ("t", "s")
    assert list(model.coords["state"]) == list(ode.states)
    np.testing.assert_array_equal(model.coords["A_time"], np.delete(days.to_numpy(), 3))
    np.testing.assert_array_equal(model.coords["B_time"], data.t[::2])
    with pm.Model(coords={"state": ["prey", "predator"], "time": data.t}) as model:
        p = pm.Normal("p", 0, 10, shape=len(ode.params))
        WeakODELikelihood("U", ode=ode, params=p, t=data.t, observed=data.U)
    assert model.named_vars_to_dims["U"] == ("time", "U_state")


def test_sample_raises_target_accept_for_hierarchical_models_only(monkeypatch):
    """A free variable without a WENDy start (a group-level mean, say) means a hierarchical
    model: target_accept 0.95 unless the user gives one (docs/experiments.md)."""
    from pymc_wendy.bayes import sampling

    prob, data = _data("logistic", 129, 0.05, 0)
    seen = []
    monkeypatch.setattr(sampling.pm, "sample", lambda draws, **kw: seen.append(kw))
    with _model(prob, data):  # every free variable started: PyMC's default
        pmw.sample(10, whiten=False)
    with pm.Model():
        mu = pm.Normal("mu", 1, 1)
        p = pm.Normal("p", mu, 1, shape=2)
        WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
        pmw.sample(10)
        pmw.sample(10, target_accept=0.9)
    assert [kw.get("target_accept") for kw in seen] == [None, 0.95, 0.9]
