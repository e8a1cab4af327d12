"""Studies over many simulated data sets: coverage runs, their store and summaries, plots."""

from pymc_wendy.studies import coverage
from pymc_wendy.studies.coverage import open_coverage, run_coverage
from pymc_wendy.studies.plots import plot_intervals, plot_predictive, plot_study

__all__ = [
    "coverage",
    "open_coverage",
    "plot_intervals",
    "plot_predictive",
    "plot_study",
    "run_coverage",
]
