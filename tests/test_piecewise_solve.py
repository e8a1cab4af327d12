"""Compiled solves of dosed models stretch by stretch (pymc_wendy.model.piecewise_solve):
against closed forms, the solve_ivp route and finite differences."""

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.model.inputs import Input, as_inputs
from pymc_wendy.model.piecewise_solve import PiecewiseSolver, supports_piecewise
from pymc_wendy.model.sensitivities import ForwardSolver

TWO = pw.get_problem("pk_two_compartment")
IV = pw.get_problem("pk_iv_doses")


def _solvers(model, t, inputs):
    inputs = as_inputs(model.inputs, inputs, t)
    new = ForwardSolver(model, t, inputs)
    old = ForwardSolver(model, t, inputs)
    old._solver, old.compiled = None, False  # the solve_ivp route, tested on its own
    return new, old


def test_iv_boluses_match_the_closed_form_with_pre_dose_values_at_dose_times():
    ke, V = IV.p_true
    doses = pw.Doses([0.0, 8.0, 16.0], 100.0)
    t = np.linspace(0.0, 24.0, 97)  # 8 and 16 are output times
    solver = PiecewiseSolver(IV.model, t, {"dose": doses})
    lag = t[:, None] - np.array([0.0, 8.0, 16.0])
    exact = np.sum(np.where(lag > 0, 100.0 / V * np.exp(-ke * lag), 0.0), axis=1)
    U = solver.solve(IV.p_true, [0.0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(U[:, 0], exact, rtol=1e-7, atol=1e-9)
    assert U[0, 0] == 0.0 and U[32, 0] < U[33, 0]  # before the doses at 0 and 8


@pytest.mark.parametrize(
    "doses",
    [
        pw.Doses([0.0, 24.0, 48.0], 500.0),
        # an infusion, a bolus between grid times, one after the last output time
        pw.Doses(
            [0.0, 24.0, 30.55, 48.0, 80.0], [500, 200, 100, 300, 50], durations=[0, 2, 0, 0, 0]
        ),
    ],
)
def test_two_compartment_matches_the_solve_ivp_route_and_finite_differences(doses):
    t = np.linspace(0.0, 72.0, 289)
    new, old = _solvers(TWO.model, t, {"dose": doses})
    assert isinstance(new._solver, PiecewiseSolver)
    p, u0 = TWO.p_true, np.array([10.0, 1.0, 0.5])
    Un, Sn = new.sensitivities(p, u0)
    Uo, So = old.sensitivities(p, u0)
    np.testing.assert_allclose(Un, Uo, rtol=1e-6, atol=1e-8 * np.abs(Uo).max())
    np.testing.assert_allclose(Sn, So, rtol=1e-5, atol=1e-7 * np.abs(So).max())
    np.testing.assert_allclose(new.solve(p, u0), Un, rtol=1e-7, atol=1e-9 * np.abs(Un).max())
    tight = ForwardSolver(TWO.model, t, as_inputs(TWO.model.inputs, {"dose": doses}, t),
                          rtol=1e-12, atol=1e-12)  # fmt: skip
    theta = np.r_[p, u0]
    for k in range(theta.size):
        h = 1e-5 * max(abs(theta[k]), 1.0)
        up, down = theta.copy(), theta.copy()
        up[k] += h
        down[k] -= h
        fd = (tight.solve(up[:5], up[5:]) - tight.solve(down[:5], down[5:])) / (2 * h)
        # on each state's scale: a difference quotient's error is the solver's relative
        # error times |u| / h, so an exact zero comes out near 1e-6 of the gut's 500
        scale = np.abs(Un).max(axis=0) / max(abs(theta[k]), 1.0)
        np.testing.assert_allclose(Sn[..., k] / scale, fd / scale, rtol=1e-4, atol=1e-7)


def test_held_input_values_take_the_piecewise_route():
    model = pw.ODEModel(lambda t, u, p, w: [-p[0] * u[0] + w[0]], ["x"], ["k"], inputs=["w"])
    held = Input([1.0, 3.0, 0.0], t=[0.0, 2.0, 5.0], kind="constant")
    t = np.linspace(0.0, 5.0, 26)
    assert supports_piecewise(model, {"w": held})
    assert not supports_piecewise(model, {"w": Input([1.0, 3.0, 0.0], t=[0.0, 2.0, 5.0])})
    new, old = _solvers(model, t, {"w": held})
    np.testing.assert_allclose(new.solve([0.7], [0.2]), old.solve([0.7], [0.2]), rtol=1e-6)
