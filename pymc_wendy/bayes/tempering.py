r"""Replica-exchange chains on a ladder of relaxed weak likelihoods (SFT-style tempering).

Smooth functional tempering (Campbell & Steele 2012) runs a population of chains, each on a
*relaxed* version of the model, and swaps states between neighbouring rungs so that the easy
rungs carry the exact one across the barriers between modes. The weak form has no latent
trajectory to relax, so :func:`sample_sft` relaxes the weak likelihood itself
(``docs/tempering.md`` has the derivation and the choices):

``relaxation="hybrid"`` (default)
    Both at once: rung ``m`` relaxes the covariance to ``alpha_m`` (below) and raises the
    relaxed likelihood to the power ``beta_m``, so the easiest rung is weak least squares
    flattened to nearly the prior. Covariance relaxation removes the spurious modes the
    weak likelihood's ``S(p)`` creates; the power bridges the gap between weak least squares
    (biased at high noise) and the model, which covariance relaxation alone cannot.
``relaxation="covariance"``
    Rung ``m`` replaces the covariance of every :class:`~pymc_wendy.WeakODELikelihood` by

    .. math:: S_{\alpha_m}(p) = (1 - \alpha_m)\, S(p) + \alpha_m\, c\, I,

    with ``c = tr S(p_0) / (K D)`` at the start ``p_0`` (the WENDy-MLE): ``alpha = 0`` is the
    model, ``alpha = 1`` is weak least squares ``|r(p)|^2 / (2 c)`` (no ``log det S(p)``, no
    ``S(p)^{-1}`` weighting, a Gaussian in ``p`` for models linear in the parameters). The spurious
    modes of the weak likelihood come from its parameter-dependent covariance (a ``p`` that
    inflates ``S`` explains the residual as noise); they fade as ``alpha`` grows.
``relaxation="power"``
    Classic parallel tempering: rung ``m`` raises every likelihood term (observed variables
    and potentials) to the power ``beta_m``, the prior untouched (``beta = 1`` is the model).

Rungs are placed at levels ``0 = s_0 < ... < s_{R-1} = 1`` mapped to ``alpha(s) =
(alpha_min^s - alpha_min) / (1 - alpha_min)`` (geometric in between, exactly 1 and 0 at the
ends) and/or ``beta(s) = beta_min^(1 - s)``. During tuning the gaps between levels are adapted to
equalise the swap acceptance of all neighbouring pairs (Vousden, Farr & Mandel 2016); the
ladder is frozen for the draws, so every swap is an exact Metropolis-Hastings move between
two fixed targets and every rung's chain has its rung's target as stationary distribution.

Within a rung, each chain moves by NUTS (multinomial, generalised no-U-turn criterion) in the
model's unconstrained space, with its own step size (dual averaging) and dense mass matrix
(started from the inverse Hessian at the start point, re-estimated in doubling windows).
Swaps follow the deterministic even-odd scheme (Okabe et al. 2001; Syed et al. 2022):
even pairs on even iterations, odd pairs on odd ones, which moves states through the ladder
faster than random pairs (``swap="random"`` gives the SFT paper's scheme).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import xarray as xr
from pymc.blocking import DictToArrayBijection
from pymc.pytensorf import join_nonshared_inputs
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import applys_between
from scipy import stats

from pymc_wendy._progress import ProgressBar
from pymc_wendy._threads import one_blas_thread
from pymc_wendy.backends.op import WeakLogLikelihoodOp

__all__ = ["SFTWarning", "sample_sft"]

Relaxation = Literal["covariance", "power", "hybrid"]
_MAX_ENERGY_ERROR = 1000.0


class SFTWarning(UserWarning):
    """Swaps that never happen, divergences or disagreeing chains in :func:`sample_sft`."""


# --- the ladder ----------------------------------------------------------------------------


@dataclass
class _Ladder:
    """Rung levels ``s`` in [0, 1] (1 = the model) and their map to ``alpha`` or ``beta``."""

    relaxation: Relaxation
    s: np.ndarray
    alpha_min: float = 1e-6
    beta_min: float = 1e-3

    @property
    def alpha(self) -> np.ndarray:
        if self.relaxation == "power":
            return np.zeros_like(self.s)
        a = self.alpha_min
        return np.clip((a**self.s - a) / (1.0 - a), 0.0, 1.0)

    @property
    def beta(self) -> np.ndarray:
        if self.relaxation == "covariance":
            return np.ones_like(self.s)
        return self.beta_min ** (1.0 - self.s)

    def level_of(self, value: float) -> float:
        """The level ``s`` of a relaxation value (``alpha``, ``beta`` or, hybrid, ``s``)."""
        if self.relaxation == "hybrid":
            return value
        if self.relaxation == "power":
            return 1.0 - math.log(value) / math.log(self.beta_min)
        a = self.alpha_min
        return math.log(value * (1.0 - a) + a) / math.log(a)

    def equalise(self, rates: np.ndarray, step: float) -> None:
        """Widen gaps whose swaps are accepted more often than average, narrow the others."""
        ok = np.isfinite(rates)
        if ok.sum() < 2:
            return
        gaps = np.diff(self.s)
        logg = np.log(gaps)
        logg[ok] += step * (rates[ok] - rates[ok].mean())
        gaps = np.exp(logg)
        gaps /= gaps.sum()
        gaps = np.maximum(gaps, 1e-4)  # keep rungs distinct
        self.s = np.concatenate([[0.0], np.cumsum(gaps / gaps.sum())])
        self.s[-1] = 1.0


# --- the tempered model --------------------------------------------------------------------


class _TemperedModel:
    """Compiled ``log pi(x; alpha, beta) = prior(x) + beta * lik_alpha(x)`` on the unconstrained
    vector ``x``, its gradient, and the value-only parts used by swaps."""

    def __init__(self, model: pm.Model, start: dict, relaxation: Relaxation):
        value_vars = model.value_vars
        self.point0 = {v.name: np.asarray(start[v.name]) for v in value_vars}
        self.x0 = DictToArrayBijection.map(self.point0)
        prior = model.varlogp
        lik = model.datalogp
        alpha = pt.dscalar("alpha")
        beta = pt.dscalar("beta")
        nodes = [
            n
            for n in applys_between(value_vars, [lik])
            if isinstance(n.op, WeakLogLikelihoodOp) and n.op.relax_scale is None
        ]
        self.relax_scales: list[float] = []
        self.alpha_min = 1e-6
        if relaxation != "power":
            if not nodes:
                raise ValueError(
                    f"relaxation={relaxation!r} relaxes the model's WeakODELikelihood terms and "
                    "there are none; use relaxation='power'"
                )
            scales, eig_min = self._relax_scales(nodes, value_vars)
            self.relax_scales = scales
            self.alpha_min = float(np.clip(eig_min, 1e-12, 0.1))
            replace = {}
            for node, c in zip(nodes, scales, strict=True):
                new = node.op.relaxed(c)(*node.inputs, alpha)
                replace.update(dict(zip(node.outputs, new, strict=True)))
            lik = graph_replace(lik, replace=replace, strict=False)
        (prior_x, lik_x), x = join_nonshared_inputs(self.point0, [prior, lik], value_vars)
        x.name = "x"
        total = prior_x + beta * lik_x
        grad = pt.grad(total, x)
        # One compiled function serves moves and swaps: a second, value-only one cost a numba
        # compile per model (about 0.7 s) for saving some 20 us on each of a few thousand swaps.
        self._fg = pytensor.function(
            [x, alpha, beta], [total, grad, prior_x, lik_x], on_unused_input="ignore"
        )
        self._fg.trust_input = True
        self._one = np.asarray(1.0)
        self.n = self.x0.data.size

    def _relax_scales(self, nodes, value_vars) -> tuple[list[float], float]:
        """``c = tr S / (K D)`` of each weak term at the start, and the smallest eigenvalue
        of ``S / c`` over terms (where the covariance ladder's geometric part begins)."""
        inputs = [i for n in nodes for i in n.inputs]
        fn = pytensor.function(value_vars, inputs, on_unused_input="ignore", mode="FAST_COMPILE")
        values = fn(*(self.point0[v.name] for v in value_vars))
        scales, eig = [], []
        k = 0
        for node in nodes:
            lik = node.op.likelihood
            p = np.asarray(values[k], dtype=float)
            sigma = np.sqrt(values[k + 1]) if node.op.infer_sigma else None
            k += len(node.inputs)
            try:
                S = lik.covariance(p, sigma)
            except Exception as exc:  # noqa: BLE001 - re-raised with the context users need
                raise ValueError(
                    f"the weak likelihood is undefined at the start point (p = {p}): {exc}; "
                    "pass initvals inside its support"
                ) from exc
            c = float(np.trace(S) / S.shape[0])
            scales.append(c)
            eig.append(float(np.linalg.eigvalsh(S)[0]) / c)
        return scales, min(eig)

    def value_grad(self, x, alpha: float, beta: float):
        total, grad, prior, lik = self._fg(x, np.asarray(alpha), np.asarray(beta))
        return float(total), grad, float(prior), float(lik)

    def parts(self, x, alpha: float) -> tuple[float, float]:
        _, _, prior, lik = self._fg(x, np.asarray(alpha), self._one)
        return float(prior), float(lik)


# --- NUTS in whitened coordinates ----------------------------------------------------------


@dataclass
class _State:
    x: np.ndarray
    lp: float = np.nan
    grad: np.ndarray | None = None
    prior: float = np.nan
    lik: float = np.nan
    stale: bool = True  # lp/grad not valid for the rung's current target


@dataclass
class _Leaf:
    y: np.ndarray
    p: np.ndarray
    lp: float
    g: np.ndarray
    info: tuple = ()  # what the caller's function returned besides lp and g


@dataclass
class _Subtree:
    beg: _Leaf  # the point next to where the tree was extended from
    end: _Leaf  # the far end
    sample: _Leaf
    logw: float
    rho: np.ndarray
    valid: bool
    n_steps: int = 0
    sum_accept: float = 0.0
    diverging: bool = False


def _criterion(p_minus, p_plus, rho) -> bool:
    return bool(p_plus @ rho > 0 and p_minus @ rho > 0)


class _NUTS:
    """One multinomial NUTS transition with identity metric (the caller whitens)."""

    def __init__(self, fun, eps: float, rng: np.random.Generator, max_depth: int):
        self.fun = fun  # y -> (lp, grad, info)
        self.eps = eps
        self.rng = rng
        self.max_depth = max_depth

    def _leapfrog(self, z: _Leaf, direction: int) -> _Leaf:
        h = direction * self.eps
        p = z.p + 0.5 * h * z.g
        y = z.y + h * p
        lp, g, info = self.fun(y)
        if not np.isfinite(lp):
            return _Leaf(y, p, -np.inf, np.zeros_like(y))
        return _Leaf(y, p + 0.5 * h * g, lp, g, info)

    def _build(self, z: _Leaf, depth: int, direction: int, E0: float) -> _Subtree:
        if depth == 0:
            leaf = self._leapfrog(z, direction)
            E = -leaf.lp + 0.5 * leaf.p @ leaf.p if np.isfinite(leaf.lp) else np.inf
            dE = E0 - E  # log weight relative to the start
            diverging = not (-dE < _MAX_ENERGY_ERROR)
            return _Subtree(
                beg=leaf,
                end=leaf,
                sample=leaf,
                logw=dE if np.isfinite(dE) else -np.inf,
                rho=leaf.p.copy(),
                valid=not diverging,
                n_steps=1,
                sum_accept=math.exp(min(dE, 0.0)) if np.isfinite(dE) else 0.0,
                diverging=diverging,
            )
        init = self._build(z, depth - 1, direction, E0)
        if not init.valid:
            return init
        final = self._build(init.end, depth - 1, direction, E0)
        out = _Subtree(
            beg=init.beg,
            end=final.end,
            sample=init.sample,
            logw=np.logaddexp(init.logw, final.logw),
            rho=init.rho + final.rho,
            valid=final.valid,
            n_steps=init.n_steps + final.n_steps,
            sum_accept=init.sum_accept + final.sum_accept,
            diverging=final.diverging,
        )
        if not final.valid:
            return out
        if math.log(self.rng.random()) < final.logw - out.logw:
            out.sample = final.sample
        out.valid = (
            _criterion(init.beg.p, final.end.p, out.rho)
            and _criterion(init.beg.p, final.beg.p, init.rho + final.beg.p)
            and _criterion(init.end.p, final.end.p, final.rho + init.end.p)
        )
        return out

    def transition(self, y, lp, g) -> tuple[_Leaf, dict]:
        p0 = self.rng.standard_normal(y.size)
        z0 = _Leaf(y, p0, lp, g)
        E0 = -lp + 0.5 * p0 @ p0
        minus = plus = z0
        sample = z0
        logw = 0.0
        rho = p0.copy()
        n_steps, sum_accept, diverging, depth = 0, 0.0, False, 0
        while depth < self.max_depth:
            forward = self.rng.random() < 0.5
            sub = self._build(plus if forward else minus, depth, 1 if forward else -1, E0)
            n_steps += sub.n_steps
            sum_accept += sub.sum_accept
            depth += 1
            if not sub.valid:
                diverging = sub.diverging
                break
            if math.log(self.rng.random()) < sub.logw - logw:
                sample = sub.sample
            logw = np.logaddexp(logw, sub.logw)
            if forward:
                bck_rho, fwd_rho = rho, sub.rho
                bck_beg, bck_end, fwd_beg, fwd_end = minus.p, plus.p, sub.beg.p, sub.end.p
                plus = sub.end
            else:
                bck_rho, fwd_rho = sub.rho, rho
                bck_beg, bck_end, fwd_beg, fwd_end = sub.end.p, sub.beg.p, minus.p, plus.p
                minus = sub.end
            rho = bck_rho + fwd_rho
            if not (
                _criterion(bck_beg, fwd_end, rho)
                and _criterion(bck_beg, fwd_beg, bck_rho + fwd_beg)
                and _criterion(bck_end, fwd_end, fwd_rho + bck_end)
            ):
                break
        stats = {
            "accept": sum_accept / max(n_steps, 1),
            "n_steps": n_steps,
            "depth": depth,
            "diverging": diverging,
            "energy": -sample.lp + 0.5 * sample.p @ sample.p,
        }
        return sample, stats


# --- adaptation ----------------------------------------------------------------------------


class _DualAverage:
    """Hoffman & Gelman (2014) step-size adaptation toward a mean acceptance statistic."""

    def __init__(self, eps: float, target: float):
        self.target = target
        self.restart(eps)

    def restart(self, eps: float) -> None:
        self.mu = math.log(10.0 * eps)
        self.hbar = 0.0
        self.log_bar = math.log(eps)
        self.t = 0

    def update(self, accept: float) -> float:
        self.t += 1
        eta = 1.0 / (self.t + 10.0)
        self.hbar = (1.0 - eta) * self.hbar + eta * (self.target - accept)
        log_eps = self.mu - math.sqrt(self.t) / 0.05 * self.hbar
        w = self.t**-0.75
        self.log_bar = w * log_eps + (1.0 - w) * self.log_bar
        return math.exp(log_eps)

    @property
    def final(self) -> float:
        return math.exp(self.log_bar)


def _metric_windows(tune: int) -> set[int]:
    """Iterations after which the mass matrix is re-estimated: Stan's doubling windows."""
    if tune < 40:
        return set()
    start, end = (75, 50) if tune >= 200 else (int(0.15 * tune), int(0.1 * tune))
    ends, width, it = set(), 25 if tune >= 200 else max(5, int(0.075 * tune)), start
    while it + width < tune - end:
        nxt = it + width
        if nxt + 2 * width >= tune - end:
            nxt = tune - end
        ends.add(nxt)
        it, width = nxt, 2 * width
    return ends


def _covariance_factor(samples: np.ndarray, segment: np.ndarray, fallback: np.ndarray):
    """Cholesky factor of the pooled within-segment covariance (shrunk toward its diagonal).

    A segment is a run of iterations without a swap that jumped between basins (``_jump``).
    Deviations are taken from each segment's own mean, so a rung whose states come from
    several basins gets the metric of one basin (what the integrator sees) rather than the
    spread between basins, which would force a step size far too small for either. Only the
    second half of the window is used.
    """
    half = samples.shape[0] // 2
    samples, segment = samples[half:], segment[half:]
    _, idx, counts = np.unique(segment, return_inverse=True, return_counts=True)
    dof = samples.shape[0] - counts.size
    if dof < 10 or np.unique(samples, axis=0).shape[0] < 10:  # too little to measure anything
        return fallback
    means = np.zeros((counts.size, samples.shape[1]))
    np.add.at(means, idx, samples)
    dev = samples - means[idx] / counts[idx, None]
    cov = dev.T @ dev / dof
    shrink = 5.0 / (dof + 5.0)
    cov = (1.0 - shrink) * cov + shrink * np.diag(np.diag(cov))
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        return fallback


def _initial_factor(target: _TemperedModel, x, alpha, beta, fallback=None) -> np.ndarray:
    """Inverse-Hessian metric at ``x`` (central differences of the gradient); where the
    Hessian is not negative definite, ``fallback`` or else a diagonal one."""
    n = x.size
    h = 1e-5 * np.maximum(1.0, np.abs(x))
    H = np.empty((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = h[i]
        H[:, i] = (
            target.value_grad(x + e, alpha, beta)[1] - target.value_grad(x - e, alpha, beta)[1]
        ) / (2.0 * h[i])
    H = -0.5 * (H + H.T)
    try:
        np.linalg.cholesky(H)  # positive definite: a local mode of the rung
        return np.linalg.cholesky(np.linalg.inv(H))
    except np.linalg.LinAlgError:
        if fallback is not None:
            return fallback.copy()
        d = np.abs(np.diag(H))
        d = np.where(np.isfinite(d) & (d > 0), d, 1.0)
        return np.diag(1.0 / np.sqrt(d))


@dataclass
class _Replica:
    """One chain of one population: its state, step size and mass matrix."""

    state: _State
    factor: np.ndarray
    eps: float
    da: _DualAverage
    ref_factor: np.ndarray  # the rung's curvature at the WENDy-MLE: the fallback metric
    window: list = field(default_factory=list)
    segment: int = 0  # incremented when a swap brings a state from another basin
    window_segment: list = field(default_factory=list)


# --- the sampler ---------------------------------------------------------------------------


class _Population:
    """One chain of :func:`sample_sft`: a full ladder of replicas, its swaps and its records."""

    def __init__(self, replicas, rng, tune, draws, swap, max_depth, keep_rungs, n):
        R = len(replicas)
        self.replicas: list[_Replica] = replicas
        self.rng = rng
        self.tune, self.swap, self.max_depth = tune, swap, max_depth
        self.windows = _metric_windows(tune)
        self.s: np.ndarray | None = None
        self.att = np.zeros(R - 1)
        self.acc = np.zeros(R - 1)
        self.rung_accept = np.zeros(R)
        self.top: dict[str, list] = {
            k: [] for k in ("x", "accept", "n_steps", "depth", "diverging", "eps", "lp", "energy")
        }
        self.rungs = np.empty((draws, R, n)) if keep_rungs else None

    def run(self, begin: int, stop: int, target, lad: _Ladder):
        """Iterations ``begin`` to ``stop - 1``: a NUTS move on every rung, then swaps.
        Returns the swap attempts and acceptances made while tuning (for the ladder)."""
        if self.s is None or not np.array_equal(self.s, lad.s):
            for rep in self.replicas:  # lp and gradient belong to the old rungs
                rep.state.stale = True
            self.s = lad.s.copy()
        alpha, beta = lad.alpha, lad.beta
        R, tune, top = len(self.replicas), self.tune, self.top
        win_att = np.zeros(R - 1)
        win_acc = np.zeros(R - 1)
        for it in range(begin, stop):
            tuning = it < tune
            for r, rep in enumerate(self.replicas):
                st = _move(target, rep, alpha[r], beta[r], self.rng, self.max_depth)
                if tuning:
                    rep.eps = rep.da.update(st["accept"])
                    if it >= 75 or tune < 200:
                        rep.window.append(rep.state.x.copy())
                        rep.window_segment.append(rep.segment)
                    continue
                self.rung_accept[r] += st["accept"]
                if r == R - 1:
                    top["accept"].append(st["accept"])
                    top["n_steps"].append(st["n_steps"])
                    top["depth"].append(st["depth"])
                    top["diverging"].append(st["diverging"])
                    top["eps"].append(rep.eps)
                    top["energy"].append(st["energy"])
            for k in _pairs(it, R - 1, self.swap, self.rng):
                ok = _swap(target, self.replicas, k, lad, self.rng)
                if tuning:
                    win_att[k] += 1
                    win_acc[k] += ok
                else:
                    self.att[k] += 1
                    self.acc[k] += ok
            if not tuning:
                st_top = self.replicas[-1].state
                top["x"].append(st_top.x.copy())
                # prior and likelihood stay valid across a swap (the lik is re-evaluated)
                top["lp"].append(st_top.prior + beta[-1] * st_top.lik)
                if self.rungs is not None:
                    for r, rep in enumerate(self.replicas):
                        self.rungs[it - tune, r] = rep.state.x
            elif it + 1 in self.windows:
                for rep in self.replicas:
                    rep.factor = _covariance_factor(
                        np.array(rep.window), np.array(rep.window_segment), rep.ref_factor
                    )
                    rep.window, rep.window_segment = [], []
                    rep.da.restart(rep.eps)
            if it + 1 == tune:
                for rep in self.replicas:
                    rep.eps = rep.da.final
        return win_att, win_acc, self.acc.sum(), self.att.sum()

    def result(self) -> dict:
        return {
            "top": {k: np.asarray(v) for k, v in self.top.items()},
            "rungs": self.rungs,
            "att": self.att,
            "acc": self.acc,
            "rung_accept": self.rung_accept / max(len(self.top["x"]), 1),
            "eps": np.array([rep.eps for rep in self.replicas]),
        }


def _n_workers(cores: int | None, chains: int) -> int:
    """Worker processes for the populations: forked (they inherit the compiled functions), so
    only where fork is safe and cheap, Linux, and not from a daemonic process."""
    if cores is not None and int(cores) < 1:
        raise ValueError(f"cores must be at least 1; got {cores}")
    if not sys.platform.startswith("linux") or "fork" not in mp.get_all_start_methods():
        return 1
    if mp.current_process().daemon:  # e.g. inside a multiprocessing.Pool: no children allowed
        return 1
    return min(int(cores or os.cpu_count() or 1), chains)


_FORKED: tuple | None = None  # what forked workers inherit: (target, ladder, populations)


def _worker(conn, indices: list[int]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    target, lad, populations = _FORKED
    mine = [populations[i] for i in indices]
    try:
        while True:
            cmd = conn.recv()
            if cmd[0] == "run":
                lad.s = np.asarray(cmd[3])
                conn.send(("ok", [pop.run(cmd[1], cmd[2], target, lad) for pop in mine]))
            elif cmd[0] == "result":
                conn.send(("ok", [pop.result() for pop in mine]))
            else:
                return
    except BaseException:  # noqa: BLE001 - the parent re-raises it with the traceback
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


class _Runner:
    """Runs the populations block by block, in this process or in forked workers."""

    def __init__(self, target, lad: _Ladder, populations: list[_Population], workers: int):
        global _FORKED
        self.target, self.lad, self.populations = target, lad, populations
        self.workers: list = []
        if workers < 2:
            return
        ctx = mp.get_context("fork")
        _FORKED = (target, lad, populations)
        try:
            for indices in np.array_split(np.arange(len(populations)), workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, indices.tolist()), daemon=True)
                with warnings.catch_warnings():
                    # Python warns about forking a multi-threaded process; the only other
                    # threads are idle BLAS pools (which have fork handlers), as with the
                    # fork pm.sample does on Linux. The progress bar starts after this.
                    warnings.filterwarnings("ignore", "This process .* is multi-threaded")
                    proc.start()
                child.close()
                self.workers.append((proc, parent))
        finally:
            _FORKED = None

    @staticmethod
    def _receive(conn):
        status, payload = conn.recv()
        if status == "error":
            raise RuntimeError(f"a sample_sft worker process failed:\n{payload}")
        return payload

    def _all(self, message) -> list:
        for _, conn in self.workers:
            conn.send(message)
        return [out for _, conn in self.workers for out in self._receive(conn)]

    def run(self, begin: int, stop: int, s: np.ndarray):
        if self.workers:
            outs = self._all(("run", begin, stop, s))
        else:
            outs = [pop.run(begin, stop, self.target, self.lad) for pop in self.populations]
        acc, att = sum(o[2] for o in outs), sum(o[3] for o in outs)
        rate = acc / att if att else np.nan
        return sum(o[0] for o in outs), sum(o[1] for o in outs), rate

    def results(self) -> list[dict]:
        if self.workers:
            return self._all(("result",))
        return [pop.result() for pop in self.populations]

    def close(self) -> None:
        for proc, conn in self.workers:
            try:
                conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
            conn.close()
        self.workers = []


def sample_sft(
    draws: int = 1000,
    *,
    model: pm.Model | None = None,
    tune: int = 1000,
    chains: int = 4,
    rungs: int = 6,
    ladder: Sequence[float] | None = None,
    relaxation: Relaxation = "hybrid",
    adapt_ladder: bool | None = None,
    swap: Literal["deo", "random"] = "deo",
    target_accept: float = 0.8,
    max_treedepth: int = 8,
    initvals: Mapping | Sequence[Mapping] | None = None,
    random_seed: int | None = None,
    progressbar: bool = True,
    keep_rungs: bool = True,
    cores: int | None = None,
):
    """Sample a model with weak likelihoods by replica exchange over relaxed rungs.

    Parameters
    ----------
    draws : int
        Draws per chain after tuning (of every rung; the top rung's form the posterior).
    model : pm.Model, optional
        Defaults to the model on the context stack.
    tune : int
        Tuning iterations: step sizes, mass matrices and (unless fixed) the ladder adapt.
    chains : int
        Independent replica populations; each is a full ladder, so R-hat compares chains
        that never exchange states.
    rungs : int
        Number of rungs (including the exact one) when ``ladder`` is not given.
    ladder : sequence of float, optional
        The rungs, from the easiest to the model: ``alpha`` values decreasing to 0
        (covariance), ``beta`` values increasing to 1 (power) or levels ``s`` increasing to 1
        (hybrid). Given, it is kept fixed unless ``adapt_ladder=True``.
    relaxation : {"hybrid", "covariance", "power"}
        What the rungs relax (module doc, ``docs/tempering.md``). ``"power"`` also works for
        models without weak likelihoods.
    adapt_ladder : bool, optional
        Equalise swap acceptance across pairs during tuning. Default: True unless ``ladder``
        is given.
    swap : {"deo", "random"}
        Deterministic even-odd pairs every iteration, or one random pair with probability
        1/2 per iteration (Campbell & Steele).
    target_accept : float
        Target mean acceptance statistic of the NUTS step-size adaptation.
    max_treedepth : int
        Maximum NUTS tree depth.
    initvals : dict or sequence of dicts, optional
        Starting values (original scale) for all populations, or one dict per population;
        variables not given start at :func:`~pymc_wendy.initial_values` (the WENDy-MLE), else
        at the model's initial point. Every rung of a population starts at the same point.
    random_seed : int, optional
        Seed; the whole run is reproducible from it.
    progressbar : bool
        Show a progress bar.
    keep_rungs : bool
        Store the draws of every rung in the ``rungs`` group.
    cores : int, optional
        Worker processes the populations are spread over (default: the number of CPUs, at
        most ``chains``). Workers are forked, so this applies on Linux; elsewhere, and with
        ``cores=1``, the populations run one after another in this process. The draws are
        the same either way.

    Returns
    -------
    xarray.DataTree
        ``posterior``: the top rung (the model's posterior), ready for ``az.summary``;
        ``sample_stats``: the top rung's NUTS statistics (``diverging``, ``tree_depth``,
        ``n_steps``, ``step_size``, ``acceptance_rate``, ``lp``) plus ``swap_accept``
        (chain, pair), ``rung_acceptance`` and ``rung_step_size`` (chain, rung), and the
        final ladder ``alpha``, ``beta``, ``level`` (rung); ``rungs`` (if ``keep_rungs``): the
        draws of every rung with a ``rung`` dimension.

    Warns
    -----
    SFTWarning
        When a neighbouring pair never swapped during the draws (the ladder is too coarse:
        add rungs), when a pair swaps with probability below 0.2 (the message gives the
        number of rungs for about 0.35, from the ladder's communication barrier, which
        ``sample_stats.attrs["communication_barrier"]`` holds), when the top rung diverged,
        or when its chains disagree (R-hat > 1.01).
    """
    model = pm.modelcontext(model)
    if relaxation not in ("covariance", "power", "hybrid"):
        raise ValueError(
            f"relaxation must be 'covariance', 'power' or 'hybrid'; got {relaxation!r}"
        )
    if swap not in ("deo", "random"):
        raise ValueError(f"swap must be 'deo' or 'random'; got {swap!r}")
    if int(draws) < 1 or int(tune) < 0 or int(chains) < 1:
        raise ValueError("draws and chains must be positive and tune non-negative")
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be in (0, 1); got {target_accept}")
    if not model.value_vars:
        raise ValueError("the model has no free variables to sample")
    workers = _n_workers(cores, int(chains))
    rng = np.random.default_rng(random_seed)
    # the ladder's scale and the first mass matrices come from the WENDy-MLE, not from
    # wherever a chain is started (possibly a spurious mode)
    starts, reference = _starts(model, initvals, int(chains))
    target = _TemperedModel(model, reference, relaxation)
    lad = _make_ladder(relaxation, rungs, ladder, target)
    if adapt_ladder is None:
        adapt_ladder = ladder is None
    R, C, n = lad.s.size, int(chains), target.n
    xs = [DictToArrayBijection.map({k: starts[c][k] for k in target.point0}).data for c in range(C)]
    rngs = [np.random.default_rng(s) for s in rng.bit_generator.seed_seq.spawn(C)]

    ref_factors = [
        _initial_factor(target, target.x0.data, lad.alpha[r], lad.beta[r]) for r in range(R)
    ]
    populations = []
    for c in range(C):
        row = []
        for r in range(R):
            # the curvature where the chain starts, if that is a local mode of the rung
            factor = _initial_factor(target, xs[c], lad.alpha[r], lad.beta[r], ref_factors[r])
            eps = 0.5 / n**0.25
            row.append(
                _Replica(
                    _State(xs[c].copy()),
                    factor,
                    eps,
                    _DualAverage(eps, target_accept),
                    ref_factors[r],
                )
            )
        populations.append(
            _Population(row, rngs[c], int(tune), int(draws), swap, max_treedepth, keep_rungs, n)
        )

    # blocks of iterations end where the ladder is updated (it is shared by all populations,
    # which run independently in between, in this process or in worker processes)
    ladder_every = max(10, int(tune) // 25)
    ladder_stop = int(0.8 * tune)
    total = int(tune) + int(draws)
    updates = (
        {it + 1 for it in range(int(tune)) if (it + 1) % ladder_every == 0 and it < ladder_stop}
        if adapt_ladder
        else set()
    )
    ends = sorted(updates | set(range(20, total, 20)) | {total})
    n_updates = 0
    bar = None
    start_time = time.perf_counter()
    # the likelihood's factorisations are small: threads only contend with each other
    limits = one_blas_thread()
    runner = _Runner(target, lad, populations, workers)
    try:
        bar = _Progress(progressbar, total, C)
        begin = 0
        for stop in ends:
            win_att, win_acc, swap_rate = runner.run(begin, stop, lad.s)
            if stop in updates:
                rates = np.where(win_att > 0, win_acc / np.maximum(win_att, 1), np.nan)
                lad.equalise(rates, 2.0 / math.sqrt(1.0 + n_updates))
                n_updates += 1
            bar.update(stop - 1, swap_rate if stop > tune else np.nan)
            begin = stop
        results = runner.results()
    finally:
        runner.close()
        if bar is not None:
            bar.close()
        limits.restore_original_limits()
    elapsed = time.perf_counter() - start_time
    return _result(model, target, lad, results, C, int(draws), elapsed, relaxation, swap)


def _starts(model: pm.Model, initvals, chains: int) -> tuple[list[dict], dict]:
    """Unconstrained start points, one per population, and the reference point (the
    WENDy-MLE where available, whatever the populations' starts)."""
    from pymc_wendy.bayes.sampling import _unconstrained_point, initial_values

    if initvals is None or isinstance(initvals, Mapping):
        per_chain = [dict(initvals or {})] * chains
    else:
        per_chain = [dict(v) for v in initvals]
        if len(per_chain) != chains:
            raise ValueError(f"initvals has {len(per_chain)} entries for {chains} chains")
    base = initial_values(model)
    starts = []
    for given in per_chain:
        point = _unconstrained_point(model, {**base, **given})
        for name in given:
            if not np.all(np.isfinite(point[model.rvs_to_values[model[name]].name])):
                raise ValueError(f"initvals[{name!r}] is outside the variable's support")
        starts.append(point)
    return starts, _unconstrained_point(model, base)


def _make_ladder(relaxation, rungs, ladder, target: _TemperedModel) -> _Ladder:
    lad = _Ladder(relaxation, np.zeros(1), alpha_min=target.alpha_min)
    if ladder is None:
        R = int(rungs)
        if R < 2:
            raise ValueError(f"rungs must be at least 2; got {rungs}")
        lad.s = np.linspace(0.0, 1.0, R)
        return lad
    values = np.asarray(ladder, dtype=float)
    if values.ndim != 1 or values.size < 2 or not np.all(np.isfinite(values)):
        raise ValueError(f"ladder must be a finite sequence of at least 2 values; got {ladder}")
    if relaxation == "covariance":
        if values[-1] != 0.0 or np.any(np.diff(values) >= 0) or values[0] > 1 or values[-1] < 0:
            raise ValueError(
                "a covariance ladder lists alpha values in [0, 1], strictly decreasing from the "
                f"easiest rung to the model's alpha = 0; got {list(values)}"
            )
        lad.alpha_min = float(min(lad.alpha_min, values[-2] / 10.0))
    elif relaxation == "hybrid":
        if values[-1] != 1.0 or np.any(np.diff(values) <= 0) or values[0] < 0:
            raise ValueError(
                "a hybrid ladder lists levels s in [0, 1], strictly increasing to the model's "
                f"s = 1; got {list(values)}"
            )
    else:
        if values[-1] != 1.0 or np.any(np.diff(values) <= 0) or values[0] <= 0:
            raise ValueError(
                "a power ladder lists beta values in (0, 1], strictly increasing to the model's "
                f"beta = 1; got {list(values)}"
            )
        lad.beta_min = float(values[0])
    lad.s = np.array([lad.level_of(v) for v in values])
    lad.s[0], lad.s[-1] = max(lad.s[0], 0.0), 1.0
    return lad


def _move(target, rep: _Replica, alpha, beta, rng, max_depth) -> dict:
    """One NUTS transition of a replica on its rung, in coordinates whitened by its metric."""
    st = rep.state
    if st.stale:
        st.lp, st.grad, st.prior, st.lik = target.value_grad(st.x, alpha, beta)
        st.stale = False
    L = rep.factor

    def fun(y):
        x = L @ y
        lp, g, prior, lik = target.value_grad(x, alpha, beta)
        return lp, L.T @ g, (x, g, prior, lik)

    y0 = np.linalg.solve(L, st.x)
    nuts = _NUTS(fun, rep.eps, rng, max_depth)
    leaf, stats = nuts.transition(y0, st.lp, L.T @ st.grad)
    if leaf.info:
        x, g, prior, lik = leaf.info
        rep.state = _State(x, leaf.lp, g, prior, lik, stale=False)
    return stats


def _jump(rep: _Replica, new: np.ndarray) -> bool:
    """Whether a swap moves a rung's state further than two independent draws of the rung's
    current metric would be apart (squared distance beyond the 99.99 % point of 2 chi2_n):
    a jump between basins, which starts a new segment for the metric estimate."""
    d = np.linalg.solve(rep.factor, new - rep.state.x)
    return bool(d @ d > 2.0 * _chi2_9999(d.size))


@lru_cache
def _chi2_9999(n: int) -> float:
    from scipy.stats import chi2

    return float(chi2.ppf(0.9999, n))


def _pairs(it: int, n_pairs: int, swap: str, rng) -> list[int]:
    if swap == "deo":
        return list(range(it % 2, n_pairs, 2))
    return [int(rng.integers(n_pairs))] if rng.random() < 0.5 else []


def _swap(target, row: list[_Replica], k: int, lad: _Ladder, rng) -> bool:
    """Exact Metropolis-Hastings exchange of the states of rungs ``k`` and ``k + 1``."""
    a, b = row[k], row[k + 1]
    for rep, r in ((a, k), (b, k + 1)):
        if rep.state.stale:
            rep.state.lp, rep.state.grad, rep.state.prior, rep.state.lik = target.value_grad(
                rep.state.x, lad.alpha[r], lad.beta[r]
            )
            rep.state.stale = False
    alpha, beta = lad.alpha, lad.beta
    if alpha[k] == alpha[k + 1]:
        lik_a_at_b, lik_b_at_a = b.state.lik, a.state.lik  # same likelihood on every rung
    else:
        lik_a_at_b = target.parts(b.state.x, alpha[k])[1]  # rung k's likelihood at b's state
        lik_b_at_a = target.parts(a.state.x, alpha[k + 1])[1]
    # the priors cancel: pi_k(x_b) pi_{k+1}(x_a) / (pi_k(x_a) pi_{k+1}(x_b))
    log_r = (
        beta[k] * lik_a_at_b
        + beta[k + 1] * lik_b_at_a
        - beta[k] * a.state.lik
        - beta[k + 1] * b.state.lik
    )
    if not (np.isfinite(log_r) and math.log(rng.random()) < log_r):
        return False
    for rep, new in ((a, b.state.x), (b, a.state.x)):
        rep.segment += _jump(rep, new)
    a.state, b.state = b.state, a.state
    a.state.stale = b.state.stale = True  # lp and gradient belong to the other rung
    if alpha[k] != alpha[k + 1]:
        a.state.lik, b.state.lik = lik_a_at_b, lik_b_at_a
    return True


class _Progress:
    def __init__(self, enabled: bool, total: int, chains: int):
        self._bar = ProgressBar(
            enabled, f"SFT ({chains} chains)", total, "swap acc. {task.fields[swap]}", swap="tuning"
        )

    def update(self, it: int, swap_rate: float) -> None:
        text = "tuning" if not np.isfinite(swap_rate) else f"{swap_rate:.2f}"
        self._bar.update(completed=it + 1, swap=text)

    def close(self) -> None:
        self._bar.close()


# --- ArviZ output --------------------------------------------------------------------------


def _result(model, target, lad, results, C, D, elapsed, relaxation, swap):
    import arviz as az

    names = [v.name for v in model.free_RVs + model.deterministics]
    outs = model.replace_rvs_by_values([model[name] for name in names])
    outs_x, x = join_nonshared_inputs(target.point0, outs, model.value_vars)
    # one call over all draws: the back-transforms vectorised along a batch dimension
    batch = pt.matrix("x_batch", dtype=x.dtype)
    outs_b = vectorize_graph(outs_x, replace={x: batch})
    fn = pytensor.function([batch], outs_b, on_unused_input="ignore", mode="FAST_COMPILE")
    X = np.stack([res["top"]["x"] for res in results])  # (chain, draw, n)

    def constrained(flat: np.ndarray) -> dict[str, np.ndarray]:
        vals = fn(np.ascontiguousarray(flat.reshape(-1, flat.shape[-1])))
        return {
            name: np.asarray(v).reshape(*flat.shape[:-1], *np.shape(v)[1:])
            for name, v in zip(names, vals, strict=True)
        }

    dims = {name: list(model.named_vars_to_dims.get(name, ())) for name in names}
    coords = {k: list(v) for k, v in model.coords.items() if v is not None}

    def stat(key, dtype=float):
        return np.stack([np.asarray(res["top"][key], dtype=dtype) for res in results])

    posterior = constrained(X)
    for name, v in posterior.items():  # ArviZ's default names for dimensions without dims
        dims[name] += [f"{name}_dim_{i}" for i in range(len(dims[name]), v.ndim - 2)]
    groups = {
        "posterior": posterior,
        "sample_stats": {
            "diverging": stat("diverging", bool),
            "tree_depth": stat("depth", int),
            "n_steps": stat("n_steps", int),
            "step_size": stat("eps"),
            "acceptance_rate": stat("accept"),
            "lp": stat("lp"),
            "energy": stat("energy"),
        },
    }
    dt = az.from_dict(groups, dims=dims, coords=coords)
    att = np.stack([res["att"] for res in results])
    acc = np.stack([res["acc"] for res in results])
    R = lad.s.size
    rung_coords = {"rung": np.arange(R), "pair": np.arange(R - 1)}
    extra = xr.Dataset(
        {
            "swap_accept": (("chain", "pair"), acc / np.maximum(att, 1)),
            "swap_attempts": (("chain", "pair"), att.astype(int)),
            "rung_acceptance": (("chain", "rung"), np.stack([r["rung_accept"] for r in results])),
            "rung_step_size": (("chain", "rung"), np.stack([r["eps"] for r in results])),
            "alpha": ("rung", lad.alpha),
            "beta": ("rung", lad.beta),
            "level": ("rung", lad.s.copy()),
        },
        coords={"chain": np.arange(C), **rung_coords},
    )
    dt["sample_stats"] = dt["sample_stats"].to_dataset().merge(extra)
    if results[0]["rungs"] is not None:
        rung_vals = constrained(np.stack([r["rungs"] for r in results]))  # (chain, draw, rung)
        ds = xr.Dataset(
            {name: (("chain", "draw", "rung", *dims[name]), v) for name, v in rung_vals.items()},
            coords={
                "chain": np.arange(C),
                "draw": np.arange(D),
                "rung": np.arange(R),
                **{k: v for k, v in coords.items() if any(k in d for d in dims.values())},
            },
        )
        dt["rungs"] = ds
    dt["sample_stats"].attrs.update(
        {
            "sampler": "pymc_wendy.sample_sft",
            "relaxation": relaxation,
            "swap": swap,
            "sampling_time": elapsed,
            "relax_scales": list(target.relax_scales),
        }
    )
    if R > 1:
        dt["sample_stats"].attrs["communication_barrier"] = _communication_barrier(acc, att)
    _warn(dt, acc, att, C)
    return dt


# Swap acceptance per pair that the advice on the number of rungs aims for (the middle of the
# 0.2-0.5 range in which states travel the ladder well).
_TARGET_SWAP = 0.35


def _barrier_per_pair(accept: np.ndarray) -> np.ndarray:
    """Barrier between two rungs from their swap acceptance, under Gaussian energy differences.

    Near-by rungs reject with probability ``b`` = their share of the global communication
    barrier (Syed et al. 2022). With a Gaussian log swap ratio (``N(-mu, 2 mu)``, the form
    detailed balance imposes) acceptance is ``2 Phi(-sqrt(mu / 2))`` and small gaps reject
    ``sqrt(mu / pi)``, so ``b = -Phi^-1(a / 2) sqrt(2 / pi)``: equal to ``1 - a`` for close
    rungs, but growing past 1 for pairs that rarely swap, where ``1 - a`` saturates.
    """
    return -stats.norm.ppf(np.asarray(accept) / 2.0) * np.sqrt(2.0 / np.pi)


def _communication_barrier(acc: np.ndarray, att: np.ndarray) -> float:
    """The ladder's global communication barrier from the swaps of all chains (pooled)."""
    n = np.maximum(att.sum(0), 1)
    accept = np.clip(acc.sum(0) / n, 0.5 / n, 1.0)  # no swap in n tries: at most about 1/(2n)
    return float(_barrier_per_pair(accept).sum())


def _rungs_for(barrier: float, accept: float = _TARGET_SWAP) -> int:
    """Rungs whose equalised pairs would each swap with probability about ``accept``."""
    return 1 + max(1, math.ceil(barrier / float(_barrier_per_pair(accept))))


def _warn(dt, acc, att, C) -> None:
    import arviz as az

    never = [
        (c, k) for c in range(C) for k in range(acc.shape[1]) if att[c, k] > 0 and acc[c, k] == 0
    ]
    if never:
        pairs = sorted({k for _, k in never})
        warnings.warn(
            f"swaps between rungs {[(k, k + 1) for k in pairs]} were never accepted in "
            f"{len({c for c, _ in never})} of {C} chains: the ladder is too coarse there; use "
            "more rungs (or a ladder with smaller steps)",
            SFTWarning,
            stacklevel=3,
        )
    pooled = acc.sum(0) / np.maximum(att.sum(0), 1)
    if pooled.size and pooled.min() < 0.2:
        barrier = dt["sample_stats"].attrs["communication_barrier"]
        about = "at least" if pooled.min() == 0 else "about"  # a pair that never swapped
        warnings.warn(
            f"swap acceptance is {pooled.min():.2f}-{pooled.max():.2f} per pair, below the "
            f"0.2-0.5 in which states travel the ladder well; the ladder's communication "
            f"barrier is {about} {barrier:.1f}, so about {_rungs_for(barrier)} rungs (now "
            f"{pooled.size + 1}) would swap with probability {_TARGET_SWAP} per pair",
            SFTWarning,
            stacklevel=3,
        )
    n_div = int(dt["sample_stats"]["diverging"].sum())
    if n_div:
        warnings.warn(f"{n_div} divergences in the top rung", SFTWarning, stacklevel=3)
    if C > 1:
        rhat = az.rhat(dt)
        worst = max(float(rhat[v].max()) for v in rhat.data_vars) if rhat.data_vars else 1.0
        if worst > 1.01:
            warnings.warn(
                f"the chains disagree (max R-hat {worst:.3f} > 1.01): run longer or add rungs",
                SFTWarning,
                stacklevel=3,
            )
