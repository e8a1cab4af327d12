r"""The weak log-likelihood and its gradient compiled with numba (no Python in the hot path).

These are the kernels the pytensor Op runs under the numba backend (nutpie, PyMC's NUTS, SMC,
``find_MAP``). They implement the same formulas as :mod:`pymc_wendy.kernels` (see its module
doc) and :mod:`pymc_wendy._linear`, which stay the readable numpy reference they are tested
against. Two paths:

* ``general``: builds ``L(p)``, ``S = L Sigma' L^T`` by a symmetric rank-k update (half the
  flops of a matrix product), one Cholesky factorisation, and for the gradient one Cholesky
  solve against ``L``.
* ``linear``: linear-in-parameter models, ``S`` as a precomputed quadratic polynomial in ``p``
  (optionally resolved per noise state so ``sigma`` can be a random variable), one Cholesky
  factorisation, and for the gradient the Cholesky inverse.

A failed factorisation or a non-finite right-hand side gives ``nll = +inf`` (log-density
``-inf``) and a zero gradient instead of raising, so a sampler rejects the point and goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from pymc_wendy import _lapack

_LOG_2PI = math.log(2.0 * math.pi)


@numba.njit(cache=True)
def _all_finite(a: np.ndarray) -> bool:
    for x in a.ravel():
        if not np.isfinite(x):
            return False
    return True


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
    if _lapack.potrf_lower(C) != 0:
        return False, C, r, np.inf
    aT = r.copy().reshape((1, n))
    _lapack.potrs_lower(C, aT.T)
    a = aT[0]
    logdet = 0.0
    for i in range(n):
        logdet += math.log(C[i, i])
    return True, C, a, 0.5 * (2.0 * logdet + np.dot(r, a) + n * _LOG_2PI)


@numba.njit(cache=True)
def _covariance_solve(LT, LsT, r, diag, logdet, want_grad):
    """``S = Ls Ls^T + diag I`` (``LsT.T = L Sigma^1/2``) by a rank-k update, its Cholesky
    factor, ``a = S^{-1} r`` and the NLL (the quadratic form alone without ``logdet``), and
    when the gradient needs it ``YT`` with ``YT.T = S^{-1} L``. Returns ``(ok, nll, a, YT)``;
    ``ok`` is False when ``S`` is not positive definite."""
    n = r.size
    ST = np.empty((n, n))  # ST.T is the F-ordered S
    _lapack.syrk_lower(LsT.T, ST.T)
    ok, C, a, nll = _factor_and_nll(ST, r, diag)
    if not ok:
        return False, np.inf, a, np.zeros((0, n))
    if not logdet:
        nll = 0.5 * np.dot(r, a)
    if want_grad and logdet:
        YT = LT.copy()
        _lapack.potrs_lower(C, YT.T)
    else:  # no gradient, or W = -a a^T: no S^{-1} L term
        YT = np.zeros((0, n))
    return True, nll, a, YT


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
def general(phi, dphi, b, F, Ju, Jp, Jup, s2raw, scale, diag, want_grad, logdet=True):
    """Negative log-likelihood, gradient in ``p`` and in the noise variances (general path).

    ``logdet=False`` gives the quadratic form ``r' S^-1 r / 2`` alone and its gradient (the
    bias-corrected objective, :mod:`pymc_wendy.bias`); it skips the solve against ``L``.

    ``F`` (M1, D), ``Ju`` (M1, D, D), ``Jp`` (M1, D, J), ``Jup`` (M1, D, D, J) are the model
    derivatives at the data; ``b = dPhi X`` (K, D); ``s2raw`` (D,) the noise variances. The
    covariance is ``S = scale * L diag(s2raw) L^T + diag * I`` (``scale = 1 - ridge``,
    ``diag = ridge`` for the model; other values for the tempering ladder's relaxed rungs).
    """
    K, M1 = phi.shape
    D = F.shape[1]
    J = Jp.shape[2]
    n = K * D
    gp = np.zeros(J)
    gs = np.zeros(D)
    if not (_all_finite(F) and _all_finite(Ju) and _all_finite(s2raw)) or np.any(s2raw < 0.0):
        return np.inf, gp, gs
    s2 = scale * s2raw
    phiT = phi.T.copy()  # time-major copies: the loops below run over k fastest
    dphiT = dphi.T.copy()

    PF = np.dot(phi, F)
    r = np.empty(n)
    for d in range(D):
        for k in range(K):
            r[d * K + k] = PF[k, d] + b[k, d]

    # L and its noise-scaled copy, stored transposed so that .T is the F-ordered (n, D*M1)
    LT = np.empty((D * M1, n))
    LsT = np.empty((D * M1, n))
    for e in range(D):
        se = math.sqrt(s2[e])
        for m in range(M1):
            col = e * M1 + m
            for d in range(D):
                g = Ju[m, d, e]
                for k in range(K):
                    v = phiT[m, k] * g
                    if d == e:
                        v += dphiT[m, k]
                    LT[col, d * K + k] = v
                    LsT[col, d * K + k] = v * se

    ok, nll, a, YT = _covariance_solve(LT, LsT, r, diag, logdet, want_grad)
    if not ok:
        return np.inf, gp, gs
    if not want_grad:
        return nll, gp, gs
    # B[d, m, e] = s2_e sum_k phi[k, m] (W L)[(d, k), (e, m)],  W L = S^{-1} L - a (L^T a)^T
    for e in range(D):
        for m in range(M1):
            col = e * M1 + m
            la = 0.0
            for i in range(n):
                la += LT[col, i] * a[i]
            acc_s = 0.0
            for d in range(D):
                acc = 0.0
                for k in range(K):
                    i = d * K + k
                    wl = -a[i] * la
                    if logdet:
                        wl += YT[col, i]
                    acc += phiT[m, k] * wl
                    acc_s += LT[col, i] * wl
                Bdme = s2[e] * acc
                for j in range(J):
                    gp[j] += Bdme * Jup[m, d, e, j]
            gs[e] += acc_s
    for e in range(D):
        gs[e] *= 0.5 * scale
    _add_pointwise_score(phi, a, Jp, gp)
    return nll, gp, gs


@numba.njit(cache=True)
def operator(phi, ops, OX, Psi, F, Ju, Jp, Jup, C, beta, Cp, betap, s2raw, scale, diag,
             want_grad, logdet=True):  # fmt: skip
    """The general path for models with derivative terms and inputs
    (:mod:`pymc_wendy._operator`): ``L = Phi Ju + sum_q C_q Phi^(q)`` and the residual's
    operator and input part depend on ``p`` through ``C`` and ``beta``; their derivatives
    ``Cp`` (Q, D, D, J) and ``betap`` (D, I, J) add the terms ``a' db/dp`` and
    ``<W L Sigma', dC/dp Phi^(q)>`` to the gradient. Arguments otherwise as :func:`general`.
    """
    K, M1 = phi.shape
    D = F.shape[1]
    J = Jp.shape[2]
    Q = ops.shape[0]
    n_in = Psi.shape[1]
    n = K * D
    gp = np.zeros(J)
    gs = np.zeros(D)
    if not (_all_finite(F) and _all_finite(Ju) and _all_finite(s2raw)) or np.any(s2raw < 0.0):
        return np.inf, gp, gs
    if not (_all_finite(C) and _all_finite(beta)):
        return np.inf, gp, gs
    s2 = scale * s2raw
    bm = np.dot(phi, F)
    for k in range(K):
        for d in range(D):
            acc = 0.0
            for q in range(Q):
                for e in range(D):
                    acc += OX[q, k, e] * C[q, d, e]
            for i in range(n_in):
                acc += Psi[k, i] * beta[d, i]
            bm[k, d] += acc
    r = np.empty(n)
    for d in range(D):
        for k in range(K):
            r[d * K + k] = bm[k, d]
    LT = np.empty((D * M1, n))
    LsT = np.empty((D * M1, n))
    for e in range(D):
        se = math.sqrt(s2[e])
        for m in range(M1):
            col = e * M1 + m
            for d in range(D):
                g = Ju[m, d, e]
                for k in range(K):
                    v = phi[k, m] * g
                    for q in range(Q):
                        v += C[q, d, e] * ops[q, k, m]
                    LT[col, d * K + k] = v
                    LsT[col, d * K + k] = v * se
    ok, nll, a, YT = _covariance_solve(LT, LsT, r, diag, logdet, want_grad)
    if not ok:
        return np.inf, gp, gs
    if not want_grad:
        return nll, gp, gs
    for e in range(D):
        for m in range(M1):
            col = e * M1 + m
            la = 0.0
            for i in range(n):
                la += LT[col, i] * a[i]
            acc_s = 0.0
            for d in range(D):
                acc_b = 0.0
                for k in range(K):
                    i = d * K + k
                    wl = -a[i] * la
                    if logdet:
                        wl += YT[col, i]
                    acc_s += LT[col, i] * wl
                    acc_b += phi[k, m] * wl
                    for q in range(Q):
                        tq = s2[e] * wl * ops[q, k, m]
                        for j in range(J):
                            gp[j] += tq * Cp[q, d, e, j]
                for j in range(J):
                    gp[j] += s2[e] * acc_b * Jup[m, d, e, j]
            gs[e] += acc_s
    for e in range(D):
        gs[e] *= 0.5 * scale
    Am = _add_pointwise_score(phi, a, Jp, gp)
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
    return nll, gp, gs


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
    nb, K, _ = blocks.shape
    E = w_state.size
    n = r0.size
    J = p.size
    P = (J + 1) * (J + 2) // 2
    gp = np.zeros(J)
    gw = np.zeros(E)
    if not (_all_finite(p) and _all_finite(w_state)) or np.any(w_state < 0.0):
        return np.inf, gp, gw
    pt = np.empty(J + 1)
    pt[0] = 1.0
    pt[1:] = p
    wpair = np.empty(P)
    q = 0
    for i in range(J + 1):
        for j in range(i, J + 1):
            wpair[q] = pt[i] * pt[j]
            q += 1

    ST = np.zeros((n, n))  # ST.T is the F-ordered S (lower triangle used)
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
    r = r0 + np.dot(G, p)
    ok, _, a, nll = _factor_and_nll(ST, r, diag)
    if not ok:
        return np.inf, gp, gw
    if not logdet:
        nll = 0.5 * np.dot(r, a)
    if not want_grad:
        return nll, gp, gw

    if logdet:
        if _lapack.potri_lower(ST.T) != 0:
            return np.inf, gp, gw
        for c in range(n):  # mirror: ST[c, r] (r > c) holds S^{-1}[r, c]
            for rr in range(c + 1, n):
                ST[rr, c] = ST[c, rr]
    else:  # W = -a a^T
        ST[:, :] = 0.0
    # T[e, q] = <W, A[e, q]> with W = S^{-1} - a a^T, block by block
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
    gp += np.dot(G.T, a)
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
    return nll, gp, gw


def make_kernel(lik, *, infer_sigma: bool, want_grad: bool, relax_scale: float = 1.0) -> Callable:
    """A numba function ``(p, sigma2, alpha) -> (nll, grad_p, grad_sigma2)`` bound to ``lik``.

    The data, test functions and (for linear-in-parameter models) the precomputed coefficient
    matrices are frozen into the compiled function. With ``infer_sigma=False`` the ``sigma2``
    argument is ignored and ``lik.sigma`` is used. ``alpha`` relaxes the covariance toward a
    multiple of the identity, ``S_alpha = (1 - alpha) S + alpha * relax_scale * I`` (``S`` the
    model's, ridge included); ``alpha = 0`` is the model's likelihood exactly. A bias-corrected
    likelihood (:meth:`~pymc_wendy.WeakLikelihood.corrected`) gives its corrected objective.
    """
    from pymc_wendy import _linear

    corr = lik._correction
    if corr is not None and infer_sigma:
        raise ValueError("a bias-corrected likelihood holds sigma fixed; it cannot infer it")
    logdet = corr is None
    J = lik.model.n_params
    tilt = np.zeros(J) if logdet else np.asarray(corr["tilt"], dtype=float)
    ref = np.zeros(J) if logdet else np.asarray(corr["reference"], dtype=float)
    offset = 0.0 if logdet else float(corr["offset"])
    form = _linear.form_for(lik, per_state=infer_sigma)
    ridge = float(lik.ridge)
    c = float(relax_scale)
    if form is not None:
        blocks, be, bq, bd, bd2 = form.blocks, form.blk_e, form.blk_q, form.blk_d, form.blk_d2
        r0, G = form.r0, form.G
        scale = 1.0 - ridge  # folded into the blocks when sigma is fixed

        @numba.njit
        def linear_kernel(p, sigma2, alpha):
            keep = 1.0 - alpha
            w = keep * scale * sigma2 if infer_sigma else np.full(1, keep)
            nll, gp, gw = linear(
                blocks,
                be,
                bq,
                bd,
                bd2,
                r0,
                G,
                np.ascontiguousarray(p),
                w,
                keep * ridge + alpha * c,
                want_grad,
                logdet,
            )
            if not logdet and np.isfinite(nll):
                nll += offset - np.dot(tilt, p - ref)
                if want_grad:
                    gp -= tilt
            return nll, gp, gw * (keep * scale)

        return linear_kernel

    if lik.model.has_operator_terms:
        return _operator_kernel(lik, infer_sigma, want_grad, c, logdet, tilt, ref, offset)
    model = lik.model
    t = np.ascontiguousarray(lik.t)
    X = np.ascontiguousarray(lik.X)
    phi, dphi, b = lik.phi, lik.dphi, np.ascontiguousarray(lik.b)
    M1, D, J = t.size, model.n_states, model.n_params
    f, f_u, f_p, f_up = (model.numba_function(w) for w in ("f", "f_u", "f_p", "f_up"))
    fixed_s2 = np.asarray(lik.sigma, dtype=float) ** 2

    @numba.njit
    def general_kernel(p, sigma2, alpha):
        p = np.ascontiguousarray(p)
        F = f(t, X, p, np.zeros((M1, D)))
        Ju = f_u(t, X, p, np.zeros((M1, D, D)))
        if want_grad:
            Jp = f_p(t, X, p, np.zeros((M1, D, J)))
            Jup = f_up(t, X, p, np.zeros((M1, D, D, J)))
        else:  # unused by the value: empty stand-ins of the right rank
            Jp = np.zeros((0, D, J))
            Jup = np.zeros((0, D, D, J))
        s2 = np.ascontiguousarray(sigma2) if infer_sigma else fixed_s2
        keep = 1.0 - alpha
        scale = keep * (1.0 - ridge)
        diag = keep * ridge + alpha * c
        nll, gp, gs = general(phi, dphi, b, F, Ju, Jp, Jup, s2, scale, diag, want_grad, logdet)
        if not logdet and np.isfinite(nll):
            nll += offset - np.dot(tilt, p - ref)
            if want_grad:
                gp -= tilt
        return nll, gp, gs

    return general_kernel


def _operator_kernel(lik, infer_sigma, want_grad, c, logdet, tilt, ref, offset) -> Callable:
    """:func:`make_kernel`'s general path for models with derivative terms or inputs."""
    model = lik.model
    t = np.ascontiguousarray(lik.t)
    X = np.ascontiguousarray(lik.X)
    data = lik._data
    phi, ops, OX = data.phi, np.ascontiguousarray(data.ops), np.ascontiguousarray(data.OX)
    Psi = np.ascontiguousarray(data.Psi)
    M1, D, J = t.size, model.n_states, model.n_params
    f, f_u, f_p, f_up = (model.numba_function(w) for w in ("f", "f_u", "f_p", "f_up"))
    coeff = lik._coeff
    c_fn, b_fn, cp_fn, bp_fn = (coeff.numba_function(w) for w in ("C", "beta", "C_p", "beta_p"))
    shapes = coeff.shapes
    sC, sb, sCp, sbp = shapes["C"], shapes["beta"], shapes["C_p"], shapes["beta_p"]
    fixed_s2 = np.asarray(lik.sigma, dtype=float) ** 2
    ridge = float(lik.ridge)
    zt, zu = np.zeros(1), np.zeros((1, 0))

    @numba.njit
    def operator_kernel(p, sigma2, alpha):
        p = np.ascontiguousarray(p)
        F = f(t, X, p, np.zeros((M1, D)))
        Ju = f_u(t, X, p, np.zeros((M1, D, D)))
        Cq = c_fn(zt, zu, p, np.zeros((1,) + sC))[0]
        beta = b_fn(zt, zu, p, np.zeros((1,) + sb))[0]
        if want_grad:
            Jp = f_p(t, X, p, np.zeros((M1, D, J)))
            Jup = f_up(t, X, p, np.zeros((M1, D, D, J)))
            Cp = cp_fn(zt, zu, p, np.zeros((1,) + sCp))[0]
            bp = bp_fn(zt, zu, p, np.zeros((1,) + sbp))[0]
        else:
            Jp = np.zeros((0, D, J))
            Jup = np.zeros((0, D, D, J))
            Cp = np.zeros(sCp)
            bp = np.zeros(sbp)
        s2 = np.ascontiguousarray(sigma2) if infer_sigma else fixed_s2
        keep = 1.0 - alpha
        scale = keep * (1.0 - ridge)
        diag = keep * ridge + alpha * c
        nll, gp, gs = operator(
            phi, ops, OX, Psi, F, Ju, Jp, Jup, Cq, beta, Cp, bp, s2, scale, diag, want_grad,
            logdet,
        )  # fmt: skip
        if not logdet and np.isfinite(nll):
            nll += offset - np.dot(tilt, p - ref)
            if want_grad:
                gp -= tilt
        return nll, gp, gs

    return operator_kernel
