"""Higher-order models with known inputs: model definition, inputs, the operator-form weak
likelihood (residual, gradient, Hessian, compiled kernel), simulation and recovery."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import central_differences
from scipy import integrate

import pymc_wendy as pw
from pymc_wendy.backends import kernel_cache
from pymc_wendy.model.inputs import Input
from pymc_wendy.model.ode import ODEDefinitionError
from pymc_wendy.weak import kernels, operator_kernels
from pymc_wendy.weak.operator import OperatorForm, moment_error

HEAD = pw.get_problem("head_acceleration")


def _damped(t, u, p):
    x, dx = u
    return [-p[0] * x - p[1] * dx]


def _nonlinear(t, u, p, w):
    # nonlinear in the parameters (p0^2, p1 p0) and in the state (x^3)
    x, dx = u
    return [-(p[0] ** 2) * x - 2 * p[1] * p[0] * dx + p[2] * w[0] - 0.1 * x**3]


NONLINEAR = pw.ODEModel(_nonlinear, ["x"], ["w", "z", "g"], order=2, inputs=["u"])


def _nonlinear_data(seed=1, n=101):
    p = np.array([0.3, 0.2, 0.5])
    t = np.linspace(0.0, 60.0, n)
    pulse = Input.pulse(14.0, 15.0)
    X = pw.solve(NONLINEAR, p, [0.1, 0.0], t, inputs={"u": pulse})[:, 0]
    U = X + 0.01 * np.random.default_rng(seed).standard_normal(n)
    return p, t, U, pulse


# --- the model -------------------------------------------------------------------------------


def test_model_splits_pointwise_derivative_and_input_terms():
    m = HEAD.model
    assert m.orders == (2,) and m.inputs == ("u",)
    assert m.companion_states == ("x", "x'")
    assert m.has_operator_terms and m.is_linear_in_params
    assert [str(e) for e in m.expressions] == ["-p0*u0"]
    assert {k: str(v) for k, v in m.derivative_terms.items()} == {(0, 0, 1): "-p1"}
    assert {k: str(v) for k, v in m.input_terms.items()} == {(0, 0): "p2"}
    assert "x'' = alpha*u - beta0*x - beta1*x'" in repr(m)
    assert not NONLINEAR.is_linear_in_params


def test_model_errors_name_the_problem():
    with pytest.raises(ODEDefinitionError, match=r"x' must enter linearly.*c\*x"):
        pw.ODEModel(lambda t, u, p: [p[0] * u[0] * u[1]], ["x"], ["c"], order=2)
    with pytest.raises(ODEDefinitionError, match="input 'w' must enter linearly"):
        pw.ODEModel(lambda t, u, p, w: [-p[0] * u[0] * w[0]], ["x"], ["c"], inputs=["w"])
    with pytest.raises(ODEDefinitionError, match="order must"):
        pw.ODEModel(_damped, ["x"], ["a", "b"], order=0)
    with pytest.raises(ODEDefinitionError, match="one per state"):
        pw.ODEModel(_damped, ["x"], ["a", "b"], order=(2, 2))
    with pytest.raises(ValueError, match="log-normal noise is not supported"):
        HEAD.model.log_transformed()


def test_companion_solution_matches_closed_form():
    # x = exp(-a t) cos(b t) solves x'' = -(a^2 + b^2) x - 2 a x'
    a, b = 0.1, 0.7
    m = pw.ODEModel(_damped, ["x"], ["k", "c"], order=2)
    t = np.linspace(0.0, 20.0, 201)
    Y = pw.solve(m, [a * a + b * b, 2 * a], [1.0, -a], t)
    exact = np.exp(-a * t) * np.cos(b * t)
    np.testing.assert_allclose(Y[:, 0], exact, atol=1e-9)
    slope = -np.exp(-a * t) * (a * np.cos(b * t) + b * np.sin(b * t))
    np.testing.assert_allclose(Y[:, 1], slope, atol=1e-9)


def test_pulse_response_matches_closed_form():
    # x'' = -c x' + u with a unit pulse on [1, 2]: x' = (1 - e^{-c (t - 1)}) / c on the pulse
    m = pw.ODEModel(lambda t, u, p, w: [-p[0] * u[1] + w[0]], ["x"], ["c"], order=2, inputs=["u"])
    c = 0.5
    t = np.linspace(0.0, 4.0, 81)
    Y = pw.solve(m, [c], [0.0, 0.0], t, inputs={"u": Input.pulse(1.0, 2.0)})
    v2 = (1 - np.exp(-c)) / c
    expected = np.where(
        t <= 1, 0.0, np.where(t <= 2, (1 - np.exp(-c * (t - 1))) / c, v2 * np.exp(-c * (t - 2)))
    )
    np.testing.assert_allclose(Y[:, 1], expected, atol=1e-9)


# --- inputs ----------------------------------------------------------------------------------


def test_pulse_integrals_are_exact():
    t = np.linspace(0.0, 60.0, 101)
    tf = pw.build_test_functions(t, np.sin(t)[:, None], min_radius=6.0)
    pulse = Input.pulse(14.0, 15.0, height=2.0)
    # int phi' w = 2 (phi(15) - phi(14)): closed form through the fundamental theorem
    closed = 2.0 * (tf.evaluate([15.0]) - tf.evaluate([14.0]))[:, 0]
    np.testing.assert_allclose(pulse.integrate(tf, derivative=1), closed, rtol=0, atol=1e-13)
    # int phi w against adaptive quadrature on the pulse
    ref = [integrate.quad(lambda s, k=k: 2.0 * tf.evaluate([s])[k, 0], 14, 15)[0] for k in (0, 5)]
    np.testing.assert_allclose(pulse.integrate(tf)[[0, 5]], ref, rtol=0, atol=1e-12)


def test_inputs_and_forced_problems_pickle():
    """Coverage studies send problems and their inputs to worker processes."""
    import pickle

    pulse = pickle.loads(pickle.dumps(Input.pulse(14.0, 15.0, height=2.0)))
    np.testing.assert_array_equal(pulse([13.9, 14.0, 14.5, 15.0, 15.1]), [0, 2, 2, 2, 0])
    assert pulse.breakpoints.tolist() == [14.0, 15.0]
    prob = pickle.loads(pickle.dumps(HEAD))
    d = prob.simulate(n_points=21, noise_ratio=0.01, seed=1)
    np.testing.assert_array_equal(d.U, HEAD.simulate(n_points=21, noise_ratio=0.01, seed=1).U)


def test_grid_input_is_piecewise_linear_and_must_cover_the_data():
    t = np.linspace(0.0, 10.0, 41)
    tf = pw.build_test_functions(t, np.sin(t)[:, None], min_radius=2.0)
    ramp = Input([0.0, 5.0], t=[0.0, 10.0])  # w = t / 2
    poly = Input(lambda s: 0.5 * s)
    np.testing.assert_allclose(ramp.integrate(tf), poly.integrate(tf), atol=1e-13)
    short = Input([0.0, 1.0], t=[0.0, 8.0])
    with pytest.raises(ValueError, match=r"defined on \[0, 8\] but the data span \[0, 10\]"):
        short.integrate(tf)
    m = pw.ODEModel(lambda t, u, p, w: [-p[0] * u[0] + w[0]], ["x"], ["a"], inputs=["w"])
    with pytest.raises(ValueError, match="defined on"):
        pw.WeakLikelihood(m, t, np.sin(t), inputs={"w": short})
    with pytest.raises(ValueError, match="give their values with inputs="):
        pw.WeakLikelihood(m, t, np.sin(t))
    with pytest.raises(ValueError, match="unknown"):
        pw.WeakLikelihood(m, t, np.sin(t), inputs={"w": ramp, "v": ramp})


# --- the weak likelihood -----------------------------------------------------------------------


def test_second_order_residual_matches_hand_derived():
    d = HEAD.simulate(noise_ratio=0.05, seed=3)
    lik = pw.WeakLikelihood(HEAD.model, d.t, d.U, inputs=d.inputs)
    assert isinstance(lik.form, OperatorForm) and isinstance(lik, pw.WeakLikelihood)
    tf = lik.test_functions
    x = d.U[:, 0]
    psi = d.inputs["u"].integrate(tf)
    b0, b1, al = 0.07, 0.11, 0.5
    # int phi (x'' + b0 x + b1 x' - al u) = Phi'' x + b0 Phi x - b1 Phi' x - al Psi; r is minus
    hand = -(tf.derivative_matrix(2) @ x + b0 * tf.phi @ x - b1 * tf.dphi @ x - al * psi)
    np.testing.assert_allclose(lik.residual([b0, b1, al]), hand, rtol=1e-12, atol=1e-14)


def test_residual_vanishes_on_a_closed_form_solution():
    a, b = 0.1, 0.7
    m = pw.ODEModel(_damped, ["x"], ["k", "c"], order=2)
    t = np.linspace(0.0, 30.0, 301)
    x = np.exp(-a * t) * np.cos(b * t)
    # radii of 20 grid spacings and more: the grid integrates phi'' x to about 1e-9
    lik = pw.WeakLikelihood(m, t, x, sigma=1e-3, test_functions={"min_radius": 2.0})
    r = lik.residual([a * a + b * b, 2 * a])
    scale = np.max(np.abs(lik.test_functions.derivative_matrix(2) @ x))
    assert np.max(np.abs(r)) < 1e-8 * scale
    # and a wrong damping leaves a residual of the size of the term it changes
    r_wrong = lik.residual([a * a + b * b, 2.2 * a])
    assert np.max(np.abs(r_wrong)) > 1e-3 * scale


def test_first_order_operator_kernels_reduce_to_the_standard_ones():
    prob = pw.get_problem("lotka_volterra")
    d = prob.simulate(noise_ratio=0.05, subsample=8, seed=2)
    lik = pw.WeakLikelihood(prob.model, d.t, d.U)
    p = prob.p_true * 1.05
    D = prob.model.n_states
    data = operator_kernels.Data(
        phi=lik.phi, ops=lik.dphi[None], OX=(lik.dphi @ lik.X)[None], Psi=np.zeros((lik.K, 0))
    )
    J = prob.model.n_params
    terms = operator_kernels.Terms(
        C=np.eye(D)[None],
        beta=np.zeros((D, 0)),
        C_p=np.zeros((1, D, D, J)),
        beta_p=np.zeros((D, 0, J)),
        C_pp=np.zeros((1, D, D, J, J)),
        beta_pp=np.zeros((D, 0, J, J)),
    )
    F, Ju, Jp, Jup, Jpp, Jupp = lik.form.derivs(p, "f", "f_u", "f_p", "f_up", "f_pp", "f_upp")
    s2 = lik.sigma**2
    # the operator kernels take the pointwise parts stacked (one entry: no total derivatives)
    ev_o = operator_kernels.evaluate(data, F[None], Ju[None], terms, s2, lik.ridge)
    ev_k = kernels.evaluate(lik.phi, lik.dphi, lik.form.b, F, Ju, s2, lik.ridge)
    assert ev_o.nll == pytest.approx(ev_k.nll, rel=1e-12)
    g_o, gs_o, BT = operator_kernels.gradient_parts(
        ev_o, data, Jp[None], Jup[None], terms, lik.ridge
    )
    g_k, gs_k, B = kernels.gradient_parts(ev_k, lik.phi, Jp, Jup, lik.ridge)
    np.testing.assert_allclose(g_o, g_k, rtol=1e-9)
    np.testing.assert_allclose(gs_o, gs_k, rtol=1e-9)
    for exact in (True, False):
        H_o = operator_kernels.hessian(
            ev_o, data, Jp[None], Jup[None], Jpp[None], Jupp[None], terms, BT, exact=exact
        )
        H_k = kernels.hessian(ev_k, lik.phi, Jp, Jup, Jpp, Jupp, B, exact=exact)
        np.testing.assert_allclose(H_o, H_k, rtol=1e-8, atol=1e-8 * np.abs(H_k).max())


@pytest.mark.parametrize("linear", ["fast", "general"])
def test_gradient_and_hessian_against_finite_differences(linear):
    d = HEAD.simulate(noise_ratio=0.05, seed=4)
    lik = pw.WeakLikelihood(HEAD.model, d.t, d.U, inputs=d.inputs, linear=linear)
    p = HEAD.p_true * np.array([1.1, 0.9, 1.05])
    _, g = lik.nll_grad(p)
    fd = central_differences(lik.nll, p, 1e-6, floor=0.0)  # steps 1e-6 |p_j|
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(g).max())
    H = lik.hessian(p)
    Hfd = central_differences(lambda q: lik.nll_grad(q)[1], p, 1e-6, floor=0.0).T
    np.testing.assert_allclose(H, Hfd, rtol=1e-5, atol=1e-6 * np.abs(H).max())


def test_nonlinear_model_gradients_and_compiled_kernel():
    p, t, U, pulse = _nonlinear_data()
    lik = pw.WeakLikelihood(NONLINEAR, t, U, inputs={"u": pulse}, sigma=0.01)
    h = 1e-6
    _, g = lik.nll_grad(p)
    fd = np.array([(lik.nll(p + h * e) - lik.nll(p - h * e)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-5 * np.abs(g).max())
    H = lik.hessian(p)
    Hfd = np.array(
        [(lik.nll_grad(p + h * e)[1] - lik.nll_grad(p - h * e)[1]) / (2 * h) for e in np.eye(3)]
    )
    np.testing.assert_allclose(H, Hfd, rtol=1e-5, atol=1e-6 * np.abs(H).max())
    s2 = np.array([1.3e-4])
    value, gp, gs = lik.nll_grad_sigma2(p, np.sqrt(s2))
    hs = 1e-10
    fd_s = (lik.nll(p, np.sqrt(s2 + hs)) - lik.nll(p, np.sqrt(s2 - hs))) / (2 * hs)
    assert gs[0] == pytest.approx(fd_s, rel=1e-5)
    kernel = kernel_cache.make_kernel(lik, infer_sigma=True, want_grad=True)
    k_value, k_gp, k_gs = kernel(p, s2, 0.0)
    assert k_value == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(k_gp, gp, rtol=1e-9)
    np.testing.assert_allclose(k_gs, gs, rtol=1e-9)


def _coupled(t, u, p, w):
    # two second-order states, coupled, a derivative term with a p-dependent coefficient
    x, dx, y, dy = u
    return [
        -(p[0] ** 2) * x - p[1] * p[0] * dx + p[2] * w[0] + 0.2 * (y - x),
        -p[3] * y - 0.3 * dy + 0.1 * dx + 0.05 * x**2,
    ]


COUPLED = pw.ODEModel(_coupled, ["x", "y"], ["w", "z", "g", "k"], order=2, inputs=["u"])


@pytest.mark.parametrize("infer_sigma", [pytest.param(False, marks=pytest.mark.slow), True])
def test_two_state_operator_kernel_matches_numpy(infer_sigma):
    # the compiled operator path with D = 2: every block of S^-1 between states enters the
    # trace terms through the basis forms (Phi and each Phi^(q), numba_kernels._basis_forms)
    p = np.array([0.3, 0.2, 0.5, 0.15])
    t = np.linspace(0.0, 60.0, 121)
    pulse = Input.pulse(14.0, 15.0)
    X = pw.solve(COUPLED, p, [0.1, 0.0, -0.1, 0.05], t, inputs={"u": pulse})[:, [0, 2]]
    U = X + 0.01 * np.random.default_rng(3).standard_normal(X.shape)
    lik = pw.WeakLikelihood(COUPLED, t, U, inputs={"u": pulse}, sigma=[0.01, 0.01])
    q = p * np.array([1.05, 0.9, 1.1, 1.02])
    s2 = np.array([1.2e-4, 0.8e-4])
    kernel = kernel_cache.make_kernel(lik, infer_sigma=infer_sigma, want_grad=True)
    value, gp, gs = kernel(q, s2 if infer_sigma else np.zeros(0), 0.0)
    if infer_sigma:
        ref, ref_gp, ref_gs = lik.nll_grad_sigma2(q, np.sqrt(s2))
        np.testing.assert_allclose(gs[:2], ref_gs, rtol=1e-8)
    else:
        ref, ref_gp = lik.nll_grad(q)
    assert value == pytest.approx(ref, rel=1e-11)
    np.testing.assert_allclose(gp, ref_gp, rtol=1e-8, atol=1e-10 * np.abs(ref_gp).max())


@pytest.mark.slow
def test_op_gradient_is_verified_by_pytensor():
    from pytensor.gradient import verify_grad

    p, t, U, pulse = _nonlinear_data()
    lik = pw.WeakLikelihood(NONLINEAR, t, U, inputs={"u": pulse}, sigma=0.01)
    # relative coordinates keep finite differences well scaled (as in test_op)
    verify_grad(
        lambda x: pw.weak_loglik(lik, p * (1 + x)), [np.zeros(3)], rng=np.random.default_rng(0)
    )


def test_order_the_test_functions_cannot_support():
    d = HEAD.simulate(noise_ratio=0.05, seed=5)
    tf = pw.build_test_functions(d.t, d.U, min_radius=3 * d.t[1])
    with pytest.raises(ValueError, match="2-th derivatives are integrated with relative error"):
        pw.WeakLikelihood(HEAD.model, d.t, d.U, inputs=d.inputs, test_functions=tf)
    with pytest.raises(ValueError, match="user matrices"):
        pw.WeakLikelihood(HEAD.model, d.t, d.U, inputs=d.inputs, test_functions=(tf.phi, tf.dphi))
    assert moment_error(tf, 2) > moment_error(tf, 1)


def test_fixed_step_and_spline_estimators_refuse_higher_order_models():
    d = HEAD.simulate(noise_ratio=0.05, seed=6)
    for method in ("deq", "oc"):
        with pytest.raises(ValueError, match="does not support models of order > 1"):
            pw.fit(HEAD.model, d.t, d.U, method=method, inputs=d.inputs)


def test_output_error_sensitivities_of_the_companion_system():
    """The forward sensitivities of the companion state (with the pulse) against central
    differences of the residual, for the nonlinear model."""
    from pymc_wendy.estimators.output_error import _Problem, polynomial_start

    p, t, U, pulse = _nonlinear_data(n=41)
    X = U[:, None]
    prob = _Problem(NONLINEAR, t, X, False, np.array([100.0]), {
        "method": "LSODA", "rtol": 1e-10, "atol": 1e-12, "max_nfev": 100_000
    }, {"u": pulse})  # fmt: skip
    theta = np.concatenate([p * 1.1, polynomial_start((2,), t, X)])
    J = prob.jacobian(theta)
    assert J.shape == (41, 5)
    fd = central_differences(prob.residual, theta, 1e-4, floor=0.1)  # above the solver noise
    np.testing.assert_allclose(J, fd, rtol=1e-4, atol=1e-6 * np.abs(J).max())


def test_output_error_and_hybrid_on_head_acceleration():
    """Output error over (p, x(0), x'(0)) is the efficient estimator here: its standard
    errors are at the Cramer-Rao bound (within 1.5x; the bound assumes x(0), x'(0) known)."""
    crb = np.array([0.017, 0.125, 0.246]) / 100
    d = HEAD.simulate(noise_ratio=0.01, seed=2)
    res = pw.fit(HEAD.model, d.t, d.U, method="oels", inputs=d.inputs, bounds=HEAD.bounds)
    assert res.success and res.u0.shape == (2,)
    assert np.all(np.abs(res.x - HEAD.p_true) < 4 * res.stderr)
    assert np.all(res.stderr < 1.5 * crb) and np.all(res.stderr > crb / 1.5)
    assert np.all(np.abs(res.u0) < 5 * d.sigma[0])  # the truth is rest, (0, 0)
    assert list(res.to_xarray()["u0"].initial_state.values) == ["x", "x'"]
    traj = res.simulate()  # with the fit's pulse, from its fitted companion state
    assert traj.shape == (101, 1) and np.sqrt(np.mean((traj - d.U_true) ** 2)) < d.sigma[0]
    hyb = pw.fit(HEAD.model, d.t, d.U, method="hybrid", inputs=d.inputs, bounds=HEAD.bounds)
    assert hyb.success and np.all(np.abs(hyb.x - HEAD.p_true) < 4 * hyb.stderr)
    with pytest.raises(ValueError, match="x'"):
        pw.fit(HEAD.model, d.t, d.U, method="oels", inputs=d.inputs, u0=[0.0])


def test_recovery_head_acceleration_n101_sigma001():
    """Parameter recovery at the paper's easiest cell, against the truth and the Cramer-Rao
    bound of output-error least squares (x(0) = x'(0) = 0 known): 100 x (0.017, 0.125,
    0.246), computed with the forward sensitivities of this model (docs/higher_order.md)."""
    crb = np.array([0.017, 0.125, 0.246]) / 100
    errors = []
    for seed in range(8):
        d = HEAD.simulate(noise_ratio=0.01, seed=seed)
        res = pw.fit(HEAD.model, d.t, d.U, inputs=d.inputs)
        assert res.success
        # each estimate within 4 of its own standard errors
        assert np.all(np.abs(res.x - HEAD.p_true) < 4 * res.stderr)
        # the standard errors are near-efficient: within a factor 1.5 of the bound
        assert np.all(res.stderr < 1.5 * crb) and np.all(res.stderr > crb / 1.5)
        errors.append(res.x - HEAD.p_true)
    rmse = np.sqrt(np.mean(np.square(errors), axis=0))
    assert np.all(rmse < 2.0 * crb)


# --- noise from the fit, trajectories ---------------------------------------------------------


def test_initial_state_fit_recovers_the_companion_state():
    """The variational-equation Jacobian drives the initial-state fit to the truth on
    noise-free data (the nonlinear model, started away from rest)."""
    from pymc_wendy.estimators.output_error import fit_initial_state

    p, t, _, pulse = _nonlinear_data()
    X = pw.solve(NONLINEAR, p, [0.1, 0.0], t, inputs={"u": pulse})[:, :1]
    u0 = fit_initial_state(NONLINEAR, t, X, "normal", p, inputs={"u": pulse}, n=t.size)
    assert np.allclose(u0, [0.1, 0.0], atol=1e-5)


@pytest.mark.filterwarnings(
    "ignore::pymc_wendy.ShortSeriesWarning"
)  # the filter's bias is the point
def test_residual_noise_is_unbiased_where_the_filter_is_not():
    """At N = 51, 1 % noise the pulse's kink inflates the high-order filter's estimate (by
    about 30 %); the residual estimate has mean 1 with sd 1/sqrt(2 dof) = 0.105 per data set,
    so the mean of 24 ratios is within 4 x 0.105 / sqrt(24) = 0.086 of 1."""
    from pymc_wendy.estimators.output_error import residual_noise

    filt, resid = [], []
    for seed in range(24):
        d = HEAD.simulate(noise_ratio=0.01, n_points=51, seed=seed)
        lik = pw.WeakLikelihood(HEAD.model, d.t, d.U, inputs=d.inputs)
        est = residual_noise(lik, pw.fit(lik).x)
        assert est.dof == 51 - 5 and est.u0.shape == (2,)
        filt.append(lik.sigma[0] / d.sigma[0])
        resid.append(est.sigma[0] / d.sigma[0])
    assert abs(np.mean(resid) - 1.0) < 0.086
    assert np.mean(filt) > 1.15  # what the residual estimate fixes


def test_fit_with_residual_noise():
    d = HEAD.simulate(noise_ratio=0.05, n_points=21, seed=3)
    res = pw.fit(HEAD.model, d.t, d.U, inputs=d.inputs, sigma="residual")
    plain = pw.fit(HEAD.model, d.t, d.U, inputs=d.inputs, sigma=res.sigma)
    assert res.sigma_estimated and res.history["noise"]["method"] == "residual"
    assert res.history["noise"]["dof"] == 21 - 5
    np.testing.assert_allclose(res.x, plain.x, rtol=1e-6)
    np.testing.assert_allclose(res.stderr, plain.stderr, rtol=1e-6)
    # the fitted trajectory (from the initial state fitted to all data) is nearer the truth
    # than the data are: its RMSE is about sigma sqrt(5 / 21) = 0.5 sigma
    np.testing.assert_allclose(res.u0, res.history["noise"]["u0"])
    traj = res.simulate()
    assert traj.shape == (21, 1)
    assert np.sqrt(np.mean((traj - d.U_true) ** 2)) < d.sigma[0]
    with pytest.raises(ValueError, match="'residual'"):
        pw.fit(HEAD.model, d.t, d.U, inputs=d.inputs, sigma="smoothed")
    with pytest.raises(ValueError, match="one experiment"):
        pw.fit(HEAD.model, [d.t, d.t], [d.U, d.U], inputs=[d.inputs] * 2, sigma="residual")


def test_weak_ode_likelihood_takes_the_residual_noise():
    import pymc as pm

    d = HEAD.simulate(noise_ratio=0.01, n_points=51, seed=4)
    res = pw.fit(HEAD.model, d.t, d.U, inputs=d.inputs, sigma="residual")
    with pm.Model():
        p = pm.Uniform("p", 0.0, 2.0, shape=3)
        rv = pw.WeakODELikelihood(
            "U", ode=HEAD.model, params=p, t=d.t, observed=d.U, inputs=d.inputs, sigma="residual"
        )
    lik = rv.tag.wendy[0]
    np.testing.assert_allclose(lik.sigma, res.sigma, rtol=1e-4)
    assert abs(lik.sigma[0] / d.sigma[0] - 1) < 0.4  # 46 dof: sd 0.1 per data set
    with pytest.raises(ValueError, match="'residual'"):
        pw.WeakODELikelihood(
            "V", ode=HEAD.model, params=p, t=d.t, observed=d.U, inputs=d.inputs, sigma="fit"
        )


@pytest.mark.slow
def test_coverage_study_passes_inputs_to_every_method():
    """A tiny study of the head-acceleration model: the frequentist fit and replica-exchange
    tempering see each data set's pulse (else the fits fail: the model needs its input)."""
    from pymc_wendy.studies.coverage import run_coverage

    ds = run_coverage(
        "head_acceleration",
        methods=["mle", "sft"],
        noise_ratios=[0.05],
        n_points=[51],
        n_datasets=2,
        max_workers=1,
        progress=False,
        fit_options={"sigma": "residual"},
        sample_options={"draws": 150, "tune": 150, "chains": 2},
    )
    assert np.all(np.isfinite(ds["estimate"].values))
    # estimates within 5 of the worst-case RMSE (100 x 4: alpha at N = 51, sigma = 0.05)
    assert np.all(np.abs(ds["estimate"].values - np.array(HEAD.p_true)) < 0.2)
    assert np.all(ds["fsim_error"].values < 0.1)
    assert bool(ds["success"].sel(estimator="mle-hessian").all())


def test_output_error_with_residual_noise_uses_its_own_initial_state():
    d = HEAD.simulate(noise_ratio=0.05, n_points=21, seed=5)
    res = pw.fit(HEAD.model, d.t, d.U, method="oels", inputs=d.inputs, sigma="residual")
    assert res.success and res.history["noise"]["dof"] == 21 - 5
    # the residual estimate is output error's own: RSS / (N - 5) at its optimum
    rss = np.sum((res.simulate() - d.U) ** 2)
    np.testing.assert_allclose(res.sigma[0], np.sqrt(rss / 16), rtol=1e-3)
    # the same intervals as output error scaled by its reduced chi-square (sigma=None)
    plain = pw.fit(HEAD.model, d.t, d.U, method="oels", inputs=d.inputs)
    np.testing.assert_allclose(res.stderr, plain.stderr, rtol=1e-2)


def test_bias_correction_of_a_linear_higher_order_model():
    """For a model linear in the states the analytic correction is the profile one (the
    score mean is zero); a nonlinear one is refused with a pointer to 'profile'."""
    d = HEAD.simulate(noise_ratio=0.1, n_points=21, seed=8)
    kw = {"inputs": d.inputs, "sigma": 0.1}
    # sigma = 0.1 is below the data's 0.147: the forward residuals (sd 0.158) say so
    with pytest.warns(pw.FitWarning, match="given noise level may be too small"):
        prof = pw.fit(HEAD.model, d.t, d.U, bias_correction="profile", **kw)
    with pytest.warns(pw.FitWarning, match="given noise level may be too small"):
        auto = pw.fit(HEAD.model, d.t, d.U, bias_correction="auto", **kw)
    assert prof.status == "forward_misfit" and prof.bias_correction is not None
    np.testing.assert_allclose(auto.x, prof.x, rtol=1e-8)
    assert HEAD.model.is_linear_in_states and not NONLINEAR.is_linear_in_states
    p, t, U, pulse = _nonlinear_data()
    with pytest.raises(ValueError, match="profile"):
        pw.fit(NONLINEAR, t, U, inputs={"u": pulse}, bias_correction="analytic", p0=p)
    res = pw.fit(NONLINEAR, t, U, inputs={"u": pulse}, bias_correction="profile", p0=p)
    assert res.success


@pytest.mark.slow
def test_profile_correction_removes_the_bias_at_high_noise():
    """N = 21, 10 % noise, 200 data sets: WENDy-MLE's beta1 is biased by about -0.4 of its
    sd (the log-determinant's score bias); the profile estimator's mean error is within
    3.5 Monte Carlo standard errors (1 / sqrt(200) of an sd) of zero in every parameter."""
    errors, corrected = [], []
    for seed in range(200):
        d = HEAD.simulate(noise_ratio=0.1, n_points=21, seed=5000 + seed)
        res = pw.fit(HEAD.model, d.t, d.U, inputs=d.inputs, sigma="residual")
        prof = pw.fit(
            HEAD.model, d.t, d.U, inputs=d.inputs, sigma=res.sigma, p0=res.x,
            bias_correction="profile",
        )  # fmt: skip
        errors.append(res.x - HEAD.p_true)
        corrected.append(prof.x - HEAD.p_true)
    errors, corrected = np.array(errors), np.array(corrected)
    z_mle = errors.mean(0) / (errors.std(0) / np.sqrt(200))
    z_prof = corrected.mean(0) / (corrected.std(0) / np.sqrt(200))
    assert z_mle[1] < -3.5  # the bias being removed is there
    assert np.all(np.abs(z_prof) < 3.5)


def _mixed(t, u, p, w):
    x, dx, y = u
    return [-p[0] * x - p[1] * dx + y, -p[2] * y + p[3] * w[0]]


def test_mixed_orders_second_and_first_order_states():
    """x'' = -k x - c x' + y, y' = -a y + b u: a second-order state driven by a first-order
    one, driven by a pulse; both observed. Residual near zero at the truth on noise-free
    data, analytic gradient against central differences, recovery by WENDy-MLE and output
    error within 4 standard errors at 1 % noise."""
    m = pw.ODEModel(_mixed, ["x", "y"], ["k", "c", "a", "b"], order=(2, 1), inputs=["u"])
    assert m.companion_states == ("x", "x'", "y") and list(m.observed_columns) == [0, 2]
    p = np.array([0.5, 0.3, 0.8, 1.2])
    t = np.linspace(0.0, 30.0, 201)
    inputs = {"u": Input.pulse(5.0, 7.0)}
    X = pw.solve(m, p, [0.0, 0.0, 0.0], t, inputs=inputs, rtol=1e-11, atol=1e-12)
    U = X[:, m.observed_columns]
    lik = pw.WeakLikelihood(m, t, U, inputs=inputs, sigma=[1e-3, 1e-3])
    assert np.abs(lik.residual(p)).max() < 0.05 * np.abs(lik.residual(1.1 * p)).max()
    q = p * 1.05
    _, g = lik.nll_grad(q)
    fd = np.array([(lik.nll(q + h) - lik.nll(q - h)) / 2e-6 for h in 1e-6 * np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(g).max())
    noisy = U + 0.01 * U.std(axis=0) * np.random.default_rng(0).standard_normal(U.shape)
    for method in ("mle", "oels"):
        res = pw.fit(m, t, noisy, inputs=inputs, method=method, sigma="residual")
        assert res.success and np.all(np.abs(res.x - p) < 4 * res.stderr), method
        assert res.simulate().shape == (201, 2)
