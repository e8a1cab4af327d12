"""pymc-wendy: weak-form ODE parameter inference (WENDy) for PyMC.

The data flow is one way: an :class:`ODEModel` and data -> test functions
(:func:`build_test_functions`) -> likelihood kernels -> :class:`WeakLikelihood`
(value, gradient, Hessian, estimator covariances) -> estimators and samplers.
"""

from pymc_wendy.kernels import CovarianceError, NonFiniteError, WeakLikelihoodError
from pymc_wendy.likelihood import WeakLikelihood
from pymc_wendy.noise import estimate_noise
from pymc_wendy.ode import ODEDefinitionError, ODEModel
from pymc_wendy.problems import (
    PROBLEMS,
    Problem,
    SimulatedData,
    get_problem,
    list_problems,
    simulate,
)
from pymc_wendy.test_functions import TestFunctions, build_test_functions

__version__ = "0.1.0.dev0"

__all__ = [
    "PROBLEMS",
    "CovarianceError",
    "NonFiniteError",
    "ODEDefinitionError",
    "ODEModel",
    "Problem",
    "SimulatedData",
    "TestFunctions",
    "WeakLikelihood",
    "WeakLikelihoodError",
    "build_test_functions",
    "estimate_noise",
    "get_problem",
    "list_problems",
    "simulate",
]
