"""Per-experiment diagnostics of weak likelihoods at a (joint) estimate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from pymc_wendy._threads import single_blas_thread
from pymc_wendy.weak import kernels

__all__ = ["diagnose"]


@single_blas_thread
def diagnose(experiments: Sequence, p, tilt=None) -> dict[str, np.ndarray]:
    """Per-experiment diagnostics of the experiments' weak likelihoods at a joint estimate.

    ``tilt`` is the bias correction's tilt of the joint objective (shared evenly among the
    experiments' scores), if any.

    Returns a dict of arrays with one entry per experiment:

    ``n_points``, ``n_test_functions``
        Sizes.
    ``nll``
        The experiment's share of the (corrected) objective.
    ``whitened_ms``
        Mean square of the whitened residual ``C^-1 r``: about 1 when the experiment's
        data, noise level and the joint estimate agree.
    ``shapiro_pvalue``
        Shapiro-Wilk p-value of the whitened residual (WENDy's normality check).
    ``consistency``, ``consistency_dof``, ``consistency_pvalue``
        A score test of the experiment against the others: its own Newton step from the
        joint estimate, ``d = -H_e^-1 g_e``, in the metric of its covariance
        ``H_e^-1 - H^-1``; chi-square with ``consistency_dof`` degrees of freedom when all
        experiments share the parameters. A small p-value flags an experiment whose data
        want other parameters (or another noise level). NaN when the experiment alone
        does not determine the parameters (``H_e`` singular).
    """
    p = np.asarray(p, dtype=float)
    E = len(experiments)
    out = {
        "n_points": np.array([e.t.size for e in experiments]),
        "n_test_functions": np.array([e.K for e in experiments]),
        "nll": np.full(E, np.nan),
        "whitened_ms": np.full(E, np.nan),
        "shapiro_pvalue": np.full(E, np.nan),
        "consistency": np.full(E, np.nan),
        "consistency_dof": np.zeros(E, dtype=int),
        "consistency_pvalue": np.full(E, np.nan),
    }
    grads, hessians = [], []
    for i, e in enumerate(experiments):
        try:
            value, g = e.nll_grad(p)
            w = e.whitened_residual(p)
            H = e.hessian(p)
        except kernels.WeakLikelihoodError:
            grads.append(None)
            hessians.append(None)
            continue
        out["nll"][i] = value
        out["whitened_ms"][i] = float(w @ w) / w.size
        out["shapiro_pvalue"][i] = stats.shapiro(w).pvalue if w.size >= 3 else np.nan
        grads.append(g)
        hessians.append(H)
    if E < 2 or any(h is None for h in hessians):
        return out
    if tilt is not None:  # the tilt belongs to the sum: share it evenly
        grads = [g - tilt / E for g in grads]
    try:
        V_joint = kernels.inverse_information(np.sum(hessians, axis=0))
    except kernels.WeakLikelihoodError:
        return out
    for i, (g, H) in enumerate(zip(grads, hessians, strict=True)):
        try:
            V_e = kernels.inverse_information(H)
        except kernels.WeakLikelihoodError:
            continue
        d = -V_e @ g
        V = V_e - V_joint
        w, vec = np.linalg.eigh(0.5 * (V + V.T))
        keep = w > 1e-10 * w.max()
        z = (vec[:, keep].T @ d) / np.sqrt(w[keep])
        out["consistency"][i] = float(z @ z)
        out["consistency_dof"][i] = int(keep.sum())
        out["consistency_pvalue"][i] = float(stats.chi2.sf(z @ z, keep.sum()))
    return out
