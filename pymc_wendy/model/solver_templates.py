"""Source templates of the compiled forward solver's functions (right-hand side, Jacobian,
forward sensitivities), one module per model written by
:func:`pymc_wendy.model.compiled_solve.compiled_solver`.

The generated module holds the model's generated functions ``f``, ``f_u``, ``f_p`` at one time
point (``f_point``, ...: :meth:`~pymc_wendy.model.ode.ODEModel.point_function`), the sizes
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
f_point = f_u_point = f_p_point = None


def rhs(t, y, p):
    """``du/dt`` at one time point."""
    out = np.zeros(D)
    f_point(t, y, p, out, 0)
    return out


def jac(t, y, p):
    """``df/du`` at one time point."""
    out = np.zeros(D * D)
    f_u_point(t, y, p, out, 0)
    return out.reshape((D, D))


def sensitivity_rhs(t, y, p):
    """The state and ``dS/dt = f_u S + [f_p, 0]``, ``S = du/d(p, u0)`` stored row-major
    (D, P) after the state. ``y`` and ``p`` are copied: a caller's read-only array (scipy's
    arguments, say) is not of :func:`derivative`'s signature."""
    out = np.empty(D + D * P)
    derivative(t, y.copy(), p.copy(), True, out, work_buffer())
    return out


def work_buffer():
    """The buffer of :func:`derivative`: ``f_u`` and ``f_p`` at a point, flat."""
    return np.zeros(D * D + D * J)


def derivative(t, y, p, sens, out, work):
    """The right-hand side the explicit solver steps, written into ``out``: the state's, or
    with ``sens`` the state's and its sensitivities' (:func:`sensitivity_rhs`). ``work``
    (:func:`work_buffer`, zeroed) holds ``f_u`` and ``f_p``, which write the same entries at every
    call, so entries left zero stay zero. Of :data:`~pymc_wendy.model.dopri.DERIVATIVE`'s
    signature, so the compiled stepper (:func:`~pymc_wendy.model.dopri.explicit_solve`) is
    shared by every model; flat buffers, since array views made at each call cost more than
    the right-hand side itself (125 against 18 ns a call, measured)."""
    for d in range(D):
        out[d] = 0.0
    f_point(t, y, p, out, 0)
    if sens:
        f_u_point(t, y, p, work, 0)
        f_p_point(t, y, p, work, D * D)
        for d in range(D):
            for k in range(P):
                acc = work[D * D + d * J + k] if k < J else 0.0
                for e in range(D):
                    acc += work[d * D + e] * y[D + e * P + k]
                out[D + d * P + k] = acc


#: the functions a solver module compiles, in order
FUNCTIONS = (rhs, jac, work_buffer, derivative, sensitivity_rhs)

#: the signatures they are compiled with where not their arguments' types: the stepper calls
#: ``derivative`` as a first-class function
SIGNATURES = {"derivative": "DERIVATIVE.signature"}

#: their sources as imported (:func:`pymc_wendy._codecache.sources`)
SOURCES = sources(*FUNCTIONS)
