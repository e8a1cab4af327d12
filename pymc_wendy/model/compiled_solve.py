"""Compiled forward solves: an explicit Runge-Kutta pair in numba, LSODA where the problem
is stiff, batched over draws.

A solve first takes Dormand and Prince's 5(4) pair (DOPRI5, :mod:`~pymc_wendy.model.dopri`),
compiled by numba once for every model and calling the model's generated right-hand side as a
first-class function: no Python between steps, about 0.1-0.2 microseconds per evaluation of a
small model's right-hand side and its sensitivities. Hairer's stiffness test stops it within
a few dozen steps when the problem is stiff for an explicit method (Robertson's kinetics:
27 microseconds), and then scipy's ``odeint`` (ODEPACK's LSODA, compiled Fortran) solves it,
switching between Adams and BDF by itself, with the generated analytic Jacobian; its
right-hand side is numba-compiled too but called through Python, about 2-4 microseconds per
call. Sensitivity solves at 21 output times (a sparse real series): 1.9-17 times faster
than LSODA over the catalogue (Lotka-Volterra 0.42 against 7.1 ms). Output times inside a
step are interpolated by the pair's continuous extension, so dense outputs cost no extra
steps: at 513 output times 3.5-19 times faster than LSODA (protein transduction 11 times;
4 times slower while the pair stepped to every output time). At the default tolerances its
global error is 3-1000 times below LSODA's (``benchmarks/forward_solve.py``, parts 1 and 5).

Candidates we compared for the stiff fallback (``docs/forward.md``): ``solve_ivp`` (all
stepping in Python), numbalsoda (LSODA callable from numba, but on PyPI only as a source
archive that needs a Fortran compiler, last released 2022), scikit-sundae (CVODE wheels,
Python callbacks, a new dependency), diffrax (JAX: fast and batched, but JAX is a peer, not a
core dependency). ``odeint`` is maintained with scipy, already a dependency, and
stiff-capable.

Only first-order models without inputs take this path (:func:`supports`); dosed and held
inputs take it stretch by stretch (:mod:`~pymc_wendy.model.piecewise_solve`), the others
(derivative terms, other inputs) keep :func:`~pymc_wendy.model.simulate.solve`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy.integrate import ODEintWarning, odeint

from pymc_wendy._codecache import IMPORTS, jitted, load_module
from pymc_wendy.model import dopri, solver_templates
from pymc_wendy.model.ode import ODEModel

__all__ = ["BlowUp", "CompiledSolver", "SolveFailed", "compiled_solver", "supports"]

_SUCCESS = "Integration successful."

# The explicit solver's step budget, beyond which LSODA takes over: a backstop behind the
# stiffness test (a mildly stiff problem the test does not flag), generous for non-stiff
# problems, which take a few steps per output time.
_EXPLICIT_STEPS_PER_OUTPUT = 20
_EXPLICIT_STEPS_BASE = 5000
#: dopri.explicit_solve's status when the step size fell below the time's resolution
STEP_COLLAPSED = 2


def explicit_budget(n_times: int) -> int:
    """The explicit solver's total step budget for ``n_times`` output times."""
    return _EXPLICIT_STEPS_PER_OUTPUT * n_times + _EXPLICIT_STEPS_BASE


class SolveFailed(RuntimeError):
    """A compiled solve did not reach the last output time (or gave non-finite values)."""


class BlowUp(SolveFailed):
    """The solution blows up (the explicit solver's step size collapsed): no tolerance or
    step budget gets past it."""


def supports(model: ODEModel) -> bool:
    """True when ``model`` can be solved by :class:`CompiledSolver`: every state of order 1,
    no inputs (no derivative terms, breakpoints or bolus jumps to restart at)."""
    return not model.has_operator_terms and all(o == 1 for o in model.orders)


def max_steps_for(max_nfev: int | None, n_times: int) -> int:
    """LSODA's step bound between output times for a total evaluation limit ``max_nfev``
    (None: effectively unlimited), spread over the ``n_times`` output times."""
    return 10**7 if max_nfev is None else max(100, max_nfev // n_times)


def compiled_solver(model: ODEModel) -> CompiledSolver:
    """The :class:`CompiledSolver` of ``model``, built once per model structure (numba
    compiles the generated functions at the first solve)."""
    if not supports(model):
        raise ValueError(
            f"{model.name}: the compiled solver takes first-order models without inputs; "
            "use pymc_wendy.solve for this one"
        )
    solver = model.cached(("compiled_solver", "odeint"), _build)
    # the cache is shared by every model of the same structure: its messages name this one
    return solver if solver.model is model else replace(solver, model=model)


def _build(model: ODEModel) -> CompiledSolver:
    """The solver's numba functions, from a generated module kept on disk
    (:mod:`~pymc_wendy.model.solver_templates`): a second process loads their machine code
    instead of compiling it (numba compiles at the first solve)."""
    D, J = model.n_states, model.n_params
    lines = [
        f'"""Compiled forward-solver functions of {model.name!r}, generated by pymc_wendy."""',
        "",
        *IMPORTS,
        "",
        f"D, J, P = {D}, {J}, {D + J}",
        "from pymc_wendy.model.dopri import DERIVATIVE",
    ]
    for name in ("f", "f_u", "f_p"):
        lines += jitted(f"{name}_point", model.point_function(name).__source__)
    for fn in solver_templates.FUNCTIONS:
        name = fn.__name__
        sig = solver_templates.SIGNATURES.get(name)
        lines += [
            "",
            "",
            solver_templates.SOURCES[name],
            # numpy's error model: a blow-up gives inf (a failed solve), not ZeroDivisionError
            f"{name} = numba.njit({sig + ', ' if sig else ''}cache=True, error_model='numpy')"
            f"({name})",
        ]
    module = load_module("\n".join(lines) + "\n", "pymc_wendy_solver_")
    target = dopri.derivative_target(module.derivative)
    explicit = functools.partial(_explicit, target, module.work_buffer)
    return CompiledSolver(
        model, module.rhs, module.jac, module.sensitivity_rhs, explicit, module.derivative,
        module.work_buffer,
    )  # fmt: skip


def _explicit(derivative, work, y0, t, p, rtol, atol, max_steps, max_total, sens):
    """:func:`~pymc_wendy.model.dopri.explicit_solve` on the model's right-hand side, with
    the exact argument types of its compiled signature (writable: a read-only array is
    another numba type)."""
    y0, t, p = (np.require(a, dtype=float, requirements=["C", "W"]) for a in (y0, t, p))
    return dopri.explicit_solve()(
        derivative,
        y0,
        t,
        p,
        float(rtol),
        float(atol),
        int(max_steps),
        int(max_total),
        bool(sens),
        work(),
    )


@dataclass(frozen=True, eq=False)
class CompiledSolver:
    """Forward solves of one first-order model without inputs (see the module doc).

    Every method takes output times ``t`` (strictly increasing, ``t[0]`` the initial time)
    and solver tolerances; ``max_steps`` bounds the steps between two output times, so a
    solution that blows up fails within a fraction of a second instead of hanging.
    """

    model: ODEModel
    rhs: Callable
    jac: Callable
    sensitivity_rhs: Callable
    explicit: Callable
    #: the model's right-hand side for :func:`~pymc_wendy.model.dopri.explicit_dispatcher`
    #: and its work buffer's factory, both numba functions a compiled caller can call
    derivative: Callable
    work_buffer: Callable

    def _stepped(self, y0, t, p, rtol, atol, max_steps, sens: bool) -> np.ndarray:
        """The explicit solver's solution, else (a stiff problem, a step budget spent) LSODA's;
        a collapsed step size fails at once."""
        Y, status = self.explicit(y0, t, p, rtol, atol, max_steps, explicit_budget(t.size), sens)
        if status == 0 and np.all(np.isfinite(Y)):
            return Y
        if status == STEP_COLLAPSED:
            # a finite-time blow-up (or a right-hand side that is not finite): LSODA fails there
            # too, after 30-80 ms of its step budget (about 40 us for the explicit pair), which
            # made draws that blow up most of an importance batch's time. Measured over 1 320
            # solves of the catalogue's first-order problems from wide parameter draws: 2 such
            # collapses, LSODA failing on both.
            reached = t[max(np.argmin(np.all(np.isfinite(Y), axis=1)) - 1, 0)]
            raise BlowUp(
                f"{self.model.name}: the solution blows up on [{t[0]:g}, {t[-1]:g}] after the "
                f"output time t = {reached:.6g} (the explicit solver's step size collapsed)"
            )
        fn, jac = (self.sensitivity_rhs, None) if sens else (self.rhs, self.jac)
        return self._odeint(fn, y0, t, p, jac, rtol, atol, max_steps)

    def _odeint(self, fn, y0, t, p, jac, rtol, atol, max_steps) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ODEintWarning)
            Y, info = odeint(
                fn,
                y0,
                t,
                args=(p,),
                Dfun=jac,
                rtol=rtol,
                atol=atol,
                mxstep=max_steps,
                full_output=True,
                tfirst=True,
            )
        finite = np.all(np.isfinite(Y), axis=1)
        if info["message"] != _SUCCESS or not np.all(finite):
            # the rows after a failure are not solution values; tcur says how far it got
            good = np.r_[True, info["tcur"] >= t[1:]] & finite
            reached = t[np.argmin(good) - 1] if not np.all(good) else t[-1]
            message = info["message"] if info["message"] != _SUCCESS else "non-finite values"
            raise SolveFailed(
                f"{self.model.name}: the solver (LSODA) failed on [{t[0]:g}, {t[-1]:g}] after "
                f"the output time t = {reached:.6g}: {message.rstrip('.')}"
            )
        return Y

    def solve(
        self,
        p: np.ndarray,
        u0: np.ndarray,
        t: np.ndarray,
        *,
        rtol: float = 1e-8,
        atol: float = 1e-10,
        max_steps: int = 5000,
    ) -> np.ndarray:
        """``U[m] = u(t[m])``, shape (n, D); raises :class:`SolveFailed`."""
        # writable copies: numba compiles a second version for read-only arrays
        p = np.array(p, dtype=float)
        u0 = np.array(u0, dtype=float)
        return self._stepped(u0, np.asarray(t, dtype=float), p, rtol, atol, max_steps, False)

    def solve_many(
        self,
        P: np.ndarray,
        U0: np.ndarray,
        t: np.ndarray,
        *,
        rtol: float = 1e-8,
        atol: float = 1e-10,
        max_steps: int = 5000,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Solve for every row of ``P`` (shape (n, J)) and ``U0`` (shape (n, D)).

        Returns ``(U, ok)``: the solutions, shape (n, len(t), D), NaN where a solve failed,
        and which solves succeeded, shape (n,).
        """
        P = np.atleast_2d(np.asarray(P, dtype=float))
        U0 = np.atleast_2d(np.asarray(U0, dtype=float))
        n = max(P.shape[0], U0.shape[0])
        P = np.broadcast_to(P, (n, P.shape[1]))
        U0 = np.broadcast_to(U0, (n, U0.shape[1]))
        out = np.full((n, t.size, self.model.n_states), np.nan)
        ok = np.zeros(n, dtype=bool)
        for i in range(n):  # each solve is compiled stepping; the loop is over draws
            try:
                out[i] = self.solve(P[i], U0[i], t, rtol=rtol, atol=atol, max_steps=max_steps)
                ok[i] = True
            except SolveFailed:
                pass
        return out, ok

    def sensitivities(
        self,
        p: np.ndarray,
        u0: np.ndarray,
        t: np.ndarray,
        *,
        rtol: float = 1e-8,
        atol: float = 1e-10,
        max_steps: int = 5000,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(U, S)``: the solution, shape (n, D), and its derivatives in ``(p, u0)``,
        ``S[m, d, k] = du_d(t_m)/dtheta_k``, shape (n, D, J + D); raises
        :class:`SolveFailed`."""
        D, J = self.model.n_states, self.model.n_params
        P = J + D
        y0 = np.zeros(D + D * P)
        y0[:D] = u0
        y0[D:].reshape(D, P)[:, J:] = np.eye(D)
        p = np.array(p, dtype=float)
        Y = self._stepped(y0, np.asarray(t, dtype=float), p, rtol, atol, max_steps, True)
        return Y[:, :D], Y[:, D:].reshape(-1, D, P)
