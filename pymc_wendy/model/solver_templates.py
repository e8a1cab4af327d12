"""Source templates of the compiled forward solver's functions (right-hand side, Jacobian,
forward sensitivities), one module per model written by
:func:`pymc_wendy.model.compiled_solve.compiled_solver`.

The generated module holds the model's generated functions ``f``, ``f_u``, ``f_p``, the sizes
``D`` (states), ``J`` (parameters), ``P = J + D`` and the source of the functions below, each
compiled with numba's on-disk cache (:mod:`pymc_wendy._codecache`), so a second process
solving the same model loads them instead of compiling. The functions are never compiled
here: the placeholders below only make this file valid Python for readers and linters.
"""

from __future__ import annotations

import numpy as np

from pymc_wendy._codecache import sources

# Bound by the generated module (placeholders, see the module doc).
D = J = P = 0
f = f_u = f_p = None


def rhs(t, y, p):
    """``du/dt`` at one time point."""
    out = f(np.full(1, t), y.reshape(1, D), p, np.zeros((1, D)))
    return out[0]


def jac(t, y, p):
    """``df/du`` at one time point."""
    out = f_u(np.full(1, t), y.reshape(1, D), p, np.zeros((1, D, D)))
    return out[0]


def sensitivity_rhs(t, y, p):
    """The state and ``dS/dt = f_u S + [f_p, 0]``, ``S = du/d(p, u0)`` stored row-major
    (D, P) after the state."""
    tt = np.full(1, t)
    u = np.ascontiguousarray(y[:D]).reshape(1, D)
    F = f(tt, u, p, np.zeros((1, D)))
    A = f_u(tt, u, p, np.zeros((1, D, D)))
    B = f_p(tt, u, p, np.zeros((1, D, J)))
    out = np.empty(D + D * P)
    out[:D] = F[0]
    for d in range(D):
        for k in range(P):
            acc = B[0, d, k] if k < J else 0.0
            for e in range(D):
                acc += A[0, d, e] * y[D + e * P + k]
            out[D + d * P + k] = acc
    return out


#: the functions a solver module compiles, in order
FUNCTIONS = (rhs, jac, sensitivity_rhs)

#: their sources as imported (:func:`pymc_wendy._codecache.sources`)
SOURCES = sources(*FUNCTIONS)
