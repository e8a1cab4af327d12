r"""Linear-in-parameters fast path (WENDy-MLE Appendix B).

When ``f = theta_0(u, t) + sum_j p_j theta_j(u, t)``, the residual is affine,
``r(p) = r_0 + G p``, and so is the linearisation, ``L(p) = sum_a pt_a L_a`` with
``pt = (1, p)``. The covariance is then a quadratic polynomial in ``p``::

    S(p) = sum_{a <= b} pt_a pt_b A_ab + eps I,   A_aa = L_a S' L_a^T,
                                                  A_ab = L_a S' L_b^T + L_b S' L_a^T (a < b)

whose (J+1)(J+2)/2 coefficient matrices are precomputed once, so an evaluation costs a
weighted sum and one Cholesky factorisation instead of a K D x D(M+1) matrix product.
Everything is derived from the generated derivatives at ``p = 0``; no extra symbolic work.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from pymc_wendy.weak import kernels


def precompute_bytes(K: int, D: int, J: int) -> int:
    """Memory the coefficient matrices take."""
    n = K * D
    return (J + 1) * (J + 2) // 2 * n * n * 8


def _pairs(J: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(J + 1)


@dataclass
class LinearForm:
    """Precomputed affine residual and quadratic covariance for one noise level."""

    s2_raw: np.ndarray  # the variances this was built for (cache key)
    r0: np.ndarray  # (n,)
    G: np.ndarray  # (n, J)
    A: np.ndarray  # (npairs, n, n)
    ridge_diag: float  # what the ridge adds to the diagonal

    @classmethod
    def build(
        cls, coefficients: Callable, s2: np.ndarray, ridge: float, ridge_diag: float
    ) -> LinearForm:
        """From a form's ``linear_coefficients`` (:class:`~pymc_wendy.weak.form.WeakForm`)
        at noise variances ``s2``; the ridge scales the noise as in ``S(p)`` and adds
        ``ridge_diag`` to the diagonal."""
        r0, G, A = coefficients((1.0 - ridge) * np.asarray(s2, dtype=float))
        return cls(s2_raw=np.array(s2, dtype=float), r0=r0, G=G, A=A, ridge_diag=ridge_diag)

    def _factor(self, p: np.ndarray, logdet: bool = True):
        pt = np.concatenate([[1.0], p])
        ia, ib = _pairs(p.size)
        with np.errstate(over="ignore", invalid="ignore"):  # cholesky() names an overflow
            S = np.tensordot(pt[ia] * pt[ib], self.A, axes=1)
        S[np.diag_indices_from(S)] += self.ridge_diag
        C = kernels.cholesky(S)
        r = self.r0 + self.G @ p
        z = sla.solve_triangular(C, r, lower=True, check_finite=False)
        if logdet:
            nll = 0.5 * (2.0 * np.sum(np.log(np.diag(C))) + z @ z + r.size * kernels.LOG_2PI)
        else:
            nll = 0.5 * (z @ z)
        return pt, C, z, float(nll)

    def nll(self, p: np.ndarray, logdet: bool = True) -> float:
        """Negative log-likelihood, or the quadratic form ``r' S^-1 r / 2`` alone."""
        return self._factor(p, logdet)[3]

    def nll_grad(self, p: np.ndarray, logdet: bool = True) -> tuple[float, np.ndarray]:
        """:meth:`nll` and its gradient in ``p``."""
        pt, C, z, nll = self._factor(p, logdet)
        a = sla.solve_triangular(C, z, lower=True, trans="T", check_finite=False)
        if logdet:
            # Trace terms need <S^{-1}, A_ab>; forming S^{-1} from the factor costs one n^3
            # pass, far less than J solves against n x n coefficient matrices.
            Sinv, info = sla.lapack.dpotri(C, lower=1)
            if info != 0:
                raise kernels.CovarianceError("could not invert the Cholesky factor of S(p)")
            W = np.tril(Sinv) + np.tril(Sinv, -1).T - np.outer(a, a)
        else:  # the quadratic form's trace terms need only -a a^T
            W = -np.outer(a, a)
        n = a.size
        tr = self.A.reshape(self.A.shape[0], n * n) @ W.ravel()  # <W, A_ab>: one pass over A
        J = p.size
        T = np.zeros((J + 1, J + 1))
        ia, ib = _pairs(J)
        T[ia, ib] = tr
        T[ib, ia] = tr
        T[np.diag_indices(J + 1)] *= 2.0
        grad = self.G.T @ a + 0.5 * (T[1:] @ pt)
        return nll, grad


def covariance_coefficients(phi, dphi, Ju0, Jup, s2e, weights=None) -> np.ndarray:
    """The coefficient matrices ``A`` (shape (P, n, n)) of ``S(p)`` of a first-order model,
    from ``df/du`` at ``p = 0`` (``Ju0``, (M+1, D, D)) and its ``p`` derivative (``Jup``,
    (M+1, D, D, J)), for effective noise variances ``s2e`` times the per-entry ``weights``
    ((M+1, D); None: all ones)."""
    J, D = Jup.shape[3], Ju0.shape[1]
    K = phi.shape[0]
    # g[a][m, d, e]: coefficient of pt_a in df_d/du_e
    g = np.concatenate([Ju0[None], Jup.transpose(3, 0, 1, 2)], axis=0)
    ia, ib = _pairs(J)
    v = np.broadcast_to(s2e, Ju0.shape[:2]) if weights is None else s2e[None, :] * weights
    A = np.zeros((ia.size, K * D, K * D))
    for q, (a, b) in enumerate(zip(ia, ib, strict=True)):
        Aab = _cross(phi, dphi, g[a], g[b], v, a == 0, b == 0)
        A[q] = Aab if a == b else Aab + Aab.T
    return A


@dataclass
class CompiledForm:
    """Coefficient matrices in the block-sparse layout of
    :func:`pymc_wendy.backends.numba_kernels.linear`.

    Only non-zero K x K blocks ``(d, d2)`` with ``d >= d2`` are kept (S is symmetric and most
    parameters enter one equation, so most blocks of most pairs vanish), each stored transposed
    so the compiled loops read memory contiguously. ``blk_e`` is the noise state (always 0 when
    the noise variances are fixed and folded in), ``blk_q`` the pair index.
    """

    r0: np.ndarray
    G: np.ndarray
    blocks: np.ndarray  # (nb, K, K)
    blk_e: np.ndarray
    blk_q: np.ndarray
    blk_d: np.ndarray
    blk_d2: np.ndarray

    @classmethod
    def from_dense(cls, r0: np.ndarray, G: np.ndarray, A: np.ndarray, K: int) -> CompiledForm:
        """From dense ``A`` of shape (E, P, n, n)."""
        E, P, n, _ = A.shape
        D = n // K
        blocks, idx = [], []
        for e, q, d, d2 in itertools.product(range(E), range(P), range(D), range(D)):
            if d2 > d:
                continue
            blk = A[e, q, d * K : (d + 1) * K, d2 * K : (d2 + 1) * K]
            if np.any(blk):
                blocks.append(np.ascontiguousarray(blk.T))
                idx.append((e, q, d, d2))
        idx_arr = np.array(idx, dtype=np.int64).reshape(-1, 4)
        blocks_arr = np.array(blocks).reshape(-1, K, K)
        return cls(r0, G, blocks_arr, *(np.ascontiguousarray(c) for c in idx_arr.T))


def per_state_form(coefficients: Callable, D: int, K: int) -> CompiledForm:
    """The compiled form resolved per noise state (for a noise level that is a model
    variable): the coefficients of each state's unit variance, one state at a time so that
    the dense matrices of only one state exist at once."""
    forms = []
    for e in range(D):
        r0, G, A = coefficients(np.eye(D)[e])
        forms.append(CompiledForm.from_dense(r0, G, A[None], K))
        forms[-1].blk_e[:] = e
        del A
    return CompiledForm(
        forms[0].r0,
        forms[0].G,
        np.concatenate([f.blocks for f in forms]),
        *(np.concatenate([getattr(f, k) for f in forms]) for k in _INDEX_FIELDS),
    )


_INDEX_FIELDS = ("blk_e", "blk_q", "blk_d", "blk_d2")


def _cross(phi, dphi, ga, gb, v, a_has_dphi, b_has_dphi) -> np.ndarray:
    """``L_a S' L_b^T`` block by block (``v`` (M+1, D): the effective variance of every data
    entry); each block is a few ``Phi diag(h) Phi^T`` products."""
    K = phi.shape[0]
    D = ga.shape[1]
    out = np.zeros((D, K, D, K))
    for d in range(D):  # loops over states only
        for d2 in range(D):
            h = np.einsum("me,me,me->m", ga[:, d, :], gb[:, d2, :], v)
            block = np.zeros((K, K))
            if np.any(h):
                block += (phi * h) @ phi.T
            if b_has_dphi and np.any(ga[:, d, d2]):
                block += (phi * (v[:, d2] * ga[:, d, d2])) @ dphi.T
            if a_has_dphi and np.any(gb[:, d2, d]):
                block += (dphi * (v[:, d] * gb[:, d2, d])) @ phi.T
            if a_has_dphi and b_has_dphi and d == d2:
                block += (dphi * v[:, d]) @ dphi.T
            out[d, :, d2, :] = block
    return out.reshape(D * K, D * K)
