r"""Test functions that do not vanish at a known initial time, for a known initial state.

The interior test functions vanish at both ends of their supports, so the weak form never sees
``u(t0)``. A test function with ``phi(t0) != 0`` and ``phi(t0 + r) = 0`` keeps a boundary term
after the integration by parts::

    int phi f(u) dt + int phi' u dt + phi(t0) u(t0) = 0,

which is where a known initial state enters. Here ``phi`` is the right half of the bump
(:func:`~pymc_wendy.weak.test_functions.families.bump`) centred at ``t0``: ``phi'(t0) = 0``
and every derivative vanishes at ``t0 + r``.

Quadrature. The trapezoid rule is spectrally accurate for the interior functions (their
integrands vanish with all derivatives at both ends) but only second order for an integrand
that does not vanish at ``t0``. The boundary rows are integrated by *product integration*
instead: the integrand's data part (``f(u(t))`` or ``u(t)``, known at the grid points) is
replaced by its local cubic interpolant (four consecutive grid points per interval) and the
product with the known ``phi`` (or ``phi'``) is integrated exactly (Gauss-Legendre, 10 nodes
per interval). The error is ``O(h^4)`` on any grid, uniform or not, including an initial time
before the first observation.
"""

from __future__ import annotations

import numpy as np

from pymc_wendy.weak.test_functions.families import bump, bump_derivative
from pymc_wendy.weak.test_functions.quadrature import ProductRule, relevant_breaks
from pymc_wendy.weak.test_functions.result import TestFunctions

__all__ = ["product_weights", "with_boundary"]


def product_weights(t: np.ndarray, g, breaks=(), kinks=()) -> np.ndarray:
    """:class:`~.quadrature.ProductRule` weights on ``t`` for the function ``g(times)``, the
    data jumping at ``breaks`` and kinked at ``kinks``."""
    rule = ProductRule.on(t, breaks, kinks)
    return rule.weights(g(rule.nodes))


def with_boundary(
    tf: TestFunctions,
    t: np.ndarray,
    n_prepended: int,
    radii: np.ndarray,
    eta: float = 9.0,
    breaks=None,
    kinks=None,
) -> TestFunctions:
    """``tf`` on the grid ``t`` (its first ``n_prepended`` points are new columns, where the
    interior functions vanish) plus one boundary row per radius in ``radii``.

    The boundary rows are the half bumps ``phi(t) = psi((t - t_0) / r)`` on ``[t_0, t_0 + r]``
    with product-integration weights (module doc), scaled to unit norm like the interior rows.
    The boundary term ``phi(t_0) u(t_0)`` is folded into the first column of ``dphi``: the
    first data row is the known initial state, which the covariance must then treat as exact
    (a zero noise weight, :class:`~pymc_wendy.weak.form.WeakForm`).

    ``breaks`` and ``kinks`` are where the data or their derivative jump (bolus doses;
    default ``tf``'s), on the new grid.

    Returns
    -------
    TestFunctions
        :attr:`TestFunctions.n_boundary` counts the boundary rows (the last ones); their
        analytic form (for integrals of known inputs) is in ``boundary_widths`` and
        ``boundary_scales``.
    """
    t = np.asarray(t, dtype=float)
    t0, span = t[0], t[-1] - t[0]
    breaks = relevant_breaks(t, tf.breaks if breaks is None else breaks)
    kinks = relevant_breaks(t, tf.kinks if kinks is None else kinks)
    radii = np.asarray(radii, dtype=float)
    if radii.size == 0 or np.any(radii <= 0) or np.any(radii > span):
        raise ValueError(
            f"boundary test functions need radii in (0, {span:g}] (the time span); got {radii}"
        )
    pad = np.zeros((tf.K, n_prepended))
    phi = [np.hstack([pad, tf.phi])]
    dphi = [np.hstack([pad, tf.dphi])]
    scales = []
    for r in radii:
        w_phi = product_weights(t, lambda s, r=r: bump((s - t0) / r, eta), breaks, kinks)
        w_dphi = product_weights(
            t, lambda s, r=r: bump_derivative((s - t0) / r, eta) / r, breaks, kinks
        )
        norm = np.linalg.norm(w_phi)
        w_dphi[0] += bump(0.0, eta)  # the boundary term phi(t0) u(t0)
        phi.append(w_phi[None, :] / norm)
        dphi.append(w_dphi[None, :] / norm)
        scales.append(1.0 / norm)
    return TestFunctions(
        phi=np.vstack(phi),
        dphi=np.vstack(dphi),
        t=t,
        radii=np.unique(np.concatenate([tf.radii, radii])),
        min_radius=tf.min_radius,
        singular_values=tf.singular_values,
        selection=tf.selection,
        coefficients=tf.coefficients,
        centres=tf.centres,
        widths=tf.widths,
        scales=tf.scales,
        eta=eta,
        family=tf.family,
        n_boundary=radii.size,
        quadrature=tf.quadrature,  # of the interior rows; the boundary rows' is the product rule
        boundary_widths=radii,
        boundary_scales=np.array(scales),
        breaks=breaks,
        kinks=kinks,
    )
