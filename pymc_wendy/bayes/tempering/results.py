"""The ArviZ ``DataTree`` of a :func:`~pymc_wendy.sample_sft` run: the top rung's draws on the
model's original scale and its NUTS statistics, the ladder and its swap statistics, and (if
kept) every rung's draws."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import xarray as xr
from pymc.pytensorf import join_nonshared_inputs
from pytensor.graph.replace import vectorize_graph

from pymc_wendy.bayes.tempering.diagnostics import communication_barrier, warn_about_swaps

if TYPE_CHECKING:
    from pymc_wendy.bayes.tempering.ladder import Ladder
    from pymc_wendy.bayes.tempering.model import TemperedModel


def assemble_result(model, target, lad, results, C, D, elapsed, relaxation, swap):
    """Assemble the populations' records into the ``DataTree`` :func:`sample_sft` returns,
    and warn (:class:`SFTWarning`) about what its statistics show.

    Parameters
    ----------
    model : pm.Model
        The sampled model.
    target : TemperedModel
        Its tempered version (start point and relaxation scales).
    lad : Ladder
        The final ladder.
    results : list of dict
        ``Population.result()`` of every population, in chain order.
    C, D : int
        Chains and draws per chain.
    elapsed : float
        Sampling time in seconds.
    relaxation, swap : str
        As given to :func:`sample_sft`.

    Returns
    -------
    xarray.DataTree
        As described in :func:`sample_sft`.
    """
    import arviz as az

    names = [v.name for v in model.free_RVs + model.deterministics]
    constrained = _back_transform(model, target, names)
    dims = {name: list(model.named_vars_to_dims.get(name, ())) for name in names}
    coords = {k: list(v) for k, v in model.coords.items() if v is not None}
    posterior = constrained(np.stack([res["top"]["x"] for res in results]))  # (chain, draw, n)
    for name, v in posterior.items():  # ArviZ's default names for dimensions without dims
        dims[name] += [f"{name}_dim_{i}" for i in range(len(dims[name]), v.ndim - 2)]
    groups = {"posterior": posterior, "sample_stats": _nuts_stats(results)}
    dt = az.from_dict(groups, dims=dims, coords=coords)
    att = np.stack([res["att"] for res in results])
    acc = np.stack([res["acc"] for res in results])
    dt["sample_stats"] = (
        dt["sample_stats"].to_dataset().merge(_ladder_stats(lad, results, acc, att))
    )
    if results[0]["rungs"] is not None:
        rung_vals = constrained(np.stack([r["rungs"] for r in results]))  # (chain, draw, rung)
        dt["rungs"] = _rungs_group(rung_vals, dims, coords, C, D, lad.s.size)
    dt["sample_stats"].attrs.update(
        {
            "sampler": "pymc_wendy.sample_sft",
            "relaxation": relaxation,
            "swap": swap,
            "sampling_time": elapsed,
            "relax_scales": list(target.relax_scales),
        }
    )
    if lad.s.size > 1:
        dt["sample_stats"].attrs["communication_barrier"] = communication_barrier(acc, att)
    warn_about_swaps(dt, acc, att, C)
    return dt


def _back_transform(
    model: pm.Model, target: TemperedModel, names: list[str]
) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """A function from unconstrained vectors ``(..., n)`` to the values of the variables
    ``names`` on their original scale, each shaped ``(..., *shape)``."""
    outs = model.replace_rvs_by_values([model[name] for name in names])
    outs_x, x = join_nonshared_inputs(target.point0, outs, model.value_vars)
    # one call over all draws: the back-transforms vectorised along a batch dimension
    batch = pt.matrix("x_batch", dtype=x.dtype)
    outs_b = vectorize_graph(outs_x, replace={x: batch})
    fn = pytensor.function([batch], outs_b, on_unused_input="ignore", mode="FAST_COMPILE")

    def constrained(flat: np.ndarray) -> dict[str, np.ndarray]:
        vals = fn(np.ascontiguousarray(flat.reshape(-1, flat.shape[-1])))
        return {
            name: np.asarray(v).reshape(*flat.shape[:-1], *np.shape(v)[1:])
            for name, v in zip(names, vals, strict=True)
        }

    return constrained


def _nuts_stats(results: list[dict]) -> dict[str, np.ndarray]:
    """The top rung's NUTS statistics, ``(chain, draw)`` each, under ArviZ's names."""

    def stat(key, dtype=float):
        return np.stack([np.asarray(res["top"][key], dtype=dtype) for res in results])

    return {
        "diverging": stat("diverging", bool),
        "tree_depth": stat("depth", int),
        "n_steps": stat("n_steps", int),
        "step_size": stat("eps"),
        "acceptance_rate": stat("accept"),
        "lp": stat("lp"),
        "energy": stat("energy"),
    }


def _ladder_stats(lad: Ladder, results: list[dict], acc: np.ndarray, att: np.ndarray) -> xr.Dataset:
    """Swap statistics per chain and pair (``acc``, ``att``: accepted and attempted swaps),
    acceptance and step size per chain and rung, and the final ladder per rung."""
    C, R = acc.shape[0], lad.s.size
    return xr.Dataset(
        {
            "swap_accept": (("chain", "pair"), acc / np.maximum(att, 1)),
            "swap_attempts": (("chain", "pair"), att.astype(int)),
            "rung_acceptance": (("chain", "rung"), np.stack([r["rung_accept"] for r in results])),
            "rung_step_size": (("chain", "rung"), np.stack([r["eps"] for r in results])),
            "alpha": ("rung", lad.alpha),
            "beta": ("rung", lad.beta),
            "level": ("rung", lad.s.copy()),
        },
        coords={"chain": np.arange(C), "rung": np.arange(R), "pair": np.arange(R - 1)},
    )


def _rungs_group(
    values: dict[str, np.ndarray], dims: dict[str, list], coords: dict, C: int, D: int, R: int
) -> xr.Dataset:
    """Every rung's draws, ``(chain, draw, rung, *dims)``, with the model's coordinates that
    the variables use."""
    return xr.Dataset(
        {name: (("chain", "draw", "rung", *dims[name]), v) for name, v in values.items()},
        coords={
            "chain": np.arange(C),
            "draw": np.arange(D),
            "rung": np.arange(R),
            **{k: v for k, v in coords.items() if any(k in d for d in dims.values())},
        },
    )
