"""Quadrature rules shared by the weak form and the baselines.

:func:`quadrature_weights` is the trapezoid rule on the data grid, the one WENDy integrates
with; :class:`ProductRule` integrates a known function against data on any grid (product
integration: the data replaced by their local cubic interpolant), the rule for non-uniform
grids and boundary test functions; :func:`gauss_legendre` is the composite Gauss-Legendre
rule that the baselines (``oc``, ``data2ld``) integrate their spline and test-function
products with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import roots_legendre

from pymc_wendy._validation import check_times

__all__ = ["ProductRule", "gauss_legendre", "quadrature_weights"]


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


@dataclass(frozen=True)
class ProductRule:
    """Weights ``w`` with ``sum_m w_m y(t_m) ~ int g(t) y(t) dt`` for a known smooth ``g``.

    The data ``y`` are replaced by their piecewise cubic Lagrange interpolant (on interval
    ``i``, the points ``i-1 .. i+2``, shifted inwards at the ends) and the product with ``g``
    is integrated with 10 Gauss-Legendre nodes per interval: an ``O(h^4)`` rule on any grid,
    whatever ``g`` does between the data points. The trapezoid rule is spectrally accurate
    for a smooth compactly supported integrand on a *uniform* grid, but only second order on
    a non-uniform one or for an integrand that does not vanish at an end.

    Build it with :meth:`on`; :attr:`nodes` are where ``g`` is evaluated (shape
    (intervals, nodes)), :meth:`weights` turns those values into weights on the grid.
    """

    t: np.ndarray
    nodes: np.ndarray  # (I, Q) Gauss-Legendre nodes per interval
    node_weights: np.ndarray  # (I, Q)
    basis: np.ndarray  # (I, Q, 4) the interval's Lagrange basis at its nodes
    first: np.ndarray  # (I,) first grid index of each interval's stencil

    @classmethod
    def on(cls, t: np.ndarray) -> ProductRule:
        """The rule on the strictly increasing grid ``t`` (at least four points)."""
        t = np.asarray(t, dtype=float)
        M1 = t.size
        if M1 < _STENCIL:
            raise ValueError(f"product integration needs at least {_STENCIL} time points; got {M1}")
        x, wq = roots_legendre(_NODES)
        lo, hi = t[:-1], t[1:]
        half = (hi - lo) / 2.0
        nodes = (lo + hi)[:, None] / 2.0 + half[:, None] * x[None, :]
        first = np.clip(np.arange(M1 - 1) - 1, 0, M1 - _STENCIL)
        stencil = t[first[:, None] + np.arange(_STENCIL)[None, :]]  # (I, 4)
        basis = np.ones(nodes.shape + (_STENCIL,))
        for j in range(_STENCIL):
            for i in range(_STENCIL):
                if i != j:
                    basis[:, :, j] *= (nodes - stencil[:, i, None]) / (
                        stencil[:, j, None] - stencil[:, i, None]
                    )
        return cls(t, nodes, half[:, None] * wq[None, :], basis, first)

    def local_weights(self, lo: np.ndarray, hi: np.ndarray, function) -> np.ndarray:
        """Weights for ``R`` functions supported on ``[lo_r, hi_r]``, shape (R, M+1).

        ``function(nodes)`` receives the nodes of the intervals each support touches, shape
        (R, W, Q), and returns the functions' values there; only those intervals are
        evaluated, so the cost grows with the supports' length, not the grid's.
        """
        n_int = self.first.size
        i0 = np.clip(np.searchsorted(self.t, lo, side="right") - 1, 0, n_int - 1)
        i1 = np.clip(np.searchsorted(self.t, hi, side="left"), i0 + 1, n_int)
        width = int(np.max(i1 - i0))
        idx = i0[:, None] + np.arange(width)[None, :]  # (R, W)
        valid = idx < i1[:, None]
        idx = np.minimum(idx, n_int - 1)
        values = np.asarray(function(self.nodes[idx]), dtype=float) * valid[:, :, None]
        contrib = np.einsum("rwq,rwq,rwqj->rwj", values, self.node_weights[idx], self.basis[idx])
        cols = self.first[idx][:, :, None] + np.arange(_STENCIL)  # (R, W, 4)
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
        idx = self.first[:, None] + np.arange(_STENCIL)[None, :]  # (I, 4)
        flat = (np.arange(rows)[:, None, None] * self.t.size + idx[None]).ravel()
        out = np.bincount(flat, weights=contrib.ravel(), minlength=rows * self.t.size)
        return out.reshape(lead + (self.t.size,))
