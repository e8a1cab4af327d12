r"""Likelihood kernels for models with derivative terms and inputs (the operator form).

A model of order ``q_d`` in state ``d`` with derivative terms and known inputs,

.. math::

    x_d^{(q_d)} = f_d(t, x; p) + \sum_{e, k \ge 1} a_{dek}(p)\, x_e^{(k)}
                  + \sum_i \beta_{di}(p)\, w_i(t),

has, after ``k`` integrations by parts of every derivative term, the weak residual

.. math::

    r_d = \Phi f_d(X) + \sum_{q \ge 1} \sum_e C_{q,de}(p)\, \Phi^{(q)} X_e
          + \sum_i \beta_{di}(p)\, \Psi_i,
    \qquad C_{q,de} = (-1)^q a_{deq} - [d = e,\ q = q_d] (-1)^{q_d},

with ``Phi^(q)`` the weighted ``q``-th derivatives of the test functions on the data grid
(``ops[q - 1]``) and ``Psi_i = int phi w_i dt`` (exact, :mod:`pymc_wendy.model.inputs`). A
first-order model is the special case ``C_1 = I``, which recovers ``r = Phi F + dPhi U``
of :mod:`pymc_wendy.weak.kernels`. The noise linearisation is

.. math::

    L_{(dk),(em)} = \Phi_{km}\, \partial_{x_e} f_d(x_m) + \sum_q C_{q,de}(p)\, \Phi^{(q)}_{km},

now parameter-dependent through ``C`` as well as through ``f``. The same formulas as in
:mod:`pymc_wendy.weak.kernels` follow with ``L`` held dense (``n = K D`` rows, ``D (M+1)``
columns; for the one- or two-state models this form serves, as cheap as the block layout):

    dl/dp_j = a' r_j + <W L Sigma', L_j>,   W = S^-1 - a a'
    H_ij    = a' r_ij + v_i' S^-1 v_j + <W L Sigma', L_ij> + tr(W L_i Sigma' L_j')
              - 1/2 tr(S^-1 S_i S^-1 S_j),  v_i = r_i - S_i a.

``<W L Sigma', L_j>`` never forms ``L_j``: its ``f`` part contracts ``B[d, m, e] = sum_k
Phi[k, m] (W L Sigma')[(d, k), (e, m)]`` with ``d2f/(dx dp)`` as in the first-order kernels,
its operator part contracts ``T[q, d, e] = <(W L Sigma')_{de}, Phi^(q)>`` with ``dC/dp``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from pymc_wendy.weak import kernels

LOG_2PI = kernels.LOG_2PI


@dataclass
class Terms:
    """The parameter-dependent operator coefficients at one point and their derivatives."""

    C: np.ndarray  # (Q, D, D)
    beta: np.ndarray  # (D, I)
    C_p: np.ndarray | None = None  # (Q, D, D, J)
    beta_p: np.ndarray | None = None  # (D, I, J)
    C_pp: np.ndarray | None = None  # (Q, D, D, J, J)
    beta_pp: np.ndarray | None = None  # (D, I, J, J)


@dataclass
class Data:
    """What the operator form needs from the data and test functions (fixed per likelihood)."""

    phi: np.ndarray  # (K, M1)
    ops: np.ndarray  # (Q, K, M1): Phi^(q), q = 1..Q
    OX: np.ndarray  # (Q, K, D): Phi^(q) X
    Psi: np.ndarray  # (K, I): int phi w_i
    #: (P, K, M1): the operators of the pointwise stack (``phi``, then ``Phi^(k)`` of each
    #: order of the total derivative terms); the ``F``, ``Ju``, ... the kernels take are
    #: stacked the same way, shape (P, M1, ...)
    pointwise: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.pointwise is None:
            self.pointwise = self.phi[None]

    @property
    def shape(self) -> tuple[int, int, int]:
        K, M1 = self.phi.shape
        return K, self.OX.shape[2], M1


@dataclass
class Evaluation:
    """Quantities at one point shared by value, gradient and Hessian (dense ``L``)."""

    r: np.ndarray  # (n,)
    s2: np.ndarray  # (D,) effective variances (1 - ridge) sigma^2
    C: np.ndarray  # (n, n) lower Cholesky factor of S
    a: np.ndarray  # (n,) S^-1 r
    nll: float
    logdet: float
    L: np.ndarray  # (n, D M1)
    weights: np.ndarray | None = None  # (M1, D) noise-variance weights, None = all ones

    @property
    def quadratic(self) -> float:
        return 0.5 * float(self.r @ self.a)

    def precision_diagonal(self) -> np.ndarray:
        """``diag(S^-1)``, in the order of ``r``."""
        return kernels.precision_diagonal(self.C)

    @property
    def s2_columns(self) -> np.ndarray:
        """Effective variance of every column ``(e, m)`` of ``L``."""
        if self.weights is None:
            return np.repeat(self.s2, self.L.shape[1] // self.s2.size)
        return (self.s2[:, None] * self.weights.T).ravel()


def _b(data: Data, C: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Operator and input part of the residual, ``(K, D)``."""
    return np.einsum("qke,qde->kd", data.OX, C, optimize=True) + data.Psi @ beta.T


def residual(data: Data, F: np.ndarray, terms: Terms) -> np.ndarray:
    """Weak residual ``vec(sum_P Phi_P F_P + b(p))`` in state-major order."""
    PF = np.einsum("qkm,qmd->kd", data.pointwise, F, optimize=True)
    return (PF + _b(data, terms.C, terms.beta)).T.ravel()


def linearisation(data: Data, Ju: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Dense noise linearisation ``L``, shape ``(K D, D M1)`` (module doc)."""
    K, D, M1 = data.shape
    L = np.einsum("qkm,qmde->dkem", data.pointwise, Ju, optimize=True)
    L += np.einsum("qde,qkm->dkem", C, data.ops, optimize=True)
    return L.reshape(K * D, D * M1)


def evaluate(
    data: Data,
    F: np.ndarray,
    Ju: np.ndarray,
    terms: Terms,
    sigma2: np.ndarray,
    ridge: float,
    diag: float | None = None,
    weights: np.ndarray | None = None,
) -> Evaluation:
    """Residual, covariance factor and negative log-likelihood (``kernels.evaluate``)."""
    r = residual(data, F, terms)
    L = linearisation(data, Ju, terms.C)
    s2 = (1.0 - ridge) * np.asarray(sigma2, dtype=float)
    M1 = data.phi.shape[1]
    cols = np.repeat(s2, M1) if weights is None else (s2[:, None] * weights.T).ravel()
    Ls = L * np.sqrt(cols)[None, :]
    S = Ls @ Ls.T
    S[np.diag_indices_from(S)] += ridge if diag is None else diag
    C = kernels.cholesky(S)
    z = kernels.solve_lower(C, r)
    a = sla.solve_triangular(C, z, lower=True, trans="T", check_finite=False)
    logdet = 2.0 * float(np.sum(np.log(np.diag(C))))
    nll = 0.5 * (logdet + z @ z + r.size * LOG_2PI)
    return Evaluation(r=r, s2=s2, C=C, a=a, nll=float(nll), logdet=logdet, L=L, weights=weights)


def dr_dp(data: Data, Jp: np.ndarray, terms: Terms) -> np.ndarray:
    """Jacobian of the residual with respect to ``p``, shape ``(K D, J)``."""
    K, D, _ = data.shape
    G = np.einsum("qkm,qmdj->dkj", data.pointwise, Jp, optimize=True).reshape(K * D, -1)
    Bp = np.einsum("qke,qdej->dkj", data.OX, terms.C_p, optimize=True)
    Bp += np.einsum("ki,dij->dkj", data.Psi, terms.beta_p, optimize=True)
    return G + Bp.reshape(K * D, -1)


def gradient_parts(
    ev: Evaluation,
    data: Data,
    Jp: np.ndarray,
    Jup: np.ndarray,
    terms: Terms,
    ridge: float,
    logdet: bool = True,
    sigma2: bool | str = True,
):
    """``(grad_p, grad_sigma2, (B, T))``; ``grad_sigma2`` is None with ``sigma2=False``, per
    entry with ``"entry"`` (:func:`~pymc_wendy.weak.kernels.noise_gradient`).

    ``logdet=False`` gives the gradient of the quadratic form alone (``W = -a a'``).
    """
    K, D, M1 = data.shape
    n = K * D
    La = ev.L.T @ ev.a
    WL = -np.outer(ev.a, La)
    if logdet:
        WL += kernels.solve_covariance(ev.C, ev.L)
    WLS = (WL * ev.s2_columns[None, :]).reshape(D, K, D, M1)
    B = np.einsum("qkm,dkem->qdme", data.pointwise, WLS, optimize=True)
    T = np.einsum("qkm,dkem->qde", data.ops, WLS, optimize=True)
    grad_p = dr_dp(data, Jp, terms).T @ ev.a
    grad_p += np.einsum("qdme,qmdej->j", B, Jup, optimize=True)
    grad_p += np.einsum("qde,qdej->j", T, terms.C_p, optimize=True)
    if not sigma2:
        return grad_p, None, (B, T)
    per_em = np.sum((ev.L * WL).reshape(n, D, M1), axis=0)
    return grad_p, kernels.noise_gradient(per_em, ev.weights, ridge, sigma2), (B, T)


def dL_dp(data: Data, Jup: np.ndarray, terms: Terms) -> np.ndarray:
    """``dL/dp_j`` for every parameter, shape ``(J, K D, D M1)``."""
    K, D, M1 = data.shape
    Lj = np.einsum("qkm,qmdej->jdkem", data.pointwise, Jup, optimize=True)
    Lj = Lj + np.einsum("qdej,qkm->jdkem", terms.C_p, data.ops, optimize=True)
    return Lj.reshape(-1, K * D, D * M1)


def hessian(
    ev: Evaluation,
    data: Data,
    Jp: np.ndarray,
    Jup: np.ndarray,
    Jpp: np.ndarray,
    Jupp: np.ndarray,
    terms: Terms,
    BT: tuple[np.ndarray, np.ndarray],
    logdet: bool = True,
    exact: bool = True,
) -> np.ndarray:
    """Hessian of the negative log-likelihood in ``p`` (module doc; ``kernels.hessian``)."""
    K, D, M1 = data.shape
    B, T = BT
    A = ev.a.reshape(D, K)
    Pa = np.einsum("dk,qkm->qdm", A, data.pointwise, optimize=True)
    s2c = ev.s2_columns
    G = dr_dp(data, Jp, terms)
    Lj = dL_dp(data, Jup, terms)
    La = ev.L.T @ ev.a  # (D M1,)
    LjTa = np.einsum("jnc,n->jc", Lj, ev.a, optimize=True)  # (J, D M1)
    Sa = np.einsum("jnc,c->nj", Lj, s2c * La, optimize=True) + ev.L @ (s2c[:, None] * LjTa.T)
    Wv = kernels.solve_lower(ev.C, G - Sa)
    H = (
        np.einsum("qdm,qmdij->ij", Pa, Jpp, optimize=True)
        + np.einsum("dk,qke,qdeij->ij", A, data.OX, terms.C_pp, optimize=True)
        + np.einsum("dk,ki,dilj->lj", A, data.Psi, terms.beta_pp, optimize=True)
        + Wv.T @ Wv
        + np.einsum("qdme,qmdeij->ij", B, Jupp, optimize=True)
        + np.einsum("qde,qdeij->ij", T, terms.C_pp, optimize=True)
        - (LjTa * s2c[None, :]) @ LjTa.T
    )
    if logdet and exact:
        sq = np.sqrt(s2c)
        Z = kernels.solve_lower(ev.C, ev.L * sq[None, :])
        X = np.stack([kernels.solve_lower(ev.C, Lj[i] * sq[None, :]) for i in range(Lj.shape[0])])
        P = np.einsum("inc,mc->inm", X, Z, optimize=True)
        Pf = P.reshape(P.shape[0], -1)
        PT = P.transpose(0, 2, 1).reshape(P.shape[0], -1)
        XX = X.reshape(X.shape[0], -1)
        H += XX @ XX.T - (Pf @ PT.T + Pf @ Pf.T)
    return 0.5 * (H + H.T)
