"""Data2LD, ``fit(method="data2ld")`` (``estimators/data2ld.py``)."""

import warnings
from dataclasses import replace

import numpy as np
import pytest
from scipy.interpolate import BSpline
from scipy.special import roots_legendre

import pymc_wendy as pw
from pymc_wendy.estimators import data2ld, registry
from pymc_wendy.estimators._problem import prepare
from pymc_wendy.model.inputs import Input
from pymc_wendy.model.simulate import solve

HEAD = pw.get_problem("head_acceleration")

# the criterion's pieces are built here from 21-51 points with the filter's noise estimate,
# which the weak likelihood warns about and which these tests do not use
pytestmark = pytest.mark.filterwarnings("ignore::pymc_wendy.ShortSeriesWarning")


def _problem(model, t, U, inputs=None, options=None):
    return prepare(
        registry.get("data2ld"), model, t, U, p0=None, bounds=None, noise="normal",
        sigma=None, u0=None, test_functions=None, ridge=1e-10, n_starts=1, seed=None,
        executor=None, solver=None, options=options, bias_correction=None, inputs=inputs,
    )  # fmt: skip


def _head_criterion(n_points=51, noise_ratio=0.05, seed=3, rho=0.9):
    d = HEAD.simulate(noise_ratio=noise_ratio, n_points=n_points, seed=seed)
    struct, basis, crit, _ = data2ld.prepare_criterion(_problem(HEAD.model, d.t, d.U, d.inputs))
    crit.set_rho(rho)
    return d, struct, basis, crit


def _nodes(knots, n=12):
    """An independent composite Gauss rule: ``n`` nodes on every knot interval."""
    edges = np.unique(knots)
    x, w = roots_legendre(n)
    half, mid = np.diff(edges) / 2, (edges[1:] + edges[:-1]) / 2
    return (mid[:, None] + half[:, None] * x).ravel(), (half[:, None] * w).ravel()


# --- the pieces of the criterion ---------------------------------------------------------------
def test_knots_repeat_at_the_pulse_edges():
    for n_points, at_15 in ((101, True), (51, False)):
        d = HEAD.simulate(noise_ratio=0.05, n_points=n_points, seed=0)
        _, basis, _, _ = data2ld.prepare_criterion(_problem(HEAD.model, d.t, d.U, d.inputs))
        k = basis.knots
        # order 5 = p + 3, multiplicity O - p = 3: x'' may jump where the pulse does
        assert basis.order == 5 and np.sum(k == 14.0) == 3 and np.sum(np.isclose(k, 15.0)) == 3
        assert np.sum(k == 0.0) == 5 and np.sum(k == 60.0) == 5
        assert np.isin(d.t, k).all()  # interior knots at every observation time
        assert (15.0 in d.t) is at_15
        assert basis.K == k.size - 5


def test_kinked_input_gets_one_knot_less():
    m = pw.ODEModel(lambda t, u, p, w: [-p[0] * u[0] + p[1] * w[0]], ["x"], ["a", "b"],
                    inputs=["w"])  # fmt: skip
    t = np.linspace(0.0, 10.0, 21)
    ramp = Input([0.0, 1.0, 0.0], t=[0.0, 3.3, 10.0])  # kink at 3.3: multiplicity O - p - 1
    U = solve(m, [0.5, 1.0], [0.0], t, inputs={"w": ramp})
    _, basis, _, _ = data2ld.prepare_criterion(_problem(m, t, U, {"w": ramp}))
    assert basis.order == 4 and np.sum(np.isclose(basis.knots, 3.3)) == 2


def test_penalty_is_the_integral_of_the_squared_ode_residual():
    d, struct, basis, crit = _head_criterion()
    rng = np.random.default_rng(1)
    theta = np.array([0.07, 0.11, 0.5])
    c = rng.standard_normal(basis.K)
    alpha, beta = struct.coefficients(theta)
    R, S, g2 = crit.penalty_matrices(alpha, beta)
    # independent: x'' minus the model's own right-hand side, on a finer rule
    x = BSpline(basis.knots, c, basis.order - 1)
    tq, wq = _nodes(basis.knots)
    pulse = d.inputs["u"]
    rhs = np.array(
        [HEAD.model(s, [x(s), x(s, nu=1)], theta, [pulse(np.array([s]))[0]])[-1] for s in tq]
    )
    exact = np.sum(wq * (x(tq, nu=2) - rhs) ** 2)
    np.testing.assert_allclose(c @ R @ c + 2 * c @ S + g2, exact, rtol=1e-10)


def test_inner_solution_minimises_the_penalised_criterion():
    d, struct, basis, crit = _head_criterion(rho=0.9)
    theta = np.array([0.04, 0.2, 0.3])
    c_hat = crit.state(theta).c
    # eq. (10) as one stacked least-squares problem on an independent quadrature rule
    a, b = (1 - 0.9) / d.t.size, 0.9 / 60.0
    tq, wq = _nodes(basis.knots)
    eye = BSpline(basis.knots, np.eye(basis.K), basis.order - 1)
    Lphi = eye(tq, nu=2) + theta[0] * eye(tq) + theta[1] * eye(tq, nu=1)
    g = theta[2] * d.inputs["u"](tq)
    A = np.vstack([np.sqrt(a) * basis.Phi, np.sqrt(b * wq)[:, None] * Lphi])
    rhs = np.r_[np.sqrt(a) * d.U[:, 0], np.sqrt(b * wq) * g]
    direct = np.linalg.lstsq(A, rhs, rcond=None)[0]
    np.testing.assert_allclose(basis.Phi @ c_hat, basis.Phi @ direct, rtol=0, atol=1e-9)
    np.testing.assert_allclose(c_hat, direct, rtol=1e-6, atol=1e-9)


def test_jacobian_and_hessian_match_finite_differences():
    _, _, _, crit = _head_criterion(rho=0.95)
    theta = np.array([0.06, 0.12, 0.35])
    eps = 1e-6
    fd = np.column_stack(
        [(crit.residual(theta + eps * e) - crit.residual(theta - eps * e)) / (2 * eps)
         for e in np.eye(3)]
    )  # fmt: skip
    jac = crit.jacobian(theta)
    np.testing.assert_allclose(jac, fd, rtol=0, atol=1e-7 * np.abs(jac).max())

    def grad(x):  # gradient of H / 2
        return crit.jacobian(x).T @ crit.residual(x)

    _, hess = crit.sensitivity(theta)
    fd_hess = np.column_stack(
        [(grad(theta + eps * e) - grad(theta - eps * e)) / (2 * eps) for e in np.eye(3)]
    )
    np.testing.assert_allclose(hess, fd_hess, rtol=0, atol=1e-7 * np.abs(hess).max())


def test_implicit_derivative_of_the_estimate_matches_refits():
    d, struct, basis, crit = _head_criterion(rho=0.99)
    tight = {**data2ld._DEFAULTS, "xtol": 1e-15, "ftol": 1e-15, "gtol": 1e-15}
    theta = data2ld._stage(crit, HEAD.p_true, None, tight)[0]
    dtheta_dy, _ = crit.sensitivity(theta)
    v = 1e-4 * np.random.default_rng(0).standard_normal(d.t.size)
    ends = []
    for sign in (1, -1):
        moved = data2ld._Criterion(struct, basis, d.U[:, 0] + sign * v, 60.0)
        moved.set_rho(0.99)
        ends.append(data2ld._stage(moved, theta, None, tight)[0])
    fd = (ends[0] - ends[1]) / 2
    np.testing.assert_allclose(dtheta_dy @ v, fd, rtol=5e-3, atol=0)


# --- fits -------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_head_acceleration(seed):
    d = HEAD.simulate(noise_ratio=0.01, n_points=101, seed=seed)
    res = pw.fit(HEAD.model, d.t, d.U, method="data2ld", inputs=d.inputs)
    assert res.success and res.method == "data2ld" and res.covariance_kind == "data2ld"
    se = res.stderr
    assert np.all(np.isfinite(se)) and np.all(se > 0)
    assert np.all(np.abs(res.x - HEAD.p_true) < 4 * se), (res.x, se)
    assert np.all(se < 0.05 * HEAD.p_true)  # 1 % noise: well determined
    h = res.history
    assert h["rho"][0] == pytest.approx(1 / (1 + np.exp(4)))
    assert np.all(np.diff(h["rho"]) > 0) and h["theta"].shape == (h["rho"].size, 3)
    np.testing.assert_array_equal(h["theta"][-1], res.x)
    # the ladder ran past 0.99 until theta settled (the paper's step 4)
    assert h["ladder_converged"] and 0.99 < h["rho"][-1] < 1 - 1e-6
    assert np.linalg.norm(h["theta"][-1] - h["theta"][-2]) <= 1e-4
    # the residual noise estimate is the reported sigma, near the truth
    assert res.sigma_estimated and res.sigma[0] == h["residual_sigma"]
    assert 0.7 < res.sigma[0] / d.sigma[0] < 1.3
    assert 2 < h["df"] < 3  # tends to p = 2, the dimension of the homogeneous solutions
    ci = res.conf_int(0.95)
    np.testing.assert_allclose(ci[:, 1] - ci[:, 0], 2 * 1.959964 * se, rtol=1e-6)
    assert list(res.to_xarray()["kind"].values) == ["sandwich", "gls", "hessian", "data2ld"]
    # the spline's initial state starts the ODE solution close to the noise-free trajectory
    fitted = res.simulate(u0=h["u0"])[:, 0]
    assert np.sqrt(np.mean((fitted - d.U_true[:, 0]) ** 2)) < 0.5 * d.sigma[0]


def test_given_sigma_scales_the_covariance():
    d = HEAD.simulate(noise_ratio=0.05, n_points=51, seed=4)
    est = pw.fit(HEAD.model, d.t, d.U, method="data2ld", inputs=d.inputs)
    given = pw.fit(HEAD.model, d.t, d.U, method="data2ld", inputs=d.inputs, sigma=d.sigma)
    np.testing.assert_allclose(given.x, est.x)
    ratio = (d.sigma[0] / est.sigma[0]) ** 2
    np.testing.assert_allclose(given.covariance(), ratio * est.covariance(), rtol=1e-10)


def test_first_order_with_a_constant_term():
    # x' = -k x + b: a parameter-only term is a constant input
    m = pw.ODEModel(lambda t, u, p: [-p[0] * u[0] + p[1]], ["x"], ["k", "b"])
    t = np.linspace(0.0, 8.0, 81)
    truth = np.array([0.6, 1.2])
    X = solve(m, truth, [0.2], t)
    U = X + 0.02 * np.random.default_rng(5).standard_normal(X.shape)
    res = pw.fit(m, t, U, method="data2ld")
    assert data2ld.linear_structure(m).forcing == ("1",)
    assert res.history["spline_order"] == 4
    assert np.all(np.abs(res.x - truth) < 4 * res.stderr), (res.x, res.stderr)


def test_explicit_ladder_and_stopping_rules():
    d = HEAD.simulate(noise_ratio=0.05, n_points=51, seed=0)

    def fit(**options):
        return pw.fit(HEAD.model, d.t, d.U, method="data2ld", inputs=d.inputs, options=options)

    ladder = [0.5, 0.9, 0.95, 0.99]
    res = fit(rho=ladder, spline_order=6)
    np.testing.assert_array_equal(res.history["rho"], ladder)
    assert res.history["spline_order"] == 6 and res.nit == 4 and res.history["ladder_converged"]
    # the paper's endpoint: capped at 0.99 while theta still moves
    capped = fit(rho_max=0.99)
    assert capped.history["rho"][-1] == 0.99 and not capped.history["ladder_converged"]
    assert "still moving" in capped.message and capped.success
    # a loose theta_tol stops at the first stage from 0.99 on, not before
    loose = fit(theta_tol=10.0)
    rho = loose.history["rho"]
    assert rho[-1] >= 0.99 and rho[-2] < 0.99 and loose.history["ladder_converged"]
    free = fit(theta_tol=None, rho_max=0.9999)
    assert free.history["rho"][-1] == pytest.approx(0.9999) and free.history["ladder_converged"]


# --- errors -----------------------------------------------------------------------------------
def test_refuses_models_outside_its_scope():
    t = np.linspace(0.0, 60.0, 61)
    d = HEAD.simulate(noise_ratio=0.01, n_points=61, seed=0)

    def cubic(t, u, p, w):
        return [-p[0] * u[0] - p[1] * u[0] ** 3 - p[2] * u[1] + p[3] * w[0]]

    duffing = pw.ODEModel(cubic, ["x"], ["k", "c3", "c", "a"], order=2, inputs=["u"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"linear ODE.*c3\*x\*\*3.*nonlinear in x"):
            pw.fit(duffing, t, d.U, method="data2ld", inputs=d.inputs)
    y = d.U  # any data: the model is refused before they matter
    aging = pw.ODEModel(lambda t, u, p: [-p[0] * t * u[0]], ["x"], ["k"])
    with pytest.raises(ValueError, match="time-varying coefficient"):
        pw.fit(aging, t, y, method="data2ld")
    forced = pw.ODEModel(lambda t, u, p: [-p[0] * u[0] + p[1] * np.sin(t)], ["x"], ["k", "b"])
    with pytest.raises(ValueError, match="depends on t; declare"):
        pw.fit(forced, t, y, method="data2ld")
    lv = pw.get_problem("lotka_volterra")
    data = lv.simulate(noise_ratio=0.01, subsample=4, seed=0)
    with pytest.raises(ValueError, match="one observed state.*has 2 states"):
        pw.fit(lv.model, data.t, data.U, method="data2ld")


def test_refuses_bad_options_and_short_data():
    d = HEAD.simulate(noise_ratio=0.05, n_points=21, seed=0)

    def fit(**options):
        return pw.fit(HEAD.model, d.t, d.U, method="data2ld", inputs=d.inputs, options=options)

    for bad in ({"rho_max": 1.0}, {"rho_start": 0.0}, {"rho_max": -0.5}):
        with pytest.raises(ValueError, match=r"must be a number in \(0, 1\)"):
            fit(**bad)
    with pytest.raises(ValueError, match="exceeds"):
        fit(rho_start=0.9, rho_max=0.5)
    for bad in ([0.5, 0.4], [0.5, 1.0], [], "0.5"):
        with pytest.raises(ValueError, match="strictly increasing sequence"):
            fit(rho=bad)
    for other in ({"rho_max": 0.99}, {"theta_tol": 1e-3}):
        with pytest.raises(ValueError, match="not both"):
            fit(rho=[0.5, 0.9], **other)
    with pytest.raises(ValueError, match="theta_tol"):
        fit(theta_tol=-1.0)
    with pytest.raises(ValueError, match="too low for an equation of order 2"):
        fit(spline_order=2)
    with pytest.raises(ValueError, match="strictly inside"):
        fit(knots=[0.0, 30.0])
    with pytest.raises(ValueError, match="unknown data2ld options"):
        fit(lam=3)
    # the weak likelihood fit() builds refuses such short grids first; the check of its own
    # guards direct use
    problem = replace(_problem(HEAD.model, d.t, d.U, d.inputs), t=d.t[:6], U=d.U[:6])
    with pytest.raises(ValueError, match=r"at least p \+ J \+ 2 = 7 observations"):
        data2ld.prepare_criterion(problem)
