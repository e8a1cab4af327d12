"""Quadrature rules shared by the weak form and the baselines.

:func:`quadrature_weights` is the trapezoid rule on the data grid, the one WENDy integrates
with; :class:`ProductRule` integrates a known function against data on any grid (product
integration: the data replaced by their local cubic interpolant), the rule for non-uniform
grids and boundary test functions; :func:`gauss_legendre` is the composite Gauss-Legendre
rule that the baselines (``oc``, ``data2ld``) integrate their spline and test-function
products with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import roots_legendre

from pymc_wendy._validation import check_times

__all__ = [
    "ProductRule",
    "gauss_legendre",
    "quadrature_weights",
    "relevant_breaks",
    "segments",
]


def quadrature_weights(t: np.ndarray) -> np.ndarray:
    """Trapezoid-rule weights for the grid ``t``.

    Parameters
    ----------
    t : array_like, shape (M+1,)
        Strictly increasing, finite time points (at least two).

    Returns
    -------
    numpy.ndarray, shape (M+1,)
        ``w_0 = (t_1 - t_0)/2``, ``w_m = (t_{m+1} - t_{m-1})/2``, ``w_M = (t_M - t_{M-1})/2``;
        on a uniform grid the interior weights equal ``dt``.
    """
    t = check_times(t)
    h = np.diff(t)
    w = np.empty_like(t)
    w[0] = h[0] / 2.0
    w[-1] = h[-1] / 2.0
    w[1:-1] = (h[:-1] + h[1:]) / 2.0
    return w


def gauss_legendre(breaks: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre nodes and weights: ``n`` on every interval between breaks.

    Parameters
    ----------
    breaks : array_like
        Interval ends, in any order and possibly repeated (spline knots); the rule covers
        ``[min(breaks), max(breaks)]``.  Integrands that are smooth between breaks (piecewise
        polynomials with these knots) are integrated to the order of the rule.
    n : int
        Nodes per interval; exact for polynomials of degree ``2 n - 1`` on each interval.

    Returns
    -------
    nodes, weights : numpy.ndarray
        Interval by interval, ``n`` nodes each, in increasing order.
    """
    edges = np.unique(breaks)
    x, w = roots_legendre(n)
    half, mid = np.diff(edges) / 2, (edges[1:] + edges[:-1]) / 2
    return (mid[:, None] + half[:, None] * x).ravel(), (half[:, None] * w).ravel()


#: points of the local interpolant (a cubic) and Gauss-Legendre nodes per interval
_STENCIL = 4
_NODES = 10
# a support is also cut in this many equal parts (module: ProductRule.local_weights)
_QUARTERS = 4


def _lagrange(nodes: np.ndarray, stencil: np.ndarray, used: np.ndarray) -> np.ndarray:
    """The Lagrange basis of each piece's stencil at its nodes, shape nodes.shape + (4,);
    ``stencil`` and ``used`` have shape nodes.shape[:-1] + (4,) (unused points give 0)."""
    basis = np.ones(nodes.shape + (_STENCIL,))
    for j in range(_STENCIL):
        for k in range(_STENCIL):
            if k == j:
                continue
            den = np.where(used[..., k], stencil[..., j] - stencil[..., k], 1.0)
            factor = (nodes - stencil[..., k, None]) / den[..., None]
            basis[..., j] *= np.where(used[..., k, None], factor, 1.0)
    return basis * used[..., None, :]


@dataclass(frozen=True)
class ProductRule:
    """Weights ``w`` with ``sum_m w_m y(t_m) ~ int g(t) y(t) dt`` for a known smooth ``g``.

    The data ``y`` are replaced by their piecewise cubic Lagrange interpolant (on interval
    ``i``, the points ``i-1 .. i+2``, shifted inwards at the ends) and the product with ``g``
    is integrated with 10 Gauss-Legendre nodes per interval: an ``O(h^4)`` rule on any grid,
    whatever ``g`` does between the data points. The trapezoid rule is spectrally accurate
    for a smooth compactly supported integrand on a *uniform* grid, but only second order on
    a non-uniform one or for an integrand that does not vanish at an end.

    ``breaks`` are times where the data jump (a bolus into a measured state,
    :class:`~pymc_wendy.Doses`), ``kinks`` where only their derivative does (a bolus into an
    unmeasured state). The span is cut there into segments, and every piece of it is
    interpolated from the points of its own segment only (extrapolated up to the cut), so the
    rule stays ``O(h^4)`` on each smooth side. A data point *at* a break is the left limit
    (the value just before a dose) and belongs to the segment on its left; a point at a
    kink belongs to both. A segment with fewer than four points is interpolated with all of
    them (a lower degree).

    Build it with :meth:`on`; :attr:`nodes` are where ``g`` is evaluated (shape
    (pieces, nodes)), :meth:`weights` turns those values into weights on the grid.
    """

    t: np.ndarray
    edges: np.ndarray  # (I+1,) ends of the pieces: the grid times and the breaks inside
    nodes: np.ndarray  # (I, Q) Gauss-Legendre nodes per piece
    node_weights: np.ndarray  # (I, Q)
    basis: np.ndarray  # (I, Q, 4) the piece's Lagrange basis at its nodes (0 past its stencil)
    first: np.ndarray  # (I,) first grid index of each piece's stencil
    breaks: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the breaks in [t_0, t_M)
    kinks: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the kinks in [t_0, t_M)
    stencil: np.ndarray | None = None  # (I, 4) each piece's interpolation points
    used: np.ndarray | None = None  # (I, 4) which of them it uses (fewer in a short segment)

    @classmethod
    def on(cls, t: np.ndarray, breaks=(), kinks=()) -> ProductRule:
        """The rule on the strictly increasing grid ``t`` (at least four points), with the
        data's jumps at ``breaks`` and kinks at ``kinks`` (those outside ``[t_0, t_M)``
        change nothing)."""
        t = np.asarray(t, dtype=float)
        M1 = t.size
        if M1 < _STENCIL:
            raise ValueError(f"product integration needs at least {_STENCIL} time points; got {M1}")
        jumps, kinks = relevant_breaks(t, breaks), relevant_breaks(t, kinks)
        brk = np.union1d(jumps, kinks)
        edges = np.union1d(t, brk)
        lo, hi = edges[:-1], edges[1:]
        x, wq = roots_legendre(_NODES)
        half = (hi - lo) / 2.0
        nodes = (lo + hi)[:, None] / 2.0 + half[:, None] * x[None, :]
        # segment of every grid point and of every piece (a point at a break is its left limit)
        bounds = np.r_[-np.inf, brk, np.inf]
        seg_pt = np.searchsorted(brk, t, side="left")
        seg_piece = np.searchsorted(brk, lo, side="right")
        s_first = np.searchsorted(seg_pt, np.arange(bounds.size - 1), side="left")
        s_last = np.searchsorted(seg_pt, np.arange(bounds.size - 1), side="right") - 1
        # a point at a kink (continuous data) also starts the segment on its right
        at = np.searchsorted(t, brk)
        shared = np.isin(brk, kinks) & (at < M1) & (t[np.minimum(at, M1 - 1)] == brk)
        s_first[1:][shared] = at[shared]
        a, b = s_first[seg_piece], s_last[seg_piece]
        if np.any(b < a):
            bad = lo[b < a][0]
            raise ValueError(
                f"no data point between the breaks around t = {bad:g}: every stretch between "
                "two doses (and after the last) needs at least one observation"
            )
        size = np.minimum(b - a + 1, _STENCIL)
        i = np.searchsorted(t, lo, side="right") - 1  # last grid point at or before the piece
        first = np.clip(i - 1, a, b - size + 1)
        cols = first[:, None] + np.arange(_STENCIL)[None, :]
        stencil = t[np.minimum(cols, M1 - 1)]  # (I, 4), entries past a piece's size unused
        used = np.arange(_STENCIL)[None, :] < size[:, None]
        basis = _lagrange(nodes, stencil, used)
        return cls(
            t, edges, nodes, half[:, None] * wq[None, :], basis, first, jumps, kinks, stencil, used
        )

    def local_weights(self, lo: np.ndarray, hi: np.ndarray, function) -> np.ndarray:
        """Weights for ``R`` functions supported on ``[lo_r, hi_r]``, shape (R, M+1).

        ``function(nodes)`` receives nodes inside each support, shape (R, W, Q), and returns
        the functions' values there. The nodes are Gauss-Legendre nodes on the pieces the
        support touches, clipped to the support and with the support also cut in quarters:
        a bump then gets at least 40 nodes however narrow it is against the grid spacing (on
        a piece's own nodes, one narrower than a piece was sampled at a node or two, and a
        fit with such bumps on a geometric design was biased by 3 standard errors), and the
        cost grows with the supports' length, not the grid's.
        """
        n_int = self.first.size
        i0 = np.clip(np.searchsorted(self.edges, lo, side="right") - 1, 0, n_int - 1)
        i1 = np.clip(np.searchsorted(self.edges, hi, side="left"), i0 + 1, n_int)
        width = int(np.max(i1 - i0))
        # cut points of every support: the piece edges inside it and its quarters
        inner = i0[:, None] + 1 + np.arange(width)[None, :]
        cuts = np.where(inner < i1[:, None], self.edges[np.minimum(inner, n_int)], hi[:, None])
        quarters = lo[:, None] + (hi - lo)[:, None] * (np.arange(_QUARTERS + 1) / _QUARTERS)
        cuts = np.sort(np.concatenate([quarters, cuts], axis=1), axis=1)  # (R, W + 5)
        a, b = cuts[:, :-1], cuts[:, 1:]
        piece = np.clip(np.searchsorted(self.edges, (a + b) / 2.0, side="right") - 1, 0, n_int - 1)
        x, wq = roots_legendre(_NODES)
        half = (b - a)[:, :, None] / 2.0
        nodes = (a + b)[:, :, None] / 2.0 + half * x
        basis = _lagrange(nodes, self.stencil[piece], self.used[piece])
        values = np.asarray(function(nodes), dtype=float)
        contrib = np.einsum("rwq,rwq,rwqj->rwj", values, half * wq, basis)
        cols = np.minimum(self.first[piece][:, :, None] + np.arange(_STENCIL), self.t.size - 1)
        flat = (np.arange(lo.size)[:, None, None] * self.t.size + cols).ravel()
        out = np.bincount(flat, weights=contrib.ravel(), minlength=lo.size * self.t.size)
        return out.reshape(lo.size, self.t.size)

    def weights(self, values: np.ndarray) -> np.ndarray:
        """Weights on the grid for functions given by their ``values`` at :attr:`nodes`:
        shape (..., I, Q) -> (..., M+1)."""
        values = np.asarray(values, dtype=float)
        contrib = np.einsum("...iq,iq,iqj->...ij", values, self.node_weights, self.basis)
        lead = contrib.shape[:-2]
        rows = int(np.prod(lead))
        idx = np.minimum(self.first[:, None] + np.arange(_STENCIL)[None, :], self.t.size - 1)
        flat = (np.arange(rows)[:, None, None] * self.t.size + idx[None]).ravel()
        out = np.bincount(flat, weights=contrib.ravel(), minlength=rows * self.t.size)
        return out.reshape(lead + (self.t.size,))


def relevant_breaks(t: np.ndarray, breaks) -> np.ndarray:
    """The sorted unique ``breaks`` in ``[t_0, t_M)``: those that cut the data span (a break
    at ``t_M`` or later, or before ``t_0``, leaves every data point on one side)."""
    b = np.unique(np.asarray(breaks, dtype=float).ravel())
    if not np.all(np.isfinite(b)):
        raise ValueError("break times must be finite")
    return b[(b >= t[0]) & (b < t[-1])]


def segments(t: np.ndarray, breaks) -> np.ndarray:
    """Label of the smooth stretch of every time point: the number of ``breaks`` strictly
    before it (a point at a break is the left limit, in the stretch before)."""
    return np.searchsorted(relevant_breaks(t, breaks), t, side="left")
