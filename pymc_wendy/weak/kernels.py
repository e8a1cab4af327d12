r"""Likelihood kernels: weak residual, covariance, negative log-likelihood and its derivatives.

Pure array functions; :class:`pymc_wendy.weak.likelihood.WeakLikelihood` binds them to a model and
data. Notation (BRIEF sec. 2-3): K test functions, D states, M+1 time points, J parameters,
``n = K D`` residual entries, flattened **state-major**: entry ``(d, k)`` sits at ``d*K + k``;
columns of the noise linearisation run over ``(e, m)`` at ``e*(M+1) + m``.

.. math::

    r_{dk} = \sum_m \Phi_{km} f_d(p, u_m, t_m) + \sum_m \dot\Phi_{km} U_{md}

    L_{(dk),(em)} = \Phi_{km}\, \partial_{u_e} f_d(u_m) + \dot\Phi_{km} \delta_{de}

    S = (1-\epsilon) L \Sigma L^T + \epsilon I,\quad
    \ell = \tfrac12 (\log\det S + r^T S^{-1} r + n \log 2\pi)

The ridge factor ``(1 - eps)`` is folded into the noise variances, so every formula below
uses ``Sigma' = (1 - eps) Sigma``. Gradient (adjoint form), with ``a = S^{-1} r`` and
``W = S^{-1} - a a^T``::

    dl/dp_j   = a^T dr/dp_j + sum_{d,m,e} B[d,m,e] d2f_d/(du_e dp_j)(u_m)
    B[d,m,e]  = s'_e sum_k Phi[k,m] (W L)[(d,k),(e,m)]
    dl/ds_e   = (1-eps)/2 sum_m L[:, (e,m)]^T W L[:, (e,m)]

Hessian::

    H_ij = a^T r_ij + v_i^T S^{-1} v_j - 1/2 tr(S^{-1} S_i S^{-1} S_j) + 1/2 tr(W S_ij),
    v_i  = r_i - S_i a,  S_i = L_i Sigma' L^T + L Sigma' L_i^T,
    1/2 tr(W S_ij) = sum B * d3f/(du dp_i dp_j) + tr(W L_i Sigma' L_j^T).

Only Cholesky factors and triangular solves touch ``S``; no explicit inverse is used to solve.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.linalg as sla

__all__ = [
    "CovarianceError",
    "NonFiniteError",
    "WeakLikelihoodError",
    "linearisation",
    "residual",
]

LOG_2PI = np.log(2.0 * np.pi)


class WeakLikelihoodError(ValueError):
    """The weak likelihood cannot be evaluated at the requested point."""


class CovarianceError(WeakLikelihoodError, np.linalg.LinAlgError):
    """The weak-residual covariance S(p) is not (numerically) positive definite."""


class NonFiniteError(WeakLikelihoodError):
    """The right-hand side or one of its derivatives is not finite at the data."""


def residual(phi: np.ndarray, F: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Weak residual ``vec(Phi F + b)`` in state-major order; ``b = dPhi U`` is precomputed."""
    return (phi @ F + b).T.ravel()


def linearisation(phi: np.ndarray, dphi: np.ndarray, Ju: np.ndarray) -> np.ndarray:
    """Noise linearisation ``L`` as a 4-D array ``[d, k, e, m]`` (reshape to (KD, D(M+1)))."""
    D = Ju.shape[1]
    L = phi[None, :, None, :] * Ju.transpose(1, 2, 0)[:, None, :, :]
    for d in range(D):  # loop over states only
        L[d, :, d, :] += dphi
    return L


def check_finite(name: str, arr: np.ndarray, t: np.ndarray | None = None) -> None:
    """Raise :class:`NonFiniteError` naming ``name`` and the first time point where ``arr``
    (rows = time points) is not finite."""
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        where = f" at time index {bad[0]}" + (f" (t = {t[bad[0]]:g})" if t is not None else "")
        raise NonFiniteError(
            f"{name} is not finite{where}; parameters may be outside the model's domain"
        )


def cholesky(S: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of ``S``, raising :class:`CovarianceError` with a clear message."""
    try:
        C = sla.cholesky(S, lower=True, check_finite=False)
    except np.linalg.LinAlgError as exc:
        raise CovarianceError(
            "the weak-residual covariance S(p) is not positive definite "
            f"(size {S.shape[0]}, {exc}); the noise level may be zero or the parameters extreme"
        ) from None
    # entries that overflowed (parameters near 1e155 and beyond, squared in S) factor without
    # an error from LAPACK and give NaN
    if not np.all(np.isfinite(C.diagonal())):
        raise CovarianceError(
            f"the weak-residual covariance S(p) (size {S.shape[0]}) has entries that overflow "
            "double precision; the parameters are extreme"
        )
    return C


def solve_covariance(C: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``S^-1 B`` from the lower Cholesky factor ``C`` of ``S``."""
    return sla.cho_solve((C, True), B, check_finite=False)


def solve_lower(C: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``C^-1 B`` for a lower-triangular ``C`` (a Cholesky factor of ``S``)."""
    return sla.solve_triangular(C, B, lower=True, check_finite=False)


def precision_diagonal(C: np.ndarray) -> np.ndarray:
    """``diag(S^-1)`` from the lower Cholesky factor ``C`` of ``S``: the squared column norms
    of ``C^-1`` (one triangular inverse, ``n^3 / 3`` flops)."""
    Ci, info = sla.lapack.dtrtri(C, lower=1)
    if info != 0:
        raise CovarianceError(f"the weak-residual covariance S(p) is singular (trtri: {info})")
    return np.einsum("ij,ij->j", Ci, Ci)


def loo_log_density(a: np.ndarray, precision_diag: np.ndarray) -> np.ndarray:
    """``log p(r_i | r_-i)`` of a Gaussian ``r ~ N(0, S)`` for every entry ``i``.

    With ``a = S^-1 r`` and ``c = diag(S^-1)``, entry ``i`` given all the others is normal
    with mean ``r_i - a_i / c_i`` and variance ``1 / c_i`` (Sundararajan and Keerthi, 2001;
    Buerkner, Gabry and Vehtari, 2021, for leave-one-out cross-validation of non-factorised
    normal models), so its log density is ``(log c_i - log 2 pi - a_i^2 / c_i) / 2``.
    """
    c = np.asarray(precision_diag, dtype=float)
    return 0.5 * (np.log(c) - LOG_2PI - a**2 / c)


@dataclass
class Evaluation:
    """Quantities at one parameter point, shared by value, gradient and Hessian."""

    r: np.ndarray  # (n,)
    s2: np.ndarray  # (D,) effective variances (1 - eps) * sigma^2
    C: np.ndarray  # (n, n) lower Cholesky factor of S
    a: np.ndarray  # (n,) S^{-1} r
    nll: float
    logdet: float  # log det S
    phi: np.ndarray  # (K, M+1)
    dphi: np.ndarray  # (K, M+1)
    Ju: np.ndarray  # (M+1, D, D) df/du at the data
    weights: np.ndarray | None = None  # (M+1, D) noise-variance weights, None = all ones

    @property
    def v(self) -> np.ndarray:
        """Effective noise variance of every data entry, ``(M+1, D)``: ``s2`` times the
        weights (a row of zeros is a known, noise-free time point)."""
        if self.weights is None:
            return np.broadcast_to(self.s2, (self.Ju.shape[0], self.s2.size))
        return self.s2[None, :] * self.weights

    @property
    def quadratic(self) -> float:
        """The quadratic form ``r' S^-1 r / 2``."""
        return 0.5 * float(self.r @ self.a)

    def precision_diagonal(self) -> np.ndarray:
        """``diag(S^-1)``, state-major like ``r``."""
        return precision_diagonal(self.C)

    @cached_property
    def L(self) -> np.ndarray:
        """The noise linearisation ``[d, k, e, m]`` (built on first use: value, gradient and
        the optimiser's Hessian model work from ``phi``, ``dphi`` and ``Ju`` directly)."""
        return linearisation(self.phi, self.dphi, self.Ju)

    @property
    def La(self) -> np.ndarray:
        """``L^T a`` as ``[e, m]``."""
        D, K = self.Ju.shape[1], self.phi.shape[0]
        A = self.a.reshape(D, K)
        return np.einsum("dm,mde->em", A @ self.phi, self.Ju, optimize=True) + A @ self.dphi


def _covariance(phi: np.ndarray, dphi: np.ndarray, Ju: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``L diag(v) L^T`` block by block, without forming ``L``; ``v`` holds the effective noise
    variances, per state (D,) or per data entry (M+1, D).

    With ``L_de = Phi diag(Ju[:, d, e]) + [d = e] dPhi``, block ``(d, f)`` is
    ``Phi diag(w_df) Phi^T + Phi diag(c_df) dPhi^T + (Phi diag(c_fd) dPhi^T)^T
    + [d = f] s2_d dPhi dPhi^T`` with ``w_df = sum_e s2_e Ju_de Ju_fe`` and
    ``c_df = s2_f Ju_df``: K x (M+1) x K products, skipped where ``Ju`` is zero, about half
    the flops of ``L L^T`` for D = 3 and none of its (n, D (M+1)) temporaries.
    """
    M1, D, _ = Ju.shape
    K = phi.shape[0]
    per_entry = v.ndim == 2
    vm = v if per_entry else np.broadcast_to(v, (M1, v.size))  # (M+1, D)
    w = np.einsum("mde,mfe,me->dfm", Ju, Ju, vm, optimize=True)
    c = Ju.transpose(1, 2, 0) * vm.T[None, :, :]  # c[d, f, m] = v[m, f] Ju[m, d, f]
    pairs = [(d, f) for d in range(D) for f in range(d, D) if np.any(w[d, f])]
    cross = [(d, f) for d in range(D) for f in range(D) if np.any(c[d, f])]
    # one product per kind over all blocks: (blocks * K, M+1) x (M+1, K)
    wp = w[tuple(np.array(pairs, dtype=int).reshape(-1, 2).T)]
    cp = c[tuple(np.array(cross, dtype=int).reshape(-1, 2).T)]
    Sw = (phi[None] * wp[:, None, :]).reshape(-1, M1) @ phi.T
    Sc = (phi[None] * cp[:, None, :]).reshape(-1, M1) @ dphi.T
    Sw = Sw.reshape(len(pairs), K, K)
    Sc = Sc.reshape(len(cross), K, K)
    S = np.zeros((D, K, D, K))
    for q, (d, f) in enumerate(pairs):  # loops over state blocks only
        S[d, :, f, :] = Sw[q]
    for q, (d, f) in enumerate(cross):
        S[d, :, f, :] += Sc[q]
        S[f, :, d, :] += Sc[q].T
    dd = None if per_entry else dphi @ dphi.T
    for d in range(D):
        S[d, :, d, :] += (dphi * v[:, d]) @ dphi.T if per_entry else v[d] * dd
        for f in range(d + 1, D):
            S[f, :, d, :] = S[d, :, f, :].T
    return S.reshape(D * K, D * K)


def evaluate(
    phi: np.ndarray,
    dphi: np.ndarray,
    b: np.ndarray,
    F: np.ndarray,
    Ju: np.ndarray,
    sigma2: np.ndarray,
    ridge: float,
    diag: float | None = None,
    weights: np.ndarray | None = None,
) -> Evaluation:
    """Residual, covariance factor and negative log-likelihood from ``f`` and ``df/du``.

    ``S = (1 - ridge) L diag(sigma2 * weights) L^T + diag I`` with ``diag = ridge`` unless
    given (the tempering ladder's relaxed covariances add more to the diagonal); ``weights``
    (M+1, D) scale the noise variance of single data entries (None: all ones).
    """
    K, M1 = phi.shape
    D = F.shape[1]
    n = K * D
    r = residual(phi, F, b)
    s2 = (1.0 - ridge) * np.asarray(sigma2, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):  # cholesky() names an overflow
        S = _covariance(phi, dphi, Ju, s2 if weights is None else s2[None, :] * weights)
    S[np.diag_indices_from(S)] += ridge if diag is None else diag
    C = cholesky(S)
    z = solve_lower(C, r)
    a = sla.solve_triangular(C, z, lower=True, trans="T", check_finite=False)
    logdet = 2.0 * np.sum(np.log(np.diag(C)))
    nll = 0.5 * (logdet + z @ z + n * LOG_2PI)
    return Evaluation(
        r=r,
        s2=s2,
        C=C,
        a=a,
        nll=float(nll),
        logdet=float(logdet),
        phi=phi,
        dphi=dphi,
        Ju=Ju,
        weights=weights,
    )


def _inverse(C: np.ndarray) -> np.ndarray:
    """``S^{-1}`` from the lower Cholesky factor of ``S`` (LAPACK ``potri``, mirrored)."""
    Si, info = sla.lapack.dpotri(C, lower=1)
    if info != 0:
        raise CovarianceError(f"the weak-residual covariance S(p) is singular (potri: {info})")
    Si = np.tril(Si)
    return Si + np.tril(Si, -1).T


def gradient_parts(
    ev: Evaluation,
    phi: np.ndarray,
    Jp: np.ndarray,
    Jup: np.ndarray,
    ridge: float,
    logdet: bool = True,
    sigma2: bool | str = True,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Gradient with respect to ``p`` and to the noise variances, plus the contraction ``B``.

    Returns ``(grad_p, grad_sigma2, B)`` with ``B`` of shape (D, M+1, D). ``logdet=False``
    gives the gradient of the quadratic form ``r' S^-1 r / 2`` alone (the bias study in
    ``benchmarks/bias_mechanisms.py``). ``sigma2=False`` skips the noise-variance gradient
    (``grad_sigma2`` is then None): it is the only part that needs ``S^-1 L`` in full;
    ``sigma2="entry"`` gives it per data entry (:func:`noise_gradient`).

    ``B`` needs only ``Phi_d^T S^-1 L`` at equal times, so it is formed from ``S^-1`` (one
    ``potri``) and ``Phi^T S^-1`` (K of the n rows at a time) instead of solving ``S``
    against the ``D (M+1)`` columns of ``L``: 3-4x fewer flops for ``M+1 > K``.
    """
    M1, D, _ = ev.Ju.shape
    K = phi.shape[0]
    n = K * D
    La = ev.La
    Pa = ev.a.reshape(D, K) @ phi  # Phi^T a_d, per (d, m)
    B = -Pa[:, :, None] * La.T[None, :, :]  # the -a a^T part of W = S^{-1} - a a^T
    Si = None
    if logdet:
        Si = _inverse(ev.C)
        # (Phi^T S^-1)[m, d, (f, k)], time-major so that the contraction below with Phi and
        # dPhi at equal times is one pass over contiguous memory
        PS = (phi.T @ Si.reshape(D, K, n).transpose(1, 0, 2).reshape(K, D * n)).reshape(
            M1, D * D, K
        )
        # sum_(f,k) PS[m, d, (f, k)] L[(f, k), (e, m)] with L from Phi, dPhi and Ju
        AB = np.matmul(PS, np.stack([phi.T, ev.dphi.T], axis=2)).reshape(M1, D, D, 2)
        B += np.einsum("mdf,mfe->dme", AB[..., 0], ev.Ju, optimize=True)
        B += AB[..., 1].transpose(1, 0, 2)
    v = ev.v
    B *= v[None, :, :]
    G = dr_dp(phi, Jp)
    grad_p = G.T @ ev.a + np.einsum("dme,mdej->j", B, Jup, optimize=True)
    if not sigma2:
        return grad_p, None, B
    # sum over rows of L * W L, per column (e, m), weighted and summed over time per state e
    per_em = -(La**2)
    if logdet:
        L2 = ev.L.reshape(n, D * M1)
        per_em += np.sum((L2 * (Si @ L2)).reshape(n, D, M1), axis=0)
    return grad_p, noise_gradient(per_em, ev.weights, ridge, sigma2), B


def noise_gradient(per_em: np.ndarray, weights, ridge: float, sigma2: bool | str) -> np.ndarray:
    """The gradient in the noise variances from ``per_em`` (D, M+1), each column ``(e, m)``
    of ``L``'s ``(L^T W L)`` diagonal: per state, weighted by the entries' noise weights
    (``sigma2=True``), or ``d nll / d v[m, e]`` per entry (``sigma2="entry"``, shape (M+1, D),
    where the form's weights are the entries' variances themselves)."""
    if sigma2 == "entry":
        return 0.5 * (1.0 - ridge) * per_em.T
    if weights is not None:
        per_em = per_em * weights.T
    return 0.5 * (1.0 - ridge) * np.sum(per_em, axis=1)


def dr_dp(phi: np.ndarray, Jp: np.ndarray) -> np.ndarray:
    """Jacobian of the residual with respect to ``p``: shape (KD, J), state-major rows."""
    M1, D, J = Jp.shape
    K = phi.shape[0]
    G = (phi @ Jp.reshape(M1, D * J)).reshape(K, D, J)
    return G.transpose(1, 0, 2).reshape(K * D, J)


def hessian(
    ev: Evaluation,
    phi: np.ndarray,
    Jp: np.ndarray,
    Jup: np.ndarray,
    Jpp: np.ndarray,
    Jupp: np.ndarray,
    B: np.ndarray,
    logdet: bool = True,
    exact: bool = True,
) -> np.ndarray:
    """Hessian of the negative log-likelihood with respect to ``p`` (see module doc).

    ``logdet=False`` (with ``B`` from ``gradient_parts(..., logdet=False)``) gives the
    Hessian of the quadratic form ``r' S^-1 r / 2`` alone: the terms
    ``-1/2 tr(S^-1 S_i S^-1 S_j)`` and ``tr(S^-1 L_i Sigma' L_j^T)`` belong to the
    log-determinant and are dropped.

    ``exact=False`` drops the same two terms but keeps ``B`` (so the log-determinant's
    ``d3f`` term stays): the *Newton model* the optimiser steps with. Those two terms need
    ``C^-1`` against every ``dL/dp_i`` block, most of the cost of the Hessian, yet they are
    of order ``n`` while the quadratic form's curvature is of order ``|dr/dp|^2 / sigma^2``:
    on Goodwin 3D at 5 % noise they are ``1e-6`` of the Hessian in norm and move its
    eigenvalues by 0-4 %, so trust-region steps with the cheap matrix take as many
    iterations as with the exact one.

    ``dL/dp_i`` has a non-zero column block only for the states ``e`` with some
    ``d2f/(du_e dp_i) != 0``; the triangular solves and products run over those blocks only,
    which is what makes the Hessian affordable for systems with many parameters (each
    parameter of the benchmark systems touches one or two states, and none for the constant
    terms).
    """
    M1, D, _ = ev.Ju.shape
    K = phi.shape[0]
    n = K * D
    J = Jp.shape[2]
    vT = ev.v.T  # (D, M+1) effective variance per column (e, m) of L
    G = dr_dp(phi, Jp)
    Pa = ev.a.reshape(D, K) @ phi  # Phi^T a_d, per (d, m)
    La = ev.La  # L^T a, per (e, m)
    c = np.einsum("dm,mdei->iem", Pa, Jup, optimize=True)  # L_i^T a
    cs = c * vT[None, :, :]
    # v_i = r_i - S_i a with S_i a = L_i Sigma' L^T a + L Sigma' L_i^T a, from Phi and dPhi
    u = np.einsum("mdei,em->mdi", Jup, vT * La, optimize=True)
    u += np.einsum("mde,iem->mdi", ev.Ju, cs, optimize=True)
    Sa = phi @ u.reshape(M1, D * J) + ev.dphi @ cs.transpose(2, 1, 0).reshape(M1, D * J)
    V = G - Sa.reshape(K, D, J).transpose(1, 0, 2).reshape(n, J)
    Wv = solve_lower(ev.C, V)
    H = (
        np.einsum("dm,mdij->ij", Pa, Jpp, optimize=True)
        + Wv.T @ Wv
        + np.einsum("dme,mdeij->ij", B, Jupp, optimize=True)
        - cs.reshape(J, -1) @ c.reshape(J, -1).T
    )
    if logdet and exact:
        H += _trace_terms(ev, phi, Jup)
    return 0.5 * (H + H.T)


def _trace_terms(ev: Evaluation, phi: np.ndarray, Jup: np.ndarray) -> np.ndarray:
    """``tr(S^-1 L_i Sigma' L_j^T) - 1/2 tr(S^-1 S_i S^-1 S_j)``: the exact Hessian's
    log-determinant terms that need ``C^-1`` against every ``dL/dp_i`` block."""
    D, K, _, M1 = ev.L.shape
    n = K * D
    J = Jup.shape[3]
    sq = np.sqrt(ev.v.T)  # (D, M+1)
    Z = solve_lower(ev.C, (ev.L * sq[None, None, :, :]).reshape(n, D * M1)).reshape(n, D, M1)
    P = np.zeros((J, n, n))  # C^{-1} L_i Sigma' L^T C^{-T}
    X: list[dict[int, np.ndarray]] = []  # C^{-1} L_i Sigma'^{1/2}, by column block e
    for i in range(J):  # loop over parameters and their non-zero state blocks only
        Ji = Jup[:, :, :, i]  # (M1, D, D): [m, d, e]
        blocks = {}
        rows = np.any(Ji != 0, axis=0)  # (D, D): [d, e]
        for e in np.flatnonzero(rows.any(axis=0)):
            Lie = (phi[None, :, :] * Ji[:, :, e].T[:, None, :]).reshape(n, M1)
            # rows of state blocks before the first non-zero one stay zero under C^{-1}
            s = int(np.argmax(rows[:, e])) * K
            Xe = np.zeros((n, M1))
            Xe[s:] = solve_lower(ev.C[s:, s:], Lie[s:] * sq[e][None, :])
            blocks[e] = Xe
            P[i, s:] += Xe[s:] @ Z[:, e, :].T
        X.append(blocks)
    XX = np.zeros((J, J))
    for i in range(J):
        for j in range(i + 1):
            common = X[i].keys() & X[j].keys()
            XX[i, j] = XX[j, i] = sum(np.vdot(X[i][e], X[j][e]) for e in common)
    Pf = P.reshape(J, -1)
    PT = P.transpose(0, 2, 1).reshape(J, -1)
    return XX - (Pf @ PT.T + Pf @ Pf.T)


def whiten(ev: Evaluation) -> np.ndarray:
    """Whitened residual ``C^{-1} r`` (standard normal at the truth if the model holds)."""
    return solve_lower(ev.C, ev.r)


def quadratic_score_mean(
    ev: Evaluation, phi: np.ndarray, Jp: np.ndarray, Juu: np.ndarray
) -> np.ndarray:
    r"""Second-order mean of the quadratic form's score under the data noise, shape (J,).

    With ``Q(p) = r' S^-1 r / 2`` evaluated on data ``U = U* + eps``, ``eps`` rows i.i.d.
    ``N(0, Sigma)``, and ``r(p; U*) = 0``, the expectation of the score ``grad Q`` is, to
    order ``sigma^0`` (the order that makes the estimator's ``O(sigma^2)`` bias)::

        c_j = w_j' m  -  E[w_j' dS w_eps]  (the two terms that survive)

        w_j   = S^-1 dr/dp_j
        m     = E r(U* + eps) - r(U*) = 1/2 Phi sum_e sigma_e^2 d2f/du_e^2   (curvature of f)
        dS    = dL Sigma L' + L Sigma dL',  dL = Phi d2f/du du . eps   (S on noisy data)
        w_eps = S^-1 L eps

    The cross terms ``E[(dL_j eps)' S^-1 L eps]`` (noise in ``dr/dp``) and
    ``-1/2 E[(L eps)' S^-1 dS_j S^-1 L eps]`` (the ``dS/dp`` term) cancel exactly when
    ``S = L Sigma L'``, which is why the quadratic form has no log-determinant bias. ``ev`` is
    the evaluation at the data (its ``U`` stands in for ``U*``, an error of relative order
    ``sigma``); ``Juu`` is ``d2f/du2`` of shape (M+1, D, D, D) ``[m, d, e, e']``.
    """
    D, K, _, M1 = ev.L.shape
    n = K * D
    v = ev.v  # (M+1, D) effective variance per data entry
    L2 = ev.L.reshape(n, D * M1)
    G = dr_dp(phi, Jp)
    w = solve_covariance(ev.C, G).reshape(D, K, -1)  # S^-1 dr/dp, (D, K, J)
    omega = np.einsum("km,dkj->dmj", phi, w, optimize=True)  # Phi' w per state
    # mean of the residual at noisy data: 1/2 Phi sum_e sigma_e^2 f_uu[d, e, e]
    lap = np.einsum("mdee,me->md", Juu, v, optimize=True)
    t_mean = 0.5 * np.einsum("dmj,md->j", omega, lap, optimize=True)
    # E[w' dL Sigma L' S^-1 L eps]: dL couples eps at time m only, so only the diagonal
    # (e, e') blocks at equal times of Sigma L' S^-1 L Sigma are needed
    X = solve_lower(ev.C, L2).reshape(n, D, M1)
    P = np.einsum("rem,rfm->mef", X, X, optimize=True) * (v[:, :, None] * v[:, None, :])
    A = np.einsum("dmj,mdef->mefj", omega, Juu, optimize=True)
    t_left = np.einsum("mefj,mef->j", A, P, optimize=True)
    # E[w' L Sigma dL' S^-1 L eps]
    vL = np.einsum("dkem,dkj->emj", ev.L, w, optimize=True) * v.T[:, :, None]
    SiL = solve_covariance(ev.C, L2).reshape(D, K, D, M1)
    Z = np.einsum("km,dkfm->dmf", phi, SiL, optimize=True) * v[None, :, :]
    t_right = np.einsum("mdef,emj,dmf->j", Juu, vL, Z, optimize=True)
    return t_mean - t_left - t_right


def gls_covariance(A: np.ndarray) -> np.ndarray:
    """``(A^T A)^-1`` for the whitened Jacobian ``A = C^-1 G``, through the R factor of ``A``
    for accuracy."""
    R = np.linalg.qr(A, mode="r")
    Ri = np.linalg.solve(R, np.eye(R.shape[0]))
    return Ri @ Ri.T


def inverse_information(H: np.ndarray) -> np.ndarray:
    """``H^-1`` for a Hessian of the negative log-likelihood, by Cholesky; a clear error
    where ``H`` is not positive definite."""
    try:
        Lh = np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        raise WeakLikelihoodError(
            "the Hessian is not positive definite at p: not a local minimum of the "
            "negative log-likelihood, so its inverse is no covariance"
        ) from None
    Li = np.linalg.solve(Lh, np.eye(H.shape[0]))
    return Li.T @ Li
