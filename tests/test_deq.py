"""fit(method="deq"): Matsuda-Miyatake IRLS with discretization-error quantification."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import central_differences

import pymc_wendy as pw
from pymc_wendy.estimators import deq
from pymc_wendy.model.simulate import solve

# The paper's Lorenz setting (section 4.1): t = 0, 0.01, ..., 2, noise variances (0.5, 0.1, 0.1)
P_LORENZ = np.array([10.0, 28.0, 8.0 / 3.0])
U0_LORENZ = np.array([-10.0, -1.0, 40.0])
GAMMA = np.sqrt([0.5, 0.1, 0.1])


@pytest.fixture(scope="module")
def lorenz():
    model = pw.get_problem("lorenz").model
    t = np.arange(201) * 0.01
    X = solve(model, P_LORENZ, U0_LORENZ, t, rtol=1e-12, atol=1e-12)
    U = X + np.random.default_rng(0).normal(size=X.shape) * GAMMA
    return model, t, X, U


def _fit(model, t, U, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pw.FitWarning)
        return pw.fit(
            model, t, U, method="deq", p0=P_LORENZ, u0=U0_LORENZ, sigma=GAMMA, options=options
        )


def _trajectory_error(model, t, p, u0, X):
    """The paper's error (4.1): integral of ||x(t; theta_hat) - x(t; theta)||^2."""
    Xh = solve(model, p, u0, t, rtol=1e-12, atol=1e-12)
    return float(np.trapezoid(np.sum((Xh - X) ** 2, axis=1), t))


# --- (1) recovery ---------------------------------------------------------------------------
def test_recovers_lorenz_with_accurate_scheme(lorenz):
    """RK4 at dt = 5e-3 (the paper's Table 1 setting) is accurate: the estimate lies within
    4 of its own standard errors of the truth, and the variances stay near zero."""
    model, t, X, U = lorenz
    res = _fit(model, t, U, scheme="rk4", n_steps=2)
    assert res.success and res.method == "deq"
    theta = np.concatenate([res.x, res.u0])
    se = np.sqrt(np.diag(res.history["theta_covariance"]))
    truth = np.concatenate([P_LORENZ, U0_LORENZ])
    assert np.all(np.abs(theta - truth) < 4 * se), (theta - truth) / se
    # the variance is that of the noise at the start; the isotonic fit's upward drift at
    # the end (the tail maximum of block means of chi-square variables) stays within a
    # factor 2 of the noise variance
    var = res.history["discretization_variance"]
    assert np.all(var[:2] == 0)
    assert np.all(np.mean(var, axis=0) < 0.25 * GAMMA**2)
    assert np.all(np.max(var, axis=0) < 2 * GAMMA**2)


def test_better_than_conventional_with_coarse_euler(lorenz):
    """Euler with one step per observation interval (dt = 1e-2, the paper's largest) makes
    the conventional fixed-step estimator (2.4) far off (tens of its standard errors); DEQ,
    which downweights the late, inaccurate part of the numerical solution, has a trajectory
    error (4.1) less than a third of it (80 against 513 at this seed; 78-92 against 513-524
    over seeds 0-2 and both the true and the paper's start)."""
    model, t, X, U = lorenz
    res = _fit(model, t, U, scheme="euler", n_steps=1)
    conv = _fit(model, t, U, scheme="euler", n_steps=1, update_variance=False)
    assert conv.success
    assert np.all(np.abs(conv.x - P_LORENZ) > 8 * conv.stderr)  # the bias is real
    e_deq = _trajectory_error(model, t, res.x, res.u0, X)
    e_conv = _trajectory_error(model, t, conv.x, conv.u0, X)
    assert e_deq < e_conv / 3, (e_deq, e_conv)
    # the estimated discretization error grows: its late values exceed the noise sd
    sd = res.history["discretization_sd"]
    assert np.all(sd[-1] > GAMMA)
    assert np.all(sd[0] == 0)


def test_paper_start_and_heun(lorenz):
    """From the paper's initial guess (-9, -1.5, 39, 11, 29, 3), Heun with one step per
    interval recovers the truth within 4 standard errors."""
    model, t, _, U = lorenz
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pw.FitWarning)
        res = pw.fit(
            model, t, U, method="deq", p0=[11, 29, 3], u0=[-9, -1.5, 39], sigma=GAMMA,
            options={"scheme": "heun", "n_steps": 1},
        )  # fmt: skip
    assert np.all(np.abs(res.x - P_LORENZ) < 4 * res.stderr)


# --- (2) isotonic variance update -----------------------------------------------------------
def _oscillator():
    def rhs(t, u, p):
        x, y = u
        return [p[0] * y, -p[0] * x]

    return pw.ODEModel(rhs, ["x", "y"], ["omega"], name="oscillator")


def test_planted_discretization_error_is_recovered():
    """Data = the RK4 solution at the truth + N(0, gamma^2 + s(t)^2) with a planted
    non-decreasing s(t)^2. The estimate is non-decreasing in time, and its mean over each
    quarter of the record matches the planted one within 5 standard errors of that mean
    (the sd of a mean of n squared normals is sqrt(2/n) of its value; 5 of them leaves room
    for the isotonic fit's own smoothing at block edges)."""
    model = _oscillator()
    K, gamma = 2001, 0.1
    t = np.linspace(0.0, 20.0, K)
    p, u0 = np.array([1.0]), np.array([1.0, 0.0])
    X = deq.discrete_solution(model, p, u0, t, scheme="rk4", n_steps=1)
    planted = (0.4 * (t / t[-1]) ** 2)[:, None] ** 2 * np.ones((1, 2))  # sd from 0 to 0.4
    rng = np.random.default_rng(1)
    U = X + rng.normal(size=X.shape) * np.sqrt(gamma**2 + planted)
    res = pw.fit(
        model, t, U, method="deq", p0=[1.05], u0=[0.95, 0.05], sigma=gamma,
        options={"scheme": "rk4", "n_steps": 1},
    )  # fmt: skip
    var = res.history["discretization_variance"]
    assert np.all(np.diff(var, axis=0) >= 0)
    assert np.all(var >= 0)
    total_hat = var + gamma**2
    total = planted + gamma**2
    for block in np.array_split(np.arange(K), 4):
        n = block.size * 2  # both states
        got, want = total_hat[block].mean(), total[block].mean()
        assert abs(got - want) < 5 * np.sqrt(2 / n) * want, (block[0], got, want)
    # the planted error is not absorbed by the parameters
    assert abs(res.x[0] - 1.0) < 4 * res.stderr[0]


def test_no_planted_error_gives_near_zero_variance():
    """Pure noise: the estimated discretization variance averages well below gamma^2."""
    model = _oscillator()
    t = np.linspace(0.0, 20.0, 1001)
    gamma = 0.1
    X = deq.discrete_solution(model, [1.0], [1.0, 0.0], t, scheme="rk4", n_steps=1)
    U = X + np.random.default_rng(2).normal(size=X.shape) * gamma
    res = pw.fit(model, t, U, method="deq", p0=[1.0], u0=[1.0, 0.0], sigma=gamma)
    assert np.mean(res.history["discretization_variance"]) < 0.1 * gamma**2


def test_variance_update_minimises_objective():
    """The isotonic update is the constrained minimiser of (3.9) over the variances: no
    feasible (non-decreasing, >= gamma^2) perturbation does better."""
    rng = np.random.default_rng(3)
    K = 60
    r2 = (rng.normal(size=(K, 2)) * np.linspace(0.1, 1.0, K)[:, None]) ** 2
    gamma2 = np.array([0.05, 0.2])
    v = deq._variance_update(r2, gamma2)
    assert np.all(np.diff(v, axis=0) >= 0) and np.all(v >= gamma2)
    best = deq._objective(r2, v)
    for _ in range(200):
        trial = np.maximum.accumulate(v * np.exp(0.1 * rng.normal(size=v.shape)), axis=0)
        trial = np.maximum(trial, gamma2)
        assert deq._objective(r2, trial) >= best - 1e-9


# --- (3) exact gradient of the discrete solution -------------------------------------------
@pytest.mark.parametrize("scheme", ["euler", "heun", "rk4"])
def test_sensitivities_match_finite_differences(lorenz, scheme):
    """Forward sensitivities of the discrete map equal central differences of the discrete
    solution (to the differences' own O(eps^2) + round-off error)."""
    model, t, _, _ = lorenz
    theta = np.concatenate([P_LORENZ, U0_LORENZ])
    _, S = deq.discrete_solution(
        model, theta[:3], theta[3:], t[:101], scheme=scheme, n_steps=3, sensitivities=True
    )

    def solution(th):
        return deq.discrete_solution(model, th[:3], th[3:], t[:101], scheme=scheme, n_steps=3)

    fd = central_differences(solution, theta, 1e-6, floor=1.0)
    for k in range(theta.size):
        err = np.max(np.abs(fd[:, :, k] - S[:, :, k]))
        assert err < 1e-6 * max(1.0, np.max(np.abs(S[:, :, k])))


def test_time_dependent_rhs_and_scheme_definition():
    """Stages see their own times (c_i h): Heun on x' = p t x matches a hand-written loop,
    and its sensitivity matches differences."""

    def rhs(t, u, p):
        return [p[0] * t * u[0]]

    model = pw.ODEModel(rhs, ["x"], ["a"])
    t = np.array([0.0, 0.3, 0.5, 1.0])
    X, S = deq.discrete_solution(
        model, [0.7], [1.5], t, scheme="heun", n_steps=2, sensitivities=True
    )
    x, out = 1.5, [1.5]
    for m in range(3):
        h = (t[m + 1] - t[m]) / 2
        for q in range(2):
            s = t[m] + q * h
            k1 = 0.7 * s * x
            k2 = 0.7 * (s + h) * (x + h * k1)
            x = x + h * (k1 + k2) / 2
        out.append(x)
    np.testing.assert_allclose(X[:, 0], out, rtol=1e-14)
    eps = 1e-7
    fd = (
        deq.discrete_solution(model, [0.7 + eps], [1.5], t, scheme="heun", n_steps=2)
        - deq.discrete_solution(model, [0.7 - eps], [1.5], t, scheme="heun", n_steps=2)
    ) / (2 * eps)
    np.testing.assert_allclose(S[:, 0, 0], fd[:, 0], rtol=1e-6, atol=1e-9)


# --- (4) bad input --------------------------------------------------------------------------
def test_bad_input(lorenz):
    model, t, _, U = lorenz
    kw = dict(method="deq", p0=P_LORENZ, u0=U0_LORENZ, sigma=GAMMA)
    bad = U.copy()
    bad[3, 1] = np.nan
    # the scheme is checked before anything else, even before the data
    with pytest.raises(ValueError, match="scheme"):
        pw.fit(model, t, bad, options={"scheme": "rk5"}, **kw)
    bad[3, 1] = np.inf  # NaN is a missing value now (docs/data.md); infinity stays an error
    with pytest.raises(ValueError, match="finite|inf"):
        pw.fit(model, t, bad, **kw)
    with pytest.raises(ValueError, match="unknown deq options"):
        pw.fit(model, t, U, options={"steps": 2}, **kw)
    with pytest.raises(ValueError, match="n_steps"):
        pw.fit(model, t, U, options={"n_steps": 0}, **kw)
    with pytest.raises(ValueError, match="not both"):
        pw.fit(model, t, U, options={"n_steps": 2, "dt": 1e-3}, **kw)
    with pytest.raises(ValueError, match="dt"):
        pw.fit(model, t, U, options={"dt": -1.0}, **kw)
    with pytest.raises(ValueError, match="at least 3 time points"):
        pw.fit(model, t[:2], U[:2], **kw)
    with pytest.raises(ValueError, match="observed state"):
        pw.fit(model, t, U, options={"observed": ["w"]}, **kw)
    with pytest.raises(ValueError, match="needs u0"):
        pw.fit(model, t, U, method="deq", p0=P_LORENZ, sigma=GAMMA, options={"fit_u0": False})
    with pytest.raises(ValueError, match="one experiment"):
        pw.fit(model, [t, t], [U, U], method="deq", p0=P_LORENZ, sigma=0.5)
    with pytest.raises(ValueError, match="scheme"):
        deq.discrete_solution(model, P_LORENZ, U0_LORENZ, t, scheme="midpoint")


def test_dt_option_and_history(lorenz):
    """``dt`` rounds to whole steps per interval; the history documents the run."""
    model, t, _, U = lorenz
    res = _fit(model, t, U, scheme="rk4", dt=0.005, max_iter=3)
    h = res.history
    assert np.all(h["solver"]["steps"] == 2) and h["solver"]["scheme"] == "rk4"
    assert h["discretization_variance"].shape == U.shape
    assert h["iterations"]["theta"].shape[1] == 6
    assert h["theta_names"][-3:] == ["x(t0)", "y(t0)", "z(t0)"]
    # the objective (3.9) never increases along the iterations
    assert np.all(np.diff(h["iterations"]["objective"]) <= 1e-8)


def test_partial_observation_and_plot(lorenz):
    """Observing x and y only (u0 given): z gets no variance; the plot draws the rest."""
    import matplotlib

    matplotlib.use("Agg")
    model, t, _, U = lorenz
    res = _fit(model, t, U, scheme="rk4", n_steps=2, observed=["x", "y"], max_iter=3)
    assert np.all(np.isnan(res.history["discretization_variance"][:, 2]))
    assert np.all(np.isfinite(res.history["discretization_variance"][:, :2]))
    ax = deq.plot_discretization_error(res)
    assert len(ax.get_legend().get_texts()) == 2


def test_profile_interval_close_to_wald_when_accurate(lorenz):
    """With an accurate scheme the profile-likelihood interval (section 3.5) of rho contains
    the estimate and has about the Wald length (the likelihood is near quadratic there)."""
    model, t, _, U = lorenz
    res = _fit(model, t, U, scheme="rk4", n_steps=2)
    ((lo, hi),) = deq.profile_intervals(res, which=["p2"])
    assert lo < res.x[1] < hi
    wald = 2 * 1.959964 * res.stderr[1]
    assert 0.8 < (hi - lo) / wald < 1.25


def test_result_pickles_and_profile_option(lorenz):
    """Results hold no compiled objects; ``profile_ci`` stores the intervals."""
    import pickle

    model, t, _, U = lorenz
    res = _fit(model, t, U, scheme="rk4", n_steps=2, max_iter=2, profile_ci=True, ci_level=0.5)
    again = pickle.loads(pickle.dumps(res))
    ci = again.history["profile_intervals"]
    assert ci.shape == (6, 2) and again.history["ci_level"] == 0.5
    theta = again.history["theta"]
    assert np.all((ci[:, 0] < theta) & (theta < ci[:, 1]))


def test_start_that_blows_up_falls_back_to_a_fitted_initial_state():
    """Logistic growth at 5 % noise, seed 8: the parabola through the first points starts
    the state at -0.054, where u' = u - u^2 runs off to -inf; the fit still converges."""
    prob = pw.get_problem("logistic")
    data = prob.simulate(n_points=257, noise_ratio=0.05, seed=8)
    t0, tn = data.t[0], data.t[-1]
    with pytest.raises(pw.SimulationError):  # the trap is real
        solve(prob.model, prob.p_true, [-0.054], np.linspace(t0, tn, 5), method="RK45")
    res = pw.fit(prob.model, data.t, data.U, method="deq")
    assert res.success and res.u0[0] > 0
    assert np.all(np.abs(res.x - prob.p_true) < 4 * res.stderr)
