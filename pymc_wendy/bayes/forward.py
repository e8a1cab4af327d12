"""The forward-solve twin of a model: each weak likelihood replaced by the exact one.

:func:`forward_model` rebuilds a PyMC model in which every
:class:`~pymc_wendy.WeakODELikelihood` term becomes the Gaussian (or log-normal) likelihood
of the data around the ODE's solution, everything else unchanged: the same priors, the same
noise level variables, the same names and dims. The solution comes from
:class:`ForwardSolution`, a pytensor Op around
:class:`~pymc_wendy.model.sensitivities.ForwardSolver` (inputs, doses and higher-order
models included), whose gradient comes from forward sensitivities.

The initial state, which the weak likelihood never needs, becomes a parameter: the term's own
initial state when it has one (a known state, or the random variable given as
``initial_state``), otherwise a new variable ``{name}_u0`` at the first data time with the
prior the user gives, or by default ``Normal(U[0], scale)`` per state, ``scale`` half the
state's standard deviation over the series (log-normal noise: ``LogNormal(log U[0], 0.5)``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.transforms import _default_transform
from pymc.model.fgraph import (
    ModelObservedRV,
    fgraph_from_model,
    model_free_rv,
    model_from_fgraph,
    model_observed_rv,
)
from pytensor.gradient import DisconnectedType
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_wendy.bayes.distribution import WeakODERV, noise_model
from pymc_wendy.estimators.output_error import polynomial_start
from pymc_wendy.model.compiled_solve import SolveFailed
from pymc_wendy.model.input_output import forward_system
from pymc_wendy.model.sensitivities import ForwardSolver
from pymc_wendy.weak.likelihood import WeakLikelihood

__all__ = ["ForwardSolution", "ForwardTerm", "NoForwardSolve", "forward_model", "quiet_c_backend"]


@contextlib.contextmanager
def quiet_c_backend():
    """Compile the forward twin's functions for PyTensor's C VM without its warning that a
    pip-installed PyTensor found no BLAS (once per process, with advice to reinstall): they
    spend their time in the ODE solve Op, which runs in Python, not in BLAS."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "PyTensor could not link to a BLAS", UserWarning)
        yield


class NoForwardSolve(ValueError):
    """A model (or term) the exact stage cannot solve forward, said before any solve: the
    weak-versus-exact check is then skipped with this message as its note."""


# Solver tolerances of the forward likelihood: far below any noise level a posterior sees,
# loose enough for a solve per gradient.
SOLVER_OPTIONS: dict = {"rtol": 1e-8, "atol": 1e-10, "max_steps": 5000}


class ForwardSolution(Op):
    """``(p, u0) -> (U, S)``: the solution at the data times and its sensitivities.

    ``U[m, d] = u_d(t_m)`` for the observed times ``t`` of a likelihood (solved from ``t0``
    when that is earlier) and its observed states (a higher-order model's states, not their
    derivatives), ``S[m, d, k] = dU[m, d]/d(p, u0)_k``, ``u0`` the companion state
    (:attr:`~pymc_wendy.ODEModel.companion_states`; the states themselves for a first-order
    model). The likelihood's inputs and doses are part of the solve
    (:class:`~pymc_wendy.model.sensitivities.ForwardSolver`). A failed solve gives NaN (a
    rejected point for a sampler, a zero weight for importance sampling). The gradient of
    ``U`` is ``S`` contracted with the output gradient; ``S`` has none.
    """

    def __init__(self, likelihood: WeakLikelihood, t0: float | None = None):
        self.likelihood = likelihood
        t = likelihood.exact_t  # every observed row, those outside the weak form's domain too
        self.skip = int(t0 is not None and t0 < t[0])
        self.times = np.concatenate([[t0], t]) if self.skip else np.asarray(t, float)
        known = likelihood.initial_state
        try:
            # an input-output equation at rest is its latent model at rest; both have D
            # initial values, so the Op's signature does not change
            model = likelihood.base_model
            model, inputs, self.columns = forward_system(
                model if known is None else known.solved_model(model),
                likelihood.inputs,
                None if known is None else known.u0,
            )
        except ValueError as exc:
            raise NoForwardSolve(str(exc)) from None
        self.solver = ForwardSolver(model, self.times, inputs, **SOLVER_OPTIONS)

    def make_node(self, p, u0):
        p = pt.as_tensor_variable(p).astype("float64")
        u0 = pt.as_tensor_variable(u0).astype("float64")
        return Apply(self, [p, u0], [pt.dmatrix(), pt.dtensor3()])

    def solve(self, p: np.ndarray, u0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(U, S)`` as the Op computes them (NaN ``U`` when the solve fails)."""
        try:
            U, S = self.solver.sensitivities(p, u0)
        except SolveFailed:
            n, D, P = self._shape()
            return np.full((n, D), np.nan), np.zeros((n, D, P))
        return U[self.skip :, self.columns], S[self.skip :, self.columns]

    def solve_values(self, p: np.ndarray, u0: np.ndarray) -> np.ndarray:
        """``U`` alone (no sensitivities); raises
        :class:`~pymc_wendy.model.compiled_solve.SolveFailed`."""
        return self.solver.solve(p, u0)[self.skip :, self.columns]

    def _shape(self) -> tuple[int, int, int]:
        """``(n, D, P)``: output times, observed states, parameters plus initial values."""
        model = self.likelihood.base_model
        n = self.times.size - self.skip
        return n, self.columns.size, model.n_params + self.solver.n_initial

    def perform(self, node, inputs, outputs):
        U, S = self.solve(*inputs)
        outputs[0][0], outputs[1][0] = U, S

    def infer_shape(self, node, input_shapes):
        n, D, P = self._shape()
        return [(n, D), (n, D, P)]

    def connection_pattern(self, node):
        return [[True, False], [True, False]]

    def pullback(self, inputs, outputs, output_grads):
        _, S = outputs
        g_U, g_S = output_grads
        if not isinstance(g_S.type, DisconnectedType):
            raise NotImplementedError("the sensitivities have no gradient")
        g = pt.tensordot(g_U, S, axes=[[0, 1], [0, 1]])
        J = self.likelihood.base_model.n_params
        return [g[:J], g[J:]]


@dataclass(frozen=True)
class ForwardTerm:
    """One weak term and its forward-solve replacement in :func:`forward_model`.

    Attributes
    ----------
    name : str
        The observed variable's name (the same in both models).
    likelihood : WeakLikelihood
        The weak likelihood it replaced (data, noise model, initial state).
    op : ForwardSolution
        The solution Op of the forward term.
    initial_state : str or None
        Name of the free variable holding the initial state (a new one or the term's own
        ``initial_state`` variable); None when the initial state is known.
    new_initial_state : bool
        True when :func:`forward_model` added that variable (it is not in the weak model).
    noise_fields : tuple of str
        The observation model's variance parameters that are random variables (the weak
        term's noise input holds them: :func:`~pymc_wendy.bayes.distribution.noise_model`).
    """

    name: str
    likelihood: WeakLikelihood
    op: ForwardSolution
    initial_state: str | None
    new_initial_state: bool
    noise_fields: tuple[str, ...] = ()

    def log_likelihood(self, U: np.ndarray, noise) -> float:
        """The exact log-likelihood of the term's data given the solution ``U`` and the
        noise input's values ``noise``."""
        obs, sigma = noise_model(self.likelihood, self.noise_fields, noise)
        return obs.log_likelihood(self.likelihood.exact_U, U, sigma)


def default_initial_prior(likelihood: WeakLikelihood, size: int) -> pt.TensorVariable:
    """The default prior of an unknown initial state (module doc), as an unnamed variable:
    ``size`` companion values (a higher-order model's states and their derivatives)."""
    U, model = likelihood.exact_U, likelihood.base_model
    if max(model.orders) == 1:
        if likelihood.observation.log_scale:
            return pm.LogNormal.dist(mu=np.log(U[0]), sigma=0.5, shape=size)
        scale = 0.5 * np.std(U, axis=0)
        scale = np.where(scale > 0, scale, np.maximum(np.abs(U[0]), 1.0))
        return pm.Normal.dist(mu=U[0], sigma=scale, shape=size)
    # A state of order q and its derivatives up to q - 1 at t0, from a polynomial through
    # the first points; the k-th derivative's scale the state's spread over span^k (a
    # variation of the series' size over its span), or the estimate itself if larger.
    t = likelihood.exact_t
    mean = polynomial_start(model.orders, t, U)
    span = max(float(t[-1] - t[0]), np.finfo(float).tiny)
    spread = np.std(U, axis=0)
    spread = np.where(spread > 0, spread, np.maximum(np.abs(U[0]), 1.0))
    scale = np.array([spread[d] / span**k for d, q in enumerate(model.orders) for k in range(q)])
    scale = np.maximum(scale, np.abs(mean))
    return pm.Normal.dist(mu=mean, sigma=scale, shape=size)


def forward_model(
    model: pm.Model | None = None,
    *,
    initial_state: Mapping | pt.TensorVariable | None = None,
) -> tuple[pm.Model, list[ForwardTerm]]:
    """The forward-solve twin of a model with weak likelihood terms (module doc).

    Parameters
    ----------
    model : pm.Model, optional
        The model; default the one in context.
    initial_state : distribution or mapping, optional
        Prior of the initial state of terms without one: an unnamed distribution such as
        ``pm.Normal.dist(mu=[1, 1], sigma=0.5)`` for every such term, or a mapping from term
        names to distributions. Default: :func:`default_initial_prior`.

    Returns
    -------
    (pm.Model, list of ForwardTerm)
        The new model and what was replaced in it.

    Raises
    ------
    ValueError
        No weak term, or a higher-order term whose initial state is a model variable.
    """
    model = pm.modelcontext(model)
    fgraph, _ = fgraph_from_model(model)
    terms = []
    for out in list(fgraph.outputs):
        node = out.owner
        if not (isinstance(node.op, ModelObservedRV) and _is_weak(node.inputs[0])):
            continue
        term, new_out, u0_out = _replace_term(node, initial_state)
        if new_out.type.shape == out.type.shape:
            fgraph.replace(out, new_out, import_missing=True)
        else:  # more rows than the weak term kept (its domain): a new output in its place
            fgraph.remove_output(fgraph.outputs.index(out))
            fgraph.add_output(new_out, import_missing=True)
        if u0_out is not None:
            fgraph.add_output(u0_out, import_missing=True)
        terms.append(term)
    if not terms:
        raise NoForwardSolve("the model has no WeakODELikelihood term to replace")
    return model_from_fgraph(fgraph, mutate_fgraph=True), terms


def _is_weak(rv) -> bool:
    return rv.owner is not None and isinstance(rv.owner.op, WeakODERV)


def _replace_term(node, initial_state):
    """``(ForwardTerm, new observed output, new initial-state output or None)``."""
    rv, value = node.inputs
    name, dims = node.op.name, node.op.dims
    weak_op = rv.owner.op
    lik = weak_op.likelihood
    model = lik.base_model
    n0 = len(model.companion_states)
    _, _, p, sigma, u0 = rv.owner.inputs
    known = lik.initial_state
    u0_name, new_u0, u0_out = None, False, None
    if weak_op.free_initial:
        if n0 != model.n_states:
            raise NoForwardSolve(
                f"{name}: an initial-state variable of a model of order {max(model.orders)} "
                "has no forward solve yet (its derivatives at t0 would be needed too)"
            )
        u0_name = u0.name
    elif known is not None:
        # a known state is given in the companion layout (the state and its derivatives)
        u0 = pt.constant(known.u0, dtype="float64")
    else:
        u0_name, new_u0 = f"{name}_u0", True
        # the state dim of the term's (time, state) dims, if it has them
        u0_dims = dims[1:] if len(dims) == 2 and n0 == model.n_states else ()
        u0, u0_out = _initial_state_variable(u0_name, lik, initial_state, name, u0_dims)
    t0 = None if known is None else known.t0
    op = ForwardSolution(lik, t0)
    U, _ = op(p, u0)
    obs = observation_dist(lik, weak_op.noise_fields, U, sigma)
    if lik.exact_U.shape != lik.U.shape:  # rows outside the weak form's domain: data here
        value, dims = pt.constant(lik.exact_U, dtype="float64"), ()
    new_out = model_observed_rv(obs, value, name, *dims)
    term = ForwardTerm(name, lik, op, u0_name, new_u0, weak_op.noise_fields)
    return term, new_out, u0_out


def observation_dist(lik, fields: tuple[str, ...], U, noise) -> pt.TensorVariable:
    """The data's distribution around the solution ``U`` (an unnamed variable): the
    observation model's log-density and draws (:mod:`pymc_wendy.model.observation`) at the
    weak term's noise input ``noise`` (:func:`~pymc_wendy.bayes.distribution.noise_model`)."""

    def logp(value, U, noise):
        obs, sigma = noise_model(lik, fields, noise)
        return obs.log_density(value, U, sigma, xp=pt)

    def random(U, noise, rng=None, size=None):
        obs, sigma = noise_model(lik, fields, noise)
        return obs.draw(U if size is None else np.broadcast_to(U, size), sigma, rng)

    return pm.CustomDist.dist(U, noise, logp=logp, random=random, dtype="float64")


def _initial_state_variable(u0_name: str, lik, initial_state, term: str, dims: tuple):
    """The new initial-state variable: ``(the model variable's output, its fgraph output)``."""
    D = len(lik.base_model.companion_states)
    prior = initial_state.get(term) if isinstance(initial_state, Mapping) else initial_state
    if prior is None:
        prior = default_initial_prior(lik, D)
    if not (isinstance(prior, pt.TensorVariable) and prior.owner is not None):
        raise TypeError(
            f"the initial-state prior of {term} must be an unnamed distribution such as "
            f"pm.Normal.dist(mu=..., sigma=..., shape={D}); got {prior!r}"
        )
    if prior.type.ndim != 1 or prior.type.shape[0] not in (None, D):
        raise ValueError(f"the initial-state prior of {term} must have shape ({D},)")
    transform = _default_transform(prior.owner.op, prior)
    value = prior.type(name=u0_name if transform is None else f"{u0_name}_{transform.name}__")
    out = model_free_rv(prior, value, transform, u0_name, *dims)
    return out, out
