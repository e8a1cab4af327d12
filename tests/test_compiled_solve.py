"""Compiled forward solves (pymc_wendy.model.compiled_solve) and pw.solve's routing to them.

The compiled solver (LSODA on numba right-hand sides) against tight scipy references on every
catalogue problem it takes and on a stiff system, its forward sensitivities against finite
differences, batched solves with a draw that blows up, and the failures it reports.
"""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from conftest import central_differences, run_twice_with_cache

import pymc_wendy as pw
from pymc_wendy.model.compiled_solve import SolveFailed, compiled_solver, supports
from pymc_wendy.model.simulate import SimulationError

#: the catalogue problems the compiled solver takes, selected here (not skipped in the tests)
SUPPORTED = [name for name in pw.list_problems() if supports(pw.get_problem(name).model)]
#: the ones it must refuse: of order 2 (head acceleration) or with inputs (doses)
UNSUPPORTED = ["head_acceleration", "pk_iv_doses", "pk_oral_doses", "pk_two_compartment"]

N_POINTS = 257
TOL = 1e-6  # agreement with the reference, relative to the solution's max |u|


#: CompiledSolver.solve at its own defaults (rtol 1e-8, atol 1e-10) misses 1e-6 on these
#: (measured: Hindmarsh-Rose 2.5e-5, FitzHugh-Nagumo 1.06e-6); pw.solve, which asks it for a
#: tenth of its own tolerances, is within 1.1e-7 on every problem
def _robertson() -> pw.ODEModel:
    """Robertson's chemical kinetics: rate constants 0.04, 1e4, 3e7, the classic stiff test."""

    def rhs(t, u, p):
        a, b, c = u
        return [
            -p[0] * a + p[1] * b * c,
            p[0] * a - p[1] * b * c - p[2] * b**2,
            p[2] * b**2,
        ]

    return pw.ODEModel(rhs, states=["a", "b", "c"], params=["k1", "k2", "k3"], name="robertson")


def _quadratic() -> pw.ODEModel:
    """``u' = p u^2``: from ``u(0) = 1`` the solution ``1 / (1 - p t)`` blows up at ``1/p``."""
    return pw.ODEModel(lambda t, u, p: [p[0] * u[0] ** 2], states=["u"], params=["a"], name="quad")


ROBERTSON = _robertson()
QUADRATIC = _quadratic()


def _grid(problem) -> np.ndarray:
    return np.linspace(*problem.t_span, N_POINTS)


@functools.cache
def _reference(name: str) -> np.ndarray:
    """A tight Runge-Kutta solve. Hindmarsh-Rose, the one problem marked stiff, is mildly so:
    DOP853 at these tolerances agrees with Radau to 3e-11 of max |u| in 1.3 s, where Radau
    takes 15 s; the stiff case proper is Robertson's below, against Radau."""
    prob = pw.get_problem(name)
    return pw.solve(
        prob.model, prob.p_true, prob.u0, _grid(prob), method="DOP853", rtol=1e-12, atol=1e-14
    )


def _relative_max_error(U: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(U - ref)) / np.max(np.abs(ref)))


# --- which models -------------------------------------------------------------------------


def test_supported_problems_are_the_first_order_ones_without_inputs():
    # guards the parametrisation below: a supports() that refused everything would leave the
    # accuracy tests with nothing to run
    assert set(SUPPORTED) == set(pw.list_problems()) - set(UNSUPPORTED)
    assert {"lotka_volterra", "fitzhugh_nagumo", "hindmarsh_rose", "lorenz"} <= set(SUPPORTED)
    assert supports(ROBERTSON) and supports(QUADRATIC)


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_unsupported_model_is_refused_with_the_reason(name):
    model = pw.get_problem(name).model
    assert not supports(model)
    with pytest.raises(ValueError, match=f"{name}: .*first-order models without inputs"):
        compiled_solver(model)


# --- accuracy on the catalogue ------------------------------------------------------------


@pytest.mark.parametrize("name", SUPPORTED)
def test_compiled_solve_default_tolerances_match_reference(name):
    prob = pw.get_problem(name)
    U = compiled_solver(prob.model).solve(prob.p_true, prob.u0, _grid(prob))
    assert U.shape == (N_POINTS, prob.model.n_states)
    np.testing.assert_array_equal(U[0], prob.u0)
    err = _relative_max_error(U, _reference(name))
    assert err < TOL, f"{name}: {err:.2e}"


@pytest.mark.parametrize("name", SUPPORTED)
def test_pw_solve_default_matches_reference(name):
    prob = pw.get_problem(name)
    U = pw.solve(prob.model, prob.p_true, prob.u0, _grid(prob))
    err = _relative_max_error(U, _reference(name))
    assert err < TOL, f"{name}: {err:.2e}"


@pytest.mark.parametrize("method", [None, "LSODA"])
def test_pw_solve_routes_to_compiled_solver_at_a_tenth_of_the_tolerances(method):
    prob = pw.get_problem("lotka_volterra")
    t = _grid(prob)
    rtol, atol = 1e-9, 1e-11
    U = pw.solve(prob.model, prob.p_true, prob.u0, t, method=method, rtol=rtol, atol=atol)
    expected = compiled_solver(prob.model).solve(
        prob.p_true, prob.u0, t, rtol=rtol * 0.1, atol=atol * 0.1
    )
    np.testing.assert_array_equal(U, expected)
    # DOP853 is still solve_ivp: a different solver, so not bit-equal, but close
    V = pw.solve(prob.model, prob.p_true, prob.u0, t, method="DOP853", rtol=rtol, atol=atol)
    assert not np.array_equal(U, V)
    assert _relative_max_error(U, V) < 1e-7


# --- a stiff system -----------------------------------------------------------------------


def test_stiff_robertson_is_fast_and_matches_radau():
    p, u0 = np.array([0.04, 1e4, 3e7]), np.array([1.0, 0.0, 0.0])
    t = np.linspace(0.0, 40.0, N_POINTS)
    # stiff indeed: an explicit method gets nowhere in 5000 evaluations
    with pytest.raises(SimulationError, match="DOP853"):
        pw.solve(ROBERTSON, p, u0, t, method="DOP853", max_nfev=5000)
    ref = pw.solve(ROBERTSON, p, u0, t, method="Radau", rtol=1e-12, atol=1e-14)
    solver = compiled_solver(ROBERTSON)
    solver.solve(p, u0, t)  # compile
    start = time.perf_counter()
    U = solver.solve(p, u0, t)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.1, f"{elapsed:.3f} s (about 1 ms when measured)"
    assert _relative_max_error(U, ref) < TOL
    V = pw.solve(ROBERTSON, p, u0, t)
    assert _relative_max_error(V, ref) < TOL
    # the intermediate b (max 3.6e-5) is right on its own scale too
    per_state = np.max(np.abs(V - ref), axis=0) / np.max(np.abs(ref), axis=0)
    assert np.all(per_state < TOL), per_state
    np.testing.assert_allclose(V.sum(axis=1), 1.0, atol=1e-9)  # mass is conserved


def test_explicit_solver_hands_a_stiff_system_to_lsoda_within_a_few_dozen_steps():
    """Hairer's stiffness test stops the explicit pair early (status 3) on Robertson's
    kinetics; on a non-stiff model it reaches every output time (status 0)."""
    p, u0 = np.array([0.04, 1e4, 3e7]), np.array([1.0, 0.0, 0.0])
    t = np.linspace(0.0, 40.0, N_POINTS)
    solver = compiled_solver(ROBERTSON)
    budget = 10**6
    Y, status = solver.explicit(u0, t, p, 1e-8, 1e-10, budget, budget, False)
    assert status == 3
    # 15 stiff steps, a few rejected ones: it stopped within the first output interval
    assert np.isnan(Y[2]).all()
    prob = pw.get_problem("lotka_volterra")
    Y, status = compiled_solver(prob.model).explicit(
        np.asarray(prob.u0, float), _grid(prob), np.asarray(prob.p_true, float),
        1e-8, 1e-10, budget, budget, False,
    )  # fmt: skip
    assert status == 0 and np.isfinite(Y).all()


# --- sensitivities ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lotka_volterra", "fitzhugh_nagumo"])
def test_sensitivities_match_finite_differences(name):
    prob = pw.get_problem(name)
    solver = compiled_solver(prob.model)
    J, D = prob.model.n_params, prob.model.n_states
    t = _grid(prob)
    U, S = solver.sensitivities(prob.p_true, prob.u0, t)
    assert U.shape == (N_POINTS, D) and S.shape == (N_POINTS, D, J + D)
    np.testing.assert_allclose(U, solver.solve(prob.p_true, prob.u0, t), rtol=0, atol=1e-5)
    # at t0 the sensitivity to u0 is the identity, to p zero
    np.testing.assert_array_equal(S[0], np.hstack([np.zeros((D, J)), np.eye(D)]))

    def solve(theta):
        # as tight as LSODA goes, so that the differences are not noise of the step choice
        return solver.solve(theta[:J], theta[J:], t, rtol=1e-13, atol=1e-15)

    # floor 0.1: FitzHugh-Nagumo's u0[0] = 0 would get a step of 1e-8 and noisy quotients
    fd = central_differences(solve, np.r_[prob.p_true, prob.u0], rel_step=1e-5, floor=0.1)
    err = np.max(np.abs(S - fd), axis=(0, 1)) / np.max(np.abs(fd), axis=(0, 1))
    names = [*prob.model.params, *(f"{s}(0)" for s in prob.model.states)]
    assert np.all(err < 1e-5), dict(zip(names, err, strict=True))


# --- batches and failures -----------------------------------------------------------------


def test_solve_many_marks_the_draw_that_blows_up():
    solver = compiled_solver(QUADRATIC)
    t = np.linspace(0.0, 1.0, 101)
    P = np.array([[0.5], [2.0], [-1.0], [0.9]])  # p = 2 blows up at t = 0.5
    U, ok = solver.solve_many(P, np.array([[1.0]]), t)  # one initial state for every draw
    assert U.shape == (4, t.size, 1) and ok.dtype == bool
    np.testing.assert_array_equal(ok, [True, False, True, True])
    assert np.all(np.isnan(U[1]))
    for i in np.flatnonzero(ok):
        np.testing.assert_array_equal(U[i], solver.solve(P[i], [1.0], t))
        np.testing.assert_allclose(U[i, :, 0], 1 / (1 - P[i, 0] * t), rtol=1e-5)
    # the failing draw fails quickly (bounded steps), not after a long hang
    start = time.perf_counter()
    solver.solve_many(P[1:2], np.array([[1.0]]), t)
    assert time.perf_counter() - start < 2.0


def test_a_blow_up_fails_in_the_explicit_solver_without_lsoda(monkeypatch):
    """The explicit pair's step size collapses at a finite-time singularity; LSODA, which
    used to take over, fails there too after 30-80 ms of its step budget (most of an
    importance batch's time when its draws blow up), so it is not called."""
    solver = compiled_solver(QUADRATIC)
    t = np.linspace(0.0, 1.0, 41)  # from u(0) = 100 with p = 0.045: blows up at t = 0.222
    solver.solve([0.005], [100.0], t)  # compiled before LSODA is taken away

    def no_lsoda(*args, **kwargs):
        raise AssertionError("LSODA was called on a blow-up")

    monkeypatch.setattr(type(solver), "_odeint", no_lsoda)
    for solve in (solver.solve, solver.sensitivities):
        with pytest.raises(SolveFailed, match=r"blows up .* after the output time t = 0\.2 "):
            solve([0.045], [100.0], t)


def test_solve_many_on_a_catalogue_problem_equals_individual_solves():
    prob = pw.get_problem("fitzhugh_nagumo")
    solver = compiled_solver(prob.model)
    t = _grid(prob)
    rng = np.random.default_rng(0)
    P = prob.p_true * (1 + 0.02 * rng.standard_normal((5, prob.model.n_params)))
    U0 = np.tile(prob.u0, (5, 1))
    U, ok = solver.solve_many(P, U0, t)
    assert ok.all()
    for i in range(5):
        np.testing.assert_array_equal(U[i], solver.solve(P[i], U0[i], t))


def test_pw_solve_blow_up_names_the_model_and_the_last_output_time():
    # a model of the same structure built first (another test in this worker, say) shares
    # the compiled solver: the message must still name the model that was solved
    twin = pw.ODEModel(lambda t, u, p: [p[0] * u[0] ** 2], states=["u"], params=["a"])
    with pytest.raises(SimulationError, match="<lambda>"):
        pw.solve(twin, [2.0], [1.0], np.linspace(0.0, 1.0, 101))
    t = np.linspace(0.0, 1.0, 101)
    with pytest.raises(SimulationError, match=r"quad: the solution blows up") as exc:
        pw.solve(QUADRATIC, [2.0], [1.0], t)
    message = str(exc.value)
    assert "after the output time t = 0.49 " in message  # the last output before t = 0.5
    assert "max_nfev" not in message  # no step budget gets past a singularity


def test_pw_solve_below_lsoda_tolerance_limit_falls_back_to_dop853():
    prob = pw.get_problem("lotka_volterra")
    t = _grid(prob)
    U = pw.solve(prob.model, prob.p_true, prob.u0, t, rtol=1e-13, atol=1e-15)
    V = pw.solve(prob.model, prob.p_true, prob.u0, t, method="DOP853", rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(U, V)
    assert _relative_max_error(U, _reference("lotka_volterra")) < 1e-10


_SECOND_PROCESS = """
import sys

import numpy as np
from pymc_wendy.model.compiled_solve import compiled_solver
from pymc_wendy.problems import get_problem

prob = get_problem("logistic")
solver = compiled_solver(prob.model)
_, S = solver.sensitivities(prob.p_true, [0.1], np.linspace(0.0, 5.0, 11))
module = next(m for n, m in sys.modules.items() if ".pymc_wendy_solver_" in n)
hits = sum(module.derivative.stats.cache_hits.values())  # the model's right-hand side
print(hits, repr(float(S[-1, 0, 0])))
"""


def test_the_solver_functions_are_loaded_from_disk_in_a_second_process(tmp_path):
    runs = run_twice_with_cache(_SECOND_PROCESS, tmp_path)
    assert runs[0][0] == "0" and runs[1][0] == "1", runs
    assert runs[0][1] == runs[1][1]
    assert len(list(tmp_path.glob("pymc_wendy_solver_*.py"))) == 1
