"""The seeds' baselines beside WENDy-MLE and output error on the shared benchmark problems.

For each problem (one setting each, below) a coverage study (:func:`pymc_wendy.run_coverage`)
runs every method on the same seeded data sets, each with its default covariance kind, and
this prints per problem and method: the mean relative coefficient error
``|p - p*| / |p*|`` (with its Monte Carlo standard error), the coverage of the 95 % intervals
averaged over the parameters (with its Monte Carlo standard error), the mean wall time per fit
and its ratio to WENDy-MLE's in the same run, and the share of fits that reported no success.

Methods: ``mle`` (WENDy-MLE, Hessian intervals), ``oels`` (output error with LSODA),
``deq`` (Matsuda & Miyatake) and ``oc`` (Brunel et al.), ``docs/baselines.md``.

Run:  python benchmarks/baselines.py [--datasets N] [--problems a,b] [--methods mle,oc]
      [--store DIR] [--json PATH] [--quick]

``--store`` keeps finished fits (one sub-directory per problem) so an interrupted run resumes;
``--quick`` is 4 data sets of two problems.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from pymc_wendy.studies.coverage import run_coverage, summarize

# (problem, points, noise ratio): mid-range settings of the papers
CASES = [
    ("lotka_volterra", 257, 0.05),
    ("fitzhugh_nagumo", 257, 0.05),
    ("lorenz", 513, 0.02),
    ("logistic", 257, 0.05),
]
METHODS = ("mle", "oels", "deq", "oc")
QUICK = {"datasets": 4, "problems": "lotka_volterra,fitzhugh_nagumo"}


def _row(summary, label: str) -> dict:
    s = summary.sel(estimator=label).isel(noise_ratio=0, n_points=0)
    cov = s["coverage"]
    n_ci = s["n_ci"] if "n_ci" in s else s["n"]
    # mean coverage over parameters; its MC error from the per-parameter binomial errors
    c = float(cov.mean())
    c_se = float(np.sqrt((s["coverage_se"] ** 2).sum()) / cov.size)
    return {
        "coef_error": float(s["coef_error_mean"]),
        "coef_error_se": float(s.get("coef_error_mean_se", np.nan)),
        "coef_error_median": float(s["coef_error_median"]),
        "coverage": c,
        "coverage_se": c_se,
        "wall_time": float(s["wall_time"]),
        "not_ok_rate": float(s["not_ok_rate"]),
        "n": int(np.min(n_ci)),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=50)
    parser.add_argument("--problems", default=",".join(c[0] for c in CASES))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--store", default=None, help="resume directory")
    parser.add_argument("--json", default=None, help="write the table here")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.datasets, args.problems = QUICK["datasets"], QUICK["problems"]
    wanted = [p.strip() for p in args.problems.split(",") if p.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    out: dict = {"datasets": args.datasets, "methods": methods, "problems": {}}
    header = (
        f"{'problem':<17} {'pts':>4} {'noise':>5} {'method':<6} {'rel. error':>17} "
        f"{'coverage 95 %':>15} {'s / fit':>8} {'x MLE':>6} {'not ok':>6}"
    )
    print(header)
    print("-" * len(header))
    for name, n_points, nr in [c for c in CASES if c[0] in wanted]:
        start = time.perf_counter()
        ds = run_coverage(
            name,
            methods=methods,
            noise_ratios=[nr],
            n_points=[n_points],
            n_datasets=args.datasets,
            store=None if args.store is None else os.path.join(args.store, name),
            max_workers=args.workers,
        )
        summary = summarize(ds)
        rows = {str(lab): _row(summary, str(lab)) for lab in ds["estimator"].values}
        mle_time = next((r["wall_time"] for k, r in rows.items() if k.startswith("mle")), np.nan)
        for label, r in rows.items():
            ratio = r["wall_time"] / mle_time
            print(
                f"{name:<17} {n_points:>4} {nr:>5.0%} {label.split('-')[0]:<6} "
                f"{r['coef_error']:>9.2e} ± {r['coef_error_se']:.1e} "
                f"{r['coverage']:>7.3f} ± {r['coverage_se']:.3f} "
                f"{r['wall_time']:>8.2f} {ratio:>6.1f} {r['not_ok_rate']:>6.0%}",
                flush=True,
            )
        out["problems"][name] = {
            "n_points": n_points,
            "noise_ratio": nr,
            "rows": rows,
            "study_seconds": time.perf_counter() - start,
        }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


if __name__ == "__main__":
    main()
