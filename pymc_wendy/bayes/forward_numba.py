"""The forward solution Op in numba: the exact stage's log-density compiled for nutpie.

PyTensor's numba backend (nutpie's, PyMC's NUTS under ``mode="NUMBA"``) needs every Op of a
graph as a numba function, and falls back to calling ``perform`` in object mode, with a
warning, for an Op that has none. This module gives :class:`~pymc_wendy.bayes.forward.
ForwardSolution` one:

* a first-order model without inputs (:attr:`~pymc_wendy.model.sensitivities.ForwardSolver.
  single`) is solved in compiled code: the explicit pair
  (:func:`~pymc_wendy.model.dopri.explicit_dispatcher`) called with the model's generated
  right-hand side, the sensitivities picked from its output. No Python between a sampler's
  leapfrog steps and the solve.
* where that pair stops because the problem is stiff or its step budget is spent, the
  solve is LSODA's, in an explicit object-mode block (``ForwardSolution.solve``): the
  stiff problem's fallback, as in :class:`~pymc_wendy.model.compiled_solve.CompiledSolver`.
  A blow-up (the step size collapsed) gives NaN at once, as ``ForwardSolution.solve`` does.
  Both hold for the next case too.
* a first-order model with doses or held inputs
  (:attr:`~pymc_wendy.model.sensitivities.ForwardSolver.piecewise`) is solved stretch by
  stretch the same way, each bolus a jump of the state computed from the generated
  right-hand side, the sensitivities chained across the stretches as
  :class:`~pymc_wendy.model.piecewise_solve.PiecewiseSolver` chains them.
* other models (higher orders, inputs given as functions) run ``ForwardSolution.solve`` in
  object mode for the whole solve: correct, but Python-bound. The correction samples those
  with PyMC's own NUTS (:func:`~pymc_wendy.bayes.correction.forward_correction`), so this
  path serves graphs a user compiles with numba by hand.

The object-mode blocks call a module-level function with the Op's id: numba pickles what a
block closes over at every call, which for the Op (its likelihood's arrays) would cost far
more than the solve.
"""

from __future__ import annotations

import weakref

import numba
import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_and_cache_key

from pymc_wendy.bayes.forward import SOLVER_OPTIONS, ForwardSolution
from pymc_wendy.model import dopri
from pymc_wendy.model.compiled_solve import STEP_COLLAPSED, explicit_budget

__all__ = ["compiled_natively"]

_OPS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def compiled_natively(op: ForwardSolution) -> bool:
    """True when ``op``'s numba form solves in compiled code (no object mode but for a stiff
    problem's fallback): a first-order model without inputs, or with doses and held inputs."""
    return op.solver.single is not None or op.solver.piecewise is not None


def _options() -> tuple[float, float, int]:
    """rtol, atol and the step bound between two output times of the Op's solves."""
    rtol, atol = float(SOLVER_OPTIONS["rtol"]), float(SOLVER_OPTIONS["atol"])
    return rtol, atol, int(SOLVER_OPTIONS["max_steps"])


def _python_solve(key: int, p: np.ndarray, u0: np.ndarray):
    return _OPS[key].solve(p, u0)


@register_funcify_and_cache_key(ForwardSolution)
def _numba_funcify(op, node=None, **kwargs):
    # not cached by pytensor (no key): the output times and the model's functions are part
    # of the code; the explicit pair itself is compiled once and cached on disk by numba
    key = id(op)
    _OPS[key] = op

    @numba_njit
    def python_solve(p, u0):
        with numba.objmode(U="float64[:, :]", S="float64[:, :, :]"):
            U, S = _python_solve(key, np.asarray(p), np.asarray(u0))
        return U, S

    if op.solver.single is not None:
        return _native(op, python_solve), None
    if op.solver.piecewise is not None:
        return _piecewise(op, python_solve), None
    return python_solve, None


def _native(op: ForwardSolution, python_solve):
    """The compiled solve of a first-order model without inputs (module doc)."""
    single = op.solver.single
    explicit, derivative, work = dopri.explicit_dispatcher(), single.derivative, single.work_buffer
    D, J = single.model.n_states, single.model.n_params
    P = J + D
    times = np.array(op.times, dtype=float)  # a constant of the code: read-only, copied per call
    skip, columns = op.skip, np.asarray(op.columns, dtype=np.int64)
    n, C = times.size - skip, columns.size
    rtol, atol, max_steps = _options()
    total = explicit_budget(times.size)

    @numba_njit
    def forward_solution(p, u0):
        y0 = np.zeros(D + D * P)
        for d in range(D):
            y0[d] = u0[d]
            y0[D + d * P + J + d] = 1.0  # du/du0 = I at t0
        q = np.empty(J)
        for j in range(J):
            q[j] = p[j]
        Y, status = explicit(
            derivative, y0, times.copy(), q, rtol, atol, max_steps, total, True, work()
        )
        if status == STEP_COLLAPSED:
            return _blown_up(n, C, P)
        if status != 0 or not np.all(np.isfinite(Y)):
            return python_solve(p, u0)  # stiff, or the step budget spent: LSODA
        return _observed(Y, skip, columns, D, P)

    return forward_solution


def _piecewise(op: ForwardSolution, python_solve):
    """The compiled solve of a first-order model with doses or held inputs: stretch by
    stretch with the explicit pair, each bolus a jump of the state, the sensitivities
    chained across the stretches as :class:`~pymc_wendy.model.piecewise_solve.
    PiecewiseSolver` does (its module doc)."""
    solver = op.solver.piecewise
    single = solver.stretch_solver
    explicit, derivative, work = dopri.explicit_dispatcher(), single.derivative, single.work_buffer
    st = solver.packed()
    D, J = solver.model.n_states, solver.model.n_params
    W = st.inputs.shape[1]
    P, Q = J + D, J + W  # the Op's sensitivities; a stretch's parameters
    PQ = Q + D
    skip, columns = op.skip, np.asarray(op.columns, dtype=np.int64)
    n_all = op.times.size
    n, C = n_all - skip, columns.size
    rtol, atol, max_steps = _options()
    budgets = np.array([explicit_budget(m) for m in np.diff(np.r_[0, st.grid_end])])
    starts, values, bolus, has_bolus = st.start, st.inputs, st.bolus, st.has_bolus
    first, counts, grid, grid_end = st.first_output, st.n_outputs, st.grid, st.grid_end

    @numba_njit
    def forward_solution(p, u0):
        Y_all, y, Sy = _at_start(u0, n_all, J)
        q = np.empty(Q)
        for j in range(J):
            q[j] = p[j]
        for i in range(starts.size):
            if has_bolus[i]:
                _jump(derivative, work(), starts[i], y, Sy, q, bolus[i], J, W, D, PQ)
            for w in range(W):
                q[J + w] = values[i, w]
            y0 = np.zeros(D + D * PQ)
            for d in range(D):
                y0[d] = y[d]
                y0[D + d * PQ + Q + d] = 1.0
            g0 = 0 if i == 0 else grid_end[i - 1]
            t = grid[g0 : grid_end[i]].copy()
            Y, status = explicit(
                derivative, y0, t, q, rtol, atol, max_steps, budgets[i], True, work()
            )
            if status == STEP_COLLAPSED:
                return _blown_up(n, C, P)
            if status != 0 or not np.all(np.isfinite(Y)):
                return python_solve(p, u0)  # stiff, or the step budget spent: LSODA
            Sc = np.empty((D, P))
            for m in range(1, t.size):
                _chain(Y, m, Sy, Sc, J, D, Q, PQ)
                if m <= counts[i]:
                    row = first[i] + m - 1
                    for d in range(D):
                        Y_all[row, d] = Y[m, d]
                        for k in range(P):
                            Y_all[row, D + d * P + k] = Sc[d, k]
            for d in range(D):
                y[d] = Y[t.size - 1, d]
                for k in range(P):
                    Sy[d, k] = Sc[d, k]
        return _observed(Y_all, skip, columns, D, P)

    return forward_solution


@numba.njit(cache=True)
def _at_start(u0, n_all, J):
    """The solution at ``n_all`` times in the explicit solver's layout (each row the state
    and its sensitivities in ``(p, u0)``, flat) with the initial time's row filled, and the
    state and its sensitivity ``Sy = d(state)/d(p, u0)`` there."""
    D = u0.size
    P = J + D
    Y_all = np.zeros((n_all, D + D * P))
    y = np.empty(D)
    Sy = np.zeros((D, P))
    for d in range(D):
        y[d] = Y_all[0, d] = u0[d]
        Sy[d, J + d] = Y_all[0, D + d * P + J + d] = 1.0
    return Y_all, y, Sy


@numba.njit(cache=True)
def _blown_up(n, C, P):
    """A failed solve's ``(U, S)``: NaN values (a rejected point), zero sensitivities."""
    U = np.empty((n, C))
    U.fill(np.nan)
    return U, np.zeros((n, C, P))


@numba.njit(cache=True)
def _observed(Y, skip, columns, D, P):
    """``(U, S)`` from a solution in the explicit solver's layout (:func:`_at_start`): the
    rows from ``skip`` on and the observed ``columns``."""
    n, C = Y.shape[0] - skip, columns.size
    U = np.empty((n, C))
    S = np.empty((n, C, P))
    for m in range(n):
        for c in range(C):
            U[m, c] = Y[m + skip, columns[c]]
            for k in range(P):
                S[m, c, k] = Y[m + skip, D + columns[c] * P + k]
    return U, S


@numba.njit(cache=True)
def _chain(Y, m, Sy, Sc, J, D, Q, PQ):
    """``Sc = dY[m]/d(p, u0)``: the stretch's own sensitivity in ``p`` plus its sensitivity
    in its start state times that state's in ``(p, u0)`` (``Sy``)."""
    for d in range(D):
        for k in range(J + D):
            acc = Y[m, D + d * PQ + k] if k < J else 0.0
            for e in range(D):
                acc += Y[m, D + d * PQ + Q + e] * Sy[e, k]
            Sc[d, k] = acc


@numba.njit  # not cached: it takes the model's function (compiled into the caller)
def _jump(derivative, work, s, y, Sy, q, amounts, J, W, D, PQ):
    """A bolus at ``s``: the inputs enter linearly with coefficients of ``p`` alone, so the
    state jumps by the right-hand side's change from the inputs at 0 to ``amounts``, and its
    sensitivity in ``p`` by that change's derivative in ``p``; ``y``, ``Sy`` updated."""
    z = np.zeros(D + D * PQ)
    for d in range(D):
        z[d] = y[d]
    at_dose = np.empty(D + D * PQ)
    at_zero = np.empty(D + D * PQ)
    for w in range(W):
        q[J + w] = amounts[w]
    derivative(s, z, q, True, at_dose, work)
    for w in range(W):
        q[J + w] = 0.0
    derivative(s, z, q, True, at_zero, work)
    for d in range(D):
        y[d] += at_dose[d] - at_zero[d]
        for k in range(J):
            Sy[d, k] += at_dose[D + d * PQ + k] - at_zero[D + d * PQ + k]
