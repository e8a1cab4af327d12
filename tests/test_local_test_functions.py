"""Local test functions (``test_functions="local"``) and the banded path of WeakLikelihood."""

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.backends import kernel_cache, numba_kernels
from pymc_wendy.problems import get_problem
from pymc_wendy.weak import banded, bias
from pymc_wendy.weak.likelihood import WeakLikelihood
from pymc_wendy.weak.test_functions import (
    LocalTestFunctions,
    build_local_test_functions,
    from_matrices,
    get_family,
)
from pymc_wendy.weak.test_functions import local as local_module
from pymc_wendy.weak.test_functions.grid import make_grid


@pytest.fixture(scope="module")
def fhn():
    prob = get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=513, noise_ratio=0.1, seed=2)
    return prob, data


def _pair(prob, data, **local):
    """The likelihood with local test functions (banded) and the same functions, dense."""
    lik = WeakLikelihood(prob.model, data.t, data.U, test_functions={"local": True, **local})
    tf = lik.test_functions
    dense = WeakLikelihood(
        prob.model, data.t, data.U, sigma=lik.sigma, linear="general",
        test_functions=from_matrices(tf.phi, tf.dphi, data.t),
    )  # fmt: skip
    return lik, dense


def test_windows_equal_the_dense_construction(fhn):
    _, data = fhn
    tf = build_local_test_functions(data.t, data.U, radius=0.5, stride=3)
    assert isinstance(tf, LocalTestFunctions)
    grid = make_grid(data.t)
    idx = np.searchsorted(data.t, tf.centres)
    rows, drows, scales = grid.rows(get_family("bump"), 0.5, idx, derivative=True)
    np.testing.assert_allclose(tf.phi, rows, rtol=0, atol=1e-14)
    np.testing.assert_allclose(tf.dphi, drows, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(tf.scales, scales, rtol=1e-13)
    assert np.all(np.diff(idx) == 3) and tf.stride == 3
    # every admissible centre, strided, spread symmetrically
    first, last = grid.centres(0.5)[[0, -1]]
    assert idx[0] - first == last - idx[-1] or abs((idx[0] - first) - (last - idx[-1])) < 3
    np.testing.assert_allclose(tf.evaluate(data.t) * grid.weights, tf.phi, atol=1e-14)


def test_default_radius_is_twice_the_selected_minimum(fhn):
    prob, data = fhn
    tf = build_local_test_functions(data.t, data.U)
    default = pw.build_test_functions(data.t, data.U)
    assert tf.radii[0] == pytest.approx(2 * default.min_radius)
    dt = data.t[1] - data.t[0]
    assert tf.stride == max(1, round(tf.radii[0] / dt / 2))
    assert tf.windows.w == 3


def test_value_gradient_newton_model_match_dense(fhn):
    prob, data = fhn
    lik, dense = _pair(prob, data)
    assert lik.banded and not dense.banded
    p = np.asarray(prob.p_true) * 1.03
    v, g = lik.nll_grad(p)
    v0, g0 = dense.nll_grad(p)
    assert v == pytest.approx(v0, rel=1e-10)
    np.testing.assert_allclose(g, g0, rtol=1e-10, atol=1e-10 * np.abs(g0).max())
    np.testing.assert_allclose(lik.residual(p), dense.residual(p), atol=1e-12)
    np.testing.assert_allclose(lik.dr_dp(p), dense.dr_dp(p), rtol=1e-12, atol=1e-12)
    _, _, s = lik.newton_point(p)
    _, _, s0 = dense.newton_point(p)
    H, H0 = lik.newton_hessian(s, exact=False), dense.newton_hessian(s0, exact=False)
    np.testing.assert_allclose(H, H0, rtol=1e-10, atol=1e-10 * np.abs(H0).max())
    # the exact Hessian: central differences of the analytic gradient on the banded path
    He, He0 = lik.hessian(p), dense.hessian(p)
    np.testing.assert_allclose(He, He0, rtol=1e-5, atol=1e-6 * np.abs(He0).max())
    v, g, gs = lik.nll_grad_sigma2(p, 1.2 * lik.sigma)
    v0, g0, gs0 = dense.nll_grad_sigma2(p, 1.2 * lik.sigma)
    assert v == pytest.approx(v0, rel=1e-10)
    np.testing.assert_allclose(gs, gs0, rtol=1e-10)


def test_covariances_and_whitening_match_dense(fhn):
    prob, data = fhn
    lik, dense = _pair(prob, data)
    p = np.asarray(prob.p_true)
    for method in ("sandwich", "gls"):
        np.testing.assert_allclose(
            lik.parameter_covariance(p, method=method),
            dense.parameter_covariance(p, method=method),
            rtol=1e-9,
        )
    w, w0 = lik.whitened_residual(p), dense.whitened_residual(p)
    assert w @ w == pytest.approx(w0 @ w0, rel=1e-10)  # a rotation of the dense whitening
    G = lik.dr_dp(p)
    A, A0 = lik.whitener(p)(G), dense.whitener(p)(G)
    np.testing.assert_allclose(A.T @ A, A0.T @ A0, rtol=1e-9)
    np.testing.assert_allclose(lik.covariance_factor(p), dense.covariance_factor(p), atol=1e-12)


def test_fit_recovers_the_truth():
    prob = get_problem("lotka_volterra")
    data = prob.simulate(n_points=1025, noise_ratio=0.05, seed=7)
    res = pw.fit(prob.model, data.t, data.U, test_functions="local")
    p = np.asarray(prob.p_true)
    assert res.success, res.message
    assert res.likelihood.banded
    # 5 % noise on 1025 points: the default test functions give ~0.3 % error; 4 standard
    # errors per parameter and 2 % overall leave room for the Monte Carlo spread
    assert np.linalg.norm(res.x - p) / np.linalg.norm(p) < 0.02
    assert np.all(np.abs(res.x - p) < 4 * res.stderr)


def test_wide_band_falls_back_to_dense(fhn):
    prob, data = fhn
    lik = WeakLikelihood(
        prob.model, data.t, data.U, test_functions={"local": True, "radius": 2.0, "stride": 4}
    )
    assert lik.test_functions.windows.band_fraction(2) > banded.MAX_BAND_SHARE
    assert not lik.banded
    assert np.isfinite(lik.nll(np.asarray(prob.p_true)))


def test_hostile_inputs(fhn):
    prob, data = fhn
    with pytest.raises(ValueError, match="too few time points"):
        build_local_test_functions(data.t, data.U, radius=100.0)
    with pytest.raises(ValueError, match="at least 2 spacings"):
        build_local_test_functions(data.t, data.U, radius=1.5 * (data.t[1] - data.t[0]))
    with pytest.raises(ValueError, match="stride"):
        build_local_test_functions(data.t, data.U, radius=0.5, stride=0)
    with pytest.raises(ValueError, match="unknown options"):
        build_local_test_functions(data.t, data.U, radiuss=0.5)
    with pytest.raises(ValueError, match="too few time points"):
        build_local_test_functions(data.t[:4], data.U[:4])
    with pytest.raises(ValueError, match="must be 'local'"):
        WeakLikelihood(prob.model, data.t, data.U, test_functions="banded")
    t = np.sort(np.random.default_rng(0).uniform(0, 25, 200))
    with pytest.raises(ValueError, match="trapezoid"):
        build_local_test_functions(t, np.ones((200, 2)), radius=1.0)
    with pytest.raises(ValueError, match="initial_state"):
        WeakLikelihood(prob.model, data.t, data.U, test_functions="local", initial_state=data.U[0])


def test_dense_matrices_refused_beyond_the_limit(fhn, monkeypatch):
    prob, data = fhn
    lik = WeakLikelihood(prob.model, data.t, data.U, test_functions="local")
    monkeypatch.setattr(local_module, "DENSE_LIMIT_BYTES", 1000)
    tf = build_local_test_functions(data.t, data.U)
    with pytest.raises(ValueError, match="stored as windows"):
        tf.phi  # noqa: B018
    # the banded likelihood of a fresh set never densifies
    lik = WeakLikelihood(prob.model, data.t, data.U, test_functions=tf)
    assert np.isfinite(lik.nll_grad(np.asarray(prob.p_true))[0])


# each case compiles its own kernels (10-25 s cold): the fast tier keeps the one with
# per-entry weights, the slow tier runs them all
BANDED_CASES = [
    pytest.param("logistic", "normal", id="logistic", marks=pytest.mark.slow),
    pytest.param("fitzhugh_nagumo", "normal", id="fitzhugh_nagumo", marks=pytest.mark.slow),
    pytest.param("lotka_volterra", "lognormal", id="lotka_volterra"),  # per-entry weights
    pytest.param("lorenz", "normal", id="lorenz", marks=pytest.mark.slow),  # three states
]


@pytest.mark.parametrize("name, noise", BANDED_CASES)
def test_compiled_banded_kernel_matches_the_dense_reference(name, noise):
    """The numba Op's banded kernel (local test functions) against the numpy dense kernels on
    the same test functions: value, gradient in p and in the noise variances; and, relaxed
    toward the identity (tempering's rungs), against the compiled dense kernel."""
    prob = get_problem(name)
    data = prob.simulate(n_points=257, noise_ratio=0.05, noise=noise, seed=2)
    lik = WeakLikelihood(prob.model, data.t, data.U, test_functions="local", noise=noise)
    assert lik.banded
    kind, _ = numba_kernels.kernel_inputs(lik, infer_sigma=True)
    assert kind == "banded"
    tf = lik.test_functions
    dense = WeakLikelihood(
        prob.model, data.t, data.U, sigma=lik.sigma, linear="general", noise=noise,
        test_functions=from_matrices(tf.phi, tf.dphi, data.t),
    )  # fmt: skip
    assert not dense.banded
    p = np.asarray(prob.p_true) * 1.03
    s2 = lik.sigma**2 * np.linspace(0.8, 1.2, lik.model.n_states)

    nll, gp, _ = kernel_cache.make_kernel(lik, infer_sigma=False, want_grad=True)(
        p, np.zeros(0), 0.0
    )
    ref, ref_gp = dense.nll_grad(p)
    assert nll == pytest.approx(ref, rel=1e-10)
    np.testing.assert_allclose(gp, ref_gp, rtol=1e-8, atol=1e-10 * np.abs(ref_gp).max())

    with_sigma = kernel_cache.make_kernel(lik, infer_sigma=True, want_grad=True)
    nll, gp, gs = with_sigma(p, s2, 0.0)
    ref, ref_gp, ref_gs = dense.nll_grad_sigma2(p, np.sqrt(s2))
    assert nll == pytest.approx(ref, rel=1e-10)
    np.testing.assert_allclose(gp, ref_gp, rtol=1e-8, atol=1e-10 * np.abs(ref_gp).max())
    np.testing.assert_allclose(gs, ref_gs, rtol=1e-8, atol=1e-10 * np.abs(ref_gs).max())
    value_only = kernel_cache.make_kernel(lik, infer_sigma=True, want_grad=False)
    assert value_only(p, s2, 0.0)[0] == pytest.approx(ref, rel=1e-10)

    relaxed = with_sigma(p, s2, 0.3)
    dense_relaxed = kernel_cache.make_kernel(dense, infer_sigma=True, want_grad=True)(p, s2, 0.3)
    for ours, theirs in zip(relaxed, dense_relaxed, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-10 * np.max(np.abs(theirs)))
    # an impossible point is rejected, not raised
    assert with_sigma(p, -s2, 0.0)[0] == np.inf
    assert with_sigma(p * np.nan, s2, 0.0)[0] == np.inf


def test_compiled_banded_kernel_of_the_bias_corrected_objective():
    prob = get_problem("logistic")
    data = prob.simulate(n_points=257, noise_ratio=0.05, seed=2)
    lik = WeakLikelihood(prob.model, data.t, data.U, test_functions="local", linear="general")
    clik = bias.corrected_likelihood(lik, "analytic", np.asarray(prob.p_true))
    p = np.asarray(prob.p_true) * 1.02
    nll, gp, _ = kernel_cache.make_kernel(clik, infer_sigma=False, want_grad=True)(
        p, np.zeros(0), 0.0
    )
    ref, ref_gp = clik.nll_grad(p)
    assert nll == pytest.approx(ref, rel=1e-10)
    np.testing.assert_allclose(gp, ref_gp, rtol=1e-8, atol=1e-10 * np.abs(ref_gp).max())


def test_the_banded_op_samples_without_densifying(monkeypatch):
    """Through pytensor's numba backend the Op runs the banded kernel: densifying the test
    functions is an error here, and verify_grad passes."""
    import pytensor
    import pytensor.tensor as pt

    from pymc_wendy.backends.op import weak_loglik

    prob = get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=513, noise_ratio=0.05, seed=3)
    lik = WeakLikelihood(prob.model, data.t, data.U, test_functions="local")
    monkeypatch.setattr(local_module, "DENSE_LIMIT_BYTES", 0)
    p = np.asarray(prob.p_true)
    x = pt.dvector("p")
    out = weak_loglik(lik, x)
    fn = pytensor.function([x], [out, pytensor.grad(out, x)], mode="NUMBA")
    value, grad = fn(p * 1.01)
    ref, ref_gp = lik.nll_grad(p * 1.01)
    assert -value == pytest.approx(ref, rel=1e-10)
    np.testing.assert_allclose(-grad, ref_gp, rtol=1e-7, atol=1e-9 * np.abs(ref_gp).max())
    # one-sided differences: the curvature in the cubic coefficient (about 1e5) needs a
    # step below the default 1e-7 for the truncation error to stay under the tolerance
    rng = np.random.default_rng(5)
    pytensor.gradient.verify_grad(
        lambda z: weak_loglik(lik, p * (1 + z)), [np.zeros_like(p)], rng=rng, mode="NUMBA",
        eps=1e-9,
    )  # fmt: skip


def test_long_series_default_is_local():
    """Above LONG_SERIES_POINTS the first-order default is local (the SVD would cost ~M^3);
    at or below it the construction is WENDy's."""
    from pymc_wendy.weak import first_order

    prob = get_problem("lotka_volterra")
    n = first_order.LONG_SERIES_POINTS + 4
    t = np.linspace(0.0, 5.0, n)
    U = 1.0 + 0.1 * np.sin(np.column_stack([t, 2 * t]))
    tf = first_order.FirstOrderForm.default_test_functions(t, U, prob.model)
    assert isinstance(tf, LocalTestFunctions)
    edge = prob.simulate(n_points=first_order.LONG_SERIES_POINTS, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, edge.t, edge.U)
    assert not isinstance(lik.test_functions, LocalTestFunctions) and not lik.banded
