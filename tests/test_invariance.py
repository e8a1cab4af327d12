"""Units do not change answers: rescaling time or data rescales the estimate and nothing else.

Lotka-Volterra, ``dx/dt = p1 x + p2 x y``, ``dy/dt = p3 y + p4 x y``: with ``t -> c t`` every
parameter becomes ``p / c``; with ``U -> a U`` the interaction rates ``p2, p4`` become
``p / a``. Estimates and standard errors mapped back must agree with the unscaled fit to
1e-6 relative (issue 33), for every estimator that needs no forward solve in the default run.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.weak.test_functions import build_test_functions

P = pw.get_problem("lotka_volterra")
DATA = P.simulate(n_points=129, noise_ratio=0.1, seed=0)
SCALINGS = [(1e-3, 1.0), (1e-2, 1.0), (1e2, 1.0), (1e3, 1.0), (1.0, 1e-12), (1.0, 1e-6), (1.0, 1e6)]


def _back(x, ct: float, a: float) -> np.ndarray:
    x = np.asarray(x, dtype=float) * ct
    x[[1, 3]] *= a
    return x


@pytest.fixture(scope="module", params=["mle", "irls", "wls"])
def reference(request):
    return request.param, pw.fit(P.model, DATA.t, DATA.U, method=request.param)


@pytest.mark.parametrize(("ct", "a"), SCALINGS)
def test_estimates_and_errors_rescale(reference, ct, a):
    method, ref = reference
    res = pw.fit(P.model, DATA.t * ct, DATA.U * a, method=method)
    assert res.success
    np.testing.assert_allclose(_back(res.x, ct, a), ref.x, rtol=1e-6)
    np.testing.assert_allclose(np.abs(_back(res.stderr, ct, a)), ref.stderr, rtol=1e-6)


def test_bias_corrected_fit_rescales():
    ref = pw.fit(P.model, DATA.t, DATA.U, bias_correction="analytic")
    res = pw.fit(P.model, DATA.t * 1e3, DATA.U * 1e-6, bias_correction="analytic")
    np.testing.assert_allclose(_back(res.x, 1e3, 1e-6), ref.x, rtol=1e-6)
    np.testing.assert_allclose(np.abs(_back(res.stderr, 1e3, 1e-6)), ref.stderr, rtol=1e-6)


@pytest.mark.parametrize("c", [1e-3, 1e3])
def test_test_function_radii_rescale_with_time(c):
    base = build_test_functions(DATA.t, DATA.U)
    scaled = build_test_functions(DATA.t * c, DATA.U * 1e-6)
    assert scaled.K == base.K
    np.testing.assert_allclose(scaled.radii, base.radii * c, rtol=1e-12)
    np.testing.assert_allclose(scaled.phi, base.phi, atol=1e-12)
    np.testing.assert_allclose(scaled.dphi, base.dphi / c, rtol=1e-9, atol=1e-12 / c)


def test_long_time_span_is_not_capped_in_time_units():
    """WENDy.jl caps radii at 5 time units: a series in other units got other radii."""
    base = build_test_functions(DATA.t, DATA.U)
    hours = build_test_functions(DATA.t * 100, DATA.U)
    np.testing.assert_allclose(hours.radii, base.radii * 100, rtol=1e-12)


def test_datetime_axis_counts_days_from_the_first_point():
    pd = pytest.importorskip("pandas")
    days = DATA.t * 30.0
    when = pd.Timestamp("2021-03-01") + pd.to_timedelta(days, unit="D")
    ref = pw.fit(P.model, days, DATA.U)
    res = pw.fit(P.model, pd.DatetimeIndex(when), DATA.U)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-9)
    hours = pw.fit(P.model, pd.DatetimeIndex(when), DATA.U, time_unit="h")
    np.testing.assert_allclose(hours.x * 24.0, ref.x, rtol=1e-6)
    # the result says how its numeric times map back to the user's
    assert (res.time_origin, res.time_unit) == (np.datetime64("2021-03-01"), "D")
    assert hours.time_unit == "h" and ref.time_unit is None and ref.time_origin is None
    back = hours.time_origin + np.round(hours.t * 3600).astype("timedelta64[s]")
    np.testing.assert_array_equal(back, when.values.astype("datetime64[s]"))


@pytest.mark.slow
def test_posterior_rescales_within_monte_carlo_error():
    pm = pytest.importorskip("pymc")

    def run(ct: float):
        with pm.Model() as model:
            p = pm.Normal("p", P.p_true / ct, 2.0 * np.abs(P.p_true) / ct)
            pw.WeakODELikelihood("U", ode=P.model, params=p, t=DATA.t * ct, observed=DATA.U)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pw.sample(400, model=model, tune=300, chains=2, random_seed=3,
                              progressbar=False, check=False)  # fmt: skip
        return idata.posterior["p"].to_numpy().reshape(-1, 4) * ct

    a, b = run(1.0), run(100.0)
    sd = a.std(axis=0)
    # two independent chains of ~800 draws: the difference of means has sd about
    # sd * sqrt(2 / ESS); 5 of those with ESS >= 200 is a tolerance of 0.5 sd
    np.testing.assert_array_less(np.abs(a.mean(axis=0) - b.mean(axis=0)), 0.5 * sd)
    np.testing.assert_allclose(b.std(axis=0), sd, rtol=0.25)
