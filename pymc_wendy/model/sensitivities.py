"""Forward solves with sensitivities for every model kind the weak form fits.

:class:`ForwardSolver` solves one model at fixed output times and gives the solution's
derivatives in the parameters and the initial state, ``dU/d(p, u0)``, from the forward
sensitivity system ``dS/dt = f_u S + [f_p, 0]`` integrated with the state. First-order
models without inputs take the compiled path (:mod:`~pymc_wendy.model.compiled_solve`: LSODA
stepping numba right-hand sides, microseconds per evaluation), and so do first-order models
whose inputs are doses or held values, stretch by stretch between the inputs' breakpoints
(:mod:`~pymc_wendy.model.piecewise_solve`); other inputs and derivative terms take the
companion system stepped by ``solve_ivp``
(:func:`operator_sensitivity_rhs`, :func:`~pymc_wendy.model.simulate.integrate`), which
restarts at the inputs' breakpoints and applies each bolus dose as a jump of the state and
of its sensitivities. Both raise
:class:`~pymc_wendy.model.compiled_solve.SolveFailed` when a solve does not reach the last
output time, so a caller handles one failure type.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pymc_wendy.model.compiled_solve import (
    CompiledSolver,
    SolveFailed,
    compiled_solver,
    supports,
)
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.piecewise_solve import PiecewiseSolver, supports_piecewise
from pymc_wendy.model.simulate import SimulationError, integrate, solve, vector_field

__all__ = ["ForwardSolver", "operator_sensitivity_rhs"]


def operator_sensitivity_rhs(model: ODEModel, p: np.ndarray, inputs, t: np.ndarray):
    """``(rhs(s, y), breaks, jumps)`` of the companion state of a model with derivative terms
    or inputs plus its sensitivities to ``(p, u0)``: ``dS/dt = f_u S + [f_p, 0]``; at a bolus
    the state jumps by ``g(p) A`` and its sensitivity to ``p`` by ``g'(p) A``."""
    f, f_u, breaks, f_p = vector_field(model, p, inputs, t, jac_p=True)
    n, J = len(model.companion_states), model.n_params

    def rhs(s, y):
        u = y[:n]
        # From parameters far from the data (an optimiser's trial point, a fit from a poor
        # start) the solution or its sensitivities can outgrow double precision: that solve
        # has diverged. Say so and stop it (integrate makes this a SimulationError) rather
        # than warn about the overflow and let the solver step on with inf until it gives up.
        with np.errstate(over="ignore", invalid="ignore"):
            dS = f_u(s, u) @ y[n:].reshape(n, J + n)
            dS[:, :J] += f_p(s, u)
        out = np.concatenate([f(s, u), dS.ravel()])
        if not np.all(np.isfinite(out)):
            raise FloatingPointError(
                f"the solution or its sensitivities diverge (overflow) at t = {s:.6g}"
            )
        return out

    def jump(s, y):
        du, dfp = breaks.jump(s, y[:n], with_p=True)
        out = y.copy()
        out[:n] += du
        out[n:].reshape(n, J + n)[:, :J] += dfp
        return out

    jumps = None if breaks.jump is None else (breaks.jump_times, jump)
    return rhs, breaks.times, jumps


class ForwardSolver:
    """Solves of ``model`` at the output times ``times`` (``times[0]`` the initial time).

    Parameters
    ----------
    model : ODEModel
    times : ndarray (n,)
        Strictly increasing output times; the initial state holds at ``times[0]``.
    inputs : mapping, optional
        The model's validated inputs (names to :class:`~pymc_wendy.model.inputs.Input`).
    rtol, atol : float
        Solver tolerances.
    max_steps : int
        Compiled path: LSODA's step bound between two output times. The ``solve_ivp``
        path allows as many right-hand side evaluations per output time.

    Attributes
    ----------
    n_initial : int
        Length of the initial state: the companion states (a state of order ``q`` and its
        first ``q - 1`` derivatives, :attr:`~pymc_wendy.ODEModel.companion_states`).
    compiled : bool
        Whether the compiled (LSODA on numba) path is used: first-order models without
        inputs, or whose inputs are doses or held values
        (:class:`~pymc_wendy.model.piecewise_solve.PiecewiseSolver`).
    """

    def __init__(
        self,
        model: ODEModel,
        times: np.ndarray,
        inputs: Mapping | None = None,
        *,
        rtol: float = 1e-8,
        atol: float = 1e-10,
        max_steps: int = 5000,
    ):
        self.model = model
        self.times = np.asarray(times, dtype=float)
        self.inputs = dict(inputs or {})
        self.options = {"rtol": rtol, "atol": atol, "max_steps": max_steps}
        self.n_initial = len(model.companion_states)
        if supports(model) and not self.inputs:
            self._solver = compiled_solver(model)
        elif not model.inputs and not self.inputs:  # the companion system is first order
            self._solver = compiled_solver(model.first_order_system())
        elif supports_piecewise(model, self.inputs):
            self._solver = PiecewiseSolver(model, self.times, self.inputs)
        else:
            self._solver = None
        self.compiled = self._solver is not None

    @property
    def single(self) -> CompiledSolver | None:
        """The compiled solver when a solve is one explicit solve over all the output times
        (a first-order model without inputs), which compiled code can call
        (:mod:`~pymc_wendy.bayes.forward_numba`); None otherwise."""
        return self._solver if isinstance(self._solver, CompiledSolver) else None

    @property
    def piecewise(self) -> PiecewiseSolver | None:
        """The stretch-by-stretch solver of a first-order model with doses or held inputs
        (whose stretches compiled code can solve: :mod:`~pymc_wendy.bayes.forward_numba`);
        None otherwise."""
        return self._solver if isinstance(self._solver, PiecewiseSolver) else None

    def solve(self, p: np.ndarray, u0: np.ndarray) -> np.ndarray:
        """The companion state at the output times, ``(n, n_initial)``; raises
        :class:`SolveFailed`."""
        if isinstance(self._solver, PiecewiseSolver):
            return self._solver.solve(p, u0, **self.options)
        if self.compiled:
            return self._solver.solve(p, u0, self.times, **self.options)
        try:  # pw.solve's own path: restarts at breakpoints, bolus jumps
            return solve(
                self.model, p, u0, self.times, method="LSODA", rtol=self.options["rtol"],
                atol=self.options["atol"], max_nfev=self._max_nfev(), inputs=self.inputs,
            )  # fmt: skip
        except SimulationError as exc:
            raise SolveFailed(str(exc)) from None

    def sensitivities(self, p: np.ndarray, u0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(U, S)``: the companion state ``(n, n_initial)`` and its derivatives in
        ``(p, u0)``, ``S[m, i, k] = dU[m, i]/dtheta_k``, ``(n, n_initial, J + n_initial)``;
        raises :class:`SolveFailed`."""
        if isinstance(self._solver, PiecewiseSolver):
            return self._solver.sensitivities(p, u0, **self.options)
        if self.compiled:
            return self._solver.sensitivities(p, u0, self.times, **self.options)
        n, P = self.n_initial, self.model.n_params + self.n_initial
        Y = self._integrate(p, u0)
        return Y[:, :n], Y[:, n:].reshape(-1, n, P)

    def _max_nfev(self) -> int:
        return self.options["max_steps"] * self.times.size

    def _integrate(self, p, u0) -> np.ndarray:
        p = np.asarray(p, dtype=float)
        n, J = self.n_initial, self.model.n_params
        rhs, breaks, jumps = operator_sensitivity_rhs(self.model, p, self.inputs, self.times)
        S0 = np.zeros((n, J + n))
        S0[:, J:] = np.eye(n)
        y0 = np.concatenate([np.asarray(u0, dtype=float), S0.ravel()])
        try:
            return integrate(
                rhs, y0, self.times, method="LSODA", rtol=self.options["rtol"],
                atol=self.options["atol"], max_nfev=self._max_nfev(), name=self.model.name,
                breaks=breaks, jumps=jumps,
            )  # fmt: skip
        except SimulationError as exc:
            raise SolveFailed(str(exc)) from None
