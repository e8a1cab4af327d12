"""One multinomial NUTS transition (generalised no-U-turn criterion), compiled with numba.

The tree building, the leapfrog steps and the whitening by the replica's metric run in
nopython code that calls the tempered model's numba-compiled log density directly
(:attr:`TemperedModel.compiled <pymc_wendy.bayes.tempering.model.TemperedModel.compiled>`):
no Python between gradient evaluations. The target is a first-class function of the fixed
signature :data:`TARGET` rather than a function the transition is specialised on, so the
transition is compiled once and cached on disk, not once per model (which took 10-30 s
at every ``sample_sft`` call). The sampler moves in whitened coordinates
``y = L^-1 x`` with an identity metric. Random numbers come from the replica's own
``numpy.random.Generator`` (numba draws from its bit generator), so a run is reproducible.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import types

_MAX_ENERGY_ERROR = 1000.0

#: ``fg(x, alpha, beta, grad, parts) -> log density``: writes the gradient into ``grad`` and
#: the prior and likelihood terms into ``parts[0]``, ``parts[1]``
TARGET = types.FunctionType(
    types.float64(
        types.float64[::1], types.float64, types.float64, types.float64[::1], types.float64[::1]
    )
)
_VECTOR = types.float64[::1]
_RNG = numba.typeof(np.random.default_rng(0))


@numba.njit(cache=True)
def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    if m == -np.inf:
        return -np.inf
    return m + math.log(math.exp(a - m) + math.exp(b - m))


@numba.njit(cache=True)
def _criterion(p_minus, p_plus, rho) -> bool:
    return np.dot(p_plus, rho) > 0.0 and np.dot(p_minus, rho) > 0.0


@numba.njit(cache=True)
def _leapfrog(fg, L, a, b, y, p, g, h):
    """One step; returns ``(y, p, lp, g, x, gx, prior, lik)`` (``g`` the gradient in ``y``)."""
    p_half = p + 0.5 * h * g
    y_new = y + h * p_half
    x = L @ y_new
    gx = np.empty_like(x)
    parts = np.empty(2)
    lp = fg(x, a, b, gx, parts)
    prior, lik = parts[0], parts[1]
    zero = np.zeros_like(y)
    if not (np.isfinite(lp) and np.all(np.isfinite(gx))):
        return y_new, p_half, -np.inf, zero, x, zero, np.nan, np.nan
    gy = np.ascontiguousarray(gx) @ L  # = L.T @ gx, on contiguous arrays (BLAS)
    return y_new, p_half + 0.5 * h * gy, lp, gy, x, gx, prior, lik


@numba.njit(cache=True)
def _build(fg, L, a, b, y, p, g, depth, direction, eps, E0, rng):
    """A subtree of ``2**depth`` steps from ``(y, p, g)``. Returns ``(beg_p, end_y, end_p,
    end_lp, end_g, sample, logw, rho, valid, n_steps, sum_accept, diverging)`` with ``sample =
    (x, p, lp, gx, prior, lik)`` drawn in proportion to the weights within the subtree."""
    if depth == 0:
        y1, p1, lp, g1, x, gx, prior, lik = _leapfrog(fg, L, a, b, y, p, g, direction * eps)
        energy = -lp + 0.5 * np.dot(p1, p1) if np.isfinite(lp) else np.inf
        dE = E0 - energy  # log weight relative to the start
        diverging = not (-dE < _MAX_ENERGY_ERROR)
        finite = np.isfinite(dE)
        return (
            p1, y1, p1, lp, g1, (x, p1, lp, gx, prior, lik),
            dE if finite else -np.inf, p1.copy(), not diverging, 1,
            math.exp(min(dE, 0.0)) if finite else 0.0, diverging,
        )  # fmt: skip
    init = _build(fg, L, a, b, y, p, g, depth - 1, direction, eps, E0, rng)
    i_beg, i_ey, i_ep, i_elp, i_eg, i_s, i_logw, i_rho, i_valid, i_n, i_acc, i_div = init
    if not i_valid:
        return init
    final = _build(fg, L, a, b, i_ey, i_ep, i_eg, depth - 1, direction, eps, E0, rng)
    f_beg, f_ey, f_ep, f_elp, f_eg, f_s, f_logw, f_rho, f_valid, f_n, f_acc, f_div = final
    logw = _logaddexp(i_logw, f_logw)
    rho = i_rho + f_rho
    sample = i_s
    valid = f_valid
    if f_valid:
        if np.log(rng.random()) < f_logw - logw:
            sample = f_s
        valid = (
            _criterion(i_beg, f_ep, rho)
            and _criterion(i_beg, f_beg, i_rho + f_beg)
            and _criterion(i_ep, f_ep, f_rho + i_ep)
        )
    return (
        i_beg,
        f_ey,
        f_ep,
        f_elp,
        f_eg,
        sample,
        logw,
        rho,
        valid,
        i_n + f_n,
        i_acc + f_acc,
        f_div,
    )


def _transition(fg, L, a, b, x0, lp0, gx0, prior0, lik0, eps, max_depth, rng):
    """One NUTS transition from ``x0`` on the target ``fg`` (:data:`TARGET`) of the rung
    ``(a, b)``, in coordinates whitened by ``L`` (``x = L y``).

    Returns ``(x, lp, gx, prior, lik, accept, n_steps, depth, diverging, energy)``: the new
    state (``x0``'s own values when the sample is the start) and the transition's statistics.
    """
    y0 = np.linalg.solve(L, x0)
    g0 = np.ascontiguousarray(gx0) @ L
    p0 = rng.standard_normal(y0.size)
    E0 = -lp0 + 0.5 * np.dot(p0, p0)
    m_y, m_p, m_g = y0, p0, g0
    pl_y, pl_p, pl_g = y0, p0, g0
    sample = (x0, p0, lp0, gx0, prior0, lik0)
    logw = 0.0
    rho = p0.copy()
    n_steps, sum_accept, diverging, depth = 0, 0.0, False, 0
    while depth < max_depth:
        forward = rng.random() < 0.5
        if forward:
            sub = _build(fg, L, a, b, pl_y, pl_p, pl_g, depth, 1.0, eps, E0, rng)
        else:
            sub = _build(fg, L, a, b, m_y, m_p, m_g, depth, -1.0, eps, E0, rng)
        s_beg, s_ey, s_ep, s_elp, s_eg, s_sample, s_logw, s_rho, s_valid, s_n, s_acc, s_div = sub
        n_steps += s_n
        sum_accept += s_acc
        depth += 1
        if not s_valid:
            diverging = s_div
            break
        if np.log(rng.random()) < s_logw - logw:
            sample = s_sample
        logw = _logaddexp(logw, s_logw)
        if forward:
            bck_rho, fwd_rho = rho, s_rho
            bck_beg, bck_end, fwd_beg, fwd_end = m_p, pl_p, s_beg, s_ep
            pl_y, pl_p, pl_g = s_ey, s_ep, s_eg
        else:
            bck_rho, fwd_rho = s_rho, rho
            bck_beg, bck_end, fwd_beg, fwd_end = s_ep, s_beg, m_p, pl_p
            m_y, m_p, m_g = s_ey, s_ep, s_eg
        rho = bck_rho + fwd_rho
        if not (
            _criterion(bck_beg, fwd_end, rho)
            and _criterion(bck_beg, fwd_beg, bck_rho + fwd_beg)
            and _criterion(bck_end, fwd_end, fwd_rho + bck_end)
        ):
            break
    x, p, lp, gx, prior, lik = sample
    energy = -lp + 0.5 * np.dot(p, p)
    return x, lp, gx, prior, lik, sum_accept / max(n_steps, 1), n_steps, depth, diverging, energy


_TRANSITION_SIGNATURE = (
    TARGET, types.float64[:, ::1], types.float64, types.float64, _VECTOR, types.float64,
    _VECTOR, types.float64, types.float64, types.float64, types.int64, _RNG,
)  # fmt: skip


@functools.cache
def compiled_transition():
    """The compiled :func:`_transition`, compiled (or loaded from the disk cache) at the first
    call, not at import: with a cold cache the compilation takes 15-20 s, which every
    process that imports ``pymc_wendy`` without tempering (``pw.sample``, the CLI) paid."""
    return numba.njit(_TRANSITION_SIGNATURE, cache=True)(_transition)
