"""Whitened sampling: an affine reparameterisation of a model from its Laplace approximation.

NUTS adapts its mass matrix during tuning, starting from the identity. The weak posteriors of
ODE parameters are far from that: scales that differ by orders of magnitude, and strong
correlations between the parameters of one equation. Most of a plain run's gradient
evaluations are tuning (``docs/performance.md``). But the posterior's mode and curvature are
cheap to get before sampling starts: the WENDy-MLE is a good start for the mode, and the
Hessian of the log-density there is ``2 n`` gradient calls for ``n`` unconstrained coordinates.

:func:`whitened_model` writes the model's unconstrained coordinates ``x`` (PyMC's value
variables, all of them in one vector) as ``x = m + L z`` with ``m`` the posterior mode and
``L L^T`` the inverse Hessian there, and returns a new model in ``z`` whose log-density is the
original one at ``m + L z`` (the Jacobian ``|det L|`` is constant and left out). In ``z`` the
posterior is close to a standard normal, which is where NUTS's initial unit mass matrix and
step size are right; the original free variables and deterministics are deterministics of the
new model, under their own names and dims, so the trace is in the user's parameters.

:func:`pymc_wendy.sample` does all this (``whiten="auto"``); by hand, with ``point`` the
starting values on the unconstrained scale::

    mode, H, _ = posterior_mode(model, point)
    wmodel, L = whitened_model(model, mode, H)
    idata = to_model_trace(pm.sample(model=wmodel, tune=300), model)

Why a new model and not a value transform per variable
(``pymc.model.transform.conditioning.change_value_transforms``): a transform acts on one
variable, but the correlations that matter are often across variables (the parameters given
as a list of scalars; a parameter vector against the noise levels). nutpie takes no initial
mass matrix (0.16), which would have been the other way in.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pymc.backends.arviz import (
    coords_and_dims_for_inferencedata,
    dict_to_dataset,
    find_constants,
    find_observations,
)
from pymc.blocking import DictToArrayBijection, RaveledVars
from pytensor.graph.replace import graph_replace
from scipy import optimize

from pymc_wendy._threads import one_blas_thread

__all__ = ["NotPositiveDefinite", "posterior_mode", "to_model_trace", "whitened_model"]

#: the whitened coordinates' variable in the new model (dropped from the returned trace)
WHITENED = "__whitened"


class NotPositiveDefinite(ValueError):
    """The negative log-density's Hessian at the optimum has a non-positive eigenvalue."""


def posterior_mode(
    model: pm.Model, point: dict, rel_step: float = 1e-5
) -> tuple[RaveledVars, np.ndarray, optimize.OptimizeResult]:
    """Mode of the log-density on the unconstrained scale and the negative Hessian there.

    ``point`` maps every value variable's name to its starting value (unconstrained). The
    mode is found by L-BFGS-B on the analytic gradient; the Hessian by central differences
    of the gradient (``2 n`` calls for ``n`` coordinates), symmetrised.

    Returns
    -------
    mode : RaveledVars
        The mode, raveled, with the layout of the value variables.
    H : ndarray
        Negative Hessian of the log-density at the mode.
    result : OptimizeResult
        The optimiser's result.

    Raises
    ------
    NotPositiveDefinite
        ``H`` is not positive definite (the optimiser stopped on a ridge or a saddle).
    """
    x0 = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars})
    logp_dlogp = model.logp_dlogp_function(ravel_inputs=True)
    logp_dlogp.set_extra_values({})

    def neg(x):
        value, grad = logp_dlogp(x)
        return -float(value), -np.asarray(grad, dtype=float)

    with one_blas_thread():
        res = optimize.minimize(neg, x0.data, jac=True, method="L-BFGS-B")
        x = res.x
        n = x.size
        h = rel_step * np.maximum(1.0, np.abs(x))
        H = np.empty((n, n))
        for i in range(n):  # n is the number of parameters: a handful of gradient calls
            e = np.zeros(n)
            e[i] = h[i]
            H[:, i] = (neg(x + e)[1] - neg(x - e)[1]) / (2 * h[i])
    H = 0.5 * (H + H.T)
    if not (np.all(np.isfinite(H)) and _is_positive_definite(H)):
        raise NotPositiveDefinite(
            "the negative log-posterior's Hessian at the optimum is not positive definite "
            f"(optimiser: {res.message})"
        )
    return RaveledVars(x, x0.point_map_info), H, res


def _is_positive_definite(H: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        return False
    return True


def whitened_model(
    model: pm.Model, mode: RaveledVars, H: np.ndarray
) -> tuple[pm.Model, np.ndarray]:
    """The model in whitened coordinates ``z``, with ``x = mode + L z``, ``L L^T = H^{-1}``.

    Parameters
    ----------
    model : pm.Model
        The model to reparameterise.
    mode : RaveledVars
        Centre ``m`` on the unconstrained scale, with the value variables' layout (e.g. from
        :func:`posterior_mode`).
    H : ndarray
        Positive definite ``n x n`` matrix, the negative Hessian of the log-density at ``m``.

    Returns
    -------
    pm.Model
        A model with one free variable (:data:`WHITENED`, flat, length ``n``, initial value
        0, i.e. ``x = m``), a potential holding the original log-density, and the original
        free variables and deterministics as deterministics with their names and dims.
    L : ndarray
        The factor, lower triangular.
    """
    # H = C C^T  =>  L = C^{-T} has L L^T = H^{-1}; z = C^T (x - m)
    C = np.linalg.cholesky(H)
    L = np.linalg.solve(C.T, np.eye(H.shape[0]))
    logp = model.logp()
    names = [v.name for v in model.free_RVs + model.deterministics]
    outputs = model.replace_rvs_by_values([model[name] for name in names])
    # model=None: not a sub-model of whatever model context the caller is in
    with pm.Model(coords=model.coords, model=None) as new:
        z = pm.Flat(WHITENED, shape=H.shape[0])
        # L z as a sum of products, not a Dot: numba compiles a Dot's BLAS call for the
        # value and again for the gradient, about 2 s each with a cold cache
        x = pt.as_tensor(mode.data) + (pt.as_tensor(L) * z[None, :]).sum(axis=1)
        pieces, start = {}, 0
        for name, shape, size, dtype in mode.point_map_info:
            pieces[name] = x[start : start + size].reshape(shape).astype(dtype)
            start += size
        replace = {v: pieces[v.name] for v in model.value_vars}
        pm.Potential("__logp", graph_replace(logp, replace, strict=False))
        for name, out in zip(names, graph_replace(outputs, replace, strict=False), strict=True):
            pm.Deterministic(name, out, dims=model.named_vars_to_dims.get(name))
    return new, L


def to_model_trace(idata: xr.DataTree, model: pm.Model):
    """The trace of a whitened model's run as if ``model`` had been sampled: the whitened
    coordinates dropped, the observed and constant data of ``model`` attached."""
    for group in ("posterior", "warmup_posterior"):
        if group in idata.children:
            idata[group] = (
                idata[group]
                .to_dataset()
                .drop_vars([WHITENED, f"{WHITENED}_dim_0"], errors="ignore")
            )
    coords, dims = coords_and_dims_for_inferencedata(model)
    for group, values in (
        ("observed_data", find_observations(model)),
        ("constant_data", find_constants(model)),
    ):
        idata[group] = xr.DataTree(
            dict_to_dataset(values, inference_library=pm, coords=coords, dims=dims, sample_dims=[])
        )
    return idata
