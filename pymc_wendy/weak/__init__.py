"""The weak form: test functions, noise estimates, residual and covariance kernels, and the
likelihood objects (one data set, several experiments, bias-corrected) that every estimator,
backend and sampler reads through one interface (:mod:`pymc_wendy.weak.protocol`).
"""

from pymc_wendy.weak.joint import JointLikelihood
from pymc_wendy.weak.kernels import CovarianceError, NonFiniteError, WeakLikelihoodError
from pymc_wendy.weak.likelihood import ShortSeriesWarning, WeakLikelihood
from pymc_wendy.weak.noise import estimate_noise
from pymc_wendy.weak.test_functions import (
    TestFunctions,
    build_test_functions,
    get_family,
    list_families,
    register_family,
)

__all__ = [
    "CovarianceError",
    "JointLikelihood",
    "NonFiniteError",
    "TestFunctions",
    "ShortSeriesWarning",
    "WeakLikelihood",
    "WeakLikelihoodError",
    "build_test_functions",
    "estimate_noise",
    "get_family",
    "list_families",
    "register_family",
]
