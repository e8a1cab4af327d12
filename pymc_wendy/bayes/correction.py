"""The exact posterior at weak-form speed: a forward-solve correction of a weak posterior.

:func:`forward_correction` turns draws from a model with weak likelihood terms into draws
from its forward-solve twin (:func:`~pymc_wendy.bayes.forward.forward_model`: the same
priors, the exact Gaussian or log-normal likelihood of the data around the ODE solution, the
initial state a parameter). The weak posterior is a cheap proposal for it
(``docs/forward.md``):

1. **Laplace fit** of the forward model (L-BFGS in units of the weak sds, from the weak
   mean and the weak draw of largest density; new initial states fitted first).
2. **importance weights** ("importance"): the weak draws, in the unconstrained space, are
   mapped affinely onto the Laplace approximation (mean and covariance), which keeps their
   shape and gives their density (the weak posterior's at the original draw, times a
   constant); a new initial state is drawn from the Laplace conditional, its sd widened by
   :data:`PROPOSAL_WIDENING`. The log-weights (forward log-density minus proposal
   log-density) are Pareto-smoothed (ArviZ's PSIS). While their Pareto ``k`` is too large,
   or their ESS below ``target_ess``, further proposals are tried: ``S`` draws of a
   multivariate t around the Laplace approximation (heavier tails than any Gaussian fit),
   then adaptive importance sampling, further batches of ``S`` t draws, each with the
   weighted mean and covariance of all draws so far, every draw weighed against the mixture
   of the batches, until the ESS reaches ``target_ess`` or there are ``max_batches``. The
   best proposal is kept. When its ``k`` and its variance ``k`` are at most
   ``min(1 - 1/log10(S), 0.7)`` for ``S`` draws the result is a weighted resample. The
   variance ``k`` is the largest Pareto ``k`` of the weights times a coordinate's squared
   deviation from the weighted mean (the function-specific ``k`` of Vehtari et al., *Pareto
   smoothed importance sampling*, JMLR 2024, for the variances, which set the intervals'
   widths): heavy weights in the tails can leave the weights' ``k`` fine and the variances
   short. One forward solve per draw.
3. **warm-started NUTS** ("nuts"), when either ``k`` is larger: NUTS on the forward model,
   every chain started near the proposal, the mass matrix the proposal's weighted
   covariance (the Laplace one where the weights are too few), ``target_accept=0.95``. One
   sensitivity solve per gradient. nutpie with the solves compiled where every term's
   model is of first order with no inputs but doses or held values, PyMC's NUTS otherwise
   (:mod:`~pymc_wendy.bayes.forward_nuts`).
"""

from __future__ import annotations

import importlib.util
import os
import time
import warnings
from collections.abc import Mapping

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import xarray as xr
from pytensor.compile.mode import Mode
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import ancestors, apply_ancestors
from scipy import optimize, stats

from pymc_wendy._progress import ProgressBar
from pymc_wendy.bayes.forward import ForwardTerm, forward_model
from pymc_wendy.bayes.forward_numba import compiled_natively
from pymc_wendy.bayes.forward_nuts import OverBudget, nutpie_nuts, pymc_nuts
from pymc_wendy.model.compiled_solve import SolveFailed

__all__ = [
    "LAPLACE_T_DF",
    "NUTPIE_ABOVE_SECONDS",
    "PROPOSAL_WIDENING",
    "CorrectionTooCostly",
    "forward_correction",
]

# Standard deviation factor of a new initial state's proposal over its Laplace conditional:
# a proposal needs heavier tails than the target, and the conditional is only approximately
# Gaussian.
PROPOSAL_WIDENING = 1.5
# Degrees of freedom of the second proposal, a multivariate t around the Laplace fit, tried
# when the moved weak draws' k is too large: heavy enough tails to cover a skewed target.
LAPLACE_T_DF = 3
_METHODS = ("auto", "importance", "nuts")
_SAMPLERS = ("auto", "nutpie", "pymc")
#: The NUTS route takes nutpie (``nuts_sampler="auto"``) where PyMC's NUTS is estimated
#: beyond this. nutpie compiles the forward model first (about 8 s on a small model), then
#: runs without Python between leapfrog steps: measured, 0.41-1.5 times PyMC's ESS per
#: second on single series whose PyMC route took 7-27 s (``benchmarks/nuts_route.py``),
#: and on Theophylline's 12-subject hierarchy (estimated 7 min for PyMC, stopped by its
#: budget after 27 min) the whole correction in 175 s.
NUTPIE_ABOVE_SECONDS = 60.0
_PROPOSALS = ("auto", "moved", "laplace_t", "adapted_t")
# the proposals each choice weighs, in order ("adapted_t" is fitted to the "laplace_t" draws)
_CANDIDATES = {
    "auto": _PROPOSALS[1:],
    "moved": ("moved",),
    "laplace_t": ("laplace_t",),
    "adapted_t": ("laplace_t", "adapted_t"),
}
# draws at which a sampler's stored log-density is checked against the model's
_CHECKED_DRAWS = 5
#: fewest finite weak draws the check weighs and the correction moves: Pareto smoothing fits
#: the largest 20 % of the weights
MIN_DRAWS = 50
# prior draws of a new initial state tried as starts of the Laplace fit
_INITIAL_STATE_DRAWS = 20
# effective proposal draws per dimension for their weighted covariance to be NUTS's mass
# matrix (a covariance from fewer is noisier than the Laplace one)
_MASS_ESS_PER_DIM = 10


def forward_correction(
    idata,
    model: pm.Model | None = None,
    *,
    method: str = "auto",
    proposal: str = "auto",
    initial_state=None,
    target_ess: float = 1000.0,
    max_batches: int = 10,
    draws: int = 1000,
    tune: int = 500,
    chains: int | None = None,
    target_accept: float = 0.95,
    random_seed: int | None = None,
    progressbar: bool = True,
    max_nuts_seconds: float | None = None,
    nuts_sampler: str = "auto",
) -> xr.DataTree:
    """Correct a weak posterior to the forward-solve posterior of the same model.

    Parameters
    ----------
    idata : DataTree
        Posterior draws of ``model`` (``pw.sample`` or ``pm.sample``).
    model : pm.Model, optional
        The model with :class:`~pymc_wendy.WeakODELikelihood` terms; default the one in
        context.
    method : {"auto", "importance", "nuts"}
        The route (module doc). ``"importance"`` returns the reweighted draws even when a
        Pareto ``k`` is large (with a warning); ``"nuts"`` skips the reweighting.
    proposal : {"auto", "moved", "laplace_t", "adapted_t"}
        The importance proposal: the weak draws moved onto the forward model's Laplace
        approximation; a multivariate t (:data:`LAPLACE_T_DF` degrees of freedom) around
        that approximation; or adaptive importance sampling, batches of t draws, each batch
        with the weighted mean and covariance of all draws so far, starting from the
        ``"laplace_t"`` batch and weighed against the mixture of the batches. ``"auto"``
        tries them in this order, each only while the Pareto ``k`` or the variance ``k`` so
        far is too large or the ESS below ``target_ess``, and keeps the best (both ``k``
        below the threshold, then the largest ESS). The NUTS route starts its chains at
        draws of the kept proposal.
    initial_state : distribution or mapping, optional
        Prior of the initial state of terms without one
        (:func:`~pymc_wendy.bayes.forward.forward_model`).
    target_ess : float
        The importance ESS the adaptive proposal aims at: batches are added until the
        weights' ESS reaches it (with ``k`` below the threshold) or there are
        ``max_batches``. About 1000 makes the 2.5 % and 97.5 % quantiles of a 95 % interval
        rest on 25 effective draws each.
    max_batches : int
        Most batches of the adaptive proposal (each as many draws as ``idata``'s posterior,
        one forward solve per draw).
    draws, tune, chains, target_accept : optional
        NUTS route: draws and tuning steps per chain (default chains: as in ``idata``), and
        the step-size adaptation's target (0.95: on a 21-point Lotka-Volterra series 0.9
        gave 64 divergences in 2 x 2000 draws, 0.95 gave 2 in 2 x 1000).
    random_seed : int, optional
        Seed of the proposals, the resampling and NUTS.
    progressbar : bool
        Show the progress of the forward solves and of NUTS.
    max_nuts_seconds : float, optional
        A time budget for the NUTS route: where it would run and its estimated time (the
        Laplace fit's seconds per gradient, times the weak sampler's mean steps per draw,
        times the draws and tuning steps of every chain, over the cores) exceeds this,
        :class:`CorrectionTooCostly` is raised instead. The budget also holds while NUTS
        runs: an estimate that was too low (a forward posterior harder than the weak one,
        more steps per draw) stops the sampler when the budget is spent, or as soon as a
        fifth of the iterations are done and their pace projects more than 1.5 times the
        budget, with the same exception. ``pw.sample``'s automatic correction uses it
        (:data:`~pymc_wendy.bayes.sampling.NUTS_BUDGET_FACTOR`).
    nuts_sampler : {"auto", "nutpie", "pymc"}
        The NUTS route's sampler (:mod:`~pymc_wendy.bayes.forward_nuts`). "auto": nutpie,
        with the log-density and the solves compiled by numba, where it is installed,
        every term's model is of first order, its inputs (if any) doses or held values, and
        PyMC's NUTS would take more than :data:`NUTPIE_ABOVE_SECONDS` by the estimate above;
        PyMC's NUTS otherwise.

    Returns
    -------
    DataTree
        ``posterior`` of the forward-solve model (every free variable, initial states
        included) and ``observed_data``. ``attrs``: ``route`` ("importance" or "nuts"),
        ``proposal`` (the kept one), ``pareto_k``, ``pareto_k_variance`` (module doc),
        ``pareto_k_tails`` (the Laplace t's worst ``k`` where the default proposal weighed
        it after the moved draws, whose tails it probes; else NaN), ``khat_threshold``,
        ``importance_ess`` (the weights' effective sample size), ``laplace_ok`` (1 when the
        Laplace fit converged to a proper covariance, else 0), ``n_forward_solves``,
        ``time_s``. The importance route also keeps the proposal draws with their
        Pareto-smoothed ``log_weight`` in a ``proposal`` group, and resamples as many draws
        as ``idata`` has.
    """
    _check_options(method, proposal, target_ess, max_batches, max_nuts_seconds, nuts_sampler)
    require_posterior(idata)
    start = time.perf_counter()
    model = pm.modelcontext(model)
    fmodel, terms = forward_model(model, initial_state=initial_state)
    rng = np.random.default_rng(random_seed)
    weighted = _reweight(
        idata, model, fmodel, terms, proposal, target_ess, max_batches, rng, progressbar
    )
    if weighted["ess"] == 0.0:
        raise RuntimeError(
            "the forward solve failed (or the forward density is zero) at every proposal "
            "draw: give the initial state a prior (initial_state=) that puts its mass where "
            "the ODE solution exists and fits the data"
        )
    attrs = {
        "pareto_k": weighted["k"],
        "pareto_k_variance": weighted["k_variance"],
        "pareto_k_tails": weighted["tails_k"],
        "khat_threshold": weighted["threshold"],
        "importance_ess": weighted["ess"],
        "laplace_ok": int(weighted["laplace_ok"]),  # netCDF attributes cannot be booleans
        "proposal": weighted["proposal"],
    }
    forward = weighted["forward"]
    use_importance = method == "importance" or (method == "auto" and _trusted(weighted))
    if use_importance:
        if not _trusted(weighted):
            warnings.warn(
                f"the importance weights' Pareto k is {weighted['k']:.2f} and their variance "
                f"k {weighted['k_variance']:.2f}, above {weighted['threshold']:.2f}: the "
                "reweighted draws are unreliable; method='nuts' (or 'auto') samples the "
                "forward model instead",
                RuntimeWarning,
                stacklevel=2,
            )
        result = _resampled(weighted, idata, rng)
        route = "importance"
        n_solves = forward.n_solves
    else:
        nchains = chains or idata.posterior.sizes["chain"]
        sampler, estimate = _sampler(nuts_sampler, terms, weighted, idata, draws, tune, nchains)
        if max_nuts_seconds is not None and estimate > max_nuts_seconds:
            raise CorrectionTooCostly(estimate, max_nuts_seconds, weighted)
        options = {
            "draws": draws, "tune": tune, "chains": nchains, "target_accept": target_accept,
            "progressbar": progressbar, "nuts_sampler": sampler,
        }  # fmt: skip
        try:
            result = _warm_nuts(fmodel, weighted, options, rng, budget=max_nuts_seconds)
        except OverBudget as exc:
            raise CorrectionTooCostly(estimate, max_nuts_seconds, weighted, stopped=exc) from None
        n_solves = forward.n_solves + int(result.sample_stats["n_steps"].sum())
        route = "nuts"
    result.attrs.update(
        attrs, route=route, n_forward_solves=n_solves, time_s=time.perf_counter() - start
    )
    return result


class CorrectionTooCostly(RuntimeError):
    """The correction's NUTS route would take longer than its budget
    (``forward_correction(max_nuts_seconds=)``).

    Attributes
    ----------
    estimate, budget : float
        The NUTS route's estimated time and the budget, in seconds.
    pareto_k, pareto_k_variance : float
        Why the importance route was not trusted.
    """

    def __init__(
        self, estimate: float, budget: float, weighted: dict, stopped: OverBudget | None = None
    ):
        self.estimate, self.budget = float(estimate), float(budget)
        self.pareto_k = float(weighted["k"])
        self.pareto_k_variance = float(weighted["k_variance"])
        why = (
            f"the importance weights' Pareto k ({self.pareto_k:.2f}, variance k "
            f"{self.pareto_k_variance:.2f}) call for the forward NUTS route"
        )
        if stopped is None:
            super().__init__(
                f"{why}, estimated at {_duration(self.estimate)}, beyond the budget of "
                f"{_duration(self.budget)}"
            )
        elif stopped.elapsed > self.budget:
            super().__init__(
                f"{why}, estimated at {_duration(self.estimate)}; it was stopped when the "
                f"budget of {_duration(self.budget)} was spent, after {stopped.done} of "
                f"{stopped.total} iterations"
            )
        else:
            super().__init__(
                f"{why}, estimated at {_duration(self.estimate)}; it was stopped after "
                f"{stopped.done} of {stopped.total} iterations ({_duration(stopped.elapsed)}), "
                f"whose pace projects {_duration(stopped.projected)}, beyond the budget of "
                f"{_duration(self.budget)}"
            )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _nuts_seconds(
    weighted: dict, idata, draws: int, tune: int, chains: int, seconds: float | None = None
) -> float:
    """The NUTS route's estimated wall time: seconds per gradient (``seconds``, default the
    Laplace fit's) times steps per draw (the weak sampler's mean, whose geometry the
    warm-started forward NUTS shares; 31, a depth-5 tree, when it did not record them) times
    the iterations of every chain, the chains spread over the cores."""
    stats = idata.children.get("sample_stats")
    steps = 31.0
    if stats is not None and "n_steps" in stats:
        steps = max(float(np.mean(stats["n_steps"])), 1.0)
    cores = max(1, min(chains, len(os.sched_getaffinity(0))))
    rounds = int(np.ceil(chains / cores))
    if seconds is None:
        seconds = weighted["seconds_per_gradient"]
    return seconds * steps * (draws + tune) * rounds


def _native_seconds(weighted: dict) -> float:
    """Seconds per gradient of the forward model compiled natively: its terms' sensitivity
    solves at the Laplace mode (the best of three; the rest of a compiled gradient costs
    microseconds)."""
    forward = weighted["forward"]
    out = forward.space.evaluate(weighted["mode"][None, :])
    total = 0.0
    for k, term in enumerate(forward.terms):
        p, _, u0 = forward.term_inputs(out, 0, k)
        best = np.inf
        for _ in range(3):
            start = time.perf_counter()
            term.op.solve(p, u0)
            best = min(best, time.perf_counter() - start)
        total += best
    return total


def _check_options(method, proposal, target_ess, max_batches, max_nuts_seconds, sampler) -> None:
    """A ``ValueError`` naming an option of :func:`forward_correction` it cannot use."""
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}; got {method!r}")
    if proposal not in _PROPOSALS:
        raise ValueError(f"proposal must be one of {_PROPOSALS}; got {proposal!r}")
    if not (np.isfinite(target_ess) and target_ess > 0):
        raise ValueError(f"target_ess must be a positive number; got {target_ess!r}")
    if not (isinstance(max_batches, int | np.integer) and max_batches >= 1):
        raise ValueError(f"max_batches must be an integer >= 1; got {max_batches!r}")
    if max_nuts_seconds is not None and not (
        isinstance(max_nuts_seconds, int | float | np.number) and max_nuts_seconds > 0
    ):
        raise ValueError(f"max_nuts_seconds must be a positive number; got {max_nuts_seconds!r}")
    if sampler not in _SAMPLERS:
        raise ValueError(f"nuts_sampler must be one of {_SAMPLERS}; got {sampler!r}")
    if sampler == "nutpie" and importlib.util.find_spec("nutpie") is None:
        raise ImportError("nuts_sampler='nutpie' needs nutpie (pip install nutpie)")


def require_posterior(idata) -> None:
    """A ``TypeError`` unless ``idata`` is a sampler's result (a DataTree with a posterior)."""
    if not isinstance(idata, xr.DataTree) or "posterior" not in idata.children:
        raise TypeError(
            "idata must be the result of pw.sample or pm.sample (a DataTree with a posterior "
            f"group); got {type(idata).__name__}"
        )


def _posterior_values(idata, model: pm.Model) -> dict[str, np.ndarray]:
    """Every free variable of ``model`` from ``idata``, flattened to (S, ...)."""
    post = idata.posterior
    if post.sizes.get("chain", 0) * post.sizes.get("draw", 0) == 0:
        raise ValueError("idata.posterior has no draws")
    out = {}
    for rv in model.free_RVs:
        if rv.name not in post:
            raise ValueError(f"idata.posterior has no variable {rv.name!r} of the model")
        x = np.asarray(post[rv.name])
        out[rv.name] = x.reshape(-1, *x.shape[2:])
    return out


def _split(model: pm.Model, x: pt.TensorVariable) -> tuple[dict, dict[str, np.ndarray]]:
    """Value variables of ``model`` as slices of the raveled vector ``x`` (NUTS's order),
    and each free variable's positions in ``x``."""
    point, out, where, start = model.initial_point(), {}, {}, 0
    for v in model.value_vars:
        shape = np.shape(point[v.name])
        n = int(np.prod(shape))
        out[v] = x[start : start + n].reshape(shape)
        where[model.values_to_rvs[v].name] = np.arange(start, start + n)
        start += n
    return out, where


class _Space:
    """A model's unconstrained space, raveled as NUTS sees it.

    ``evaluate(X)`` gives, at every row of ``X``, the log-density of everything but the
    weak/forward terms (priors with their Jacobians, other observed variables, potentials),
    the constrained values of the free variables and the ``extra`` graphs;
    ``from_constrained`` maps posterior draws into the space. Both are vectorised over the
    draws (one call per batch, not one per draw).
    """

    def __init__(self, model: pm.Model, skip: list[str], extra: list | None = None):
        self.rvs = [model.values_to_rvs[v] for v in model.value_vars]
        x = pt.dvector("x")
        split, self.where = _split(model, x)
        self.size = sum(w.size for w in self.where.values())
        keep = [v for v in (*model.basic_RVs, *model.potentials) if v.name not in skip]
        logp = model.logp(vars=keep, jacobian=True)
        outs = [logp, *model.replace_rvs_by_values([*self.rvs, *(extra or [])])]
        outs = graph_replace(outs, split, strict=False)
        self._fn = _batched([x], outs)
        to_value = []
        for rv in self.rvs:
            tr = model.rvs_to_transforms.get(rv)
            to_value.append(rv if tr is None else tr.forward(rv, *rv.owner.inputs))
        holders = [rv.type() for rv in self.rvs]
        graphs = graph_replace(to_value, dict(zip(self.rvs, holders, strict=True)), strict=False)
        self._to = _batched(holders, graphs)

    def from_constrained(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """Posterior draws (each variable ``(S, ...)``) as rows of the space, ``(S, size)``."""
        cols = self._to(*(np.asarray(values[rv.name], dtype=float) for rv in self.rvs))
        return np.column_stack([np.reshape(c, (c.shape[0], -1)) for c in cols])

    def evaluate(self, X: np.ndarray) -> list:
        """``[log-density, constrained value of every free variable..., extras...]`` at the
        rows of ``X``, each with a leading axis of draws."""
        return self._fn(np.atleast_2d(np.asarray(X, dtype=float)))


def _batched(inputs: list, outputs: list):
    """A compiled function of ``inputs`` with a leading batch axis added to each, computing
    ``outputs`` at every batch element (pytensor's graph vectorisation)."""
    batch = [pt.tensor(dtype=v.dtype, shape=(None, *v.type.shape)) for v in inputs]
    vectorised = vectorize_graph(outputs, replace=dict(zip(inputs, batch, strict=True)))
    n = batch[0].shape[0]
    # an output that depends on no input (a fixed noise level) comes back without the axis
    vectorised = [
        v if set(ancestors([v])) & set(batch) else pt.broadcast_to(v, (n, *o.shape))
        for v, o in zip(vectorised, outputs, strict=True)
    ]
    return pytensor.function(batch, vectorised, on_unused_input="ignore", mode="FAST_COMPILE")


def _term_parameters(fmodel: pm.Model, term: ForwardTerm) -> list:
    """``[p, sigma]`` of a forward term, as graphs of the forward model's variables."""
    obs = fmodel[term.name]
    sigma = obs.owner.inputs[3]
    for node in apply_ancestors([obs]):
        if node.op is term.op:
            return [node.inputs[0], sigma]
    raise RuntimeError(f"{term.name}: the forward solution is not in the forward model")


class _Forward:
    """The forward model's log-density at a point of its unconstrained space: the priors
    (``_Space``) plus each term's exact log-likelihood from the compiled solver."""

    def __init__(self, fmodel: pm.Model, terms: list[ForwardTerm]):
        self.model = fmodel
        self.terms = terms
        extra = [g for term in terms for g in _term_parameters(fmodel, term)]
        self.space = _Space(fmodel, [t.name for t in terms], extra)
        names = [rv.name for rv in self.space.rvs]
        self._u0 = [names.index(t.initial_state) if t.initial_state else None for t in terms]
        self._deterministics = None
        self.n_solves = 0

    def term_inputs(self, out: list, i: int, k: int) -> tuple:
        """``(p, sigma, u0)`` of term ``k`` at row ``i`` of :meth:`_Space.evaluate`'s ``out``."""
        n = len(self.space.rvs)
        p, sigma = out[1 + n + 2 * k][i], out[2 + n + 2 * k][i]
        j = self._u0[k]
        u0 = self.terms[k].likelihood.initial_state.u0 if j is None else out[1 + j][i]
        return p, sigma, u0

    def logp(self, X: np.ndarray, bar: ProgressBar | None = None) -> np.ndarray:
        """The forward log-density at every row of ``X`` (one solve per row)."""
        out = self.space.evaluate(X)
        total = np.asarray(out[0], dtype=float).copy()
        for i in range(total.size):
            for k, term in enumerate(self.terms):
                p, sigma, u0 = self.term_inputs(out, i, k)
                self.n_solves += 1
                try:
                    U = term.op.solve_values(p, u0)
                except SolveFailed:
                    total[i] = -np.inf
                    break
                total[i] += term.log_likelihood(U, sigma)
            if bar is not None:
                bar.update(advance=1)
        return total

    def constrained(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """Every free variable's constrained value at the rows of ``X``, ``(S, ...)``."""
        out = self.space.evaluate(X)
        return {rv.name: out[1 + i] for i, rv in enumerate(self.space.rvs)}

    def deterministics(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """The model's ``pm.Deterministic`` values at the rows of ``X``, ``(S, ...)``: a
        reweighted posterior has them as a sampled one does."""
        dets = self.model.deterministics
        if not dets:
            return {}
        if self._deterministics is None:
            x = pt.dvector("x")
            split, _ = _split(self.model, x)
            graphs = graph_replace(self.model.replace_rvs_by_values(dets), split, strict=False)
            self._deterministics = _batched([x], graphs)
        values = self._deterministics(np.atleast_2d(np.asarray(X, dtype=float)))
        return {d.name: v for d, v in zip(dets, values, strict=True)}


def _weak_logp(idata, model: pm.Model, Zw: np.ndarray, rows: np.ndarray | None = None):
    """The weak posterior's log-density (unnormalised, unconstrained space) at its draws
    ``Zw`` (at the draws ``rows`` of them, given).

    The sampler's own ``logp`` of each draw when ``sample_stats`` has it and it agrees with
    the model up to a constant (a whitened run's log-density differs by the whitening's
    log-determinant) at a few checked draws; otherwise computed at every draw."""
    full = _Space(model, [])
    S = Zw.shape[0]
    rows = np.arange(S) if rows is None else np.asarray(rows)
    stats = idata.children.get("sample_stats")
    for name in ("logp", "lp"):
        if stats is None or name not in stats:
            continue
        stored = np.asarray(stats[name], dtype=float).reshape(-1)
        if stored.size != S or not np.all(np.isfinite(stored[rows])):
            continue
        check = rows[np.unique(np.linspace(0, rows.size - 1, _CHECKED_DRAWS).astype(int))]
        diff = full.evaluate(Zw[check])[0] - stored[check]
        if np.ptp(diff) <= 1e-6 * (1.0 + np.max(np.abs(stored[check]))):
            return stored[rows]
    return np.asarray(full.evaluate(Zw[rows])[0], dtype=float)


# The Laplace fits' function runs in Python (no fusion: a fused elementwise Op in Python
# loops over scalars, 50 ms a call): PyTensor's C VM compiled 14 C modules for it, 15 s with
# a cold cache (the first check on a machine: 18-19 s against 2 s now), for 1.0 against
# 1.9 ms a call over the 120-130 calls of a check (FitzHugh-Nagumo, 513 points).
_GRADIENT_MODE = Mode(linker="py", optimizer="fast_run").excluding("fusion")


class _Gradient:
    """The forward model's log-density and gradient (sensitivity solves) on raveled points."""

    def __init__(self, fmodel: pm.Model, space: _Space):
        self.names = [fmodel.rvs_to_values[rv].name for rv in space.rvs]
        self.where = [space.where[rv.name] for rv in space.rvs]
        point = fmodel.initial_point()
        self.shapes = [np.shape(point[n]) for n in self.names]
        logp = fmodel.logp()
        values = [fmodel.rvs_to_values[rv] for rv in space.rvs]
        grad = pt.concatenate([g.ravel() for g in pytensor.grad(logp, values)])
        # one function, so that the value and the gradient share one sensitivity solve
        self._fn = fmodel.compile_fn([logp, grad], mode=_GRADIENT_MODE)
        self.n_calls = 0
        self.seconds = 0.0

    def point(self, x: np.ndarray) -> dict:
        return {
            n: x[w].reshape(s) for n, w, s in zip(self.names, self.where, self.shapes, strict=True)
        }

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        self.n_calls += 1
        start = time.perf_counter()
        value, grad = self._fn(self.point(x))
        self.seconds += time.perf_counter() - start
        if not np.isfinite(value):
            return -np.inf, np.zeros_like(x)
        return float(value), np.asarray(grad, dtype=float)


def _maximise(gradient: _Gradient, start: np.ndarray, scale: np.ndarray, free: np.ndarray):
    """L-BFGS on the forward log-density (analytic gradient) over the coordinates ``free``,
    the others held at ``start``; the point and its log-density. The coordinates are
    measured in units of ``scale`` (about a posterior sd): L-BFGS's first step has length
    one, which in raw units can leave the region where the solution exists (an initial
    state of sd 0.002 whose gradient is 1e4).

    Restarted from where it stopped until a restart gains nothing: where ``scale`` is far
    wider than the posterior in one coordinate, the line search's steps leave the region
    where the solution exists and L-BFGS stops on "no relative reduction" with a gradient
    of 3e5 (logistic growth's initial state at 513 points, 13 posterior sds per unit of
    ``scale``: four restarts to the mode, where one run stopped 2000 log-density units short).
    """
    s = scale[free]
    x, best = start.copy(), -np.inf
    for _ in range(_MAX_RESTARTS):
        base = x

        def neg(y, base=base):
            trial = base.copy()
            trial[free] += s * y
            v, g = gradient(trial)
            return (-v, -g[free] * s) if np.isfinite(v) else (1e300, np.zeros_like(y))

        res = optimize.minimize(
            neg, np.zeros(free.size), jac=True, method="L-BFGS-B",
            options={"maxiter": 2000, "ftol": 1e-13, "gtol": 1e-9},
        )  # fmt: skip
        x = base.copy()
        x[free] += s * res.x
        gained = -float(res.fun) - best
        best = max(best, -float(res.fun))
        if not gained > 1e-9 * abs(best):
            break
    return x, best


#: restarts of the Laplace fit's L-BFGS at most (:func:`_maximise`)
_MAX_RESTARTS = 10


def _inverse_hessian(gradient: _Gradient, x: np.ndarray, step: np.ndarray):
    """Inverse of minus the Hessian at ``x`` from central differences of the gradient with
    steps ``step``; None when it is not positive definite."""
    n = x.size
    H = np.empty((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = step[i]
        H[i] = (gradient(x - e)[1] - gradient(x + e)[1]) / (2 * step[i])
    H = 0.5 * (H + H.T)
    if not np.all(np.isfinite(H)):
        return None
    try:
        L = np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        return None
    inv = np.linalg.inv(L)
    return inv.T @ inv


def _fit_laplace(gradient: _Gradient, starts: list[np.ndarray], new: np.ndarray, scale):
    """Laplace approximation of the forward model: from each start, the new initial states
    fitted first with the rest held (a sparse series' joint fit from a poor initial state
    can run to a far, poor mode), then everything; the best mode kept. The Hessian twice,
    the second pass's differences a hundredth of the first's standard deviations."""
    best, best_logp = starts[0], -np.inf
    every = np.arange(starts[0].size)
    for x0 in starts:
        if new.size:
            x0, _ = _maximise(gradient, x0, scale, new)
        x, logp = _maximise(gradient, x0, scale, every)
        if logp > best_logp:
            best, best_logp = x, logp
    cov = _inverse_hessian(gradient, best, 1e-2 * scale)
    if cov is not None:
        cov2 = _inverse_hessian(gradient, best, 1e-2 * np.sqrt(np.diag(cov)))
        cov = cov if cov2 is None else cov2
    return best, cov


def _reweight(
    idata, model, fmodel, terms, proposal: str, target_ess: float, max_batches: int, rng,
    progressbar: bool,
) -> dict:  # fmt: skip
    """Proposal draws around the forward model's Laplace approximation and their weights:
    the moved weak draws, and the adaptive t mixture where those are not good enough
    (module doc)."""
    weak = _Space(model, [t.name for t in terms])
    Zw = weak.from_constrained(_posterior_values(idata, model))
    # a draw with NaN would make the Laplace fit's starting moments NaN, and then every
    # proposal fails: such draws are left out, and too few left is an error naming them
    finite = np.flatnonzero(np.all(np.isfinite(Zw), axis=1))
    if finite.size < MIN_DRAWS:
        raise ValueError(
            f"forward_correction moves the weak posterior's draws and needs at least "
            f"{MIN_DRAWS} with finite values; idata.posterior has {Zw.shape[0]} draws, "
            f"{finite.size} of them finite"
        )
    log_qw = _weak_logp(idata, model, Zw, finite)
    Zw = Zw[finite]
    forward = _Forward(fmodel, terms)
    where = forward.space.where
    shared = np.concatenate([where[rv.name] for rv in weak.rvs])
    new = np.setdiff1d(np.arange(forward.space.size), shared)
    starts, step = _starts(forward, Zw, log_qw, shared, new, rng)
    gradient = _Gradient(fmodel, forward.space)
    mode, cov = _fit_laplace(gradient, starts, new, step)
    forward.n_solves += gradient.n_calls
    laplace_ok = cov is not None
    if not laplace_ok:
        cov = np.diag(step**2)
        cov[np.ix_(shared, shared)] = np.cov(Zw, rowvar=False)
    S = Zw.shape[0]
    mixture = _TMixture(forward, progressbar)
    best, tails_k = None, np.nan
    for kind in _CANDIDATES[proposal]:
        done = best is not None and _trusted(best) and _enough(best, target_ess)
        # the moved draws are trusted only once the Laplace t has probed the tails beyond
        # them (:func:`_probed`): a further candidate only where the ones so far are not
        # good enough or not probed
        probed = best is not None and best["proposal"] != "moved"
        if proposal == "auto" and best is not None and (not laplace_ok or (done and probed)):
            break
        if kind == "moved":
            Z, log_q = _moved(Zw, log_qw, mode, cov, shared, new, rng)
            this = _smoothed(_forward_logp(forward, Z, progressbar) - log_q, Z)
        elif kind == "laplace_t":
            this = mixture.add(mode, cov, S, rng)
        else:
            # adaptive importance sampling: each batch a t with the weighted moments of all
            # draws so far, every draw weighed against the mixture of all batches
            this = mixture.add(*_weighted_moments(best, cov), S, rng)
            # more batches for the weights' k and the ESS only: where the variance k stays
            # large at the target ESS (sparse series), further batches barely lower it
            while not _enough(this, target_ess) and mixture.n_batches < max_batches:
                this = mixture.add(*_weighted_moments(this, cov), S, rng)
        this["proposal"] = kind
        if proposal == "auto" and kind == "laplace_t" and best is not None:
            tails_k = _probed(best, this)
        if best is None or proposal != "auto" or _better(this, best):
            best = this
    seconds_per_gradient = gradient.seconds / max(gradient.n_calls, 1)
    return {
        **best, "forward": forward, "mode": mode, "cov": cov, "laplace_ok": laplace_ok,
        "seconds_per_gradient": seconds_per_gradient, "tails_k": tails_k,
    }  # fmt: skip


def _probed(moved: dict, laplace_t: dict) -> float:
    """Record in ``moved`` the Laplace t's worst ``k`` as ``k_tails``, which
    :func:`_trusted` reads, and return it. The moved draws keep the weak posterior's shape
    around the Laplace fit, so where the target reaches beyond it they never go there and
    their weights cannot show it; the t's heavier tails do go there (two compartments with
    three doses, ``docs/forward.md``: the moved draws' variance ``k`` 0.59-0.82 with sds
    0.6-0.7 of the reference, the Laplace t's 0.84-0.96)."""
    moved["k_tails"] = _worst_k(laplace_t)
    return moved["k_tails"]


def _enough(weighted: dict, target_ess: float) -> bool:
    return weighted["k"] <= weighted["threshold"] and weighted["ess"] >= target_ess


def _better(this: dict, best: dict) -> bool:
    """Whether proposal ``this`` beats ``best``: trusted ``k`` first, then the larger ESS
    among trusted ones, else the one whose larger ``k`` is smaller."""
    ok, best_ok = _trusted(this), _trusted(best)
    if ok and best_ok:
        return this["ess"] > best["ess"]
    return ok or (not best_ok and _worst_k(this) < _worst_k(best))


class _TMixture:
    """Batches of multivariate t draws (:data:`LAPLACE_T_DF` degrees of freedom), their
    forward log-densities, and their weights against the mixture of all batches (the
    deterministic-mixture weights of multiple importance sampling)."""

    def __init__(self, forward: _Forward, progressbar: bool):
        self.forward, self.progressbar = forward, progressbar
        self.dists, self.Z, self.log_p = [], [], []
        self._log_q = []  # per batch of draws: every batch's t log-density at them (B, S)

    @property
    def n_batches(self) -> int:
        return len(self.dists)

    def add(self, loc, shape, S: int, rng) -> dict:
        dist = stats.multivariate_t(loc=loc, shape=shape, df=LAPLACE_T_DF, seed=rng)
        self.dists.append(dist)
        self.Z.append(np.reshape(dist.rvs(size=S), (S, loc.size)))
        self.log_p.append(_forward_logp(self.forward, self.Z[-1], self.progressbar))
        # each density is evaluated once per batch of draws, not again at every new batch
        self._log_q = [
            np.vstack([q, dist.logpdf(Z)]) for q, Z in zip(self._log_q, self.Z[:-1], strict=True)
        ]
        self._log_q.append(np.array([d.logpdf(self.Z[-1]) for d in self.dists]))
        # equal batch sizes: the mixture's density is the mean of the batches' (the constant
        # log(n_batches) cancels in the normalised weights)
        log_q = np.logaddexp.reduce(np.hstack(self._log_q), axis=0)
        return _smoothed(np.concatenate(self.log_p) - log_q, np.concatenate(self.Z))


def _weighted_moments(weighted: dict, fallback: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of a weighted proposal's draws (the target's, estimated); the
    ``fallback`` covariance where too few effective draws make the estimate singular."""
    w, Z = np.exp(weighted["log_weight"]), weighted["Z"]
    mean = w @ Z
    cov = ((Z - mean).T * w) @ (Z - mean)
    try:
        np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        cov = fallback
    return mean, cov


def _starts(forward: _Forward, Zw, log_qw, shared, new, rng) -> tuple[list, np.ndarray]:
    """Starts of the Laplace fit (the weak mean, and the weak draw of largest density, with
    the new initial states from :func:`_initial_state_start`) and difference steps."""
    fmodel, where = forward.model, forward.space.where
    point = fmodel.initial_point()
    x0 = np.empty(forward.space.size)
    for rv in forward.space.rvs:
        x0[where[rv.name]] = np.ravel(point[fmodel.rvs_to_values[rv].name])
    x0[shared] = Zw.mean(axis=0)
    if new.size:
        x0 = _initial_state_start(forward, x0, new, rng)
    step = np.empty_like(x0)
    step[shared] = Zw.std(axis=0)
    step[new] = 0.05 * (np.abs(x0[new]) + 0.1)
    x1 = x0.copy()
    x1[shared] = Zw[np.argmax(log_qw)]
    return [x0, x1], step


def _initial_state_start(forward: _Forward, x0: np.ndarray, new: np.ndarray, rng) -> np.ndarray:
    """``x0`` with the new initial states (coordinates ``new``) at the best of their prior's
    centre and :data:`_INITIAL_STATE_DRAWS` draws of their prior, by the forward
    log-density with the rest held: the centre of a data-based prior is a noisy data point,
    from which the solution may not exist (a negative population, say). One initial state
    at a time: with several terms (a hierarchical model's units), a joint draw good for
    every unit at once is rare."""
    names = [
        rv.name for rv in forward.space.rvs if np.isin(forward.space.where[rv.name], new).all()
    ]
    n = _INITIAL_STATE_DRAWS
    x = x0.copy()
    for name in names:
        where = forward.space.where[name]
        draws = pm.draw(forward.model[name], draws=n, random_seed=rng)
        values = {k: np.repeat(v, n, axis=0) for k, v in forward.constrained(x).items()}
        values[name] = draws
        candidates = np.repeat(x[None], n + 1, axis=0)
        candidates[1:, where] = forward.space.from_constrained(values)[:, where]
        logp = forward.logp(candidates)
        if np.isfinite(logp).any():
            x = candidates[int(np.argmax(logp))]
    return x


def _forward_logp(forward: _Forward, Z: np.ndarray, progressbar: bool) -> np.ndarray:
    """The forward log-density at every proposal draw (one solve each), with progress."""
    bar = ProgressBar(progressbar, "forward solves", Z.shape[0], "")
    try:
        return forward.logp(Z, bar)
    finally:
        bar.close()


def _moved(Zw, log_qw, mode, cov, shared, new, rng):
    """The weak draws mapped affinely onto the Laplace approximation (mean and covariance),
    a new initial state drawn from the widened conditional Gaussian, and the proposal's
    log-density at each (up to a constant)."""
    S = Zw.shape[0]
    Lw = np.linalg.cholesky(np.cov(Zw, rowvar=False) + 1e-12 * np.eye(Zw.shape[1]))
    Css = cov[np.ix_(shared, shared)]
    A = np.linalg.cholesky(Css) @ np.linalg.inv(Lw)
    Z = np.empty((S, mode.size))
    Z[:, shared] = mode[shared] + (Zw - Zw.mean(axis=0)) @ A.T
    log_q = log_qw.copy()  # - log|det A|, a constant
    if new.size:
        K = np.linalg.solve(Css, cov[np.ix_(shared, new)]).T
        cond = cov[np.ix_(new, new)] - K @ cov[np.ix_(shared, new)]
        Lc = np.linalg.cholesky(cond * PROPOSAL_WIDENING**2)
        eps = rng.standard_normal((S, new.size))
        Z[:, new] = mode[new] + (Z[:, shared] - mode[shared]) @ K.T + eps @ Lc.T
        log_q += -0.5 * np.sum(eps**2, axis=1) - np.sum(np.log(np.diag(Lc)))
    return Z, log_q


def _smoothed(log_w: np.ndarray, Z: np.ndarray) -> dict:
    """PSIS of the raw log-weights of draws ``Z``: smoothed normalised log-weights, ``k``,
    its threshold, the ESS, and ``k_variance``."""
    S = log_w.size
    threshold = float(min(1.0 - 1.0 / np.log10(S), 0.7))
    if not np.isfinite(log_w).any():
        return {
            "log_weight": np.full(S, -np.inf),
            "k": np.inf,
            "k_variance": np.inf,
            "threshold": threshold,
            "ess": 0.0,
            "Z": Z,
        }
    lw, k = _psis(log_w)
    # The weights' k vouches for bounded functions of the draws only; the variances, which
    # set the intervals' widths, weigh the tails by the squared deviation. On 21-point
    # Lotka-Volterra series k was 0.5 while this k was 0.75 and the sds 10-25 % short.
    dev2 = (Z - np.exp(lw) @ Z) ** 2
    with np.errstate(divide="ignore"):
        k_var = max(_psis(log_w + np.log(d))[1] for d in dev2.T)
    return {
        "log_weight": lw,
        "k": k,
        "k_variance": k_var,
        "threshold": threshold,
        "ess": float(1.0 / np.sum(np.exp(2 * lw))),
        "Z": Z,
    }


def _psis(log_w: np.ndarray) -> tuple[np.ndarray, float]:
    """ArviZ's Pareto smoothing of raw log-weights: normalised smoothed log-weights and k."""
    # psislw takes what PSIS-LOO gives it, a log-likelihood, and weights by its negative
    neg = np.where(np.isfinite(log_w), -log_w, np.inf)[None]
    with np.errstate(all="ignore"):
        smooth, k = xr.DataArray(neg, dims=("chain", "draw")).azstats.psislw(dim=["chain", "draw"])
    lw = np.asarray(smooth).reshape(-1)
    if np.isnan(lw).any() or np.isnan(k):
        # tail weights hundreds of log units apart underflow in ArviZ's Pareto fit (its
        # first quartile subnormal), which returns NaN weights with a small k: the raw
        # weights, dominated by a few draws, and an infinite k say what they are
        finite = np.isfinite(log_w)
        lw = np.where(finite, log_w - np.max(log_w, where=finite, initial=-np.inf), -np.inf)
        k = np.inf
    return lw - np.logaddexp.reduce(lw), float(k)


def _trusted(weighted: dict) -> bool:
    """Whether the weights' Pareto k and the variance k are both at most the threshold."""
    return _worst_k(weighted) <= weighted["threshold"]


def _worst_k(weighted: dict) -> float:
    return max(weighted["k"], weighted["k_variance"], weighted.get("k_tails", -np.inf))


def _resampled(weighted: dict, idata, rng) -> xr.DataTree:
    """A systematic resample by the smoothed weights (one chain of as many draws as
    ``idata``), the proposal with its ``log_weight`` in the ``proposal`` group, and the
    observed data."""
    w = np.exp(weighted["log_weight"])
    S = idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"]
    u = (rng.random() + np.arange(S)) / S
    # in random order: sorted, the resample runs through the proposal batches in turn (the
    # mapped weak draws, then t draws), and ArviZ's rank diagnostics read the batches'
    # differences as non-stationarity (an ESS of 15 for 1000 draws of 994 distinct values)
    idx = rng.permutation(np.minimum(np.searchsorted(np.cumsum(w), u), w.size - 1))
    forward, Z = weighted["forward"], weighted["Z"]
    every = forward.constrained(Z) | forward.deterministics(Z)
    post = {n: v[idx][None] for n, v in every.items()}
    chains = idata.posterior.sizes["chain"]
    if Z.shape[0] % chains:  # non-finite weak draws were left out: one chain
        chains = 1
    proposal = {n: v.reshape(chains, -1, *v.shape[1:]) for n, v in every.items()}
    proposal["log_weight"] = weighted["log_weight"].reshape(chains, -1)
    model = forward.model
    tree = xr.DataTree.from_dict(
        {"posterior": _dataset(post, model), "proposal": _dataset(proposal, model)}
    )
    if "observed_data" in idata.children:
        tree["observed_data"] = idata["observed_data"]
    return tree


def _dataset(values: Mapping[str, np.ndarray], model: pm.Model) -> xr.Dataset:
    """Draws (chain, draw, ...) as a Dataset with the model's dims and coords."""
    data, coords = {}, {}
    for name, v in values.items():
        dims = model.named_vars_to_dims.get(name) or tuple(
            f"{name}_dim_{i}" for i in range(v.ndim - 2)
        )
        data[name] = (("chain", "draw", *dims), v)
        for d in dims:
            if model.coords.get(d) is not None:
                coords[d] = list(model.coords[d])
    return xr.Dataset(data, coords=coords)


def _mass_matrix(weighted: dict) -> np.ndarray:
    """The importance-weighted covariance of the kept proposal's draws where they carry
    :data:`_MASS_ESS_PER_DIM` effective draws per dimension, else the Laplace covariance:
    on sparse series the Laplace fit is 10-20 % too narrow and the weighted draws see the
    skew (2.5 times the ESS per second on a 21-point Lotka-Volterra series)."""
    cov = weighted["cov"]
    if weighted["ess"] < _MASS_ESS_PER_DIM * cov.shape[0]:
        return cov
    return _weighted_moments(weighted, cov)[1]


def _warm_nuts(fmodel, weighted, options: dict, rng, budget=None):
    """NUTS on the forward model (:mod:`~pymc_wendy.bayes.forward_nuts`): PyMC's started at
    draws of the kept proposal, nutpie's whitened at the Laplace mode; the mass matrix from
    :func:`_mass_matrix`. ``options``: draws, tuning steps, chains, target acceptance,
    progress bar and the sampler (:func:`_sampler`)."""
    opts = dict(options)
    sampler = opts.pop("nuts_sampler")
    seed, cov = int(rng.integers(2**31)), _mass_matrix(weighted)
    if sampler == "nutpie":
        return nutpie_nuts(fmodel, weighted["mode"], cov, seed=seed, budget=budget, **opts)
    forward, Z = weighted["forward"], weighted["Z"]
    w = np.exp(weighted["log_weight"])
    chains = opts.pop("chains")
    starts = rng.choice(Z.shape[0], size=chains, p=w / w.sum())
    values = forward.constrained(Z[starts])
    initvals = [{n: v[c] for n, v in values.items()} for c in range(chains)]
    return pymc_nuts(fmodel, cov, initvals, seed=seed, budget=budget, **opts)


def _sampler(nuts_sampler: str, terms: list[ForwardTerm], weighted: dict, idata, *counts):
    """The NUTS route's sampler and its estimated time (:func:`_nuts_seconds` of ``counts``,
    the draws, tuning steps and chains): ``nuts_sampler``, or for "auto" nutpie where it is
    installed, every forward solution is compiled natively and PyMC's NUTS is estimated at
    more than :data:`NUTPIE_ABOVE_SECONDS`, else PyMC's."""
    estimate = _nuts_seconds(weighted, idata, *counts)
    sampler = nuts_sampler
    if sampler == "auto":
        native = all(compiled_natively(term.op) for term in terms)
        installed = importlib.util.find_spec("nutpie") is not None
        slow = estimate > NUTPIE_ABOVE_SECONDS
        sampler = "nutpie" if native and installed and slow else "pymc"
    if sampler == "nutpie":
        estimate = _nuts_seconds(weighted, idata, *counts, _native_seconds(weighted))
    return sampler, estimate
