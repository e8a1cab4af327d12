"""Compiled forward solves of models whose inputs are piecewise constant: doses.

Between two breakpoints of its inputs (dose times, infusion starts and ends, the grid times of
held values) a model ``u' = f(t, u, p, w)`` with piecewise-constant inputs ``w`` is a model
without inputs whose parameters are ``(p, w)``. :class:`PiecewiseSolver` solves it stretch by
stretch with the compiled solver of that model (:mod:`~pymc_wendy.model.compiled_solve`:
LSODA on numba right-hand sides), applies each bolus as a jump of the state between two
stretches, and chains the sensitivities across them:

    dU/d(p, u0) = dU/dp|stretch + dU/du_a|stretch @ du_a/d(p, u0),

``u_a`` the state at the stretch's start after its jump (whose derivative in ``p`` is the
jump's, ``B(p) A`` for a bolus ``A`` entering as ``B(p) w``). The conventions are
:func:`~pymc_wendy.model.simulate.integrate`'s: an output at a dose time is the value
before the dose, and a dose at the initial time counts in full.

Why: the exact stage of a dosed model solves it once per proposal draw or gradient, and the
``solve_ivp`` route steps a Python right-hand side (a two-compartment model with three
doses, 289 times: 0.16 s per sensitivity solve; this route: ``benchmarks/forward_solve.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymc_wendy.model.compiled_solve import compiled_solver
from pymc_wendy.model.doses import Doses
from pymc_wendy.model.inputs import Input
from pymc_wendy.model.ode import ODEModel

__all__ = ["PiecewiseSolver", "Stretches", "supports_piecewise"]


def supports_piecewise(model: ODEModel, inputs: Mapping[str, Input]) -> bool:
    """True when ``model`` is of first order and every input is piecewise constant (doses,
    or values on a grid held constant), so :class:`PiecewiseSolver` can solve it."""
    if not inputs or model.transform is not None or any(q != 1 for q in model.orders):
        return False
    return all(_piecewise_constant(w) for w in inputs.values())


def _piecewise_constant(w) -> bool:
    held = isinstance(w, Input) and w.values is not None and w.kind == "constant"
    return isinstance(w, Doses) or held


def _inputs_as_parameters(model: ODEModel) -> ODEModel:
    """``model`` with its inputs appended to its parameters: a model without inputs."""
    J = model.n_params

    def rhs(t, u, q):
        return model.rhs(t, u, q[:J], q[J:])

    return ODEModel(
        rhs, states=model.states, params=[*model.params, *model.inputs], name=model.name
    )


@dataclass(frozen=True)
class Stretches:
    """A :class:`PiecewiseSolver`'s stretches as flat arrays (stretch ``i`` of ``n``).

    Attributes
    ----------
    start : ndarray (n,)
        The stretch's first time.
    inputs : ndarray (n, W)
        The inputs' values on it.
    bolus, has_bolus : ndarray (n, W), ndarray (n,) of bool
        The bolus amounts given at its start, and whether there are any.
    first_output, n_outputs : ndarray (n,) of int
        The output times inside it (after its start, up to its end): their first index and
        how many.
    grid, grid_end : ndarray, ndarray (n,) of int
        The times it is solved at, all stretches' end to end (its start, its output times,
        its end): stretch ``i``'s are ``grid[grid_end[i - 1]:grid_end[i]]``.
    """

    start: np.ndarray
    inputs: np.ndarray
    bolus: np.ndarray
    has_bolus: np.ndarray
    first_output: np.ndarray
    n_outputs: np.ndarray
    grid: np.ndarray
    grid_end: np.ndarray


class PiecewiseSolver:
    """Solves of ``model`` with piecewise-constant ``inputs`` at the output times ``times``
    (``times[0]`` the initial time): the module doc. Raises
    :class:`~pymc_wendy.model.compiled_solve.SolveFailed` as the compiled solver does."""

    def __init__(self, model: ODEModel, times: np.ndarray, inputs: Mapping[str, Input]):
        if not supports_piecewise(model, inputs):
            raise ValueError(
                f"{model.name}: the piecewise solver takes first-order models whose inputs "
                "are doses or held values"
            )
        self.model = model
        self.times = t = np.asarray(times, dtype=float)
        forcing = [inputs[name] for name in model.inputs]
        for w in forcing:
            w.check_covers(float(t[0]), float(t[-1]), "the output times")
        self._solver = compiled_solver(model.cached(("piecewise", "model"), _inputs_as_parameters))
        jump_at = np.unique(np.concatenate([getattr(w, "jump_times", []) for w in forcing]))
        jump_at = jump_at[(jump_at >= t[0]) & (jump_at < t[-1])]
        breaks = np.concatenate([w.breakpoints for w in forcing] + [jump_at])
        edges = np.unique(np.r_[t[0], breaks[(breaks > t[0]) & (breaks < t[-1])], t[-1]])
        # per stretch (a, b]: the inputs' values, the bolus amounts at a, the output times
        self._stretches = []
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            mid = np.array([0.5 * (a + b)])
            w = np.array([float(f(mid)[0]) for f in forcing])
            bolus = np.array([f.bolus_amount(a) if isinstance(f, Doses) else 0.0 for f in forcing])
            out = np.flatnonzero((t > a) & (t <= b))
            grid = np.r_[a, t[out]] if out.size and t[out[-1]] == b else np.r_[a, t[out], b]
            self._stretches.append((a, w, bolus if a in jump_at else None, out, grid))

    @property
    def stretch_solver(self):
        """The compiled solver of one stretch: the model with its inputs as parameters
        (``p`` then the inputs' values)."""
        return self._solver

    def packed(self) -> Stretches:
        """The stretches as flat arrays, for compiled code (:class:`Stretches`)."""
        n, W = len(self._stretches), len(self.model.inputs)
        packed = Stretches(
            start=np.array([a for a, *_ in self._stretches]),
            inputs=np.zeros((n, W)),
            bolus=np.zeros((n, W)),
            has_bolus=np.zeros(n, dtype=np.bool_),
            first_output=np.array([out[0] if out.size else 0 for *_, out, _ in self._stretches]),
            n_outputs=np.array([out.size for *_, out, _ in self._stretches]),
            grid=np.concatenate([grid for *_, grid in self._stretches]),
            grid_end=np.cumsum([grid.size for *_, grid in self._stretches]),
        )
        for i, (_, w, bolus, _, _) in enumerate(self._stretches):
            packed.inputs[i] = w
            if bolus is not None:
                packed.bolus[i], packed.has_bolus[i] = bolus, True
        return packed

    def solve(self, p: np.ndarray, u0: np.ndarray, **options) -> np.ndarray:
        """``U[m] = u(times[m])``, shape (n, D)."""
        p = np.asarray(p, dtype=float)
        U = np.empty((self.times.size, self.model.n_states))
        U[0] = y = np.asarray(u0, dtype=float)
        for a, w, bolus, out, grid in self._stretches:
            if bolus is not None:
                y = y + self._jump(a, y, p, bolus)
            Y = self._solver.solve(np.r_[p, w], y, grid, **options)
            U[out] = Y[1 : out.size + 1]
            y = Y[-1]
        return U

    def sensitivities(self, p: np.ndarray, u0: np.ndarray, **options):
        """``(U, S)``: the solution (n, D) and ``S[m, d, k] = du_d(t_m)/d(p, u0)_k``,
        shape (n, D, J + D)."""
        p = np.asarray(p, dtype=float)
        D, J = self.model.n_states, self.model.n_params
        W = len(self.model.inputs)
        U = np.empty((self.times.size, D))
        S = np.zeros((self.times.size, D, J + D))
        U[0] = y = np.asarray(u0, dtype=float)
        S[0, :, J:] = Sy = np.eye(D)
        Sy = np.hstack([np.zeros((D, J)), Sy])
        for a, w, bolus, out, grid in self._stretches:
            if bolus is not None:
                du, dfp = self._jump(a, y, p, bolus, with_p=True)
                y, Sy = y + du, Sy + np.hstack([dfp, np.zeros((D, D))])
            Y, Sg = self._solver.sensitivities(np.r_[p, w], y, grid, **options)
            # chain rule: the stretch's start state carries the earlier dependence
            Sc = np.einsum("mde,ek->mdk", Sg[:, :, J + W :], Sy)
            Sc[:, :, :J] += Sg[:, :, :J]
            U[out], S[out] = Y[1 : out.size + 1], Sc[1 : out.size + 1]
            y, Sy = Y[-1], Sc[-1]
        return U, S

    def _jump(self, s: float, u, p, bolus, with_p: bool = False):
        # the inputs enter linearly with coefficients of p alone (ODEModel), so a bolus
        # changes the state by the right-hand side's change from w = 0 to w = A
        model, zero = self.model, np.zeros_like(bolus)
        du = model(s, u, p, bolus) - model(s, u, p, zero)
        if not with_p:
            return du
        return du, model.parameter_jacobian(s, u, p, bolus) - model.parameter_jacobian(
            s, u, p, zero
        )
