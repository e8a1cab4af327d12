"""Missing values: WENDy-MLE with entries missing at random against the complete data.

Lotka-Volterra, 257 points, 10 % noise, ``--datasets`` seeded data sets. In each, a fraction
``--missing`` of the entries (not rows) is set to NaN at random; ``fit`` leaves out the time
points with a missing entry (``docs/data.md``). Printed per parameter: the mean and mean
absolute difference of the estimates from the complete-data fit in units of the
complete-data standard error, the standard-error ratio, and the coverage of 95 % intervals
(Hessian) of the complete and the gappy fits with its Monte Carlo standard error.

Run:  python benchmarks/missing_values.py [--datasets 200] [--missing 0.1] [--seed 0]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import pymc_wendy as pw  # noqa: E402


def _one(prob, seed: int, missing: float) -> dict:
    data = prob.simulate(n_points=257, noise_ratio=0.1, seed=seed)
    U = data.U.copy()
    rng = np.random.default_rng(10_000 + seed)
    U[rng.random(U.shape) < missing] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = pw.fit(prob.model, data.t, data.U)
        gappy = pw.fit(prob.model, data.t, U)
    return {
        "shift": (gappy.x - full.x) / full.stderr,
        "se_ratio": gappy.stderr / full.stderr,
        "cover_full": np.abs(full.x - prob.p_true) < 1.96 * full.stderr,
        "cover_gappy": np.abs(gappy.x - prob.p_true) < 1.96 * gappy.stderr,
        "rows_left_out": int(data.t.size - gappy.t.size),
        "success": bool(full.success and gappy.success),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=200)
    ap.add_argument("--missing", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    prob = pw.get_problem("lotka_volterra")
    every = [_one(prob, args.seed + i, args.missing) for i in range(args.datasets)]
    runs = [r for r in every if r["success"]]
    get = lambda k: np.array([r[k] for r in runs])  # noqa: E731
    n = len(runs)
    mc = np.sqrt(0.95 * 0.05 / n)
    print(f"Lotka-Volterra, 257 points, 10 % noise, {n} data sets, {args.missing:.0%} of entries")
    print(f"missing at random; time points left out: median {np.median(get('rows_left_out')):.0f}")
    print(f"both fits successful: {n} of {len(every)} (the others are left out below)")
    print(f"coverage Monte Carlo s.e.: {mc:.3f}")
    print("param  mean shift/se  mean |shift|/se  se ratio  coverage full  coverage gappy")
    shift = get("shift")
    for j, name in enumerate(prob.model.params):
        print(
            f"{name:5s}  {shift[:, j].mean():13.3f}  {np.abs(shift[:, j]).mean():15.3f}"
            f"  {get('se_ratio')[:, j].mean():8.3f}  {get('cover_full')[:, j].mean():13.3f}"
            f"  {get('cover_gappy')[:, j].mean():14.3f}"
        )


if __name__ == "__main__":
    main()
