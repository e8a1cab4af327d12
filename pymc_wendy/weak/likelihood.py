"""The weak-form likelihood bound to a model and a data set.

:class:`WeakLikelihood` validates the data, applies the log transform for log-normal noise,
builds (or accepts) the test functions, estimates the noise level when it is not given and
exposes the weak residual, its covariance, the negative log-likelihood, its gradient (with
respect to the parameters and to the per-state noise variances), its Hessian and the
estimator covariances at a point estimate: the :class:`~pymc_wendy.weak.protocol.Likelihood`
interface. What depends on the kind of model (first order, higher order or forced) is its
:attr:`WeakLikelihood.form` (:mod:`pymc_wendy.weak.form`), chosen from the model.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from pymc_wendy._threads import single_blas_thread
from pymc_wendy._validation import check_data, check_positive_data
from pymc_wendy.model.data import InitialState, as_data, as_initial_state
from pymc_wendy.model.doses import discontinuities, jump_times
from pymc_wendy.model.input_output import eliminate_hidden
from pymc_wendy.model.inputs import as_inputs
from pymc_wendy.model.observation import as_observation, floored_state, smoothed_state
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.total_derivative import domain_check
from pymc_wendy.weak import first_order, kernels, linear_form, operator
from pymc_wendy.weak.diagnostics import diagnose
from pymc_wendy.weak.form import WeakForm, form_for
from pymc_wendy.weak.noise import estimate_noise
from pymc_wendy.weak.protocol import Correction, check_tilt
from pymc_wendy.weak.test_functions import (
    LocalTestFunctions,
    TestFunctions,
    build_local_test_functions,
    build_test_functions,
    from_matrices,
)
from pymc_wendy.weak.test_functions.boundary import with_boundary
from pymc_wendy.weak.test_functions.quadrature import relevant_breaks, segments

__all__ = ["ShortSeriesWarning", "WeakLikelihood"]

Noise = Literal["normal", "lognormal"]

#: Below this noise-to-signal ratio the data are treated as noise-free (S(p) ~ ridge * I).
NOISE_FREE_RATIO = 1e-6

#: Below this many time points the filter's noise estimate is unreliable (docs/data.md).
SHORT_SERIES = 64


class ShortSeriesWarning(UserWarning):
    """The series is too short for what was asked of it (here: estimating the noise)."""


def _all_rows(data, domain, t, U, states, time_unit) -> tuple[np.ndarray, np.ndarray]:
    """``(t, U)`` of every row without a missing entry: ``data``'s own rows, read again
    without the domain check when there is one."""
    if domain is None:
        return data.t, data.U
    full = as_data(t, U, states, time_unit=time_unit, warn=False)
    return full.t, full.U


def warn_filter_fallback(n_points: int, exc: Exception, stacklevel: int) -> None:
    """The short-series default (noise from forward residuals) fell back to the filter."""
    warnings.warn(
        f"the noise level of this short series ({n_points} points) could not be estimated "
        f"from forward residuals (the ODE solve failed: {exc}); the filter's estimate is "
        "used, which is unreliable on short series: pass sigma=",
        ShortSeriesWarning,
        stacklevel=stacklevel + 1,
    )


# the kinds of model the library ships register themselves with the form registry on import
_SHIPPED_FORMS = (first_order.FirstOrderForm, operator.OperatorForm)


class WeakLikelihood:
    """Weak-form Gaussian likelihood with parameter-dependent covariance (WENDy-MLE).

    Parameters
    ----------
    model : ODEModel
        The ODE. For ``noise="lognormal"`` the log-state model is derived automatically.
    t : array, shape (M+1,), or None
        Strictly increasing sample times (non-uniform grids are supported): numbers,
        datetimes or durations (counted from the first, in ``time_unit``); None to take them
        from ``U``'s index or time coordinate.
    U : array, shape (M+1, D), DataFrame, DataArray or masked array
        Observations, one row per time point. DataFrame columns and DataArray dims are
        matched to the model's states by name; NaN or masked entries are missing and their
        time points are left out (:func:`pymc_wendy.model.data.as_data`). A state never
        measured (a column of NaN, or one a DataFrame lacks) is hidden: the likelihood is
        that of the equations of the observed states (:func:`~pymc_wendy.input_output`).
    noise : {"normal", "lognormal"}
        Additive Gaussian noise, or multiplicative log-normal noise (all data must be > 0).
    sigma : float or array of shape (D,), optional
        Noise standard deviation per state (of ``log U`` for log-normal noise). Estimated from
        the data with the high-order filter when omitted.
    test_functions : TestFunctions, mapping, "local", or (phi, dphi), optional
        Ready test functions, options for :func:`build_test_functions`, or user matrices.
        ``"local"`` (or a mapping with ``"local": True`` and options of
        :func:`~pymc_wendy.weak.test_functions.build_local_test_functions`: ``radius``,
        ``multiplier``, ``stride``...): un-reduced bumps of one radius at strided centres,
        stored as windows; for a first-order model whose covariance is then banded
        (:func:`pymc_wendy.weak.banded.use_banded`) value, gradient and the optimiser's
        Newton model cost ``O(M)`` (``docs/performance.md``, "Long series"). None: the
        form's default, for a first-order model WENDy's SVD construction, local test
        functions above 1025 points (``first_order.LONG_SERIES_POINTS``).
    ridge : float
        ``S <- (1 - ridge) S + ridge c I``, relative to the size ``c`` of ``S`` (the leading
        test-function operator's mean squared row norm times the smallest noise variance),
        so that it does not depend on the units of ``t`` or ``U``. WENDy.jl and the MATLAB
        code use ``c = 1`` and 1e-10 (``docs/data.md``).
    linear : {"auto", "fast", "general"}
        Use the precomputed quadratic form of S(p) for linear-in-parameter models when it fits
        in ``max_precompute_bytes`` ("auto"), always ("fast"), or never ("general").
    max_precompute_bytes : int
        Memory budget for the linear-in-parameters precomputation.
    inputs : mapping, optional
        Values of the model's known inputs (``ODEModel(..., inputs=[...])``): names to
        :class:`~pymc_wendy.model.inputs.Input` objects, callables, or arrays on the times ``t``.
    time_unit : str, optional
        Unit of a datetime or duration time axis (default days, resp. seconds); the
        parameters are then per that unit.
    initial_state : array or mapping, optional
        The state known exactly at ``t0`` (values in the state order, or by state name; for a
        model of order > 1, ``model.companion_states``). The weak form then adds test
        functions that do not vanish at ``t0``, whose boundary term carries the known state
        (:mod:`pymc_wendy.weak.test_functions.boundary`); the state at ``t0`` enters as exact
        data. First-order models (with or without inputs), and higher-order ones at rest
        (every value zero, e.g. before a first dose: ``docs/doses.md``). At a dose time it
        is the state before the dose.
    t0 : float or datetime, optional
        When ``initial_state`` holds; default the first time point. May lie before the first
        observation (a dose at 0, first sample later), not after it.

    Attributes
    ----------
    form : WeakForm
        The model-dependent part of the weak residual (:mod:`pymc_wendy.weak.form`):
        :class:`~pymc_wendy.weak.first_order.FirstOrderForm` for ``du/dt = f(t, u, p)``,
        :class:`~pymc_wendy.weak.operator.OperatorForm` for models of order > 1 or with inputs.
    initial_state : InitialState or None
        The known initial state (``t0``, ``u0``), if any. ``t``, ``U`` and ``X`` hold the
        observations only; the form's grid (``form.t``, ``form.X``) starts at ``t0``.
    eliminated : InputOutput or None
        With hidden states: the equations of the observed states, which ``model`` then is
        (``eliminated.latent`` is the model given, ``eliminated.hidden`` the hidden states'
        expressions); None otherwise.
    """

    def __init__(
        self,
        model: ODEModel,
        t,
        U,
        *,
        inputs=None,
        noise: Noise = "normal",
        sigma=None,
        test_functions: TestFunctions | Mapping | Sequence | None = None,
        ridge: float = 1e-10,
        linear: Literal["auto", "fast", "general"] = "auto",
        max_precompute_bytes: int = 256 * 2**20,
        time_unit: str | None = None,
        initial_state=None,
        t0=None,
    ):
        if not isinstance(model, ODEModel):
            raise TypeError(f"model must be an ODEModel; got {type(model)!r}")
        obs = as_observation(noise)
        if not 0.0 <= ridge < 1.0:
            raise ValueError(f"ridge must be in [0, 1); got {ridge}")
        if linear not in ("auto", "fast", "general"):
            raise ValueError(f"linear must be 'auto', 'fast' or 'general'; got {linear!r}")
        # states the data never measure: the equations of the observed ones instead
        model, U, sigma, initial_state, self.eliminated = eliminate_hidden(
            model, U, sigma, initial_state
        )
        form_cls = form_for(model)
        domain = domain_check(model)
        data = as_data(t, U, model.states, time_unit=time_unit, undefined=domain)
        #: every observed row, for the exact stage: the weak form leaves out rows outside its
        #: terms' domain (log I at I <= 0), a forward solve needs no such thing
        self.exact_t, self.exact_U = check_data(
            *_all_rows(data, domain, t, U, model.states, time_unit), model.n_states
        )
        t, U = check_data(data.t, data.U, model.n_states)
        # order > 1: the state and its derivatives (the companion layout) at t0
        self.initial_state = as_initial_state(initial_state, t0, data, model.companion_states)
        weak = _weak_observation(obs, form_cls, self._boundary_state)
        form_cls.check_noise(model, weak)
        # inputs given as values are on all the given times, missing rows included
        self.inputs = as_inputs(model.inputs, inputs, data.t_given)
        self.observed = data
        self.base_model = model
        self.t = t
        self.U = U
        obs.check_data(U, model.states)
        if obs.log_scale:
            check_positive_data(t, U, model.states)
        self.model = model.log_transformed() if weak.log_scale else model
        self.X = weak.weak_data(U)
        tf = self._test_functions(test_functions, form_cls)
        self.ridge = float(ridge)
        #: the observation model of the weak form, its unknown variance parameters filled in
        self.weak_observation, data_weights = self._noise_weights(weak)
        #: the data's observation model (the exact stage's): the weak form's, or log-normal
        #: where the weak form uses proportional weights instead (:func:`_weak_observation`)
        self.observation = self.weak_observation if weak is obs else obs
        #: the same as given, its unknown variance parameters unfilled (what output error
        #: refits by maximum likelihood at its solution, :meth:`Observation.fitted`)
        self.observation_given = weak if weak is obs else obs
        self.noise = self.weak_observation.name
        grid, weights = (t, self.X), data_weights
        if self._boundary_state is not None:
            grid, tf, weights = self._with_initial_state(tf, form_cls, data_weights)
        self.form: WeakForm = form_cls(self.model, *grid, tf, self.inputs, self.ridge, weights)
        self.test_functions = tf
        self.sigma, self.sigma_estimated = self._sigma(sigma, data_weights)
        #: what the ridge adds to the diagonal of ``S``: ``ridge`` times the scale of ``S``
        self.ridge_diag = self.ridge * self._covariance_scale()
        self.form.ridge_diag = self.ridge_diag
        self._linear_mode = linear
        self._max_precompute = max_precompute_bytes
        self._linear_cache: linear_form.LinearForm | None = None
        self._correction: Correction | None = None

    @property
    def _boundary_state(self) -> InitialState | None:
        """The known initial state the weak form takes as a boundary row: none when it is a
        state of the model given with hidden states (:attr:`InitialState.system`), which
        only the forward solves start from."""
        known = self.initial_state
        return known if known is not None and known.system is None else None

    @property
    def phi(self) -> np.ndarray:
        """``Phi`` (K, M+1) of the form (densified on first use for local test functions)."""
        return self.form.phi

    @property
    def dphi(self) -> np.ndarray:
        """``dPhi`` (K, M+1) of the form (densified on first use for local test functions)."""
        return self.form.dphi

    @property
    def banded(self) -> bool:
        """Whether value, gradient and Newton model take the banded path (local test
        functions with a narrow band: :mod:`pymc_wendy.weak.banded`)."""
        return bool(getattr(self.form, "banded", False))

    # --- set-up --------------------------------------------------------------------------
    def _test_functions(self, spec, form_cls: type[WeakForm]) -> TestFunctions:
        # the data jump (or kink) at bolus doses: each side is integrated separately
        where = discontinuities(self.base_model, self.inputs)
        if spec is None:
            tf = form_cls.default_test_functions(self.t, self.X, self.base_model, **where)
            if tf is None or (
                isinstance(tf, LocalTestFunctions) and self._boundary_state is not None
            ):
                # a known initial state adds a boundary row to the SVD construction's rows
                return build_test_functions(self.t, self.X, **where)
            return tf
        inside = relevant_breaks(self.t, np.concatenate(list(where.values())))
        if isinstance(spec, str) or (isinstance(spec, Mapping) and spec.get("local", False)):
            return self._local_test_functions(spec, inside)
        if isinstance(spec, TestFunctions):
            tf = spec
            missing = np.setdiff1d(inside, np.union1d(tf.breaks, tf.kinks))
            if missing.size:
                raise ValueError(
                    f"the doses jump at {missing.tolist()}, which these test functions do not "
                    "integrate across (build them with build_test_functions(..., breaks=...), "
                    "or give build options instead)"
                )
        elif isinstance(spec, Mapping):
            return build_test_functions(self.t, self.X, **{**where, **spec})
        elif isinstance(spec, Sequence) and len(spec) == 2:
            if inside.size:
                raise ValueError(
                    f"the doses jump at {inside.tolist()}: test functions given as matrices "
                    "cannot integrate across them; give build options instead"
                )
            tf = from_matrices(spec[0], spec[1], self.t)
        else:
            raise TypeError(
                "test_functions must be a TestFunctions, a dict of build options, 'local', or "
                "(phi, dphi)"
            )
        if tf.n_points != self.t.size:
            raise ValueError(
                f"test functions have {tf.n_points} columns but the data have {self.t.size} "
                "time points"
            )
        return tf

    def _local_test_functions(self, spec, inside: np.ndarray) -> LocalTestFunctions:
        """``test_functions="local"`` or ``{"local": True, ...options}``."""
        if isinstance(spec, str):
            if spec != "local":
                raise ValueError(f"test_functions as a string must be 'local'; got {spec!r}")
            options = {}
        else:
            options = {k: v for k, v in spec.items() if k != "local"}
        if inside.size:
            raise ValueError(
                f"the doses jump at {inside.tolist()}: local test functions use the trapezoid "
                "rule, which cannot integrate across a jump; use the default test functions"
            )
        if self._boundary_state is not None:
            raise ValueError(
                "local test functions do not take a known initial_state (its boundary row "
                "spans the grid); use the default test functions"
            )
        tf = build_local_test_functions(self.t, self.X, **options)
        D, J = self.X.shape[1], self.base_model.n_params
        if tf.K * D < J:
            warnings.warn(
                f"local test functions on {self.t.size} points give {tf.K} test function(s), "
                f"{tf.K * D} weak residuals for {J} parameters: the weak likelihood cannot "
                "determine them (a posterior follows its prior there); use the default test "
                "functions, which pick the narrowest accurate radii on short series",
                ShortSeriesWarning,
                stacklevel=4,
            )
        return tf

    def _segments(self) -> np.ndarray:
        return segments(self.t, jump_times(self.inputs))

    def _noise_weights(self, obs):
        """The observation model with its unknown variance parameters estimated, and the
        per-entry noise weights at the smoothed data (None for a constant variance)."""
        self._weight_state = None
        if not obs.per_entry:
            return obs, None
        # 12 neighbours (observation.smoothed_state), fewer on short series, where a
        # quadratic over half the series would flatten a peak (and its weights)
        half_width = int(np.clip(self.t.size // 16, 3, 6))
        segs = self._segments()
        u = floored_state(smoothed_state(self.t, self.X, segs, half_width=half_width), self.X)
        self._weight_state = u  # where variance parameters that are random variables enter
        if not obs.complete:
            theta = estimate_noise(self.X, segments=segs, variance=obs.variance_terms(u))
            obs = obs.with_variance_parameters(theta)
            if self.t.size < SHORT_SERIES:
                found = ", ".join(
                    f"{f.name} {np.array2string(np.asarray(getattr(obs, f.name)), precision=3)}"
                    for f in dataclasses.fields(obs)
                )
                warnings.warn(
                    f"the variance parameters of the {obs.name} noise are estimated from "
                    f"{self.t.size} time points ({found}), which is unreliable: on "
                    "the 14 daily influenza counts of docs/hidden_states.md the filter found "
                    "no over-dispersion while the forward residuals are 1.8 times the Poisson "
                    "sd; give them (pw.NegativeBinomial(alpha), pw.Combined(a, b)), or fit "
                    "with method='hybrid', which refits them by maximum likelihood",
                    ShortSeriesWarning,
                    stacklevel=4,
                )
        return obs, obs.weights(u)

    def _with_initial_state(self, tf: TestFunctions, form_cls: type[WeakForm], weights):
        """The grid from ``t0`` with the known state as its first, exact row; the test
        functions on it with boundary rows; the noise weights (zero on the known row)."""
        if tf.n_boundary:
            raise ValueError("these test functions already have boundary rows")
        t0, u0 = self.initial_state.t0, self.initial_state.u0
        model = self.base_model
        if max(model.orders) > 1:
            # The boundary terms of order q carry the derivatives up to q - 1 at t0 times
            # parameter-dependent coefficients; at rest (all zero: before a first dose) they
            # vanish, and the doses at t0 enter through their integrals.
            if np.any(u0 != 0):
                raise ValueError(
                    f"{model.name} has order {max(model.orders)}: a known initial_state is "
                    f"supported at rest only (every value of {list(model.companion_states)} "
                    f"zero, e.g. before a first dose); got {u0}"
                )
            u0 = u0[model.observed_columns]
        if self.weak_observation.log_scale and np.any(u0 <= 0):
            raise ValueError(
                f"initial_state {u0}: with log-normal noise the weak form works on log u, "
                "so every known initial value must be > 0 (a state known to be 0 needs "
                "noise='proportional', the same relative error without the log, or 'normal')"
            )
        x0 = self.weak_observation.weak_data(u0)
        prepend = t0 < self.t[0]
        t = np.concatenate([[t0], self.t]) if prepend else self.t
        X = np.vstack([x0, self.X]) if prepend else np.vstack([x0, self.X[1:]])
        # One half bump, of the largest interior radius: two or more make S nearly singular
        # (their differences are nearly interior functions), and in that direction the
        # noise's second-order terms, which S leaves out, dominate: on Lotka-Volterra at 1 %
        # noise four boundary rows gave coverage 0.76-0.92 with intervals 3x too narrow, one
        # gives what the fit without the initial state gives (docs/data.md). It needs the
        # four points of the first cubic stencil inside its support.
        reach = t[min(3, t.size - 1)] - t0
        radius = float(np.max(tf.radii)) if tf.radii.size else (t[-1] - t0) / 8
        radius = min(max(radius, reach), t[-1] - t0)
        eta = tf.eta if np.isfinite(tf.eta) else 9.0
        tf = with_boundary(
            tf, t, int(prepend), np.array([radius]), eta,
            **discontinuities(self.base_model, self.inputs),
        )  # fmt: skip
        return (t, X), tf, self._on_form_grid(np.ones(self.X.shape) if weights is None else weights)

    def _on_form_grid(self, A: np.ndarray) -> np.ndarray:
        """Per-entry noise quantities ``A`` (..., M+1, D) of the data on the form's grid: with a
        known initial state its row first, noise-free (zero)."""
        if self._boundary_state is None:
            return A
        prepend = int(self.initial_state.t0 < self.t[0])
        zero = np.zeros((*A.shape[:-2], 1, A.shape[-1]))
        return np.concatenate([zero, A[..., 1 - prepend :, :]], axis=-2)

    def entry_variance_terms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offset, features)`` on the form's grid, (M1, D) and (C, M1, D): the variance of
        entry ``(m, d)`` is ``offset + sum_c theta[c, d] features[c]``, linear in the
        observation model's variance parameters ``theta``
        (:meth:`~pymc_wendy.model.observation.Observation.variance_terms`; ``1 / alpha`` of
        negative binomial counts), at the smoothed state the weights are evaluated at. What
        the Op's per-entry variances are built from when those parameters are random
        variables (:meth:`nll_grad_variances`)."""
        if self._weight_state is None:
            raise ValueError(
                f"{self.noise} noise has a constant variance: its noise level is sigma "
                "(nll_grad_sigma2), not per-entry variance parameters"
            )
        offset, features = self.observation_given.variance_terms(self._weight_state)
        offset = np.broadcast_to(offset, self._weight_state.shape)
        return self._on_form_grid(np.asarray(offset, float)), self._on_form_grid(features)

    def entry_variances(self, observation):
        """Every entry's noise variance on the form's grid (M1, D) under ``observation``, this
        likelihood's model with its variance parameters given (numbers, or tensors: then a
        tensor), from :meth:`entry_variance_terms`."""
        V, features = self.entry_variance_terms()
        for theta, feature in zip(observation.variance_theta(), features, strict=True):
            V = theta * feature + V  # theta first: a tensor's product stays a tensor
        return V

    def _with_variances(self, V) -> WeakForm:
        """The weak form with every entry's noise variance ``V`` (noise level 1), checked."""
        V = np.asarray(V, dtype=float)
        if V.shape != self.form.X.shape:
            raise ValueError(f"V must have shape {self.form.X.shape}; got {V.shape}")
        if not np.all(np.isfinite(V)) or np.any(V < 0):
            raise kernels.WeakLikelihoodError("entry variances must be finite and >= 0")
        form = copy.copy(self.form)
        form.weights = np.ascontiguousarray(V)
        return form

    def _sigma(self, sigma, weights) -> tuple[np.ndarray, bool]:
        """The noise level and whether it was estimated; ``weights`` are the data's."""
        obs = self.weak_observation
        if not obs.scaled:
            if sigma is not None:
                raise ValueError(
                    f"{obs.name} noise has no noise level sigma (its variance follows from "
                    "the solution and the model's own parameters); leave sigma unset"
                )
            return np.ones(self.model.n_states), False
        if sigma is not None:
            return self.check_sigma(sigma), False
        if weights is None:
            est = estimate_noise(self.X, segments=self._segments())
            scale = np.sqrt(np.mean(self.X**2, axis=0))
        else:  # a relative noise level: the filter's moment fit with the weights' shape
            theta = estimate_noise(self.X, segments=self._segments(), variance=(0.0, weights[None]))
            est, scale = np.sqrt(theta[0]), np.ones(self.X.shape[1])
        if np.all(est <= NOISE_FREE_RATIO * np.maximum(scale, np.finfo(float).tiny)):
            warnings.warn(
                "the data look noise-free (estimated noise "
                f"{np.array2string(est, precision=2)}); S(p) is then ~ ridge * I and the "
                "weak likelihood reduces to weak least squares",
                stacklevel=4,
            )
        if self.t.size < SHORT_SERIES:
            warnings.warn(
                f"the noise level is estimated from {self.t.size} time points, which is "
                "unreliable: on 21-point series the filter gave 0.6-0.8 times the true "
                "noise on a smooth logistic curve and 3-7 times on Lotka-Volterra "
                "(docs/data.md), and the intervals follow; pass sigma=, or "
                "sigma='residual' (fit), or infer sigma (WeakODELikelihood)",
                ShortSeriesWarning,
                stacklevel=4,
            )
        return est, True

    def _covariance_scale(self) -> float:
        """A data-derived size of the diagonal of ``S``: the form's operator scale times the
        smallest state's noise variance (floored relative to the state's size, so noise-free
        data still get a ridge). It rescales with time and data units as ``S`` does, so the
        relative ridge changes nothing when units change."""
        rms = np.sqrt(np.mean(self.X**2, axis=0))
        s = np.asarray(self.sigma, dtype=float)
        if self.form.weights is not None:  # the typical sd of an entry
            s = s * np.sqrt(np.mean(self.form.weights, axis=0))
        s = np.maximum(s, NOISE_FREE_RATIO * rms)
        s = s[s > 0]
        var = float(np.min(s) ** 2) if s.size else 1.0
        scale = self.form.operator_scale() * var
        return scale if np.isfinite(scale) and scale > 0 else 1.0

    def rms_noise_sd(self, sigma=None) -> np.ndarray:
        """Per state, the root mean square of the data entries' noise sd at the noise level
        ``sigma`` (the likelihood's if None): ``sigma`` itself for a constant variance."""
        s = self.sigma if sigma is None else self.check_sigma(sigma)
        w = self.form.weights
        if w is None:
            return s
        noisy = w[np.any(w > 0, axis=1)]  # not the known initial row
        return s * np.sqrt(np.mean(noisy, axis=0))

    def check_sigma(self, sigma) -> np.ndarray:
        """Broadcast a noise standard deviation to shape (D,) and validate it."""
        D = self.model.n_states
        s = np.asarray(sigma, dtype=float)
        try:
            s = np.broadcast_to(s, (D,)).copy()
        except ValueError:
            raise ValueError(
                f"sigma must be a scalar or have {D} entries; got shape {s.shape}"
            ) from None
        if not np.all(np.isfinite(s)) or np.any(s < 0):
            raise ValueError(f"sigma must be finite and non-negative; got {s}")
        return s

    def check_params(self, p) -> np.ndarray:
        """``p`` as a finite float array of shape (J,), or a clear error."""
        p = np.asarray(p, dtype=float)
        if p.shape != (self.model.n_params,):
            raise ValueError(f"p must have shape ({self.model.n_params},); got {p.shape}")
        if not np.all(np.isfinite(p)):
            raise ValueError(f"p must be finite; got {p}")
        return p

    # --- sizes ---------------------------------------------------------------------------
    @property
    def K(self) -> int:
        """Number of test functions."""
        return self.form.K

    @property
    def n_residuals(self) -> int:
        """Length of the weak residual, K * D."""
        return self.form.K * self.model.n_states

    @property
    def experiments(self) -> tuple[WeakLikelihood]:
        """``(self,)``: one data set (the :class:`~pymc_wendy.weak.protocol.Likelihood`
        interface; a :class:`~pymc_wendy.JointLikelihood` has several)."""
        return (self,)

    def __repr__(self) -> str:
        return (
            f"WeakLikelihood({self.model.name!r}, noise={self.noise!r}, M+1={self.t.size}, "
            f"D={self.model.n_states}, J={self.model.n_params}, K={self.K}, "
            f"sigma={np.array2string(self.sigma, precision=3)}"
            f"{' (estimated)' if self.sigma_estimated else ''}"
            f"{'' if self._correction is None else ', bias-corrected: ' + self.correction_method})"
        )

    # --- bias correction -------------------------------------------------------------------
    def corrected(self, method: str, tilt, reference) -> WeakLikelihood:
        """A copy whose objective is the bias-corrected weak quasi-likelihood.

        The copy's :meth:`nll` (and gradient, Hessian, ``parameter_covariance(method=
        "hessian")``, and the pytensor Op built on it) is

            l_c(p) = r' S(p)^-1 r / 2 - tilt' (p - reference) + l_0,

        the quadratic form without the log-determinant, tilted by the constant ``tilt`` (the
        estimated mean of its score, :func:`pymc_wendy.weak.bias.score_mean`), with
        ``l_0 = (log det S(reference) + n log 2 pi) / 2`` so that ``l_c`` and ``l`` agree at
        ``reference``. The noise level is held at ``sigma``. Built by
        :func:`pymc_wendy.weak.bias.corrected_likelihood`; see ``docs/bias.md``.
        """
        if self._correction is not None:
            raise ValueError("this likelihood is already bias-corrected")
        tilt = check_tilt(tilt, self.model.n_params)
        reference = self.check_params(reference).copy()
        ev = self.form.evaluation(reference, self.sigma**2)
        new = copy.copy(self)
        new._correction = Correction(
            method=str(method),
            tilt=tilt,
            reference=reference,
            offset=0.5 * (ev.logdet + self.n_residuals * kernels.LOG_2PI),
        )
        return new

    @property
    def correction(self) -> Correction | None:
        """The bias correction this objective carries (:meth:`corrected`), or None."""
        return self._correction

    @property
    def correction_method(self) -> str | None:
        """The bias correction's method (:meth:`corrected`), or None."""
        return None if self._correction is None else self._correction.method

    @property
    def tilt(self) -> np.ndarray | None:
        """The constant subtracted from the score by :meth:`corrected`, or None."""
        return None if self._correction is None else self._correction.tilt.copy()

    def score_mean(self, p) -> np.ndarray:
        """Estimated mean of the quadratic form's score at ``p`` under the data noise, shape
        (J,) (:func:`pymc_wendy.weak.bias.score_mean`), at the likelihood's noise level."""
        p = self.check_params(p)
        return self.form.score_mean(p, self.form.evaluation(p, self.sigma**2))

    def _tilted(self, p: np.ndarray, value: float, grad: np.ndarray | None = None):
        value = value + self._correction.value(p)
        return value if grad is None else (value, grad - self._correction.tilt)

    def _fixed_noise(self, sigma, what: str) -> None:
        if self._correction is not None and sigma is not None:
            if not np.allclose(self.check_sigma(sigma), self.sigma, rtol=1e-12, atol=0.0):
                raise ValueError(
                    f"{what}: a bias-corrected likelihood holds the noise level at the "
                    "sigma it was built with (its quadratic form has no normaliser in sigma)"
                )

    # --- evaluation ------------------------------------------------------------------------
    def _s2(self, sigma) -> np.ndarray:
        s = self.sigma if sigma is None else self.check_sigma(sigma)
        return s**2

    def linear_form(self, s2: np.ndarray) -> linear_form.LinearForm | None:
        """The precomputed quadratic form of ``S(p)`` for noise variances ``s2``, or None where
        the model is nonlinear in ``p``, ``linear="general"`` or the memory budget says no."""
        if self._linear_mode == "general" or not self.model.is_linear_in_params or self.banded:
            return None  # banded: the precomputed matrices would be dense K D x K D
        cache = self._linear_cache
        if cache is not None and np.array_equal(cache.s2_raw, s2):
            return cache
        need = linear_form.precompute_bytes(self.K, self.model.n_states, self.model.n_params)
        if self._linear_mode == "auto" and need > self._max_precompute:
            return None
        self._linear_cache = linear_form.LinearForm.build(
            self.form.linear_coefficients, s2, self.ridge, self.ridge_diag
        )
        return self._linear_cache

    def compiled_linear_form(self, *, per_state: bool) -> linear_form.CompiledForm | None:
        """The linear-in-parameters form the compiled likelihood should use, or None (general
        path). Follows the ``linear`` option and memory budget; resolving per noise state
        (``per_state``, for a noise level that is a model variable) costs D times the memory
        of the fixed-noise form."""
        if self._linear_mode == "general" or not self.model.is_linear_in_params or self.banded:
            return None  # banded: the compiled banded kernel (dense K D x K D blocks otherwise)
        if not per_state:
            form = self.linear_form(self.sigma**2)
            if form is None:
                return None
            return linear_form.CompiledForm.from_dense(form.r0, form.G, form.A[None], self.K)
        D, J = self.model.n_states, self.model.n_params
        need = D * linear_form.precompute_bytes(self.K, D, J)
        if self._linear_mode == "auto" and need > self._max_precompute:
            return None
        return linear_form.per_state_form(self.form.linear_coefficients, D, self.K)

    @property
    def exact_hessian_is_cheap(self) -> bool:
        """True on the linear-in-parameters fast path, where the precomputed coefficient
        matrices make the exact Hessian cost about what the gradient does."""
        return self.linear_form(self.sigma**2) is not None

    def residual(self, p) -> np.ndarray:
        """Weak residual ``r(p)``, shape (K*D,), state-major (entry ``d*K + k``)."""
        return self.form.residual(self.check_params(p))

    def dr_dp(self, p) -> np.ndarray:
        """Jacobian of the weak residual with respect to ``p``, shape (K*D, J)."""
        return self.form.dr_dp(self.check_params(p))

    @single_blas_thread
    def covariance(self, p, sigma=None, variances=None) -> np.ndarray:
        """Weak-residual covariance ``S(p)`` including the ridge, shape (K*D, K*D)
        (``variances``: every entry's noise variance in place of the likelihood's own)."""
        C = self.covariance_factor(p, sigma, variances)
        return C @ C.T

    @single_blas_thread
    def covariance_factor(self, p, sigma=None, variances=None) -> np.ndarray:
        """Lower Cholesky factor ``C`` of ``S(p) = C C'`` (ridge included).

        Dense ``(K D, K D)``, also for local test functions (whose likelihood never forms it):
        a ValueError where it would take more than 1 GiB. :meth:`whitener` applies
        ``C^-1`` without forming it. ``variances`` as :meth:`covariance`."""
        p = self.check_params(p)
        form, s2 = self.form, self._s2(sigma)
        if variances is not None:
            form, s2 = self._with_variances(variances), np.ones(self.form.X.shape[1])
        if not self.banded:
            return form.evaluation(p, s2).C
        need = 8 * self.n_residuals**2
        if need > 2**30:
            raise ValueError(
                f"the dense covariance of these {self.K} local test functions would take "
                f"{need / 2**30:.3g} GiB; use whitener() or parameter_covariance(), which "
                "work on the band"
            )
        return form.dense_evaluation(p, s2).C

    @single_blas_thread
    def whitener(self, p, sigma=None):
        """``B -> C^-1 B`` with ``S(p) = C C'``, for state-major rows ``B`` (n,) or (n, c).

        The dense Cholesky factor, or on the banded path the band factor in its interleaved
        order (another orthogonal rotation of the whitened vector: same norms, same
        least-squares fits, equally distributed entries)."""
        return self.form.whitener(self.check_params(p), self._s2(sigma))

    @single_blas_thread
    def nll(self, p, sigma=None) -> float:
        """Negative log-likelihood ``l(p)`` (WENDy-MLE eq. 6); ``l_c`` if :meth:`corrected`."""
        p = self.check_params(p)
        self._fixed_noise(sigma, "nll")
        s2 = self._s2(sigma)
        logdet = self._correction is None
        lin = self.linear_form(s2)
        if lin is not None:
            value = lin.nll(p, logdet)
        else:
            ev = self.form.evaluation(p, s2)
            value = ev.nll if logdet else ev.quadratic
        return value if logdet else self._tilted(p, value)

    @single_blas_thread
    def nll_grad(self, p, sigma=None) -> tuple[float, np.ndarray]:
        """Negative log-likelihood and its gradient with respect to ``p``."""
        p = self.check_params(p)
        self._fixed_noise(sigma, "nll_grad")
        s2 = self._s2(sigma)
        logdet = self._correction is None
        lin = self.linear_form(s2)
        if lin is not None:
            value, g = lin.nll_grad(p, logdet)
        else:
            ev = self.form.evaluation(p, s2)
            g, _, _ = self.form.gradient(p, ev, logdet, False)
            value = ev.nll if logdet else ev.quadratic
        return (value, g) if logdet else self._tilted(p, value, g)

    @single_blas_thread
    def nll_grad_sigma2(self, p, sigma=None) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, gradient in ``p`` and gradient in the per-state noise variances ``sigma**2``."""
        if self._correction is not None:
            raise ValueError(
                "a bias-corrected likelihood holds the noise level fixed; it has no gradient "
                "in sigma (its quadratic form has no normaliser in sigma)"
            )
        p = self.check_params(p)
        ev = self.form.evaluation(p, self._s2(sigma))
        g, gs, _ = self.form.gradient(p, ev, True, True)
        return ev.nll, g, gs

    @single_blas_thread
    def nll_grad_variances(
        self, p, V, alpha: float = 0.0, scale: float = 0.0
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, gradient in ``p`` and in every entry's noise variance ``V`` (the form's
        grid, (M1, D): :meth:`entry_variance_terms`), which replace the likelihood's own;
        ``alpha > 0`` relaxes the covariance as :meth:`relaxed_nll_grad_sigma2` does."""
        if self._correction is not None:
            raise ValueError("a bias-corrected likelihood holds its noise variances fixed")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
        p = self.check_params(p)
        form = self._with_variances(V)
        keep = 1.0 - alpha
        diag = keep * self.ridge_diag + alpha * scale
        ev = form.evaluation(p, np.full(form.X.shape[1], keep), diag)
        g, gV, _ = form.gradient(p, ev, True, "entry")
        return ev.nll, g, keep * gV

    @single_blas_thread
    def relaxed_nll_grad_sigma2(
        self, p, sigma2, alpha: float, scale: float
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """``(nll, grad_p, grad_sigma2)`` of the relaxed likelihood of the tempering ladder,
        ``S_alpha = (1 - alpha) S + alpha scale I`` (numpy reference of the compiled Op's
        relaxed path; ``alpha = 0`` is :meth:`nll_grad_sigma2`)."""
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
        p = self.check_params(p)
        keep = 1.0 - alpha
        # (1 - ridge) (keep s2) is the relaxed rung's scaled noise; its diagonal adds alpha c
        diag = keep * self.ridge_diag + alpha * scale
        logdet = self._correction is None
        ev = self.form.evaluation(p, keep * np.asarray(sigma2, dtype=float), diag)
        gp, gs, _ = self.form.gradient(p, ev, logdet, True)
        if logdet:
            return ev.nll, gp, keep * gs
        value, gp = self._tilted(p, ev.quadratic, gp)
        return value, gp, keep * gs

    # --- an initial state with a prior ---------------------------------------------------
    def check_free_initial(self) -> None:
        """Raise unless the known initial state can be replaced by a variable
        (:meth:`initial_nll_grad`): a first-order model without inputs (the general path),
        built with some ``initial_state``, not bias-corrected."""
        if self.initial_state is None:
            raise ValueError(
                "an initial state with a prior needs the likelihood built with an initial "
                "state (any value: its row is replaced)"
            )
        if self.initial_state.system is not None:
            raise ValueError(
                "an initial state with a prior is not taken with hidden states (the weak form "
                "of the observed states' equations has no initial row); give it as numbers"
            )
        refusal = free_initial_refusal(self.base_model)
        if refusal is not None or self.form.kind != "general":
            raise ValueError(refusal or "an initial state with a prior needs the general path")
        if self._correction is not None:
            raise ValueError("a bias-corrected likelihood has no initial state with a prior")

    def at_initial_value(self, x0) -> WeakLikelihood:
        """A copy whose known initial row is ``x0`` (the residual's variables: ``log u0`` for
        log-normal noise). Its weak residual is affine in that row through ``dPhi`` and
        ``Phi f``; ``S(p)`` does not depend on it (the row has no noise)."""
        self.check_free_initial()
        x0 = np.asarray(x0, dtype=float)
        D = self.model.n_states
        if x0.shape != (D,) or not np.all(np.isfinite(x0)):
            raise ValueError(f"the initial value must be {D} finite numbers; got {x0}")
        form = copy.copy(self.form)
        form.X = form.X.copy()
        form.X[0] = x0
        form.b = form.dphi @ form.X
        new = copy.copy(self)
        new.form = form
        new._linear_mode = "general"  # the precomputed linear form holds the old row
        new._linear_cache = None
        return new

    @single_blas_thread
    def initial_nll_grad(
        self, p, x0, sigma2=None
    ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """Negative log-likelihood with the initial row ``x0`` (:meth:`at_initial_value`)
        and its gradients in ``p``, in ``x0`` and in the noise variances (zeros when
        ``sigma2`` is None: the likelihood's own noise level is used).

        With ``a = S^-1 r``: ``dl/dx0_e = sum_d (Phi_0 . a_d) df_d/du_e(x0) + dPhi_0 . a_e``
        (``Phi_0``, ``dPhi_0`` the first columns).
        """
        view = self.at_initial_value(x0)
        p = self.check_params(p)
        s2 = self.sigma**2 if sigma2 is None else np.asarray(sigma2, dtype=float)
        ev = view.form.evaluation(p, s2)
        g, gs, _ = view.form.gradient(p, ev, True, sigma2 is not None)
        a = ev.a.reshape(self.model.n_states, -1)
        gx0 = (a @ view.phi[:, 0]) @ ev.Ju[0] + a @ view.dphi[:, 0]
        return ev.nll, g, gx0, np.zeros_like(s2) if gs is None else gs

    @property
    def observation_key(self) -> str:
        """A digest of what the weak residual observes: the time grid, the data (after the
        noise model's transform), the test functions and the kind of weak form.

        Log-likelihoods of two models compare (``az.compare``) only when their keys are
        equal: then both are densities of the same observed projections of the same data.
        """
        form, tf = self.form, self.form.test_functions
        rows = tf.windows if isinstance(tf, LocalTestFunctions) else None
        arrays = (form.t, form.X, form.weights)
        arrays += (rows.start, rows.phi, rows.dphi) if rows is not None else (tf.phi, tf.dphi)
        h = hashlib.sha256(f"{type(form).__name__}|{self.noise}|{self.model.orders}".encode())
        for a in arrays:
            if a is not None:
                a = np.ascontiguousarray(a, dtype=float)
                h.update(repr(a.shape).encode() + a.tobytes())
        return h.hexdigest()[:16]

    @single_blas_thread
    def loo_log_likelihood(self, p, sigma=None, x0=None, variances=None) -> np.ndarray:
        """``log p(r_i | r_-i, p)`` for every weak-residual entry ``i``, state-major (K*D,).

        The Gaussian weak likelihood does not factorise over its entries (``S(p)`` is not
        diagonal), but each entry has a closed-form density given all the others
        (:func:`~pymc_wendy.weak.kernels.loo_log_density`): what PSIS-LOO needs for a
        non-factorised normal model (``docs/pymc.md``, "Model comparison"). ``x0`` is the
        initial row of a likelihood whose initial state has a prior (:meth:`at_initial_value`);
        ``variances`` every entry's noise variance (:meth:`entry_variances`) in place of the
        likelihood's own.

        Raises
        ------
        ValueError
            For a :meth:`corrected` likelihood: its objective is not a density of the residual.
        """
        if self._correction is not None:
            raise ValueError(
                "a bias-corrected likelihood has no leave-one-out density: its objective drops "
                "the log-determinant, so it is not a density of the weak residual"
            )
        p = self.check_params(p)
        if variances is not None:
            if sigma is not None or x0 is not None:
                raise ValueError("per-entry variances take no sigma or x0")
            form = self._with_variances(variances)
            ev = form.evaluation(p, np.ones(form.X.shape[1]))
        else:
            view = self if x0 is None else self.at_initial_value(x0)
            ev = view.form.evaluation(p, self._s2(sigma))
        return kernels.loo_log_density(ev.a, ev.precision_diagonal())

    @single_blas_thread
    def hessian(self, p, sigma=None) -> np.ndarray:
        """Hessian of the negative log-likelihood with respect to ``p`` (WENDy-MLE eq. 8).

        For a :meth:`corrected` likelihood, the Hessian of ``l_c`` (that of the quadratic
        form; the tilt is linear).
        """
        p = self.check_params(p)
        self._fixed_noise(sigma, "hessian")
        logdet = self._correction is None
        ev = self.form.evaluation(p, self._s2(sigma))
        _, _, state = self.form.gradient(p, ev, logdet, False)
        return self.form.hessian(p, ev, state, logdet, True)

    @single_blas_thread
    def newton_point(self, p) -> tuple[float, np.ndarray, tuple]:
        """Value and gradient (general path, noise at ``sigma``) and the state that a Hessian
        at the same ``p`` reuses (:meth:`newton_hessian`): the optimiser asks for the
        Hessian at every accepted point, and the evaluation and its gradient state are most of
        its cost."""
        p = self.check_params(p)
        logdet = self._correction is None
        ev = self.form.evaluation(p, self.sigma**2)
        g, _, state = self.form.gradient(p, ev, logdet, False)
        value = ev.nll if logdet else ev.quadratic
        if not logdet:
            value, g = self._tilted(p, value, g)
        return value, g, (p, ev, state)

    @single_blas_thread
    def newton_hessian(self, state: tuple, exact: bool = True) -> np.ndarray:
        """Hessian at the point of a :meth:`newton_point` state; ``exact=False`` leaves out
        the log-determinant's trace terms (``kernels.hessian``), the optimiser's cheap model."""
        p, ev, grad_state = state
        return self.form.hessian(p, ev, grad_state, self._correction is None, exact)

    @single_blas_thread
    def whitened_residual(self, p, sigma=None) -> np.ndarray:
        """``C^{-1} r(p)`` with ``S = C C^T``: i.i.d. standard normal at the truth (first order)."""
        p = self.check_params(p)
        ev = self.form.evaluation(p, self._s2(sigma))
        return ev.whiten() if self.banded else kernels.whiten(ev)

    @single_blas_thread
    def parameter_covariance(
        self, p, sigma=None, method: Literal["sandwich", "gls", "hessian"] = "sandwich"
    ) -> np.ndarray:
        """Approximate covariance of an estimator at ``p``.

        ``"sandwich"``: WENDy-MLE eq. 9, ``G^+ S(p) G^{+T}`` with ``G = dr/dp`` (the
        first-order covariance of weak least squares).
        ``"gls"``: ``(G^T S(p)^{-1} G)^{-1}`` (generalised least squares with fixed weights).
        ``"hessian"``: the inverse observed information, ``H(p)^{-1}``.
        """
        p = self.check_params(p)
        if method in ("sandwich", "gls") and self.banded:
            G = self.dr_dp(p)
            if method == "gls":
                return kernels.gls_covariance(self.whitener(p, sigma)(G))
            A = np.linalg.pinv(G)  # (J, n)
            return A @ self.form.covariance_times(p, self._s2(sigma), A.T)
        if method in ("sandwich", "gls"):
            G = self.dr_dp(p)
            C = self.covariance_factor(p, sigma)
            if method == "sandwich":
                A = np.linalg.pinv(G) @ C
                return A @ A.T
            return kernels.gls_covariance(kernels.solve_lower(C, G))
        if method == "hessian":
            return kernels.inverse_information(self.hessian(p, sigma))
        raise ValueError(f"method must be 'sandwich', 'gls' or 'hessian'; got {method!r}")

    def diagnostics(self, p) -> dict[str, np.ndarray]:
        """Diagnostics at an estimate ``p`` (:func:`~pymc_wendy.weak.diagnostics.diagnose`,
        one entry)."""
        return diagnose([self], self.check_params(p))


def _weak_observation(obs, form_cls: type[WeakForm], initial_state):
    """The observation model the weak form uses: the data's, except that log-normal noise
    falls back to proportional weights (the same variance to first order in ``sigma``) where
    the weak form cannot work on ``log u``: derivative terms and inputs (doses), or a known
    initial state that is 0. The exact stage keeps the log-normal density, which never takes
    the log of the known state (it is not an observation)."""
    if not obs.log_scale:
        return obs
    if initial_state is not None and np.any(initial_state.u0 < 0):
        raise ValueError(
            f"initial_state {initial_state.u0}: log-normal noise describes a positive "
            "solution, so no known initial value can be negative"
        )
    at_zero = initial_state is not None and np.any(initial_state.u0 <= 0)
    if form_cls.log_scale and not at_zero:
        return obs
    return obs.without_log()


def free_initial_refusal(model: ODEModel) -> str | None:
    """Why ``model`` cannot have an initial state with a prior, or None if it can
    (:meth:`WeakLikelihood.initial_nll_grad`: first-order models without inputs)."""
    if max(model.orders) > 1 or model.inputs:
        what = "order > 1" if max(model.orders) > 1 else "inputs"
        return (
            f"{model.name} has {what}: an initial state with a prior is supported for "
            "first-order models without inputs (give a known initial_state, or none)"
        )
    return None
