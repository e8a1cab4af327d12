"""pymc-wendy: weak-form ODE parameter inference (WENDy) for PyMC.

The data flow is one way: an :class:`ODEModel` and data -> test functions
(:func:`build_test_functions`) -> likelihood kernels -> :class:`WeakLikelihood`
(value, gradient, Hessian, estimator covariances) -> the pytensor Op
(:class:`WeakLogLikelihoodOp`) -> the PyMC distribution (:class:`WeakODELikelihood`) ->
estimators (:func:`fit`) and samplers.
"""

from pymc_wendy import bias, coverage
from pymc_wendy.comparison import experiment_log_likelihood
from pymc_wendy.coverage import open_coverage, run_coverage
from pymc_wendy.distribution import WeakODELikelihood
from pymc_wendy.estimators import estimate_initial_state, fit, weak_least_squares, wendy_mle
from pymc_wendy.experiments import JointLikelihood
from pymc_wendy.kernels import CovarianceError, NonFiniteError, WeakLikelihoodError
from pymc_wendy.likelihood import WeakLikelihood
from pymc_wendy.noise import estimate_noise
from pymc_wendy.ode import ODEDefinitionError, ODEModel
from pymc_wendy.op import WeakLogLikelihoodOp, weak_loglik
from pymc_wendy.plots import plot_intervals, plot_predictive, plot_study
from pymc_wendy.problems import (
    PROBLEMS,
    Problem,
    SimulatedData,
    SimulationError,
    get_problem,
    list_problems,
    simulate,
    solve,
)
from pymc_wendy.results import BiasCorrection, FitResult, FitWarning
from pymc_wendy.sampling import initial_values, laplace, sample
from pymc_wendy.tempering import SFTWarning, sample_sft
from pymc_wendy.test_functions import TestFunctions, build_test_functions

__version__ = "0.1.0.dev0"

__all__ = [
    "PROBLEMS",
    "BiasCorrection",
    "CovarianceError",
    "FitResult",
    "FitWarning",
    "JointLikelihood",
    "NonFiniteError",
    "ODEDefinitionError",
    "ODEModel",
    "Problem",
    "SFTWarning",
    "SimulatedData",
    "SimulationError",
    "TestFunctions",
    "WeakLikelihood",
    "WeakLikelihoodError",
    "WeakLogLikelihoodOp",
    "WeakODELikelihood",
    "bias",
    "build_test_functions",
    "coverage",
    "estimate_initial_state",
    "estimate_noise",
    "experiment_log_likelihood",
    "fit",
    "get_problem",
    "initial_values",
    "laplace",
    "list_problems",
    "open_coverage",
    "plot_intervals",
    "plot_predictive",
    "plot_study",
    "run_coverage",
    "sample",
    "sample_sft",
    "simulate",
    "solve",
    "weak_least_squares",
    "weak_loglik",
    "wendy_mle",
]
