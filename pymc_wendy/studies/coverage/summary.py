"""Metrics of a coverage study: :func:`summarize` over data sets, :func:`to_table` for papers.

The metrics are those of WENDy-MLE Table 1 (coverage, relative bias and mean squared error,
forward-simulation error and failures), each with its Monte Carlo standard error, plus
z-scores that say how far the intervals are from calibrated.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr
from scipy import stats

__all__ = ["summarize", "to_table"]


def summarize(ds: xr.Dataset) -> xr.Dataset:
    """The metrics of WENDy-MLE Table 1 over data sets, with Monte Carlo standard errors.

    Per ``(estimator, noise_ratio, n_points, param)``: ``coverage`` (share of intervals that
    contain the truth), ``bias`` and ``rel_bias`` (mean error, absolute and relative to
    ``p*``), ``variance`` (the usual sample variance, ``ddof=1``), ``mse`` and ``rel_mse``,
    ``sq_rel_bias`` (eq. 15), ``rel_variance`` (eq. 16, ``ddof=0``), ``width`` (mean interval
    length), ``zscore_mean`` and ``zscore_sd`` (of the standardised error
    ``(p_hat - p*) / s``, where ``s`` is the interval's half-width divided by the normal
    quantile of the level: for calibrated intervals about 0 and 1; a ``zscore_sd`` above 1
    says by how much the intervals are too narrow, a ``zscore_mean`` away from 0 is bias in
    units of the claimed standard error). Per ``(estimator, noise_ratio, n_points)``:
    ``coef_error`` and ``fsim_error`` (mean
    and median), ``failure_rate`` (forward simulation of the estimate fails, eq. 14),
    ``not_ok_rate`` (the method reported no success), ``wall_time`` (mean), ``n``.
    Each ``*_se`` variable is the Monte Carlo standard error of the one it is named after.

    All statistics skip runs whose estimate is missing (not run yet, or failed to produce a
    number); ``n`` and ``n_ci`` count what entered.
    """
    truth = ds["truth"]
    err = ds["estimate"] - truth
    ok = np.isfinite(ds["estimate"])
    n = ok.sum("dataset")
    mean_err = err.mean("dataset")
    sd = err.std("dataset", ddof=1)
    sq = err**2
    cov = ds["covered"]
    n_ci = np.isfinite(cov).sum("dataset")
    c = cov.mean("dataset")
    half = (ds["interval"].sel(bound="upper") - ds["interval"].sel(bound="lower")) / 2
    width = 2 * half.mean("dataset")
    q = stats.norm.ppf(0.5 + ds.attrs["level"] / 2)
    z = err / (half / q).where(half > 0)
    n_z = np.isfinite(z).sum("dataset")
    z_sd = z.std("dataset", ddof=1)
    scale = abs(truth)
    out = xr.Dataset(
        {
            "coverage": c,
            "coverage_se": np.sqrt(c * (1 - c) / n_ci),
            "n_ci": n_ci,
            "bias": mean_err,
            "bias_se": sd / np.sqrt(n),
            "rel_bias": mean_err / truth,
            "rel_bias_se": sd / np.sqrt(n) / scale,
            "sq_rel_bias": (mean_err / truth) ** 2,
            "variance": err.var("dataset", ddof=1),
            "rel_variance": err.var("dataset", ddof=0) / truth**2,
            "mse": sq.mean("dataset"),
            "mse_se": sq.std("dataset", ddof=1) / np.sqrt(n),
            "rel_mse": sq.mean("dataset") / truth**2,
            "rel_mse_se": sq.std("dataset", ddof=1) / np.sqrt(n) / truth**2,
            "width": width,
            "zscore_mean": z.mean("dataset"),
            "zscore_mean_se": z_sd / np.sqrt(n_z),
            "zscore_sd": z_sd,
            # normal theory: the s.e. of a sample standard deviation is sd / sqrt(2 (n - 1))
            "zscore_sd_se": z_sd / np.sqrt(2 * (n_z - 1).where(n_z > 1)),
            "n": n,
        }
    )
    done = np.isfinite(ds["wall_time"])
    m = done.sum("dataset")
    for name in ("coef_error", "fsim_error"):
        v = ds[name]
        out[f"{name}_mean"] = v.mean("dataset")
        out[f"{name}_mean_se"] = v.std("dataset", ddof=1) / np.sqrt(np.isfinite(v).sum("dataset"))
        out[f"{name}_median"] = v.median("dataset")
    out["failure_rate"] = ds["fsim_failed"].mean("dataset")
    out["not_ok_rate"] = 1 - ds["success"].mean("dataset")
    out["wall_time"] = ds["wall_time"].mean("dataset")
    out["n_runs"] = m
    out.attrs = dict(ds.attrs)
    return out


def to_table(summary: xr.Dataset, columns: Sequence[str] = ("rel_bias", "rel_mse", "coverage")):
    """A paper-style table (pandas DataFrame) of :func:`summarize` output.

    One row per estimator, noise ratio, number of points and (if any requested column is
    per parameter) parameter; each requested column is followed by its ``_se`` where there is
    one. Aggregate columns (``coef_error_mean``, ``failure_rate``, ...) repeat on every
    parameter's row. Save with ``.to_csv(path)`` or ``.to_markdown()`` (needs ``tabulate``).
    """
    names = []
    for c in columns:
        if c not in summary:
            raise KeyError(f"{c!r} is not a summary variable; choose from {list(summary)}")
        names.append(c)
        if f"{c}_se" in summary:
            names.append(f"{c}_se")
    if any("param" in summary[c].dims for c in names):
        sub = xr.Dataset({c: summary[c].broadcast_like(summary["coverage"]) for c in names})
    else:
        sub = summary[names]
    return sub.drop_vars("truth", errors="ignore").to_dataframe()[names]
