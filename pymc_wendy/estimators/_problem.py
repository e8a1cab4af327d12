"""The problem an estimator solves: :func:`~pymc_wendy.fit`'s inputs, validated once.

The data, bounds, starting point and options are checked here, before any work, and handed
to the estimator as a :class:`FitProblem`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from pymc_wendy._validation import check_data, check_positive_data
from pymc_wendy.estimators.registry import Estimator, get, names
from pymc_wendy.estimators.results import FitResult
from pymc_wendy.model.data import InitialState, as_data
from pymc_wendy.model.doses import jump_times
from pymc_wendy.model.inputs import as_inputs
from pymc_wendy.model.observation import Normal, as_observation
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak.joint import JointLikelihood
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.likelihood import WeakLikelihood
from pymc_wendy.weak.noise import estimate_noise
from pymc_wendy.weak.protocol import Likelihood
from pymc_wendy.weak.test_functions import TestFunctions
from pymc_wendy.weak.test_functions.quadrature import segments

# Option names checked by kind whichever estimator accepts them
_COUNTS = {"maxiter", "max_iter", "max_nfev", "n_steps"}
_TOLERANCES = {"tol", "gtol", "xtol", "ftol", "sw_tol", "barrier_tol"}
_FLAGS = {"warm_start", "fit_u0", "update_variance", "qml_start", "profile_ci"}


@dataclass
class FitProblem:
    """Validated inputs of one :func:`~pymc_wendy.fit` call, as an estimator sees them.

    ``likelihood`` is the weak likelihood (or joint likelihood of several experiments); it
    is None for estimators that do not need one when the user passed a model and data.
    ``t``, ``U`` and ``sigma`` are tuples / (E, D) arrays for several experiments.
    ``p0`` is the user's starting point (validated) or None.
    """

    method: str
    model: ODEModel
    likelihood: Likelihood | None
    t: np.ndarray | tuple
    U: np.ndarray | tuple
    noise: str
    sigma: np.ndarray
    sigma_estimated: bool
    bounds: tuple[np.ndarray, np.ndarray] | None
    p0: np.ndarray | None
    u0: np.ndarray | None
    ridge: float
    options: dict
    n_starts: int = 1
    seed: int | None = None
    executor: Executor | None = None
    solver: Mapping | None = None
    bias_correction: str | None = None
    #: ``p0``, or the default start where the estimator needs one (set by ``fit``)
    start: np.ndarray | None = None
    #: further default starts the MLE also runs from, keeping the lowest NLL (set by
    #: ``fit`` with the default start: :func:`~pymc_wendy.estimators.wls.default_starts`)
    runner_ups: tuple = ()
    #: validated known inputs (name -> Input); a tuple of them for several experiments
    inputs: dict | tuple = ()
    #: the known initial state (:class:`~pymc_wendy.model.data.InitialState`) or None
    initial_state: InitialState | None = None
    #: the forward check of a weak-form estimate, ``check(res) -> (entry, failure)``
    #: (``failure``: ``"forward_misfit"``, ``"overconfident"`` or None); set by ``fit`` for
    #: one experiment of an ODE model, None otherwise
    check: Callable[[FitResult], tuple[dict, str | None]] | None = None

    @property
    def several(self) -> bool:
        """Whether the data are several experiments."""
        return isinstance(self.t, tuple)

    def weak_likelihood(self) -> Likelihood:
        """``likelihood``, or one built from the data with default test functions (a
        start for output error, which needs no weak likelihood otherwise)."""
        if self.likelihood is not None:
            return self.likelihood
        if self.several:
            return _joint_likelihood(
                self.model, self.t, self.U, self.noise, list(self.sigma), None, self.ridge,
                list(self.inputs) or None,
            )  # fmt: skip
        return WeakLikelihood(
            self.model, self.t, self.U, noise=self.noise, sigma=self.sigma, ridge=self.ridge,
            inputs=self.inputs or None,
        )  # fmt: skip

    def common(self) -> dict:
        """The fields every :class:`~.results.FitResult` of this problem shares."""
        return {
            "model": self.model,
            "sigma": np.asarray(self.sigma, dtype=float),
            "sigma_estimated": bool(self.sigma_estimated),
            "noise": self.noise,
            "t": self.t,
            "U": self.U,
            "likelihood": self.likelihood,
            "inputs": self.inputs,
        }


def prepare(
    estimator: Estimator, model, t, U, *, p0, bounds, noise, sigma, u0, test_functions, ridge,
    n_starts, seed, executor, solver, options, bias_correction, inputs=None, time_unit=None,
    initial_state=None, t0=None,
) -> FitProblem:  # fmt: skip
    """Validate ``fit``'s inputs for ``estimator`` and build its :class:`FitProblem`."""
    options = dict(options or {})
    check_options(estimator, options)
    ode = model if isinstance(model, ODEModel) else getattr(model, "base_model", None)
    if getattr(ode, "has_operator_terms", False) and not estimator.operator_models:
        supported = [e for e in names() if get(e).operator_models]
        raise ValueError(
            f"method {estimator.name!r} does not support models of order > 1 or with inputs "
            f"({ode.name}); use one of {supported}"
        )
    known = {"initial_state": initial_state, "t0": t0}
    if initial_state is not None and not estimator.initial_state:
        supported = [e for e in names() if get(e).initial_state]
        raise ValueError(
            f"initial_state is used by the weak-likelihood estimators {supported}; method "
            f"{estimator.name!r} would ignore it"
        )
    # a known initial state is read against the data by the weak likelihood
    if initial_state is None and _data_only_estimator(estimator, model, noise):
        if not isinstance(model, ODEModel):
            raise TypeError(f"model must be an ODEModel or a WeakLikelihood; got {model!r}")
        lik = None
        noise = _forward_noise(noise, estimator.name)
        t_, U_, s, s_est, inputs_ = _data_only(model, t, U, noise, sigma, inputs, time_unit)
        base = model
    else:
        lik = _likelihood_of(
            model, t, U, noise, sigma, test_functions, ridge, inputs, time_unit, **known
        )
        base, t_, U_ = lik.base_model, lik.t, lik.U
        s, s_est, noise = lik.sigma, lik.sigma_estimated, lik.noise
        liks = lik.experiments if lik.experiments != (lik,) else None
        inputs_ = tuple(e.inputs for e in liks) if liks else lik.inputs
    box = _check_bounds(bounds, base.n_params, base.params)
    p_given = _check_p0(p0, base.n_params, base.params, box)
    return FitProblem(
        method=estimator.name,
        model=base,
        likelihood=lik,
        t=t_,
        U=U_,
        noise=noise,
        sigma=np.asarray(s, dtype=float),
        sigma_estimated=bool(s_est),
        bounds=box,
        p0=p_given,
        start=p_given,
        u0=u0,
        ridge=ridge,
        options=options,
        n_starts=n_starts,
        seed=seed,
        executor=executor,
        solver=solver,
        bias_correction=bias_correction,
        inputs=inputs_,
        initial_state=None if lik is None else getattr(lik, "initial_state", None),
    )


def _data_only(model: ODEModel, t, U, noise, sigma, inputs, time_unit):
    """``(t, U, sigma, sigma_estimated, inputs)`` for estimators without a weak likelihood;
    tuples (and an (E, D) ``sigma``) for several experiments."""
    t = _times_for(t, U)
    if not _several(t, U):
        return _checked_data(model, t, U, noise, sigma, time_unit, inputs)
    E = len(t)
    sigmas = _per_experiment(sigma, E, "sigma", _is_scalar)
    forcing = _per_experiment(inputs, E, "inputs", lambda v: not isinstance(v, list | tuple))
    parts = [
        _checked_data(model, t[e], U[e], noise, sigmas[e], time_unit, forcing[e]) for e in range(E)
    ]
    return (
        tuple(p[0] for p in parts),
        tuple(p[1] for p in parts),
        np.array([p[2] for p in parts]),
        any(p[3] for p in parts),
        tuple(p[4] for p in parts),
    )


def check_options(estimator: Estimator, options: Mapping, where: str = "options") -> None:
    """Unknown option names and invalid counts, tolerances or flags, before any work."""
    if estimator.check_options is not None:  # its own rules first (a scheme, nested options)
        estimator.check_options(options, where)
    known = estimator.options
    unknown = set(options) - known
    if unknown:
        raise ValueError(
            f"unknown {estimator.name} {where} {sorted(unknown)}; valid: {sorted(known)}"
        )
    for key, value in options.items():
        if key in _COUNTS and not (
            isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1
        ):
            raise ValueError(f"{where}[{key!r}] must be an integer >= 1; got {value!r}")
        if key in _TOLERANCES and not (
            isinstance(value, int | float | np.number) and np.isfinite(value) and value >= 0
        ):
            raise ValueError(f"{where}[{key!r}] must be a number >= 0; got {value!r}")
        if key in _FLAGS and not isinstance(value, bool | np.bool_):
            raise ValueError(f"{where}[{key!r}] must be True or False")


def safe_nll(lik: Likelihood, p) -> float:
    """The weak NLL at ``p``, infinite where the likelihood is undefined."""
    try:
        return float(lik.nll(p))
    except WeakLikelihoodError:
        return np.inf


def _check_bounds(bounds, J: int, names) -> tuple[np.ndarray, np.ndarray] | None:
    if bounds is None:
        return None
    if isinstance(bounds, optimize.Bounds):
        lo, hi = np.broadcast_to(bounds.lb, (J,)), np.broadcast_to(bounds.ub, (J,))
    else:
        b = np.asarray(bounds, dtype=float)
        if b.shape != (J, 2):
            raise ValueError(
                f"bounds must be {J} (lower, upper) pairs, one per parameter {list(names)}; "
                f"got shape {b.shape}"
            )
        lo, hi = b[:, 0], b[:, 1]
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    bad = ~(lo < hi) | np.isnan(lo) | np.isnan(hi)
    if np.any(bad):
        j = int(np.argmax(bad))
        raise ValueError(f"bounds for {names[j]} must satisfy lower < upper; got {lo[j], hi[j]}")
    return lo, hi


def _check_p0(p0, J: int, names, bounds) -> np.ndarray | None:
    if p0 is None:
        return None
    p = np.asarray(p0, dtype=float)
    if p.shape != (J,):
        raise ValueError(f"p0 must have {J} entries ({list(names)}); got shape {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"p0 must be finite; got {p}")
    if bounds is not None:
        outside = (p < bounds[0]) | (p > bounds[1])
        if np.any(outside):
            j = int(np.argmax(outside))
            raise ValueError(
                f"p0 for {names[j]} = {p[j]:g} is outside its bounds "
                f"({bounds[0][j]:g}, {bounds[1][j]:g})"
            )
    return p


def _likelihood_of(
    model, t, U, noise, sigma, test_functions, ridge, inputs=None, time_unit=None,
    initial_state=None, t0=None,
):  # fmt: skip
    if isinstance(model, Likelihood):
        if t is not None or U is not None:
            raise ValueError("pass either a likelihood, or a model with t and U; not both")
        given = {"noise": as_observation(noise) != Normal(), "sigma": sigma is not None}
        given |= {"inputs": bool(inputs)}
        given |= {"time_unit": time_unit is not None, "initial_state": initial_state is not None}
        given |= {"t0": t0 is not None}
        given |= {"test_functions": test_functions is not None, "ridge": ridge != 1e-10}
        clash = [k for k, v in given.items() if v]
        if clash:
            raise ValueError(
                f"{clash} are fixed by the {type(model).__name__} passed; do not pass them"
            )
        return model
    if not isinstance(model, ODEModel):
        raise TypeError(
            "model must be an ODEModel or a WeakLikelihood (or JointLikelihood); "
            f"got {type(model)!r}"
        )
    if U is None:
        raise ValueError("U is required with an ODEModel (and t, unless U carries the times)")
    t = _times_for(t, U)
    if _several(t, U):
        if initial_state is not None or t0 is not None:
            raise ValueError(
                "initial_state covers one experiment for now; build one WeakLikelihood per "
                "experiment with its initial_state and pass them as a JointLikelihood"
            )
        return _joint_likelihood(
            model, t, U, noise, sigma, test_functions, ridge, inputs, time_unit
        )
    return WeakLikelihood(
        model,
        t,
        U,
        noise=noise,
        sigma=sigma,
        test_functions=test_functions,
        ridge=ridge,
        inputs=inputs,
        time_unit=time_unit,
        initial_state=initial_state,
        t0=t0,
    )


def _times_for(t, U):
    """``t``, or one None per experiment when several labelled data sets carry their times."""
    if t is None and isinstance(U, list | tuple) and len(U) and all(np.ndim(x) >= 2 for x in U):
        return [None] * len(U)
    return t


def _several(t, U) -> bool:
    """Whether ``t`` and ``U`` are lists of experiments (``[t1, t2]``, ``[U1, U2]``)."""
    many_t = isinstance(t, list | tuple) and any(x is None or np.ndim(x) >= 1 for x in t)
    many_U = isinstance(U, list | tuple) and len(U) > 0 and all(np.ndim(x) >= 2 for x in U)
    if many_t != many_U:
        raise ValueError(
            "for several experiments give t and U as lists of the same length, one time "
            "array and one (M_e+1, D) data array per experiment ([t1, t2], [U1, U2]); got "
            f"{'a list' if many_t else 'one array'} of times and "
            f"{'a list' if many_U else 'one array'} of data"
        )
    if many_t and len(t) != len(U):
        raise ValueError(f"{len(t)} time arrays but {len(U)} data arrays")
    return many_t


def _per_experiment(value, E: int, what: str, is_single) -> list:
    """``value`` for each of ``E`` experiments: one shared value or a sequence of ``E``."""
    if value is None or is_single(value):
        return [value] * E
    if not isinstance(value, list | tuple | np.ndarray) or len(value) != E:
        raise ValueError(
            f"{what} for {E} experiments: give one value for all, or a list with one entry "
            f"per experiment; got {value!r}"
        )
    return list(value)


def _is_scalar(v) -> bool:
    return not isinstance(v, list | tuple) and np.ndim(v) == 0


def _is_one_test_function_spec(v) -> bool:
    """Options, ready test functions, or one ``(phi, dphi)`` pair of matrices."""
    if isinstance(v, Mapping | TestFunctions | str):
        return True
    return isinstance(v, list | tuple) and len(v) == 2 and all(np.ndim(m) == 2 for m in v)


def _joint_likelihood(
    model, t, U, noise, sigma, test_functions, ridge, inputs=None, time_unit=None
) -> JointLikelihood:
    E = len(t)
    sigmas = _per_experiment(sigma, E, "sigma", _is_scalar)
    specs = _per_experiment(test_functions, E, "test_functions", _is_one_test_function_spec)
    forcing = _per_experiment(inputs, E, "inputs", lambda v: not isinstance(v, list | tuple))
    experiments = []
    for i in range(E):
        try:
            experiments.append(
                WeakLikelihood(
                    model,
                    t[i],
                    U[i],
                    noise=noise,
                    sigma=sigmas[i],
                    test_functions=specs[i],
                    ridge=ridge,
                    inputs=forcing[i],
                    time_unit=time_unit,
                )
            )
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"experiment {i}: {exc}") from None
    return JointLikelihood(experiments)


def _data_only_estimator(estimator: Estimator, model, noise) -> bool:
    """Whether ``estimator`` runs on the data alone: it needs no weak likelihood, none was
    given, and the noise is one level per state (for noise that follows the solution an
    estimator that weighs each entry reads the observation model's noise level and
    parameters from the weak likelihood)."""
    if estimator.weak_likelihood or isinstance(model, Likelihood):
        return False
    obs = as_observation(noise)
    return not (estimator.per_entry_noise and (obs.per_entry or not obs.scaled))


def _forward_noise(noise, method: str) -> str:
    """The name of a noise model that estimators without a weak likelihood handle: one
    noise level per state, on the data or on their log."""
    obs = as_observation(noise)
    if obs.per_entry or not obs.scaled:
        able = [e for e in names() if get(e).weak_likelihood or get(e).per_entry_noise]
        raise ValueError(
            f"method {method!r} supports 'normal' and 'lognormal' noise (one noise level per "
            f"state); got {obs.name!r}: use one of {able}"
        )
    return obs.name


def _checked_data(model: ODEModel, t, U, noise, sigma, time_unit=None, inputs=None):
    """Validated data, noise level and inputs, for estimators that need no weak
    likelihood."""
    log = as_observation(noise).log_scale  # a name that prepare's _forward_noise passed
    data = as_data(t, U, model.states, time_unit=time_unit)
    t, U = check_data(data.t, data.U, model.n_states)
    if log:
        check_positive_data(t, U, model.states)
    Z = np.log(U) if log else U
    # inputs given as values are on all the given times, missing rows included
    forcing = as_inputs(model.inputs, inputs, data.t_given)
    if sigma is None:
        return t, U, estimate_noise(Z, segments=segments(t, jump_times(forcing))), True, forcing
    s = np.broadcast_to(np.asarray(sigma, dtype=float), (model.n_states,)).copy()
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"sigma must be finite and positive; got {s}")
    return t, U, s, False, forcing
