"""How accurately the data grid integrates test functions, and the most of them it allows.

The weak form's integration by parts is exact for integrals; on the data grid it is a
quadrature, whose error grows as supports shrink to a few grid spacings and with the order of
the derivatives moved onto the test functions. :func:`moment_error` measures it;
:func:`accurate_test_functions` picks the narrowest radii that keep it small while giving
enough test functions: the rule for models of order > 1 and for short series.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_wendy.weak.test_functions.build import build_test_functions
from pymc_wendy.weak.test_functions.grid import make_grid
from pymc_wendy.weak.test_functions.quadrature import quadrature_weights
from pymc_wendy.weak.test_functions.result import TestFunctions

__all__ = ["MAX_MOMENT_ERROR", "accurate_test_functions", "moment_error"]

#: Relative error of the discrete integration by parts above which test functions count as
#: too narrow for the grid (see :func:`moment_error`).
MAX_MOMENT_ERROR = 0.02


def moment_error(test_functions: TestFunctions, order: int) -> float:
    """How well the data grid integrates the test functions' ``order``-th derivatives.

    For every shape ``psi((t - c) / r)`` behind the test functions (the bump by default),
    the exact identity ``int psi^(q)(s) s^q / q! dt = (-1)^q int psi(s) dt`` (``q``
    integrations by parts, ``s = (t - c) / r``) is evaluated with the trapezoid weights of
    the grid; the result is the largest error relative to ``int psi``. The trapezoid rule is
    spectrally accurate for the smooth bumps, but a ``q``-th derivative oscillates ``q``
    times across the support, so narrow bumps on a coarse grid integrate badly: for ``q = 2``
    the error is 0.04 at 4 grid spacings per radius, 3e-4 at 8; for ``q = 3``, 0.2 at 4 and
    5e-4 at 10 (for ``q = 1``, 2e-3 at 4, 0.02 at 3 and 0.28 at 2).
    """
    order = int(order)
    tf = test_functions
    if order < 1 or tf.centres is None or tf.t is None or tf.family is None:
        return 0.0
    if tf.quadrature == "product":
        # the rule integrates the bump exactly against the cubic interpolant of s^q (exact
        # for q <= 3): what it gets wrong is only the data's interpolation
        rule = tf.product_rule
        s = (rule.nodes[None] - tf.centres[:, None, None]) / tf.widths[:, None, None]
        ones = np.ones(tf.t.size)
        sq = ((tf.t[None, :] - tf.centres[:, None]) / tf.widths[:, None]) ** order
        mass = rule.weights(tf.family.shape(s, 0)) @ ones
        moment = np.sum(rule.weights(tf.family.shape(s, order)) * sq, axis=1)
        moment /= math.factorial(order)
        return float(np.max(np.abs(moment - (-1) ** order * mass) / mass))
    w = quadrature_weights(tf.t)
    s = (tf.t[None, :] - tf.centres[:, None]) / tf.widths[:, None]
    mass = tf.family.shape(s, 0) @ w
    moment = (tf.family.shape(s, order) * s**order) @ w / math.factorial(order)
    return float(np.max(np.abs(moment - (-1) ** order * mass) / mass))


def accurate_test_functions(
    t: np.ndarray, X: np.ndarray, order: int, wanted: int, **where
) -> TestFunctions:
    """The narrowest accurate test functions that give ``wanted`` of them, or the most.

    Radii ``r, 2r, 4r`` with ``r`` a whole number of grid spacings (the largest spacing on a
    non-uniform grid), tried from ``4 + 2 order`` spacings (where ``order``-th derivatives
    integrate to about 3e-4) down to 3, stopping where :func:`moment_error` exceeds
    :data:`MAX_MOMENT_ERROR`. Returns the first with at least ``wanted`` test functions,
    else the one with the most. ``where``: the data's ``breaks`` and ``kinks``
    (:func:`build_test_functions`).

    Raises
    ------
    ValueError
        When no radius of 3 or more spacings fits on the grid accurately.
    """
    h = make_grid(t, **where).unit
    best = None
    for points in range(4 + 2 * order, 2, -1):
        try:
            tf = build_test_functions(
                t, X, min_radius=points * h, multipliers=(1, 2, 4), dense_radii=True, **where
            )
        except ValueError:  # the radius does not fit on the grid
            continue
        if moment_error(tf, order) > MAX_MOMENT_ERROR:
            break
        if best is None or tf.K > best.K:
            best = tf
        if tf.K >= wanted:
            return tf
    if best is None:
        raise ValueError(
            f"{t.size} time points are too few for test functions whose derivatives of "
            f"order {order} the grid integrates accurately"
        )
    return best
