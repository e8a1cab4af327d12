"""Coverage of the weak stage's 95 % intervals under the observation models (issue 56).

Per cell, ``--n-datasets`` simulated data sets fitted by ``pw.fit`` (WENDy-MLE, or with
``--method hybrid`` / ``oels`` output error weighted per entry) with the observation model
that made them. Count cells: counts drawn around a catalogue solution
rescaled to the cell's means (the negative binomial's dispersion estimated by the filter's
moment fit unless ``--known-alpha``). ``pk_doses_prop``: ``pk_oral_doses`` observed in C with
10 % proportional error and C = 0 before the first dose, fitted through its input-output
equation with ``bias_correction="profile"`` as docs/doses.md does. Printed per cell and
parameter: relative bias, relative RMSE and the coverage of the 95 % intervals, with its
Monte Carlo standard error. Goal: coverage 0.93-0.97 over 200 data sets per cell.

Every finished data set is appended to ``<store>/<cell>.jsonl`` (default under
``benchmarks/results/observation_coverage/``): interrupt and rerun to resume.

Run:  python benchmarks/observation_coverage.py [--cells logistic_poisson,pk_doses_prop]
          [--n-datasets 200] [--known-alpha] [--method hybrid]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np

import pymc_wendy as pw
from pymc_wendy._progress import ProgressBar

HERE = Path(__file__).resolve().parent
#: cell: (problem, scale of the solution, subsample of 1025 points, generating model)
CELLS = {
    "pk_doses_prop": ("pk_oral_doses", 1.0, None, pw.Proportional()),
    "logistic_poisson": ("logistic", 100.0, 4, pw.Poisson()),
    "logistic_nb": ("logistic", 100.0, 4, pw.NegativeBinomial(20.0)),
    "lv_poisson": ("lotka_volterra", 30.0, 4, pw.Poisson()),
    "lv_nb": ("lotka_volterra", 30.0, 4, pw.NegativeBinomial(20.0)),
}


def _truth(problem: str, scale: float, subsample: int):
    """The problem's solution times ``scale`` and the parameters that produce it: in the
    catalogue's logistic and Lotka-Volterra models the coefficient of every quadratic term
    scales with ``1 / scale``."""
    prob = pw.get_problem(problem)
    if subsample is None:  # simulated per data set (pk_doses_prop)
        return prob, None, None, prob.p_true
    data = prob.simulate(noise_ratio=0.0, subsample=subsample)
    per_param = {"logistic": [1.0, 1.0 / scale], "lotka_volterra": [1, 1 / scale, 1, 1 / scale]}
    return prob, data.t, data.U_true * scale, prob.p_true * np.array(per_param[problem])


def _pk_doses_fit(prob, seed: int):
    """One ``pk_oral_doses`` data set at 10 % proportional error, fitted in C alone."""
    data = prob.simulate(noise="proportional", noise_ratio=0.1, seed=seed)
    io = pw.input_output(prob.model, "C")
    keep = np.isfinite(data.U[:, 1])
    return pw.fit(
        io.model, data.t[keep], data.U[keep, 1:], inputs=io.inputs(prob.inputs),
        initial_state=[0.0, 0.0], bounds=prob.bounds, noise="proportional",
        bias_correction="profile",
    )  # fmt: skip


def _one(prob, t, U_true, p, generating, fitted, seed: int, method: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if prob.name == "pk_oral_doses":
            res = _pk_doses_fit(prob, seed)
        else:
            U = generating.draw(U_true, None, np.random.default_rng(seed))
            res = pw.fit(prob.model, t, U, noise=fitted, method=method)
    lo, hi = res.conf_int().T
    return {
        "seed": seed,
        "x": res.x.tolist(),
        "covered": ((lo < p) & (p < hi)).tolist(),
        "success": bool(res.success),
    }


def run_cell(name: str, args) -> None:
    problem, scale, subsample, generating = CELLS[name]
    prob, t, U_true, p = _truth(problem, scale, subsample)
    fitted = generating
    if generating.name == "negbinomial" and not args.known_alpha:
        fitted = pw.NegativeBinomial()
    suffix = ("_known" if args.known_alpha else "") + (
        "" if args.method == "mle" else f"_{args.method}"
    )
    store = Path(args.store) / f"{name}{suffix}.jsonl"
    store.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["seed"] for line in store.read_text().splitlines()} if (
        store.exists()
    ) else set()  # fmt: skip
    todo = [s for s in range(args.n_datasets) if s not in done]
    bar = ProgressBar(True, name, args.n_datasets, "", completed=len(done))
    for seed in todo:
        record = _one(prob, t, U_true, p, generating, fitted, seed, args.method)
        with store.open("a") as f:
            f.write(json.dumps(record) + "\n")
        bar.update(advance=1)
    bar.close()
    records = [json.loads(line) for line in store.read_text().splitlines()]
    records = [r for r in records if r["seed"] < args.n_datasets]
    x = np.array([r["x"] for r in records])
    err = (x - p) / np.abs(p)
    cov = np.array([r["covered"] for r in records]).mean(axis=0)
    n = len(records)
    where = "" if t is None else f", {t.size} points, means {U_true.min():.1f}-{U_true.max():.0f}"
    print(
        f"{name}: {n} data sets{where}, fitted {fitted} by {args.method}; success "
        f"{sum(r['success'] for r in records)}/{n}"
    )
    for j, pname in enumerate(prob.model.params):
        print(
            f"  {pname}: bias {err[:, j].mean():+.4f}, RMSE {np.sqrt(np.mean(err[:, j] ** 2)):.4f}"
            f", coverage {cov[j]:.3f} +- {np.sqrt(cov[j] * (1 - cov[j]) / n):.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--n-datasets", type=int, default=200)
    parser.add_argument("--known-alpha", action="store_true")
    parser.add_argument(
        "--method", default="mle", choices=["mle", "hybrid", "oels"],
        help="the estimator of the count cells (pk_doses_prop is always the profile-corrected MLE)",
    )  # fmt: skip
    parser.add_argument("--store", default=str(HERE / "results" / "observation_coverage"))
    args = parser.parse_args()
    for name in args.cells.split(","):
        run_cell(name, args)


if __name__ == "__main__":
    main()
