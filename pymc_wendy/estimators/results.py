"""The result of :func:`pymc_wendy.fit`: estimate, uncertainty, diagnostics, labelled output.

:class:`FitResult` follows :class:`scipy.optimize.OptimizeResult` in spirit (``x``,
``success``, ``message``, ``nit``) and adds what a statistical estimate needs: named
parameters, covariance matrices of several kinds, standard errors, confidence intervals at any
level, a labelled summary table, the fitted trajectory and conversion to xarray.

Covariance kinds (see ``docs/estimators.md``):

``"sandwich"``
    WENDy-MLE eq. 9, ``G^+ S(p) G^{+T}`` with ``G = dr/dp``: the first-order covariance of
    the *ordinary* weak least-squares estimator. It is what the WENDy papers report.
``"gls"``
    ``(G^T S(p)^{-1} G)^{-1}``: the first-order covariance of the generalised least-squares
    estimator with the weights held fixed (WENDy-IRLS at its fixed point; WENDy-MLE when the
    dependence of ``S`` on ``p`` is neglected). Never larger than the sandwich.
``"hessian"``
    The inverse observed information, ``H(p)^{-1}`` with ``H`` the Hessian of the weak
    negative log-likelihood (WENDy-MLE eq. 8). Only meaningful at a local minimum.
``"oe"``
    Output error: ``s^2 (J^T J)^{-1}`` from the Jacobian of the weighted state residuals
    (the ``p`` block of the joint ``(p, u0)`` covariance), with ``s^2`` the reduced
    chi-square when the noise level was estimated.

Other kinds are computed by the estimator that made the fit and stored with the result
(:attr:`FitResult.covariances`): ``"oe"`` above, and the baselines' own (``docs/baselines.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import stats

from pymc_wendy.estimators.identifiability import Identifiability
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.protocol import Likelihood

__all__ = ["BiasCorrection", "FitResult", "FitWarning"]

CovarianceKind = Literal["sandwich", "gls", "hessian", "oe"] | str
_WEAK_KINDS = ("sandwich", "gls", "hessian")


class FitWarning(RuntimeWarning):
    """An estimator stopped without meeting its convergence criteria, the data do not
    determine the parameters at its estimate (``FitResult.identifiability``), or the ODE
    solution at a weak-form estimate does not fit the data or cannot be computed
    (``FitResult.history["forward_check"]``)."""


@dataclass(eq=False)
class BiasCorrection:
    """What ``fit(..., bias_correction=...)`` did (:mod:`pymc_wendy.weak.bias`, ``docs/bias.md``).

    Attributes
    ----------
    method : str
        ``"profile"`` or ``"analytic"``.
    uncorrected : FitResult
        The WENDy-MLE fit the correction started from, with its own covariances and
        intervals (``uncorrected.conf_int()``).
    shift : ndarray, shape (J,)
        Corrected minus uncorrected estimate.
    tilt : ndarray, shape (J,)
        The estimated score mean subtracted from the quadratic form's score (zeros for
        ``"profile"``).
    reference : ndarray, shape (J,)
        Where the tilt was evaluated.
    stages : dict
        The estimate after each stage (``"profile"``, then ``"analytic"``).
    nit, nfev : int
        Newton iterations and evaluations the correction added.
    wall_time : float
        Seconds the correction added to the uncorrected fit.
    """

    method: str
    uncorrected: FitResult
    shift: np.ndarray
    tilt: np.ndarray
    reference: np.ndarray
    stages: dict[str, np.ndarray]
    nit: int
    nfev: int
    wall_time: float

    def shift_in_stderr(self) -> np.ndarray:
        """The shift in units of the uncorrected fit's standard errors."""
        return self.shift / self.uncorrected.stderr

    def __repr__(self) -> str:
        np_ = np.array2string(self.shift_in_stderr(), precision=2)
        return (
            f"BiasCorrection({self.method!r}, shift in uncorrected standard errors {np_}, "
            f"{self.wall_time:.3g} s)"
        )


@dataclass(eq=False)
class FitResult:
    """Outcome of :func:`pymc_wendy.fit`.

    Attributes
    ----------
    x : ndarray, shape (J,)
        The estimate (``p``); :attr:`params` maps names to values.
    method : str
        The registered estimator that made the fit (``"mle"``, ``"irls"``, ``"wls"``,
        ``"oels"``, ``"hybrid"``, ``"deq"``, ``"oc"``; ``pw.estimators.methods()``).
    model : ODEModel
        The model that was fitted.
    success : bool
        Whether the estimator met its convergence criteria and the data determine the
        parameters at the estimate (:attr:`identifiability`).
    status : str
        Short reason the estimator stopped (``"converged"``, ``"max_iter"``,
        ``"normality"``, ``"fallback"``, ``"unidentifiable"``, ``"indefinite_hessian"``,
        ...). ``"no_fit"``: the ODE solution at the estimate explains none of a state's
        variation (checked where the forward residuals are computed: output error,
        ``sigma="residual"`` and the short-series default). ``"forward_misfit"``: the ODE
        solution at a weak-form estimate (``"mle"``, ``"irls"``, ``"wls"``), from the known
        or a fitted initial state, misses the data by more than the noise level allows
        (``history["forward_check"]``; refit with ``method="hybrid"``).
        ``"overconfident"``: it fits the data, but its standard errors are below 0.6 of the
        forward model's Cramer-Rao bound along some combination of parameters, which the
        data then hardly determine (``history["forward_check"]["information_ratio"]``; the
        covariances are kept, refit with ``method="hybrid"``). ``"failed"``: the
        estimator could not evaluate
        its objective at the point it returns (output error whose forward solves all
        failed); ``x`` is then where it stopped, and every covariance, standard error and
        interval is NaN.
    message : str
        Human-readable status.
    nit : int
        Iterations of the (outer) optimiser.
    nfev : int
        Objective evaluations (forward solves for output error).
    wall_time : float
        Seconds, including test-function construction.
    fun : float
        The objective the method minimised, at ``x`` (weak NLL for ``"mle"``, ``r^T r / 2``
        for ``"wls"``, the weighted residual ``r^T S(p_prev)^{-1} r / 2`` for ``"irls"``, half
        the weighted state misfit for ``"oels"``).
    nll : float or None
        Weak negative log-likelihood ``l(x)`` (WENDy-MLE eq. 6), whenever a weak likelihood
        was built; ``inf`` where it is undefined.
    u0 : ndarray or None
        Fitted initial state (output error, hybrid); otherwise fitted on demand by
        :meth:`simulate`. Shape (D,), or (E, D) for several experiments.
    sigma : ndarray, shape (D,) or (E, D)
        Noise standard deviation per state used (of ``log U`` for log-normal noise); a row
        per experiment for several.
    sigma_estimated : bool
        Whether ``sigma`` was estimated from the data.
    noise : {"normal", "lognormal"}
    covariance_kind : str
        Default kind of :meth:`covariance` for this method.
    likelihood : WeakLikelihood, JointLikelihood or None
        The weak likelihood (test functions, data, noise); None for pure output error.
    t, U : ndarray, or tuples of arrays
        The data; a tuple with one array per experiment for several. Times given as
        datetimes or durations are numbers here: ``time_origin + t * time_unit``.
    time_origin, time_unit : datetime64 / timedelta64 and str, or None
        Where the numeric times ``t`` start and their unit (``"D"``, ``"s"``, ...), when the
        data came with datetime or duration times (one experiment); None otherwise. The
        parameters are in ``1 / time_unit`` (rates per day for ``"D"``).
    covariances : dict
        Covariances the estimator computed itself, by kind (``{"oe": ...}`` for output
        error); the weak-form kinds are computed on demand from ``likelihood``.
    history : dict
        Method-specific record: IRLS iterates and Shapiro-Wilk p-values, the starts of a
        multi-start fit and their NLLs, or the stages of the hybrid method. Weak-form fits
        add ``"forward_check"``: whether the ODE solution at the estimate fits the data
        (:mod:`pymc_wendy.estimators._forward_check`): ``verdict`` (``"passed"``,
        ``"misfit"``, ``"skipped"`` or ``"solve_failed"``), ``note``, and per state
        ``residual_sd``, ``noise_sd``, their ``ratio`` and ``p_value``, with ``dof``,
        ``noise_dof``, ``u0``, ``growth`` (of ``|du/du0|`` over the data) and ``time_s``.
    bias_correction : BiasCorrection or None
        Set when the fit was bias-corrected: the estimate, covariances and intervals are then
        the corrected estimator's (the inverse Hessian of the corrected objective,
        ``likelihood``), and this record keeps the uncorrected fit.
    inputs : dict or tuple of dict
        The model's known inputs (name to :class:`~pymc_wendy.model.inputs.Input`), a tuple of
        them for several experiments; empty for models without inputs.
    identifiability : Identifiability or None
        Whether the data determine the parameters at the estimate
        (:mod:`pymc_wendy.estimators.identifiability`): the rank of the residual Jacobian
        and, for the Hessian covariance, whether the Hessian is positive definite. When not,
        ``success`` is False (status ``"unidentifiable"`` or ``"indefinite_hessian"``), the
        message names the parameters, and the covariances and intervals are NaN.
    """

    x: np.ndarray
    method: str
    model: ODEModel
    success: bool
    status: str
    message: str
    nit: int
    nfev: int
    wall_time: float
    fun: float
    nll: float | None
    sigma: np.ndarray
    sigma_estimated: bool
    noise: str
    covariance_kind: str
    t: np.ndarray
    U: np.ndarray
    likelihood: Likelihood | None = None
    u0: np.ndarray | None = None
    history: dict[str, Any] = field(default_factory=dict)
    bias_correction: BiasCorrection | None = None
    inputs: dict | tuple = field(default=(), repr=False)
    covariances: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    identifiability: Identifiability | None = field(default=None, repr=False)
    time_origin: Any = field(default=None, repr=False)
    time_unit: str | None = field(default=None, repr=False)
    _cov_cache: dict = field(default_factory=dict, repr=False)

    # --- identity ------------------------------------------------------------------------
    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(self.model.params)

    @property
    def params(self) -> dict[str, float]:
        """The estimate as ``{name: value}``."""
        return dict(zip(self.param_names, map(float, self.x), strict=True))

    @property
    def test_functions(self):
        """The test functions used (None for pure output error)."""
        return None if self.likelihood is None else self.likelihood.test_functions

    def __repr__(self) -> str:
        width = max(len(n) for n in self.param_names)
        corrected = "" if self.bias_correction is None else f", {self.bias_correction.method}"
        lines = [
            f"FitResult ({self.method}{corrected}, {self.model.name}): {self.message}",
            f"  success: {self.success}   status: {self.status}   nit: {self.nit}   "
            f"nfev: {self.nfev}   wall time: {self.wall_time:.3g} s",
            f"  nll: {self.nll if self.nll is None else f'{self.nll:.6g}'}   "
            f"fun: {self.fun:.6g}   sigma: {np.array2string(self.sigma, precision=3)}"
            f"{' (estimated)' if self.sigma_estimated else ''}",
        ]
        try:
            se = self.stderr
        except (WeakLikelihoodError, ValueError):
            se = np.full_like(self.x, np.nan)
        for name, v, s in zip(self.param_names, self.x, se, strict=True):
            lines.append(f"  {name:>{width}} = {v: .6g}  (se {s:.3g})")
        return "\n".join(lines)

    # --- uncertainty ---------------------------------------------------------------------
    def covariance(self, kind: CovarianceKind | None = None) -> np.ndarray:
        """Approximate covariance of the estimator, shape (J, J) (module docstring for kinds).

        NaN for a failed fit, for one whose parameters the data do not determine
        (:attr:`identifiability`), and for ``"hessian"`` where :func:`fit` found the Hessian
        not positive definite: never a finite covariance for an ill-posed fit.

        Raises
        ------
        ValueError
            An unknown kind, or a weak-form kind for a pure output-error fit.
        WeakLikelihoodError
            ``"hessian"`` where the Hessian is not positive definite (not a local minimum)
            and the fit did not come through :func:`fit`'s check.
        """
        kind = self.covariance_kind if kind is None else kind
        ident = self.identifiability
        if (
            self.status == "failed"
            or (ident is not None and not ident.identifiable)
            or (kind == "hessian" and ident is not None and ident.hessian_definite is False)
        ):
            return np.full((self.x.size, self.x.size), np.nan)
        if kind in self._cov_cache:
            return self._cov_cache[kind].copy()
        if kind in self.covariances:
            cov = np.asarray(self.covariances[kind], dtype=float)
        elif kind in _WEAK_KINDS:
            if self.likelihood is None:
                raise ValueError(
                    f"covariance kind {kind!r} needs the weak likelihood; this {self.method!r} "
                    "fit has none (use kind='oe')"
                )
            if not np.isfinite(self.nll if self.nll is not None else np.inf):
                raise WeakLikelihoodError("the weak likelihood is undefined at the estimate")
            cov = self.likelihood.parameter_covariance(self.x, method=kind)
        elif kind == "oe":
            raise ValueError(f"no output-error covariance for method {self.method!r}")
        else:
            known = sorted({*_WEAK_KINDS, "oe", *self.covariances})
            raise ValueError(f"kind must be one of {known}; got {kind!r}")
        self._cov_cache[kind] = cov
        return cov.copy()

    @property
    def cov(self) -> np.ndarray:
        """:meth:`covariance` of the default kind (:attr:`covariance_kind`)."""
        return self.covariance()

    @property
    def stderr(self) -> np.ndarray:
        """Standard errors, ``sqrt(diag(cov))``."""
        return np.sqrt(np.diag(self.cov))

    def conf_int(self, level: float = 0.95, kind: CovarianceKind | None = None) -> np.ndarray:
        """Wald confidence intervals ``x -/+ z se``, shape (J, 2).

        ``level=0.9545`` gives the papers' ``2 sqrt(C_jj)`` intervals.
        """
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1); got {level}")
        z = stats.norm.ppf(0.5 + level / 2)
        se = np.sqrt(np.diag(self.covariance(kind)))
        return np.column_stack([self.x - z * se, self.x + z * se])

    # --- labelled output -----------------------------------------------------------------
    def summary(self, level: float = 0.95, kind: CovarianceKind | None = None, truth=None):
        """A table (pandas DataFrame) indexed by parameter name.

        Columns ``estimate``, ``std_err``, ``ci_lower``, ``ci_upper`` (at ``level``); with
        ``truth`` also ``true`` and ``covered``. A bias-corrected fit adds ``uncorrected``
        (the WENDy-MLE estimate) and ``shift_se`` (the correction in its standard errors).
        """
        import pandas as pd

        se = np.sqrt(np.diag(self.covariance(kind)))
        ci = self.conf_int(level, kind)
        table = pd.DataFrame(
            {"estimate": self.x, "std_err": se, "ci_lower": ci[:, 0], "ci_upper": ci[:, 1]},
            index=pd.Index(self.param_names, name="param"),
        )
        if self.bias_correction is not None:
            table["uncorrected"] = self.bias_correction.uncorrected.x
            try:
                table["shift_se"] = self.bias_correction.shift_in_stderr()
            except (WeakLikelihoodError, ValueError):
                table["shift_se"] = np.nan
        if truth is not None:
            truth = np.asarray(truth, dtype=float)
            if truth.shape != self.x.shape:
                raise ValueError(f"truth must have shape {self.x.shape}; got {truth.shape}")
            table["true"] = truth
            table["covered"] = (ci[:, 0] <= truth) & (truth <= ci[:, 1])
        if not self.success:
            table["success"] = False  # so that a printed table cannot read as a good fit
        table.attrs.update(success=bool(self.success), status=self.status, message=self.message)
        return table

    def to_xarray(self, level: float = 0.95, kinds: Sequence[str] | None = None):
        """An :class:`xarray.Dataset` with the estimate, covariances and intervals.

        Variables: ``estimate`` (param), ``std_err`` and ``ci`` (kind, param[, bound]),
        ``covariance`` (kind, param, param_), and ``u0`` (initial_state: the companion
        states ``x, x', ...`` of the model) when the fit has one. Every kind available for
        this fit is included unless ``kinds`` is given; kinds that fail (e.g. an indefinite
        Hessian) are NaN.
        Scalars (method, success, nll, wall time, ...) go into ``attrs``.
        """
        import xarray as xr

        if kinds is None:
            weak = _WEAK_KINDS if self.likelihood is not None else ()
            kinds = [*weak, *(k for k in self.covariances if k not in weak)]
        J = self.x.size
        covs = np.full((len(kinds), J, J), np.nan)
        for i, k in enumerate(kinds):
            try:
                covs[i] = self.covariance(k)
            except (WeakLikelihoodError, ValueError, np.linalg.LinAlgError):
                pass
        se = np.sqrt(np.einsum("kjj->kj", covs))
        z = stats.norm.ppf(0.5 + level / 2)
        ci = np.stack([self.x - z * se, self.x + z * se], axis=-1)
        names = list(self.param_names)
        ds = xr.Dataset(
            {
                "estimate": ("param", self.x),
                "std_err": (("kind", "param"), se),
                "ci": (("kind", "param", "bound"), ci),
                "covariance": (("kind", "param", "param_"), covs),
            },
            coords={
                "param": names,
                "param_": names,
                "kind": list(kinds),
                "bound": ["lower", "upper"],
            },
            attrs={
                "method": self.method,
                "model": self.model.name,
                "success": int(self.success),
                "status": self.status,
                "message": self.message,
                "nit": self.nit,
                "nfev": self.nfev,
                "wall_time": self.wall_time,
                "fun": self.fun,
                "nll": np.nan if self.nll is None else self.nll,
                "noise": self.noise,
                **({"sigma": self.sigma} if np.ndim(self.sigma) == 1 else {}),
                "sigma_estimated": int(self.sigma_estimated),
                "level": level,
                "default_kind": self.covariance_kind,
                "bias_correction": (
                    "none" if self.bias_correction is None else self.bias_correction.method
                ),
            },
        )
        if np.ndim(self.sigma) == 2:  # several experiments: a row each (not an attribute)
            ds["sigma"] = (("experiment", "state"), self.sigma)
        if self.u0 is not None:  # the companion state (x, x', ...) for models of order > 1
            ds["u0"] = (("experiment", "initial_state")[-np.ndim(self.u0) :], self.u0)
            ds = ds.assign_coords(initial_state=list(self.model.companion_states))
        if "state" in ds.dims:
            ds = ds.assign_coords(state=list(self.model.states))
        return ds

    @property
    def n_experiments(self) -> int:
        """Number of experiments fitted (1 for a single time series)."""
        return len(self.t) if isinstance(self.t, tuple) else 1

    def diagnostics(self):
        """Per-experiment diagnostics at the estimate, an :class:`xarray.Dataset` over
        ``experiment``: sizes, each experiment's share of the objective, the mean square
        and Shapiro-Wilk p-value of its whitened weak residual, and a score test of its
        consistency with the other experiments
        (:meth:`pymc_wendy.weak.joint.JointLikelihood.diagnostics`).
        """
        import xarray as xr

        if self.likelihood is None:
            raise ValueError(
                f"diagnostics need the weak likelihood; this {self.method!r} fit has none"
            )
        lik = self.likelihood
        values = lik.diagnostics(self.x)
        return xr.Dataset(
            {k: ("experiment", v) for k, v in values.items()},
            coords={"experiment": np.arange(self.n_experiments)},
            attrs={"method": self.method, "model": self.model.name},
        )

    # --- trajectory ----------------------------------------------------------------------
    def simulate(self, t=None, u0=None, experiment: int | None = None, **solver) -> np.ndarray:
        """The fitted trajectory ``u(t; x, u0)`` of the observed states, shape (len(t), D).

        ``t`` defaults to the data times (it must start at the data's first time unless
        ``u0`` is given for ``t[0]``); ``u0`` to the known initial state of the fit (solved
        from its ``t0``), else to the fitted initial state (for weak-form
        estimates it is fitted once to the first quarter of the data with ``p`` held at the
        estimate, :func:`pymc_wendy.estimate_initial_state`). ``solver`` options go to
        :func:`pymc_wendy.solve` (default: LSODA, ``rtol=1e-7``). For several experiments,
        ``experiment`` (an index) says whose times and initial state. For a model of order
        > 1, ``u0`` is the companion state (``model.companion_states``) and the known inputs
        are those of the fit; :func:`pymc_wendy.solve` gives the derivatives too.
        """
        from pymc_wendy.estimators.output_error import DEFAULT_SOLVER, fit_initial_state
        from pymc_wendy.model.simulate import solve

        E = self.n_experiments
        if E > 1 and experiment is None:
            raise ValueError(f"this fit has {E} experiments: pass experiment=0..{E - 1}")
        if experiment is not None and not 0 <= int(experiment) < E:
            raise ValueError(f"experiment must be in 0..{E - 1}; got {experiment}")
        e = 0 if experiment is None else int(experiment)
        t_data = self.t[e] if E > 1 else self.t
        t = t_data if t is None else np.asarray(t, dtype=float)
        inputs = self.inputs[e] if E > 1 and self.inputs else self.inputs if E == 1 else None
        opts = {**DEFAULT_SOLVER, **solver}
        known = getattr(self.likelihood, "initial_state", None) if E == 1 else None
        if u0 is None and known is not None:  # solved from it, as the fit's forward solves
            if t[0] < known.t0:
                raise ValueError(f"t starts at {t[0]:g}, before the known state's t0 {known.t0:g}")
            model = known.solved_model(self.model)
            grid = t if t[0] == known.t0 else np.concatenate([[known.t0], t])
            U = solve(model, self.x, known.u0, grid, inputs=inputs or None, **opts)
            return U[grid.size - t.size :, model.observed_columns]
        if u0 is None:
            if t[0] != t_data[0]:
                raise ValueError(
                    f"t starts at {t[0]:g}, not at the data's first time {t_data[0]:g}; "
                    "pass u0 for that time"
                )
            if self.u0 is None:
                liks = self.likelihood.experiments if E > 1 else [self.likelihood]
                u0s = [
                    fit_initial_state(
                        lik.base_model, lik.t, lik.X, lik.noise, self.x, inputs=lik.inputs
                    )
                    for lik in liks
                ]
                self.u0 = np.array(u0s) if E > 1 else u0s[0]
            u0 = self.u0[e] if E > 1 else self.u0
        U = solve(self.model, self.x, u0, t, inputs=inputs or None, **opts)
        return U[:, self.model.observed_columns]
