"""Every result the library returns is kept the ArviZ way: written to netCDF and read back
with its groups, variables and attributes (netCDF refuses, for one, boolean attributes)."""

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_wendy as pw


@pytest.fixture(scope="module")
def logistic():
    prob = pw.get_problem("logistic")
    data = prob.simulate(noise_ratio=0.05, subsample=4, seed=0)
    with pm.Model() as model:
        p = pm.Normal("p", 0.0, 10.0, shape=prob.model.n_params)
        sigma = pm.HalfNormal("sigma", 1.0)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, sigma=sigma, t=data.t, observed=data.U)
    return prob, data, model


def _round_trip(tree: xr.DataTree, path) -> xr.DataTree:
    tree.to_netcdf(path)
    back = xr.open_datatree(path)
    assert set(back.children) == set(tree.children)
    for name, group in tree.children.items():
        assert set(back[name].data_vars) == set(group.data_vars), name
        assert back[name].attrs.keys() == group.attrs.keys(), name
    assert back.attrs.keys() == tree.attrs.keys()
    return back


@pytest.mark.filterwarnings("ignore::pymc_wendy.SFTWarning")  # 2 rungs, 30 draws: storage only
def test_sampling_results_survive_netcdf(logistic, tmp_path):
    _, _, model = logistic
    with model:
        # unchecked: the check's and the correction's groups are round-tripped in test_check.py
        # and test_correction.py, and the check costs this storage test two compilations
        idata = pw.sample(100, tune=100, chains=2, progressbar=False, random_seed=0, check=False)
        laplace = pw.laplace(random_seed=0)
        sft = pw.sample_sft(
            30, tune=30, chains=2, rungs=2, progressbar=False, random_seed=0, check=False
        )
    back = _round_trip(idata, tmp_path / "sample.nc")
    np.testing.assert_array_equal(back.posterior["p"], idata.posterior["p"])
    _round_trip(laplace, tmp_path / "laplace.nc")
    _round_trip(sft, tmp_path / "sft.nc")


def test_fit_results_survive_netcdf(logistic, tmp_path):
    prob, data, _ = logistic
    result = pw.fit(prob.model, data.t, data.U)
    ds = result.to_xarray()
    ds.to_netcdf(tmp_path / "fit.nc")
    back = xr.open_dataset(tmp_path / "fit.nc")
    assert back.attrs["success"] == int(result.success)
    np.testing.assert_allclose(back["estimate"], ds["estimate"])
