"""The benchmark ODE systems of the WENDy papers (:mod:`~pymc_wendy.problems.catalogue`)."""

from pymc_wendy.problems.catalogue import PROBLEMS, Problem, get_problem, list_problems

__all__ = ["PROBLEMS", "Problem", "get_problem", "list_problems"]
