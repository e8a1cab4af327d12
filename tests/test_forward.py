"""The forward-solve twin of a weak model: the solution Op's gradient, the rebuilt model."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_wendy as pw
from pymc_wendy.bayes.forward import ForwardSolution, forward_model


@pytest.fixture(scope="module")
def lv():
    prob = pw.get_problem("lotka_volterra")
    data = prob.simulate(noise_ratio=0.1, subsample=16, seed=0)
    ode = prob.model
    with pm.Model(coords={"param": ode.params, "state": ode.states}) as model:
        p = pm.Normal("p", 0, 10, dims="param")
        sigma = pm.HalfNormal("sigma", 1, dims="state")
        pw.WeakODELikelihood("U", ode=ode, params=p, sigma=sigma, t=data.t, observed=data.U)
    return prob, data, model


def test_forward_model_replaces_the_weak_term_and_adds_the_initial_state(lv):
    prob, data, model = lv
    fmodel, terms = forward_model(model)
    assert [t.name for t in terms] == ["U"] and terms[0].new_initial_state
    assert {rv.name for rv in fmodel.free_RVs} == {"p", "sigma", "U_u0"}
    assert [rv.name for rv in fmodel.observed_RVs] == ["U"]
    assert fmodel.named_vars_to_dims.get("p") == ("param",)
    # the observed term is the Gaussian likelihood of the data around the solution
    point = {
        "p": np.asarray(prob.p_true, float),
        "sigma_log__": np.log(data.sigma),
        "U_u0": np.asarray(prob.u0, float),
    }
    logp = fmodel.compile_logp(vars=fmodel.observed_RVs, mode="CVM")(point)
    U = pw.solve(prob.model, prob.p_true, prob.u0, data.t)
    z = (data.U - U) / data.sigma
    expected = -0.5 * np.sum(z**2) - z.size * (np.log(data.sigma[0]) + 0.5 * np.log(2 * np.pi))
    assert logp == pytest.approx(expected, rel=1e-7)


def test_forward_solution_gradient_matches_finite_differences(lv):
    prob, data, model = lv
    lik = model["U"].owner.op.likelihood
    op = ForwardSolution(lik)
    weights = np.random.default_rng(0).normal(size=(data.t.size, 2))

    p, u0 = pt.dvector("p"), pt.dvector("u0")
    U, _ = op(p, u0)
    f = pt.sum(U * weights)
    fn = pytensor.function([p, u0], [f, *pytensor.grad(f, [p, u0])], mode="FAST_COMPILE")
    x = np.concatenate([prob.p_true, prob.u0]).astype(float)
    J = len(prob.p_true)
    _, gp, gu = fn(x[:J], x[J:])
    analytic = np.concatenate([gp, gu])

    # central differences of a solve far tighter than the Op's (at rtol 1e-8 the solution
    # is not smooth in the parameters below ~1e-8 relative, which differences amplify)
    def tight(z):
        U = pw.solve(prob.model, z[:J], z[J:], data.t, method="DOP853", rtol=1e-13, atol=1e-14)
        return np.sum(U * weights)

    numeric = np.empty_like(x)
    for k in range(x.size):
        h = 1e-4 * max(abs(x[k]), 1.0)
        e = np.zeros_like(x)
        e[k] = h
        numeric[k] = (tight(x + e) - tight(x - e)) / (2 * h)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6 * np.abs(analytic).max())


def test_forward_model_refuses_a_model_without_weak_terms():
    with pm.Model() as model:
        pm.Normal("x", 0, 1)
    with pytest.raises(ValueError, match="no WeakODELikelihood term"):
        forward_model(model)


# --- inputs, doses and derivative terms ----------------------------------------------------
def _iv_term(noise_ratio=0.05, seed=0):
    """The one-compartment IV model with three bolus doses, C = 0 before the first."""
    prob = pw.get_problem("pk_iv_doses")
    d = prob.simulate(noise_ratio=noise_ratio, seed=seed)
    with pm.Model() as model:
        p = pm.LogNormal("p", mu=np.log(prob.p_true), sigma=0.5, shape=2)
        pw.WeakODELikelihood(
            "U", ode=prob.model, params=p, t=d.t, observed=d.U, inputs=d.inputs,
            initial_state=[0.0], t0=0.0,
        )  # fmt: skip
    return prob, d, model


def test_forward_solution_with_bolus_doses_is_the_closed_form():
    """C(t) = sum over doses before t of (A / V) exp(-ke (t - tau)): the solution and its
    sensitivities in (ke, V) through the jumps, at the data times."""
    prob, d, model = _iv_term()
    op = ForwardSolution(model["U"].owner.op.likelihood, t0=0.0)
    ke, V = 0.23, 9.0
    U, S = op.solve(np.array([ke, V]), np.array([0.0]))
    doses = prob.inputs["dose"]
    t = d.t
    lag = t[:, None] - np.asarray(doses.bolus_times)[None, :]
    after = lag > 0  # at a dose time the value before the dose
    A = np.asarray(doses.bolus_amounts)[None, :]
    terms = np.where(after, A / V * np.exp(-ke * np.where(after, lag, 0.0)), 0.0)
    C = terms.sum(axis=1)
    np.testing.assert_allclose(U[:, 0], C, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(S[:, 0, 0], -(lag * terms).sum(axis=1), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(S[:, 0, 1], -C / V, rtol=1e-5, atol=1e-8)
    # the initial state's sensitivity decays like the solution does
    np.testing.assert_allclose(S[:, 0, 2], np.exp(-ke * t), rtol=1e-5, atol=1e-8)
    # the values-only solve (the importance weights' path) is the same solution
    values = op.solve_values(np.array([ke, V]), np.array([0.0]))
    np.testing.assert_allclose(values[:, 0], C, rtol=1e-6, atol=1e-9)


def test_forward_solution_gradient_with_inputs_and_a_second_order_model():
    """head_acceleration: x'' driven by a pulse input; the companion initial state (x, x')
    and the parameters, the gradient against pytensor's finite differences."""
    prob = pw.get_problem("head_acceleration")
    d = prob.simulate(noise_ratio=0.05, n_points=101, seed=0)
    with pm.Model() as model:
        p = pm.Normal("p", 0, 1, shape=3)
        pw.WeakODELikelihood(
            "U", ode=prob.model, params=p, t=d.t, observed=d.U, inputs=d.inputs, sigma=d.sigma
        )
    op = ForwardSolution(model["U"].owner.op.likelihood)
    u0 = np.array([0.01, -0.02])
    U, _ = op.solve(np.asarray(prob.p_true, float), u0)
    ref = pw.solve(prob.model, prob.p_true, u0, d.t, inputs=d.inputs)[:, [0]]
    np.testing.assert_allclose(U, ref, rtol=1e-5, atol=1e-7 * np.abs(ref).max())
    weights = np.random.default_rng(1).normal(size=U.shape)

    def f(p, u0):
        return pt.sum(op(p, u0)[0] * weights)

    pytensor.gradient.verify_grad(
        f, [np.asarray(prob.p_true, float), u0], rng=np.random.default_rng(2),
        eps=1e-6, abs_tol=1e-4, rel_tol=1e-4, mode="CVM",
    )  # fmt: skip


def test_forward_model_of_a_dosed_model_solves_from_the_known_state():
    prob, d, model = _iv_term()
    fmodel, terms = forward_model(model)
    assert {rv.name for rv in fmodel.free_RVs} == {"p"} and terms[0].initial_state is None
    point = {"p_log__": np.log(prob.p_true)}
    sigma = float(model["U"].owner.op.likelihood.sigma[0])
    logp = fmodel.compile_logp(vars=fmodel.observed_RVs, mode="CVM")(point)
    z = (d.U[:, 0] - pw.solve(prob.model, prob.p_true, [0.0], d.t, inputs=d.inputs)[:, 0]) / sigma
    assert logp == pytest.approx(-0.5 * np.sum(z**2) - z.size * np.log(sigma * np.sqrt(2 * np.pi)))
