"""Wall time and coefficient error of the estimators on the benchmark problems.

For every problem, one representative setting (noise ratio and number of points below), and
``--datasets`` seeded data sets, each of ``mle``, ``irls``, ``oels`` and ``hybrid`` is run from the
same initial guess ``p0_j = p*_j (1 + U(-0.25, 0.25))`` (WENDy 2023 sec. 4.3: the right sign, about
25 % off), with the problem's bounds where it has them. Output error fits ``p`` and ``u0`` and is
allowed to run to convergence (``max_nfev = 2000``, as WENDy 2023 Table 3); its starting ``u0`` is
the data's (a local parabola at ``t0``), since the true one is unknown in practice.

Printed per problem and method: median wall time (including building the likelihood or compiling
the sensitivity equations' right-hand side, after one untimed warm-up per problem so numba's
compile time is not counted), median and maximum relative coefficient error ``|p - p*| / |p*|``,
and the number of fits that did not report success. The last table gives the ratios output error
/ WENDy-MLE measured in the same run.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/estimators.py [--datasets N] [--problems a,b]
      [--methods mle,irls] [--json PATH]

``--methods`` restricts the run to some estimators (the ratio table needs ``mle`` and ``oels``);
the MLE rows also print the range of the wall times.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from pymc_wendy import FitWarning, fit  # noqa: E402
from pymc_wendy.problems import get_problem  # noqa: E402

# (problem, fine grid points, subsample, noise ratio): the papers' mid-range settings
CASES = [
    ("logistic", 1025, 2, 0.10),
    ("lotka_volterra", 1025, 2, 0.10),
    ("fitzhugh_nagumo", 1025, 2, 0.10),
    ("hindmarsh_rose", 1025, 1, 0.02),
    ("protein_transduction", 1025, 2, 0.05),
    ("lorenz", 1025, 1, 0.05),
    ("goodwin_2d", 1025, 2, 0.05),
    ("goodwin_3d", 1025, 2, 0.05),
    ("sir_tdi", 1025, 2, 0.05),
]
METHODS = ("mle", "irls", "oels", "hybrid")
OE_OPTIONS = {"max_nfev": 2000}


def _start(p_true: np.ndarray, bounds, rng: np.random.Generator) -> np.ndarray:
    p0 = p_true * (1.0 + rng.uniform(-0.25, 0.25, p_true.size))
    if bounds is not None:
        lo, hi = np.array(bounds).T
        p0 = np.clip(p0, lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo))
    return p0


def _fit(prob, data, method: str, p0, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        return fit(
            prob.model,
            data.t,
            data.U,
            method=method,
            p0=p0,
            bounds=prob.bounds,
            noise=prob.noise,
            options=options,
        )


def _run(prob, data, method: str, p0) -> dict:
    options = OE_OPTIONS if method in ("oels", "hybrid") else None
    t0 = time.perf_counter()
    res = _fit(prob, data, method, p0, options)
    wall = time.perf_counter() - t0
    err = float(np.linalg.norm(res.x - prob.p_true) / np.linalg.norm(prob.p_true))
    return {
        "time": wall,
        "error": err,
        "success": bool(res.success),
        "status": res.status,
        "x": np.asarray(res.x, dtype=float).tolist(),
    }


def _warm_up(prob, data) -> None:
    """Compile the numba kernels of this model once, untimed."""
    p0 = np.asarray(prob.p_true, dtype=float)
    for method, options in (("mle", {"maxiter": 1}), ("oels", {"max_nfev": 1})):
        _fit(prob, data, method, p0, options)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=5)
    parser.add_argument("--problems", default=",".join(c[0] for c in CASES))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--json", default=None, help="also write the per-fit records here")
    args = parser.parse_args(argv)
    wanted = [p.strip() for p in args.problems.split(",") if p.strip()]
    cases = [c for c in CASES if c[0] in wanted]
    methods = [m for m in METHODS if m in args.methods.split(",")]
    records: dict = {}
    header = (
        f"{'problem':<21} {'pts':>5} {'noise':>5} {'method':<7} {'median s':>9} "
        f"{'median err':>10} {'max err':>9} {'not ok':>6}"
    )
    print(header)
    print("-" * len(header))
    for name, n_points, subsample, nr in cases:
        prob = get_problem(name)
        rows = {m: [] for m in methods}
        for seed in range(args.datasets):
            data = prob.simulate(n_points=n_points, subsample=subsample, noise_ratio=nr, seed=seed)
            if seed == 0:
                _warm_up(prob, data)
            p0 = _start(prob.p_true, prob.bounds, np.random.default_rng(10_000 + seed))
            for method in methods:
                rows[method].append(_run(prob, data, method, p0))
        records[name] = {"n_points": len(data.t), "noise_ratio": nr, "runs": rows}
        for method in methods:
            times = np.array([r["time"] for r in rows[method]])
            errs = np.array([r["error"] for r in rows[method]])
            bad = sum(not r["success"] for r in rows[method])
            spread = f"  ({times.min():.2f}-{times.max():.2f} s)" if method == "mle" else ""
            print(
                f"{name:<21} {len(data.t):>5} {nr:>5.0%} {method:<7} {np.median(times):>9.2f} "
                f"{np.median(errs):>10.2e} {errs.max():>9.2e} {bad:>6}{spread}",
                flush=True,
            )
    if not {"mle", "oels"} <= set(methods):
        _dump(args.json, records)
        return records
    print()
    print(f"{'problem':<21} {'OE/MLE time':>11} {'OE/MLE median err':>17}")
    for name, rec in records.items():
        med = {
            m: (
                np.median([r["time"] for r in rec["runs"][m]]),
                np.median([r["error"] for r in rec["runs"][m]]),
            )
            for m in ("mle", "oels")
        }
        print(
            f"{name:<21} {med['oels'][0] / med['mle'][0]:>11.2f} "
            f"{med['oels'][1] / med['mle'][1]:>17.2f}"
        )
    _dump(args.json, records)
    return records


def _dump(path, records) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(records, fh, indent=1)


if __name__ == "__main__":
    main()
