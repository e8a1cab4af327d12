"""Starting points and ``pymc_wendy.sample``: ``pm.sample`` with what weak likelihoods need.

:func:`initial_values` maps the WENDy-MLE of every :class:`~pymc_wendy.WeakODELikelihood` in a
model (and its noise estimate, for a random ``sigma``) onto the free variables they depend on.
They are returned, not stored as the variables' ``initval``: ``pm.sample_smc`` starts *all*
particles at a variable's ``initval``, which would collapse its population.

:func:`sample` differs from ``pm.sample``'s defaults in these ways, for measured reasons
(``docs/pymc.md``):

* **It samples in whitened coordinates** (:mod:`pymc_wendy.bayes.whitening`): the unconstrained free
  variables as ``mode + L z``, ``L L^T`` the inverse Hessian at the posterior mode, with 300
  tuning iterations. FitzHugh-Nagumo, 4 x 1000 draws: tuning took 7 021 gradient evaluations
  instead of 55 528, for 36 % more ESS.

* **nutpie adapts a low-rank modified mass matrix** (``adaptation="low_rank"``). Weak
  posteriors of ODE parameters are strongly correlated (the parameters of one equation trade
  off against each other); a diagonal mass matrix needs long trajectories. Measured on
  Lotka-Volterra (129 points, 10 % noise, 4 x 1000 draws): minimum ESS 5675 instead of 1168,
  3.1 instead of 5.8 gradient evaluations per draw.

* **It starts at** :func:`initial_values` and does not jitter those variables. The weak
  posterior is typically orders of magnitude narrower than the ``U(-1, 1)`` jitter PyMC adds;
  when ``sigma`` is inferred, a start that far out can send a chain into a spurious local mode
  in which one equation is explained as pure noise (about 550 log-density units below the main
  mode on Lotka-Volterra, but a trap for a gradient sampler). Starting all chains at one point
  weakens what R-hat can detect; for multimodal problems use tempering or ``pm.sample_smc``.
* **One BLAS thread per chain.** The likelihood's cost is Cholesky factorisations of
  K D x K D matrices; with chains already running in parallel, a multi-threaded BLAS
  oversubscribes the cores (1.2-2x slower per evaluation on a 2-core machine).
* **target_accept = 0.95 for hierarchical models** (any free variable without a WENDy
  starting value, such as a group-level ``mu`` or ``tau``): on the five-unit model of
  ``docs/experiments.md`` runs free of divergences went from 0 of 3 to 7 of 10.
* **It says where divergences sit** (:class:`~pymc_wendy.bayes.divergences.DivergenceWarning`):
  the variable whose divergent draws crowd into one tail of its posterior, with advice for a
  hierarchical model's group-level scales (centred or non-centred).
* **It returns the exact posterior where the weak one is off** (``correction="auto"``): the
  weak draws are checked against the forward-solve posterior of the same model
  (:func:`~pymc_wendy.check_weak`) and, where the two differ, corrected to it
  (:func:`~pymc_wendy.forward_correction`). A PyMC user expects the posterior of the model
  written down, the ODE with its noise; the weak likelihood approximates it, and on the
  catalogue's problems the approximation moved posterior means by 0.3-3 sd
  (``docs/forward.md``, "The default result").
* **Chains run on every CPU the process may use** (up to 4, as PyMC caps it). PyMC's default
  ``cores`` counts physical cores only, so on a 2-CPU virtual machine it ran all chains on one:
  FitzHugh-Nagumo, 4 x 1000 draws, took 274 s at CPU/wall 1.00 against 171 s at 1.66 with
  ``cores=2`` (``docs/performance.md``).
"""

from __future__ import annotations

import logging
import numbers
import os
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pymc.blocking import DictToArrayBijection
from pymc.distributions.transforms import LogTransform

from pymc_wendy._threads import blas_threads as _blas_threads

# how the distribution stores its parameters is its own business; sample reads them back
from pymc_wendy.bayes.comparison import compute_log_likelihood
from pymc_wendy.bayes.correction import CorrectionTooCostly
from pymc_wendy.bayes.distribution import _is_symbolic, _params_vector
from pymc_wendy.bayes.divergences import DivergenceWarning, divergence_report
from pymc_wendy.bayes.starts import initial_params, screened_start
from pymc_wendy.bayes.whitening import (
    NotPositiveDefinite,
    posterior_mode,
    to_model_trace,
    whitened_model,
)
from pymc_wendy.estimators import wendy_mle
from pymc_wendy.weak.joint import JointLikelihood
from pymc_wendy.weak.kernels import WeakLikelihoodError

__all__ = ["CORRECTIONS", "initial_values", "laplace", "sample"]

_log = logging.getLogger("pymc.wendy")  # a child of PyMC's logger: shown as its messages are

#: what :func:`sample` and :func:`~pymc_wendy.sample_sft` return (``correction=``)
CORRECTIONS = ("auto", "forward", None)
#: the automatic correction's NUTS route runs when its estimated time is at most this many
#: times the weak sampling's, or :data:`NUTS_MIN_BUDGET` seconds: a default that can turn
#: a minute of sampling into hours (a hierarchical model of a dozen subjects) warns instead
NUTS_BUDGET_FACTOR = 20.0
NUTS_MIN_BUDGET = 600.0


def initial_values(model: pm.Model | None = None) -> dict[str, np.ndarray]:
    """WENDy-MLE starting values for the free variables behind each weak likelihood.

    For a bias-corrected :class:`~pymc_wendy.WeakODELikelihood` the minimum of its corrected
    objective (the bias-corrected estimate) is used instead.

    For every :class:`~pymc_wendy.WeakODELikelihood` whose ``params`` is a free vector variable
    or a list of free scalar variables, the WENDy-MLE (weak least squares, then trust-region
    Newton, started from the model's initial point) is mapped onto them; a free ``sigma``
    variable gets the data's noise estimate. Terms that share their ``params`` (several
    experiments) are fitted jointly (:class:`~pymc_wendy.weak.joint.JointLikelihood`); a
    variable that several separately fitted terms inform (a parameter shared by the units of
    a hierarchical model, given as a list of scalars) gets the mean of their estimates.
    Values outside a variable's support (a negative estimate under a positive prior) are left
    out, and so is everything of a group whose estimate fails.

    Returns
    -------
    dict
        ``{variable name: value}`` on the original (untransformed) scale, ready for
        ``pm.sample(initvals=...)`` or ``pm.find_MAP(initvals=...)``.
    """
    model = pm.modelcontext(model)
    groups: dict[tuple, list] = {}
    for rv in model.observed_RVs:
        spec = getattr(rv.tag, "wendy", None)
        if spec is not None:
            groups.setdefault(_group_key(*spec), []).append(spec)
    estimates: dict[str, list[np.ndarray]] = {}
    for specs in groups.values():
        for name, value in _values_for(model, specs).items():
            estimates.setdefault(name, []).append(value)
    for rv in model.observed_RVs:  # variance parameters that are variables: moment estimates
        for name, value in _noise_values(model, getattr(rv.tag, "wendy_noise", None)):
            estimates.setdefault(name, []).append(value)
    values = {}
    for name, vals in estimates.items():
        value = np.mean(vals, axis=0)
        if _in_support(model, model[name], value):
            values[name] = np.asarray(value)
    return values


def _noise_values(model: pm.Model, spec) -> list[tuple[str, np.ndarray]]:
    """The weak stage's moment estimates (:meth:`~pymc_wendy.WeakLikelihood.weak_observation`)
    of the observation model's variance parameters that are free variables of ``model``;
    ``spec`` is ``(likelihood, {field: variable})`` or None."""
    if not spec:
        return []
    lik, variables = spec
    out = []
    for field, v in variables.items():
        value = np.asarray(getattr(lik.weak_observation, field), dtype=float)
        if v in model.free_RVs and v.type.ndim <= 1:
            out.append((v.name, value if v.type.ndim == 1 else np.mean(value)))
    return out


def _group_key(lik, params, sigma) -> tuple:
    """Terms of one ODE with the same parameter variables share a key (and are fitted
    jointly)."""
    ids = tuple(id(v) for v in params) if isinstance(params, list | tuple) else (id(params),)
    model = lik.base_model
    return (ids, model.states, model.params, tuple(map(str, model.expressions)), lik.noise)


def _values_for(model: pm.Model, specs: list) -> dict[str, np.ndarray]:
    """Estimates for the free variables of terms sharing ``params``: ``[(lik, params,
    sigma), ...]``."""
    liks = [lik for lik, _, _ in specs]
    params = specs[0][1]
    lik = liks[0] if len(liks) == 1 else JointLikelihood(liks)
    J, D = lik.model.n_params, lik.model.n_states
    if isinstance(params, list | tuple):
        targets = [(v, slice(j, j + 1)) for j, v in enumerate(params)]
    else:
        targets = [(params, slice(0, J))]
    for e, (_, _, sigma) in enumerate(specs):
        if _is_symbolic(sigma):
            targets.append((sigma, slice(J + e * D, J + (e + 1) * D)))
    targets = [(v, sl) for v, sl in targets if v in model.free_RVs and v.type.ndim <= 1]
    if not targets:
        return {}
    try:
        if lik.correction_method is not None:  # the corrected objective, from its reference
            start = liks[0].correction.reference
        else:
            vector = _params_vector(params, lik.base_model)
            guess = initial_params(model, vector)
            start = screened_start(lik, guess, vector)
        p_hat = wendy_mle(lik, start, warm_start=True).x
        if lik.correction_method is None and not lik.base_model.is_linear_in_params:
            p_hat = _lower_of(lik, p_hat, guess)
        ok = np.isfinite(lik.nll(p_hat))
    except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
        ok = False
    if not ok:
        return {}
    estimate = np.concatenate([p_hat, *(e.sigma for e in liks)])
    out: dict[str, list] = {}
    for v, sl in targets:
        value = estimate[sl] if v.type.ndim == 1 else np.mean(estimate[sl])
        out.setdefault(v.name, []).append(value)
    # one sigma variable shared by several terms: the mean of their noise estimates
    return {name: np.mean(vals, axis=0) for name, vals in out.items()}


def _lower_of(lik, p_hat: np.ndarray, guess: np.ndarray) -> np.ndarray:
    """``p_hat`` or the WENDy-MLE from ``guess`` without the weak-least-squares warm start,
    whichever has the lower weak NLL. Weak least squares minimise the raw residual, whose
    size the parameters also set where they divide the data's terms: on FitzHugh-Nagumo
    observed in V (the equation of V, 513 points) every screened start led them to
    ``[0.41, -0.03, 0.24]`` and the MLE from there to ``c = -1.1`` (NLL 3442), while the MLE
    from the prior's centre reached ``[0.20, 0.15, 3.02]`` (NLL 657)."""
    try:
        with np.errstate(all="ignore"):
            other = wendy_mle(lik, guess, warm_start=False).x
            if lik.nll(other) < lik.nll(p_hat):
                return other
    except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
        pass
    return p_hat


def _in_support(model: pm.Model, v, value) -> bool:
    """A value outside the support maps to a non-finite value under the variable's transform."""
    transform = model.rvs_to_transforms.get(v)
    if transform is None:
        return True
    with np.errstate(all="ignore"):
        z = transform.forward(pt.as_tensor(value), *v.owner.inputs).eval()
    return bool(np.all(np.isfinite(z)))


def sample(
    draws: int = 1000,
    *,
    model: pm.Model | None = None,
    initvals: dict | None = None,
    whiten: bool | str = "auto",
    blas_threads: int | None = 1,
    correction: str | None = "auto",
    correction_kwargs: dict | None = None,
    check: bool = True,
    **kwargs,
):
    """Draw posterior samples with NUTS, like :func:`pymc.sample` (see the module doc).

    Parameters
    ----------
    draws : int
        Draws per chain after tuning (``>= 0``).
    model : pm.Model, optional
        Defaults to the model on the context stack.
    initvals : dict, optional
        Starting values; they override :func:`initial_values` variable by variable.
    whiten : bool or "auto"
        Sample in whitened coordinates (:mod:`pymc_wendy.bayes.whitening`): the unconstrained free
        variables written as ``mode + L z`` with ``L L^T`` the inverse Hessian at the
        posterior mode, found from the starting values before sampling. The chains start at
        the mode and tuning is shorter (``tune`` defaults to :data:`WHITENED_TUNE`). The
        trace is in the model's variables. ``"auto"`` whitens when every free variable has a
        starting value (from :func:`initial_values` or ``initvals``: the usual model of
        parameters and noise levels, not a hierarchical one whose hyperparameters have none)
        and the Hessian there is positive definite; ``True`` raises where it is not.
    blas_threads : int or None
        BLAS threads while sampling (None leaves the library default).
    correction : {"auto", "forward", None}
        What is returned (``docs/forward.md``, "The default result"). ``"auto"``: the weak
        posterior is checked against the exact (forward-solve) posterior of the same model
        (:func:`~pymc_wendy.check_weak`); where they differ, the result is the exact
        posterior (:func:`~pymc_wendy.forward_correction`, with ``correction_kwargs``), the
        weak draws and their sampler statistics kept as ``weak_posterior`` and
        ``weak_sample_stats``, and ``posterior.attrs["corrected"] = 1``; where they agree,
        or no forward solve is meaningful (the check is "skipped", its note says why), the
        weak posterior. ``"forward"``: always the corrected posterior (no check). ``None``:
        always the weak posterior; the check still runs when ``check`` is True and warns
        when they differ. ``idata_kwargs={"log_likelihood": True}`` stores the returned
        posterior's own pointwise log-likelihood: the forward model's (one value per time
        point and state) when corrected, else the weak likelihood's
        (:func:`~pymc_wendy.compute_log_likelihood`).
    correction_kwargs : dict, optional
        Options of :func:`~pymc_wendy.forward_correction`; its ``initial_state`` (the prior
        of initial states the weak model does not have) is also the check's.
    check : bool
        Run the check (on 800 draws; the result gets a ``weak_check`` group with every
        shift, the Pareto ``k`` and the verdict). ``False`` skips it, and with it the
        automatic correction: the weak posterior, unchecked.
    **kwargs
        Everything else goes to :func:`pymc.sample` (``tune``, ``chains``, ``cores``,
        ``nuts_sampler``, ``random_seed``, ``target_accept``, ...). ``cores`` defaults to the
        CPUs this process may use, at most 4 (PyMC's default counts physical cores only).
        ``tune`` must be an integer ``>= 0``, ``chains`` and ``cores`` integers ``>= 1`` (or
        None for PyMC's defaults).

    Returns
    -------
    xarray.DataTree
        The ArviZ result of :func:`pymc.sample`, or of the correction (``correction``); a
        ``weak_check`` group when checked. A whitened run's ``posterior.attrs`` has
        ``whitened = 1``, a corrected one's ``corrected = 1``.

    Warns
    -----
    WeakPosteriorWarning
        With ``correction=None``, when the weak posterior differs from the exact one; with
        any, when the check or the correction failed.

    Raises
    ------
    ValueError
        A bad ``whiten`` or count (``draws``, ``tune``, ``chains``, ``cores``), before
        anything is fitted or compiled; ``whiten=True`` where the Hessian at the mode is not
        positive definite.
    """
    if whiten not in (True, False, "auto"):
        raise ValueError(f"whiten must be True, False or 'auto'; got {whiten!r}")
    check_result_options(correction, check)
    _check_sample_counts(draws, kwargs)
    model = pm.modelcontext(model)
    kwargs.setdefault("cores", min(4, _usable_cpus()))
    start = {**initial_values(model), **(initvals or {})}
    started = {model[name] for name in start}
    # PyMC's log-likelihood would be one number per draw per term: ours is pointwise
    idata_kwargs = dict(kwargs.pop("idata_kwargs", None) or {})
    log_likelihood = bool(idata_kwargs.pop("log_likelihood", False))
    kwargs["idata_kwargs"] = idata_kwargs
    target, hierarchical = model, not started >= set(model.free_RVs)
    scales = _group_scales(model, started)
    if hierarchical and "target_accept" not in kwargs:
        kwargs["target_accept"] = HIERARCHICAL_TARGET_ACCEPT
    if whiten is True or (whiten == "auto" and not hierarchical):
        with _blas_threads(blas_threads):
            target = _whitened(model, start, required=whiten is True)
    if target is not model:
        kwargs.setdefault("tune", WHITENED_TUNE)
        start, started = {}, set(target.free_RVs)  # the whitened origin is the mode
    sampler = kwargs.get("nuts_sampler") or ("nutpie" if _has_nutpie() else "pymc")
    if sampler == "nutpie":
        compile_kwargs = dict(kwargs.pop("compile_kwargs", None) or {})
        compile_kwargs.setdefault("jitter_rvs", set(target.free_RVs) - started)
        kwargs["compile_kwargs"] = compile_kwargs
        nuts = dict(kwargs.pop("nuts", None) or {})
        nuts.setdefault("adaptation", "low_rank")
        kwargs["nuts"] = nuts
        # nutpie's chains are threads sharing one BLAS, whose thread count pm.sample sets to
        # ``blas_cores`` ("auto" = cores); PyMC's own sampler already gives each process one
        kwargs.setdefault("blas_cores", blas_threads)
    elif sampler == "pymc" and started >= set(target.free_RVs):
        kwargs.setdefault("init", "adapt_diag")
    weak_start = time.perf_counter()
    with _blas_threads(blas_threads):
        idata = pm.sample(draws, model=target, initvals=start or None, **kwargs)
    weak_seconds = time.perf_counter() - weak_start
    if target is not model and isinstance(idata, xr.DataTree):  # not return_inferencedata=False
        idata = to_model_trace(idata, model)
        idata.posterior.attrs["whitened"] = 1
    if hierarchical and isinstance(idata, xr.DataTree):
        idata.posterior.attrs["target_accept"] = kwargs["target_accept"]
    if not isinstance(idata, xr.DataTree):  # return_inferencedata=False: draws as they are
        return idata
    options = {
        "random_seed": kwargs.get("random_seed"),
        "progressbar": kwargs.get("progressbar", True),
        "log_likelihood": log_likelihood,
        "weak_seconds": weak_seconds,
    }
    result = exact_by_default(idata, model, correction, check, correction_kwargs, **options)
    if "corrected" not in result.posterior.attrs:
        _warn_divergences(idata, scales)  # the weak draws are the result
    elif "sample_stats" in result.children:
        # the correction's NUTS route replaced them: its divergences (nutpie's run reports
        # none by itself)
        _warn_divergences(result, scales)
    return result


def check_result_options(correction, check) -> None:
    """Raise for a ``correction`` or ``check`` that :func:`exact_by_default` cannot use."""
    if not (correction is None or (isinstance(correction, str) and correction in CORRECTIONS)):
        raise ValueError(f"correction must be 'auto', 'forward' or None; got {correction!r}")
    if not isinstance(check, bool | np.bool_):
        raise TypeError(f"check must be True or False; got {check!r}")


def exact_by_default(
    idata,
    model: pm.Model,
    correction: str | None,
    check: bool,
    correction_kwargs: dict | None,
    *,
    random_seed=None,
    progressbar: bool = True,
    log_likelihood: bool = False,
    weak_seconds: float = 0.0,
):
    """The result of a weak sampler (:func:`sample`, :func:`~pymc_wendy.sample_sft`) as
    ``correction`` and ``check`` ask (see :func:`sample`): checked, and corrected where the
    check finds the weak posterior off, within a time budget for the correction's NUTS route
    (:data:`NUTS_BUDGET_FACTOR` times the weak sampling's ``weak_seconds``, at least
    :data:`NUTS_MIN_BUDGET`). Warnings point at the caller's caller, the user's sampling
    line."""
    from pymc_wendy.bayes.check import check_weak, warn_check

    if correction == "forward":
        return _corrected(idata, model, random_seed, progressbar, correction_kwargs, log_likelihood)
    if not check:
        return _weak_result(idata, model, progressbar, log_likelihood)
    seed = int(random_seed) + 2 if isinstance(random_seed, numbers.Integral) else None
    initial_state = (correction_kwargs or {}).get("initial_state")
    result = check_weak(idata, model, initial_state=initial_state, random_seed=seed, warn=False)
    if correction == "auto" and result.attrs["verdict"] == "differs":
        _log.info(
            "The weak posterior differs from the exact one (%s): correcting it to the "
            "forward-solve posterior (correction='auto'; the weak draws are kept as "
            "weak_posterior)",
            result.attrs["note"],
        )
        budget = max(NUTS_MIN_BUDGET, NUTS_BUDGET_FACTOR * weak_seconds)
        options = {"max_nuts_seconds": budget, **(correction_kwargs or {})}
        try:
            corrected = _corrected(idata, model, random_seed, progressbar, options, log_likelihood)
        except CorrectionTooCostly as exc:
            result.attrs["note"] += (
                f"; not corrected: {exc} (pw.sample(..., correction='forward') or "
                "pw.forward_correction(idata) runs it)"
            )
        except RuntimeError as exc:  # the forward solve failed at every proposal draw
            result.attrs["note"] += f"; the correction failed: {exc}"
            result.attrs["verdict"] = "failed"
        else:
            corrected["weak_check"] = xr.DataTree(result)
            corrected.posterior.attrs["corrected"] = 1
            return corrected
    idata = _weak_result(idata, model, progressbar, log_likelihood)
    idata["weak_check"] = xr.DataTree(result)
    warn_check(result, stacklevel=4)
    return idata


def _weak_result(idata, model: pm.Model, progressbar: bool, log_likelihood: bool):
    if log_likelihood:
        compute_log_likelihood(idata, model, progressbar=progressbar)
    return idata


def _group_scales(model: pm.Model, started: set) -> set[str]:
    """Names of the positive free variables without a WENDy start: a hierarchical model's
    group-level scales (a noise level has a start)."""
    return {
        rv.name
        for rv in set(model.free_RVs) - started
        if isinstance(model.rvs_to_transforms.get(rv), LogTransform)
    }


def _warn_divergences(idata, scales: set[str]) -> None:
    """A :class:`~pymc_wendy.bayes.divergences.DivergenceWarning` saying where the divergences
    sit (:func:`~pymc_wendy.bayes.divergences.divergence_report`)."""
    report = divergence_report(idata, scales)
    if report is not None:
        warnings.warn(report, DivergenceWarning, stacklevel=3)


def _corrected(
    idata, model: pm.Model, seed, progressbar: bool, options: dict | None, log_likelihood: bool
):
    """The forward correction of ``idata``, the weak draws kept as ``weak_posterior``; with
    ``log_likelihood``, the forward model's own pointwise values (one per time point and
    state: its likelihood factorises)."""
    from pymc_wendy.bayes.correction import forward_correction
    from pymc_wendy.bayes.forward import forward_model, quiet_c_backend

    options = dict(options or {})
    if isinstance(seed, numbers.Integral):
        options.setdefault("random_seed", int(seed) + 1)
    options.setdefault("progressbar", progressbar)
    result = forward_correction(idata, model, **options)
    result["weak_posterior"] = idata.posterior
    if "sample_stats" in idata.children:  # the weak sampler's diagnostics (divergences, ...)
        result["weak_sample_stats"] = idata.sample_stats
    if log_likelihood:
        fmodel, _ = forward_model(model, initial_state=options.get("initial_state"))
        # the forward solve's Op runs in Python: the C VM, not numba's object mode
        with quiet_c_backend():
            pm.compute_log_likelihood(
                result, model=fmodel, progressbar=options["progressbar"],
                compile_kwargs={"mode": "CVM"},
            )  # fmt: skip
    return result


def check_count(value, name: str, minimum: int, *, allow_none: bool = False) -> int | None:
    """``value`` as an int ``>= minimum`` (or None if ``allow_none``), else a ValueError
    naming ``name``: a bad count must fail here, not as a ZeroDivisionError or OverflowError
    from inside PyMC or nutpie after the model is compiled."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        also = " or None" if allow_none else ""
        raise ValueError(f"{name} must be an integer{also}; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value!r}")
    return int(value)


def _check_sample_counts(draws, kwargs: dict) -> None:
    """The counts of :func:`sample` (``draws`` and those among ``kwargs``) before any work."""
    check_count(draws, "draws", 0)
    if "tune" in kwargs:
        check_count(kwargs["tune"], "tune", 0)
    for name in ("chains", "cores"):
        if name in kwargs:  # None: PyMC's default
            check_count(kwargs[name], name, 1, allow_none=True)


#: ``pw.sample``'s default tuning iterations per chain when it whitens (PyMC's: 1000)
WHITENED_TUNE = 300

#: ``pw.sample``'s default ``target_accept`` when some free variable has no WENDy starting
#: value, i.e. a hierarchical model's group-level variables (PyMC's default: 0.8).
#: ``docs/experiments.md``, "Hierarchical models", has the measurements.
HIERARCHICAL_TARGET_ACCEPT = 0.95


def _whitened(model: pm.Model, start: dict, required: bool) -> pm.Model:
    """The whitened model at the posterior mode found from ``start``, or ``model`` itself
    where the Hessian there is not positive definite (an error if ``required``)."""
    try:
        mode, H, _ = posterior_mode(model, _unconstrained_point(model, start))
    except NotPositiveDefinite as err:
        if required:
            raise ValueError(f"cannot whiten: {err}") from None
        return model
    return whitened_model(model, mode, H)[0]


def _usable_cpus() -> int:
    """CPUs this process may run on (affinity and cgroup limits respected where Python can)."""
    counter = getattr(os, "process_cpu_count", None)  # Python >= 3.13
    if counter is not None:
        return max(1, counter() or 1)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _has_nutpie() -> bool:
    try:
        import nutpie  # noqa: F401
    except ImportError:
        return False
    return True


def laplace(
    model: pm.Model | None = None,
    *,
    draws: int = 4000,
    initvals: dict | None = None,
    random_seed=None,
    rel_step: float = 1e-5,
):
    """Laplace approximation of the posterior at its mode, as ArviZ data.

    The posterior of the free variables *on their unconstrained scale* (PyMC's value
    variables, log-Jacobian included) is approximated by a Gaussian centred at its mode,
    with covariance the inverse of the negative log-density's Hessian there; draws from it
    are mapped back to the original scale, so equal-tailed intervals of bounded variables
    respect their bounds. The mode is found by L-BFGS-B from :func:`initial_values` (the
    WENDy-MLE), the Hessian by central differences of the analytic gradient (``2 n``
    gradient calls for ``n`` unconstrained coordinates).

    Parameters
    ----------
    model : pm.Model, optional
        Defaults to the model on the context stack.
    draws : int
        Draws from the approximation, stored as one chain.
    initvals : dict, optional
        Starting values (original scale); they override :func:`initial_values`.
    random_seed : int or numpy Generator, optional
        Seed of the draws.
    rel_step : float
        Relative finite-difference step of the Hessian.

    Returns
    -------
    xarray.DataTree
        ``posterior`` with the draws of every free variable and deterministic that depends on
        them only; ``fit`` with ``mode`` (unconstrained), ``covariance`` and ``success``.

    Raises
    ------
    ValueError
        The Hessian at the mode is not negative definite (no Gaussian approximation exists
        there, e.g. the optimiser stopped on a ridge or a saddle).
    """
    model = pm.modelcontext(model)
    point = _unconstrained_point(model, {**initial_values(model), **(initvals or {})})
    try:
        mode, H, res = posterior_mode(model, point, rel_step)
    except NotPositiveDefinite as err:
        raise ValueError(f"{err}: no Laplace approximation there") from None
    x0, x = mode, mode.data
    n = x.size
    chol = np.linalg.cholesky(H)
    cov = np.linalg.inv(H)
    rng = np.random.default_rng(random_seed)
    # x + L^{-T} z has covariance (L L^T)^{-1} = H^{-1}
    Z = x + np.linalg.solve(chol.T, rng.standard_normal((n, draws))).T
    names = [v.name for v in model.free_RVs + model.deterministics]
    fn = model.compile_fn(
        model.replace_rvs_by_values([model[name] for name in names]),
        inputs=model.value_vars,
        point_fn=False,
        on_unused_input="ignore",
    )
    # one compiled call per draw: only the elementwise back-transforms run, no likelihood
    outs = [fn(*(_unravel(z, x0)[v.name] for v in model.value_vars)) for z in Z]
    posterior = {name: np.asarray([o[k] for o in outs])[None] for k, name in enumerate(names)}
    dims = {name: list(model.named_vars_to_dims.get(name, ())) for name in names}
    coords = {k: list(v) for k, v in model.coords.items() if v is not None}
    dt = az.from_dict({"posterior": posterior}, dims=dims, coords=coords)
    coord = list(range(n))
    dt["fit"] = xr.Dataset(
        {
            "mode": ("unconstrained", x),
            "covariance": (("unconstrained", "unconstrained_bis"), cov),
        },
        coords={"unconstrained": coord, "unconstrained_bis": coord},
        attrs={"success": int(res.success), "message": str(res.message), "nfev": int(res.nfev)},
    )
    return dt


def _unconstrained_point(model: pm.Model, values: dict) -> dict[str, np.ndarray]:
    """The model's initial point with ``values`` (original scale) mapped onto its value
    variables through their transforms."""
    point = model.initial_point()
    for name, value in values.items():
        rv = model[name]
        transform = model.rvs_to_transforms.get(rv)
        value_var = model.rvs_to_values[rv]
        if transform is not None:
            value = transform.forward(pt.as_tensor(value), *rv.owner.inputs).eval()
        point[value_var.name] = np.asarray(value, dtype=value_var.dtype)
    return point


def _unravel(z: np.ndarray, like) -> dict:
    return DictToArrayBijection.rmap(type(like)(z, like.point_map_info))
