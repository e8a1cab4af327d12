"""pymc-wendy: weak-form ODE parameter inference (WENDy) for PyMC.

The data flow is one way, and so are the packages:

* :mod:`pymc_wendy.model`: an :class:`ODEModel` (symbolic right-hand side, inputs, generated
  code) and forward solves (:func:`simulate`, :func:`solve`);
* :mod:`pymc_wendy.weak`: test functions (:func:`build_test_functions`), noise estimates,
  the residual/covariance kernels and the likelihood objects (:class:`WeakLikelihood`,
  :class:`JointLikelihood`, the bias-corrected objective);
* :mod:`pymc_wendy.backends`: the pytensor Op (:class:`WeakLogLikelihoodOp`) and its numba
  and JAX kernels;
* :mod:`pymc_wendy.estimators`: :func:`fit` and the estimators, with their results;
* :mod:`pymc_wendy.bayes`: the PyMC distribution (:class:`WeakODELikelihood`), sampling,
  tempering;
* :mod:`pymc_wendy.problems` and :mod:`pymc_wendy.studies`: the benchmark systems, coverage
  studies and plots.

``docs/architecture.md`` describes the layers and where new code goes.

The names are imported on first use (:func:`__getattr__`): ``import pymc_wendy`` itself, and
the command line's start-up (``pymc_wendy.cli``), do not import pymc, pytensor or numba.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for static tools; at run time __getattr__ below makes the same imports
    from pymc_wendy.backends import WeakLogLikelihoodOp, weak_loglik
    from pymc_wendy.bayes import (
        DivergenceWarning,
        SFTWarning,
        WeakODELikelihood,
        WeakPosteriorWarning,
        check_weak,
        compare,
        compute_log_likelihood,
        experiment_log_likelihood,
        forward_correction,
        forward_model,
        hierarchical_normal,
        initial_values,
        laplace,
        sample,
        sample_sft,
    )
    from pymc_wendy.estimators import (
        BiasCorrection,
        FitResult,
        FitWarning,
        estimate_initial_state,
        fit,
        weak_least_squares,
        wendy_mle,
    )
    from pymc_wendy.model import (
        Combined,
        Doses,
        Input,
        InputOutput,
        LogNormal,
        MissingDataWarning,
        NegativeBinomial,
        Normal,
        ODEDefinitionError,
        ODEModel,
        Poisson,
        Proportional,
        SimulatedData,
        SimulationError,
        derivative,
        input_output,
        simulate,
        solve,
    )
    from pymc_wendy.problems import PROBLEMS, Problem, get_problem, list_problems
    from pymc_wendy.studies import (
        coverage,
        open_coverage,
        plot_intervals,
        plot_predictive,
        plot_study,
        run_coverage,
    )
    from pymc_wendy.weak import (
        CovarianceError,
        JointLikelihood,
        NonFiniteError,
        ShortSeriesWarning,
        TestFunctions,
        WeakLikelihood,
        WeakLikelihoodError,
        bias,
        build_test_functions,
        estimate_noise,
    )

__version__ = "0.1.0.dev0"

__all__ = [
    "PROBLEMS",
    "BiasCorrection",
    "Combined",
    "CovarianceError",
    "DivergenceWarning",
    "Doses",
    "FitResult",
    "FitWarning",
    "Input",
    "InputOutput",
    "JointLikelihood",
    "LogNormal",
    "MissingDataWarning",
    "NegativeBinomial",
    "NonFiniteError",
    "Normal",
    "ODEDefinitionError",
    "ODEModel",
    "Poisson",
    "Problem",
    "Proportional",
    "SFTWarning",
    "ShortSeriesWarning",
    "SimulatedData",
    "SimulationError",
    "TestFunctions",
    "WeakLikelihood",
    "WeakLikelihoodError",
    "WeakLogLikelihoodOp",
    "WeakODELikelihood",
    "WeakPosteriorWarning",
    "bias",
    "build_test_functions",
    "check_weak",
    "compare",
    "compute_log_likelihood",
    "coverage",
    "derivative",
    "estimate_initial_state",
    "estimate_noise",
    "estimators",
    "experiment_log_likelihood",
    "fit",
    "forward_correction",
    "forward_model",
    "get_problem",
    "hierarchical_normal",
    "initial_values",
    "input_output",
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


#: the public names by the subpackage that defines them (``estimators`` is a subpackage)
_EXPORTS: dict[str, tuple[str, ...]] = {
    "pymc_wendy.backends": ("WeakLogLikelihoodOp", "weak_loglik"),
    "pymc_wendy.bayes": (
        "DivergenceWarning", "SFTWarning", "WeakODELikelihood", "WeakPosteriorWarning",
        "check_weak", "compare", "compute_log_likelihood",
        "experiment_log_likelihood", "forward_correction", "forward_model", "hierarchical_normal",
        "initial_values", "laplace", "sample", "sample_sft",
    ),
    "pymc_wendy.estimators": (
        "BiasCorrection", "FitResult", "FitWarning", "estimate_initial_state", "fit",
        "weak_least_squares", "wendy_mle",
    ),
    "pymc_wendy.model": (
        "Combined", "Doses", "Input", "InputOutput", "LogNormal", "MissingDataWarning",
        "NegativeBinomial", "Normal", "ODEDefinitionError", "ODEModel", "Poisson",
        "Proportional", "SimulatedData", "SimulationError", "derivative", "input_output",
        "simulate", "solve",
    ),
    "pymc_wendy.problems": ("PROBLEMS", "Problem", "get_problem", "list_problems"),
    "pymc_wendy.studies": (
        "coverage", "open_coverage", "plot_intervals", "plot_predictive", "plot_study",
        "run_coverage",
    ),
    "pymc_wendy.weak": (
        "CovarianceError", "JointLikelihood", "NonFiniteError", "ShortSeriesWarning",
        "TestFunctions", "WeakLikelihood", "WeakLikelihoodError", "bias",
        "build_test_functions", "estimate_noise",
    ),
}  # fmt: skip


def _load() -> None:
    """Import the public API into this module's namespace (once, on the first name asked for).

    Every subpackage of :data:`_EXPORTS` at once, so that each one (``pymc_wendy.weak``,
    ``pymc_wendy.estimators`` ...) is an attribute as it was when this module imported them
    eagerly.
    """
    for module, names in _EXPORTS.items():
        imported = importlib.import_module(module)
        globals().update({name: getattr(imported, name) for name in names})


def __getattr__(name: str):
    # PEP 562: ``import pymc_wendy`` (and ``import pymc_wendy.cli``, the command line's
    # start-up) no longer pays 3-4 s for pymc, pytensor, numba and arviz; the first public name
    # asked for loads them all. Dunder probes (copy, pickle, inspect) do not trigger the load.
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load()
    try:
        return globals()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    # Subpackages are importable (pymc_wendy.weak.kernels, ...) but are not the public API:
    # dir() lists exactly what __all__ promises (as scipy does).
    return sorted(__all__)
