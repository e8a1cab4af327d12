"""Plots of data against predictive draws (matplotlib, an optional dependency)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["plot_predictive"]


def plot_predictive(
    t,
    U,
    draws,
    *,
    truth=None,
    states: Sequence[str] | None = None,
    prob: float = 0.9,
    axes=None,
):
    """Data with the median and central ``prob`` band of predictive draws, one panel per state.

    Parameters
    ----------
    t : array, shape (M+1,)
    U : array, shape (M+1, D)
        The observed data.
    draws : array or xarray.DataArray, shape (..., M+1, D)
        Predictive draws (for example ``pp.posterior_predictive["U"]``); leading axes are
        pooled. NaN draws (failed solves) are ignored.
    truth : array, shape (M+1, D), optional
        Noise-free trajectory, drawn dashed when given.
    states : sequence of str, optional
        Panel titles.
    prob : float
        Probability mass of the band.
    axes : sequence of matplotlib axes, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    t = np.asarray(t, dtype=float)
    U = np.asarray(U, dtype=float)
    D = U.shape[1]
    X = np.asarray(draws, dtype=float).reshape(-1, *U.shape)
    lo, med, hi = np.nanquantile(X, [(1 - prob) / 2, 0.5, (1 + prob) / 2], axis=0)
    if axes is None:
        fig, axes = plt.subplots(D, 1, figsize=(8, 2.6 * D), sharex=True, squeeze=False)
        axes = axes[:, 0]
    fig = axes[0].figure
    for d, ax in enumerate(axes):
        ax.fill_between(t, lo[:, d], hi[:, d], color="C0", alpha=0.3, lw=0,
                        label=f"{prob:.0%} predictive band")  # fmt: skip
        ax.plot(t, med[:, d], color="C0", lw=1.5, label="predictive median")
        ax.plot(t, U[:, d], ".", color="k", ms=2.5, label="data")
        if truth is not None:
            ax.plot(t, np.asarray(truth)[:, d], "--", color="C3", lw=1, label="truth")
        ax.set_ylabel(states[d] if states is not None else f"u{d}")
    axes[0].legend(loc="best", fontsize="small", ncol=2)
    axes[-1].set_xlabel("t")
    fig.tight_layout()
    return fig
