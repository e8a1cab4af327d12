"""The forward solution Op's numba form (pymc_wendy.bayes.forward_numba): the compiled
explicit solve against the Op's own Python solve, LSODA's fallback on a stiff problem, a
blow-up, doses solved stretch by stretch, and the object-mode path of other models."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_wendy as pw
from pymc_wendy.bayes.forward import ForwardSolution, forward_model
from pymc_wendy.bayes.forward_numba import compiled_natively
from pymc_wendy.model.input_output import input_output


def _relaxation() -> pw.ODEModel:
    """``u' = -k (u - cos t)``: stiff for large ``k``, with the closed form of
    :func:`_relaxation_solution`."""
    return pw.ODEModel(
        lambda t, u, p: [-p[0] * (u[0] - np.cos(t))], states=["u"], params=["k"], name="relax"
    )


def _relaxation_solution(k, u0, t):
    steady = (k**2 * np.cos(t) + k * np.sin(t)) / (k**2 + 1)
    return steady + (u0 - k**2 / (k**2 + 1)) * np.exp(-k * t)


def _op(ode, t, U, t0=None, **kwargs) -> ForwardSolution:
    """The solution Op of a weak term (solved from ``t0``, the term's too when it has a known
    initial state)."""
    if "initial_state" in kwargs:
        kwargs["t0"] = t0
    with pm.Model() as model:
        p = pm.Normal("p", 0, 10, shape=ode.n_params)
        pw.WeakODELikelihood("U", ode=ode, params=p, t=t, observed=U, sigma=0.1, **kwargs)
    return ForwardSolution(model["U"].owner.op.likelihood, t0=t0)


def _both(op: ForwardSolution):
    """``op``'s ``(U, S)`` as functions of ``(p, u0)`` under numba and PyTensor's C VM."""
    p, u0 = pt.dvector("p"), pt.dvector("u0")
    outs = op(p, u0)
    return (pytensor.function([p, u0], outs, mode=mode) for mode in ("NUMBA", "CVM"))


@pytest.fixture(scope="module")
def lv():
    prob = pw.get_problem("lotka_volterra")
    return prob, prob.simulate(noise_ratio=0.1, n_points=41, seed=0)


@pytest.mark.parametrize("t0", [None, -0.5])
def test_compiled_forward_solution_is_the_python_solve(lv, t0):
    """Values and sensitivities at the data times (from an earlier ``t0`` too), at points
    away from the data's parameters."""
    prob, data = lv
    op = _op(prob.model, data.t, data.U, t0=t0)
    assert compiled_natively(op)
    numba_fn, cvm_fn = _both(op)
    rng = np.random.default_rng(0)
    for _ in range(3):
        p = np.asarray(prob.p_true, float) * rng.uniform(0.8, 1.2, size=4)
        u0 = data.U[0] * rng.uniform(0.8, 1.2, size=2)
        (U, S), (U_ref, S_ref) = numba_fn(p, u0), cvm_fn(p, u0)
        assert U.shape == (data.t.size, 2) and S.shape == (data.t.size, 2, 6)
        np.testing.assert_array_equal(U, U_ref)
        np.testing.assert_array_equal(S, S_ref)


def test_forward_model_log_density_and_gradient_under_numba(lv):
    """The whole forward twin compiled by numba (nutpie's backend) against the C VM's."""
    prob, data = lv
    with pm.Model() as model:
        p = pm.Normal("p", 0, 10, shape=4)
        sigma = pm.HalfNormal("sigma", 1, shape=2)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U, sigma=sigma)
    fmodel, _ = forward_model(model)
    outs = [fmodel.logp(), fmodel.dlogp()]
    point = fmodel.initial_point()
    point["p"] = np.asarray(prob.p_true, float) * 1.05
    args = [point[v.name] for v in fmodel.value_vars]
    numba_value = pytensor.function(fmodel.value_vars, outs, mode="NUMBA")(*args)
    cvm_value = pytensor.function(fmodel.value_vars, outs, mode="CVM")(*args)
    assert np.isfinite(numba_value[0])
    for a, b in zip(numba_value, cvm_value, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_a_stiff_solve_falls_back_to_lsoda():
    """At ``k = 1e5`` the explicit pair stops on stiffness; the solution is still the closed
    form, its sensitivity in ``u0`` the decay ``exp(-k t)``."""
    ode, t = _relaxation(), np.linspace(0.0, 2.0, 41)
    op = _op(ode, t, _relaxation_solution(1.0, 1.0, t)[:, None])
    numba_fn, _ = _both(op)
    k = 1e5
    U, S = numba_fn(np.array([k]), np.array([1.0]))
    np.testing.assert_allclose(U[:, 0], _relaxation_solution(k, 1.0, t), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(S[:, 0, 1], np.exp(-k * t), atol=1e-6)


def test_a_blow_up_gives_nan():
    """``u' = a u^2`` from ``u = 1`` blows up at ``t = 1 / a``: NaN values, as the Python
    solve gives (a rejected point for a sampler)."""
    ode = pw.ODEModel(lambda t, u, p: [p[0] * u[0] ** 2], states=["u"], params=["a"], name="q")
    t = np.linspace(0.0, 1.0, 21)
    op = _op(ode, t, (1.0 / (1.0 - 0.5 * t))[:, None])
    numba_fn, _ = _both(op)
    U, _ = numba_fn(np.array([0.5]), np.array([1.0]))
    assert np.all(np.isfinite(U))
    U, _ = numba_fn(np.array([2.0]), np.array([1.0]))
    assert np.all(np.isnan(U))
    assert np.all(np.isnan(op.solve(np.array([2.0]), np.array([1.0]))[0]))


def test_a_second_order_model_with_inputs_runs_its_python_solve():
    """head_acceleration (x'' driven by a pulse): no compiled path; the Op's Python solve in
    object mode, the same numbers."""
    prob = pw.get_problem("head_acceleration")
    d = prob.simulate(noise_ratio=0.05, n_points=101, seed=0)
    op = _op(prob.model, d.t, d.U, inputs=d.inputs)
    assert not compiled_natively(op)
    numba_fn, cvm_fn = _both(op)
    x = (np.asarray(prob.p_true, float), np.array([0.01, -0.02]))
    for a, b in zip(numba_fn(*x), cvm_fn(*x), strict=True):
        np.testing.assert_array_equal(a, b)


def _dosed_ops() -> list[ForwardSolution]:
    """One-compartment IV boluses (C(0) = 0 known); two compartments with oral doses seen in
    C alone, through its input-output equation at rest (the Op solves the latent model and
    keeps the central compartment's column)."""
    iv = pw.get_problem("pk_iv_doses")
    d = iv.simulate(noise_ratio=0.05, seed=0)
    ops = [_op(iv.model, d.t, d.U, t0=0.0, inputs=d.inputs, initial_state=[0.0])]
    two = pw.get_problem("pk_two_compartment")
    io = input_output(two.model, "C")
    doses = pw.Doses([0.0, 24.0, 48.0], 500.0)
    t = np.linspace(0.75, 72.0, 96)
    U = pw.solve(two.model, two.p_true, [0.0] * 3, np.r_[0.0, t], inputs={"dose": doses})[1:]
    io_inputs = io.inputs({"dose": doses})
    ops.append(_op(io.model, t, U[:, 1:2], t0=0.0, inputs=io_inputs, initial_state=[0.0] * 3))
    return ops


def test_a_dosed_model_is_solved_in_compiled_code():
    """Doses: stretch by stretch, each bolus a jump, sensitivities chained across them; the
    same numbers as the Python stretch-by-stretch solve (the same stretches, the same
    steps), at points away from the data's parameters and initial states."""
    rng = np.random.default_rng(2)
    for op in _dosed_ops():
        assert compiled_natively(op)
        numba_fn, cvm_fn = _both(op)
        J, n0 = op.likelihood.base_model.n_params, op.solver.n_initial
        p_true = np.asarray(
            pw.get_problem("pk_iv_doses" if J == 2 else "pk_two_compartment").p_true
        )
        for _ in range(2):
            x = (p_true * rng.uniform(0.8, 1.2, size=J), np.abs(rng.normal(size=n0)))
            for a, b in zip(numba_fn(*x), cvm_fn(*x), strict=True):
                assert np.all(np.isfinite(b))
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * np.abs(b).max())
