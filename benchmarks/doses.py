"""Repeated doses and unobserved states: recovery and coverage (issue 34).

WENDy-MLE with Hessian intervals, on

* ``pk_iv_doses``: one compartment, three intravenous boluses, the concentration observed
  (it jumps at each dose); also with the rows integrated across the jumps (``iv-across``,
  the ablation of the split at the doses);

and on the input-output equation in the observed concentration (``pw.input_output``), the
state at rest before the first dose known (``initial_state`` all zero), on

* ``pk_oral_doses``: one compartment, three oral doses, the gut unobserved (order 2);
* ``pk_two_compartment``: two compartments, three oral doses, gut and peripheral
  unobserved (order 3, with the dose's derivative);

each with the library's defaults (``mle-hessian``) and with the profile bias correction
(``mle+profile-hessian``). The data are
simulated from the latent model (every state), and only the concentration is kept, with
noise of ``noise_ratio`` times its own RMS.

Runs that report ``success=False`` are counted and leave the coverage. Finished runs are kept
in ``benchmarks/results/doses/<cell>/runs.jsonl`` (committed; rerunning does only what is
missing). Prints the coverage of 95 % intervals per parameter with its Monte Carlo standard
error, the mean and sd of the z-scores, the median standard error and the median relative
error.

Run:  python benchmarks/doses.py [--workers W] [--report-only] [--cells a,b]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
from pathlib import Path

import numpy as np
from _report import cell_line

import pymc_wendy as pw

ROOT = Path(__file__).resolve().parent / "results" / "doses"
N_DATASETS = 100


@dataclasses.dataclass(frozen=True, repr=False)
class ObservedProblem(pw.Problem):
    """A catalogue problem with unobserved states, seen through its input-output equation:
    ``model`` is the equation in the observed state, ``simulate`` solves the latent model
    and keeps the observed state."""

    latent: pw.Problem | None = None

    @classmethod
    def of(cls, prob: pw.Problem) -> ObservedProblem:
        io = pw.input_output(prob.model, prob.observed)
        return cls(
            **{f.name: getattr(prob, f.name) for f in dataclasses.fields(pw.Problem)}
            | {"model": io.model, "inputs": io.inputs(prob.inputs), "observed": None},
            latent=prob,
        )

    def simulate(self, **kwargs) -> pw.SimulatedData:
        # the latent problem puts noise on the observed state only, at its own scale
        d = self.latent.simulate(**kwargs)
        col = self.latent.model.states.index(self.model.states[0])
        return dataclasses.replace(
            d, U=d.U[:, [col]], U_true=d.U_true[:, [col]], sigma=d.sigma[[col]],
            states=self.model.states, inputs=self.inputs,
        )  # fmt: skip


def cells() -> dict[str, tuple[pw.Problem, list[int], list[float], dict]]:
    """``name -> (problem, n_points, noise ratios, fit options)``."""
    oral = ObservedProblem.of(pw.get_problem("pk_oral_doses"))
    two = ObservedProblem.of(pw.get_problem("pk_two_compartment"))
    iv = pw.get_problem("pk_iv_doses")
    return {
        "iv": (iv, [25, 49, 97], [0.05, 0.1], {}),
        # ablation: the rows integrated across the jumps (no split at the doses)
        "iv-across": (iv, [49, 97], [0.05], {"test_functions": {"breaks": ()}}),
        "oral": (oral, [25, 49, 97], [0.05, 0.1], {"initial_state": [0.0, 0.0]}),
        "two": (two, [289], [0.01, 0.05], {"initial_state": [0.0, 0.0, 0.0]}),
    }


def run(name: str, workers: int, execute: bool = True):
    prob, n_points, noise, opts = cells()[name]
    return pw.run_coverage(
        prob,
        methods=["mle-hessian", "mle+profile-hessian"],
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


def report(name: str, ds, twins: np.ndarray | None = None) -> None:
    ok = ds["success"].astype(bool)
    for est, n, noise in itertools.product(
        ds["estimator"].values, ds["n_points"].values, ds["noise_ratio"].values
    ):
        sel = {"n_points": n, "noise_ratio": noise, "estimator": est}
        print(cell_line(f"{name}-{est:22s}", ds, sel, relative_error=True))
        if twins is not None and len(twins) > 1:
            _report_twins(ds.sel(sel), ok.sel(sel), twins)


def _report_twins(ds, ok, twins: np.ndarray) -> None:
    """Which twin of the truth (the same observed curve, ``InputOutput.equivalent``) each fit
    found, and the coverage of that twin: what the data can determine."""
    est = ds["estimate"].values[ok.values]
    lo = ds["interval"].sel(bound="lower").values[ok.values]
    hi = ds["interval"].sel(bound="upper").values[ok.values]
    dist = np.max(np.abs(np.log(np.abs(est[:, None, :] / twins[None, :, :]))), axis=2)
    near = np.argmin(dist, axis=1)
    target = twins[near]
    cov = np.mean((lo <= target) & (target <= hi), axis=0)
    share = [int(np.sum(near == k)) for k in range(len(twins))]
    print(
        f"    twins {share} (truth first); coverage of the nearest twin "
        + " ".join(f"{c:.2f}" for c in cov)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--report-only", action="store_true", help="summarise the store only")
    ap.add_argument("--cells", default=",".join(cells()), help="comma-separated cell names")
    args = ap.parse_args()
    for name in args.cells.split(","):
        ds = run(name, args.workers, execute=not args.report_only)
        prob = cells()[name][0]
        twins = None
        if isinstance(prob, ObservedProblem):
            io = pw.input_output(prob.latent.model, prob.latent.observed)
            twins = io.equivalent(prob.p_true)
        report(name, ds, twins)


if __name__ == "__main__":
    main()
