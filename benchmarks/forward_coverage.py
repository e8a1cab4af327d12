"""Coverage of the forward-solve posterior (``pw.forward_correction``) over many data sets.

Per cell, ``--n-datasets`` simulated data sets, the coverage study's ``"forward"`` method:
``pw.sample`` on the weak likelihood (priors of the study, the noise level inferred,
``sigma ~ HalfNormal(sd of the data)`` per state), then ``pw.forward_correction`` with its
defaults. The equal-tailed 95 % credible interval of every parameter is checked against
the truth. The cells of issue 35: FitzHugh-Nagumo 513 points at 20 % noise, Lotka-Volterra
21 points at 10 %.

Every finished data set is appended to the store (``--store``, default under
``benchmarks/results/forward_coverage/``): interrupt and rerun to resume. Printed per cell:
coverage per parameter with its Monte Carlo standard error, the pooled coverage, the routes
taken, Pareto k, and the wall time per data set.

Run:  python benchmarks/forward_coverage.py [--cells lv21,fhn20] [--n-datasets 100]
          [--workers 2] [--store DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import pymc_wendy as pw
from pymc_wendy.studies.coverage import summarize

HERE = Path(__file__).resolve().parent
CELLS = {
    "lv21": ("lotka_volterra", 0.1, 21),
    "fhn20": ("fitzhugh_nagumo", 0.2, 513),
}


def run_cell(name: str, args) -> dict:
    problem, noise, n_points = CELLS[name]
    store = Path(args.store) / name
    ds = pw.run_coverage(
        problem, methods=["forward"], noise_ratios=[noise], n_points=[n_points],
        n_datasets=args.n_datasets, store=store, max_workers=args.workers,
        sample_options={"draws": 1000, "tune": 1000, "chains": 2},
    )  # fmt: skip
    summary = summarize(ds).sel(estimator="forward").squeeze()
    records = [json.loads(line) for line in (store / "runs.jsonl").read_text().splitlines()]
    extra = [r["extra"] for r in records if r.get("extra")]
    routes = [e["route"] for e in extra]
    return {
        "cell": name,
        "n": int(summary["n"].min()),
        "coverage": summary["coverage"].values.round(3).tolist(),
        "coverage_se": summary["coverage_se"].values.round(3).tolist(),
        "zscore_sd": summary["zscore_sd"].values.round(2).tolist(),
        "pooled": round(float(summary["coverage"].mean()), 3),
        "success_rate": round(1.0 - float(summary["not_ok_rate"]), 3),
        "routes": {r: routes.count(r) for r in sorted(set(routes))},
        "pareto_k_median": round(float(np.median([e["pareto_k"] for e in extra])), 3),
        "importance_ess_median": round(float(np.median([e["importance_ess"] for e in extra])), 1),
        "wall_s_median": round(float(summary["wall_time"]), 1),
        "params": [str(p) for p in summary["param"].values],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="lv21,fhn20")
    ap.add_argument("--n-datasets", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--store", default=str(HERE / "results" / "forward_coverage"))
    args = ap.parse_args()
    for name in args.cells.split(","):
        r = run_cell(name, args)
        cover = dict(zip(r["params"], r["coverage"], strict=True))
        print(
            f"\n{name}: {r['n']} data sets, coverage {cover} "
            f"(MC se {r['coverage_se']}, z sd {r['zscore_sd']}), pooled {r['pooled']}; "
            f"success {r['success_rate']}; routes {r['routes']}, median k "
            f"{r['pareto_k_median']}, median importance ESS {r['importance_ess_median']}; "
            f"mean {r['wall_s_median']} s per data set"
        )


if __name__ == "__main__":
    main()
