"""Log-likelihood per experiment, for leave-one-experiment-out cross-validation.

A :class:`~pymc_wendy.WeakODELikelihood` has one log-likelihood value per draw, for its
whole data set: the weak residual's entries are correlated and each depends on every time
point, so there is no pointwise decomposition within a data set (``docs/pymc.md``). Separate
experiments *are* independent, so a model with several ``WeakODELikelihood`` terms has a
log-likelihood per experiment, and PSIS-LOO over experiments (``az.loo``, ``az.compare``)
estimates how well the model predicts a new experiment. :func:`experiment_log_likelihood`
gathers the terms' values into one variable with an ``experiment`` dimension.
"""

from __future__ import annotations

from collections.abc import Sequence

import pymc as pm
import xarray as xr

__all__ = ["experiment_log_likelihood"]


def experiment_log_likelihood(
    idata,
    model: pm.Model | None = None,
    *,
    var_names: Sequence[str] | None = None,
    name: str = "experiments",
    extend_inferencedata: bool = True,
) -> xr.DataArray:
    """The log-likelihood of each experiment per draw, as one variable for ``az.loo``.

    Parameters
    ----------
    idata : xarray.DataTree
        A posterior (from :func:`pymc_wendy.sample`, ``pm.sample``, ...). Terms already in
        its ``log_likelihood`` group are reused; the others are computed with
        :func:`pymc.compute_log_likelihood`.
    model : pm.Model, optional
        Defaults to the model on the context stack.
    var_names : sequence of str, optional
        The observed variables that are the experiments; default every
        :class:`~pymc_wendy.WeakODELikelihood` of the model, in the order they were created.
    name : str
        Name of the new variable.
    extend_inferencedata : bool
        Add the variable to ``idata``'s ``log_likelihood`` group (created if missing).

    Returns
    -------
    xarray.DataArray
        Dimensions ``(chain, draw, experiment)``, the experiment coordinate holding the
        variable names. Then ``az.loo(idata, var_name=name)`` leaves one experiment out at a
        time and ``az.compare`` ranks models that share the experiments.

    Raises
    ------
    ValueError
        Fewer than two experiments, or a name that is not an observed variable.
    """
    model = pm.modelcontext(model)
    observed = {rv.name: rv for rv in model.observed_RVs}
    if var_names is None:
        var_names = [n for n, rv in observed.items() if getattr(rv.tag, "wendy", None)]
    var_names = list(var_names)
    unknown = [n for n in var_names if n not in observed]
    if unknown:
        raise ValueError(f"{unknown} are not observed variables of the model ({list(observed)})")
    if len(var_names) < 2:
        raise ValueError(
            f"leave-one-experiment-out needs at least two experiments (observed terms); got "
            f"{var_names}"
        )
    have = xr.Dataset()
    if "log_likelihood" in idata.children:
        have = idata["log_likelihood"].to_dataset()
    missing = [n for n in var_names if n not in have.data_vars]
    if missing:
        new = pm.compute_log_likelihood(
            idata, var_names=missing, model=model, extend_inferencedata=False, progressbar=False
        )
        have = have.merge(new[missing]) if have.data_vars else new[missing]
    parts = []
    for n in var_names:
        part = have[n]
        if set(part.dims) != {"chain", "draw"}:
            raise ValueError(
                f"{n!r} has a pointwise log-likelihood (dims {part.dims}); experiments must be "
                "WeakODELikelihood terms (one value per draw)"
            )
        parts.append(part.transpose("chain", "draw"))
    stacked = xr.concat(parts, dim="experiment").assign_coords(experiment=var_names)
    stacked = stacked.transpose("chain", "draw", "experiment").rename(name)
    if extend_inferencedata:
        ds = have.assign({name: stacked})
        idata["log_likelihood"] = xr.DataTree(ds)
    return stacked
