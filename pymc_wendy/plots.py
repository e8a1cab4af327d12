"""Plots of data against predictive draws (matplotlib, an optional dependency)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["plot_predictive", "plot_study"]


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


def plot_study(summary, metric: str = "coef_error_mean", *, axes=None):
    """A metric of a coverage study against the noise ratio, one panel per number of points
    and one line per estimator, with Monte Carlo error bars where the summary has them
    (WENDy-MLE Figs. 2-7).

    Parameters
    ----------
    summary : xarray.Dataset
        Output of :func:`pymc_wendy.coverage.summarize`.
    metric : str
        A summary variable: aggregated (``coef_error_mean``, ``fsim_error_median``,
        ``failure_rate``, ...) or per parameter (``coverage``, ``rel_mse``, ...; then one
        line per estimator and parameter).
    axes : sequence of matplotlib axes, optional
        One per number of points.

    Returns
    -------
    matplotlib.figure.Figure
    """
    import matplotlib.pyplot as plt

    if metric not in summary:
        raise KeyError(f"{metric!r} is not a summary variable; choose from {list(summary)}")
    da = summary[metric]
    se = summary.get(f"{metric}_se")
    points = summary["n_points"].values
    if axes is None:
        fig, axes = plt.subplots(1, len(points), figsize=(4.5 * len(points), 3.5), sharey=True,
                                 squeeze=False)  # fmt: skip
        axes = axes[0]
    fig = axes[0].figure
    nr = summary["noise_ratio"].values
    for ax, n in zip(axes, points, strict=True):
        sub = da.sel(n_points=n)
        lines = sub.stack(line=[d for d in sub.dims if d != "noise_ratio"]).transpose("line", ...)
        errs = None if se is None else se.sel(n_points=n).stack(line=lines.indexes["line"].names)
        for i, label in enumerate(lines.indexes["line"]):
            name = label if isinstance(label, str) else " ".join(map(str, label))
            y = lines.values[i]
            e = None if errs is None else errs.transpose("line", ...).values[i]
            ax.errorbar(100 * nr, y, yerr=e, marker="o", ms=3, capsize=2, label=name)
        ax.set_title(f"{n} points")
        ax.set_xlabel("noise ratio (%)")
        if metric.startswith(("coef_error", "fsim_error", "rel_mse", "mse")):
            ax.set_yscale("log")
        if metric == "coverage":
            level = summary.attrs.get("level")
            if level is not None:
                ax.axhline(level, color="k", lw=0.8, ls="--")
    axes[0].set_ylabel(metric)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    return fig
