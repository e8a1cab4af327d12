"""The benchmark ODE systems of the WENDy papers (:mod:`~pymc_wendy.problems.catalogue`) and
real data sets (:mod:`~pymc_wendy.problems.datasets`)."""

from pymc_wendy.problems.catalogue import PROBLEMS, Problem, get_problem, list_problems
from pymc_wendy.problems.datasets import boarding_school, lynx_hare, theophylline

__all__ = [
    "PROBLEMS",
    "Problem",
    "boarding_school",
    "get_problem",
    "list_problems",
    "lynx_hare",
    "theophylline",
]
