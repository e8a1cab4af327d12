"""The weak-versus-exact check (:func:`pymc_wendy.check_weak`) against closed forms and
cases where the weak posterior is known to be off."""

import numpy as np
import pymc as pm
import pytest
import xarray as xr
from conftest import DRIFT_U0_SD, drift_posterior

import pymc_wendy as pw
from pymc_wendy.bayes.check import N_DRAWS, WeakPosteriorWarning, check_weak


@pytest.fixture(scope="module")
def drift():
    """The drift model's weak posterior, and the exact posterior's mean and sd of ``a``."""
    model, idata, mean, cov = drift_posterior()
    return model, idata, mean[0], np.sqrt(cov[0, 0])


def test_shift_and_sd_ratio_are_the_closed_form_ones(drift):
    """The check's shift of ``a`` is the exact posterior mean's distance from the weak one,
    in weak sds, and its sd ratio the exact sd over the weak one, each within the Monte
    Carlo error of its weighted estimate."""
    model, idata, exact_mean, exact_sd = drift
    a = idata.posterior["a"].values.ravel()
    true_shift = (exact_mean - a.mean()) / a.std()
    initial = pm.Normal.dist(0.0, DRIFT_U0_SD, shape=1)
    check = check_weak(idata, model, initial_state=initial, random_seed=0, warn=False)
    assert check.attrs["verdict"] in ("agrees", "differs")
    assert check.attrs["n_draws"] == min(N_DRAWS, a.size) and check.attrs["n_failed"] == 0
    # the weighted mean of n draws with importance ESS e: error about exact_sd / sqrt(e)
    ess = check.attrs["importance_ess"]
    tol = 4 * exact_sd / np.sqrt(ess) / a.std()
    shift = float(check["a"].sel(statistic="shift"))
    assert abs(shift - true_shift) < tol, (shift, true_shift, tol)
    # a weighted sd's relative error is about 1 / sqrt(2 ESS) for a Gaussian
    true_ratio = exact_sd / a.std()
    ratio = float(check["a"].sel(statistic="sd_ratio"))
    assert abs(ratio / true_ratio - 1) < 4 / np.sqrt(2 * ess), (ratio, true_ratio, ess)
    assert check.attrs["min_sd_ratio"] == check.attrs["max_sd_ratio"] == ratio
    assert check.attrs["pareto_k"] < 0.7
    if abs(abs(true_shift) - 0.3) > tol and abs(true_shift) > 0.3:  # clear-cut
        assert check.attrs["verdict"] == "differs"


@pytest.mark.filterwarnings("ignore::pymc_wendy.DivergenceWarning")  # the weak posterior is poor
def test_a_short_noisy_series_is_flagged_with_the_fix_named(tmp_path):
    """Lotka-Volterra at 21 points and 10 % noise: the weak posterior is several exact sds
    wide and off centre (docs/validation.md), and the check says so."""
    prob = pw.get_problem("lotka_volterra")
    data = prob.simulate(noise_ratio=0.1, n_points=21, seed=0)
    ode = prob.model
    with pm.Model(coords={"param": ode.params, "state": ode.states}):
        p = pm.Normal("p", 0, 10, dims="param")
        sigma = pm.HalfNormal("sigma", 1, dims="state")
        pw.WeakODELikelihood("U", ode=ode, params=p, sigma=sigma, t=data.t, observed=data.U)
        with pytest.warns(WeakPosteriorWarning, match="forward_correction"):
            idata = pw.sample(300, chains=2, random_seed=1, progressbar=False, correction=None)
    check = idata["weak_check"].to_dataset()
    assert check.attrs["verdict"] == "differs"
    idata.to_netcdf(tmp_path / "checked.nc")  # the group and its attributes survive netCDF
    back = xr.open_datatree(tmp_path / "checked.nc")
    assert back["weak_check"].attrs["verdict"] == "differs"
    assert check["p"].dims == ("statistic", "param") and check["sigma"].dims[1] == "state"
    # measured: the rates' sds 1.6-1.8 times the exact ones (the issue's real-data case)
    assert check.attrs["max_sd_ratio"] > 1.25 or check.attrs["min_sd_ratio"] < 0.8
    assert check.attrs["pareto_k"] > 0.7 or check.attrs["max_shift"] > 0.3


def test_models_without_a_forward_solve_are_skipped_with_a_note():
    """A model without weak terms (pw.sample_sft's power relaxation samples any model) has
    no forward twin: skipped, the reason in the note, no warning."""
    with pm.Model() as model:
        pm.Normal("x", 0.0, 1.0)
    idata = _fake_posterior({"x": np.random.default_rng(0).normal(size=(2, 50))})
    check = check_weak(idata, model)
    assert check.attrs["verdict"] == "skipped"
    assert (
        "no forward solve" in check.attrs["note"] and "no WeakODELikelihood" in check.attrs["note"]
    )


def test_a_chaotic_span_is_skipped_with_a_note():
    """Lorenz over 40 time units: du/du0 grows by 1e6 or more, and the solver's error with it."""
    ode = pw.get_problem("lorenz").model
    truth = np.array([10.0, 28.0, 8.0 / 3.0])
    data = pw.simulate(
        ode, truth, u0=[2, 1, 1], t_span=(0, 40), n_points=801, noise_ratio=0.05, seed=0
    )
    with pm.Model() as model:
        p = pm.Normal("p", 0, 30, shape=3)
        pw.WeakODELikelihood("U", ode=ode, params=p, t=data.t, observed=data.U, sigma=data.sigma)
    rng = np.random.default_rng(0)
    idata = _fake_posterior({"p": truth * (1 + 1e-3 * rng.standard_normal((2, 50, 3)))})
    check = check_weak(idata, model, random_seed=0)
    assert check.attrs["verdict"] == "skipped" and check.attrs["note"].startswith("chaotic")


def test_hostile_inputs(drift):
    model, idata, _, _ = drift
    with pytest.raises(TypeError, match="a DataTree with a posterior group"):
        check_weak(idata.posterior.to_dataset(), model)
    with pytest.raises(TypeError, match="a DataTree with a posterior group"):
        check_weak(xr.DataTree(), model)
    with pytest.raises(ValueError, match="has 0 draws; the check needs at least 50"):
        check_weak(idata.isel(draw=slice(0, 0)), model)
    with pytest.raises(ValueError, match="has 10 draws"):
        check_weak(idata.isel(draw=slice(0, 5)), model)
    with pytest.raises(ValueError, match="n_draws must be an integer >= 50"):
        check_weak(idata, model, n_draws=10)
    with pytest.raises(ValueError, match="n_draws must be an integer >= 50"):
        check_weak(idata, model, n_draws=200.5)
    with model, pytest.raises(TypeError, match="check must be True or False"):
        pw.sample(10, check="yes")
    # sample_sft takes the same options, refused before anything is compiled
    for bad in ("exact", ["auto"], np.array(["auto"])):
        with model, pytest.raises(ValueError, match="correction must be 'auto', 'forward' or None"):
            pw.sample_sft(10, correction=bad)
    with model, pytest.raises(TypeError, match="check must be True or False"):
        pw.sample_sft(10, check=1)
    # NaN draws are left out, not propagated; all NaN: a failed check that says so
    nan = idata.copy()
    a = nan.posterior["a"].values.copy()
    a[0, :100] = np.nan
    nan["posterior"] = nan.posterior.to_dataset().assign(a=(("chain", "draw"), a))
    check = check_weak(nan, model, warn=False, random_seed=0)
    assert np.all(np.isfinite(check["a"])) and check.attrs["verdict"] in ("agrees", "differs")
    a[:] = np.nan
    nan["posterior"] = nan.posterior.to_dataset().assign(a=(("chain", "draw"), a))
    with pytest.warns(WeakPosteriorWarning, match="could not be checked"):
        check = check_weak(nan, model)
    assert check.attrs["verdict"] == "failed"


def _fake_posterior(values: dict) -> xr.DataTree:
    posterior = xr.Dataset({k: (("chain", "draw", *(f"{k}_dim_{i}" for i in range(v.ndim - 2))), v)
                            for k, v in values.items()})  # fmt: skip
    return xr.DataTree.from_dict({"posterior": posterior})


def test_an_exact_sd_of_zero_is_reported_not_a_division_by_zero():
    # pk_iv_doses from stuck weak chains: the weights on one draw gave an exact sd of 0, and
    # the verdict raised "float division by zero" (with numpy's log(0) warning first)
    from pymc_wendy.bayes.check import _verdict

    moments = {"p": np.array([[0.1, 0.2], [0.0, 1.0]]), "sigma": np.array([0.0, 1.1])}
    verdict, note, numbers = _verdict(moments, 0.3)
    assert verdict == "differs" and "the sd of p[0] is 0.00 times the weak one" in note
    assert numbers["min_sd_ratio"] == 0.0


def test_a_laplace_fit_without_a_mode_is_a_failed_check_that_says_why(drift, monkeypatch):
    """Hindmarsh-Rose at 513 points: every local fit from the weak posterior stops where
    the Hessian is indefinite. Then the check fails, saying the exact mode may be out of the
    weak posterior's reach, and the warning does not promise the exact posterior."""
    from pymc_wendy.bayes import check as check_module

    model, idata, _, _ = drift
    starts = []

    def no_mode(gradient, x0, new, scale):
        starts.append(len(x0))
        return x0[0], None

    monkeypatch.setattr(check_module, "_fit_laplace", no_mode)
    initial = pm.Normal.dist(0.0, DRIFT_U0_SD, shape=1)
    with pytest.warns(WeakPosteriorWarning, match="tries the exact stage") as record:
        check = check_weak(idata, model, initial_state=initial, random_seed=0)
    assert check.attrs["verdict"] == "failed"
    assert "beyond the weak posterior's reach" in check.attrs["note"]
    assert "gives the exact posterior" not in str(record[0].message)
    assert starts == [1, 1]  # the weak mean, then the densest weak draw
