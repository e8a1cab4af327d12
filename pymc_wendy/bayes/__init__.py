"""Bayesian inference with the weak likelihood: the PyMC distribution, sampling defaults and
whitening, Laplace approximations, tempered replica-exchange chains, model comparison, and the
forward-solve correction of a weak posterior and the check that says when it is needed."""

from pymc_wendy.bayes.check import WeakPosteriorWarning, check_weak
from pymc_wendy.bayes.comparison import (
    compare,
    compute_log_likelihood,
    experiment_log_likelihood,
)
from pymc_wendy.bayes.correction import forward_correction
from pymc_wendy.bayes.distribution import WeakODELikelihood
from pymc_wendy.bayes.divergences import DivergenceWarning
from pymc_wendy.bayes.forward import forward_model
from pymc_wendy.bayes.hierarchy import hierarchical_normal
from pymc_wendy.bayes.sampling import initial_values, laplace, sample
from pymc_wendy.bayes.tempering import SFTWarning, sample_sft

__all__ = [
    "DivergenceWarning",
    "SFTWarning",
    "WeakODELikelihood",
    "WeakPosteriorWarning",
    "check_weak",
    "compare",
    "compute_log_likelihood",
    "experiment_log_likelihood",
    "forward_correction",
    "forward_model",
    "hierarchical_normal",
    "initial_values",
    "laplace",
    "sample",
    "sample_sft",
]
