"""Dormand and Prince's explicit Runge-Kutta 5(4) pair (DOPRI5), compiled once for every model.

The stepping (stages, error control, stiffness test, dense output) does not depend on the
model: it calls the model's right-hand side as a first-class function of the fixed signature
:data:`DERIVATIVE` (each model's generated solver module compiles its own, a few lines:
:mod:`~pymc_wendy.model.solver_templates`). So the stepper is compiled once and cached on
disk, not once per model: compiled together with each model's right-hand side it took
10-12 s per model with a cold cache, now 1.7-2.8 s after the first model
(``benchmarks/compile_time.py``, ``docs/performance.md``).
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import types
from numba.core.types.function_type import CompileResultWAP

_VECTOR = types.float64[::1]

#: ``derivative(t, y, p, sens, out, work)``: writes ``dy/dt`` at ``(t, y)`` into ``out`` (with
#: ``sens``, the state's and its forward sensitivities'), ``work`` a zeroed buffer laid out
#: by the model (its generated module's ``work_buffer()``)
DERIVATIVE = types.FunctionType(
    types.void(types.float64, _VECTOR, _VECTOR, types.boolean, _VECTOR, _VECTOR)
)

_SIGNATURE = (
    DERIVATIVE, _VECTOR, _VECTOR, _VECTOR, types.float64, types.float64, types.int64,
    types.int64, types.boolean, _VECTOR,
)  # fmt: skip


#: Dormand and Prince's 5(4) tableau: the stage coefficients (row ``s`` combines the first
#: ``s`` stages), the nodes, the fifth-order weights and the error weights (fifth minus
#: fourth order, FSAL: the seventh stage is the next step's first)
DOPRI_A = np.array(
    [
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [1.0 / 5.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [3.0 / 40.0, 9.0 / 40.0, 0.0, 0.0, 0.0, 0.0],
        [44.0 / 45.0, -56.0 / 15.0, 32.0 / 9.0, 0.0, 0.0, 0.0],
        [19372.0 / 6561.0, -25360.0 / 2187.0, 64448.0 / 6561.0, -212.0 / 729.0, 0.0, 0.0],
        [9017.0 / 3168.0, -355.0 / 33.0, 46732.0 / 5247.0, 49.0 / 176.0, -5103.0 / 18656.0, 0.0],
        [35.0 / 384.0, 0.0, 500.0 / 1113.0, 125.0 / 192.0, -2187.0 / 6784.0, 11.0 / 84.0],
    ]
)
DOPRI_C = np.array([0.0, 0.2, 0.3, 0.8, 8.0 / 9.0, 1.0, 1.0])
DOPRI_E = np.array(
    [71.0 / 57600.0, 0.0, -71.0 / 16695.0, 71.0 / 1920.0, -17253.0 / 339200.0, 22.0 / 525.0,
     -1.0 / 40.0]
)  # fmt: skip
#: the stage weights of the fourth-order continuous extension (Hairer, Norsett and Wanner,
#: II.6, the ``d`` of their ``dopri5``): output times inside a step are interpolated
DOPRI_D = np.array(
    [-12715105075.0 / 11282082432.0, 0.0, 87487479700.0 / 32700410799.0,
     -10690763975.0 / 1880347072.0, 701980252875.0 / 199316789632.0,
     -1453857185.0 / 822651844.0, 69997945.0 / 29380423.0]
)  # fmt: skip


@numba.njit(cache=True, error_model="numpy")
def _error_norm(err, y0, y1, rtol, atol):
    """The root mean square of ``err`` in units of the tolerance at the step's ends."""
    acc = 0.0
    for i in range(err.size):
        scale = atol + rtol * max(abs(y0[i]), abs(y1[i]))
        acc += (err[i] / scale) ** 2
    return math.sqrt(acc / err.size)


@numba.njit(cache=True, inline="always")  # a call per stage costs more than the copy
def _copy(src, dst):
    """``dst[:] = src`` for vectors of one length: a slice assignment compiles numba's
    shape-mismatch message, about 3 s with a cold cache."""
    for i in range(src.size):
        dst[i] = src[i]


# long: the stages, the error control and the stiffness test share the step's arrays
def _explicit_solve(derivative, y0, t, p, rtol, atol, max_steps, max_total, sens, work):
    """Dormand and Prince's explicit Runge-Kutta 5(4) pair (DOPRI5; Hairer, Norsett and
    Wanner, Solving ODEs I, II.4-6: starting step, step control, dense output) from
    ``t[0]`` to ``t[-1]`` for the right-hand side ``derivative`` (:data:`DERIVATIVE`; ``work``
    its buffer), the steps chosen by the error control alone and the output times
    inside a step interpolated by the pair's fourth-order continuous extension (stepping to
    every output time made dense outputs of smooth solutions four times slower than LSODA).

    Returns ``(Y, status)``: ``Y[m] = y(t[m])``; ``status`` 0 when every output time was
    reached, 1 when more than ``max_steps`` steps fell between two output times or more
    than ``max_total`` in all (the solution blows up, say), 2 when the step size collapsed,
    3 when the problem is stiff: Hairer's test, the step times the largest eigenvalue's
    estimate ``|K7 - K6| / |y1 - y6|`` (the last two stages share their time) beyond the
    stability boundary 3.25 on 15 accepted steps, with no run of 6 steps inside it between."""
    a, c, e, d = DOPRI_A, DOPRI_C, DOPRI_E, DOPRI_D
    n = y0.size
    K = np.zeros((7, n))
    y, y1, stage, y6 = y0.copy(), np.empty(n), np.empty(n), np.empty(n)
    stiff, nonstiff = 0, 0
    Y = np.full((t.size, n), np.nan)
    _copy(y0, Y[0])
    derivative(t[0], y, p, sens, K[0], work)
    # the starting step: explicit Euler's change and curvature about 1 % of the tolerance
    d0 = _error_norm(y, y, y, rtol, atol)
    d1 = _error_norm(K[0], y, y, rtol, atol)
    h = min(1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1, t[-1] - t[0])
    for i in range(n):
        stage[i] = y[i] + h * K[0, i]
    derivative(t[0] + h, stage, p, sens, K[1], work)
    for i in range(n):
        K[1, i] -= K[0, i]
    top = max(d1, _error_norm(K[1], y, y, rtol, atol) / h)
    h = min(100.0 * h, max(1e-6, h * 1e-3) if top <= 1e-15 else (0.01 / top) ** 0.2)
    if not h > 0.0:  # a derivative that is not finite at the start: a blow-up
        return Y, 2
    total, steps, rejected, m, tc = 0, 0, False, 1, t[0]
    while m < t.size:
        if steps >= max_steps or total >= max_total:
            return Y, 1
        step = min(h, t[-1] - tc)
        if step <= 1e-14 * max(abs(tc), 1.0):
            return Y, 2
        for s in range(1, 7):
            for i in range(n):
                acc = 0.0
                for r in range(s):
                    acc += a[s, r] * K[r, i]
                stage[i] = y[i] + step * acc
            if s == 5:
                _copy(stage, y6)
            if s == 6:
                _copy(stage, y1)
            derivative(tc + c[s] * step, stage, p, sens, K[s], work)
        for i in range(n):
            acc = 0.0
            for r in range(7):
                acc += e[r] * K[r, i]
            stage[i] = step * acc
        err = _error_norm(stage, y, y1, rtol, atol)
        steps += 1
        total += 1
        if not math.isfinite(err):  # a non-finite stage: retry a much shorter step
            h, rejected = 0.2 * step, True
            continue
        if err > 1.0:
            h, rejected = step * max(0.2, 0.9 * err**-0.2), True
            continue
        num, den = 0.0, 0.0
        for i in range(n):
            num += (K[6, i] - K[5, i]) ** 2
            den += (y1[i] - y6[i]) ** 2
        if den > 0.0 and step * step * num > 3.25**2 * den:
            stiff, nonstiff = stiff + 1, 0
            if stiff == 15:
                return Y, 3
        else:
            nonstiff += 1
            if nonstiff == 6:
                stiff = 0
        t1 = t[-1] if step == t[-1] - tc else tc + step
        while m < t.size and t[m] <= t1:
            if t[m] == t1:
                _copy(y1, Y[m])
            else:
                theta = (t[m] - tc) / step
                theta1 = 1.0 - theta
                for i in range(n):
                    r2 = y1[i] - y[i]
                    r3 = step * K[0, i] - r2
                    r4 = r2 - step * K[6, i] - r3
                    acc = 0.0
                    for r in range(7):
                        acc += d[r] * K[r, i]
                    Y[m, i] = y[i] + theta * (
                        r2 + theta1 * (r3 + theta * (r4 + theta1 * step * acc))
                    )
            m += 1
            steps = 0
        tc = t1
        _copy(y1, y)
        _copy(K[6], K[0])
        grow = 10.0 if err == 0.0 else min(10.0, max(0.2, 0.9 * err**-0.2))
        if rejected:
            grow = min(grow, 1.0)
        rejected = False
        h = step * grow
    return Y, 0


@functools.cache
def explicit_solve():
    """:func:`_explicit_solve` compiled (or loaded from the disk cache) at the first call
    rather than at import, as the entry point of its one signature: numba's dispatcher types
    a first-class function argument again at every call (50-95 us, more than a small model's
    whole solve), the entry point unboxes the arguments by the fixed signature (10 us). So
    every argument must have its exact type (:func:`derivative_target`, float64 C-contiguous
    writable arrays, Python floats, ints and a bool)."""
    dispatcher = explicit_dispatcher()
    return dispatcher.overloads[dispatcher.signatures[0]].entry_point


@functools.cache
def explicit_dispatcher():
    """:func:`_explicit_solve`'s numba dispatcher, compiled for its one signature only: a
    compiled caller (a forward solution inside a sampler's log-density) calls it with the
    model's ``derivative`` dispatcher, which numba converts to :data:`DERIVATIVE`, so one
    machine code (cached on disk) serves every model."""
    return numba.njit(_SIGNATURE, cache=True, error_model="numpy")(_explicit_solve)


def derivative_target(derivative) -> CompileResultWAP:
    """The first-class function :func:`explicit_solve` takes for ``derivative``, a numba
    function compiled with the signature :data:`DERIVATIVE` only."""
    return CompileResultWAP(derivative.overloads[DERIVATIVE.signature.args])
