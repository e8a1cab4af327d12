"""ODE model tracing, generated derivatives, linearity detection and the log transform."""

import math

import numpy as np
import pytest
import sympy
from conftest import central_differences

import pymc_wendy as pw
from pymc_wendy.model.ode import ODEDefinitionError, ODEModel


def goodwin3(t, u, p):
    x, y, z = u
    return [
        p[0] / (2.15 + p[2] * z ** p[3]) - p[1] * x,
        p[4] * x - p[5] * y,
        p[6] * y - p[7] * z,
    ]


def sir_tdi(t, u, p):
    beta = p[0] * np.exp(-p[0] * p[1]) / (1 - math.exp(-p[0] * p[1]))
    drive = p[3] * (1 - np.exp(-p[4] * t**2))
    s, i, r = u
    return [-p[0] * s + p[2] * i + beta * r, p[0] * s - p[2] * i - drive * i, drive * i - beta * r]


G3 = ODEModel(goodwin3, ["x", "y", "z"], [f"p{j}" for j in range(1, 9)])
SIR = ODEModel(sir_tdi, ["S", "I", "R"], [f"p{j}" for j in range(1, 6)])
P_G3 = np.array([3.4884, 0.0969, 1, 10, 0.0969, 0.0581, 0.0969, 0.0775])
P_SIR = np.array([0.2, 1.5, 0.074, 0.113, 0.0024])


def _points(D, n=7, seed=0, low=0.2, high=1.5):
    rng = np.random.default_rng(seed)
    return np.linspace(0.5, 20, n), rng.uniform(low, high, size=(n, D))


@pytest.mark.parametrize("model,p", [(G3, P_G3), (SIR, P_SIR)])
def test_derivatives_match_finite_differences(model, p):
    t, U = _points(model.n_states)
    # df/du: differentiate the f rows one state at a time
    f_u = model.evaluate("f_u", t, U, p)
    for m in range(t.size):
        num = central_differences(lambda u, m=m: model(t[m], u, p), U[m], 1e-6, floor=1.0)
        np.testing.assert_allclose(f_u[m], num, rtol=1e-6, atol=1e-9)
    pairs = [("f", "f_p"), ("f_u", "f_up"), ("f_p", "f_pp"), ("f_up", "f_upp")]
    for base, deriv in pairs:
        analytic = model.evaluate(deriv, t, U, p)
        numeric = central_differences(
            lambda q, base=base: model.evaluate(base, t, U, q), p, 1e-6, floor=1.0
        )
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8, err_msg=deriv)


def test_linear_in_parameters_detection():
    def lv(t, u, p):
        x, y = u
        return [p[0] * x + p[1] * x * y, p[2] * y + p[3] * x * y]

    def mm(t, u, p):  # Michaelis-Menten: nonlinear in p[1]
        return [-p[0] * u[0] / (p[1] + u[0])]

    def affine_with_free_term(t, u, p):
        return [np.sin(t) + p[0] * u[0] ** 2 - u[0]]

    assert ODEModel(lv, ["x", "y"], list("abcd")).is_linear_in_params
    assert ODEModel(affine_with_free_term, ["u"], ["a"]).is_linear_in_params
    assert not ODEModel(mm, ["s"], ["vmax", "km"]).is_linear_in_params
    assert not G3.is_linear_in_params
    assert not SIR.is_linear_in_params


@pytest.mark.parametrize("model,p", [(G3, P_G3), (SIR, P_SIR)])
def test_log_transform_is_chain_rule(model, p):
    logm = model.log_transformed()
    assert logm.transform == "log" and logm.states == model.states
    t, U = _points(model.n_states)
    X = np.log(U)
    np.testing.assert_allclose(logm.f(t, X, p), model.f(t, U, p) / U, rtol=1e-12)
    # d/dx of f(e^x)/e^x = f_u e^x / e^x - delta f / e^x
    f_u = model.evaluate("f_u", t, U, p)
    expected = f_u * U[:, None, :] / U[:, :, None]
    expected -= np.einsum("md,de->mde", model.f(t, U, p) / U, np.eye(model.n_states))
    np.testing.assert_allclose(logm.evaluate("f_u", t, X, p), expected, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="already"):
        logm.log_transformed()


def test_math_numpy_and_sympy_functions_trace_alike():
    def with_numpy(t, u, p):
        return [p[0] * np.exp(-u[0]) + np.sqrt(p[1]) * np.tanh(u[0])]

    def with_math(t, u, p):
        return [p[0] * math.exp(-u[0]) + math.sqrt(p[1]) * math.tanh(u[0])]

    def with_sympy(t, u, p):
        return [p[0] * sympy.exp(-u[0]) + sympy.sqrt(p[1]) * sympy.tanh(u[0])]

    exprs = [
        ODEModel(f, ["u"], ["a", "b"]).expressions for f in (with_numpy, with_math, with_sympy)
    ]
    assert exprs[0] == exprs[1] == exprs[2]


def test_closure_and_explicit_time():
    exp = np.exp  # a closure value that must be swapped during tracing

    def make(rate):
        def rhs(t, u, p):
            return [-rate * p[0] * exp(-t) * u[0]]

        return rhs

    model = ODEModel(make(2.0), ["u"], ["k"])
    t = np.array([0.0, 1.0])
    out = model.f(t, np.array([[1.0], [1.0]]), np.array([0.5]))
    np.testing.assert_allclose(out[:, 0], -np.exp(-t))


def test_vectorised_state_expressions():
    def decay(t, u, p):
        return -p[0] * u  # object-array arithmetic over all states

    model = ODEModel(decay, ["a", "b"], ["k"])
    np.testing.assert_allclose(model([0.0], [1.0, 2.0], [3.0]), [-3.0, -6.0])


@pytest.mark.parametrize(
    "rhs,states,params,match",
    [
        (lambda t, u, p: [u[0], u[1]], ["x"], ["a"], "indexes u or p beyond"),
        (lambda t, u, p: [p[0] * u[0]], ["x", "y"], ["a"], "returned 1 components but 2 states"),
        (lambda t, u, p: [p[0] * u[0], p[1]], ["x", "y"], ["a"], "indexes u or p beyond"),
        (lambda t, u, p: [p[0] * u[0]], ["x"], ["a", "b"], r"parameters \['b'\] do not appear"),
        (lambda t, u, p: [p[0] if u[0] > 0 else -p[0]], ["x"], ["a"], "numpy.where"),
        (lambda t, u, p: [np.linalg.norm(u) * p[0]], ["x"], ["a"], "cannot be traced"),
        (lambda t, u, p: [p[0] / sympy.Integer(0) * u[0]], ["x"], ["a"], "not finite"),
        (lambda t, u, p: [p[0] * u[0]], ["x", "x"], ["a"], "duplicates"),
        (lambda t, u, p: [p[0] * u[0], p[1] * u[1]], ["x", "a"], ["a", "b"], "both a state"),
        (lambda t, u, p: [p[0] * u[0]], "x", ["a"], "sequence of names"),
        ("not callable", ["x"], ["a"], "callable"),
    ],
)
def test_bad_definitions_raise_clear_errors(rhs, states, params, match):
    with pytest.raises(ODEDefinitionError, match=match):
        ODEModel(rhs, states, params)


def test_unpacking_mismatch_is_explained():
    def lv(t, u, p):
        x, y = u
        a, b = p
        return [a * x, b * y]

    with pytest.raises(ODEDefinitionError, match="unpacks u or p"):
        ODEModel(lv, ["x", "y", "z"], ["a", "b"])


def test_evaluate_validates_shapes():
    with pytest.raises(ValueError, match="U must have shape"):
        G3.f(np.zeros(3), np.zeros((3, 2)), P_G3)
    with pytest.raises(ValueError, match="p must have shape"):
        G3.f(np.zeros(3), np.ones((3, 3)), P_G3[:3])


def test_models_pickle_for_process_pools():
    import pickle

    model = ODEModel(lambda t, u, p: [-p[0] * u[0] ** 2], ["u"], ["k"])
    model.f([0.0], [[2.0]], [1.0])  # compile once before pickling
    clone = pickle.loads(pickle.dumps(model.log_transformed()))
    np.testing.assert_allclose(clone.f([0.0], [[np.log(2.0)]], [1.0]), [[-2.0]])


def test_log_transformed_model_is_derived_once_and_pickles():
    import pickle

    import pymc_wendy as pw

    model = pw.get_problem("goodwin_3d").model
    log_model = model.log_transformed()
    assert model.log_transformed() is log_model
    copy = pickle.loads(pickle.dumps(model))
    assert [str(e) for e in copy.log_transformed().expressions] == [
        str(e) for e in log_model.expressions
    ]


def test_generated_functions_are_shared_by_equal_models():
    """A model unpickled in a worker reuses what an equal model compiled (a coverage study
    compiled output error's sensitivity solve again for every task, seconds each)."""
    import pickle

    import pymc_wendy as pw

    model = pw.get_problem("logistic").model
    fn = model.numba_function("f")
    twin = pickle.loads(pickle.dumps(model))
    assert twin is not model and twin.numba_function("f") is fn
    other = pw.get_problem("lotka_volterra").model
    assert other._functions is not model._functions
    assert model.log_transformed()._functions is not model._functions


@pytest.mark.parametrize(
    "name", ["lotka_volterra", "goodwin_3d", "sir_tdi", "protein_transduction"]
)
def test_point_functions_write_the_flat_entries_of_the_vectorised_ones(name):
    """The compiled solver's right-hand side at one point (``style="point"``) against
    ``evaluate``: every entry at its row-major offset after ``base``, nothing else written."""
    prob = pw.get_problem(name)
    model = prob.model
    rng = np.random.default_rng(1)
    U = np.abs(prob.u0) * (1.0 + 0.3 * rng.random((3, model.n_states))) + 0.1
    t = np.array([0.3, 1.1, 2.9])
    p = np.asarray(prob.p_true, dtype=float) * (1.0 + 0.2 * rng.random(model.n_params))
    for which in ("f", "f_u", "f_p"):
        fn = model.point_function(which)
        expected = model.evaluate(which, t, U, p)
        for m in range(t.size):
            out = np.full(expected[m].size + 3, -7.0)
            out[2 : 2 + expected[m].size] = 0.0
            fn(t[m], U[m], p, out, 2)
            np.testing.assert_allclose(
                out[2 : 2 + expected[m].size], expected[m].ravel(), rtol=1e-13
            )
            assert np.all(out[:2] == -7.0) and out[-1] == -7.0
