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
