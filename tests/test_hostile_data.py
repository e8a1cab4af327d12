"""Hostile and unusual data, one case per test (issue 33): each was a silent wrong answer or an
unclear error before. Units are covered in depth by ``test_invariance.py``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.model.data import MissingDataWarning, as_data

pd = pytest.importorskip("pandas")
xr = pytest.importorskip("xarray")

P = pw.get_problem("lotka_volterra")
DATA = P.simulate(n_points=129, noise_ratio=0.1, seed=0)


@pytest.fixture(scope="module")
def ref():
    return pw.fit(P.model, DATA.t, DATA.U)


def _quiet_fit(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingDataWarning)
        return pw.fit(*args, **kwargs)


def test_time_in_hundredths_rescales_the_answer(ref):
    res = pw.fit(P.model, DATA.t * 100, DATA.U)
    np.testing.assert_allclose(res.x * 100, ref.x, rtol=1e-6)


def test_time_in_milliseconds_fits(ref):
    res = pw.fit(P.model, DATA.t * 1e3, DATA.U)
    assert res.success
    np.testing.assert_allclose(res.x * 1e3, ref.x, rtol=1e-6)


def test_datetime_index_is_a_time_axis(ref):
    when = pd.Timestamp("2020-01-01") + pd.to_timedelta(DATA.t, unit="D")
    res = pw.fit(P.model, when, DATA.U)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-9)


def test_period_index_counts_from_each_period_start():
    """A DataFrame indexed by periods (issue 54, defect 8): each period at its start, not all
    at one instant ("t[0] = 0 >= t[1] = 0")."""
    days = pd.period_range("2020-01-01", periods=DATA.t.size, freq="D")
    frame = pd.DataFrame(DATA.U, index=days, columns=P.model.states)
    res = pw.fit(P.model, U=frame)
    daily = pw.fit(P.model, np.arange(DATA.t.size, dtype=float), DATA.U)
    np.testing.assert_allclose(res.x, daily.x, rtol=1e-9)
    hours = pd.period_range("2020-01-01", periods=5, freq="h")
    t, _, unit = pw.model.data.as_times(list(hours), time_unit="h")
    np.testing.assert_allclose(t, np.arange(5.0))
    assert unit == "h"


def test_time_zone_aware_times_count_elapsed_time_without_warnings():
    """Hourly data across the spring daylight saving change in Paris (issue 54, defect 11):
    elapsed hours between UTC instants, no numpy time-zone warning (the conftest fails on
    one), the same fit as naive UTC times."""
    utc = pd.date_range("2024-03-30 20:00", periods=DATA.t.size, freq="h", tz="UTC")
    paris = utc.tz_convert("Europe/Paris")  # wall clock jumps from 02:00 to 03:00
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t, _, unit = pw.model.data.as_times(paris, time_unit="h")
    np.testing.assert_allclose(t, np.arange(DATA.t.size, dtype=float))
    frame = pd.DataFrame(DATA.U, index=paris, columns=P.model.states)
    res = pw.fit(P.model, U=frame, time_unit="h")
    naive = pw.fit(P.model, U=frame.set_axis(utc.tz_localize(None)), time_unit="h")
    np.testing.assert_allclose(res.x, naive.x, rtol=1e-12)


def test_a_column_too_many_is_named_before_missing_entries():
    """A 1-state model given 2 columns, one of them all NaN (the hidden state of the model
    an input-output equation came from): the column count, not "every time point has a
    missing entry" (issue 54, defect 6)."""
    logistic = pw.get_problem("logistic")
    d = logistic.simulate(n_points=65, noise_ratio=0.05, seed=0)
    U = np.column_stack([np.full(d.t.size, np.nan), d.U[:, 0]])
    with pytest.raises(ValueError, match="U has 2 columns but the model has 1 states"):
        pw.fit(logistic.model, d.t, U)


def test_timedelta_axis_defaults_to_seconds(ref):
    res = pw.fit(P.model, pd.to_timedelta(DATA.t, unit="s"), DATA.U)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-9)


def test_time_unit_with_numeric_times_is_refused():
    with pytest.raises(ValueError, match="time_unit applies to datetime"):
        pw.fit(P.model, DATA.t, DATA.U, time_unit="h")


def test_unknown_time_unit_is_refused():
    when = pd.Timestamp("2020-01-01") + pd.to_timedelta(DATA.t, unit="D")
    with pytest.raises(ValueError, match="time_unit must be"):
        pw.fit(P.model, when, DATA.U, time_unit="fortnights")


def test_missing_time_is_refused():
    when = pd.Series(pd.Timestamp("2020-01-01") + pd.to_timedelta(DATA.t, unit="D"))
    when[3] = pd.NaT
    with pytest.raises(ValueError, match="NaT"):
        pw.fit(P.model, when, DATA.U)


def test_tiny_data_keep_their_standard_errors(ref):
    res = pw.fit(P.model, DATA.t, DATA.U * 1e-12)
    np.testing.assert_allclose(res.stderr[[0, 2]], ref.stderr[[0, 2]], rtol=1e-6)


@pytest.mark.parametrize("scale", [1e150, 1e300, 1e-150])
def test_data_beyond_double_precision_get_a_clear_error(scale):
    with pytest.raises(ValueError, match="rescale the data"):
        pw.fit(P.model, DATA.t, DATA.U * scale)


def test_time_beyond_double_precision_gets_a_clear_error():
    with pytest.raises(ValueError, match="express t in another unit"):
        pw.fit(P.model, DATA.t * 1e200, DATA.U)


def test_dataframe_columns_are_matched_by_name(ref):
    df = pd.DataFrame({"y": DATA.U[:, 1], "x": DATA.U[:, 0]}, index=DATA.t)
    res = pw.fit(P.model, None, df)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-12)


def test_dataframe_with_other_column_names_is_refused():
    df = pd.DataFrame(DATA.U, columns=["prey", "predator"], index=DATA.t)
    with pytest.raises(ValueError, match=r"missing \['x', 'y'\]; unknown \['prey', 'predator'\]"):
        pw.fit(P.model, None, df)


def test_dataframe_without_labels_is_read_by_position(ref):
    res = pw.fit(P.model, DATA.t, pd.DataFrame(DATA.U))
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-12)


def test_dataarray_dims_are_used_by_name(ref):
    da = xr.DataArray(
        DATA.U.T, dims=("species", "time"), coords={"species": ["x", "y"], "time": DATA.t}
    )
    res = pw.fit(P.model, None, da)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-12)


def test_dataarray_without_state_coordinate_is_refused():
    da = xr.DataArray(DATA.U, dims=("time", "state"), coords={"time": DATA.t})
    with pytest.raises(ValueError, match="cannot tell the state dimension"):
        pw.fit(P.model, None, da)


def test_missing_times_are_required():
    with pytest.raises(ValueError, match="t is missing"):
        pw.fit(P.model, None, DATA.U)


def test_masked_outlier_is_not_used():
    U = np.ma.masked_array(DATA.U.copy(), mask=np.zeros(DATA.U.shape, dtype=bool))
    U[40, 0] = 999.0
    U[40, 0] = np.ma.masked
    with pytest.warns(MissingDataWarning, match="1 of 129 time points"):
        res = pw.fit(P.model, DATA.t, U)
    keep = np.arange(DATA.t.size) != 40
    expected = pw.fit(P.model, DATA.t[keep], DATA.U[keep])
    np.testing.assert_allclose(res.x, expected.x, rtol=1e-12)


def test_nan_entries_leave_their_time_points_out():
    U = DATA.U.copy()
    U[[10, 70], [1, 0]] = np.nan
    res = _quiet_fit(P.model, DATA.t, U)
    keep = ~np.isin(np.arange(DATA.t.size), [10, 70])
    expected = pw.fit(P.model, DATA.t[keep], DATA.U[keep])
    np.testing.assert_allclose(res.x, expected.x, rtol=1e-12)
    assert res.t.size == 127


def test_all_rows_missing_is_refused():
    # a gap in every row, in turns (a column of NaN is a hidden state: test_hidden_states)
    U = DATA.U.copy()
    U[::2, 0] = np.nan
    U[1::2, 1] = np.nan
    with pytest.raises(ValueError, match="every time point has a missing"):
        pw.fit(P.model, DATA.t, U)


def test_infinite_data_stay_an_error():
    U = DATA.U.copy()
    U[5, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        pw.fit(P.model, DATA.t, U)


def test_as_data_reports_what_was_kept():
    U = DATA.U[:5].copy()
    U[2, 0] = np.nan
    out = as_data(DATA.t[:5], U, ("x", "y"), warn=False)
    assert out.kept.tolist() == [True, True, False, True, True]
    assert out.t_given.size == 5 and out.t.size == 4


def test_several_data_sets_in_one_term_get_a_clear_error():
    pm = pytest.importorskip("pymc")
    with pm.Model():
        p = pm.Normal("p", P.p_true, 1.0)
        with pytest.raises(ValueError, match="give each experiment its own"):
            pw.WeakODELikelihood("U", ode=P.model, params=p, t=DATA.t, observed=[DATA.U, DATA.U])


def test_distribution_reads_a_dataframe_with_its_index():
    pm = pytest.importorskip("pymc")
    df = pd.DataFrame({"y": DATA.U[:, 1], "x": DATA.U[:, 0]}, index=DATA.t)
    with pm.Model() as model:
        p = pm.Normal("p", P.p_true, 1.0)
        pw.WeakODELikelihood("U", ode=P.model, params=p, observed=df)
    likelihood = model["U"].owner.op.likelihood
    np.testing.assert_array_equal(likelihood.U, DATA.U)


def test_short_series_gets_enough_weak_residuals():
    """21 points: WENDy's corner rule gave 1-2 test functions for 4 parameters (16 of 50
    fits failed); the short-series rule gives at least 2 J weak residuals."""
    d = P.simulate(n_points=21, noise_ratio=0.05, seed=0)
    lik = pw.WeakLikelihood(P.model, d.t, d.U, sigma=d.sigma)
    assert lik.test_functions.K * 2 >= 2 * P.model.n_params
    default = pw.build_test_functions(d.t, d.U)
    assert default.K * 2 < 2 * P.model.n_params  # what the rule replaced


def test_noise_estimate_from_a_short_series_warns():
    d = P.simulate(n_points=21, noise_ratio=0.05, seed=0)
    with pytest.warns(pw.ShortSeriesWarning, match="estimated from 21 time points"):
        pw.WeakLikelihood(P.model, d.t, d.U)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pw.ShortSeriesWarning)
        pw.WeakLikelihood(P.model, d.t, d.U, sigma=d.sigma)


def test_time_unit_without_fixed_length_is_refused():
    when = pd.Timestamp("2020-01-01") + pd.to_timedelta(DATA.t, unit="D")
    with pytest.raises(ValueError, match="no fixed length"):
        pw.fit(P.model, when, DATA.U, time_unit="Y")


def test_dataframe_with_a_repeated_state_column_is_refused():
    df = pd.DataFrame(np.column_stack([DATA.U, DATA.U[:, 0]]), index=DATA.t)
    df.columns = ["x", "y", "x"]
    with pytest.raises(ValueError, match="repeat a name"):
        pw.fit(P.model, None, df)


def test_radius_range_stays_checked():
    with pytest.raises(ValueError, match="radius_range must be increasing"):
        pw.build_test_functions(DATA.t, DATA.U, radius_range=(0.5, 0.1))


def test_short_series_noise_comes_from_forward_residuals():
    """Below 64 points the filter misjudges the noise (3-7x on Lotka-Volterra at 21 points):
    fit's default is the forward-residual estimate, without a warning; sigma="filter" keeps
    WENDy's choice and warns."""
    lg = pw.get_problem("logistic")
    d = lg.simulate(n_points=21, noise_ratio=0.1, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pw.ShortSeriesWarning)
        res = pw.fit(lg.model, d.t, d.U)
    assert res.success and res.history["noise"]["method"] == "residual"
    explicit = pw.fit(lg.model, d.t, d.U, sigma="residual")
    np.testing.assert_allclose(res.x, explicit.x, rtol=1e-12)
    np.testing.assert_allclose(res.sigma, explicit.sigma, rtol=1e-12)
    with pytest.warns(pw.ShortSeriesWarning):
        filt = pw.fit(lg.model, d.t, d.U, sigma="filter")
    assert "noise" not in filt.history and not np.allclose(filt.sigma, res.sigma)
    long = lg.simulate(n_points=65, noise_ratio=0.1, seed=4)
    assert "noise" not in pw.fit(lg.model, long.t, long.U).history  # the filter from 64 on


def test_eleven_points_fit_without_a_noise_level():
    """The 17-point filter cannot run on 11 points; a shorter stencil starts the residual
    estimate, so the fit needs no sigma."""
    lg = pw.get_problem("logistic")
    d = lg.simulate(n_points=11, noise_ratio=0.05, seed=1)
    res = pw.fit(lg.model, d.t, d.U)
    assert res.success and np.all(np.isfinite(res.stderr)) and np.all(res.stderr > 0)
    assert np.all(np.abs(res.x - lg.p_true) < 4 * res.stderr)


def test_solution_that_explains_none_of_the_data_is_no_fit():
    """Lotka-Volterra on 11 points (3 per period): the weak form returns parameters near zero,
    9 standard errors from the truth; the forward residuals, as large as the data's spread,
    turn that into success=False."""
    d = P.simulate(n_points=11, noise_ratio=0.05, seed=0)
    with pytest.warns(pw.FitWarning, match="explains none of the variation"):
        res = pw.fit(P.model, d.t, d.U)
    assert not res.success and res.status == "no_fit"


def test_short_grids_keep_the_radius_floor():
    """41 points: the floor of 4 spacings was shrunk to 2.5 so that 8x the radius fit, and the
    quadrature error of those bumps biased WENDy-MLE by 2.5-3.9 standard errors. The floor
    now holds and the multiples that do not fit are left out."""
    d = P.simulate(n_points=41, noise_ratio=0.05, seed=0)
    tf = pw.build_test_functions(d.t, d.U)
    h = d.t[1] - d.t[0]
    assert tf.min_radius >= 4 * h - 1e-12 and np.all(tf.radii < 20 * h)
    wendy = pw.build_test_functions(d.t, d.U, radius_range=(0.01, 5))  # the earlier rule
    assert wendy.min_radius < 4 * h


def test_weak_ode_likelihood_short_series_default_is_the_residual_noise():
    pm = pytest.importorskip("pymc")
    lg = pw.get_problem("logistic")
    d = lg.simulate(n_points=21, noise_ratio=0.1, seed=4)
    sig = {}
    for name, sigma in [("default", None), ("residual", "residual"), ("filter", "filter")]:
        with pm.Model() as model, warnings.catch_warnings():
            warnings.simplefilter("ignore", pw.ShortSeriesWarning)
            pw.WeakODELikelihood("U", ode=lg.model, params=lg.p_true, t=d.t, observed=d.U,
                                 sigma=sigma)  # fmt: skip
        sig[name] = model["U"].owner.op.likelihood.sigma
    np.testing.assert_allclose(sig["default"], sig["residual"], rtol=1e-12)
    np.testing.assert_allclose(sig["residual"], pw.fit(lg.model, d.t, d.U).sigma, rtol=1e-6)
    assert not np.allclose(sig["filter"], sig["residual"])


def test_weak_ode_likelihood_short_series_of_a_nonlinear_model_starts_from_the_priors():
    """A model nonlinear in its parameters (oral PK, 41 points) has no start for the fit
    behind the short-series noise estimate, and the distribution takes no p0: it raised
    "give a starting point p0". The priors give one (the best of weak least squares from
    prior draws, as initial_values): the estimate is pw.fit's with the problem's box."""
    pm = pytest.importorskip("pymc")
    pk = pw.get_problem("pk_oral")
    d = pk.simulate(n_points=41, noise_ratio=0.1, seed=0)
    lo, hi = (np.asarray(b) for b in zip(*pk.bounds, strict=True))
    with pm.Model(coords={"param": pk.model.params}):
        p = pm.LogNormal("p", np.log(np.sqrt(lo * hi)), 2.0, dims="param")
        U = pw.WeakODELikelihood("U", ode=pk.model, params=p, t=d.t, observed=d.U)
    boxed = pw.fit(pk.model, d.t, d.U, bounds=pk.bounds)
    assert boxed.history["noise"]["method"] == "residual"
    np.testing.assert_allclose(U.owner.op.likelihood.sigma, boxed.sigma, rtol=1e-6)


def test_short_series_falls_back_to_the_filter_when_the_solve_fails(monkeypatch):
    from pymc_wendy.estimators import _fit
    from pymc_wendy.model.simulate import SimulationError

    def failing(*args, **kwargs):
        raise SimulationError("blew up")

    monkeypatch.setattr(_fit, "residual_noise_of_data", failing)
    lg = pw.get_problem("logistic")
    d = lg.simulate(n_points=21, noise_ratio=0.1, seed=4)
    with pytest.warns(pw.ShortSeriesWarning, match="could not be estimated from forward"):
        res = pw.fit(lg.model, d.t, d.U)
    with pytest.warns(pw.ShortSeriesWarning):
        filt = pw.fit(lg.model, d.t, d.U, sigma="filter")
    np.testing.assert_array_equal(res.x, filt.x)
    with pytest.raises(SimulationError, match="sigma='residual'"):  # asked for: an error
        pw.fit(lg.model, d.t, d.U, sigma="residual")


@pytest.mark.parametrize("bad", ["auto-residual", "Filter", "", "resid"])
def test_unknown_sigma_strings_are_refused(bad):
    """Only "filter" and "residual" name a noise estimate; anything else is an early error
    (the internal short-series switch is not a string a user can pass)."""
    lg = pw.get_problem("logistic")
    d = lg.simulate(n_points=21, noise_ratio=0.1, seed=4)
    with pytest.raises(ValueError, match="'filter' or 'residual'"):
        pw.fit(lg.model, d.t, d.U, sigma=bad)
    pm = pytest.importorskip("pymc")
    with pm.Model(), pytest.raises(ValueError, match="'filter' or 'residual'"):
        pw.WeakODELikelihood("U", ode=lg.model, params=lg.p_true, t=d.t, observed=d.U, sigma=bad)


# --- hostile inputs ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(initial_state=[1.0]), "one value per state"),
        (dict(initial_state=[1.0, np.nan]), "finite"),
        (dict(initial_state={"x": 1.0, "z": 1.0}), "missing \\['y'\\]"),
        (dict(initial_state=[1.0, 1.0], t0=0.5), "after the first observation"),
        (dict(t0=0.0), "without initial_state"),
        (dict(initial_state=["a", 1.0]), "must be 2 numbers"),
        (dict(initial_state=[1.0, 1.0], t0=np.datetime64("2024-01-01")), "numeric"),
        # a known zero with log-normal noise is no longer refused: the weak form uses
        # proportional weights (tests/test_observation.py); a negative one still is
        (dict(initial_state=[-1.0, 1.0], noise="lognormal"), "negative"),
    ],
)
def test_hostile_initial_state(kwargs, message):
    d = P.simulate(n_points=41, noise_ratio=0.02, seed=0)
    with pytest.raises(ValueError, match=message):
        pw.WeakLikelihood(P.model, d.t, np.abs(d.U), sigma=0.1, **kwargs)


def test_hostile_initial_state_refusals():
    d = P.simulate(n_points=41, noise_ratio=0.02, seed=0)
    head = pw.get_problem("head_acceleration")
    h = head.simulate(n_points=101, noise_ratio=0.02, seed=1)
    # order 2: the state and its derivative, known at rest only
    with pytest.raises(ValueError, match=r"one value per state \(2: \['x', \"x'\"\]\)"):
        pw.WeakLikelihood(
            head.model, h.t, h.U, sigma=0.1, inputs=h.inputs, initial_state=np.zeros(1)
        )
    with pytest.raises(ValueError, match="at rest only"):
        pw.WeakLikelihood(
            head.model, h.t, h.U, sigma=0.1, inputs=h.inputs, initial_state=[0.0, 1.0]
        )
    for method in ("deq", "data2ld"):
        with pytest.raises(ValueError, match="would ignore it"):
            pw.fit(P.model, d.t, d.U, method=method, initial_state=P.u0)
    with pytest.raises(ValueError, match="give u0 .* or initial_state"):
        pw.fit(P.model, d.t, d.U, method="oels", initial_state=P.u0, u0=P.u0, sigma=0.1)
    for method in ("mle", "oels", "hybrid"):
        with pytest.raises(ValueError, match="one experiment"):
            pw.fit(P.model, [d.t, d.t], [d.U, d.U], method=method, initial_state=P.u0)
    lik = pw.WeakLikelihood(P.model, d.t, d.U, sigma=0.1)
    with pytest.raises(ValueError, match="initial_state"):
        pw.fit(lik, initial_state=P.u0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pymc as pm

        # an initial state with a prior: first-order models without inputs, one value per
        # state, a numeric t0, no bias correction (it was refused outright before)
        cases = [
            (head.model, h, {}, 2, "order > 1"),
            (IV, IV_PROBLEM.simulate(noise_ratio=0.05, seed=0), {"inputs": IV_PROBLEM.inputs}, 1,
             "has inputs"),
            (P.model, d, {}, 3, "must have 2 entries"),
            (P.model, d, {"bias_correction": "auto"}, 2, "bias_correction"),
        ]  # fmt: skip
        for model, data, extra, n, match in cases:
            with pm.Model(), pytest.raises(ValueError, match=match):
                pw.WeakODELikelihood(
                    "u", ode=model, params=np.ones(model.n_params), t=data.t, observed=data.U,
                    sigma=0.1, initial_state=pm.Normal("x0", shape=n), **extra,
                )  # fmt: skip
        with pm.Model(), pytest.raises(TypeError, match="t0 must be a number"):
            pw.WeakODELikelihood(
                "u", ode=P.model, params=P.p_true, t=d.t, observed=d.U, sigma=0.1,
                initial_state=P.u0, t0=pm.Normal("t0"),
            )  # fmt: skip


def test_hostile_quadrature_option():
    d = P.simulate(n_points=41, noise_ratio=0.02, seed=0)
    with pytest.raises(ValueError, match="quadrature must be one of"):
        pw.WeakLikelihood(P.model, d.t, d.U, sigma=0.1, test_functions={"quadrature": "simpson"})


# --- doses (issue 34) ----------------------------------------------------------------------
IV_PROBLEM = pw.get_problem("pk_iv_doses")
IV, IV_TRUE, IV_DOSES = IV_PROBLEM.model, IV_PROBLEM.p_true, IV_PROBLEM.inputs["dose"]


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (([], 1.0), {}, "at least one dose"),
        (([0.0, np.nan], 1.0), {}, "NaN or infinite"),
        (([0.0, 1.0], [1.0, 2.0, 3.0]), {}, "one number or one per dose"),
        (([0.0, 1.0], [1.0, -2.0]), {}, "amounts must be >= 0"),
        (([0.0, 1.0], 1.0), {"durations": [0.0, -1.0]}, "durations must be >= 0"),
        (([[0.0, 1.0]], 1.0), {}, "one-dimensional"),
    ],
)
def test_doses_hostile_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        pw.Doses(*args, **kwargs)


def test_doses_need_split_test_functions():
    t = np.linspace(0.0, 24.0, 97)
    U = pw.solve(IV, IV_TRUE, [0.0], t, inputs={"dose": IV_DOSES})
    tf = pw.build_test_functions(t, U)  # built without the dose times
    with pytest.raises(ValueError, match="do not integrate across"):
        pw.WeakLikelihood(IV, t, U, inputs={"dose": IV_DOSES}, sigma=0.1, test_functions=tf)
    with pytest.raises(ValueError, match="as matrices"):
        pw.WeakLikelihood(IV, t, U, inputs={"dose": IV_DOSES}, sigma=0.1,
                          test_functions=(tf.phi, tf.dphi))  # fmt: skip
    with pytest.raises(ValueError, match="trapezoid rule integrates across a jump"):
        pw.build_test_functions(t, U, breaks=[8.0], quadrature="trapezoid")
    with pytest.raises(ValueError, match="no data point between the breaks"):
        pw.build_test_functions(t, U, breaks=[8.01, 8.1], min_radius=2.0)


def test_local_test_functions_on_a_short_series_warn_that_they_cannot_determine_the_parameters():
    # 21 points leave room for one local bump: 2 weak residuals for 4 parameters, which a
    # posterior would silently fill in from its prior
    from pymc_wendy.weak.likelihood import ShortSeriesWarning

    prob = pw.get_problem("lotka_volterra")
    d = prob.simulate(n_points=21, noise_ratio=0.05, seed=1)
    with pytest.warns(ShortSeriesWarning, match="2 weak residuals for 4 parameters"):
        pw.WeakLikelihood(prob.model, d.t, d.U, sigma=0.1, test_functions="local")
    long = prob.simulate(n_points=257, noise_ratio=0.05, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShortSeriesWarning)
        pw.WeakLikelihood(prob.model, long.t, long.U, test_functions="local")


@pytest.mark.parametrize(
    ("which", "cast", "match"),
    [
        ("U", lambda a: a > a.mean(), "U is boolean"),
        ("U", lambda a: a + 0.5j, "U is complex"),
        ("t", lambda a: a.astype(complex), "t is complex"),
    ],
)
def test_boolean_and_complex_arrays_are_refused(which, cast, match):
    # numpy's float conversion would give 0/1, or drop the imaginary part with a warning only
    t, U = (cast(DATA.t), DATA.U) if which == "t" else (DATA.t, cast(DATA.U))
    with pytest.raises(ValueError, match=match):
        pw.fit(P.model, t, U)


def test_hostile_option_values_name_the_option():
    """Issue 54's defects 4 and 9: an int for input_output's observed state, Kmax=None and a
    radius_range below two time steps gave a TypeError from int(), a TypeError from
    iterating and numpy's "SVD did not converge"."""
    two = pw.get_problem("pk_two_compartment")
    with pytest.raises(TypeError, match="observed must be the name of a state"):
        pw.input_output(two.model, 1)
    lg = pw.get_problem("logistic")
    d = lg.simulate(noise_ratio=0.05, subsample=4, seed=0)
    with pytest.raises(ValueError, match="Kmax must be an integer >= 1"):
        pw.WeakLikelihood(lg.model, d.t, d.U, test_functions={"Kmax": None})
    with pytest.raises(ValueError, match=r"radius_range .* largest radius is 0 time steps"):
        pw.WeakLikelihood(lg.model, d.t, d.U, test_functions={"radius_range": (1e-5, 1e-4)})
