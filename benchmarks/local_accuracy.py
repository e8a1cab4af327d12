"""Accuracy of local test functions against the default (SVD) ones, WENDy-MLE.

For FitzHugh-Nagumo and Lotka-Volterra at 10 % additive noise and a given number of points,
``--sets`` simulated data sets (seeds 0, 1, ...): the relative coefficient error
``||p_hat - p*|| / ||p*||`` and the coverage of the fit's intervals (share of parameters
with ``|p_hat_j - p*_j| < 2 se_j``, the WENDy-MLE papers' rule, Hessian covariance) of
``pw.fit`` with the default test functions and with ``test_functions="local"``; the mean,
its Monte Carlo standard error, the paired difference (local - default) and the wall time.
Prints one line per setting as it finishes.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/local_accuracy.py fitzhugh_nagumo 1025 --sets 20
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import pymc_wendy as pw


def one(problem, data, spec) -> tuple[float, float, float]:
    p_true = np.asarray(problem.p_true, dtype=float)
    t0 = time.perf_counter()
    res = pw.fit(problem.model, data.t, data.U, test_functions=spec)
    wall = time.perf_counter() - t0
    err = float(np.linalg.norm(res.x - p_true) / np.linalg.norm(p_true))
    cover = float(np.mean(np.abs(res.x - p_true) < 2.0 * res.stderr))
    return err, cover, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem")
    ap.add_argument("n_points", type=int)
    ap.add_argument("--sets", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.1)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    problem = pw.get_problem(args.problem)
    rows = {"default": [], "local": []}
    for seed in range(args.sets):
        data = problem.simulate(n_points=args.n_points, noise_ratio=args.noise, seed=seed)
        for label, spec in (("default", None), ("local", "local")):
            try:
                rows[label].append(one(problem, data, spec))
            except Exception as exc:  # a failed fit counts as a missing value, reported
                print(f"  {label} seed {seed}: {type(exc).__name__}: {exc}")
                rows[label].append((np.nan, np.nan, np.nan))
    d, loc = np.array(rows["default"]), np.array(rows["local"])
    n = len(d)
    diff = loc[:, 0] - d[:, 0]
    for label, a in (("default", d), ("local", loc)):
        print(
            f"{args.problem} {args.n_points} {label:>7} n={n}: err {np.nanmean(a[:, 0]):.4f} "
            f"+- {np.nanstd(a[:, 0]) / np.sqrt(n):.4f} (median {np.nanmedian(a[:, 0]):.4f}), "
            f"coverage {np.nanmean(a[:, 1]):.3f} +- {np.nanstd(a[:, 1]) / np.sqrt(n):.3f}, "
            f"time {np.nanmean(a[:, 2]):.2f} s"
        )
    print(
        f"{args.problem} {args.n_points} local - default err: {np.nanmean(diff):+.4f} "
        f"+- {np.nanstd(diff) / np.sqrt(n):.4f}; local better in "
        f"{int(np.sum(diff < 0))}/{n}",
        flush=True,
    )


if __name__ == "__main__":
    main()
