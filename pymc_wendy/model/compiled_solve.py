"""Compiled forward solves: LSODA stepping on numba right-hand sides, batched over draws.

The solver is scipy's ``odeint`` (ODEPACK's LSODA, compiled Fortran): it switches between an
Adams method and BDF by itself, so stiff systems keep an implicit method (with the generated
analytic Jacobian) and non-stiff ones do not pay for it. The right-hand side, its Jacobian
and the forward-sensitivity system are generated from the sympy model and compiled by numba,
so a call from the Fortran stepper costs about a microsecond instead of the tens of
microseconds of a Python right-hand side under ``solve_ivp``'s Python stepping (FitzHugh-
Nagumo, 513 output times: 3 ms against 0.15 s for ``Radau``).

Candidates we compared (``docs/forward.md``): ``solve_ivp`` (all stepping in Python),
numbalsoda (LSODA callable from numba, but on PyPI only as a source archive that needs a
Fortran compiler, last released 2022), scikit-sundae (CVODE wheels, Python callbacks, a new
dependency), diffrax (JAX: fast and batched, but JAX is a peer, not a core dependency).
``odeint`` is maintained with scipy, already a dependency, and stiff-capable.

Only first-order models without inputs take this path (:func:`supports`); the others (inputs
with breakpoints, bolus doses, derivative terms) keep :func:`~pymc_wendy.model.simulate.solve`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.integrate import ODEintWarning, odeint

from pymc_wendy.model.ode import ODEModel

__all__ = ["CompiledSolver", "compiled_solver", "supports"]

_SUCCESS = "Integration successful."


class SolveFailed(RuntimeError):
    """A compiled solve did not reach the last output time (or gave non-finite values)."""


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
    return model.cached(("compiled_solver", "odeint"), _build)


def _build(model: ODEModel) -> CompiledSolver:
    import numba  # deferred: importing numba costs about a second

    f = model.numba_function("f")
    f_u = model.numba_function("f_u")
    f_p = model.numba_function("f_p")
    D, J = model.n_states, model.n_params
    P = J + D

    @numba.njit(cache=False)
    def rhs(t, y, p):
        out = f(np.full(1, t), y.reshape(1, D), p, np.zeros((1, D)))
        return out[0]

    @numba.njit(cache=False)
    def jac(t, y, p):
        out = f_u(np.full(1, t), y.reshape(1, D), p, np.zeros((1, D, D)))
        return out[0]

    @numba.njit(cache=False)
    def sensitivity_rhs(t, y, p):
        # the state and dS/dt = f_u S + [f_p, 0], S = du/d(p, u0) stored row-major (D, P)
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

    return CompiledSolver(model, rhs, jac, sensitivity_rhs)


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
        return self._odeint(self.rhs, u0, t, p, self.jac, rtol, atol, max_steps)

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
        Y = self._odeint(self.sensitivity_rhs, y0, t, p, None, rtol, atol, max_steps)
        return Y[:, :D], Y[:, D:].reshape(-1, D, P)
