"""Quadrature rules shared by the weak form and the baselines.

:func:`quadrature_weights` is the trapezoid rule on the data grid, the one WENDy integrates
with; :func:`gauss_legendre` is the composite Gauss-Legendre rule that the baselines
(``oc``, ``data2ld``) integrate their spline and test-function products with.
"""

from __future__ import annotations

import numpy as np
from scipy.special import roots_legendre

from pymc_wendy._validation import check_times

__all__ = ["gauss_legendre", "quadrature_weights"]


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
