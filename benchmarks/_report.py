"""The per-cell coverage line the study scripts print (``doses.py``, ``initial_state.py``).

A study's store is a Dataset with ``estimate``, ``truth``, ``interval`` (Hessian intervals,
estimate -/+ 1.96 se), ``covered`` and ``success`` over ``dataset`` and the cell's dims.
"""

from __future__ import annotations

import numpy as np

Z95 = 1.959963984540054


def standard_errors(ds):
    """The standard errors behind the stored 95 % intervals."""
    return (ds["interval"].sel(bound="upper") - ds["interval"].sel(bound="lower")) / (2 * Z95)


def cell_line(label: str, ds, sel: dict, relative_error: bool = False) -> str:
    """One line: runs that succeeded, coverage with its Monte Carlo se, mean and sd of the
    z-scores and the median standard error per parameter (and the median relative error)."""
    ok = ds["success"].astype(bool)
    stderr = standard_errors(ds)
    z = ((ds["estimate"] - ds["truth"]) / stderr).where(ok).sel(sel)
    runs, n_ok = int(ok.sel(sel).count()), int(ok.sel(sel).sum())
    cov = ds["covered"].where(ok).sel(sel).mean("dataset").values
    mc = np.sqrt(cov * (1 - cov) / max(n_ok, 1))
    se = stderr.where(ok).sel(sel).median("dataset").values
    line = (
        f"{label} N={sel['n_points']:4d} noise={sel['noise_ratio']:.2f}  ok {n_ok:3d}/{runs}  "
        "coverage "
        + " ".join(f"{c:.2f}±{m:.2f}" for c, m in zip(cov, mc, strict=True))
        + "  mean z "
        + " ".join(f"{v:+.2f}" for v in z.mean("dataset").values)
        + "  sd z "
        + " ".join(f"{v:.2f}" for v in z.std("dataset").values)
        + "  median se "
        + " ".join(f"{v:.3g}" for v in se)
    )
    if relative_error:
        rel = np.abs(ds["estimate"] / ds["truth"] - 1).where(ok).sel(sel)
        line += "  median |rel err| " + " ".join(f"{v:.3f}" for v in rel.median("dataset").values)
    return line
