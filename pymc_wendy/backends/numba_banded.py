r"""The weak log-likelihood and its gradient with a banded covariance, compiled with numba.

The compiled counterpart of :mod:`pymc_wendy.weak.banded` (the numpy reference, whose module
doc explains why ``S`` is a band matrix for local test functions and which quantities the
gradient needs): what the Op runs under the numba backend when the likelihood takes the
banded path. Everything is in the band's order: test functions ordered by the centre of
their support, states interleaved (row ``p D + d``). The negative log-likelihood and its
gradient do not depend on the order of the residual's entries, so the kernel never maps
back to the state-major order of the dense kernels.

Cost per value and gradient: ``O(K s D^2 (w + 1))`` to assemble the band (``s`` points per
window, ``w`` neighbours), LAPACK ``pbtrf``/``pbtrs`` ``O(K D b^2)`` (``b = (w + 1) D - 1``),
the band of ``S^-1`` by selected inversion ``O(K D b^2)`` and sums over the windows: linear in
the number of time points at a fixed radius.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_wendy.backends import lapack
from pymc_wendy.backends.numba_kernels import add_noise_gradient, all_finite, entry_variances
from pymc_wendy.weak.banded import selected_inverse

_LOG_2PI = math.log(2.0 * math.pi)


@numba.njit(cache=True)
def _time_weights(Ju, v):
    """``wt[m, d, f] = sum_e v_e Ju_de Ju_fe`` and ``ct[m, d, f] = v_f Ju_df`` (the
    covariance's per-time coefficients, ``banded._time_weights``)."""
    M1, D, _ = Ju.shape
    wt = np.zeros((M1, D, D))
    ct = np.empty((M1, D, D))
    for m in range(M1):
        for d in range(D):
            for f in range(D):
                acc = 0.0
                for e in range(D):
                    acc += v[m, e] * Ju[m, d, e] * Ju[m, f, e]
                wt[m, d, f] = acc
                ct[m, d, f] = v[m, f] * Ju[m, d, f]
    return wt, ct


@numba.njit(cache=True)
def _band(start, phi, dphi, Gp, Gd, Ju, v, diag):
    """``S + diag I`` in lower band storage, stored transposed: ``abT[j, i - j] = S[i, j]``,
    so ``abT.T`` is LAPACK's F-ordered ``(b + 1, n)`` band (``banded.covariance_band``)."""
    K, s = phi.shape
    D = Ju.shape[1]
    w = (Gp.shape[2] - 1) // 2
    n = K * D
    bw = min((w + 1) * D - 1, n - 1)
    wt, ct = _time_weights(Ju, v)
    abT = np.zeros((n, bw + 1))
    for p in range(K):
        for t in range(s):
            gp, gd = phi[p, t], dphi[p, t]
            if gp == 0.0 and gd == 0.0:
                continue
            m = start[p] + t
            for q in range(min(w, K - 1 - p) + 1):  # rows p + q at or below p
                hp, hd = Gp[p, t, w + q], Gd[p, t, w + q]
                if hp == 0.0 and hd == 0.0:
                    continue
                for d in range(D):
                    i = (p + q) * D + d
                    for f in range(D):
                        j = p * D + f
                        if i < j:
                            continue
                        val = hp * gp * wt[m, d, f] + hp * gd * ct[m, d, f] + hd * gp * ct[m, f, d]
                        if d == f:
                            val += hd * gd * v[m, d]
                        abT[j, i - j] += val
    for j in range(n):
        abT[j, 0] += diag
    return abT


@numba.njit(cache=True)
def _inverse_entry(Z, i, j):
    """``S^-1[i, j]`` from the band ``Z`` of the selected inverse (``|i - j| <= b``)."""
    return Z[i - j, j] if i >= j else Z[j - i, i]


@numba.njit(cache=True)
def _quadratic_forms(start, phi, dphi, Gp, Gd, Z, M1, D, want_dd):
    """``Q_gh[m, d, f] = sum_{k, l} g_k(m) S^-1[(k, d), (l, f)] h_l(m)`` for (phi, phi),
    (phi, dphi) and (dphi, dphi) (``banded._quadratic_forms``), from the band of ``S^-1``."""
    K, s = phi.shape
    w = (Gp.shape[2] - 1) // 2
    Qpp = np.zeros((M1, D, D))
    Qpd = np.zeros((M1, D, D))
    Qdd = np.zeros((M1, D, D))
    Sn = np.zeros((2 * w + 1, D, D))
    for p in range(K):
        # S^-1[(p, d), (p + q, f)] for the neighbours of p
        for q in range(-w, w + 1):
            if 0 <= p + q < K:
                for d in range(D):
                    for f in range(D):
                        Sn[w + q, d, f] = _inverse_entry(Z, p * D + d, (p + q) * D + f)
            else:
                Sn[w + q] = 0.0
        for t in range(s):
            gp, gd = phi[p, t], dphi[p, t]
            if gp == 0.0 and gd == 0.0:
                continue
            m = start[p] + t
            for d in range(D):
                for f in range(D):
                    yp = 0.0
                    yd = 0.0
                    for q in range(2 * w + 1):
                        yp += Gp[p, t, q] * Sn[q, d, f]
                        yd += Gd[p, t, q] * Sn[q, d, f]
                    Qpp[m, d, f] += gp * yp
                    Qpd[m, d, f] += gp * yd
                    if want_dd:
                        Qdd[m, d, f] += gd * yd
    return Qpp, Qpd, Qdd


@numba.njit(cache=True)
def banded(start, phi, dphi, Gp, Gd, bb, F, Ju, Jp, Jup, s2raw, W, scale, diag, want_grad,
           logdet=True):  # fmt: skip
    # long: value and gradient share the residual, the factor and the window loops; split,
    # each part would pass a dozen arrays
    """Negative log-likelihood, gradient in ``p`` and in the noise variances (banded path).

    Same contract as :func:`pymc_wendy.backends.numba_kernels.general` (``S = scale * L
    diag(s2raw * W) L^T + diag * I``; ``logdet=False`` gives the quadratic form alone), with
    the test functions as ordered windows: ``start`` (K,) the first time index of each,
    ``phi``/``dphi`` (K, s) their values, ``Gp``/``Gd`` (K, s, 2 w + 1) the neighbours' values
    on each window (``LocalRows.neighbours``), and ``bb`` (K, D) ``dPhi X`` in that order.
    Returns ``(nll, grad_p, grad_sigma2)``.
    """
    K, s = phi.shape
    M1, D = F.shape
    J = Jp.shape[2]
    n = K * D
    gp = np.zeros(J)
    gs = np.zeros(s2raw.size)
    if not (all_finite(F) and all_finite(Ju) and all_finite(s2raw)) or np.any(s2raw < 0.0):
        return np.inf, gp, gs
    v = entry_variances(s2raw, W, scale)

    r = np.empty(n)
    for p in range(K):
        for d in range(D):
            acc = bb[p, d]
            for t in range(s):
                acc += phi[p, t] * F[start[p] + t, d]
            r[p * D + d] = acc

    abT = _band(start, phi, dphi, Gp, Gd, Ju, v, diag)
    CB = abT.T  # F-ordered band storage, factored in place
    if lapack.pbtrf_lower(CB) != 0:
        return np.inf, gp, gs
    aT = r.copy().reshape((1, n))
    lapack.pbtrs_lower(CB, aT.T)
    a = aT[0]
    quad = np.dot(r, a)
    if logdet:
        ld = 0.0
        for j in range(n):
            ld += math.log(CB[0, j])
        nll = 0.5 * (2.0 * ld + quad + n * _LOG_2PI)
    else:
        nll = 0.5 * quad
    if not math.isfinite(nll):
        return np.inf, gp, gs
    if not want_grad:
        return nll, gp, gs

    # Phi^T a and dPhi^T a per time point, and L^T a
    Pa = np.zeros((M1, D))
    Da = np.zeros((M1, D))
    for p in range(K):
        for t in range(s):
            m = start[p] + t
            for d in range(D):
                Pa[m, d] += phi[p, t] * a[p * D + d]
                Da[m, d] += dphi[p, t] * a[p * D + d]
    La = Da.copy()
    for m in range(M1):
        for e in range(D):
            for d in range(D):
                La[m, e] += Pa[m, d] * Ju[m, d, e]

    if logdet:
        Z = selected_inverse(np.ascontiguousarray(CB))
        Qpp, Qpd, Qdd = _quadratic_forms(start, phi, dphi, Gp, Gd, Z, M1, D, True)
    for m in range(M1):
        for d in range(D):
            for j in range(J):
                gp[j] += Pa[m, d] * Jp[m, d, j]
        for e in range(D):
            per_em = -(La[m, e] ** 2)
            for d in range(D):
                # B[d, m, e] = v_e (Q_pp Ju + Q_pd - Pa La^T)[d, e]
                bde = -Pa[m, d] * La[m, e]
                if logdet:
                    bde += Qpd[m, d, e]
                    for f in range(D):
                        bde += Qpp[m, d, f] * Ju[m, f, e]
                bde *= v[m, e]
                for j in range(J):
                    gp[j] += bde * Jup[m, d, e, j]
            if logdet:
                # (Ju^T Q_pp Ju + 2 Ju * Q_pd + Q_dd)[e, e]
                acc = Qdd[m, e, e]
                for d in range(D):
                    acc += 2.0 * Ju[m, d, e] * Qpd[m, d, e]
                    for f in range(D):
                        acc += Ju[m, d, e] * Qpp[m, d, f] * Ju[m, f, e]
                per_em += acc
            add_noise_gradient(gs, W, m, e, per_em)
    gs *= 0.5 * scale
    return nll, gp, gs
