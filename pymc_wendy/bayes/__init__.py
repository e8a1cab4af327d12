"""Bayesian inference with the weak likelihood: the PyMC distribution, sampling defaults and
whitening, Laplace approximations, tempered replica-exchange chains, model comparison."""

from pymc_wendy.bayes.comparison import experiment_log_likelihood
from pymc_wendy.bayes.distribution import WeakODELikelihood
from pymc_wendy.bayes.sampling import initial_values, laplace, sample
from pymc_wendy.bayes.tempering import SFTWarning, sample_sft

__all__ = [
    "SFTWarning",
    "WeakODELikelihood",
    "experiment_log_likelihood",
    "initial_values",
    "laplace",
    "sample",
    "sample_sft",
]
