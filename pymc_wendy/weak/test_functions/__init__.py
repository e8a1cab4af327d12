"""Test functions for the weak form: families, minimum-radius search, SVD reduction.

WENDy multiplies the ODE by smooth, compactly supported test functions and integrates by parts,
so the likelihood needs two matrices on the data grid ``t_0 < ... < t_M``::

    Phi[k, m]  = phi_k(t_m)  w_m        (K, M+1)
    dPhi[k, m] = phi_k'(t_m) w_m        (K, M+1)

with trapezoid weights ``w_m``.  The construction follows WENDy 2023 (sec. 2.3), WENDy-MLE
(Appendix A) and WENDy.jl (``src/wendyTestFunctions.jl``):

1. Bumps ``psi(s) = exp(-eta / (1 - s^2))`` on ``|s| < 1`` (``eta = 9``), or the shape of
   another local family (``family=...``), centred on data points, ``phi_i(t) = psi((t - c_i)
   / r)`` with the whole support ``[c_i - r, c_i + r]`` inside ``[t_0, t_M]``, rows scaled to
   unit norm (:mod:`.build`).
2. A minimum radius chosen from the data (:func:`select_min_radius`, :mod:`.radius`): the
   corner of an integration-error surrogate versus radius.
3. Radii ``{1, 2, 4, 8} x`` the minimum radius, all admissible centres, stacked into
   ``Phi_full`` / ``dPhi_full`` and reduced by an SVD to ``K`` orthonormal rows.

Modules: :mod:`.families` (the family interface, the registry and the built-in families),
:mod:`.quadrature` (trapezoid weights and the composite Gauss-Legendre rule the baselines
share), :mod:`.grid` (the time grid as the construction sees it), :mod:`.radius`,
:mod:`.build`, :mod:`.result` (:class:`TestFunctions`, :class:`RadiusSelection`,
:func:`from_matrices`), :mod:`.local` (un-reduced bumps of one radius stored as windows,
for the banded likelihood of long series) and :mod:`.accuracy` (the quadrature error of the
integration by parts and the rule for short series and higher orders).

On a uniform grid radii are whole numbers of grid spacings and everything reduces to the
WENDy.jl construction (the row normalisation cancels the constant weight ``dt``).  Non-uniform
(strictly increasing) grids are supported: the shapes are evaluated at the actual times, the
weights enter before normalisation, and the Fourier mode of the radius search is evaluated as
a trapezoid-rule integral (see :func:`select_min_radius`).

Deliberate differences from WENDy.jl, all at the level of a few test functions or one index:

- Supports may end exactly at ``t_0`` / ``t_M`` (the bump is zero there).  WENDy.jl keeps one
  extra grid point of margin on each side (two fewer shifts per radius); without it, its
  ``radiusMax = floor(M/2)`` is exactly the largest radius that fits.
- The error surrogate uses Fourier mode ``floor(M/s)`` as in WENDy 2023; WENDy.jl takes the
  1-based FFT column ``floor(M/s)``, i.e. mode ``floor(M/s) - 1``.
- The at most ``per_candidate`` test functions of a candidate radius are spread evenly over the
  admissible centres (WENDy.jl: fixed gap plus a few extra at the end); candidates that fit
  no test function at all are dropped.
- ``K_info`` uses all singular values (WENDy.jl bounds the tail when it uses a partial SVD).
"""

from pymc_wendy.weak.test_functions.accuracy import (
    MAX_MOMENT_ERROR,
    accurate_test_functions,
    moment_error,
)
from pymc_wendy.weak.test_functions.build import build_test_functions
from pymc_wendy.weak.test_functions.families import (
    BSplineFamily,
    BumpFamily,
    LocalFamily,
    SineFamily,
    SpanningFamily,
    TestFunctionFamily,
    bump,
    bump_derivative,
    get_family,
    list_families,
    register_family,
)
from pymc_wendy.weak.test_functions.local import LocalTestFunctions, build_local_test_functions
from pymc_wendy.weak.test_functions.quadrature import gauss_legendre, quadrature_weights
from pymc_wendy.weak.test_functions.radius import select_min_radius
from pymc_wendy.weak.test_functions.result import RadiusSelection, TestFunctions, from_matrices

__all__ = [
    "MAX_MOMENT_ERROR",
    "BSplineFamily",
    "BumpFamily",
    "LocalFamily",
    "LocalTestFunctions",
    "RadiusSelection",
    "SineFamily",
    "SpanningFamily",
    "TestFunctionFamily",
    "TestFunctions",
    "accurate_test_functions",
    "build_local_test_functions",
    "build_test_functions",
    "bump",
    "bump_derivative",
    "list_families",
    "from_matrices",
    "moment_error",
    "gauss_legendre",
    "get_family",
    "quadrature_weights",
    "register_family",
    "select_min_radius",
]
