"""Sparse sweep: coverage of WENDy-MLE on short series (issue 33, ``docs/validation.md``).

Logistic growth and Lotka-Volterra at 11, 21 and 41 points, 5 and 10 % noise, 200 seeded data
sets per cell, WENDy-MLE with Hessian intervals and the library's defaults (on these short
series the noise level comes from the forward residuals, ``fit(sigma=None)``), and with the
high-order filter's noise estimate (``sigma="filter"``, WENDy's choice; 50 data sets per cell)
for comparison. Runs that report ``success=False`` (unidentifiable, or an ODE solution that
explains none of the data: ``docs/data.md``) are counted and leave the coverage: it is that
of the intervals a user is given as successful.

Finished runs are kept in ``benchmarks/results/sparse/<problem>-<variant>/runs.jsonl``
(committed; rerunning does only what is missing). Prints, per cell, the share of runs that
failed and the coverage per parameter with its Monte Carlo standard error.

Run:  python benchmarks/sparse_series.py [--variants default,filter] [--workers W]
      [--report-only]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

import pymc_wendy as pw
from pymc_wendy.studies.coverage import summarize

ROOT = Path(__file__).resolve().parent / "results" / "sparse"
PROBLEMS = ["logistic", "lotka_volterra"]
NOISE = [0.05, 0.1]
N_POINTS = [11, 21, 41]
VARIANTS = {"default": ({}, 200), "filter": ({"sigma": "filter"}, 50)}


def run(problem: str, variant: str, workers: int, execute: bool = True):
    options, n_datasets = VARIANTS[variant]
    return pw.run_coverage(
        problem,
        methods=["mle-hessian"],
        noise_ratios=NOISE,
        n_points=N_POINTS,
        n_datasets=n_datasets,
        seed=33,
        store=ROOT / f"{problem}-{variant}",
        max_workers=workers,
        progress=execute,
        fit_options=options,
        execute=execute,
    )


def report(problem: str, variant: str, ds) -> None:
    # what a user gets: intervals of the fits that report success
    ok = ds["success"].astype(bool)
    kept = ds.copy()
    for name in ("estimate", "covered", "interval"):
        kept[name] = ds[name].where(ok)
    s = summarize(kept).squeeze("estimator")
    not_ok = (1 - ds["success"].mean("dataset")).squeeze("estimator")
    print(
        f"\n## {problem}, {variant} ({int(ds.attrs['n_done'])} of {int(ds.attrs['n_runs'])} runs)"
    )
    print("| N | noise | success=False | coverage per parameter (MC s.e.) | z mean | z sd |")
    print("|---|---|---|---|---|---|")
    for n in s.n_points.values:
        for nr in s.noise_ratio.values:
            c = s.sel(n_points=n, noise_ratio=nr)
            cov = " ".join(
                f"{float(v):.3f}" if np.isfinite(v) else "-" for v in c["coverage"].values
            )
            se = float(np.nanmax(c["coverage_se"].values)) if c["n_ci"].max() > 0 else np.nan
            zm = " ".join(f"{float(v):+.2f}" for v in c["zscore_mean"].values)
            zs = " ".join(f"{float(v):.2f}" for v in c["zscore_sd"].values)
            fail = float(not_ok.sel(n_points=n, noise_ratio=nr))
            print(f"| {n} | {nr:.0%} | {fail:.2f} | {cov} ({se:.3f}) | {zm} | {zs} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="default,filter")
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    for variant in args.variants.split(","):
        for problem in args.problems.split(","):
            ds = run(problem, variant, args.workers, execute=not args.report_only)
            report(problem, variant, ds)


if __name__ == "__main__":
    main()
