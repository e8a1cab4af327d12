r"""The weak likelihood with a banded covariance, for compactly supported test functions.

:func:`evaluate` and :func:`gradient_parts` compute what their namesakes in
:mod:`pymc_wendy.weak.kernels` compute (same inputs, same outputs in the same state-major
order), without ever forming a ``KD x KD`` or ``K x (M+1)`` matrix, when every test function
vanishes outside a window of the time grid.

Why it is banded
    ``S[(d, k), (f, l)]`` sums over time points where both ``phi_k`` (or ``phi_k'``) and
    ``phi_l`` (or ``phi_l'``) are non-zero. With the test functions ordered by the centre of
    their support, it vanishes unless ``|k - l| <= w``, the *half-bandwidth in test-function
    index* (:func:`local_rows`). Interleaving the states, residual index ``k D + d``
    (test-function-major, not the kernels' state-major ``d K + k``), makes ``S`` a band
    matrix of half-bandwidth ``b = (w + 1) D - 1``.

What it costs
    Assembly ``O(w K s D^2)`` for windows of ``s`` time points, LAPACK ``pbtrf`` ``O(n b^2)``
    with ``n = K D``, solves ``O(n b)``. The gradient needs ``S^{-1}`` only between test
    functions that share a time point, which is inside the band: its band comes from the
    factor by selected inversion (the Takahashi / Erisman-Tinney recursion,
    :func:`selected_inverse`, ``O(n b^2)``) instead of the dense inverse (``O(n^3)``). All of it
    is linear in ``M`` for a fixed radius in grid points.

What it does not do
    The exact Hessian's trace term ``tr(S^-1 S_i S^-1 S_j)`` needs ``S^{-1}`` far outside the
    band (``S^-1 S_i`` is dense), so it stays on the dense path (``kernels.hessian``).
    :func:`hessian` gives the trust-region MLE's Newton model (``exact=False``), which needs
    one band solve against ``J`` columns and sums over time.

When it helps
    Only for *local* test functions. The default ones (:func:`~pymc_wendy.weak.test_functions.
    build_test_functions`) are the leading right singular vectors of the stacked bumps: every
    row is non-zero on the whole grid, ``w = K - 1`` and the band is the whole matrix (this
    module is then exact but slower than the dense kernels). The banded path needs rows such
    as un-reduced bumps of one radius at strided centres:
    :func:`~pymc_wendy.weak.test_functions.build_local_test_functions`
    (``test_functions="local"``), which keeps them as windows (:class:`LocalRows`).

How it is dispatched
    Build :class:`LocalRows` once per data set (``local_rows(phi, dphi)``, or directly from
    windows with :meth:`LocalRows.from_windows` so that ``phi`` is never stored dense) and
    take the banded path when ``rows.band_fraction(D) <= 0.3``. Measured on FitzHugh-Nagumo
    (``benchmarks/banded_scaling.py``, loaded 2-core machine, value + gradient against
    ``kernels``): dense / banded time 10-45x at band shares 0.03-0.06 (513-1025 points),
    3-8x at 0.13, 2.3-4.3x at 0.26, 0.96-1.1x at 0.54 and 0.2-0.4x at 0.86-1.0; the compiled
    dense kernel of the Op (numba, general path) costs about what the numpy reference does at
    these sizes, so the same threshold holds against it until the banded path is compiled
    too. The default test functions always have share 1: dense.

    Wired into ``WeakLikelihood`` (:class:`~pymc_wendy.weak.first_order.FirstOrderForm`,
    ``test_functions="local"``, :func:`use_banded`): the form keeps the rows, calls
    :func:`evaluate`, :func:`gradient_parts` and, for the Newton model, :func:`hessian`; the
    exact Hessian there is central differences of the gradient, the sandwich and GLS
    covariances work on the windows and the band, and ``quadratic_score_mean`` and the dense
    covariance factor densify (``pymc_wendy/weak/first_order.py``). The band factor
    whitens in the interleaved order (``BandedEvaluation.whiten``): another orthogonal
    rotation of the dense factor's whitened residual, so diagnostics that test whitened
    residuals for normality see different (equally distributed) numbers. The numba Op runs
    the compiled counterpart, :mod:`pymc_wendy.backends.numba_banded` (same quantities,
    LAPACK ``pbtrf``/``pbtrs`` and :func:`selected_inverse`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numba
import numpy as np
import scipy.linalg as sla

from pymc_wendy.weak import kernels
from pymc_wendy.weak.kernels import LOG_2PI, CovarianceError

__all__ = [
    "MAX_BAND_SHARE",
    "BandedEvaluation",
    "LocalRows",
    "covariance_band",
    "evaluate",
    "gradient_parts",
    "hessian",
    "local_rows",
    "selected_inverse",
    "use_banded",
]

#: The banded path is taken when at most this share of ``S`` lies inside the band (module
#: docstring: dense and banded cost about the same at share ~0.5, banded is 2.3-4.3x faster
#: at 0.26).
MAX_BAND_SHARE = 0.3


def use_banded(rows: LocalRows, D: int) -> bool:
    """The dispatch rule: whether ``rows`` with ``D`` states should take the banded path."""
    return rows.band_fraction(D) <= MAX_BAND_SHARE


# --- the test functions as windows, ordered by centre ---------------------------------------


@dataclass(frozen=True, eq=False)
class LocalRows:
    """Test functions stored by their support windows, ordered by the centre of the support.

    Attributes
    ----------
    order : numpy.ndarray, shape (K,)
        ``order[p]`` is the row of ``phi`` that sits at position ``p`` after ordering.
    ordered : bool
        Whether the given rows were already in that order (``order`` is then the identity).
    start : numpy.ndarray, shape (K,)
        First time index of each row's window (in the new order).
    phi, dphi : numpy.ndarray, shape (K, width)
        ``phi[p, j]`` is the weighted test function ``order[p]`` at time ``start[p] + j``.
    n_points : int
        Number of time points ``M + 1``.
    w : int
        Half-bandwidth in test-function index: the largest ``|p - q|`` whose supports share
        a time point.
    """

    order: np.ndarray
    ordered: bool
    start: np.ndarray
    phi: np.ndarray
    dphi: np.ndarray
    n_points: int
    w: int

    @classmethod
    def from_windows(
        cls, start: np.ndarray, phi: np.ndarray, dphi: np.ndarray, n_points: int
    ) -> LocalRows:
        """Order rows given as windows (``phi[k, j]`` at time ``start[k] + j``) and find the
        bandwidth; ``phi`` of shape (K, M+1) is never needed."""
        start = np.asarray(start, dtype=np.int64)
        phi = np.asarray(phi, dtype=float)
        dphi = np.asarray(dphi, dtype=float)
        K, width = phi.shape
        if dphi.shape != phi.shape or start.shape != (K,):
            raise ValueError("start, phi and dphi must have shapes (K,), (K, s), (K, s)")
        if K and (start.min() < 0 or start.max() + width > n_points):
            raise ValueError(f"windows of {width} points must lie inside the {n_points} points")
        first, last = _support(start, (phi != 0) | (dphi != 0))
        # centre of the support, ties kept in the given order (stable sort)
        centre = first + last
        ordered = bool(np.all(np.diff(centre) >= 0))
        order = np.arange(K) if ordered else np.argsort(centre, kind="stable")
        first, last = first[order], last[order]
        return cls(
            order=order,
            ordered=ordered,
            start=start[order],
            phi=phi[order],
            dphi=dphi[order],
            n_points=int(n_points),
            w=_half_bandwidth(first, last),
        )

    @property
    def K(self) -> int:
        """Number of test functions."""
        return int(self.phi.shape[0])

    @property
    def width(self) -> int:
        """Length of the windows in time points."""
        return int(self.phi.shape[1])

    def bandwidth(self, D: int) -> int:
        """Half-bandwidth of ``S`` in the interleaved order: ``(w + 1) D - 1``, at most
        ``K D - 1``."""
        return min((self.w + 1) * D - 1, self.K * D - 1)

    def band_fraction(self, D: int) -> float:
        """Share of the ``K D x K D`` entries of ``S`` that lie inside the band."""
        n, b = self.K * D, self.bandwidth(D)
        return (n * (2 * b + 1) - b * (b + 1)) / n**2

    @functools.cached_property
    def index(self) -> np.ndarray:
        """Time index of every window entry, shape (K, width)."""
        return self.start[:, None] + np.arange(self.width)[None, :]

    @functools.cached_property
    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """``phi`` and ``dphi`` of rows ``p + q``, ``q = -w..w``, on the window of row ``p``:
        ``G[p, t, w + q]``, each of shape (K, width, 2 w + 1), zero where ``p + q`` is out of
        range or outside its own window. Every sum over a band diagonal is then one batched
        matrix product over all of them. Built once per set of test functions;
        ``16 K width (2 w + 1)`` bytes (8 MB for 16385 points, radius 8, stride 4), which is
        why the banded path is for small ``w``."""
        K, w = self.K, self.w
        Gp = np.zeros((K, self.width, 2 * w + 1))
        Gd = np.zeros_like(Gp)
        Gp[:, :, w], Gd[:, :, w] = self.phi, self.dphi
        for q in range(1, w + 1):  # loop over band diagonals only
            up = _shift(self.start[:-q], self.start[q:], self.phi[q:], self.dphi[q:])
            Gp[: K - q, :, w + q], Gd[: K - q, :, w + q] = up
            down = _shift(self.start[q:], self.start[:-q], self.phi[:-q], self.dphi[:-q])
            Gp[q:, :, w - q], Gd[q:, :, w - q] = down
        return Gp, Gd

    def to_dense(self) -> tuple[np.ndarray, np.ndarray]:
        """``(phi, dphi)`` of shape (K, M+1) in the original row order (tests, small sizes)."""
        phi = np.zeros((self.K, self.n_points))
        dphi = np.zeros((self.K, self.n_points))
        phi[self.order[:, None], self.index] = self.phi
        dphi[self.order[:, None], self.index] = self.dphi
        return phi, dphi

    def gather(self, X: np.ndarray) -> np.ndarray:
        """``X[index]``: rows of a per-time array on every window, shape (K, width, ...)
        (``np.take`` on the flattened rows: 5x faster than fancy indexing at 100 000
        points)."""
        X = np.asarray(X)
        flat = np.take(X.reshape(X.shape[0], -1), self.index, axis=0)
        return flat.reshape(self.index.shape + X.shape[1:])

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """Sum ``values`` (K, width, c) over windows into times: shape (M+1, c) (compiled:
        one pass over the windows, no index arrays)."""
        v = np.ascontiguousarray(values, dtype=float).reshape(self.K, self.width, -1)
        return _scatter_sum(self.start, v, self.n_points)


@numba.njit(cache=True)
def _scatter_sum(
    start: np.ndarray, values: np.ndarray, n_points: int
) -> np.ndarray:  # pragma: no cover - compiled
    K, W, C = values.shape
    out = np.zeros((n_points, C))
    for p in range(K):
        s = start[p]
        for j in range(W):
            for c in range(C):
                out[s + j, c] += values[p, j, c]
    return out


def local_rows(phi: np.ndarray, dphi: np.ndarray) -> LocalRows:
    """The :class:`LocalRows` of dense test-function matrices ``phi``, ``dphi`` (K, M+1).

    The window of a row is the smallest range of time points holding every non-zero of its
    ``phi`` and ``dphi`` rows, padded to the longest one. Reading the dense matrices is
    ``O(K M)``, once per data set.
    """
    phi = np.asarray(phi, dtype=float)
    dphi = np.asarray(dphi, dtype=float)
    K, M1 = phi.shape
    nz = (phi != 0) | (dphi != 0)
    first = np.argmax(nz, axis=1)
    last = M1 - 1 - np.argmax(nz[:, ::-1], axis=1)
    last = np.where(nz.any(axis=1), last, first)  # an all-zero row: a one-point window
    width = int(np.max(last - first + 1)) if K else 1
    start = np.minimum(first, M1 - width)
    idx = start[:, None] + np.arange(width)[None, :]
    return LocalRows.from_windows(
        start,
        np.take_along_axis(phi, idx, axis=1),
        np.take_along_axis(dphi, idx, axis=1),
        M1,
    )


def _support(start: np.ndarray, nz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last time index holding a non-zero of each row (``start`` for empty rows)."""
    width = nz.shape[1]
    any_nz = nz.any(axis=1)
    first = start + np.argmax(nz, axis=1)
    last = start + width - 1 - np.argmax(nz[:, ::-1], axis=1)
    return np.where(any_nz, first, start), np.where(any_nz, last, start)


def _half_bandwidth(first: np.ndarray, last: np.ndarray) -> int:
    """Largest ``q - p`` with overlapping supports, rows ordered by centre.

    For ``q > p`` the centre of ``q`` is at or after that of ``p``, so ``last_q >= first_p``
    always and the supports overlap exactly when ``first_q <= last_p``. The largest such
    ``q`` is the last index whose suffix minimum of ``first`` is ``<= last_p`` (the suffix
    minimum is non-decreasing, so a binary search finds it).
    """
    K = first.size
    if K == 0:
        return 0
    suffix_min = np.minimum.accumulate(first[::-1])[::-1]
    reach = np.searchsorted(suffix_min, last, side="right") - 1
    return int(max(0, np.max(reach - np.arange(K))))


def _shift(
    start_to: np.ndarray, start_from: np.ndarray, phi: np.ndarray, dphi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows given on windows at ``start_from``, read on windows at ``start_to`` (zero outside
    their own window)."""
    width = phi.shape[1]
    pos = (start_to - start_from)[:, None] + np.arange(width)[None, :]
    inside = (pos >= 0) & (pos < width)
    pos = np.clip(pos, 0, width - 1)
    return (
        np.where(inside, np.take_along_axis(phi, pos, axis=1), 0.0),
        np.where(inside, np.take_along_axis(dphi, pos, axis=1), 0.0),
    )


# --- the covariance in band storage ---------------------------------------------------------


def _time_weights(Ju: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per time point: ``w[m, d, f] = sum_e v_e Ju_de Ju_fe``, ``c[m, d, f] = v_f Ju_df`` and
    the variances ``v`` (M+1, D), as in ``kernels._covariance``."""
    M1, D, _ = Ju.shape
    vm = v if v.ndim == 2 else np.broadcast_to(v, (M1, D))
    w = np.einsum("mde,mfe,me->mdf", Ju, Ju, vm, optimize=True)
    c = Ju * vm[:, None, :]
    return w, c, np.ascontiguousarray(vm)


def _window_sums(G: np.ndarray, g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``sum_t G[p, t, q] g[p, t] h[p, t, x]``: shape (K, q, x) (compiled: one pass, no
    temporaries; 2x the batched product at 100 000 points)."""
    return _window_sums_kernel(
        np.ascontiguousarray(G), np.ascontiguousarray(g), np.ascontiguousarray(h)
    )


@numba.njit(cache=True)
def _window_sums_kernel(
    G: np.ndarray, g: np.ndarray, h: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    K, W, Q = G.shape
    X = h.shape[2]
    out = np.zeros((K, Q, X))
    for p in range(K):
        for t in range(W):
            gt = g[p, t]
            if gt == 0.0:
                continue
            for q in range(Q):
                a = G[p, t, q] * gt
                for x in range(X):
                    out[p, q, x] += a * h[p, t, x]
    return out


def covariance_band(
    rows: LocalRows, Ju: np.ndarray, v: np.ndarray, diag: float = 0.0
) -> np.ndarray:
    """``L diag(v) L^T + diag I`` in LAPACK lower band storage, interleaved order.

    Parameters
    ----------
    rows : LocalRows
        The test functions.
    Ju : numpy.ndarray, shape (M+1, D, D)
        ``df/du`` at the data.
    v : numpy.ndarray, shape (D,) or (M+1, D)
        Effective noise variances, per state or per data entry.
    diag : float
        Added to the diagonal (the ridge).

    Returns
    -------
    numpy.ndarray, shape (b + 1, K D)
        ``ab[i - j, j] = S[i, j]`` for ``i >= j`` with ``i = p D + d`` (``p`` the position of
        the test function in ``rows.order``): what ``scipy.linalg.cholesky_banded(ab,
        lower=True)`` takes.

    Notes
    -----
    Block ``S[(p + q, d), (p, f)]`` sums over the window of ``p``:
    ``phi_{p+q} phi_p w_df + phi_{p+q} phi_p' c_df + phi_{p+q}' phi_p c_fd
    + [d = f] phi_{p+q}' phi_p' v_d`` with ``w_df = sum_e v_e Ju_de Ju_fe`` and
    ``c_df = v_f Ju_df`` (``kernels._covariance``), for every ``q = 0..w`` at once.
    """
    K, s, D, w = rows.K, rows.width, Ju.shape[1], rows.w
    wg, cg, vg = (rows.gather(x).reshape(K, s, -1) for x in _time_weights(Ju, v))
    Gp, Gd = rows.neighbours
    up_p, up_d = Gp[:, :, w:], Gd[:, :, w:]  # rows p + q, q = 0..w
    S = _window_sums(up_p, rows.phi, wg) + _window_sums(up_p, rows.dphi, cg)
    S = S.reshape(K, w + 1, D, D)
    S += _window_sums(up_d, rows.phi, cg).reshape(K, w + 1, D, D).transpose(0, 1, 3, 2)
    S[:, :, np.arange(D), np.arange(D)] += _window_sums(up_d, rows.dphi, vg)
    blocks = [S[: K - q, q] for q in range(w + 1)]
    ab = _blocks_to_band(blocks, K, D, rows.bandwidth(D))
    ab[0] += diag
    return ab


def _blocks_to_band(blocks: list[np.ndarray], K: int, D: int, b: int) -> np.ndarray:
    """Lower band storage from ``blocks[q][p, d, f] = S[(p + q, d), (p, f)]``."""
    ab = np.zeros((b + 1, K * D))
    for q, blk in enumerate(blocks):  # loops over band diagonals and states only
        for d in range(D):
            for f in range(D):
                row = q * D + d - f
                if 0 <= row <= b:
                    ab[row, f::D][: K - q] = blk[:, d, f]
    return ab


def _band_to_blocks(ab: np.ndarray, K: int, D: int, w: int) -> list[np.ndarray]:
    """``blocks[q][p, d, f] = X[(p + q, d), (p, f)]`` of a symmetric ``X`` in lower band
    storage, ``q = 0..w``."""
    blocks = []
    for q in range(min(w, K - 1) + 1):  # loops over band diagonals and states only
        blk = np.empty((K - q, D, D))
        for d in range(D):
            for f in range(D):
                row = q * D + d - f
                blk[:, d, f] = ab[row, f::D][: K - q] if row >= 0 else ab[-row, d::D][: K - q]
        blocks.append(blk)
    return blocks


def _cholesky_band(ab: np.ndarray) -> np.ndarray:
    """Lower band Cholesky factor (LAPACK ``pbtrf``), :class:`CovarianceError` if ``S`` is
    not positive definite."""
    if not np.all(np.isfinite(ab)):
        raise CovarianceError(
            f"the weak-residual covariance S(p) (size {ab.shape[1]}) has entries that overflow "
            "or are not numbers: the parameters or the noise level are extreme"
        )
    cb, info = sla.lapack.dpbtrf(ab, lower=1)
    if info != 0 or not np.all(np.isfinite(cb[0])):
        where = f"leading minor {info}" if info > 0 else f"pbtrf: {info}"
        raise CovarianceError(
            "the weak-residual covariance S(p) is not positive definite "
            f"(size {ab.shape[1]}, band {ab.shape[0] - 1}, {where}); the noise level may be "
            "zero or the parameters extreme"
        )
    return cb


def _tri_solve(cb: np.ndarray, x: np.ndarray, trans: str) -> np.ndarray:
    """``C^-1 x`` (``trans="N"``) or ``C^-T x`` (``"T"``) for the lower band factor ``C``."""
    out, info = sla.lapack.dtbtrs(cb, x.reshape(x.shape[0], -1), uplo="L", trans=trans)
    if info != 0:
        raise CovarianceError(f"the weak-residual covariance S(p) is singular (tbtrs: {info})")
    return out.reshape(x.shape)


def _to_band(rows: LocalRows, D: int, x: np.ndarray) -> np.ndarray:
    """State-major rows ``d K + k`` (original order) to interleaved rows ``p D + d``."""
    y = x.reshape(D, rows.K, -1)[:, rows.order]
    return y.transpose(1, 0, 2).reshape(x.shape)


def _from_band(rows: LocalRows, D: int, x: np.ndarray) -> np.ndarray:
    """Interleaved rows ``p D + d`` back to state-major rows in the original order."""
    out = np.empty((D, rows.K) + x.shape[1:])
    out[:, rows.order] = x.reshape((rows.K, D) + x.shape[1:]).swapaxes(0, 1)
    return out.reshape(x.shape)


# --- value -----------------------------------------------------------------------------------


@dataclass
class BandedEvaluation:
    """Quantities at one parameter point (``kernels.Evaluation`` for the banded path).

    ``r`` and ``a`` are state-major, in the original row order, as in the dense kernels;
    ``cb`` and ``a_band`` are in the interleaved order of ``rows``.
    """

    r: np.ndarray  # (n,) residual
    s2: np.ndarray  # (D,) effective variances (1 - eps) * sigma^2
    cb: np.ndarray  # (b + 1, n) lower band Cholesky factor of S, interleaved order
    a: np.ndarray  # (n,) S^{-1} r
    a_band: np.ndarray  # (K, D) S^{-1} r, interleaved order
    nll: float
    logdet: float
    rows: LocalRows
    Ju: np.ndarray  # (M+1, D, D)
    weights: np.ndarray | None = None

    # the dense evaluation's, on the same fields
    v = kernels.Evaluation.v
    quadratic = kernels.Evaluation.quadratic

    def to_band_order(self, x: np.ndarray) -> np.ndarray:
        """State-major rows (``d K + k``, original order) to the interleaved order."""
        return _to_band(self.rows, self.Ju.shape[1], x)

    def from_band_order(self, x: np.ndarray) -> np.ndarray:
        """Interleaved rows back to state-major rows in the original order."""
        return _from_band(self.rows, self.Ju.shape[1], x)

    def solve(self, B: np.ndarray) -> np.ndarray:
        """``S^-1 B`` for state-major rows ``B`` (n,) or (n, c) (``kernels.solve_covariance``)."""
        z = _tri_solve(self.cb, self.to_band_order(B), "N")
        return self.from_band_order(_tri_solve(self.cb, z, "T"))

    def whiten_rows(self, B: np.ndarray) -> np.ndarray:
        """``C^-1`` applied to state-major rows ``B`` (n,) or (n, c), in the interleaved
        order (``C`` the band factor): whitening for least squares and rank tests."""
        return _tri_solve(self.cb, self.to_band_order(np.asarray(B, dtype=float)), "N")

    def precision_diagonal(self) -> np.ndarray:
        """``diag(S^-1)``, state-major in the original order, from the band of ``S^-1``
        (:func:`selected_inverse`, ``O(n b^2)``)."""
        return self.from_band_order(selected_inverse(self.cb)[0])

    def whiten(self) -> np.ndarray:
        """``C^-1 r`` in the interleaved order (``C`` is the band factor, not the dense one:
        the whitened residuals differ from ``kernels.whiten`` by an orthogonal map)."""
        return _tri_solve(self.cb, self.to_band_order(self.r), "N")

    @functools.cached_property
    def projections(self) -> tuple[np.ndarray, np.ndarray]:
        """``Phi^T a_d`` and ``dPhi^T a_d`` per time point, each (D, M+1)."""
        rows, A = self.rows, self.a_band
        both = np.concatenate(
            [rows.phi[:, :, None] * A[:, None, :], rows.dphi[:, :, None] * A[:, None, :]], axis=2
        )
        PA = rows.scatter(both).T
        D = A.shape[1]
        return PA[:D], PA[D:]

    @property
    def La(self) -> np.ndarray:
        """``L^T a`` as ``[e, m]``."""
        Pa, Da = self.projections
        return np.einsum("dm,mde->em", Pa, self.Ju, optimize=True) + Da


def evaluate(
    phi: np.ndarray | None,
    dphi: np.ndarray | None,
    b: np.ndarray,
    F: np.ndarray,
    Ju: np.ndarray,
    sigma2: np.ndarray,
    ridge: float,
    diag: float | None = None,
    weights: np.ndarray | None = None,
    *,
    rows: LocalRows | None = None,
) -> BandedEvaluation:
    """Residual, band factor of ``S`` and negative log-likelihood (``kernels.evaluate``).

    Same arguments as :func:`pymc_wendy.weak.kernels.evaluate`; ``rows`` (from
    :func:`local_rows`, built once per data set) replaces ``phi`` and ``dphi``, which are
    then not read and may be None.

    Raises
    ------
    CovarianceError
        If ``S`` is not positive definite.
    """
    if rows is None:
        rows = local_rows(phi, dphi)
    D = F.shape[1]
    n = rows.K * D
    # the residual Phi F + b, summed over each window
    PF = np.einsum("pt,ptd->pd", rows.phi, rows.gather(F), optimize=True)
    Rm = np.empty((rows.K, D))
    Rm[rows.order] = PF
    r = (Rm + b).T.ravel()
    s2 = (1.0 - ridge) * np.asarray(sigma2, dtype=float)
    v = s2 if weights is None else s2[None, :] * weights
    with np.errstate(over="ignore", invalid="ignore"):  # _cholesky_band names an overflow
        band = covariance_band(rows, Ju, v, ridge if diag is None else diag)
    cb = _cholesky_band(band)
    z = _tri_solve(cb, _to_band(rows, D, r), "N")
    a_band = _tri_solve(cb, z, "T")
    logdet = float(2.0 * np.sum(np.log(cb[0])))
    return BandedEvaluation(
        r=r,
        s2=s2,
        cb=cb,
        a=_from_band(rows, D, a_band),
        a_band=a_band.reshape(rows.K, D),
        nll=float(0.5 * (logdet + z @ z + n * LOG_2PI)),
        logdet=logdet,
        rows=rows,
        Ju=Ju,
        weights=weights,
    )


# --- selected inverse and gradient -----------------------------------------------------------


@numba.njit(cache=True)
def selected_inverse(cb: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """The band of ``S^{-1}`` from the lower band Cholesky factor of ``S`` (same storage).

    Takahashi / Erisman-Tinney recursion: ``O(n b^2)`` flops, no entry outside the band
    computed. Compiled with numba (a loop over rows); callable from compiled code (the Op's
    banded kernel) and from Python.
    """
    n = cb.shape[1]
    b = cb.shape[0] - 1
    z = np.zeros_like(cb)
    # Z C = C^-T column by column from the last: for i >= j,
    # Z[i, j] = (delta_ij / C[j, j] - sum_{k=j+1}^{j+b} Z[i, k] C[k, j]) / C[j, j],
    # where every Z[i, k] needed lies inside the band and in a later column
    for j in range(n - 1, -1, -1):
        top = min(j + b, n - 1)
        cjj = cb[0, j]
        for i in range(top, j, -1):
            s = 0.0
            for k in range(j + 1, top + 1):
                zik = z[i - k, k] if i >= k else z[k - i, i]
                s += zik * cb[k - j, j]
            z[i - j, j] = -s / cjj
        s = 0.0
        for k in range(j + 1, top + 1):
            s += z[k - j, j] * cb[k - j, j]
        z[0, j] = (1.0 / cjj - s) / cjj
    return z


def _inverse_on_windows(ev: BandedEvaluation) -> tuple[np.ndarray, np.ndarray]:
    """``Y[p, t, (d, f)] = sum_q S^-1[(p, d), (q, f)] g_q(time t of window p)`` for
    ``g = phi`` and ``g = dphi``, each (K, width, D D): ``S^-1`` applied to the test
    functions, where row ``p``'s test function is non-zero."""
    rows = ev.rows
    K, D, w = rows.K, ev.Ju.shape[1], rows.w
    blocks = _band_to_blocks(selected_inverse(ev.cb), K, D, w)
    # Sn[p, w + q] = S^-1[(p, d), (p + q, f)], q = -w..w
    Sn = np.zeros((K, 2 * w + 1, D, D))
    Sn[:, w] = blocks[0]
    for q in range(1, w + 1):  # loop over band diagonals only
        Sn[: K - q, w + q] = blocks[q].transpose(0, 2, 1)
        Sn[q:, w - q] = blocks[q]
    Sn = Sn.reshape(K, 2 * w + 1, D * D)
    Gp, Gd = rows.neighbours
    return np.matmul(Gp, Sn), np.matmul(Gd, Sn)


def _quadratic_forms(ev: BandedEvaluation, sigma2: bool) -> tuple[np.ndarray, ...]:
    """``Q_gh[m, d, f] = sum_{k, l} g_k(m) S^-1[(d, k), (f, l)] h_l(m)`` for ``(g, h)`` =
    (phi, phi), (phi, dphi) and, with ``sigma2``, (dphi, dphi); each (M+1, D, D)."""
    rows = ev.rows
    D = ev.Ju.shape[1]
    Yp, Yd = _inverse_on_windows(ev)
    parts = [(rows.phi, Yp), (rows.phi, Yd)] + ([(rows.dphi, Yd)] if sigma2 else [])
    return tuple(rows.scatter(g[:, :, None] * Y).reshape(-1, D, D) for g, Y in parts)


def gradient_parts(
    ev: BandedEvaluation,
    phi: np.ndarray | None,
    Jp: np.ndarray,
    Jup: np.ndarray,
    ridge: float,
    logdet: bool = True,
    sigma2: bool | str = True,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Gradient with respect to ``p`` and the noise variances, and ``B`` (D, M+1, D)
    (``kernels.gradient_parts``; ``phi`` is not read, ``ev.rows`` holds the test functions).

    Only ``S^{-1}`` between test functions that share a time point enters, the band that
    :func:`selected_inverse` gives:
    ``B[d, m, e] = v[m, e] (Q_pp[m] Ju[m] + Q_pd[m] - Phi^T a_d (L^T a)_e)[d, e]`` and, per
    column ``(e, m)`` of ``L``, ``L^T S^-1 L = (Ju^T Q_pp Ju + 2 Ju * Q_pd + Q_dd)[e, e]``.
    """
    Ju = ev.Ju
    Pa, _ = ev.projections
    La = ev.La
    B = -Pa[:, :, None] * La.T[None, :, :]
    Q = _quadratic_forms(ev, sigma2) if logdet else None
    if logdet:
        B += np.einsum("mdf,mfe->dme", Q[0], Ju, optimize=True) + Q[1].transpose(1, 0, 2)
    B *= ev.v[None, :, :]
    # G^T a = sum over time of (Phi^T a_d) df_d/dp: G itself is never formed
    grad_p = np.einsum("dm,mdj->j", Pa, Jp, optimize=True)
    grad_p += np.einsum("dme,mdej->j", B, Jup, optimize=True)
    if not sigma2:
        return grad_p, None, B
    per_em = -(La**2)
    if logdet:
        per_em += (
            np.einsum("mde,mdf,mfe->em", Ju, Q[0], Ju, optimize=True)
            + 2.0 * np.einsum("mde,mde->em", Ju, Q[1], optimize=True)
            + np.einsum("mee->em", Q[2])
        )
    return grad_p, kernels.noise_gradient(per_em, ev.weights, ridge, sigma2), B


# --- Hessian (the Newton model only) ---------------------------------------------------------


def hessian(
    ev: BandedEvaluation,
    phi: np.ndarray | None,
    Jp: np.ndarray,
    Jup: np.ndarray,
    Jpp: np.ndarray,
    Jupp: np.ndarray,
    B: np.ndarray,
    logdet: bool = True,
    exact: bool = True,
) -> np.ndarray:
    """Hessian in ``p`` without the log-determinant's trace terms (``kernels.hessian`` with
    ``exact=False``, or ``logdet=False``): the trust-region MLE's Newton model.

    Everything but ``V' S^-1 V`` (``V = dr/dp - dS/dp a``, one band solve against ``J``
    columns) is a sum over time points. The exact Hessian's ``tr(S^-1 S_i S^-1 S_j)`` needs
    ``S^-1`` outside the band and is left to the dense kernels: asking for it raises.

    Raises
    ------
    ValueError
        For ``exact=True`` with ``logdet=True``.
    """
    if exact and logdet:
        raise ValueError(
            "the exact Hessian's trace terms need S^-1 beyond the band: use "
            "kernels.hessian on the dense path (or exact=False for the Newton model)"
        )
    rows, Ju = ev.rows, ev.Ju
    M1, D, _ = Ju.shape
    J = Jp.shape[2]
    vT = ev.v.T  # (D, M+1)
    Pa, _ = ev.projections
    La = ev.La
    c = np.einsum("dm,mdei->iem", Pa, Jup, optimize=True)  # L_i^T a
    cs = c * vT[None, :, :]
    # S_i a = L_i Sigma' L^T a + L Sigma' L_i^T a, as Phi u + dPhi cs on the windows
    u = np.einsum("mdei,em->mdi", Jup, vT * La, optimize=True)
    u += np.einsum("mde,iem->mdi", Ju, cs, optimize=True)
    V = np.einsum("pt,ptx->px", rows.phi, rows.gather((Jp - u).reshape(M1, D * J)))
    V -= np.einsum("pt,ptx->px", rows.dphi, rows.gather(cs.transpose(2, 1, 0).reshape(M1, -1)))
    Wv = _tri_solve(ev.cb, V.reshape(rows.K * D, J), "N")  # interleaved rows: C is the band's
    H = (
        np.einsum("dm,mdij->ij", Pa, Jpp, optimize=True)
        + Wv.T @ Wv
        + np.einsum("dme,mdeij->ij", B, Jupp, optimize=True)
        - cs.reshape(J, -1) @ c.reshape(J, -1).T
    )
    return 0.5 * (H + H.T)
