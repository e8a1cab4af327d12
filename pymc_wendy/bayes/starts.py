"""Starting points for the weak fits behind a PyMC model, from the model's priors.

A model nonlinear in its parameters needs a start for WENDy-MLE, and a PyMC model has one
that ``pw.fit`` does not: its priors. :func:`screened_start` runs weak least squares from the
model's initial point and from :data:`SCREEN_STARTS` prior draws and keeps the best, as
``pw.fit`` screens a box. :func:`~pymc_wendy.initial_values` starts the MLE from it, and
:class:`~pymc_wendy.WeakODELikelihood` its short-series noise estimate (forward residuals at
the MLE), so neither needs a ``p0`` that the distribution has no argument for.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt

from pymc_wendy.estimators import weak_least_squares
from pymc_wendy.weak.kernels import WeakLikelihoodError

__all__ = ["SCREEN_STARTS", "initial_params", "screened_start"]

#: Prior draws of the parameters from which :func:`screened_start` also starts weak least
#: squares for a model nonlinear in its parameters.
SCREEN_STARTS = 16


def initial_params(model: pm.Model, p: pt.TensorVariable) -> np.ndarray:
    """The parameter vector at the model's initial point (the start for nonlinear models)."""
    [p_values] = model.replace_rvs_by_values([p])
    fn = pytensor.function(
        model.value_vars, p_values, on_unused_input="ignore", mode="FAST_COMPILE"
    )
    point = model.initial_point()
    return np.asarray(fn(*(point[v.name] for v in model.value_vars)), dtype=float)


def screened_start(lik, guess: np.ndarray, vector: pt.TensorVariable) -> np.ndarray:
    """Weak least squares from ``guess``, the model's initial point; for a model nonlinear in
    its parameters the best of fits from it and from :data:`SCREEN_STARTS` prior draws of
    the parameter vector (by the residual's sum of squares), as ``pw.fit`` screens a box.
    From the prior's centre alone, oral PK at 97 points stopped at a spurious minimum
    (``[0.11, 0.10, -3.9]``, NLL 109, against ``[2.17, 0.185, 13.8]``, NLL 68), and a
    volume of 0 (an N(0, 10) prior's centre) gave a division by zero."""
    if lik.base_model.is_linear_in_params:
        return weak_least_squares(lik, guess)
    try:
        with warnings.catch_warnings():
            # a prior without draws compiles in numba's object mode first, and says so
            warnings.filterwarnings("ignore", "Numba will use object mode", UserWarning)
            draws = pm.draw(vector, draws=SCREEN_STARTS, random_seed=0)
        draws = np.reshape(draws, (SCREEN_STARTS, -1))
    except (NotImplementedError, TypeError, ValueError):  # a prior PyMC cannot draw from
        draws = ()
    best, best_misfit = guess, np.inf
    for s in (guess, *draws):
        try:  # a start at a pole (V = 0) fails or is not finite: it is left out, silently
            with np.errstate(all="ignore"):
                p = weak_least_squares(lik, s)
                r = lik.residual(p)
        except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
            continue
        misfit = float(r @ r)
        if np.isfinite(misfit) and misfit < best_misfit:
            best, best_misfit = p, misfit
    return best
