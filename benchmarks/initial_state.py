"""Known initial states: what they add and whether the intervals stay honest (issue 34).

WENDy-MLE with Hessian intervals and the library's defaults, with and without the known
initial state (``fit(..., initial_state=u0, t0=0)``), on

* ``pk_oral`` (one oral dose at t = 0, ``C(0) = 0`` known), sampled from 0.5 h to 24 h: the
  rise before the first sample is not observed. The study's problem is the catalogue's with
  its time span starting at 0.5 h and its initial state the true ``C(0.5)``, so the data are
  those of the dose at 0; the known state is passed as ``t0 = 0``;
* ``lotka_volterra`` and ``logistic`` on their usual spans, the known state at the first
  sample.

Runs that report ``success=False`` are counted and leave the coverage. Finished runs are kept
in ``benchmarks/results/initial_state/<cell>/runs.jsonl`` (committed; rerunning does only what
is missing). Prints the coverage of 95 % intervals per parameter with its Monte Carlo standard
error, the mean and sd of the z-scores and the median standard error.

Run:  python benchmarks/initial_state.py [--workers W] [--report-only]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from _report import cell_line

import pymc_wendy as pw

ROOT = Path(__file__).resolve().parent / "results" / "initial_state"
N_DATASETS = 100


def _pk_from(first: float) -> pw.Problem:
    pk = pw.get_problem("pk_oral")
    c_first = pw.solve(pk.model, pk.p_true, pk.u0, [0.0, first])[-1]
    return dataclasses.replace(
        pk, name=f"pk_oral_from_{first:g}h", t_span=(first, pk.t_span[1]), u0=c_first
    )


def cells() -> dict[str, tuple[pw.Problem, list[int], list[float], dict]]:
    """``name -> (problem, n_points, noise ratios, fit options)``."""
    pk = _pk_from(0.5)
    lv, logistic = pw.get_problem("lotka_volterra"), pw.get_problem("logistic")
    known_pk = {"initial_state": [0.0], "t0": 0.0}
    out = {}
    for variant, opts in (("known", known_pk), ("free", {})):
        out[f"pk_oral-{variant}"] = (pk, [21, 41, 101], [0.05, 0.1], opts)
    for prob, noise in ((lv, [0.01, 0.05]), (logistic, [0.05])):
        for variant, opts in (("known", {"initial_state": prob.u0.tolist()}), ("free", {})):
            out[f"{prob.name}-{variant}"] = (prob, [101], noise, opts)
    return out


def run(name: str, workers: int, execute: bool = True):
    prob, n_points, noise, opts = cells()[name]
    return pw.run_coverage(
        prob,
        methods=["mle-hessian"],
        noise_ratios=noise,
        n_points=n_points,
        n_datasets=N_DATASETS,
        seed=34,
        store=ROOT / name,
        max_workers=workers,
        progress=execute,
        fit_options=opts,
        execute=execute,
    )


def report(name: str, ds) -> None:
    for n in ds["n_points"].values:
        for noise in ds["noise_ratio"].values:
            sel = {"n_points": n, "noise_ratio": noise, "estimator": ds["estimator"].values[0]}
            print(cell_line(f"{name:22s}", ds, sel))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--report-only", action="store_true", help="summarise the store only")
    ap.add_argument("--cells", default=",".join(cells()), help="comma-separated cell names")
    args = ap.parse_args()
    for name in args.cells.split(","):
        ds = run(name, args.workers, execute=not args.report_only)
        report(name, ds)


if __name__ == "__main__":
    main()
