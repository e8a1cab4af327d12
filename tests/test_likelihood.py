"""Weak likelihood: derivatives against finite differences, statistical behaviour, bad input."""

import dataclasses
import warnings

import numpy as np
import pytest
from conftest import central_differences, relative_error
from scipy import stats

from pymc_wendy.problems import PROBLEMS, get_problem
from pymc_wendy.weak.kernels import CovarianceError, NonFiniteError
from pymc_wendy.weak.likelihood import WeakLikelihood

# Systems whose trajectories stay positive, so log-normal noise is defined for them.
POSITIVE = ["logistic", "lotka_volterra", "goodwin_3d", "sir_tdi", "protein_transduction"]
# first-order problems; the operator form of higher-order ones is tested in test_higher_order
FIRST_ORDER = [n for n, prob in PROBLEMS.items() if not prob.model.has_operator_terms]
CASES = [(name, "normal") for name in FIRST_ORDER] + [(name, "lognormal") for name in POSITIVE]


@pytest.fixture(scope="module", params=CASES, ids=[f"{n}-{z}" for n, z in CASES])
def case(request):
    name, noise = request.param
    # every state observed (sir is observed in I alone in the catalogue)
    prob = dataclasses.replace(get_problem(name), observed=None)
    data = prob.simulate(n_points=257, noise_ratio=0.05, noise=noise, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U, noise=noise, sigma=data.sigma)
    rng = np.random.default_rng(2)
    # a point near, but not at, the truth: derivatives there have no special structure
    p = data.p_true * (1 + 0.02 * rng.standard_normal(data.p_true.size))
    return lik, p


def test_gradient_matches_finite_differences(case):
    lik, p = case
    value, grad = lik.nll_grad(p)
    assert np.isclose(value, lik.nll(p), rtol=1e-12)
    numeric = central_differences(lik.nll, p)
    assert relative_error(grad, numeric) < 1e-5


def test_general_gradient_matches_finite_differences(case):
    lik, p = case
    value, grad, _ = lik.nll_grad_sigma2(p)  # always the general path
    assert relative_error(grad, central_differences(lik.nll, p)) < 1e-5


def test_hessian_matches_finite_differences_of_gradient(case):
    lik, p = case
    H = lik.hessian(p)
    numeric = central_differences(lambda q: lik.nll_grad_sigma2(q)[1], p)
    assert relative_error(H, 0.5 * (numeric + numeric.T)) < 1e-5
    np.testing.assert_allclose(H, H.T, rtol=0, atol=1e-12 * np.abs(H).max())


def test_noise_variance_gradient_matches_finite_differences(case):
    lik, p = case
    s2 = lik.sigma**2
    _, _, grad_s2 = lik.nll_grad_sigma2(p)
    numeric = central_differences(lambda v: lik.nll(p, sigma=np.sqrt(v)), s2)
    assert relative_error(grad_s2, numeric) < 1e-5


def test_quadratic_form_gradient_matches_finite_differences(case):
    """``gradient_parts(..., logdet=False)`` is the gradient of ``r' S^-1 r / 2`` alone, in
    ``p`` and in the noise variances (the bias study, ``benchmarks/bias_mechanisms.py``)."""
    from pymc_wendy.weak import kernels

    lik, p = case

    def quadratic(q, s2=lik.sigma**2):
        ev = lik.form.evaluation(q, s2)
        return 0.5 * ev.r @ ev.a

    ev = lik.form.evaluation(p, lik.sigma**2)
    Jp, Jup = lik.form.derivs(p, "f_p", "f_up")
    g, g_s2, _ = kernels.gradient_parts(ev, lik.phi, Jp, Jup, lik.ridge, logdet=False)
    assert relative_error(g, central_differences(quadratic, p)) < 1e-5
    assert relative_error(g_s2, central_differences(lambda v: quadratic(p, v), lik.sigma**2)) < 1e-5
    # and what it leaves out is exactly the log-determinant's gradient
    g_full, _, _ = kernels.gradient_parts(ev, lik.phi, Jp, Jup, lik.ridge)

    def half_logdet(q):
        return np.sum(np.log(np.diag(lik.form.evaluation(q, lik.sigma**2).C)))

    assert relative_error(g_full - g, central_differences(half_logdet, p)) < 1e-5


@pytest.mark.parametrize("name", ["goodwin_3d", "lotka_volterra"])
def test_blockwise_covariance_and_newton_model_against_dense_algebra(name):
    """The covariance built block by block from ``Phi``, ``dPhi`` and ``df/du`` is the dense
    ``L Sigma' L^T + ridge I``; the log-determinant's trace terms of the Hessian, left out
    of the optimiser's Newton model (``exact=False``), are what dense algebra with
    finite-difference ``dS/dp`` and ``dL/dp`` gives; and the exact Hessian is the model plus
    those terms. Nonlinear (Goodwin 3D) and linear (Lotka-Volterra) in the parameters."""
    from pymc_wendy.weak import kernels

    prob = get_problem(name)
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U, sigma=data.sigma, linear="general")
    p = data.p_true * (1 + 0.02 * np.random.default_rng(4).standard_normal(data.p_true.size))
    D, K = lik.model.n_states, lik.K
    s2 = (1 - lik.ridge) * lik.sigma**2

    def dense_L(q):
        (Ju,) = lik.form.derivs(q, "f_u")
        return kernels.linearisation(lik.phi, lik.dphi, Ju).reshape(K * D, -1)

    def dense_S(q):
        L = dense_L(q)
        return (L * np.repeat(s2, lik.t.size)) @ L.T + lik.ridge_diag * np.eye(K * D)

    S = dense_S(p)
    np.testing.assert_allclose(lik.covariance(p), S, rtol=0, atol=1e-12 * np.abs(S).max())

    Si = np.linalg.inv(S)
    dS = central_differences(dense_S, p)  # (n, n, J)
    dL = central_differences(dense_L, p)
    J = p.size
    trace = np.empty((J, J))
    for i in range(J):
        for j in range(J):
            trace[i, j] = np.trace(
                Si @ (dL[..., i] * np.repeat(s2, lik.t.size)) @ dL[..., j].T
            ) - 0.5 * np.trace(Si @ dS[..., i] @ Si @ dS[..., j])
    value, grad, state = lik.newton_point(p)
    model = lik.newton_hessian(state, exact=False)
    exact = lik.newton_hessian(state, exact=True)
    assert value == lik.nll(p) and np.array_equal(grad, lik.nll_grad(p)[1])
    np.testing.assert_array_equal(exact, lik.hessian(p))
    assert relative_error(exact - model, trace) < 1e-5
    # the terms are small against the curvature of the quadratic form (why the model works)
    assert np.linalg.norm(exact - model) < 1e-3 * np.linalg.norm(exact)


@pytest.mark.parametrize("name", ["logistic", "lotka_volterra", "fitzhugh_nagumo", "lorenz"])
def test_linear_fast_path_equals_general_path(name):
    prob = get_problem(name)
    data = prob.simulate(n_points=257, noise_ratio=0.1, seed=3)
    fast = WeakLikelihood(prob.model, data.t, data.U, linear="fast")
    general = WeakLikelihood(
        prob.model, data.t, data.U, test_functions=fast.test_functions, linear="general"
    )
    assert prob.model.is_linear_in_params
    p = data.p_true * 1.05
    v1, g1 = fast.nll_grad(p)
    v2, g2 = general.nll_grad(p)
    assert fast.exact_hessian_is_cheap and not general.exact_hessian_is_cheap
    assert abs(v1 - v2) <= 1e-10 * abs(v2)
    assert relative_error(g1, g2) < 1e-9


@pytest.mark.parametrize("name", ["logistic", "lotka_volterra", "fitzhugh_nagumo"])
def test_noise_free_residual_and_weak_least_squares_recover_truth(name):
    prob = get_problem(name)
    data = prob.simulate(n_points=1025, noise_ratio=0.0, seed=0)
    with pytest.warns(UserWarning, match="noise-free"):
        lik = WeakLikelihood(prob.model, data.t, data.U)
    p_true = data.p_true
    scale = np.linalg.norm(lik.form.b)
    # the residual at the truth is quadrature (and solver) error: tiny, where 1 % off is not
    assert np.linalg.norm(lik.residual(p_true)) < 1e-6 * scale
    assert np.linalg.norm(lik.residual(1.01 * p_true)) > 1e-3 * scale
    # weak least squares, closed form for linear-in-parameter models: r(p) = r(0) + G p
    G = lik.dr_dp(p_true)
    p_hat = np.linalg.lstsq(G, -lik.residual(np.zeros_like(p_true)), rcond=None)[0]
    assert np.max(np.abs(p_hat - p_true) / np.abs(p_true)) < 1e-3


def test_noise_free_residual_converges_spectrally():
    """With radii fixed in time units, halving dt shrinks r(p*) far faster than O(dt^2)."""
    prob = get_problem("fitzhugh_nagumo")
    rel = []
    for n in (257, 513):
        data = prob.simulate(n_points=n, noise_ratio=0.0)
        lik = WeakLikelihood(
            prob.model, data.t, data.U, sigma=1.0, test_functions={"radii": [0.8, 1.6]}
        )
        rel.append(np.linalg.norm(lik.residual(data.p_true)) / np.linalg.norm(lik.form.b))
    assert rel[1] < rel[0] / 100


@pytest.mark.parametrize("name", ["logistic", "lotka_volterra", "fitzhugh_nagumo"])
def test_whitened_residual_is_standard_normal_at_truth(name):
    """WENDy 2023 Fig. 4: S(p*)^(-1/2) r(p*) pooled over 100 data sets at 20 % noise, 256 points."""
    prob = get_problem(name)
    first = prob.simulate(n_points=257, noise_ratio=0.2, seed=0)
    tf = WeakLikelihood(prob.model, first.t, first.U).test_functions  # fixed across data sets
    white, raw = [], []
    for seed in range(100):
        data = prob.simulate(n_points=257, noise_ratio=0.2, seed=seed)
        lik = WeakLikelihood(prob.model, data.t, data.U, sigma=data.sigma, test_functions=tf)
        white.append(lik.whitened_residual(data.p_true))
        raw.append(lik.residual(data.p_true))
    w, u = np.array(white), np.array(raw)  # (seeds, K*D)
    n = w.size
    se_mean, se_var = 1 / np.sqrt(n), np.sqrt(2 / n)
    # The linearisation neglects O(sigma^2) terms; at 20 % noise we allow 0.05 / 0.1 beyond 5 SE.
    assert abs(w.mean()) < 5 * se_mean + 0.05
    assert abs(w.var() - 1) < 5 * se_var + 0.1

    # Per-entry variances across the 100 data sets: for N(0, I) entries, 99 * var ~ chi2(99).
    # Whitened entries fall in the central 99.9 % band (we allow 3 % outliers for the
    # linearisation error); unwhitened ones are not identically distributed at all.
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], w.shape[0] - 1) / w.shape[0]

    def in_band(x):
        v = x.var(axis=0)
        return np.mean((v > lo) & (v < hi))

    assert in_band(w) > 0.97
    assert in_band(u) < 0.5


def test_covariance_is_the_linearised_noise_covariance():
    """S(p) = (1 - eps) L Sigma L^T + eps I with L = dr/dvec(U), L built by finite differences."""
    prob = get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=65, noise_ratio=0.1, seed=0)
    sigma = np.array([0.05, 0.2])
    lik = WeakLikelihood(prob.model, data.t, data.U, sigma=sigma, test_functions={"K": 12})
    p = data.p_true * 1.03

    def r_of(U):
        return WeakLikelihood(
            prob.model, data.t, U, sigma=sigma, test_functions=lik.test_functions
        ).residual(p)

    cols, h = [], 1e-6
    for e in range(2):  # columns ordered (e, m), as in the kernels
        for m in range(data.t.size):
            dU = np.zeros_like(data.U)
            dU[m, e] = h
            cols.append((r_of(data.U + dU) - r_of(data.U - dU)) / (2 * h))
    L = np.array(cols).T
    variances = np.repeat(sigma**2, data.t.size)
    expected = (1 - lik.ridge) * (L * variances) @ L.T + lik.ridge * np.eye(L.shape[0])
    S = lik.covariance(p)
    assert relative_error(S, expected) < 1e-6


def test_parameter_covariances_at_the_mle_are_positive_definite():
    from scipy.optimize import minimize

    prob = get_problem("lotka_volterra")
    data = prob.simulate(n_points=257, noise_ratio=0.05, seed=0)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    res = minimize(lik.nll_grad, data.p_true, jac=True, hess=lik.hessian, method="trust-exact")
    assert res.success
    for method in ("sandwich", "hessian"):
        cov = lik.parameter_covariance(res.x, method=method)
        assert np.linalg.eigvalsh(cov).min() > 0
    np.testing.assert_allclose(
        lik.parameter_covariance(res.x, method="hessian") @ lik.hessian(res.x), np.eye(4), atol=1e-8
    )


def test_estimated_sigma_is_close_to_truth():
    prob = get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=1025, noise_ratio=0.1, seed=5)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    assert lik.sigma_estimated
    np.testing.assert_allclose(lik.sigma, data.sigma, rtol=0.1)


# --- bad input ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lv():
    prob = get_problem("lotka_volterra")
    return prob, prob.simulate(n_points=129, noise_ratio=0.05, seed=0)


def test_bad_data_raise_clear_errors(lv):
    prob, data = lv
    model, t, U = prob.model, data.t, data.U
    with pytest.raises(ValueError, match="strictly increasing"):
        WeakLikelihood(model, t[::-1], U)
    with pytest.raises(ValueError, match="pass U.T"):
        WeakLikelihood(model, t, U.T)
    with pytest.raises(ValueError, match="columns but the model has 2 states"):
        WeakLikelihood(model, t, np.hstack([U, U]))
    bad = U.copy()
    bad[3, 1] = np.inf  # NaN is a missing value (tests/test_hostile_data.py)
    with pytest.raises(ValueError, match="NaN or infinite"):
        WeakLikelihood(model, t, bad)
    neg = U.copy()
    neg[5, 0] = -1.0
    with pytest.raises(ValueError, match="log-normal noise needs positive data"):
        WeakLikelihood(model, t, neg, noise="lognormal")
    with pytest.raises(ValueError, match="noise must be"):
        WeakLikelihood(model, t, U, noise="gamma")
    with pytest.raises(ValueError, match="poisson noise models counts"):
        WeakLikelihood(model, t, U, noise="poisson")
    with pytest.raises(ValueError, match="sigma must be a scalar or have 2 entries"):
        WeakLikelihood(model, t, U, sigma=[0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="non-negative"):
        WeakLikelihood(model, t, U, sigma=-1.0)
    with pytest.raises(ValueError, match="points"):
        WeakLikelihood(model, t[:4], U[:4])
    lik = WeakLikelihood(model, t, U)
    with pytest.raises(ValueError, match=r"p must have shape \(4,\)"):
        lik.nll(np.ones(3))


def test_non_finite_rhs_and_singular_covariance_are_reported(lv):
    prob, data = lv
    sir = get_problem("sir_tdi")
    sdata = sir.simulate(n_points=257, noise_ratio=0.05, noise="lognormal", seed=0)
    lik = WeakLikelihood(sir.model, sdata.t, sdata.U, noise="lognormal")
    p = sdata.p_true.copy()
    p[0] = 0.0  # 0/0 in the transmission term
    with pytest.raises(NonFiniteError, match="not finite"):
        lik.nll(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zero = WeakLikelihood(prob.model, data.t, data.U, sigma=0.0, ridge=0.0)
    with pytest.raises(CovarianceError, match="not positive definite"):
        zero.nll_grad_sigma2(data.p_true)


def test_linear_algebra_runs_on_one_blas_thread(monkeypatch):
    """The likelihood's algebra (and ``fit``, and the test functions' SVD) runs under one BLAS
    thread whatever the caller set, and the caller's setting is restored afterwards
    (``pymc_wendy._threads``: threads spinning against busy cores cost 100x)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    import pymc_wendy as pw
    from pymc_wendy.weak import kernels

    def blas_threads():
        return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

    seen = []
    for name in ("gradient_parts", "hessian"):
        orig = getattr(kernels, name)

        def spy(*args, _orig=orig, **kwargs):
            seen.append(blas_threads())
            return _orig(*args, **kwargs)

        monkeypatch.setattr(kernels, name, spy)
    svd = np.linalg.svd

    def svd_spy(*args, **kwargs):
        seen.append(blas_threads())
        return svd(*args, **kwargs)

    monkeypatch.setattr(np.linalg, "svd", svd_spy)
    prob = get_problem("goodwin_2d")  # nonlinear in p: the general kernels
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=0)
    with threadpool_limits(2, user_api="blas"):
        lik = WeakLikelihood(prob.model, data.t, data.U)
        lik.nll_grad(prob.p_true)
        lik.hessian(prob.p_true)
        pw.fit(prob.model, data.t, data.U, method="wls", p0=prob.p_true)
        assert blas_threads() == 2
    assert len(seen) >= 4 and set(seen) == {1}, seen
