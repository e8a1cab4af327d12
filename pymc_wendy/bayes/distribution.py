r"""``WeakODELikelihood``: the weak-form ODE likelihood as an observed PyMC distribution.

Inside ``pm.Model()``::

    with pm.Model(coords={"param": ode.params}) as model:
        p = pm.Normal("p", 0, 10, dims="param")
        pmw.WeakODELikelihood("U", ode=ode, params=p, t=t, observed=U)
        idata = pm.sample()

The log-density of the observed data is the WENDy-MLE weak log-likelihood ``-l(p)``
(:class:`pymc_wendy.backends.op.WeakLogLikelihoodOp`); the test functions, the data-side terms and,
for models linear in the parameters, the covariance coefficients are fixed when the variable
is created, which is why the data must be a plain array (no ``pm.Data`` container whose
value could later change).

Random draws (prior and posterior predictive) solve the ODE from the drawn parameters and an
initial state and add noise of the chosen model, so they are draws of the data, not of the
weak residual. See ``docs/pymc.md`` for the statistical meaning of each ``sigma`` option and of
the initial state.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import pickle
import warnings
import weakref
from collections.abc import Mapping, Sequence

import numba
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.distribution import Distribution
from pymc.logprob.abstract import _logprob
from pytensor.graph.basic import Constant, Variable
from pytensor.link.numba.dispatch.basic import numba_njit
from pytensor.link.numba.dispatch.random import numba_core_rv_funcify
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.op import RandomVariable

from pymc_wendy.backends.op import noise_scale_vector, weak_loglik
from pymc_wendy.estimators.oels import estimate_initial_state
from pymc_wendy.estimators.output_error import DEFAULT_SOLVER
from pymc_wendy.model.data import time_labels
from pymc_wendy.model.input_output import forward_system
from pymc_wendy.model.observation import as_observation
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.simulate import SimulationError, solve
from pymc_wendy.weak.likelihood import (
    SHORT_SERIES,
    Noise,
    ShortSeriesWarning,
    WeakLikelihood,
    free_initial_refusal,
    warn_filter_fallback,
)

__all__ = ["WeakODELikelihood", "estimate_initial_state"]

#: Solver options of predictive draws: output error's, at rtol 1e-6. The trajectories are
#: compared with noisy data; their error (about 1e-5 of the trajectory on FitzHugh-Nagumo)
#: is far below any noise level, and 200 draws take 40 % less time than at 1e-7.
PREDICTIVE_SOLVER: dict = {**DEFAULT_SOLVER, "rtol": 1e-6, "atol": 1e-8}


class WeakODERV(RandomVariable):
    """Random variable behind :class:`WeakODELikelihood`: data simulated from the ODE.

    Parameters (``dist_params``) are the parameter vector ``p`` (J,), the noise input (the
    noise scale per state (D,), or with ``noise_fields`` the observation model's variance
    parameters that are random variables, D values each: :func:`noise_model`) and the
    initial state (``len(model.companion_states)``: D for a first-order model); a draw has
    shape (M+1, D).
    """

    name = "weak_ode"
    signature = "(j),(s),(c)->(m,d)"
    dtype = "floatX"
    _print_name = ("WeakODE", "\\operatorname{WeakODE}")
    __props__ = (
        "name", "signature", "dtype", "inplace", "likelihood", "infer_sigma", "solver",
        "free_initial", "noise_fields",
    )  # fmt: skip

    def __init__(
        self,
        likelihood: WeakLikelihood,
        infer_sigma: bool,
        solver: tuple = (),
        free_initial: bool = False,
        noise_fields: tuple[str, ...] = (),
        **kwargs,
    ):
        self.likelihood = likelihood
        self.infer_sigma = bool(infer_sigma)
        self.noise_fields = tuple(noise_fields)
        self.solver = tuple(solver)
        # the u0 parameter is the initial state at t0, with a prior (not only for draws)
        self.free_initial = bool(free_initial)
        super().__init__(**kwargs)

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (self.likelihood.t.size, self.likelihood.model.n_states)

    def trajectory(self, p: np.ndarray, u0: np.ndarray) -> np.ndarray:
        """Noise-free solution at the data times, or NaN (with a warning) if the solve fails.

        A NaN ``u0`` stands for "estimate it": :func:`estimate_initial_state`, computed once.
        """
        lik = self.likelihood
        model = lik.base_model
        times, skip = lik.t, 0
        if lik.initial_state is not None:  # solve from the known state (or the drawn one)
            model = lik.initial_state.solved_model(model)
            if not self.free_initial:
                u0 = lik.initial_state.u0
            if lik.initial_state.t0 < lik.t[0]:
                times, skip = np.concatenate([[lik.initial_state.t0], lik.t]), 1
        elif np.any(np.isnan(u0)):
            if getattr(self, "_u0", None) is None:
                self._u0 = estimate_initial_state(lik, solver=dict(self.solver))
            u0 = self._u0
        try:
            system, inputs, columns = forward_system(model, lik.inputs, u0)
            U = solve(system, p, u0, times, inputs=inputs or None, **dict(self.solver))
            return U[skip:, columns]
        except (SimulationError, ValueError) as exc:
            warnings.warn(
                f"predictive draw: the ODE solve failed for p = {np.array2string(p, precision=4)}"
                f" ({exc}); the draw is NaN",
                RuntimeWarning,
                stacklevel=2,
            )
            return np.full((lik.t.size, lik.model.n_states), np.nan)

    def rng_fn(self, rng, p, sigma, u0, size):
        lik = self.likelihood
        M1, D = lik.t.size, lik.model.n_states
        batch = np.broadcast_shapes(p.shape[:-1], sigma.shape[:-1], u0.shape[:-1])
        if size is not None:
            batch = tuple(size)
        p, sigma, u0 = (np.broadcast_to(a, (*batch, a.shape[-1])) for a in (p, sigma, u0))
        out = np.empty((*batch, M1, D))
        for idx in np.ndindex(*batch):
            out[idx] = self.draw(p[idx], sigma[idx], u0[idx], rng)
        return out

    def draw(self, p, sigma, u0, rng: np.random.Generator) -> np.ndarray:
        """One data set drawn around the solution at ``(p, u0)`` (the observation model's
        draws, :mod:`pymc_wendy.model.observation`)."""
        obs, sigma = noise_model(self.likelihood, self.noise_fields, sigma)
        return obs.draw(self.trajectory(p, u0), sigma, rng)


def noise_model(lik: WeakLikelihood, fields: tuple[str, ...], values):
    """``(observation model, sigma)`` of a weak term's noise input ``values`` (numbers or a
    tensor): the likelihood's model and the noise level itself, or (``fields`` given: its
    variance parameters that are random variables) the model with those filled in, and 1."""
    if not fields:
        return lik.observation, values
    return lik.observation_given.filled(fields, values, lik.U.shape[1]), 1.0


#: the ops whose predictive draws the compiled draw functions call back, by fingerprint
_DRAWING: weakref.WeakValueDictionary[int, WeakODERV] = weakref.WeakValueDictionary()


def _draw_of(key: int, p: np.ndarray, sigma: np.ndarray, u0: np.ndarray, seed: int):
    draw = _DRAWING[key].draw(p, sigma, u0, np.random.default_rng(seed))
    return np.ascontiguousarray(draw, dtype=np.float64)


@numba_core_rv_funcify.register(WeakODERV)
def _numba_core_weak_ode(op, node):
    # The ODE solve is scipy's, called through an explicit object-mode block: predictive
    # sampling is not a hot path, and the random numbers stay on numba's generator.
    # The block calls a module-level function with a fingerprint of what a draw depends on
    # (the model's equations, the data, times, inputs, initial state and solver options),
    # not the op's method: numba pickles what an object-mode block closes over and unpickles
    # it at every call, which for the op (its likelihood's arrays) cost 60 ms per draw, ten
    # times the solve. The fingerprint is also the cache key, so that pytensor keeps the
    # compiled function (several seconds of compilation) for every later call with the same
    # model and data, in this process or another; no fingerprint (inputs that do not
    # pickle), no caching.
    key = _fingerprint(op)
    _DRAWING[id(op) if key is None else key] = op
    return _draw_function(op, id(op) if key is None else key), key


def _fingerprint(op: WeakODERV) -> int | None:
    lik = op.likelihood
    model = lik.base_model  # its repr holds the equations, states and orders
    known = lik.initial_state
    try:
        parts = pickle.dumps(
            (
                _FINGERPRINT_VERSION, repr(model), model.params, model.inputs,
                model.observed_columns,
                lik.t, lik.U, lik.observation, lik.inputs, op.solver, op.free_initial,
                op.noise_fields,
                None if known is None else (known.t0, known.u0),
            )
        )  # fmt: skip
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
    return int(hashlib.sha256(parts).hexdigest()[:15], 16)


#: bump when what a predictive draw computes changes, so that cached draw functions go
_FINGERPRINT_VERSION = 4


def _draw_function(op: WeakODERV, key: int):
    # numba's generator seeds the observation model's numpy draws: one description of the
    # noise for every path, and draws reproducible from the sampler's random state. A seed
    # from ``random()``, not ``integers()``, whose bounded draw took 1.6 s to compile cold.
    @numba_njit
    def weak_ode_draw(rng, p, sigma, u0):
        seed = np.int64(rng.random() * 2.0**53)
        with numba.objmode(U="float64[:, :]"):
            U = _draw_of(key, np.asarray(p), np.asarray(sigma), np.asarray(u0), seed)
        return U

    return weak_ode_draw


def _observed_data(observed):
    """The data of ``WeakODELikelihood(observed=...)``, or a clear error."""
    if observed is None:
        raise TypeError(
            "WeakODELikelihood needs observed data: the weak likelihood is built from them "
            "(use pymc_wendy.simulate to generate data)"
        )
    if isinstance(observed, Variable):
        if not isinstance(observed, Constant):
            raise TypeError(
                "observed must be a fixed array, not a pm.Data or symbolic variable: the "
                "test functions and covariance are built from the data when the variable "
                "is created"
            )
        return observed.data
    if isinstance(observed, list | tuple) and any(np.ndim(x) >= 2 for x in observed):
        raise ValueError(
            f"observed is a list of {len(observed)} data sets: give each experiment its own "
            "WeakODELikelihood term (with its own t; the terms share params), as in "
            "docs/experiments.md"
        )
    return observed


def _default_dims(name: str, likelihood: WeakLikelihood) -> tuple[str, str]:
    """Dims of an observed term from its data: ``{name}_time`` (the kept time points, as
    given: numbers or datetimes) and ``state`` (the model's state names), each shared with
    the model's coordinate of the plain name (``time``, ``state``) where that holds the same
    values; ``state`` is created if missing, ``{name}_state`` used if it differs."""
    model = pm.modelcontext(None)
    times = time_labels(likelihood.observed)
    states = list(likelihood.base_model.states)
    if len(states) != likelihood.U.shape[1]:
        states = list(range(likelihood.U.shape[1]))
    dims = []
    for dim, values in ((f"{name}_time", times), (f"{name}_state", states)):
        shared = dim.removeprefix(f"{name}_")
        have = model.coords.get(shared)
        if have is not None and np.array_equal(np.asarray(have), np.asarray(values)):
            dims.append(shared)
            continue
        if have is None and shared == "state":
            model.add_coord(shared, values)
            dims.append(shared)
            continue
        if dim not in model.coords:
            model.add_coord(dim, values)
        dims.append(dim)
    return tuple(dims)


class WeakODELikelihood(Distribution):
    r"""Observed noisy ODE trajectories with the weak-form (WENDy-MLE) likelihood.

    Parameters
    ----------
    name : str
        Variable name.
    ode : ODEModel
        The ODE ``du/dt = f(t, u, p)``.
    params : tensor of shape (J,) or sequence of J scalars
        The parameters, in the order of ``ode.params`` (random variables, or constants).
    t : array, shape (M+1,), optional
        Strictly increasing sample times (numbers, datetimes or durations); optional when
        ``observed`` carries them (a DataFrame's index, a DataArray's time coordinate).
    observed : array, shape (M+1, D), DataFrame, DataArray or masked array
        The data (required: the likelihood is built from them). Labelled columns or dims are
        matched to the model's states by name; time points with missing (NaN or masked)
        entries are left out, so the observed variable holds the kept rows.
    sigma : None, "filter", "residual", float, array of shape (D,), or tensor
        Noise standard deviation per state (of ``log U`` for log-normal noise).
        ``None``: estimated once and then treated as known: by the high-order filter
        (WENDy) on series of 64 points or more, as with ``"residual"`` on shorter ones (the
        filter's estimate if the forward solve fails, with a warning). For a model nonlinear
        in its parameters that fit starts from the priors of ``params``: the best of weak
        least squares from the model's initial point and 16 prior draws.
        ``"filter"``: the filter's estimate whatever the length.
        ``"residual"``: estimated once from the residuals of the ODE solution at the
        WENDy-MLE (:func:`~pymc_wendy.estimators.output_error.residual_noise`, as ``fit(...,
        sigma="residual")``) and then treated as known: the better choice for short series
        and forced models (``docs/data.md``, ``docs/higher_order.md``).
        A number or array: known. A random variable (or any symbolic tensor, scalar or (D,)):
        inferred jointly with ``params``; the gradient with respect to it is analytic.
    noise : str or Observation
        The observation model (:mod:`pymc_wendy.model.observation`): ``"normal"`` (additive
        Gaussian), ``"lognormal"``, ``"proportional"``, ``pw.Combined(a, b)``, ``"poisson"``,
        ``pw.NegativeBinomial(alpha)``. ``sigma`` is the noise level of the first three;
        the others carry their parameters (estimated from the data when left None).
    u0 : None, array of shape (D,), or tensor
        Initial state used only for predictive draws (the weak likelihood does not depend on
        it). ``None``: :func:`estimate_initial_state` (fitted once, on the first draw). For a
        model of order > 1 the states and their derivatives (``ode.companion_states``).
        Ignored when ``initial_state`` is given (draws then solve from it).
    initial_state, t0
        The state at ``t0`` (a number; default the first time point), used by the weak
        likelihood through boundary test functions (:class:`pymc_wendy.WeakLikelihood`):
        numbers for a state known exactly, or a tensor (D,) for one with a prior (a random
        variable; first-order models without inputs). The likelihood is then differentiable
        in it, and predictive draws solve from it.
    inputs : mapping, optional
        Values of the model's known inputs (see :class:`pymc_wendy.WeakLikelihood`).
    test_functions, ridge, linear, max_precompute_bytes, time_unit
        Passed to :class:`pymc_wendy.WeakLikelihood`.
    solver : dict, optional
        Options for the ODE solves of predictive draws (:func:`pymc_wendy.solve`); defaults
        :data:`PREDICTIVE_SOLVER`.
    bias_correction : None, {"auto", "analytic", "profile"}, or FitResult
        Replace the weak likelihood by the bias-corrected objective of :mod:`pymc_wendy.weak.bias`
        (``docs/bias.md``), so that NUTS, ``find_MAP``, SMC and :func:`sample_sft` see it. A
        name runs ``pymc_wendy.fit(..., bias_correction=name)`` on the data (default start and
        no bounds; for models nonlinear in the parameters pass a ready fit instead); a
        bias-corrected :class:`FitResult` of these data is used as it is. Needs ``sigma``
        fixed (``None`` or numbers): the corrected objective has no normaliser in ``sigma``.
    **kwargs
        ``dims``, ``rng`` and the other arguments of :class:`pymc.Distribution`.
    """

    rv_type = WeakODERV

    def __new__(
        cls,
        name: str,
        *,
        ode: ODEModel,
        params,
        t=None,
        observed=None,
        sigma=None,
        noise: Noise = "normal",
        u0=None,
        test_functions=None,
        ridge: float = 1e-10,
        linear: str = "auto",
        max_precompute_bytes: int = 256 * 2**20,
        solver: Mapping | None = None,
        bias_correction=None,
        inputs=None,
        time_unit: str | None = None,
        initial_state=None,
        t0=None,
        **kwargs,
    ):
        observed = _observed_data(observed)
        if _is_symbolic(t0):
            raise TypeError("t0 must be a number (the time of the initial state)")
        free_initial = _is_symbolic(initial_state)
        noise, symbolic = _noise_variables(noise, sigma, free_initial, bias_correction)
        known = {"initial_state": initial_state, "t0": t0}
        options = (ode, t, observed, sigma, noise, test_functions, ridge, linear)
        options += (max_precompute_bytes, inputs, time_unit)
        start = None
        # a nonlinear model's short-series noise estimate starts its fit from the priors
        options += (functools.partial(_prior_start, params),)
        if free_initial:
            known["initial_state"] = _placeholder_state(ode, initial_state, noise)
            if bias_correction is not None:
                raise ValueError("bias_correction does not take an initial state with a prior")
            # the noise level and the starting fit from the data alone: a fit with the
            # placeholder state would take it as known
            start = _likelihood(*options)
            if not _is_symbolic(sigma):
                options = (*options[:3], start.sigma, *options[4:])
        with warnings.catch_warnings():
            if symbolic:  # the moment estimates are only a start for the variables
                warnings.simplefilter("ignore", ShortSeriesWarning)
            likelihood = _likelihood(*options, known)
        if symbolic:
            sigma = _noise_vector(symbolic, likelihood)
        if free_initial:
            likelihood.check_free_initial()
            u0 = initial_state
        if bias_correction is not None:
            if _is_symbolic(sigma):
                raise ValueError(
                    "bias_correction needs a fixed noise level (sigma=None or numbers): the "
                    "corrected objective has no normaliser in sigma, so sigma cannot be a "
                    "random variable"
                )
            likelihood = _corrected(likelihood, bias_correction)
        if not kwargs.keys() & {"dims", "shape", "size"}:
            kwargs["dims"] = _default_dims(name, likelihood)
        rv = super().__new__(
            cls,
            name,
            likelihood=likelihood,
            params=params,
            sigma=sigma,
            u0=u0,
            solver=solver,
            observed=likelihood.U,
            free_initial=free_initial,
            noise_fields=tuple(symbolic),
            **kwargs,
        )
        # what pymc_wendy.initial_values needs to map the WENDy estimate to model variables
        rv.tag.wendy = (likelihood if start is None else start, params, None if symbolic else sigma)
        rv.tag.wendy_noise = (likelihood, symbolic)  # and the variance parameters' estimates
        return rv

    @classmethod
    def dist(
        cls,
        *,
        likelihood: WeakLikelihood,
        params,
        sigma=None,
        u0=None,
        solver: Mapping | None = None,
        size=None,
        shape=None,
        return_next_rng: bool = False,
        free_initial: bool = False,
        noise_fields: tuple[str, ...] = (),
        **kwargs,
    ):
        """An unregistered variable for a ready :class:`WeakLikelihood` (see the class doc;
        ``free_initial``: ``u0`` is the initial state at ``t0`` with a prior, which replaces
        the likelihood's known one; ``noise_fields``: ``sigma`` holds the observation model's
        variance parameters of these names, D values each, not a noise level)."""
        if not isinstance(likelihood, WeakLikelihood):
            raise TypeError(f"likelihood must be a WeakLikelihood; got {type(likelihood)!r}")
        model = likelihood.base_model
        M1, D = likelihood.t.size, model.n_states
        if shape is not None and _static_shape(shape) not in (None, (M1, D)):
            raise ValueError(
                f"the data have shape {(M1, D)} (time points x states) but shape {tuple(shape)} "
                "was requested; batches of data sets are not supported"
            )
        if size not in (None, ()):
            raise ValueError("size is not supported: one WeakODELikelihood per data set")
        p = _params_vector(params, model)
        infer_sigma = _is_symbolic(sigma) and not noise_fields
        if noise_fields:
            sig = pt.as_tensor_variable(sigma).astype("float64")
            n = len(noise_fields) * likelihood.U.shape[1]
            if sig.type.ndim != 1 or sig.type.shape[0] not in (None, n):
                raise ValueError(f"the noise parameters must be a vector of {n}; got {sig.type}")
        elif infer_sigma and not likelihood.observation.scaled:
            raise ValueError(
                f"{likelihood.noise} noise has no noise level to infer (its variance follows "
                "from the solution and the model's own parameters); leave sigma unset"
            )
        if infer_sigma:
            sig = noise_scale_vector(sigma, D)
        elif not noise_fields:
            sig = pt.constant(likelihood.sigma, dtype="float64")
        n0 = len(model.companion_states)
        if u0 is None:
            u0 = np.full(n0, np.nan)  # estimated on the first draw (see trajectory)
        u0 = pt.as_tensor_variable(u0).astype("float64")
        if u0.type.ndim != 1 or u0.type.shape[0] not in (None, n0):
            raise ValueError(
                f"u0 must have {n0} entries (one per state"
                f"{' and derivative: ' + str(list(model.companion_states)) if n0 > D else ''}"
                f"); got {u0.type}"
            )
        solver_items = tuple(sorted({**PREDICTIVE_SOLVER, **(solver or {})}.items()))
        op = WeakODERV(
            likelihood=likelihood, infer_sigma=infer_sigma, solver=solver_items,
            free_initial=free_initial, noise_fields=tuple(noise_fields),
        )  # fmt: skip
        kwargs.setdefault("rng", pt.random.shared_rng(seed=None))
        next_rng, rv = op(p, sig, u0, return_next_rng=True, **kwargs)
        return (next_rng, rv) if return_next_rng else rv


@_logprob.register(WeakODERV)
def _weak_ode_logp(op, values, rng, size, p, sigma, u0, **kwargs):
    [value] = values
    lik = op.likelihood
    if isinstance(value, Constant) and value.data.shape != lik.U.shape:
        raise ValueError(
            f"the value has shape {value.data.shape}; the likelihood was built for {lik.U.shape}"
        )
    if op.noise_fields:
        return weak_loglik(lik, p, noise=noise_model(lik, op.noise_fields, sigma)[0])
    x0 = None
    if op.free_initial:
        x0 = pt.log(u0) if lik.observation.log_scale else u0
    return weak_loglik(lik, p, sigma if op.infer_sigma else None, x0=x0)


def _noise_variables(noise, sigma, free_initial: bool, bias_correction):
    """``(noise to build the likelihood with, {field: random variable})``: an observation
    model whose variance parameters are random variables is built with them estimated
    (moments: the start and the covariance's scale), and the variables enter the weak
    likelihood entry by entry (:func:`~pymc_wendy.backends.op.weak_loglik`)."""
    obs = as_observation(noise, symbolic=True)
    fields = obs.symbolic_parameters()
    if not fields:
        return noise, {}
    what = f"{obs.name} noise with {', '.join(fields)} a random variable"
    if sigma is not None:
        raise ValueError(f"{what} has no noise level sigma; leave sigma unset")
    if free_initial or bias_correction is not None:
        raise ValueError(
            f"{what} does not yet take an initial state with a prior or a bias correction"
        )
    values = {f: getattr(obs, f) for f in fields}
    return dataclasses.replace(obs, **dict.fromkeys(fields)), values


def _noise_vector(symbolic: dict, lik: WeakLikelihood) -> pt.TensorVariable:
    """The variance parameters that are variables as one vector, D values each (the layout
    of :func:`noise_model`), or a clear error for a shape other than a scalar or D."""
    D = lik.U.shape[1]
    parts = []
    for field, value in symbolic.items():
        v = pt.as_tensor_variable(value).astype("float64")
        if v.type.ndim > 1 or (v.type.ndim == 1 and v.type.shape[0] not in (None, 1, D)):
            raise ValueError(
                f"{lik.noise} noise: {field} must be a scalar or a vector of {D} (one per "
                f"observed state); got {v.type}"
            )
        parts.append(pt.broadcast_to(v, (D,)))
    return pt.concatenate(parts)


def _likelihood(
    ode, t, observed, sigma, noise, test_functions, ridge, linear, budget, inputs, time_unit=None,
    p0_from=None, known=None,
):  # fmt: skip
    """The weak likelihood of the data, its noise level as ``sigma`` says (class doc);
    ``p0_from(lik)``: where WENDy-MLE starts for the forward-residual noise estimate of a model
    nonlinear in its parameters (None: ``pw.fit``'s rules, which need a box or ``p0``)."""
    if not isinstance(ode, ODEModel):
        raise TypeError(f"ode must be an ODEModel; got {type(ode)!r}")
    if isinstance(sigma, str) and sigma not in ("residual", "filter"):
        raise ValueError(
            f"sigma must be a number, an array, a tensor, None, 'filter' or 'residual'; got "
            f"{sigma!r}"
        )
    if isinstance(sigma, str) and sigma == "filter":
        sigma, auto = None, False
    else:
        auto = sigma is None
    residual = isinstance(sigma, str)

    def build(s):
        return WeakLikelihood(
            ode, t, observed, noise=noise, sigma=s, test_functions=test_functions, ridge=ridge,
            linear=linear, max_precompute_bytes=budget, inputs=inputs, time_unit=time_unit,
            **(known or {}),
        )  # fmt: skip

    with warnings.catch_warnings():
        # the filter's noise level is only a start; counts and combined errors keep the
        # filter's variance parameters, and its warning
        if (_is_symbolic(sigma) or residual or auto) and as_observation(noise).scaled:
            warnings.simplefilter("ignore", ShortSeriesWarning)
        lik = build(None if _is_symbolic(sigma) or residual else sigma)
    if auto and (lik.t.size >= SHORT_SERIES or not lik.weak_observation.scaled):
        return lik  # (counts and combined errors have no noise level to estimate)
    if residual and not lik.weak_observation.scaled:
        raise ValueError(f"sigma='residual': {lik.noise} noise has no noise level to estimate")
    if residual or auto:  # the noise of the forward residuals at the WENDy-MLE
        from pymc_wendy.estimators import fit
        from pymc_wendy.estimators.output_error import residual_noise

        try:
            p0 = None if p0_from is None or lik.base_model.is_linear_in_params else p0_from(lik)
            s = residual_noise(lik, fit(lik, p0=p0).x, solver=None).sigma
        except SimulationError as exc:
            if not auto:
                raise
            warn_filter_fallback(lik.t.size, exc, stacklevel=4)
            return lik
        lik = build(s)
    return lik


def _prior_start(params, lik: WeakLikelihood) -> np.ndarray:
    """WENDy-MLE's start from the priors of ``params`` in the model in context: the best
    weak least-squares fit from prior draws (:mod:`pymc_wendy.bayes.starts`)."""
    from pymc_wendy.bayes.starts import initial_params, screened_start

    vector = _params_vector(params, lik.base_model)
    return screened_start(lik, initial_params(pm.modelcontext(None), vector), vector)


def _corrected(lik: WeakLikelihood, bias_correction) -> WeakLikelihood:
    """The bias-corrected objective for ``lik`` from a method name or a corrected fit."""
    from pymc_wendy.estimators import fit
    from pymc_wendy.estimators.results import FitResult

    if isinstance(bias_correction, FitResult):
        res = bias_correction
        if res.bias_correction is None:
            raise ValueError("bias_correction: the FitResult given is not bias-corrected")
        clik = res.likelihood
        same = (
            clik.U.shape == lik.U.shape
            and np.array_equal(clik.U, lik.U)
            and np.array_equal(clik.t, lik.t)
            and clik.noise == lik.noise
        )
        if not same:
            raise ValueError(
                "bias_correction: the FitResult was fitted to other data (t, observed or "
                "noise differ)"
            )
        if not np.allclose(clik.sigma, lik.sigma, rtol=1e-12, atol=0.0):
            raise ValueError(
                f"bias_correction: the fit used sigma {clik.sigma}, this likelihood "
                f"{lik.sigma}; pass the same sigma (or None for both)"
            )
        return clik
    res = fit(lik, bias_correction=bias_correction)
    return res.likelihood


def _placeholder_state(ode: ODEModel, initial_state, noise) -> np.ndarray:
    """Numbers to build the likelihood with where the initial state has a prior (its row
    is replaced at every evaluation); a clear error for what that does not cover."""
    refusal = free_initial_refusal(ode)
    if refusal is not None:
        raise ValueError(refusal)
    x = pt.as_tensor_variable(initial_state)
    D = ode.n_states
    if x.type.ndim != 1 or x.type.shape[0] not in (None, D):
        raise ValueError(f"initial_state must have {D} entries (one per state); got {x.type}")
    # positive for log-normal noise, whose weak form works on log u0
    return np.ones(D) if as_observation(noise).log_scale else np.zeros(D)


def _static_shape(shape) -> tuple[int, ...] | None:
    """``shape`` as integers, or None when some entry is symbolic (dims from coords)."""
    try:
        return tuple(int(pt.get_underlying_scalar_constant_value(s)) for s in shape)
    except (TypeError, ValueError, NotScalarConstantError):
        return None


def _is_symbolic(x) -> bool:
    return isinstance(x, Variable) and not isinstance(x, Constant)


def _params_vector(params, model: ODEModel) -> pt.TensorVariable:
    J = model.n_params
    if isinstance(params, Sequence) and not isinstance(params, str):
        if len(params) != J:
            raise ValueError(
                f"the ODE has {J} parameters {list(model.params)} but {len(params)} were given"
            )
        items = [pt.as_tensor_variable(x).astype("float64") for x in params]
        for name, x in zip(model.params, items, strict=True):
            if x.type.ndim != 0:
                raise ValueError(f"parameter {name!r} must be a scalar; got {x.type}")
        return pt.stack(items)
    if isinstance(params, str):
        raise TypeError(
            f"params must be a tensor (a vector of the {J} parameters) or a list of scalars; "
            f"got the string {params!r}: pass the variable itself (e.g. model[{params!r}])"
        )
    p = pt.as_tensor_variable(params).astype("float64")
    if p.type.ndim != 1 or p.type.shape[0] not in (None, J):
        raise ValueError(
            f"params must be a vector of the {J} parameters {list(model.params)} or a list of "
            f"scalars; got {p.type}"
        )
    return p
