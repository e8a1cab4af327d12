"""Doses (bolus and infusion inputs) and unobserved states (input-output equations)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

import pymc_wendy as pw
from pymc_wendy.model.input_output import DerivativeInput, forward_system, input_output
from pymc_wendy.weak.noise import estimate_noise
from pymc_wendy.weak.test_functions.quadrature import ProductRule, segments

# one-compartment IV bolus: C' = -ke C + dose / V, three doses
IV_PROBLEM = pw.get_problem("pk_iv_doses")
IV, IV_TRUE, IV_DOSES = IV_PROBLEM.model, IV_PROBLEM.p_true, IV_PROBLEM.inputs["dose"]

# one-compartment oral absorption, three doses; the gut is unobserved
ORAL = pw.get_problem("pk_oral_doses").model
ORAL_TRUE = pw.get_problem("pk_oral_doses").p_true

# two-compartment oral absorption, central compartment observed
TWO = pw.get_problem("pk_two_compartment").model
TWO_TRUE = pw.get_problem("pk_two_compartment").p_true


def _iv_exact(t, ke=0.2, V=10.0, times=(0.0, 8.0, 16.0), amount=100.0):
    """Closed form; at a dose time the value before the dose (the convention)."""
    c = np.zeros_like(t)
    for tau in times:
        c += np.where(t > tau, amount / V * np.exp(-ke * (t - tau)), 0.0)
    return c


def _tf(t, **kw):
    return pw.build_test_functions(t, np.sin(t)[:, None], min_radius=2.0, **kw)


# --- Doses ---------------------------------------------------------------------------------
def test_dose_times_as_datetimes_or_durations_are_counted_like_the_data():
    """Issue 54, defect 3: datetimes became nanoseconds since 1970 (every dose outside the
    data); Timestamps a TypeError. Now counted from the data's first time, in its unit."""
    pd = pytest.importorskip("pandas")
    start = pd.Timestamp("2020-01-01")
    when = pd.to_datetime(["2020-01-01 06:00", "2020-01-02 18:00"])
    numeric = pw.Doses([6.0, 42.0], [100, 50], durations=[0.0, 0.5])
    for times in (when, list(when), when.to_numpy()):
        d = pw.Doses(times, [100, 50], durations=[0.0, 0.5], origin=start, time_unit="h")
        np.testing.assert_allclose(d.bolus_times, numeric.bolus_times, rtol=1e-12)
        np.testing.assert_allclose(d.infusions, numeric.infusions, rtol=1e-12)
    # durations as timedeltas too, on a duration axis (seconds by default)
    d = pw.Doses(
        pd.to_timedelta([0, 3600], unit="s"), [1, 2],
        durations=pd.to_timedelta([0, 600], unit="s"), origin=pd.Timedelta(0),
    )  # fmt: skip
    np.testing.assert_allclose(d.infusions[0], [3600.0])
    np.testing.assert_allclose(d.infusions[1], [4200.0])
    with pytest.raises(ValueError, match="give origin=, the data's first time"):
        pw.Doses(when, [1, 1])
    with pytest.raises(ValueError, match="these are numbers"):
        pw.Doses([1.0], [1.0], origin=0.0)
    with pytest.raises(ValueError, match="durations are timedeltas but the dose times are"):
        pw.Doses([1.0], [1.0], durations=pd.Timedelta(1, "s"))


def test_bolus_integral_is_the_test_function_at_the_dose():
    t = np.linspace(0.0, 24.0, 97)
    tf = _tf(t)
    doses = pw.Doses([3.0, 11.3, 30.0], [2.0, 5.0, 7.0])  # the last is after the data
    for k in (0, 1, 2):
        expected = tf.evaluate(np.array([3.0, 11.3]), derivative=k) @ np.array([2.0, 5.0])
        np.testing.assert_allclose(doses.integrate(tf, derivative=k), expected, atol=1e-13)


def test_infusion_integral_is_exact():
    """int phi' R 1[s, e) dt = R (phi(e) - phi(s)): exact, whatever the grid."""
    t = np.linspace(0.0, 24.0, 97)
    tf = _tf(t)
    doses = pw.Doses([5.05, 12.0], [10.0, 3.0], durations=[2.5, 0.0])
    rate = 10.0 / 2.5
    ends = tf.evaluate(np.array([5.05, 7.55]), derivative=0)
    expected = rate * (ends[:, 1] - ends[:, 0]) + 3.0 * tf.evaluate(np.array([12.0]), 1)[:, 0]
    np.testing.assert_allclose(doses.integrate(tf, derivative=1), expected, atol=1e-12)
    assert doses(np.array([5.0, 6.0, 7.6, 12.0])).tolist() == [0.0, rate, 0.0, 0.0]


def test_solve_applies_bolus_jumps():
    """Against the closed form, with the pre-dose value at a dose time (also at t0)."""
    t = np.linspace(0.0, 24.0, 97)  # 8 and 16 are grid times
    U = pw.solve(IV, IV_TRUE, [0.0], t, inputs={"dose": IV_DOSES})
    np.testing.assert_allclose(U[:, 0], _iv_exact(t), atol=1e-8)
    assert U[0, 0] == 0.0 and U[32, 0] == pytest.approx(_iv_exact(np.array([8.0]))[0])
    # doses between output times, and an infusion
    t2 = np.linspace(0.5, 24.5, 25)
    doses = pw.Doses([0.0, 7.7, 12.0], [100.0, 100.0, 50.0], durations=[0, 0, 2.0])
    U2 = pw.solve(IV, IV_TRUE, [0.0], np.r_[0.0, t2], inputs={"dose": doses})[1:, 0]
    ke, V = IV_TRUE
    inf = np.where(
        t2 > 12.0,
        25.0 / (V * ke) * (1 - np.exp(-ke * (np.minimum(t2, 14.0) - 12.0))),
        0.0,
    ) * np.exp(-ke * np.clip(t2 - 14.0, 0, None))
    exact = _iv_exact(t2, times=(0.0, 7.7)) + inf
    np.testing.assert_allclose(U2, exact, atol=1e-8)


def test_output_error_sensitivities_jump_with_the_dose():
    """The jump A / V depends on V: the sensitivity solve against central differences."""
    from pymc_wendy.estimators.output_error import _Problem

    t = np.linspace(0.0, 24.0, 49)
    X = _iv_exact(t)[:, None]
    solver = {"method": "LSODA", "rtol": 1e-10, "atol": 1e-12, "max_nfev": 100_000}
    prob = _Problem(IV, t, X, False, np.array([10.0]), solver, {"dose": IV_DOSES})
    theta = np.array([0.25, 8.0, 0.3])
    J = prob.jacobian(theta)
    E = np.eye(3)
    h = 1e-5
    fd = np.column_stack(
        [
            (prob.residual(theta + h * E[j]) - prob.residual(theta - h * E[j])) / (2 * h)
            for j in range(3)
        ]
    )
    np.testing.assert_allclose(J, fd, rtol=1e-5, atol=1e-7 * np.abs(J).max())


# --- quadrature and noise across jumps -----------------------------------------------------
def test_product_rule_fourth_order_across_jumps():
    """Each side of a jump is interpolated separately: O(h^4), with the break on a grid
    point (the point is the left limit) and between grid points."""

    def g(s):
        return np.cos(0.3 * s)

    for where in ("on", "between"):
        errs = []
        for n in (41, 81, 161, 321):
            t = np.linspace(0.0, 10.0, n)
            b = t[n // 3] if where == "on" else 3.3 + 1e-3
            rule = ProductRule.on(t, [b])

            def y(s, b=b):
                return np.sin(s) + np.where(s > b, 1.0 + 0.5 * s, 0.0)

            w = rule.weights(g(rule.nodes))
            exact = integrate.quad(lambda s, y=y: g(s) * y(s), 0, 10, points=[b], limit=200)[0]
            errs.append(abs(w @ y(t) - exact))
        assert errs[-1] < 1e-8
        assert errs[0] / errs[-1] > 300  # 2^(4*3) = 4096 for O(h^4); O(h) would give 8


def test_noise_estimate_skips_windows_across_jumps():
    t = np.linspace(0.0, 24.0, 97)
    U = _iv_exact(t)[:, None]
    seg = segments(t, IV_DOSES.jump_times)
    # t0 (a dose) is alone before its dose; t = 8 (index 32) is the left limit of its dose
    assert seg.tolist()[:34] == [0] + [1] * 32 + [2]
    plain, split = [], []
    for seed in range(20):
        X = U + 0.1 * np.random.default_rng(seed).standard_normal(U.shape)
        plain.append(estimate_noise(X)[0])
        split.append(estimate_noise(X, segments=seg)[0])
    assert np.mean(plain) > 2.0 * 0.1  # the jumps inflate it
    # 48 filtered values per data set: sd of one estimate ~ 0.2, of the mean of 20 ~ 0.05
    assert 0.85 < np.mean(split) / 0.1 < 1.15


# --- the weak form with doses --------------------------------------------------------------
def test_weak_fit_of_repeated_iv_boluses():
    t = np.linspace(0.0, 24.0, 97)
    U = _iv_exact(t)[:, None]
    rng = np.random.default_rng(1)
    Y = U + 0.05 * np.sqrt(np.mean(U**2)) * rng.standard_normal(U.shape)
    res = pw.fit(IV, t, Y, inputs={"dose": IV_DOSES}, p0=[0.1, 5.0])
    assert res.success
    assert np.all(np.abs(res.x - IV_TRUE) < 3 * res.stderr)
    assert np.all(res.stderr < 0.05 * IV_TRUE)
    lik = pw.WeakLikelihood(IV, t, Y, inputs={"dose": IV_DOSES})
    assert lik.test_functions.quadrature == "product"
    assert lik.test_functions.breaks.tolist() == [0.0, 8.0, 16.0]


def test_weak_residual_across_doses_converges():
    """On exact data the weak residual at the truth vanishes as the grid is refined, with
    the jumps split (fourth order); integrated across them it does not (first order)."""
    split, across = [], []
    for n in (97, 193, 385):
        t = np.linspace(0.0, 24.0, n)
        U = _iv_exact(t)[:, None]
        for out, opts in ((split, {}), (across, {"breaks": ()})):
            lik = pw.WeakLikelihood(
                IV, t, U, inputs={"dose": IV_DOSES}, sigma=0.1,
                test_functions={"min_radius": 1.0, "quadrature": "product", **opts},
            )  # fmt: skip
            out.append(np.max(np.abs(lik.residual(IV_TRUE))))
    assert split[0] / split[-1] > 100  # 16^2 = 256 for O(h^4)
    assert across[0] / across[-1] < 8
    assert split[-1] < across[-1] / 100


def test_fit_is_unit_free_with_doses():
    """Time in minutes instead of hours: rates divide by 60, V unchanged."""
    t = np.linspace(0.0, 24.0, 97)
    U = _iv_exact(t)[:, None]
    Y = U + 0.05 * np.random.default_rng(2).standard_normal(U.shape)
    h = pw.fit(IV, t, Y, inputs={"dose": IV_DOSES}, p0=[0.1, 5.0], sigma=0.05)
    doses_min = pw.Doses([0.0, 480.0, 960.0], 100.0)
    m = pw.fit(IV, 60 * t, Y, inputs={"dose": doses_min}, p0=[0.1 / 60, 5.0], sigma=0.05)
    np.testing.assert_allclose(m.x, h.x * np.array([1 / 60, 1.0]), rtol=1e-6)
    np.testing.assert_allclose(m.stderr, h.stderr * np.array([1 / 60, 1.0]), rtol=1e-5)


def test_known_state_before_the_first_dose():
    """A dose at t0 counts in full; the known initial state is the pre-dose one."""
    t = np.linspace(0.5, 24.0, 95)
    U = _iv_exact(t)[:, None]
    Y = U + 0.05 * np.random.default_rng(3).standard_normal(U.shape)
    res = pw.fit(IV, t, Y, inputs={"dose": IV_DOSES}, p0=[0.1, 5.0], sigma=0.05,
                 initial_state=[0.0], t0=0.0)  # fmt: skip
    assert res.success and np.all(np.abs(res.x - IV_TRUE) < 3 * res.stderr)
    lik = pw.WeakLikelihood(IV, t, U, inputs={"dose": IV_DOSES}, sigma=0.05,
                            initial_state=[0.0], t0=0.0)  # fmt: skip
    r = lik.residual(IV_TRUE)
    assert abs(r[-1]) < 1e-5  # the boundary row: exact data, pre-dose state and the dose


# --- input-output equations ----------------------------------------------------------------
def test_input_output_equation_of_oral_absorption():
    io = input_output(ORAL, "C")
    ka, ke, V, s = sp.symbols("ka ke V s")
    assert sp.simplify(io.characteristic - (s + ka) * (s + ke)) == 0
    assert sp.simplify(io.numerators["dose"] - ka / V) == 0
    assert io.model.orders == (2,) and io.model.params == ORAL.params
    t = np.linspace(0.0, 48.0, 97)
    doses = pw.Doses([0.0, 12.0, 24.0], 320.0)
    latent = pw.solve(ORAL, ORAL_TRUE, [0.0, 0.0], t, inputs={"dose": doses})[:, 1]
    y = pw.solve(io.model, ORAL_TRUE, [0.0, 0.0], t, inputs=io.inputs({"dose": doses}))[:, 0]
    np.testing.assert_allclose(y, latent, atol=1e-8)


def test_input_output_equation_of_two_compartments():
    io = input_output(TWO, "C")
    ka, V, k10, k12, k21, s = sp.symbols("ka V k10 k12 k21 s")  # noqa: N806
    char = (s + ka) * ((s + k10 + k12) * (s + k21) - k12 * k21)
    assert sp.simplify(io.characteristic - char) == 0
    assert sp.simplify(io.numerators["dose"] - ka * (s + k21) / V) == 0
    assert io.derivative_inputs == {"dose": ("dose", 0), "dose_d1": ("dose", 1)}
    inputs = io.inputs({"dose": pw.Doses([0.0], 1.0)})
    assert isinstance(inputs["dose_d1"], DerivativeInput)
    with pytest.raises(ValueError, match="solve the latent model"):
        pw.solve(io.model, TWO_TRUE, [0.0, 0.0, 0.0], np.linspace(0, 1, 5), inputs=inputs)


def test_derivative_input_integral():
    t = np.linspace(0.0, 24.0, 97)
    tf = _tf(t)
    doses = pw.Doses([3.0, 11.3], [2.0, 5.0])
    d1 = DerivativeInput(doses, 1)
    np.testing.assert_allclose(d1.integrate(tf), -doses.integrate(tf, derivative=1))


def test_two_compartment_recovered_from_the_central_compartment():
    """Recovery at 1 % noise (relative error below 5 %, of the truth or of its twin), three
    oral doses."""
    io = input_output(TWO, "C")
    t = np.linspace(0.25, 72.0, 288)
    doses = pw.Doses([0.0, 24.0, 48.0], 500.0)
    U = pw.solve(TWO, TWO_TRUE, [0.0, 0.0, 0.0], np.r_[0.0, t], inputs={"dose": doses})[1:]
    rng = np.random.default_rng(1)
    Y = U[:, 1:2] + 0.01 * np.sqrt(np.mean(U[:, 1] ** 2)) * rng.standard_normal((t.size, 1))
    res = pw.fit(io.model, t, Y, inputs=io.inputs({"dose": doses}), p0=[1.0, 15.0, 0.2, 0.3, 0.3],
                 initial_state=[0.0, 0.0, 0.0], t0=0.0)  # fmt: skip
    assert res.success
    # the data of C cannot tell the truth from its flip-flop twin (same curve): the nearest
    twins = io.equivalent(TWO_TRUE)
    target = twins[np.argmin(np.max(np.abs(np.log(res.x / twins)), axis=1))]
    assert np.all(np.abs(res.x / target - 1) < 0.05)
    assert np.all(np.abs(res.x - target) < 4 * res.stderr)


def test_rest_initial_state_of_a_higher_order_model():
    """At rest before a dose at t0, the boundary row of an order-2 model has no boundary
    terms: on exact data its residual is as small as the interior rows' and shrinks with
    the grid like theirs."""
    io = input_output(ORAL, "C")
    doses = pw.Doses([0.0, 12.0], 320.0)
    inputs = io.inputs({"dose": doses})
    out = []
    for n in (97, 385):
        t = np.linspace(0.0, 24.0, n)
        U = pw.solve(ORAL, ORAL_TRUE, [0.0, 0.0], t, inputs={"dose": doses})[:, 1:]
        lik = pw.WeakLikelihood(io.model, t, U, inputs=inputs, sigma=0.05,
                                initial_state=[0.0, 0.0])  # fmt: skip
        assert lik.test_functions.n_boundary == 1
        assert lik.test_functions.kinks.tolist() == [0.0, 12.0]  # C is continuous
        r = lik.residual(ORAL_TRUE)
        assert abs(r[-1]) <= np.max(np.abs(r[:-1]))
        out.append(abs(r[-1]))
    assert out[0] / out[1] > 8
    with pytest.raises(ValueError, match="at rest only"):
        pw.WeakLikelihood(io.model, t, U, inputs=inputs, sigma=0.05, initial_state=[1.0, 0.0])


def test_doses_are_picklable():
    import pickle

    doses = pw.Doses([0.0, 5.0], [1.0, 2.0], durations=[0.0, 1.0])
    back = pickle.loads(pickle.dumps(doses))
    assert back.bolus_times.tolist() == [0.0] and back(np.array([5.5]))[0] == 2.0


def test_no_warnings_from_a_dosed_fit():
    t = np.linspace(0.0, 24.0, 97)
    U = _iv_exact(t)[:, None] + 0.05 * np.random.default_rng(4).standard_normal((97, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pw.fit(IV, t, U, inputs={"dose": IV_DOSES}, p0=[0.1, 5.0])


def test_equivalent_parameters_give_the_same_observed_curve():
    """The flip-flop twin of the two-compartment model: found, and its concentration curve
    is the truth's (the data of C alone cannot tell them apart)."""
    io = input_output(TWO, "C")
    twins = io.equivalent(TWO_TRUE)
    assert twins.shape == (2, 5)
    np.testing.assert_allclose(twins[0], TWO_TRUE)
    assert abs(twins[1, 0] / TWO_TRUE[0] - 1) > 0.2  # a different absorption rate
    t = np.linspace(0.0, 72.0, 145)
    doses = {"dose": pw.Doses([0.0, 24.0, 48.0], 500.0)}
    c = [pw.solve(TWO, q, [0.0, 0.0, 0.0], t, inputs=doses)[:, 1] for q in twins]
    np.testing.assert_allclose(c[1], c[0], rtol=1e-6, atol=1e-9)
    assert input_output(IV, "C").equivalent(IV_TRUE).shape == (1, 2)  # identifiable


@pytest.mark.slow
def test_weak_ode_likelihood_with_doses_and_predictive_draws():
    """In PyMC: the posterior is near the truth and the predictive draws, solved with the
    jumps at the doses, follow the noise-free curve."""
    import pymc as pm

    d = IV_PROBLEM.simulate(noise_ratio=0.05, seed=0)
    with pm.Model():
        p = pm.LogNormal("p", mu=np.log(IV_TRUE), sigma=0.5, shape=2)
        pw.WeakODELikelihood(
            "U", ode=IV, params=p, t=d.t, observed=d.U, inputs=d.inputs, initial_state=[0.0]
        )
        idata = pw.sample(200, tune=200, chains=2, progressbar=False, random_seed=1)
        pp = pm.sample_posterior_predictive(idata, progressbar=False, random_seed=2)
    # the doses are part of the exact stage: the check ran
    assert idata["weak_check"].attrs["verdict"] in ("agrees", "differs")
    post = idata.posterior["p"]
    mean, sd = post.mean(("chain", "draw")).values, post.std(("chain", "draw")).values
    assert np.all(np.abs(mean - IV_TRUE) < 4 * sd)
    U = pp.posterior_predictive["U"].values  # (chain, draw, time, state)
    # 400 draws: the mean's error is the posterior spread plus sigma / 20
    assert np.max(np.abs(U.mean((0, 1))[:, 0] - d.U_true[:, 0])) < d.sigma[0]
    assert U[..., 33, 0].mean() > U[..., 32, 0].mean() + 5  # the dose at t = 8 (index 32)


@pytest.mark.slow
def test_default_posterior_with_doses_matches_a_closed_form_forward_reference():
    """pw.sample with its defaults on three IV boluses at 10 % noise, against PyMC's NUTS on
    the same model written with the closed-form solution (no ODE solver of ours): every
    posterior mean within 0.3 reference sd, every sd within 0.8-1.25 times the reference."""
    import pymc as pm
    import pytensor.tensor as pt

    d = IV_PROBLEM.simulate(noise_ratio=0.1, n_points=41, seed=4)
    sigma = float(d.sigma[0])
    prior = {"mu": np.log(IV_TRUE), "sigma": 0.5, "shape": 2}
    with pm.Model():
        p = pm.LogNormal("p", **prior)
        pw.WeakODELikelihood(
            "U", ode=IV, params=p, t=d.t, observed=d.U, inputs=d.inputs, sigma=[sigma],
            initial_state=[0.0], t0=0.0,
        )  # fmt: skip
        ours = pw.sample(1000, chains=2, progressbar=False, random_seed=1)
    doses = IV_PROBLEM.inputs["dose"]
    lag = d.t[:, None] - np.asarray(doses.bolus_times)[None, :]
    after = lag > 0  # at a dose time, the value before it
    with pm.Model():
        p = pm.LogNormal("p", **prior)
        ke, V = p[0], p[1]
        terms = pt.switch(after, doses.bolus_amounts[None, :] / V * pt.exp(-ke * lag), 0.0)
        pm.Normal("U", terms.sum(axis=1), sigma, observed=d.U[:, 0])
        ref = pm.sample(2000, chains=2, progressbar=False, random_seed=2, target_accept=0.9)
    a = ours.posterior["p"].values.reshape(-1, 2)
    b = ref.posterior["p"].values.reshape(-1, 2)
    shift = (a.mean(0) - b.mean(0)) / b.std(0)
    ratio = a.std(0) / b.std(0)
    check = ours["weak_check"].attrs
    assert np.all(np.abs(shift) < 0.3), (shift, ratio, check["verdict"], check["note"])
    assert np.all((ratio > 0.8) & (ratio < 1.25)), (shift, ratio, check["verdict"])


def test_exact_stage_and_draws_of_an_input_output_equation_solve_its_latent_model():
    """The two-compartment equation in C has the doses' derivative among its inputs, which
    has no values: at rest its forward twin and its predictive draws solve the latent
    model (before, the check skipped it on a shape error and draws were NaN)."""
    import pymc as pm

    io = input_output(TWO, "C")
    doses = pw.Doses([0.0, 24.0, 48.0], 500.0)
    t = np.linspace(0.75, 72.0, 96)
    U = pw.solve(TWO, TWO_TRUE, [0.0, 0.0, 0.0], np.r_[0.0, t], inputs={"dose": doses})[1:]
    Y = U[:, 1:2] * (1 + 0.05 * np.random.default_rng(0).standard_normal((t.size, 1)))
    with pm.Model() as model:
        p = pm.LogNormal("p", np.log(TWO_TRUE), 0.1, shape=5)
        term = pw.WeakODELikelihood(
            "C", ode=io.model, params=p, t=t, observed=Y, inputs=io.inputs({"dose": doses}),
            initial_state=[0.0, 0.0, 0.0], t0=0.0, sigma=[0.5],
        )  # fmt: skip
    _, terms = pw.forward_model(model)
    solved, _ = terms[0].op.solve(TWO_TRUE, np.zeros(3))
    np.testing.assert_allclose(solved, U[:, 1:2], rtol=1e-6, atol=1e-8 * U.max())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drawn = term.owner.op.trajectory(TWO_TRUE, np.zeros(3))
    np.testing.assert_allclose(drawn, U[:, 1:2], rtol=1e-5, atol=1e-6 * U.max())
    # away from rest there is no forward solve: the check says why instead of failing
    lik = terms[0].likelihood
    with pytest.raises(ValueError, match="from rest only"):
        forward_system(io.model, lik.inputs, np.ones(3))


@pytest.mark.slow
# the weak stage's NUTS has a few divergences (2 of 2000) on this ridge; the result is the
# exact stage's
@pytest.mark.filterwarnings("ignore::pymc_wendy.DivergenceWarning")
def test_default_posterior_of_two_compartments_with_doses_matches_a_closed_form_reference():
    """Issue 55's goal: two compartments, three oral doses, observed in C alone with 10 %
    log-normal error (288 points), fitted through the input-output equation from rest.
    ``pw.sample`` with defaults against PyMC's NUTS on the closed-form solution (the sum of
    each dose's response; no ODE solver of ours). Measured (seed 0): the weak posterior has
    k21 about 2.5 reference sd off and sigma's sd 2.25 times too wide; the default result
    every mean within 0.14 sd, sds 0.86-1.08x: the correction takes its NUTS route here
    (2026-11-29). By the importance route (as before the compiled solvers) the means were 0.3
    sd off and the sds of k10 and k12 0.6x, with good-looking weights, and on the CI machine
    (2026-12-01) the moved draws' variance k fell below the threshold and the default took
    that route (0.30 sd, sds 0.59x): the moved draws are now trusted only where the Laplace t
    probing their tails is too (docs/forward.md)."""
    import pymc as pm
    import pytensor.tensor as pt

    io = input_output(TWO, "C")
    dose_times = (0.0, 24.0, 48.0)
    doses = pw.Doses(dose_times, 500.0)
    t = np.linspace(0.0, 72.0, 289)[1:]
    U = pw.solve(TWO, TWO_TRUE, [0.0, 0.0, 0.0], np.r_[0.0, t], inputs={"dose": doses})[1:]
    Y = U[:, 1] * np.exp(0.1 * np.random.default_rng(0).standard_normal(t.size))

    def priors():
        return pm.LogNormal("p", np.log(TWO_TRUE), 0.5, shape=5), pm.HalfNormal("sigma", 0.5)

    with pm.Model():
        p, sigma = priors()
        pw.WeakODELikelihood(
            "C", ode=io.model, params=p, t=t, observed=Y[:, None], noise="lognormal",
            inputs=io.inputs({"dose": doses}), sigma=sigma, initial_state=[0.0, 0.0, 0.0],
            t0=0.0,
        )  # fmt: skip
        ours = pw.sample(1000, chains=2, progressbar=False, random_seed=1)
    assert ours["weak_check"].attrs["verdict"] == "differs"
    with pm.Model():
        p, sigma = priors()
        ka, V, k10, k12, k21 = (p[i] for i in range(5))
        # roots alpha > beta of s^2 + (k10 + k12 + k21) s + k10 k21; a unit bolus into C
        # decays as c_a e^(-alpha t) + c_b e^(-beta t), convolved with the gut's ka e^(-ka t)
        total = k10 + k12 + k21
        root = pt.sqrt(total**2 - 4 * k10 * k21)
        alpha, beta = (total + root) / 2, (total - root) / 2
        modes = (((alpha - k21) / (alpha - beta), alpha), ((k21 - beta) / (alpha - beta), beta))
        C = 0.0
        for tau in dose_times:
            s = np.maximum(t - tau, 0.0)
            response = sum(
                c * (pt.exp(-ka * s) - pt.exp(-lam * s)) / (lam - ka) for c, lam in modes
            )
            C = C + (t > tau) * 500.0 * ka / V * response
        pm.LogNormal("C", pt.log(C), sigma, observed=Y)
        ref = pm.sample(2000, chains=2, progressbar=False, random_seed=2, target_accept=0.9)
    for name in ("p", "sigma"):
        a = ours.posterior[name].values.reshape(2000, -1)
        b = ref.posterior[name].values.reshape(4000, -1)
        shift, ratio = (a.mean(0) - b.mean(0)) / b.std(0), a.std(0) / b.std(0)
        assert np.all(np.abs(shift) < 0.3), (name, shift, ratio)
        assert np.all((ratio > 0.8) & (ratio < 1.25)), (name, shift, ratio)
