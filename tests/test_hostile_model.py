"""Hostile input to sampling, inputs and simulation (issue 33, item 8): each case fails early
with an error naming the problem, or works, never a traceback from deep inside a library."""

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_wendy as pw
from pymc_wendy.bayes import sampling
from pymc_wendy.bayes.distribution import WeakODELikelihood
from pymc_wendy.model.inputs import Input

# a first-order model with one input: solves and fits take milliseconds
_FORCED = pw.ODEModel(lambda t, u, p, w: [-p[0] * u[0] + w[0]], ["x"], ["a"], inputs=["w"])


def _tiny_model() -> pm.Model:
    P = pw.get_problem("logistic")
    d = P.simulate(n_points=33, noise_ratio=0.05, seed=0)
    with pm.Model() as model:
        p = pm.Normal("p", 0, 10, shape=P.model.n_params)
        WeakODELikelihood("U", ode=P.model, params=p, t=d.t, observed=d.U)
    return model


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chains": 0}, "chains must be at least 1"),  # was ZeroDivisionError from PyMC
        ({"draws": -5}, "draws must be at least"),  # was OverflowError from nutpie
        ({"tune": -1}, "tune must be at least 0"),
        ({"cores": 0}, "cores must be at least 1"),
        ({"chains": 2.5}, "chains must be an integer"),
        ({"draws": "10"}, "draws must be an integer"),
    ],
)
def test_sample_rejects_bad_counts_before_any_work(monkeypatch, kwargs, match):
    def reached(*args, **kw):
        raise AssertionError("the counts were not checked before the WENDy fit")

    # the checks must come before the starting values (and so before any compilation)
    monkeypatch.setattr(sampling, "initial_values", reached)
    model = _tiny_model()
    for sampler in (pw.sample, pw.sample_sft):
        kw = {"draws": 10, **kwargs}
        with pytest.raises(ValueError, match=match):
            sampler(kw.pop("draws"), model=model, progressbar=False, **kw)


@pytest.mark.parametrize(
    "kwargs",
    [{"chains": 2.5}, {"cores": 1.5}, {"tune": "5"}, {"draws": 2.5}, {"max_treedepth": 0}],
)
def test_sample_sft_does_not_truncate_or_accept_bad_counts(kwargs):
    # these ran before, silently with int(2.5) = 2 chains or trees of depth 0
    kwargs = {"draws": 10, **kwargs}
    with pytest.raises(ValueError, match=next(iter(k for k in kwargs if k != "draws"), "draws")):
        pw.sample_sft(kwargs.pop("draws"), model=_tiny_model(), progressbar=False, **kwargs)


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda s: np.stack([s, s], axis=-1), r"returned shape \(\d+, 2\)"),  # two in one
        (lambda s: 1.0 if s < 1 else 0.0, "must be vectorised"),  # written for scalars
        (lambda s: float(np.exp(-s)), "must be vectorised"),
    ],
)
def test_input_callable_of_the_wrong_shape_is_named(fn, match):
    t = np.linspace(0, 4, 41)
    with pytest.raises(ValueError, match=f"input 'w' .*{match}"):
        pw.simulate(_FORCED, [1.0], [0.5], t=t, inputs={"w": fn})
    U = pw.simulate(_FORCED, [1.0], [0.5], t=t, inputs={"w": np.sin}, noise_ratio=0.01, seed=0).U
    with pytest.raises(ValueError, match=f"input 'w' .*{match}"):
        pw.fit(_FORCED, t, U, inputs={"w": fn})


def test_input_callable_column_or_constant_is_read_as_one_value_per_time():
    t = np.linspace(0, 2, 5)
    assert np.array_equal(Input(lambda s: s[:, None])(t), t)
    assert np.array_equal(Input(lambda s: 2.0)(t), np.full(5, 2.0))
    assert float(Input(lambda s: np.atleast_1d(s) * 3)(np.float64(1.0))) == 3.0


def test_simulate_accepts_an_input_on_a_grid():
    # a ramp on a grid, read linearly in between, is the callable 0.5 t
    t = np.linspace(0, 4, 41)
    grid = Input(0.5 * t[::4], t=t[::4])
    on_grid = pw.simulate(_FORCED, [1.0], [0.5], t=t, inputs={"w": grid})
    exact = pw.simulate(_FORCED, [1.0], [0.5], t=t, inputs={"w": lambda s: 0.5 * s})
    np.testing.assert_allclose(on_grid.U_true, exact.U_true, rtol=1e-8, atol=1e-10)
    assert on_grid.inputs["w"] is grid
    # held values: a step at t = 2, the same as a pulse from 2 on
    step = Input([0.0, 1.0, 1.0], t=[0.0, 2.0, 4.0], kind="constant")
    held = pw.simulate(_FORCED, [1.0], [0.5], t=t, inputs=step)
    pulse = pw.simulate(_FORCED, [1.0], [0.5], t=t, inputs=Input.pulse(2.0, 10.0))
    np.testing.assert_allclose(held.U_true, pulse.U_true, rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match=r"Input\(values, t=times\)"):
        pw.simulate(_FORCED, [1.0], [0.5], t=t, inputs={"w": 0.5 * t})
    with pytest.raises(ValueError, match="defined on"):
        pw.simulate(_FORCED, [1.0], [0.5], t_span=(0, 8), inputs=grid)


def test_simulate_refuses_inputs_for_a_model_without_inputs():
    logistic = pw.get_problem("logistic").model
    with pytest.raises(ValueError, match="no inputs"):  # they were silently ignored
        pw.simulate(logistic, [1.0, 1.0], [0.1], t_span=(0, 5), inputs={"w": np.sin})


# --- input-output equations (issue 34) ---------------------------------------------------
@pytest.mark.parametrize(
    "model, observed, match",
    [
        (
            # nonlinear, two hidden states the observed one depends on (issue 57: one)
            pw.ODEModel(lambda t, u, p: [p[0] * u[1] * u[0], u[2] - u[1], -p[1] * u[2] * u[0]],
                        states=["x", "y", "z"], params=["a", "b"]),
            "x",
            "depend on 2 hidden states",
        ),
        (
            pw.ODEModel(lambda t, u, p: [-p[0] * u[0], -p[1] * u[1]], states=["x", "y"],
                        params=["a", "b"]),
            "x",
            "does not see every other state",
        ),
        (
            # a constant term beside inputs (without inputs it is eliminated: issue 57)
            pw.ODEModel(lambda t, u, p, w: [-p[0] * u[0] + p[1] * u[1] + w[0], p[1] - u[1]],
                        states=["x", "y"], params=["a", "b"], inputs=["d"]),
            "x",
            "terms without a state or input",
        ),
        (
            # b scales the hidden state and cancels in the transfer function (issue 54, 5)
            pw.ODEModel(lambda t, u, p, w: [-p[0] * u[0] + p[1] * u[1], -p[2] * u[1] + w[0] / p[1]],
                        states=["x", "y"], params=["a", "b", "c"], inputs=["d"]),
            "x",
            r"does not depend on the parameters \['b'\]: the data of 'x' cannot determine",
        ),
        (pw.get_problem("pk_oral_doses").model, ["gut", "C"], "one observed state"),
        (pw.get_problem("pk_oral_doses").model, "Q", "not states of"),
    ],
)  # fmt: skip
def test_input_output_refusals(model, observed, match):
    with pytest.raises(ValueError, match=match):
        pw.input_output(model, observed)


@pytest.mark.parametrize("name", ["head_acceleration", "pk_iv_doses"])
def test_a_solution_that_overflows_is_a_simulation_error_without_warnings(name):
    """Models with inputs or derivative terms take scipy's solvers: a blow-up far from the
    data fails as a SimulationError, with no floating-point warnings on the way (they leaked
    from the right-hand side and the solver's step control)."""
    import warnings

    from pymc_wendy.model.simulate import SimulationError

    prob = pw.get_problem(name)
    data = prob.simulate(n_points=41, noise_ratio=0.05, seed=0)
    u0 = np.ones(len(prob.model.companion_states))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(SimulationError):
            pw.solve(prob.model, np.asarray(prob.p_true) * 1e200, u0, data.t, inputs=prob.inputs)


def test_weak_least_squares_rejects_an_overflowing_trial_step_quietly():
    """A Gauss-Newton step to where ``||r||^2`` overflows is a step that does not descend
    (seen from a nonlinear start on the theophylline model): halved, with no RuntimeWarning."""
    from types import SimpleNamespace

    from pymc_wendy.estimators.wls import solve_wls

    class Steep:  # r(p) = p - 2 with a derivative so small that the first step is 1e160
        model = SimpleNamespace(is_linear_in_params=False, n_params=1)

        def residual(self, p):
            return np.array([p[0] - 2.0, 0.0])

        def dr_dp(self, p):
            return np.array([[1e-160], [0.0]])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p, _, _ = solve_wls(Steep(), [1.0], max_iter=3)
    assert p.tolist() == [1.0]  # 30 halvings leave the step at 1e151: no descent, no move


def test_params_given_as_a_variable_name_are_refused_with_the_fix():
    P = pw.get_problem("logistic")
    d = P.simulate(n_points=33, noise_ratio=0.05, seed=0)
    with pm.Model():
        pm.Normal("p", 0, 10, shape=P.model.n_params)
        with pytest.raises(TypeError, match=r"got the string 'p': pass the variable itself"):
            WeakODELikelihood("U", ode=P.model, params="p", t=d.t, observed=d.U)


@pytest.mark.parametrize("path", ["fast", "general"])
def test_parameters_that_overflow_the_covariance_are_a_covariance_error_without_warnings(path):
    """Parameters near 1e160 square to infinity in ``S(p)``: a CovarianceError naming the
    overflow, with no floating-point warnings from the assembly on the way (they leaked from
    numpy's products before the factorisation's check)."""
    prob = pw.get_problem("fitzhugh_nagumo")
    d = prob.simulate(n_points=65, noise_ratio=0.1, seed=1)
    lik = pw.WeakLikelihood(prob.model, d.t, d.U, linear=path)
    p = np.asarray(prob.p_true) * 1e160
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for method in (lik.nll, lik.nll_grad, lik.hessian):
            with pytest.raises(pw.CovarianceError, match="overflow double precision"):
                method(p)


def test_an_underflowed_parameter_is_a_rejected_point_not_a_printed_exception(capfd):
    """``dose / V`` at ``V = exp(-800) = 0`` (a sampler's wild early step): the compiled
    log-density is -inf, and numba prints no "Exception ignored" (ZeroDivisionError) on the
    way, as it did before the generated functions used numpy's error model."""
    import pymc as pm

    prob = pw.get_problem("pk_iv_doses")
    d = prob.simulate(noise_ratio=0.1, n_points=41, seed=4)
    with pm.Model() as model:
        p = pm.LogNormal("p", mu=np.log(prob.p_true), sigma=0.5, shape=2)
        pw.WeakODELikelihood(
            "U", ode=prob.model, params=p, t=d.t, observed=d.U, inputs=d.inputs,
            sigma=[float(d.sigma[0])], initial_state=[0.0], t0=0.0,
        )  # fmt: skip
    logp = model.compile_logp(mode="NUMBA")
    assert logp({"p_log__": np.array([2.0, -800.0])}) == -np.inf
    assert np.isfinite(logp({"p_log__": np.log(prob.p_true)}))
    assert "Exception ignored" not in capfd.readouterr().err


# --- total derivative terms (issue 57) -----------------------------------------------------
@pytest.mark.parametrize("order", [0, -1, 1.5, True])
def test_total_derivative_of_a_bad_order_is_refused(order):
    with pytest.raises(pw.ODEDefinitionError, match="order"):
        pw.ODEModel(
            lambda t, u, p: [p[0] * pw.derivative(u[0] ** 2, order) - u[0]], ["x"], ["c"], order=2
        )


def test_total_derivative_of_a_derivative_or_input_is_refused():
    with pytest.raises(pw.ODEDefinitionError, match="function of the states and parameters"):
        pw.ODEModel(
            lambda t, u, p, w: [p[0] * pw.derivative(u[0] * w[0]) - u[0]],
            ["x"], ["c"], order=2, inputs=["w"],
        )  # fmt: skip


def test_variance_parameters_as_random_variables_are_refused_where_they_are_not_taken():
    """A dispersion that is a random variable outside WeakODELikelihood, next to sigma or a
    bias correction, or of the wrong shape: a message naming it, not a pytensor error."""
    lg = pw.get_problem("logistic")
    data = lg.simulate(n_points=65, noise_ratio=0.0, seed=0)
    U = np.round(100 * data.U)
    with pm.Model():
        alpha = pm.Exponential("alpha", 0.1)
        with pytest.raises(ValueError, match="alpha is a random variable, which only"):
            pw.WeakLikelihood(lg.model, data.t, U, noise=pw.NegativeBinomial(alpha))
        with pytest.raises(ValueError, match="alpha is a random variable, which only"):
            pw.fit(lg.model, data.t, U, noise=pw.NegativeBinomial(alpha), p0=[1.0, 0.01])
        with pytest.raises(ValueError, match="has no noise level sigma"):
            pw.WeakODELikelihood(
                "y", ode=lg.model, params=[1.0, 0.01], t=data.t, observed=U, sigma=0.1,
                noise=pw.NegativeBinomial(alpha),
            )  # fmt: skip
        with pytest.raises(ValueError, match="alpha must be a scalar or a vector of 1"):
            pw.WeakODELikelihood(
                "w", ode=lg.model, params=[1.0, 0.01], t=data.t, observed=U,
                noise=pw.NegativeBinomial(pm.Exponential("a3", 0.1, shape=3)),
            )  # fmt: skip
        with pytest.raises(ValueError, match="does not yet take"):
            pw.WeakODELikelihood(
                "z", ode=lg.model, params=[1.0, 0.01], t=data.t, observed=U,
                noise=pw.NegativeBinomial(alpha), bias_correction="analytic",
            )  # fmt: skip
