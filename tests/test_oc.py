"""The orthogonality-conditions estimator ``fit(method="oc")`` (``estimators/oc.py``)."""

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.estimators import oc
from pymc_wendy.model.simulate import solve


def _alpha_pinene_model():
    def alpha_pinene(t, u, p):
        x1, x2, x3, x4, x5 = u
        return [
            -(p[0] + p[1]) * x1,
            p[0] * x1,
            p[1] * x1 - (p[2] + p[3]) * x3 + p[4] * x5,
            p[2] * x3,
            p[3] * x3 - p[4] * x5,
        ]

    return pw.ODEModel(alpha_pinene, states=["x1", "x2", "x3", "x4", "x5"],
                       params=["th1", "th2", "th3", "th4", "th5"])  # fmt: skip


def _michaelis_menten():
    # nonlinear in its parameters: exercises least_squares and the f_p Jacobian
    return pw.ODEModel(
        lambda t, u, p: [-p[0] * u[0] / (p[1] + u[0])], states=["s"], params=["vmax", "km"]
    )


def _noisy(model, p, u0, t, sigma, seed):
    X = solve(model, p, u0, t)
    return X + sigma * np.random.default_rng(seed).standard_normal(X.shape)


def _within(res, truth, z=4.0):
    """|estimate - truth| within z of the estimator's own standard errors."""
    se = np.sqrt(np.diag(res.covariance("oc")))
    assert np.all(np.isfinite(se)) and np.all(se > 0)
    assert np.all(np.abs(res.x - truth) < z * se), (res.x, truth, se)
    return se


# --- (1) recovery of known parameters -------------------------------------------------------
def test_recovers_logistic_with_gcv_knots_and_selected_L():
    prob = pw.get_problem("logistic")
    t = np.linspace(0, 10, 101)
    U = _noisy(prob.model, prob.p_true, prob.u0, t, 0.02, seed=1)
    res = pw.fit(prob.model, t, U, method="oc")
    assert res.success and res.method == "oc" and res.covariance_kind == "oc"
    se = _within(res, prob.p_true)
    assert np.all(se < 0.05)  # sigma = 2 % of the plateau: a few per cent at most
    h = res.history
    lo, hi = h["n_test_candidates"][0], h["n_test_candidates"][-1]
    assert (lo, hi) == (3, 6)  # default: max(2, ceil((J + 1) / D)), min(15, 3 J, n // 4)
    assert h["n_test"] == h["n_test_candidates"][np.argmin(h["prediction_sse"])]
    assert h["gcv"].shape == (1, h["n_knots_candidates"].size)
    assert h["n_knots"][0] == h["n_knots_candidates"][np.argmin(h["gcv"][0])]
    assert res.sigma[0] == pytest.approx(0.02, rel=0.2)  # the spline's residual estimate


def test_recovers_fitzhugh_nagumo_sine():
    prob = pw.get_problem("fitzhugh_nagumo")
    t = np.linspace(0, 25, 401)
    U = _noisy(prob.model, prob.p_true, prob.u0, t, 0.02, seed=2)
    res = pw.fit(prob.model, t, U, method="oc", options={"n_test": 12})
    _within(res, prob.p_true, z=5.0)
    assert res.history["prediction_sse"] is None and res.history["n_test"] == 12


def test_recovers_alpha_pinene_bspline():
    model = _alpha_pinene_model()
    theta = np.array([5.93, 2.96, 2.05, 27.5, 4.0]) * 1e-2
    t = np.linspace(0, 100, 200)
    U = _noisy(model, theta, [100.0, 0, 0, 0, 0], t, 3.0, seed=3)
    res = pw.fit(model, t, U, method="oc", options={"test_functions": "bspline"})
    _within(res, theta)
    assert res.history["test_functions"] == "bspline"
    assert res.history["conditions"].shape == (5, res.history["n_test"])


def test_recovers_nonlinear_in_parameters_with_bounds():
    model = _michaelis_menten()
    p = np.array([1.0, 2.0])
    t = np.linspace(0, 8, 161)
    U = _noisy(model, p, [5.0], t, 0.02, seed=4)
    res = pw.fit(model, t, U, method="oc", bounds=[(0.1, 5), (0.1, 10)],
                 options={"n_test": 6})  # fmt: skip
    assert res.success
    _within(res, p)
    # the same from a start
    res2 = pw.fit(model, t, U, method="oc", p0=[2.0, 1.0], options={"n_test": 6})
    np.testing.assert_allclose(res2.x, res.x, rtol=1e-6)


# --- (2) the closed-form variance against a Monte Carlo study -------------------------------
@pytest.mark.parametrize("family", ["sine", "bspline"])
def test_sandwich_variance_matches_monte_carlo(family):
    # Fixed knots and L: the estimator the sandwich describes (it ignores their selection).
    prob = pw.get_problem("logistic")
    t = np.linspace(0, 10, 101)
    X = solve(prob.model, prob.p_true, prob.u0, t)
    N = 60
    est, var = [], []
    for s in range(N):
        U = X + 0.02 * np.random.default_rng(100 + s).standard_normal(X.shape)
        r = pw.fit(prob.model, t, U, method="oc",
                   options={"test_functions": family, "n_knots": 8, "n_test": 6})  # fmt: skip
        est.append(r.x)
        var.append(np.diag(r.covariance("oc")))
    est, var = np.array(est), np.array(var)
    ratio = est.var(axis=0, ddof=1) / var.mean(axis=0)
    # sd of a sample variance relative to the variance (normal estimates): sqrt(2 / (N - 1))
    tol = 3 * np.sqrt(2 / (N - 1))
    assert np.all(np.abs(ratio - 1) < tol), ratio
    # and the estimate is unbiased to within its Monte Carlo error
    assert np.all(np.abs(est.mean(axis=0) - prob.p_true) < 4 * np.sqrt(var.mean(axis=0) / N))


# --- (3) analytic derivatives against finite differences ------------------------------------
def _conditions(model, t, U, p, family="sine", L=5):
    proxy = oc._fit_proxy(t, U, 3)
    tq, wq = oc._nodes(t[0], t[-1], np.concatenate([s.t for s in proxy.splines]), 32, 8)
    Phi, dPhi = oc._test_functions(family, L, t[0], t[-1], tq, wq)
    return oc._Conditions(model, proxy, Phi, dPhi, tq, wq)


@pytest.mark.parametrize("family", ["sine", "bspline"])
def test_jacobians_match_finite_differences(family):
    model = _michaelis_menten()
    p = np.array([1.0, 2.0])
    t = np.linspace(0, 8, 81)
    cond = _conditions(model, t, _noisy(model, p, [5.0], t, 0.02, seed=5), p, family)
    q = np.array([1.1, 1.7])
    h = 1e-6
    fd = np.column_stack(
        [(cond.residual(q + h * e) - cond.residual(q - h * e)) / (2 * h) for e in np.eye(2)]
    )
    np.testing.assert_allclose(cond.jac(q), fd, rtol=1e-6, atol=1e-9)

    # d e / d c_k: move the proxy's coefficients and recompute e
    B = cond.B[0]
    c = cond.proxy.splines[0].c.copy()

    def e_of(coef):
        X = (B @ coef)[:, None]
        return (cond.A @ model.f(cond.tq, X, q) + cond.dA @ X).T.ravel()

    fd_c = np.column_stack([(e_of(c + h * e) - e_of(c - h * e)) / (2 * h) for e in np.eye(c.size)])
    np.testing.assert_allclose(cond.jac_coef(q)[0], fd_c, rtol=1e-6, atol=1e-8)


def test_test_functions_are_orthonormal_and_vanish_at_the_ends():
    t0, t1 = 0.0, 7.0
    tq, wq = oc._nodes(t0, t1, oc._test_breaks("bspline", [6], t0, t1), 64, 8)
    for family in oc.usable_families():
        Phi, dPhi = oc._test_functions(family, 6, t0, t1, tq, wq)
        np.testing.assert_allclose((Phi * wq) @ Phi.T, np.eye(6), atol=1e-10)
        # int phi' = phi(t1) - phi(t0) = 0, the integration by parts without boundary term
        np.testing.assert_allclose(dPhi @ wq, 0, atol=1e-10)


# --- (4) bad input --------------------------------------------------------------------------
def test_bad_input_errors():
    prob = pw.get_problem("logistic")
    t = np.linspace(0, 10, 5)
    U = solve(prob.model, prob.p_true, prob.u0, t) + 0.01
    with pytest.raises(ValueError, match="at least 6 observation times"):
        pw.fit(prob.model, t, U, method="oc", sigma=0.01)
    t = np.linspace(0, 10, 41)
    U = solve(prob.model, prob.p_true, prob.u0, t)
    with pytest.raises(ValueError, match="test_functions.*'sine', 'bspline'.*'legendre'"):
        pw.fit(prob.model, t, U, method="oc", options={"test_functions": "legendre"})
    with pytest.raises(ValueError, match="unknown oc options"):
        pw.fit(prob.model, t, U, method="oc", options={"L": 3})
    with pytest.raises(ValueError, match="n_test_range"):
        pw.fit(prob.model, t, U, method="oc", options={"n_test_range": (5, 3)})
    with pytest.raises(ValueError, match="n_test"):
        pw.fit(prob.model, t, U, method="oc", options={"n_test": 1})
    with pytest.raises(ValueError, match="interior knots"):
        pw.fit(prob.model, t, U, method="oc", sigma=0.01, options={"n_knots": 40})
    with pytest.raises(ValueError, match="normal noise only"):
        pw.fit(prob.model, t, U + 0.5, method="oc", noise="lognormal", sigma=0.01)
    with pytest.raises(ValueError, match="nonlinear in its parameters"):
        pw.fit(_michaelis_menten(), t, U, method="oc", sigma=0.01)
    bad = U.copy()
    bad[3, 0] = np.inf  # NaN is a missing value (tests/test_hostile_data.py)
    with pytest.raises(ValueError, match="NaN or infinite"):
        pw.fit(prob.model, t, bad, method="oc", sigma=0.01)
