"""Plots of data against predictive draws and of coverage studies (matplotlib)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

__all__ = ["plot_intervals", "plot_predictive", "plot_study"]


def _pyplot():
    """``matplotlib.pyplot``, imported only when a plot is drawn (pyplot is slow to import;
    a broken matplotlib installation is reported when a plot is asked for)."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "plotting needs matplotlib, a dependency of pymc-wendy: pip install matplotlib"
        ) from exc
    return plt


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
    plt = _pyplot()

    t = np.asarray(t, dtype=float)
    U = np.asarray(U, dtype=float)
    D = U.shape[1]
    X = np.asarray(draws, dtype=float).reshape(-1, *U.shape)
    with warnings.catch_warnings():
        # every draw failed at some times (a posterior far off): no band there, and no
        # "All-NaN slice" warning from numpy in front of the user
        warnings.simplefilter("ignore", RuntimeWarning)
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
        Output of :func:`pymc_wendy.studies.coverage.summarize`.
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
    plt = _pyplot()

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


def plot_intervals(
    ds,
    *,
    n_points: int | None = None,
    estimators: Sequence[str] | None = None,
    params: Sequence[str] | None = None,
    dodge: float = 0.3,
    axes=None,
):
    """Mean estimate with the mean interval against the noise ratio, and the truth, one panel
    per parameter and one series per estimator (WENDy-MLE Figs. 2-7).

    Each point is the mean of the estimates over a setting's data sets, its error bar runs
    from the mean lower to the mean upper interval bound; a dashed line marks ``p*``.

    Parameters
    ----------
    ds : xarray.Dataset
        Output of :func:`pymc_wendy.run_coverage` (variables ``estimate`` and ``interval``,
        coordinate ``truth``).
    n_points : int, optional
        Draw only this number of points. Default: every number of points in ``ds``, one
        series per estimator and number of points.
    estimators : sequence of str, optional
        The estimators to draw (default: all, in the dataset's order).
    params : sequence of str, optional
        The parameters to draw, one panel each (default: all).
    dodge : float
        Series at the same noise ratio are spread horizontally over this fraction of the
        smallest gap between noise ratios, so that their error bars do not hide each other;
        0 draws them on top of each other.
    axes : sequence of matplotlib axes, optional
        One per parameter.

    Returns
    -------
    matplotlib.figure.Figure

    Notes
    -----
    A run enters a setting's means only if both its estimate and its interval are finite
    (runs that failed, or are not finished in a study still running, are left out), so the
    mean estimate and the mean interval describe the same runs.
    """
    plt = _pyplot()

    missing = {"estimate", "interval", "truth"} - set(ds.variables)
    if missing:
        raise KeyError(f"ds lacks {sorted(missing)}: pass the output of run_coverage")
    if n_points is not None:
        if n_points not in ds["n_points"].values:
            raise ValueError(
                f"n_points={n_points} is not in the study ({ds['n_points'].values.tolist()})"
            )
        ds = ds.sel(n_points=[n_points])
    if estimators is not None:
        ds = ds.sel(estimator=list(estimators))
    if params is not None:
        ds = ds.sel(param=list(params))
    mean, lower, upper = _interval_means(ds)

    names = ds["param"].values.tolist()
    if axes is None:
        ncols = min(len(names), 3)
        nrows = -(-len(names) // ncols)
        fig, grid = plt.subplots(nrows, ncols, figsize=(4.5 * ncols, 3.5 * nrows), squeeze=False)
        for ax in grid.ravel()[len(names) :]:
            ax.set_visible(False)
        axes = grid.ravel()[: len(names)]
    axes = list(np.ravel(axes))
    if len(axes) < len(names):
        raise ValueError(f"{len(names)} parameters need as many axes; got {len(axes)}")
    fig = axes[0].figure

    nr = 100 * ds["noise_ratio"].values
    series = [(e, n) for e in ds["estimator"].values for n in ds["n_points"].values]
    gap = np.min(np.diff(np.sort(nr))) if nr.size > 1 else 1.0
    shifts = dodge * gap * (np.linspace(-0.5, 0.5, len(series)) if len(series) > 1 else [0.0])
    several_n = ds.sizes["n_points"] > 1
    title = "" if several_n else f" ({int(ds['n_points'].values[0])} points)"
    for j, (ax, name) in enumerate(zip(axes, names, strict=False)):
        for k, (est, n) in enumerate(series):
            y = mean.sel(estimator=est, n_points=n, param=name).values
            lo = lower.sel(estimator=est, n_points=n, param=name).values
            hi = upper.sel(estimator=est, n_points=n, param=name).values
            # Matplotlib rejects negative error-bar lengths; an interval missing its own mean
            # estimate (possible for skewed posteriors) is drawn up to the point instead.
            yerr = np.clip([y - lo, hi - y], 0.0, None)
            label = f"{est}, {n} points" if several_n else str(est)
            ax.errorbar(nr + shifts[k], y, yerr=yerr, marker="o", ms=3, capsize=2, label=label)
        ax.axhline(float(ds["truth"].values[j]), color="k", lw=0.8, ls="--", label="truth")
        ax.set_title(f"{name}{title}")
        ax.set_xlabel("noise ratio (%)")
    axes[0].set_ylabel("mean estimate, mean interval")
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    return fig


def _interval_means(ds):
    """Mean estimate, mean lower and mean upper bound over data sets, each over the runs whose
    estimate and interval are all finite."""
    est = ds["estimate"]
    lo = ds["interval"].sel(bound="lower", drop=True)
    hi = ds["interval"].sel(bound="upper", drop=True)
    ok = np.isfinite(est) & np.isfinite(lo) & np.isfinite(hi)
    return tuple(v.where(ok).mean("dataset") for v in (est, lo, hi))
