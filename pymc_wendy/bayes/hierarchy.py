"""Unit-level parameters of a hierarchical model, parametrised for NUTS by the units' own fits.

``theta[i] ~ Normal(mu, tau)`` has two classic forms, and with weak likelihoods both often fail:
each unit's data pin its ``theta[i]`` to a standard error comparable with the spread between
units, so the centred form has a funnel at small ``tau`` and the non-centred one
(``mu + tau * z``) at large ``tau`` (``docs/experiments.md``, "Sampling hierarchical models").

The weak likelihood makes a third form cheap: each unit can be fitted on its own first
(:func:`pymc_wendy.fit`, no ODE solve), which gives its estimate ``e[i]`` and standard error
``s[i]``. If the unit's likelihood were exactly ``Normal(e[i], s[i])`` in ``theta[i]``, the
conditional posterior of ``theta[i]`` given ``mu`` and ``tau`` would be ``Normal(a[i], b[i])``
with

    b = (1 / s^2 + 1 / tau^2)^(-1/2),   a = b^2 (e / s^2 + mu / tau^2),

whatever ``tau``. :func:`hierarchical_normal` samples ``z[i] = (theta[i] - a[i]) / b[i]``,
which is then a standard normal at every ``tau``: neither funnel. This is the partially
non-centred parametrisation of Papaspiliopoulos, Roberts and Skoeld (2007, *Statistical
Science* 22, 59-73) with the scale of ``theta`` included and the weights set from the data.
Given ``mu`` and ``tau`` the map is affine in ``theta``, so it is an exact reparametrisation:
the estimates change how well NUTS moves, never the posterior.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from numpy.typing import ArrayLike

__all__ = ["hierarchical_normal"]


def hierarchical_normal(
    name: str,
    mu,
    sigma,
    *,
    estimate: ArrayLike | None = None,
    stderr: ArrayLike | None = None,
    dims=None,
    shape=None,
):
    """Unit-level parameters ``Normal(mu, sigma)``, parametrised so that NUTS sees no funnel.

    Call inside a ``pm.Model``. Adds the free variable ``f"{name}_z"`` and returns the
    deterministic ``name`` (the unit-level values), to use as a parameter of each unit's
    :class:`~pymc_wendy.WeakODELikelihood`.

    Parameters
    ----------
    name : str
        Name of the unit-level values (a ``pm.Deterministic``).
    mu, sigma : tensor-like
        Population mean and standard deviation (scalars or broadcastable to the units;
        usually random variables).
    estimate, stderr : array-like, optional
        Each unit's own estimate of its parameter and its standard error, for example
        ``[pw.fit(ode, t, U).x[j] for t, U in units]`` and the matching ``.stderr[j]``; one
        entry per value (shape ``(units,)``, or ``(units, parameters)`` for several
        parameters per unit). They set the parametrisation only: the model is the same
        distribution whatever their values, so rough ones cost efficiency, not correctness.
        An infinite ``stderr`` (a unit whose own fit says nothing about the value, or
        failed; its estimate is then ignored and may be NaN) gives that value the
        non-centred form. Without them the non-centred form ``mu + sigma * z`` is used for
        all.
    dims, shape
        As for any PyMC variable (the shape of ``estimate``).

    Returns
    -------
    TensorVariable
        The unit-level values, ``Normal(mu, sigma)`` given ``mu`` and ``sigma``.

    Examples
    --------
    >>> fits = [pw.fit(ode, t, U) for t, U in units]  # doctest: +SKIP
    >>> with pm.Model(coords={"unit": range(len(units))}):  # doctest: +SKIP
    ...     mu, tau = pm.Normal("mu", 3, 2), pm.HalfNormal("tau", 1)
    ...     rate = pw.hierarchical_normal(
    ...         "rate", mu, tau, estimate=[f.x[0] for f in fits],
    ...         stderr=[f.stderr[0] for f in fits], dims="unit",
    ...     )
    """
    if not hasattr(sigma, "type") and not np.all(np.asarray(sigma, dtype=float) > 0):
        raise ValueError(f"{name}: sigma must be > 0; got {sigma}")
    if (estimate is None) != (stderr is None):
        raise ValueError("give both estimate and stderr (each unit's own fit), or neither")
    if estimate is None:
        z = pm.Normal(f"{name}_z", 0.0, 1.0, dims=dims, shape=shape)
        return pm.Deterministic(name, mu + sigma * z, dims=dims)
    e, s = _unit_fits(name, estimate, stderr)
    if dims is None and shape is None:
        shape = e.shape
    elif dims is None and tuple(np.atleast_1d(shape)) != e.shape:
        raise ValueError(f"{name}: estimate has shape {e.shape}, but shape={shape}")
    elif dims is not None:
        _check_dims(name, e.shape, (dims,) if isinstance(dims, str) else tuple(dims))
    for what, value in (("mu", mu), ("sigma", sigma)):
        _check_broadcast(name, what, value, e.shape)
    precision = 1.0 / s**2 + 1.0 / sigma**2
    b = 1.0 / pm.math.sqrt(precision)
    a = (e / s**2 + mu / sigma**2) / precision
    z = pm.Normal(f"{name}_z", (mu - a) / b, sigma / b, dims=dims, shape=shape)
    return pm.Deterministic(name, a + b * z, dims=dims)


def _check_broadcast(name: str, what: str, value, shape: tuple) -> None:
    """A ``ValueError`` when ``value``'s static shape cannot broadcast to the units' ``shape``
    (pytensor's "Incompatible Elemwise input shapes" otherwise, at the first evaluation:
    issue 54, defect 11)."""
    have = tuple(pt.as_tensor_variable(value).type.shape)
    fits = len(have) <= len(shape) and all(
        n is None or n == 1 or n == m for n, m in zip(have[::-1], shape[::-1], strict=False)
    )
    if not fits:
        raise ValueError(
            f"{name}: {what} has shape {tuple('?' if n is None else n for n in have)}, which "
            f"does not broadcast to the units' shape {shape} (estimate's): one value, or one "
            "per parameter (the last axis)"
        )


def _unit_fits(name: str, estimate, stderr) -> tuple[np.ndarray, np.ndarray]:
    e = np.array(estimate, dtype=float)
    s = np.asarray(stderr, dtype=float)
    if e.ndim == 0 or s.shape != e.shape:
        raise ValueError(
            f"{name}: estimate and stderr must have one entry per value (the same shape); "
            f"got shapes {e.shape} and {s.shape}"
        )
    if np.any(np.isnan(s)) or np.any(s <= 0):
        raise ValueError(f"{name}: stderr must be > 0 (np.inf for a unit without a fit); got {s}")
    known = np.isfinite(s)
    if not np.all(np.isfinite(e[known])):
        raise ValueError(
            f"{name}: estimate must be finite where stderr is (a unit's fit failed? give it "
            "stderr=np.inf)"
        )
    e[~known] = 0.0  # 1 / stderr^2 = 0 there: the estimate has no weight
    return e, s


def _check_dims(name: str, shape: tuple, dims: tuple) -> None:
    lengths = pm.modelcontext(None).dim_lengths
    for axis, dim in enumerate(dims):
        n = lengths.get(dim)
        if n is None:
            continue
        n = int(n.eval())
        if axis >= len(shape) or shape[axis] != n:
            raise ValueError(
                f"{name}: estimate has shape {shape}, but dims {dims} have {dim!r} of length {n}"
            )
