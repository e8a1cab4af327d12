"""Pointwise log-likelihood of weak likelihoods, for PSIS-LOO, WAIC and model comparison.

The weak likelihood of one data set is a Gaussian density of the weak residual ``r`` (K D
entries, covariance ``S(p)``). It does not factorise: ``S(p)`` is not diagonal. PSIS-LOO needs
a value per "observation" whose leave-one-out predictive density it can estimate, and for a
non-factorised normal model that value is the density of one entry given all the others,
``log p(r_i | r_-i, p)``, which has a closed form (Buerkner, Gabry and Vehtari, 2021,
*Computational Statistics* 36, "Efficient leave-one-out cross-validation for Bayesian
non-factorized normal and Student-t models"): :func:`compute_log_likelihood` stores these
values, one per test function and state, and ``az.loo`` / ``az.waic`` / ``az.compare`` read
them unchanged. What one observation is, when models compare and when the Pareto k can be
trusted: ``docs/pymc.md``, "Model comparison".

Separate experiments are independent, so :func:`experiment_log_likelihood` also gives one
joint value per experiment, for leaving out whole experiments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import arviz as az
import numpy as np
import pymc as pm
import xarray as xr
from pymc.model.transform.conditioning import remove_value_transforms

from pymc_wendy._progress import ProgressBar
from pymc_wendy.bayes.correction import require_posterior
from pymc_wendy.bayes.distribution import WeakODERV, noise_model
from pymc_wendy.model.observation import as_observation

__all__ = ["compare", "compute_log_likelihood", "experiment_log_likelihood"]

#: ``attrs["log_likelihood"]`` of a pointwise weak log-likelihood variable
POINTWISE = "log p(r_i | r_-i): leave-one-out density of each weak-residual entry"
#: ``attrs["log_likelihood"]`` of :func:`experiment_log_likelihood`'s variable
EXPERIMENTS = "joint log-likelihood of each experiment"


def _weak_terms(model: pm.Model, var_names: Sequence[str] | None) -> tuple[list, list]:
    """The requested observed variables, split into weak-likelihood terms and the others."""
    observed = {rv.name: rv for rv in model.observed_RVs}
    names = list(observed) if var_names is None else list(var_names)
    unknown = [n for n in names if n not in observed]
    if unknown:
        raise ValueError(f"{unknown} are not observed variables of the model ({list(observed)})")
    weak = [n for n in names if isinstance(observed[n].owner.op, WeakODERV)]
    return weak, [n for n in names if n not in weak]


def compute_log_likelihood(
    idata: xr.DataTree,
    model: pm.Model | None = None,
    *,
    var_names: Sequence[str] | None = None,
    extend_inferencedata: bool = True,
    progressbar: bool = True,
) -> xr.DataTree | xr.Dataset:
    """Pointwise log-likelihood of every draw, as :func:`pymc.compute_log_likelihood`.

    A :class:`~pymc_wendy.WeakODELikelihood` ``U`` gets one value per weak-residual entry,
    ``log p(r_i | r_-i, p)`` (the module doc), with dims ``(chain, draw, U_test_function,
    state)``; the other observed variables get PyMC's elementwise values. Then
    ``az.loo(idata, var_name="U")``, ``az.waic`` and :func:`compare` work as for a
    factorised model.

    Parameters
    ----------
    idata : xarray.DataTree
        Has a ``posterior`` group with the model's free variables.
    model : pm.Model, optional
        Defaults to the model on the context stack.
    var_names : sequence of str, optional
        Observed variables to compute; default all.
    extend_inferencedata : bool
        Add (or replace) them in ``idata``'s ``log_likelihood`` group and return ``idata``;
        otherwise return the new values as a Dataset.
    progressbar : bool
        Show progress over the draws.

    Returns
    -------
    xarray.DataTree or xarray.Dataset
        The weak variables carry ``attrs["observation_key"]``
        (:attr:`~pymc_wendy.WeakLikelihood.observation_key`), which :func:`compare` checks.

    Raises
    ------
    TypeError
        ``idata`` is not a sampler's result (a DataTree with a posterior).
    ValueError
        An unknown variable name, or a bias-corrected term (its objective is not a density).

    Notes
    -----
    One draw costs a Cholesky factorisation and a triangular inverse of ``S(p)``, ``K D``
    square: 12 ms at ``K D = 400`` (FitzHugh-Nagumo, 513 points), about three likelihood
    values; local test functions use the band of ``S^-1``.
    """
    require_posterior(idata)  # xarray's KeyError otherwise (issue 54, defect 11)
    model = pm.modelcontext(model)
    weak, other = _weak_terms(model, var_names)
    out = xr.Dataset()
    if other:
        out = pm.compute_log_likelihood(
            idata, var_names=other, model=model, extend_inferencedata=False,
            progressbar=progressbar,
        )  # fmt: skip
    if weak:
        out = out.assign(_weak_values(idata, model, weak, progressbar))
    if not extend_inferencedata:
        return out
    if "log_likelihood" in idata.children:
        out = idata["log_likelihood"].to_dataset().assign(dict(out.data_vars))
    idata["log_likelihood"] = xr.DataTree(out)
    return idata


def _weak_values(idata, model: pm.Model, names: list[str], progressbar: bool) -> dict:
    """``log p(r_i | r_-i, p)`` of the terms ``names`` at every draw, as DataArrays."""
    umodel = remove_value_transforms(model)  # the posterior holds constrained values
    terms = [umodel[n].owner for n in names]
    # rng, size, parameter vector, noise scale, initial state (WeakODELikelihood.dist)
    outs = umodel.replace_rvs_by_values([x for node in terms for x in node.inputs[2:]])
    fn = umodel.compile_fn(outs, inputs=umodel.value_vars, on_unused_input="ignore")
    post = idata["posterior"].to_dataset()
    free = [rv.name for rv in model.free_RVs]
    missing = [n for n in free if n not in post.data_vars]
    if missing:
        raise ValueError(f"the posterior has no draws of {missing}")
    stacked = post[free].stack(sample=("chain", "draw"))
    draws = {n: np.moveaxis(stacked[n].values, -1, 0) for n in free}
    S = stacked.sizes["sample"]
    values = [np.empty((S, node.op.likelihood.n_residuals)) for node in terms]
    bar = ProgressBar(progressbar, "pointwise log-likelihood", S, "")
    try:
        for s in range(S):
            inputs = fn({n: v[s] for n, v in draws.items()})
            for j, node in enumerate(terms):
                values[j][s] = _loo(node.op, *inputs[3 * j : 3 * j + 3])
            bar.update(advance=1)
    finally:
        bar.close()
    shape = (post.sizes["chain"], post.sizes["draw"])
    return {
        n: _labelled(model, n, node.op.likelihood, v.reshape(shape + v.shape[1:]), post)
        for n, node, v in zip(names, terms, values, strict=True)
    }


def _loo(op: WeakODERV, p, sigma, u0) -> np.ndarray:
    lik = op.likelihood
    if op.noise_fields:  # the drawn variance parameters, not the likelihood's own estimates
        obs = noise_model(lik, op.noise_fields, sigma)[0]
        return lik.loo_log_likelihood(p, variances=lik.entry_variances(obs))
    x0 = None
    if op.free_initial:
        x0 = np.log(u0) if as_observation(lik.noise).log_scale else u0
    return lik.loo_log_likelihood(p, sigma if op.infer_sigma else None, x0)


def _labelled(model: pm.Model, name: str, lik, values: np.ndarray, post) -> xr.DataArray:
    """``(chain, draw, K D)`` state-major values as ``(chain, draw, {name}_test_function,
    state)``, the state dimension named as the variable's."""
    D = lik.model.n_states
    K = values.shape[-1] // D
    dims = model.named_vars_to_dims.get(name) or ()
    state = dims[1] if len(dims) == 2 else f"{name}_state"
    coords = dict(post.coords)
    coords[f"{name}_test_function"] = np.arange(K)
    coords[state] = list(model.coords[state]) if state in model.coords else lik.model.states
    return xr.DataArray(
        values.reshape(values.shape[:2] + (D, K)).swapaxes(-1, -2),
        dims=("chain", "draw", f"{name}_test_function", state),
        coords={k: coords[k] for k in ("chain", "draw", f"{name}_test_function", state)},
        attrs={"log_likelihood": POINTWISE, "observation_key": lik.observation_key},
    )


def compare(
    compare_dict: Mapping[str, xr.DataTree],
    var_name: str | None = None,
    **kwargs,
):
    """:func:`arviz.compare` for models with weak likelihoods, after checking they compare.

    Parameters
    ----------
    compare_dict : mapping of str to xarray.DataTree
        Each model's result, with the pointwise values of :func:`compute_log_likelihood`
        (``pw.sample(..., idata_kwargs={"log_likelihood": True})`` computes them).
    var_name : str, optional
        The log-likelihood variable to compare on (a term, or ``"experiments"`` of
        :func:`experiment_log_likelihood` to leave out whole experiments). Default: every
        pointwise variable of the group (the weak terms and other observed variables, not
        ``"experiments"``), their entries pooled into one variable: the terms are
        independent given the parameters, so each entry's leave-one-out density is unchanged.
    **kwargs
        Passed to :func:`arviz.compare` (``method``, ``reference``, ``round_to``).

    Returns
    -------
    pandas.DataFrame
        :func:`arviz.compare`'s ranking.

    Raises
    ------
    ValueError
        A result without pointwise weak values (for instance PyMC's one value per draw),
        different observed variables, or weak terms that observe different things (another
        time grid, data, noise model or test functions: their densities are of different
        vectors, and their difference means nothing). Pass the same ``test_functions=`` to
        every candidate model to make sure they share them.
    """
    if len(compare_dict) < 2:
        raise ValueError("compare needs at least two models")
    exact = {label: bool(i.posterior.attrs.get("corrected")) for label, i in compare_dict.items()}
    if len(set(exact.values())) > 1:
        raise ValueError(
            f"{sorted(k for k, v in exact.items() if v)} are exact (corrected) posteriors with "
            f"the forward model's log-likelihood, {sorted(k for k, v in exact.items() if not v)} "
            "weak ones with the weak likelihood's: their log-likelihoods do not compare. Sample "
            "every candidate with the same correction= ('forward': exact, None: weak)"
        )
    keys, pooled = {}, {}
    for label, idata in compare_dict.items():
        ds = _pointwise(label, idata, var_name)
        keys[label] = {n: v.attrs.get("observation_key") for n, v in ds.data_vars.items()}
        pooled[label] = _pooled(idata, ds) if var_name is None else idata
    first, *rest = keys
    for label in rest:
        if keys[label].keys() != keys[first].keys():
            raise ValueError(
                f"{first!r} and {label!r} have different observed terms ({sorted(keys[first])} "
                f"against {sorted(keys[label])})"
            )
        differ = [n for n in keys[first] if keys[first][n] != keys[label][n]]
        if differ:
            raise ValueError(
                f"{first!r} and {label!r} observe different things in {differ}: their weak "
                "residuals project different data, time grids, noise models or test "
                "functions, so their log-likelihoods do not compare. Build both models with "
                "the same data and the same test_functions=."
            )
    return az.compare(pooled, var_name=var_name or "weak", **kwargs)


def _pointwise(label: str, idata, var_name: str | None) -> xr.Dataset:
    """The variables of one result to compare on, or a clear error: ``var_name``, or every
    variable but the per-experiment stack of :func:`experiment_log_likelihood`."""
    if "log_likelihood" not in idata.children:
        raise ValueError(
            f"{label!r} has no log_likelihood group: run pw.compute_log_likelihood(idata, "
            "model) or sample with idata_kwargs={'log_likelihood': True}"
        )
    ds = idata["log_likelihood"].to_dataset()
    if var_name is not None:
        if var_name not in ds:
            raise ValueError(f"{label!r} has no log-likelihood variable {var_name!r}")
        names = [var_name]
    else:
        names = [n for n in ds.data_vars if ds[n].attrs.get("log_likelihood") != EXPERIMENTS]
    # one value per draw: PyMC's joint value of a weak term, which LOO cannot use
    bad = [n for n in names if set(ds[n].dims) <= {"chain", "draw"}]
    if bad:
        raise ValueError(
            f"{label!r}: {bad} hold no pointwise log-likelihood (PyMC's "
            "compute_log_likelihood gives one value per draw for a weak likelihood); run "
            "pw.compute_log_likelihood(idata, model)"
        )
    return ds[names]


def _pooled(idata, ds: xr.Dataset) -> xr.DataTree:
    """A result whose log-likelihood is every weak entry of ``ds`` along one dimension."""
    flat = [
        ds[n]
        .stack(weak_entry=[d for d in ds[n].dims if d not in ("chain", "draw")])
        .drop_vars(lambda x: [c for c in x.coords if c not in ("chain", "draw")])
        for n in ds.data_vars
    ]
    weak = xr.concat(flat, dim="weak_entry").transpose("chain", "draw", "weak_entry")
    out = xr.DataTree()
    out["posterior"] = xr.DataTree(idata["posterior"].to_dataset())
    out["log_likelihood"] = xr.DataTree(xr.Dataset({"weak": weak}))
    return out


def experiment_log_likelihood(
    idata,
    model: pm.Model | None = None,
    *,
    var_names: Sequence[str] | None = None,
    name: str = "experiments",
    extend_inferencedata: bool = True,
) -> xr.DataArray:
    """The joint log-likelihood of each experiment per draw, as one variable for ``az.loo``.

    Parameters
    ----------
    idata : xarray.DataTree
        A posterior (from :func:`pymc_wendy.sample`, ``pm.sample``, ...). Joint values
        already in its ``log_likelihood`` group (one per draw, from
        :func:`pymc.compute_log_likelihood`) are reused; the others, and terms stored
        pointwise by :func:`compute_log_likelihood` (which are kept), are computed with
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
        Fewer than two experiments, or a name that is not a ``WeakODELikelihood`` term.
    """
    model = pm.modelcontext(model)
    weak, other = _weak_terms(model, var_names)
    if var_names is not None and other:
        raise ValueError(f"{other} are not WeakODELikelihood terms; experiments must be")
    if len(weak) < 2:
        raise ValueError(
            f"leave-one-experiment-out needs at least two experiments (observed terms); got {weak}"
        )
    stored = xr.Dataset()
    if "log_likelihood" in idata.children:
        stored = idata["log_likelihood"].to_dataset()
    # pointwise values (compute_log_likelihood) do not sum to the joint density: recompute
    joint = {n: stored[n] for n in weak if n in stored and stored[n].dims == ("chain", "draw")}
    missing = [n for n in weak if n not in joint]
    if missing:
        new = pm.compute_log_likelihood(
            idata, var_names=missing, model=model, extend_inferencedata=False, progressbar=False
        )
        joint.update({n: new[n] for n in missing})
    parts = [joint[n].transpose("chain", "draw") for n in weak]
    stacked = xr.concat(parts, dim="experiment").assign_coords(experiment=weak)
    stacked = stacked.transpose("chain", "draw", "experiment").rename(name)
    stacked.attrs = {"log_likelihood": EXPERIMENTS}
    if extend_inferencedata:
        idata["log_likelihood"] = xr.DataTree(stored.assign({name: stacked}))
    return stacked
