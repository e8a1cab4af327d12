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
* other models (inputs, doses, higher orders) run ``ForwardSolution.solve`` in object mode
  for the whole solve: correct, but Python-bound. The correction samples those with PyMC's
  own NUTS (:func:`~pymc_wendy.bayes.correction.forward_correction`), so this path serves
  graphs a user compiles with numba by hand.

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
    problem's fallback): a first-order model without inputs."""
    return op.solver.single is not None


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

    if not compiled_natively(op):
        return python_solve, None
    return _native(op, python_solve), None


def _native(op: ForwardSolution, python_solve):
    """The compiled solve of a first-order model without inputs (module doc)."""
    single = op.solver.single
    explicit, derivative, work = dopri.explicit_dispatcher(), single.derivative, single.work_buffer
    D, J = single.model.n_states, single.model.n_params
    P = J + D
    times = np.array(op.times, dtype=float)  # a constant of the code: read-only, copied per call
    skip, columns = op.skip, np.asarray(op.columns, dtype=np.int64)
    n, C = times.size - skip, columns.size
    rtol, atol = float(SOLVER_OPTIONS["rtol"]), float(SOLVER_OPTIONS["atol"])
    max_steps, total = int(SOLVER_OPTIONS["max_steps"]), explicit_budget(times.size)

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
        U = np.empty((n, C))
        S = np.zeros((n, C, P))
        if status == STEP_COLLAPSED:
            U.fill(np.nan)
            return U, S
        if status != 0 or not np.all(np.isfinite(Y)):
            return python_solve(p, u0)  # stiff, or the step budget spent: LSODA
        for m in range(n):
            for c in range(C):
                U[m, c] = Y[m + skip, columns[c]]
                for k in range(P):
                    S[m, c, k] = Y[m + skip, D + columns[c] * P + k]
        return U, S

    return forward_solution
