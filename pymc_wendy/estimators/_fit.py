"""The entry point :func:`fit`: validate once, then dispatch through the registry."""

from __future__ import annotations

import contextvars
import functools
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import Executor

import numpy as np

from pymc_wendy._threads import single_blas_thread
from pymc_wendy.estimators import registry
from pymc_wendy.estimators._forward_check import (
    compare_information,
    filter_dof,
    forward_check,
    misfit_message,
    overconfidence_message,
)
from pymc_wendy.estimators._problem import prepare
from pymc_wendy.estimators.identifiability import assess
from pymc_wendy.estimators.output_error import residual_noise_of_data
from pymc_wendy.estimators.results import FitResult, FitWarning
from pymc_wendy.estimators.wls import default_starts
from pymc_wendy.model.data import MissingDataWarning, ObservedData, as_data
from pymc_wendy.model.input_output import eliminate_hidden
from pymc_wendy.model.observation import as_observation, floored_state
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.simulate import SimulationError
from pymc_wendy.model.total_derivative import domain_check
from pymc_wendy.weak import bias
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.likelihood import (
    SHORT_SERIES,
    Noise,
    ShortSeriesWarning,
    WeakLikelihood,
    warn_filter_fallback,
)
from pymc_wendy.weak.protocol import Likelihood

__all__ = ["fit"]

#: True while :func:`fit` runs the inner fits of ``sigma="residual"``, whose estimate it
#: checks against the data itself once the noise level is final
_INNER = contextvars.ContextVar("pymc_wendy_inner_fit", default=False)
#: the degrees of freedom of a noise level from the forward residuals, while :func:`fit`
#: runs the second inner fit of ``sigma="residual"`` at that level (hybrid's own check)
_RESIDUAL_DOF = contextvars.ContextVar("pymc_wendy_residual_dof", default=None)


@single_blas_thread
def fit(
    model: ODEModel | WeakLikelihood,
    t=None,
    U=None,
    method: str = "mle",
    *,
    p0=None,
    bounds=None,
    noise: Noise = "normal",
    sigma=None,
    u0=None,
    test_functions=None,
    ridge: float = 1e-10,
    n_starts: int = 1,
    seed: int | None = None,
    executor: Executor | None = None,
    solver: Mapping | None = None,
    options: Mapping | None = None,
    bias_correction: str | None = None,
    inputs=None,
    time_unit: str | None = None,
    initial_state=None,
    t0=None,
) -> FitResult:
    """Estimate the parameters of an ODE from noisy data.

    Parameters
    ----------
    model : ODEModel, WeakLikelihood or JointLikelihood
        The ODE, or a ready weak likelihood of one or several experiments (then ``t``,
        ``U``, ``noise``, ``sigma``, ``test_functions`` and ``ridge`` come from it).
    t : array, shape (M+1,), or list of arrays, optional
        Strictly increasing observation times; for several experiments sharing the
        parameters, a list with one time array per experiment (each its own grid).
        Datetimes and durations are counted from the first time point in ``time_unit``.
        Optional when ``U`` carries its times (a DataFrame's index, a DataArray's time
        coordinate).
    U : array, shape (M+1, D), DataFrame, DataArray, masked array, or list of them
        Observations; a list ``[U1, U2, ...]`` matching ``t`` for several experiments.
        Labelled columns (DataFrame) and dims (DataArray) are matched to the model's states
        by name. NaN or masked entries are missing: their time points are left out
        (:func:`pymc_wendy.model.data.as_data`, ``docs/data.md``).
        Their weak residuals are independent, so the objective is the sum of the
        experiments' (:class:`~pymc_wendy.weak.joint.JointLikelihood`;
        ``docs/experiments.md``).
    method : str
        Estimator: ``"mle"`` (default), ``"irls"``, ``"wls"``, ``"oels"``, ``"hybrid"``
        (:mod:`pymc_wendy.estimators` lists them; :func:`~pymc_wendy.estimators.methods`
        gives every registered name).
    p0 : array, shape (J,), optional
        Starting point. Default: weak least squares for models linear in the parameters;
        otherwise the centre of ``bounds`` refined by weak least squares (a nonlinear model
        needs ``p0`` or ``bounds``).
    bounds : sequence of (lower, upper) or scipy.optimize.Bounds, optional
        Box constraints on ``p``, respected by every method (IRLS's steps for models
        linear in the parameters are then bounded linear least squares on the whitened
        system); either side may be infinite (``(0, np.inf)``). Also the box multi-start
        points are drawn from.
    noise : {"normal", "lognormal"}
        Additive Gaussian or multiplicative log-normal noise.
    sigma : float, array (D,), "filter" or "residual", optional
        Noise standard deviation per state (of ``log U`` for log-normal noise), finite and
        > 0 (zero, negative or NaN is a ValueError). When omitted, estimated from the data:
        with the high-order filter (``"filter"``) on series of 64 points or more and for
        several experiments; as with ``"residual"`` on a shorter series of one experiment
        (the filter over- or underestimates the noise there: ``docs/data.md``), falling
        back to the filter, with a :class:`~pymc_wendy.ShortSeriesWarning`, if the forward
        solve fails. For several experiments, a
        scalar for all, or a list with one entry (None, scalar or (D,)) per experiment.
        ``"residual"`` (one experiment): fit with the filter's estimate, estimate the noise
        from the residuals of the ODE solution at that fit (output error's own initial
        state, else one fitted to all data:
        :func:`~pymc_wendy.estimators.output_error.residual_noise`)
        with ``N - (J + n_0) / D`` degrees of freedom, and fit again with it;
        ``history["noise"]`` records both estimates. The better choice for short series and
        forced models (``docs/higher_order.md``).
    u0 : array (D,), optional
        Starting initial state for output error (default: the value at ``t[0]`` of a
        parabola fitted to the first points of the data); shape (E, D), a row per
        experiment, for several experiments (each has its own initial state).
    test_functions : TestFunctions, dict, "local", or (phi, dphi), optional
        See :class:`WeakLikelihood`. ``"local"``: un-reduced bumps of one radius with a
        banded covariance, linear in the series length (the default for first-order models
        above 1025 points; ``docs/performance.md``, "Long series"). For several
        experiments, a dict of options (or ``"local"``) for all, or a list with one entry per
        experiment.
    ridge : float
        Covariance relaxation ``S <- (1 - ridge) S + ridge c I`` (IRLS's ``alpha``), relative
        to the size ``c`` of ``S`` (:class:`~pymc_wendy.weak.likelihood.WeakLikelihood`).
    n_starts : int
        ``"mle"``/``"hybrid"``: number of starting points; the first is ``p0`` (or its
        default), the others are drawn uniformly in ``bounds`` with ``seed``. The lowest
        finite NLL wins.
    seed : int, optional
        Seed of the multi-start draws.
    executor : concurrent.futures.Executor, optional
        Runs the multi-start optimisations (e.g. a ``ProcessPoolExecutor`` or a Dask
        client's executor); default: one after another in this process.
    solver : dict, optional
        Forward-solver options for output error (:data:`output_error.DEFAULT_SOLVER`).
    options : dict, optional
        Method options: for ``"mle"`` those of ``scipy.optimize.minimize`` (``maxiter``,
        ``gtol``, ...); for ``"irls"`` ``max_iter`` (100), ``tol`` (1e-6), ``sw_tol`` (1e-4),
        ``sw_start`` (10); for ``"oels"`` those of ``scipy.optimize.least_squares``; for
        ``"wls"`` ``max_iter`` and ``tol`` of the Gauss-Newton iteration; for ``"hybrid"`` a
        dict with keys ``"mle"`` and ``"oels"``.
    bias_correction : {None, "auto", "analytic", "profile"}
        ``method="mle"`` only. Remove the weak form's ``O(sigma^2)`` bias
        (:mod:`pymc_wendy.weak.bias`, ``docs/bias.md``): ``"profile"`` minimises the quadratic
        form without the log-determinant; ``"analytic"`` (what ``"auto"`` picks) also
        subtracts the closed-form mean of its score. The result's estimate, covariances and
        intervals are the corrected ones; ``result.bias_correction`` keeps the uncorrected
        fit, the shift and the cost. ``None`` (default) is WENDy-MLE.
    inputs : mapping, optional
        Values of the model's known inputs (``ODEModel(..., inputs=[...])``): names to
        :class:`~pymc_wendy.model.inputs.Input` objects, callables or arrays on ``t``; a list of
        mappings for several experiments. See ``docs/higher_order.md``.
    time_unit : str, optional
        Unit of a datetime or duration time axis: ``"s"``, ``"m"`` (minutes), ``"h"``,
        ``"D"`` (default for datetimes), ``"W"``, ... (seconds by default for durations). The
        parameters are per that unit.
    initial_state : array or mapping, optional
        The state known exactly at ``t0`` (a concentration of 0 before the first dose, a
        known starting count): the weak-form estimators add boundary test functions that
        carry it (:class:`WeakLikelihood`; ``docs/data.md``), and the short-series noise
        estimate solves from it. One experiment of a first-order model (inputs allowed), or
        of a higher-order one at rest (``model.companion_states`` all zero; ``docs/doses.md``).
    t0 : float or datetime, optional
        When ``initial_state`` holds (default: the first time point); at or before the
        first observation.

    Returns
    -------
    FitResult
        Estimate, covariances, intervals, status. An estimator that did not converge sets
        ``success=False`` and issues a :class:`FitWarning`; so does a fit whose parameters
        the data do not determine (fewer residuals than parameters, a rank-deficient
        residual Jacobian, or for ``"mle"`` a Hessian that is not positive definite at the
        estimate: :mod:`pymc_wendy.estimators.identifiability`), whose message then names
        the parameters and whose covariances and intervals are NaN. A weak-form estimate
        (``"mle"``, ``"irls"``, ``"wls"``) of one experiment is checked against the data by
        one forward solve (the known ``initial_state``, else one fitted to all the data):
        forward residuals too large for the noise level give ``success=False``, status
        ``"forward_misfit"`` and a :class:`FitWarning` pointing to ``method="hybrid"``; a
        forward solve that fails at the estimate, a warning; weak standard errors below 0.6 of
        the forward model's Cramer-Rao bound in some direction (a combination the data
        hardly determine), ``success=False``, status ``"overconfident"`` and a warning.
        ``history["forward_check"]`` keeps the numbers
        (:mod:`pymc_wendy.estimators._forward_check`, ``docs/estimators.md``).

    Examples
    --------
    >>> import pymc_wendy as pw
    >>> data = pw.get_problem("logistic").simulate(noise_ratio=0.05, subsample=2, seed=1)
    >>> res = pw.fit(pw.get_problem("logistic").model, data.t, data.U)
    >>> res.success, res.x.round(1)
    (True, array([1., 1.]))
    """
    start_time = time.perf_counter()
    estimator = registry.get(method)
    _check_sigma(model, sigma)
    model, U, sigma, initial_state, eliminated = eliminate_hidden(model, U, sigma, initial_state)
    data = _one_experiment(model, t, U, time_unit)
    # (counts and combined errors carry their own variance: no noise level to estimate)
    auto = (
        sigma is None and data is not None and data.t.size < SHORT_SERIES
        and as_observation(noise).scaled
    )  # fmt: skip
    if isinstance(sigma, str) and sigma == "filter":
        sigma = None
    elif isinstance(sigma, str) or auto:
        res = _fit_residual_noise(
            estimator, model, t, U, sigma, auto, dict(
                p0=p0, bounds=bounds, noise=noise, u0=u0, test_functions=test_functions,
                ridge=ridge, n_starts=n_starts, seed=seed, executor=executor, solver=solver,
                options=options, bias_correction=bias_correction, inputs=inputs,
                time_unit=time_unit, initial_state=initial_state, t0=t0,
            ), start_time,
        )  # fmt: skip
        return _record_hidden(res, eliminated)
    correction = _bias_correction(estimator, method, model, bias_correction)
    problem = prepare(
        estimator, model, t, U, p0=p0, bounds=bounds, noise=noise, sigma=sigma, u0=u0,
        test_functions=test_functions, ridge=ridge, n_starts=n_starts, seed=seed,
        executor=executor, solver=solver, options=options, bias_correction=correction,
        inputs=inputs, time_unit=time_unit, initial_state=initial_state, t0=t0,
    )  # fmt: skip
    if data is not None:
        problem.check = functools.partial(
            _estimate_check, solver=solver, residual_dof=_RESIDUAL_DOF.get()
        )
    if estimator.needs_start and problem.start is None:
        first, *others = default_starts(
            problem.weak_likelihood() if problem.model.is_linear_in_params else problem.likelihood,
            problem.model,
            problem.bounds,
        )
        problem.start, problem.runner_ups = first, tuple(others)
    res = estimator.run(problem)
    assess(res, problem.bounds)
    res = _record_hidden(res, eliminated)
    if data is not None:
        res.time_origin, res.time_unit = data.origin, data.time_unit
    if not res.success:
        warnings.warn(f"{method}: {res.message}", FitWarning, stacklevel=2)
    if _forward_checked(estimator, res) and not _INNER.get():
        # stack: _check_forward, fit, its BLAS wrapper, the caller
        _check_forward(res, solver, data is not None, stacklevel=4)
    res.wall_time = time.perf_counter() - start_time
    return res


def _bias_correction(estimator, method: str, model, bias_correction):
    """The resolved ``bias_correction`` of ``fit``, refused for a method without one and for
    a likelihood corrected already."""
    correction = bias.resolve(bias_correction)
    if correction is not None and not estimator.bias_correction:
        supported = " or ".join(
            f"method={n!r}" for n in registry.names() if registry.get(n).bias_correction
        )
        raise ValueError(
            f"bias_correction applies to {supported} (the corrected objective replaces the "
            f"weak likelihood); got method={method!r}"
        )
    if isinstance(model, Likelihood) and model.correction_method:
        raise ValueError(
            "the likelihood is already bias-corrected; fit the uncorrected likelihood "
            "with bias_correction= instead"
        )
    return correction


def _record_hidden(res: FitResult, eliminated) -> FitResult:
    """``res`` with ``history["hidden"]`` for a fit whose data never measure some states:
    which, their expressions in the observed states, those dropped, the equations fitted."""
    if eliminated is not None:
        res.history["hidden"] = {
            "states": [s for s in eliminated.latent.states if s not in eliminated.model.states],
            "expressions": dict(eliminated.hidden),
            "dropped": list(eliminated.dropped),
            "model": eliminated.model,
        }
    return res


def _check_sigma(model, sigma) -> None:
    """A given noise level must be finite and positive: ``sigma=0`` claims noise-free data,
    and the covariances would then be of the order of the ridge (standard errors ~1e-7)."""
    if isinstance(model, Likelihood):
        values = [np.asarray(model.sigma, dtype=float)]
        where = f"the {type(model).__name__}'s sigma"
    elif sigma is None or isinstance(sigma, str):  # estimated, or "residual" (checked later)
        return
    else:
        where = "sigma"
        entries = list(sigma) if isinstance(sigma, list | tuple) else [sigma]
        try:
            values = [np.asarray(s, dtype=float) for s in entries if s is not None]
        except (TypeError, ValueError):
            raise TypeError(
                f"sigma must be a number, an array (one per state), a list with one entry "
                f"per experiment, None or 'residual'; got {sigma!r}"
            ) from None
    for v in values:
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(
                f"{where} (the noise standard deviation) must be finite and > 0; got "
                f"{v.tolist()}. Zero noise leaves nothing to estimate an uncertainty from "
                "(standard errors would be of the order of the ridge): omit sigma to "
                "estimate it from the data"
            )


def _one_experiment(model, t, U, time_unit) -> ObservedData | None:
    """The data of one experiment of an ODE model as the fit will see them (kept rows, time
    origin and unit); None for a likelihood or several experiments. Bad data are left for
    the fit itself to report."""
    if not isinstance(model, ODEModel) or isinstance(t, list | tuple) or isinstance(U, list):
        return None
    try:
        with warnings.catch_warnings():  # reported again by the fit itself
            warnings.simplefilter("ignore", MissingDataWarning)
            return as_data(t, U, model.states, time_unit=time_unit, undefined=domain_check(model))
    except (ValueError, TypeError):
        return None


def _fit_residual_noise(
    estimator, model, t, U, sigma: str | None, auto: bool, kwargs: dict, start_time
) -> FitResult:
    """``fit(..., sigma="residual")``: fit, re-estimate the noise from the forward residuals
    at the estimate, fit again from there. The default on short series, where a failed
    forward solve falls back to the filter's estimate with a warning instead of an error."""
    if not auto and sigma != "residual":
        raise ValueError(
            f"sigma must be a number, an array, None, 'filter' or 'residual'; got {sigma!r}"
        )
    if not isinstance(model, ODEModel) or isinstance(t, list | tuple):
        raise ValueError("sigma='residual' needs an ODEModel and the data of one experiment (t, U)")
    token = _INNER.set(True)  # the final estimate is checked below
    try:
        with warnings.catch_warnings():  # the filter's estimate is only the first step here
            warnings.simplefilter("ignore", ShortSeriesWarning)
            first = fit(model, t, U, estimator.name, sigma="filter", **kwargs)
    finally:
        _INNER.reset(token)
    # output error has its own initial state; the weak-form estimators leave it free, and it
    # is fitted to all the data
    u0 = first.u0
    X = np.log(first.U) if as_observation(first.noise).log_scale else first.U
    lik = first.likelihood
    known, obs = (None, None) if lik is None else (lik.initial_state, lik.weak_observation)
    solved = model if known is None else known.solved_model(model)
    try:
        est = residual_noise_of_data(
            solved, first.t, X, first.noise, first.x, first.inputs, kwargs["solver"], u0, known,
            observation=obs,
        )  # fmt: skip
    except SimulationError as exc:
        if auto:
            warn_filter_fallback(first.t.size, exc, stacklevel=3)
            first.history["forward_check"] = {
                "verdict": "skipped",
                "note": f"the ODE solve at the estimate failed ({exc}): see the ShortSeriesWarning",
            }
            first.wall_time = time.perf_counter() - start_time
            return first
        raise SimulationError(
            f"sigma='residual': the ODE solve at the first estimate failed ({exc}); pass sigma"
        ) from exc
    again = {**kwargs, "p0": first.x, "n_starts": 1}
    if kwargs["u0"] is None and first.u0 is not None and known is None:
        again["u0"] = first.u0  # output error's fitted initial state, as a start
    token, dof = _INNER.set(True), _RESIDUAL_DOF.set(est.dof)
    try:
        res = fit(model, t, U, estimator.name, sigma=est.sigma, **again)
    finally:
        _INNER.reset(token)
        _RESIDUAL_DOF.reset(dof)
    res.sigma_estimated = True
    if res.u0 is None:  # fitted to all the data: the trajectory res.simulate() draws
        res.u0 = est.u0
    res.history["noise"] = {
        "method": "residual",
        "filter_sigma": first.sigma,
        "first_estimate": first.x,
        "u0": est.u0,
        "dof": est.dof,
    }
    _check_reproduces_data(res, X, est.sigma)
    if _forward_checked(estimator, res):
        _check_forward(res, kwargs["solver"], True, residual_dof=est.dof, stacklevel=5)
    res.wall_time = time.perf_counter() - start_time
    return res


def _check_reproduces_data(res: FitResult, X: np.ndarray, residual_sd: np.ndarray) -> None:
    """An estimate whose ODE solution explains none of a state's variation (forward
    residuals as large as the data's own spread) is no fit: on Lotka-Volterra with 11 points
    (3 per period) the weak form returns near-zero parameters 9 standard errors from the
    truth, which only this shows."""
    spread = np.std(X, axis=0, ddof=1)
    bad = np.flatnonzero(residual_sd >= spread)
    if bad.size == 0:
        return
    names = ", ".join(res.model.states[i] for i in bad)
    reason = (
        f"the ODE solution at the estimate explains none of the variation of {names} "
        f"(residual sd {np.array2string(residual_sd[bad], precision=3)} >= data sd "
        f"{np.array2string(spread[bad], precision=3)}): the time points may be too sparse for "
        "the dynamics (the weak form's integrals need several points per oscillation or "
        "transient), or the model does not describe the data"
    )
    if res.success:
        res.success = False
        res.status = "no_fit"
        res.message = f"{reason} (estimator: {res.message})"
        warnings.warn(f"{res.method}: {res.message}", FitWarning, stacklevel=4)


def _forward_checked(estimator, res: FitResult) -> bool:
    """Whether ``fit`` checks ``res`` against the forward solution: an estimate that never
    met a forward solve (an estimator whose every input is the weak likelihood,
    registry.Estimator's ``weak_only``, or a hybrid fit's fallback to its WENDy-MLE), or
    one from a known initial state, which output error cannot move: solved from a wrong
    one, Lotka-Volterra's output error converged to a curve that misses the data."""
    known = getattr(res.likelihood, "initial_state", None) is not None
    return estimator.weak_only or res.status == "fallback" or known


def _check_forward(
    res: FitResult, solver, one: bool, *, residual_dof: float | None = None, stacklevel: int
) -> None:
    """The forward check of a weak-form estimate (:mod:`._forward_check`), in
    ``res.history["forward_check"]``: a fit whose ODE solution misses the data gets
    ``success=False``, status ``"forward_misfit"`` and a :class:`FitWarning`; one whose weak
    covariance claims more than the forward information allows, status ``"overconfident"``;
    one whose solve fails at the estimate keeps its result with a warning. ``one``: the fit
    is of one experiment of an :class:`ODEModel` (not of a likelihood object or several
    experiments); ``residual_dof``: the noise level came from the forward residuals at a
    first estimate, with these degrees of freedom. A hybrid fit's fallback to its WENDy-MLE
    carries the entry its estimator computed at the same estimate and noise level
    (``FitProblem.check``), which is kept."""
    if not res.success:
        note = "not checked: the fit did not succeed"
    elif not one or res.n_experiments != 1:
        note = (
            "not checked: only a fit of one experiment of an ODEModel is (this one was of a "
            "likelihood object or of several experiments)"
        )
    else:
        note = None
    if note is not None:
        res.history["forward_check"] = {"verdict": "skipped", "note": note}
        return
    entry = res.history.get("forward_check")
    if entry is None:
        entry = _forward_entry(res, solver, residual_dof=residual_dof)
    res.history["forward_check"] = entry
    failure = _forward_failure(res, entry)
    if entry["verdict"] == "solve_failed":
        warnings.warn(f"{res.method}: {entry['note']}", FitWarning, stacklevel=stacklevel)
    if failure is None:
        return
    advice = None
    if res.status == "fallback":  # hybrid's output error did not replace this estimate
        advice = f"Output error from this estimate was not kept: {res.history['oels'].message}"
    if failure == "forward_misfit":
        oe = res.covariance_kind == "oe"  # output error's estimate (oels, or hybrid's)
        why = misfit_message(entry, res.likelihood.base_model.states, advice, oe)
    else:
        why = overconfidence_message(entry, advice)
    res.success, res.status = False, failure
    res.message = f"{why} (estimator: {res.message})"
    warnings.warn(f"{res.method}: {res.message}", FitWarning, stacklevel=stacklevel)


def _forward_entry(res: FitResult, solver, *, residual_dof: float | None = None) -> dict:
    """The forward check's entry (:func:`._forward_check.forward_check`) of a weak-form fit
    of one experiment, at its estimate and noise level."""
    lik = res.likelihood
    if residual_dof is not None:
        noise_source, noise_dof = (
            "estimated from the forward residuals at the first estimate",
            residual_dof,
        )
    elif res.sigma_estimated:
        noise_source, noise_dof = "estimated by the high-order filter", filter_dof(res.t.size)
    else:
        noise_source, noise_dof = "given", np.inf
    # per-entry noise (proportional, counts): the check compares the residuals' RMS with
    # the entries' RMS noise sd, an approximation that still flags material misfits
    sigma = lik.rms_noise_sd(res.sigma)
    refitted = res.history.get("observation")
    if refitted is not None:  # output error's refitted variance parameters, at its solution
        w = refitted.weights(floored_state(res.simulate(), lik.X))
        sigma = np.asarray(res.sigma) * np.sqrt(np.mean(w, axis=0))
        noise_source = f"{refitted.name} parameters refitted by output error"
    known = lik.initial_state
    model = lik.base_model if known is None else known.solved_model(lik.base_model)
    return forward_check(
        model, lik.t, lik.X, lik.U, lik.noise, res.x, sigma, inputs=lik.inputs,
        solver=solver, known=known, noise_dof=noise_dof, noise_source=noise_source,
    )  # fmt: skip


def _forward_failure(res: FitResult, entry: dict) -> str | None:
    """The status a checked fit gets from its entry: ``"forward_misfit"``,
    ``"overconfident"`` or None (passed, skipped, or a failed solve, which only warns)."""
    if entry["verdict"] == "misfit":
        return "forward_misfit"
    if entry["verdict"] != "solve_failed" and _overconfident(res, entry):
        return "overconfident"
    return None


def _estimate_check(res: FitResult, solver, residual_dof=None) -> tuple[dict, str | None]:
    """``FitProblem.check`` of a fit of one experiment of an ODE model: the forward check's
    entry of a succeeded weak-form estimate and the status it fails with (or None)."""
    entry = _forward_entry(res, solver, residual_dof=residual_dof)
    return entry, _forward_failure(res, entry)


def _overconfident(res: FitResult, entry: dict) -> bool:
    """The weak covariance of a checked fit against the forward Cramer-Rao bound
    (:func:`._forward_check.compare_information`)."""
    try:
        cov = res.covariance()
    except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
        return False  # no covariance to compare: the identifiability check said why
    return compare_information(entry, cov, res.param_names)
