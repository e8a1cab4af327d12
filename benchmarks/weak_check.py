"""The weak-versus-exact check (``pw.check_weak``) as a classifier, against the full correction.

Per cell, ``--n-datasets`` simulated data sets through the coverage study's ``"forward"``
method: ``pw.sample`` on the weak likelihood (the study's priors, the noise level inferred),
``pw.check_weak`` on its draws, then ``pw.forward_correction`` with its defaults. The
correction's posterior is the reference: a data set's weak posterior is "off" when some
posterior mean of the exact posterior lies more than 0.3 weak sds from the weak one, or
some exact sd is outside 0.8-1.25 times the weak one (the check's own thresholds). Printed
per cell: how often the check stayed silent where the weak posterior was within 0.3 sd
(goal: at least 95 %), how often it warned where it was not (goal: at least 95 %), the
skipped and failed checks, and the check's time against the weak sampling time (goal: at
most 10 %).

Every finished data set is appended to the store (``--store``, default under
``benchmarks/results/weak_check/``): interrupt and rerun to resume.

``--sigma true`` gives the likelihood the noise level that generated each data set instead
of inferring it: an inferred noise level's weak posterior is rarely within 0.3 sd of the exact
one (its sd is 0.56-0.71 times the weak one, docs/validation.md), so the check's silent side
is measured there.

Run:  python benchmarks/weak_check.py [--cells lv21,fhn10] [--n-datasets 100] [--workers 2]
      [--sigma true]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import pymc_wendy as pw

HERE = Path(__file__).resolve().parent
SHIFT = 0.3
SD_RATIO = (0.8, 1.25)
CELLS = {
    "lv21": ("lotka_volterra", 0.1, 21),
    "lv129": ("lotka_volterra", 0.1, 129),
    **{
        f"{short}{int(100 * noise)}": (problem, noise, 513)
        for short, problem in [
            ("logistic", "logistic"), ("lv", "lotka_volterra"), ("fhn", "fitzhugh_nagumo"),
            ("goodwin2d", "goodwin_2d"), ("goodwin3d", "goodwin_3d"), ("lorenz", "lorenz"),
        ]
        for noise in (0.05, 0.1, 0.2)
    },
}  # fmt: skip


def run_cell(name: str, args) -> dict:
    problem, noise, n_points = CELLS[name]
    # a given noise level gets its own store: a study resumes only with its own settings
    store = Path(args.store) / (name if args.sigma == "inferred" else f"{name}-sigma-true")
    pw.run_coverage(
        problem, methods=["forward"], noise_ratios=[noise], n_points=[n_points],
        n_datasets=args.n_datasets, store=store, max_workers=args.workers,
        sample_options={"draws": 1000, "tune": 1000, "chains": 2},
        fit_options={} if args.sigma == "inferred" else {"sigma": "true"},
    )  # fmt: skip
    records = [json.loads(line) for line in (store / "runs.jsonl").read_text().splitlines()]
    extra = [r["extra"] for r in records if r.get("extra") and "check_verdict" in r["extra"]]
    checked = [e for e in extra if e["check_verdict"] in ("agrees", "differs")]
    off = [
        e["exact_max_shift"] > SHIFT
        or not all(SD_RATIO[0] <= r <= SD_RATIO[1] for r in e["exact_sd_ratios"])
        for e in checked
    ]
    warned = [e["check_verdict"] == "differs" for e in checked]
    n_ok, n_off = off.count(False), off.count(True)
    silent = sum(not w for w, o in zip(warned, off, strict=True) if not o)
    caught = sum(w for w, o in zip(warned, off, strict=True) if o)
    ratio = [e["check_time_s"] / e["weak_time_s"] for e in extra]
    return {
        "cell": name,
        "sigma": args.sigma,
        "n": len(extra),
        "weak_within": n_ok,
        "silent_when_within": f"{silent}/{n_ok}",
        "weak_off": n_off,
        "warned_when_off": f"{caught}/{n_off}",
        "skipped": sum(e["check_verdict"] == "skipped" for e in extra),
        "failed": sum(e["check_verdict"] == "failed" for e in extra),
        "check_time_share_median": round(float(np.median(ratio)), 3) if ratio else None,
        "exact_shift_median": round(float(np.median([e["exact_max_shift"] for e in checked])), 2)
        if checked
        else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", default="lv21,lv129,fhn10")
    ap.add_argument("--n-datasets", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--store", default=str(HERE / "results" / "weak_check"))
    ap.add_argument(
        "--sigma", choices=["inferred", "true"], default="inferred",
        help="the noise level: inferred with the parameters, or the one that generated the data",
    )  # fmt: skip
    args = ap.parse_args()
    unknown = sorted(set(args.cells.split(",")) - set(CELLS))
    if unknown:
        ap.error(f"unknown cells {unknown}; choose from {sorted(CELLS)}")
    for name in args.cells.split(","):
        print(json.dumps(run_cell(name, args)), flush=True)


if __name__ == "__main__":
    main()
