r"""The weak log-likelihood and its gradient compiled with numba (no Python in the hot path).

These are the kernels the pytensor Op runs under the numba backend (nutpie, PyMC's NUTS, SMC,
``find_MAP``). They implement the same formulas as :mod:`pymc_wendy.weak.kernels` (see its module
doc) and :mod:`pymc_wendy.weak.linear_form`, which stay the readable numpy reference they are tested
against. Three paths:

* ``general``: builds ``L(p)``, ``S = L Sigma' L^T`` by a symmetric rank-k update (half the
  flops of a matrix product), one Cholesky factorisation, and for the gradient one Cholesky
  solve against ``L``.
* ``operator``: the general path for models with derivative terms and known inputs
  (:mod:`pymc_wendy.weak.operator`).
* ``linear``: linear-in-parameter models, ``S`` as a precomputed quadratic polynomial in ``p``
  (optionally resolved per noise state so ``sigma`` can be a random variable), one Cholesky
  factorisation, and for the gradient the Cholesky inverse.

Compilation is per kind and per model structure, not per data set: :func:`kernel_for` compiles
one C-callable kernel per path (shared by every model) and the terms of each model (its
generated functions at the data), and :func:`kernel_inputs` packs everything that depends on
the data set (observations, test functions, noise level, precomputed matrices) into one float64
buffer read at run time. The Op's numba functions call both through their addresses, so
compiling them for a new data set does not compile (or re-optimise) the kernel: ``pw.sample``
on the next data set of a coverage study compiles in a fraction of the time
(``docs/performance.md``). :mod:`~pymc_wendy.backends.kernel_cache` builds them and keeps
them on disk across processes.

A failed factorisation or a non-finite right-hand side gives ``nll = +inf`` (log-density
``-inf``) and a zero gradient instead of raising, so a sampler rejects the point and goes on.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from pymc_wendy.backends import lapack

_LOG_2PI = math.log(2.0 * math.pi)


@numba.njit(cache=True)
def all_finite(a: np.ndarray) -> bool:
    """Whether every entry of ``a`` is finite (no temporary boolean array)."""
    for x in a.ravel():
        if not np.isfinite(x):
            return False
    return True


@numba.njit(cache=True)
def entry_variances(s2raw: np.ndarray, W: np.ndarray, scale: float) -> np.ndarray:
    """The noise variance of every data entry, ``(M1, D)``, times ``scale``: per state,
    ``s2raw[e] * W[m, e]`` (``s2raw`` of length D), or given per entry, ``s2raw[e * M1 + m]``
    (length ``D * M1``, state-major; ``W`` is not read): an observation model whose variance
    parameters are random variables (``WeakLogLikelihoodOp(per_entry=True)``)."""
    M1, D = W.shape
    per_entry = s2raw.size != D
    V = np.empty((M1, D))
    for m in range(M1):
        for e in range(D):
            V[m, e] = scale * (s2raw[e * M1 + m] if per_entry else s2raw[e] * W[m, e])
    return V


@numba.njit(cache=True)
def add_noise_gradient(gs: np.ndarray, W: np.ndarray, m: int, e: int, per: float) -> None:
    """Adds entry ``(m, e)``'s ``d nll / d v[m, e]`` (up to the factor ``scale / 2``) to the
    noise gradient: weighted into state ``e``'s variance, or kept per entry (the layout of
    :func:`entry_variances`)."""
    M1, D = W.shape
    if gs.size == D:
        gs[e] += W[m, e] * per
    else:
        gs[e * M1 + m] += per


@numba.njit(cache=True)
def _factor_and_nll(ST: np.ndarray, r: np.ndarray, ridge: float):
    """Add the ridge to ``S`` (its transpose stored in ``ST``), factor it in place, solve.

    Returns ``(ok, C, a, nll)`` with ``C`` the F-ordered lower factor (a view of ``ST``),
    ``a = S^{-1} r`` and ``nll = (log det S + r^T a + n log 2 pi) / 2``; ``ok`` is False when
    ``S`` is not positive definite.
    """
    n = r.size
    for i in range(n):
        ST[i, i] += ridge
    C = ST.T
    if lapack.potrf_lower(C) != 0:
        return False, C, r, np.inf
    aT = r.copy().reshape((1, n))
    lapack.potrs_lower(C, aT.T)
    a = aT[0]
    logdet = 0.0
    for i in range(n):
        logdet += math.log(C[i, i])
    return True, C, a, 0.5 * (2.0 * logdet + np.dot(r, a) + n * _LOG_2PI)


@numba.njit(cache=True)
def _add_pointwise_score(phi, a, Jp, gp):
    """``gp += a^T dr/dp`` through the pointwise part ``Phi f``; returns ``a`` as (K, D)."""
    K, M1 = phi.shape
    D = Jp.shape[1]
    J = Jp.shape[2]
    Am = np.empty((K, D))
    for d in range(D):
        for k in range(K):
            Am[k, d] = a[d * K + k]
    PA = np.dot(phi.T, Am)  # (M1, D)
    for m in range(M1):
        for d in range(D):
            for j in range(J):
                gp[j] += PA[m, d] * Jp[m, d, j]
    return Am


@numba.njit(cache=True)
def _covariance_factor(LsT, r, diag, logdet):
    """``S = Ls Ls^T + diag I`` by a rank-k update, its Cholesky factor (F-ordered, lower),
    ``a = S^{-1} r`` and the NLL (the quadratic form alone without ``logdet``). Returns
    ``(ok, nll, a, C)``; ``ok`` is False when ``S`` is not positive definite."""
    n = r.size
    ST = np.empty((n, n))  # ST.T is the F-ordered S
    lapack.syrk_lower(LsT.T, ST.T)
    ok, C, a, nll = _factor_and_nll(ST, r, diag)
    if ok and not logdet:
        nll = 0.5 * np.dot(r, a)
    return ok, nll, a, C


@numba.njit(cache=True)
def _inverse(C):
    """``S^{-1}`` (C-ordered, both triangles) from the F-ordered lower factor ``C``, which
    ``potri`` overwrites."""
    n = C.shape[0]
    lapack.potri_lower(C)
    Si = np.empty((n, n))
    for j in range(n):
        for i in range(j, n):
            Si[i, j] = C[i, j]
            Si[j, i] = C[i, j]
    return Si


@numba.njit(cache=True)
def _quadratic_forms(Si, phiT, dphiT, D, want_dd):
    """``Q_gh[m, d, f] = sum_{k, l} g_k(m) S^-1[(d, k), (f, l)] h_l(m)`` for (phi, phi) and
    (phi, dphi), and the diagonal ``d = f`` of (dphi, dphi) when ``want_dd``; from
    ``Phi^T S^-1`` (one matrix product per state), not from ``S^-1 L`` (a solve against the
    ``D (M+1)`` columns of ``L``: 4x slower here, ``docs/performance.md``)."""
    M1, K = phiT.shape
    Qpp = np.zeros((M1, D, D))
    Qpd = np.zeros((M1, D, D))
    Qdd = np.zeros((M1, D))
    for d in range(D):
        PS = np.dot(phiT, np.ascontiguousarray(Si[d * K : (d + 1) * K, :]))  # (M1, K D)
        for m in range(M1):
            for f in range(D):
                app = 0.0
                apd = 0.0
                for k in range(K):
                    x = PS[m, f * K + k]
                    app += x * phiT[m, k]
                    apd += x * dphiT[m, k]
                Qpp[m, d, f] = app
                Qpd[m, d, f] = apd
        if want_dd:
            block = np.ascontiguousarray(Si[d * K : (d + 1) * K, d * K : (d + 1) * K])
            DS = np.dot(dphiT, block)  # (M1, K)
            for m in range(M1):
                acc = 0.0
                for k in range(K):
                    acc += DS[m, k] * dphiT[m, k]
                Qdd[m, d] = acc
    return Qpp, Qpd, Qdd


@numba.njit(cache=True)
def general(
    phi, dphi, b, F, Ju, Jp, Jup, s2raw, W, scale, diag, want_grad, logdet=True,
    sigma_grad=True,
):  # fmt: skip
    # long: the covariance's assembly, factor and gradient share their arrays; split, each
    # part would pass a dozen of them
    """Negative log-likelihood, gradient in ``p`` and in the noise variances (general path).

    ``logdet=False`` gives the quadratic form ``r' S^-1 r / 2`` alone and its gradient (the
    bias-corrected objective, :mod:`pymc_wendy.weak.bias`); it skips ``S^{-1}``.
    ``sigma_grad=False`` skips the gradient in the noise variances (returned as zeros).

    ``F`` (M1, D), ``Ju`` (M1, D, D), ``Jp`` (M1, D, J), ``Jup`` (M1, D, D, J) are the model
    derivatives at the data; ``b = dPhi X`` (K, D); ``s2raw`` (D,) the noise variances and
    ``W`` (M1, D) their per-entry weights, or ``s2raw`` (D M1,) every entry's variance, and
    then the gradient per entry too (:func:`entry_variances`). The covariance is
    ``S = scale * L diag(s2raw * W) L^T + diag * I`` (``scale = 1 - ridge``,
    ``diag = ridge_diag`` for the model; other values for the tempering ladder's relaxed rungs).
    The gradient needs ``S^{-1}`` only through ``Phi^T S^{-1} Phi`` and ``Phi^T S^{-1} dPhi``
    at equal times (:func:`_quadratic_forms`), as ``kernels.gradient_parts`` does.
    Returns ``(nll, grad_p, grad_sigma2, a)`` with ``a = S^-1 r`` (zeros where the value is
    infinite).
    """
    K, M1 = phi.shape
    D = F.shape[1]
    J = Jp.shape[2]
    n = K * D
    gp = np.zeros(J)
    gs = np.zeros(s2raw.size)
    if not (all_finite(F) and all_finite(Ju) and all_finite(s2raw)) or np.any(s2raw < 0.0):
        return np.inf, gp, gs, np.zeros(n)
    V = entry_variances(s2raw, W, scale)
    phiT = phi.T.copy()  # time-major copies: the loops below run over k fastest
    dphiT = dphi.T.copy()

    PF = np.dot(phi, F)
    r = np.empty(n)
    for d in range(D):
        for k in range(K):
            r[d * K + k] = PF[k, d] + b[k, d]

    # L Sigma^1/2, stored transposed so that .T is the F-ordered (n, D*M1)
    LsT = np.empty((D * M1, n))
    for e in range(D):
        for m in range(M1):
            col = e * M1 + m
            se = math.sqrt(V[m, e])
            for d in range(D):
                g = Ju[m, d, e] * se
                for k in range(K):
                    v = phiT[m, k] * g
                    if d == e:
                        v += dphiT[m, k] * se
                    LsT[col, d * K + k] = v

    ok, nll, a, C = _covariance_factor(LsT, r, diag, logdet)
    if not ok:
        return np.inf, gp, gs, np.zeros(n)
    if not want_grad:
        return nll, gp, gs, a
    Am = np.empty((K, D))
    for d in range(D):
        for k in range(K):
            Am[k, d] = a[d * K + k]
    Pa = np.dot(phiT, Am)  # Phi^T a_d per time, (M1, D)
    Da = np.dot(dphiT, Am)
    if logdet:
        Qpp, Qpd, Qdd = _quadratic_forms(_inverse(C), phiT, dphiT, D, sigma_grad)
    # B[d, m, e] = v_e (Q_pp Ju + Q_pd - Pa (L^T a)^T)[d, e]: the trace and quadratic parts
    # of dl/dJu; and per column (e, m) of L, (L^T W L)[(e, m), (e, m)] for the noise gradient
    for m in range(M1):
        for e in range(D):
            la = Da[m, e]
            for d in range(D):
                la += Pa[m, d] * Ju[m, d, e]
            v = V[m, e]
            for d in range(D):
                bde = -Pa[m, d] * la
                if logdet:
                    bde += Qpd[m, d, e]
                    for f in range(D):
                        bde += Qpp[m, d, f] * Ju[m, f, e]
                bde *= v
                for j in range(J):
                    gp[j] += bde * Jup[m, d, e, j]
            if sigma_grad:
                per = -la * la
                if logdet:
                    per += Qdd[m, e]
                    for d in range(D):
                        per += 2.0 * Ju[m, d, e] * Qpd[m, d, e]
                        for f in range(D):
                            per += Ju[m, d, e] * Qpp[m, d, f] * Ju[m, f, e]
                add_noise_gradient(gs, W, m, e, per)
    gs *= 0.5 * scale
    for m in range(M1):
        for d in range(D):
            for j in range(J):
                gp[j] += Pa[m, d] * Jp[m, d, j]
    return nll, gp, gs, a


@numba.njit(cache=True)
def operator(pw, ops, OX, Psi, F, Ju, Jp, Jup, C, beta, Cp, betap, s2raw, W, scale, diag,
             want_grad, logdet=True):  # fmt: skip
    """The general path for models with derivative terms and inputs
    (:mod:`pymc_wendy.weak.operator_kernels`): ``L = sum_P Phi_P Ju_P + sum_q C_q Phi^(q)``
    and the residual's operator and input part depend on ``p`` through ``C`` and ``beta``;
    their derivatives ``Cp`` (Q, D, D, J) and ``betap`` (D, I, J) add the terms ``a' db/dp``
    and ``<W L Sigma', dC/dp Phi^(q)>`` to the gradient. The pointwise part is stacked:
    ``pw`` (P, K, M1) holds ``Phi`` and the operators of the total derivative terms, ``F``
    (P, M1, D), ``Ju``, ``Jp``, ``Jup`` their functions. Arguments otherwise as
    :func:`general`.
    """
    J = Jp.shape[3]
    gp = np.zeros(J)
    gs = np.zeros(s2raw.size)
    if not (all_finite(F) and all_finite(Ju) and all_finite(s2raw)) or np.any(s2raw < 0.0):
        return np.inf, gp, gs
    if not (all_finite(C) and all_finite(beta)):
        return np.inf, gp, gs
    V = entry_variances(s2raw, W, scale)
    r = _operator_residual(pw, F, OX, Psi, C, beta)
    ok, nll, a, Cf = _covariance_factor(_operator_linearisation(pw, ops, Ju, C, V), r,
                                        diag, logdet)  # fmt: skip
    if not ok:
        return np.inf, gp, gs
    if not want_grad:
        return nll, gp, gs
    _operator_trace_gradient(Cf, a, pw, ops, Ju, C, Jup, Cp, V, W, logdet, gp, gs)
    gs *= 0.5 * scale
    Am = _add_pointwise_score(pw[0], a, Jp[0], gp)
    for i in range(1, pw.shape[0]):
        _add_pointwise_score(pw[i], a, Jp[i], gp)
    _operator_coefficient_gradient(Am, OX, Psi, Cp, betap, gp)
    return nll, gp, gs


@numba.njit(cache=True)
def _operator_residual(pw, F, OX, Psi, C, beta):
    """The operator path's weak residual (state-major): ``sum_P Phi_P F_P`` plus the
    derivative terms' ``sum_q C_q Phi^(q) X`` and the inputs' ``Psi beta'``."""
    K = pw.shape[1]
    D = F.shape[2]
    Q = OX.shape[0]
    n_in = Psi.shape[1]
    bm = np.dot(pw[0], F[0])
    for i in range(1, pw.shape[0]):
        bm += np.dot(pw[i], F[i])
    for k in range(K):
        for d in range(D):
            acc = 0.0
            for q in range(Q):
                for e in range(D):
                    acc += OX[q, k, e] * C[q, d, e]
            for i in range(n_in):
                acc += Psi[k, i] * beta[d, i]
            bm[k, d] += acc
    r = np.empty(K * D)
    for d in range(D):
        for k in range(K):
            r[d * K + k] = bm[k, d]
    return r


@numba.njit(cache=True)
def _operator_linearisation(pw, ops, Ju, C, V):
    """``L Sigma^1/2`` with ``L = sum_P Phi_P Ju_P + sum_q C_q Phi^(q)`` and the entries'
    variances ``V`` (:func:`entry_variances`), stored transposed
    (:func:`_covariance_factor`'s layout)."""
    P, K, M1 = pw.shape
    D = Ju.shape[2]
    Q = ops.shape[0]
    LsT = np.empty((D * M1, K * D))
    for e in range(D):
        for m in range(M1):
            col = e * M1 + m
            se = math.sqrt(V[m, e])
            for d in range(D):
                for k in range(K):
                    v = 0.0
                    for i in range(P):
                        v += pw[i, k, m] * Ju[i, m, d, e]
                    for q in range(Q):
                        v += C[q, d, e] * ops[q, k, m]
                    LsT[col, d * K + k] = v * se
    return LsT


@numba.njit(cache=True)
def _basis_forms(Si, basesT, D):
    """``Q[a, b, m, d, f] = sum_{k, l} B_a[k, m] S^-1[(d, k), (f, l)] B_b[l, m]`` for the
    bases ``B`` of the operator path's ``L`` (``basesT[a] = B_a^T``: ``Phi`` and each
    ``Phi^(q)``), at equal times: the general path's :func:`_quadratic_forms` for ``Q + 1``
    bases with full blocks."""
    A, M1, K = basesT.shape
    Qf = np.zeros((A, A, M1, D, D))
    for a in range(A):
        for d in range(D):
            PS = np.dot(basesT[a], np.ascontiguousarray(Si[d * K : (d + 1) * K, :]))
            for b in range(A):
                for m in range(M1):
                    for f in range(D):
                        acc = 0.0
                        for k in range(K):
                            acc += PS[m, f * K + k] * basesT[b, m, k]
                        Qf[a, b, m, d, f] = acc
    return Qf


@numba.njit(cache=True)
def _assign2(dst, src):
    """``dst[...] = src`` for matrices of one shape: a slice assignment compiles numba's
    shape-mismatch message, 4.6 s with a cold cache."""
    for i in range(dst.shape[0]):
        for j in range(dst.shape[1]):
            dst[i, j] = src[i, j]


@numba.njit(cache=True)
def _operator_trace_gradient(Cf, a, pw, ops, Ju, C, Jup, Cp, V, W, logdet, gp, gs):
    """Adds the trace terms ``<W L Sigma', dL/dp>`` to ``gp`` and the unscaled noise-variance
    gradient to ``gs``, with ``W L = S^-1 L - a (L' a)'`` and ``L = sum_b B_b G_b`` over the
    bases ``B_i = pw[i]`` (``Phi`` and the total derivative terms' operators; coefficients
    ``G_i = Ju[i]`` at each time) and ``B_q = Phi^(q)`` (``G_q = C_q``): ``S^-1`` enters
    through :func:`_basis_forms` (``Cf`` is the factor of ``S``, overwritten; unused without
    ``logdet``, where ``W = -a a'``)."""
    P, K, M1 = pw.shape
    D = Ju.shape[2]
    J = gp.size
    A = ops.shape[0] + P
    basesT = np.empty((A, M1, K))
    for i in range(P):
        _assign2(basesT[i], pw[i].T)
    for q in range(A - P):
        _assign2(basesT[q + P], ops[q].T)
    Am = np.empty((K, D))
    for d in range(D):
        for k in range(K):
            Am[k, d] = a[d * K + k]
    Pa = np.empty((A, M1, D))  # B_a^T a_d per time
    for b in range(A):
        _assign2(Pa[b], np.dot(basesT[b], Am))
    if logdet:
        Qf = _basis_forms(_inverse(Cf), basesT, D)
    G = np.empty((A, D, D))  # the coefficients at one time: Ju[i, m], then the constant C_q
    for q in range(A - P):
        _assign2(G[q + P], C[q])
    for m in range(M1):
        for i in range(P):
            _assign2(G[i], Ju[i, m])
        for e in range(D):
            la = 0.0
            for b in range(A):
                for d in range(D):
                    la += G[b, d, e] * Pa[b, m, d]
            sem = V[m, e]
            acc_s = 0.0
            for d in range(D):
                for b in range(A):
                    z = -Pa[b, m, d] * la  # sum_k B_b[k, m] (W L)[(d, k), (e, m)]
                    if logdet:
                        for c in range(A):
                            for f in range(D):
                                z += Qf[b, c, m, d, f] * G[c, f, e]
                    acc_s += G[b, d, e] * z
                    for j in range(J):
                        dG = Jup[b, m, d, e, j] if b < P else Cp[b - P, d, e, j]
                        gp[j] += sem * z * dG
            add_noise_gradient(gs, W, m, e, acc_s)


@numba.njit(cache=True)
def _operator_coefficient_gradient(Am, OX, Psi, Cp, betap, gp):
    """Adds ``a' d(residual)/dp`` of the derivative and input terms to ``gp`` (``Am`` is
    ``a`` reshaped to (K, D))."""
    K, D = Am.shape
    J = gp.size
    Q = OX.shape[0]
    n_in = Psi.shape[1]
    for k in range(K):
        for d in range(D):
            for j in range(J):
                acc = 0.0
                for q in range(Q):
                    for e in range(D):
                        acc += OX[q, k, e] * Cp[q, d, e, j]
                for i in range(n_in):
                    acc += Psi[k, i] * betap[d, i, j]
                gp[j] += Am[k, d] * acc


@numba.njit(cache=True)
def linear(blocks, blk_e, blk_q, blk_d, blk_d2, r0, G, p, w_state, diag, want_grad, logdet=True):
    """Negative log-likelihood and gradients for linear-in-parameter models.

    ``S`` is ``sum_{e, q} w_state[e] wpair[q] A[e, q] + diag I`` over noise states ``e`` and
    the P pairs ``q = (a <= b)`` of ``pt = (1, p)`` (row-major upper-triangle order), with
    ``wpair[q] = pt_a pt_b``. Only the non-zero K x K blocks ``(d, d2)``, ``d >= d2``, of the
    ``A[e, q]`` are stored, transposed: ``blocks[i].T`` is block ``(blk_d[i], blk_d2[i])`` of
    ``A[blk_e[i], blk_q[i]]``. ``r(p) = r0 + G p``.
    Returns ``(nll, grad_p, grad_w)`` with ``grad_w`` the gradient in ``w_state``.
    ``logdet=False``: the quadratic form alone (no ``S^{-1}`` is formed for the gradient).
    """
    E = w_state.size
    n = r0.size
    J = p.size
    P = (J + 1) * (J + 2) // 2
    gp = np.zeros(J)
    gw = np.zeros(E)
    if not (all_finite(p) and all_finite(w_state)) or np.any(w_state < 0.0):
        return np.inf, gp, gw
    pt, wpair = _pair_weights(p)
    ST = _linear_covariance(blocks, blk_e, blk_q, blk_d, blk_d2, w_state, wpair, n)
    r = r0 + np.dot(G, p)
    ok, _, a, nll = _factor_and_nll(ST, r, diag)
    if not ok:
        return np.inf, gp, gw
    if not logdet:
        nll = 0.5 * np.dot(r, a)
    if not want_grad:
        return nll, gp, gw

    if logdet:
        if lapack.potri_lower(ST.T) != 0:
            return np.inf, gp, gw
        for c in range(n):  # mirror: ST[c, r] (r > c) holds S^{-1}[r, c]
            for rr in range(c + 1, n):
                ST[rr, c] = ST[c, rr]
    else:  # W = -a a^T
        ST[:, :] = 0.0
    T = _block_traces(ST, a, blocks, blk_e, blk_q, blk_d, blk_d2, E, P)
    gp += np.dot(G.T, a)
    _add_pair_gradient(T, pt, wpair, w_state, gp, gw)
    return nll, gp, gw


@numba.njit(cache=True)
def _pair_weights(p):
    """``pt = (1, p)`` and ``wpair[q] = pt_a pt_b`` over the pairs ``q = (a <= b)`` in
    row-major upper-triangle order."""
    J = p.size
    pt = np.empty(J + 1)
    pt[0] = 1.0
    for j in range(J):  # not a slice assignment: see kernel_templates.c_entry
        pt[1 + j] = p[j]
    wpair = np.empty((J + 1) * (J + 2) // 2)
    q = 0
    for i in range(J + 1):
        for j in range(i, J + 1):
            wpair[q] = pt[i] * pt[j]
            q += 1
    return pt, wpair


@numba.njit(cache=True)
def _linear_covariance(blocks, blk_e, blk_q, blk_d, blk_d2, w_state, wpair, n):
    """``S`` (without the diagonal term) summed from the stored blocks, as ``ST`` whose
    transpose is the F-ordered ``S`` (lower triangle used)."""
    nb, K, _ = blocks.shape
    ST = np.zeros((n, n))
    for ib in range(nb):
        w = w_state[blk_e[ib]] * wpair[blk_q[ib]]
        if w == 0.0:
            continue
        r_off = blk_d[ib] * K
        c_off = blk_d2[ib] * K
        blk = blocks[ib]
        for jj in range(K):
            row = ST[c_off + jj]
            bj = blk[jj]
            for ii in range(K):
                row[r_off + ii] += w * bj[ii]
    return ST


@numba.njit(cache=True)
def _block_traces(ST, a, blocks, blk_e, blk_q, blk_d, blk_d2, E, P):
    """``T[e, q] = <W, A[e, q]>`` with ``W = S^{-1} - a a^T`` (``ST`` holds ``S^{-1}``, or
    zeros for the quadratic form alone), block by block."""
    nb, K, _ = blocks.shape
    T = np.zeros((E, P))
    for ib in range(nb):
        r_off = blk_d[ib] * K
        c_off = blk_d2[ib] * K
        blk = blocks[ib]
        acc = 0.0
        for jj in range(K):
            row = ST[c_off + jj]
            aj = a[c_off + jj]
            bj = blk[jj]
            for ii in range(K):
                acc += (row[r_off + ii] - a[r_off + ii] * aj) * bj[ii]
        T[blk_e[ib], blk_q[ib]] += acc if r_off == c_off else 2.0 * acc
    return T


@numba.njit(cache=True)
def _add_pair_gradient(T, pt, wpair, w_state, gp, gw):
    """Adds the trace terms of the pair weights' derivatives to ``gp`` and ``gw``."""
    E = w_state.size
    J = gp.size
    q = 0
    for i in range(J + 1):
        for j in range(i, J + 1):
            for e in range(E):
                tq = 0.5 * w_state[e] * T[e, q]
                # d(pt_i pt_j)/dp: index 0 of pt is the constant 1
                if i > 0:
                    gp[i - 1] += tq * pt[j]
                if j > 0:
                    gp[j - 1] += tq * pt[i]
                gw[e] += 0.5 * wpair[q] * T[e, q]
            q += 1


@numba.njit(cache=True)
def finite_or_failed(nll, gp, gs):
    """``(nll, gp, gs)``, or ``(inf, 0, 0)`` (an impossible point) when any is not finite:
    entries of ``S`` that overflow (parameters near 1e155 and beyond, squared in ``S``)
    factor without an error from LAPACK and give NaN, which a sampler must not see."""
    if math.isfinite(nll) and all_finite(gp) and all_finite(gs):
        return nll, gp, gs
    return np.inf, np.zeros_like(gp), np.zeros_like(gs)


@numba.njit(cache=True)
def apply_tilt(nll, gp, p, tilt, ref, offset, want_grad):
    """The bias-corrected objective's linear tilt (:mod:`pymc_wendy.weak.bias`) added in place."""
    if np.isfinite(nll):
        nll += offset - np.dot(tilt, p - ref)
        if want_grad:
            gp -= tilt
    return nll


def kernel_inputs(
    lik, *, infer_sigma: bool, relax_scale: float = 1.0, free_initial: bool = False,
    per_entry: bool = False,
) -> tuple[str, np.ndarray]:  # fmt: skip
    """Which compiled path serves ``lik``, and everything its kernel reads, packed.

    Returns ``(kind, buffer)``: ``kind`` is ``"linear"`` (linear-in-parameter models with the
    precomputed coefficient matrices), ``"operator"`` (derivative terms or inputs) or
    ``"general"``; ``buffer`` is one float64 array holding the data side of the likelihood
    (observations, test functions, noise level, ridge, bias-correction tilt, relaxation
    scale; :func:`_pack`). None of it is compiled into the kernel, so one compilation of
    :func:`~pymc_wendy.backends.kernel_cache.kernel_for` serves every data set of a model.
    ``per_entry``: the noise input is every entry's variance (:func:`entry_variances`), which
    the linear path does not take, so the general one serves.
    """
    corr = lik.correction
    if corr is not None and infer_sigma:
        raise ValueError("a bias-corrected likelihood holds sigma fixed; it cannot infer it")
    J = lik.model.n_params
    logdet = corr is None
    tilt = np.zeros(J) if logdet else np.asarray(corr.tilt, dtype=float)
    ref = np.zeros(J) if logdet else np.asarray(corr.reference, dtype=float)
    offset = 0.0 if logdet else float(corr.offset)
    scalars = np.array(
        [float(lik.ridge), float(relax_scale), offset, float(lik.ridge_diag), 0.0, float(J)]
    )
    if free_initial:
        lik.check_free_initial()
        scalars[4] = 1.0
    # the linear path's precomputed covariance holds per-state noise variances only
    linear = not (free_initial or per_entry)
    form = lik.compiled_linear_form(per_state=infer_sigma) if linear else None
    if form is not None:
        kind = "linear"
        data = (form.blocks, form.blk_e, form.blk_q, form.blk_d, form.blk_d2, form.r0, form.G)
    else:
        spec = lik.form.kernel_spec()
        kind = spec.kind
        data = (*spec.arrays, np.asarray(lik.sigma, dtype=float) ** 2)
    extra = ()
    if form is None and "C" in spec.shapes:  # the operator kernel reads C's and beta's shapes
        totals = spec.shapes["total_f"][0]  # and the number of total derivative terms' orders
        extra = (np.array([*spec.shapes["C"], *spec.shapes["beta"], totals], dtype=float),)
    return kind, _pack((*data, tilt, ref, scalars, *extra))


def _pack(arrays) -> np.ndarray:
    """``[n, shapes (n x 3, padded with 1), the arrays' entries]`` as one float64 array."""
    shapes = np.ones((len(arrays), 3))
    for i, a in enumerate(arrays):
        shapes[i, : a.ndim] = a.shape
    parts = [np.array([len(arrays)], dtype=float), shapes.ravel()]
    parts += [np.asarray(a, dtype=float).ravel() for a in arrays]
    return np.concatenate(parts)


@numba.njit(cache=True)
def offsets(buf):
    n = int(buf[0])
    off = np.empty(n, dtype=np.int64)
    o = 1 + 3 * n
    for i in range(n):
        off[i] = o
        o += int(buf[1 + 3 * i]) * int(buf[2 + 3 * i]) * int(buf[3 + 3 * i])
    return off


@numba.njit(cache=True)
def unpack1(buf, off, i):
    return buf[off[i] : off[i] + int(buf[1 + 3 * i])]


@numba.njit(cache=True)
def unpack2(buf, off, i):
    s0, s1 = int(buf[1 + 3 * i]), int(buf[2 + 3 * i])
    return buf[off[i] : off[i] + s0 * s1].reshape((s0, s1))


@numba.njit(cache=True)
def unpack3(buf, off, i):
    s0, s1, s2 = int(buf[1 + 3 * i]), int(buf[2 + 3 * i]), int(buf[3 + 3 * i])
    return buf[off[i] : off[i] + s0 * s1 * s2].reshape((s0, s1, s2))


@numba.njit(cache=True)
def unpack_index(buf, off, i):
    return unpack1(buf, off, i).astype(np.int64)


_DOUBLE_P = numba.types.CPointer(numba.types.float64)

#: the C signature of a model's terms (:func:`~pymc_wendy.backends.kernel_cache.kernel_for`):
#: ``(p, J, buffer, buffer size, out, out size) -> entries written`` (-1: they do not fit)
TERMS_SIGNATURE = numba.types.int64(
    _DOUBLE_P, numba.types.int64, _DOUBLE_P, numba.types.int64, _DOUBLE_P, numba.types.int64
)

#: the C signature of the compiled kernels (:func:`~pymc_wendy.backends.kernel_cache.kernel_for`):
#: ``(p, J, sigma2, n_sigma2, alpha, buffer, buffer size, terms, terms size, flags, out) ->
#: status``
C_SIGNATURE = numba.types.int64(
    _DOUBLE_P,
    numba.types.int64,
    _DOUBLE_P,
    numba.types.int64,
    numba.types.float64,
    _DOUBLE_P,
    numba.types.int64,
    _DOUBLE_P,
    numba.types.int64,
    numba.types.int64,
    _DOUBLE_P,
)


#: the bits of a kernel's ``flags`` argument: noise inferred, gradient wanted, log-determinant
INFER_SIGMA, WANT_GRADIENT, LOGDET = 1, 2, 4


@numba.njit(cache=True)
def flag_bits(flags):
    """``(infer_sigma, want_grad, logdet)`` of a kernel's ``flags``."""
    return flags & INFER_SIGMA != 0, flags & WANT_GRADIENT != 0, flags & LOGDET != 0


@numba.njit(cache=True)
def stacked(first, rest):
    """``first`` (M1, ...) and ``rest`` (M1, P, ...) as one stack (1 + P, M1, ...): the
    pointwise part and the total derivative terms, in the order of the operators."""
    M1 = first.shape[0]
    P = rest.shape[1]
    width = first.size // max(M1, 1)
    a = first.reshape((M1, width))
    b = rest.reshape((M1, P, width))
    out = np.empty((1 + P, M1, width))
    for m in range(M1):
        for w in range(width):
            out[0, m, w] = a[m, w]
        for i in range(P):
            for w in range(width):
                out[1 + i, m, w] = b[m, i, w]
    return out.reshape((1 + P,) + first.shape)


@numba.njit(cache=True)
def split_terms(terms, M1, D, J, want_grad):
    """``F`` (M1, D), ``Ju`` (M1, D, D), ``Jp`` (M1, D, J) and ``Jup`` (M1, D, D, J) as views
    of a model's flat terms (without a gradient, empty stand-ins of the right rank), and the
    number of entries they take."""
    o = M1 * D
    F = terms[:o].reshape((M1, D))
    Ju = terms[o : o + M1 * D * D].reshape((M1, D, D))
    o += M1 * D * D
    if want_grad:
        Jp = terms[o : o + M1 * D * J].reshape((M1, D, J))
        o += M1 * D * J
        Jup = terms[o : o + M1 * D * D * J].reshape((M1, D, D, J))
        o += M1 * D * D * J
    else:
        Jp = np.zeros((0, D, J))
        Jup = np.zeros((0, D, D, J))
    return F, Ju, Jp, Jup, o


@numba.njit(cache=True)
def with_initial_row(X, b, dphi, x0):
    """``X`` with its first row ``x0``, and ``b = dPhi X`` to match."""
    X = X.copy()
    b = b.copy()
    for d in range(X.shape[1]):
        delta = x0[d] - X[0, d]
        X[0, d] = x0[d]
        for k in range(b.shape[0]):
            b[k, d] += dphi[k, 0] * delta
    return X, b


@numba.njit(cache=True)
def initial_row_gradient(phi, dphi, Ju, a, want_grad):
    """``dl/dx0_e = sum_d (Phi_0 . a_d) Ju[0, d, e] + dPhi_0 . a_e`` (``a = S^-1 r``)."""
    K = phi.shape[0]
    D = Ju.shape[1]
    g = np.zeros(D)
    if not want_grad:
        return g
    for d in range(D):
        pa = 0.0
        for k in range(K):
            pa += phi[k, 0] * a[d * K + k]
            g[d] += dphi[k, 0] * a[d * K + k]
        for e in range(D):
            g[e] += pa * Ju[0, d, e]
    return g
