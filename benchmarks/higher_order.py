"""The head-acceleration study of Carey & Ramsay (Data2LD, seed 004, Tables 1 and 2).

``x'' = -beta0 x - beta1 x' + alpha u(t)``, ``u`` a unit pulse on [14, 15], ``x(0) = x'(0) =
0``, truth (0.05, 0.15, 0.39); N = 21, 51, 101 equally spaced points on [0, 60]; noise sd
``sigma x range(x)`` with sigma = 0.01, 0.05, 0.10 (``pw.get_problem("head_acceleration")``).
Methods: our WENDy-MLE (noise from the fit's residuals, ``fit(sigma="residual")``), output
error least squares over (p, x(0), x'(0)) (``"oels"``, the paper's NLS), our
Data2LD (``fit(method="data2ld")``), NUTS on ``WeakODELikelihood`` and replica-exchange
tempering ``sample_sft`` (both with the same noise level and uniform priors on the problem's
bounds). Printed per cell: 100 x RMSE of each parameter beside the Cramer-Rao bound of
output-error least squares with the initial state known (computed here from forward
sensitivities) and the paper's Data2LD row; coverage of the 95 % intervals beside the
paper's Data2LD row; the median time per data set.

Every run is kept in ``benchmarks/results/higher_order/<group>/runs.jsonl`` as it finishes
(:func:`pymc_wendy.studies.coverage.run_coverage`), so an interrupted study resumes where it stopped
and can be extended with more data sets.

Usage::

    python benchmarks/higher_order.py                    # 200 data sets per cell (frequentist),
                                                         # 40 (NUTS, SFT)
    python benchmarks/higher_order.py --n 1000 --n-bayes 100 --methods mle,data2ld
    python benchmarks/higher_order.py --quick            # 10 per cell, N = 51 only
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import pymc_wendy as pw
from pymc_wendy.studies.coverage import run_coverage

OUT = Path(__file__).parent / "results"
SIGMAS = (0.01, 0.05, 0.10)
NS = (21, 51, 101)
PARAMS = ("beta0", "beta1", "alpha")
# The paper's Tables 1 and 2, Data2LD rows: {sigma: {N: (beta0, beta1, alpha)}}
PAPER_RMSE = {
    0.10: {21: (0.25, 1.79, 4.12), 51: (0.17, 1.19, 2.37), 101: (0.11, 0.12, 1.69)},
    0.05: {21: (0.11, 0.86, 1.84), 51: (0.07, 0.62, 1.02), 101: (0.06, 0.40, 0.96)},
    0.01: {21: (0.03, 0.18, 0.03), 51: (0.02, 0.10, 0.02), 101: (0.01, 0.08, 0.01)},
}
PAPER_COVERAGE = {
    0.10: {21: (88, 86, 87), 51: (90, 89, 86), 101: (92, 91, 87)},
    0.05: {21: (82, 81, 86), 51: (91, 91, 89), 101: (92, 85, 86)},
    0.01: {21: (82, 85, 89), 51: (82, 90, 84), 101: (91, 90, 94)},
}
PAPER_SECONDS = {"data2ld": 3.64, "sft": 3677.57, "nls": 284.67}
FREQUENTIST = ("mle", "mle+profile", "oels", "data2ld")
BAYES = ("nuts", "nuts+profile", "sft")


def cramer_rao(prob: pw.Problem, n: int, sigma: float) -> np.ndarray:
    """Standard deviations of the Cramer-Rao bound of output error with ``x(0), x'(0)``
    known: ``s^2 (S^T S)^{-1}``, ``S`` the sensitivities of ``x(t_m)`` (central differences
    of tight solves), ``s = sigma x range(x)``."""
    t = np.linspace(*prob.t_span, n)
    p = np.asarray(prob.p_true, dtype=float)
    inputs = prob.simulate(n_points=n, noise_ratio=sigma, seed=0).inputs

    def x(q):
        return pw.solve(prob.model, q, prob.u0, t, inputs=inputs, rtol=1e-12, atol=1e-14)[:, 0]

    x0 = x(p)
    S = np.column_stack(
        [
            (x(p + h * e) - x(p - h * e)) / (2 * h)
            for e, h in zip(np.eye(p.size), 1e-6 * p, strict=True)
        ]
    )
    s = sigma * (x0.max() - x0.min())
    return s * np.sqrt(np.diag(np.linalg.inv(S.T @ S)))


def run(methods, n_datasets: int, n_bayes: int, ns, sigmas, workers, store: Path, sample, execute):
    prob = pw.get_problem("head_acceleration")
    out = {}
    groups = [
        ("frequentist", [m for m in methods if m in FREQUENTIST], n_datasets, {}),
        ("bayes", [m for m in methods if m in BAYES], n_bayes, sample),
    ]
    for group, ms, n, sample_options in groups:
        if not ms or n < 1 or not (execute or (store / group / "runs.jsonl").exists()):
            continue
        start = time.perf_counter()
        ds = run_coverage(
            prob,
            methods=ms,
            noise_ratios=sigmas,
            n_points=ns,
            n_datasets=n,
            seed=2024,
            store=store / group,
            max_workers=workers,
            fit_options={"sigma": "residual"},
            sample_options=sample_options,
            execute=execute,
            progress=execute,
        )
        print(f"{group}: {time.perf_counter() - start:.0f} s")
        out[group] = ds
    return prob, out


def summarise(prob: pw.Problem, results: dict, ns, sigmas) -> dict:
    truth = np.asarray(prob.p_true, dtype=float)
    table = {}
    for ds in results.values():
        for label in ds["estimator"].values:
            for s in sigmas:
                for n in ns:
                    cell = ds.sel(estimator=label, noise_ratio=s, n_points=n)
                    est = cell["estimate"].values  # (dataset, param)
                    ok = np.all(np.isfinite(est), axis=1)
                    if not ok.any():  # not run (yet)
                        continue
                    err = est[ok] - truth
                    covered = cell["covered"].values[ok]
                    table.setdefault(label, {})[f"{s}|{n}"] = {
                        "n": int(ok.sum()),
                        "failed": int((~ok).sum()),
                        "rmse100": (100 * np.sqrt(np.mean(err**2, axis=0))).tolist(),
                        "bias_in_sd": (err.mean(axis=0) / err.std(axis=0, ddof=1)).tolist(),
                        "coverage": np.nanmean(covered, axis=0).tolist(),
                        "median_seconds": float(np.nanmedian(cell["wall_time"].values)),
                    }
    return table


def report(prob: pw.Problem, table: dict, ns, sigmas) -> None:
    print("\n100 x RMSE (beta0, beta1, alpha); CRB = Cramer-Rao bound, x(0) and x'(0) known")
    for s in sigmas:
        for n in ns:
            crb = 100 * cramer_rao(prob, n, s)
            print(
                f"sigma={s:.2f} N={n:3d}  CRB {_fmt(crb)}  paper Data2LD {_fmt(PAPER_RMSE[s][n])}"
            )
            for label, cells in table.items():
                c = cells.get(f"{s}|{n}")
                if c:
                    print(
                        f"{'':16s}{label:18s} {_fmt(c['rmse100'])}  "
                        f"({c['n']} data sets, {c['failed']} failed, "
                        f"{c['median_seconds']:.2f} s each)"
                    )
    print("\nCoverage of 95 % intervals (beta0, beta1, alpha); paper Data2LD beside")
    for s in sigmas:
        for n in ns:
            paper = np.array(PAPER_COVERAGE[s][n]) / 100
            print(f"sigma={s:.2f} N={n:3d}  paper Data2LD {_fmt(paper)}")
            for label, cells in table.items():
                c = cells.get(f"{s}|{n}")
                if c:
                    mc = np.sqrt(0.95 * 0.05 / max(c["n"], 1))
                    print(f"{'':16s}{label:18s} {_fmt(c['coverage'])}  (MC se {mc:.3f})")


def markdown(prob: pw.Problem, table: dict, ns, sigmas) -> str:
    """The study as two markdown tables (RMSE with the bound and the paper; coverage)."""
    labels = list(table)
    head = "| sigma | N | CRB | paper Data2LD | " + " | ".join(labels) + " |"
    rule = "|" + "---|" * (4 + len(labels))
    rmse = ["100 x RMSE (beta0 / beta1 / alpha)", "", head, rule]
    cover = [
        "Coverage of 95 % intervals (beta0 / beta1 / alpha)",
        "",
        head.replace("CRB | ", ""),
        rule[:-4],
    ]
    for s in sigmas:
        for n in ns:
            cells = [table[lab].get(f"{s}|{n}") for lab in labels]
            crb = 100 * cramer_rao(prob, n, s)
            rmse.append(
                f"| {s:.2f} | {n} | {_slash(crb)} | {_slash(PAPER_RMSE[s][n])} | "
                + " | ".join(_slash(c["rmse100"]) if c else "" for c in cells)
                + " |"
            )
            cover.append(
                f"| {s:.2f} | {n} | {_slash(np.array(PAPER_COVERAGE[s][n]) / 100, 2)} | "
                + " | ".join(_slash(c["coverage"], 3) if c else "" for c in cells)
                + " |"
            )
    sizes = ", ".join(f"{lab}: {max(c['n'] for c in table[lab].values())}" for lab in labels)
    times = ", ".join(
        f"{lab}: {np.median([c['median_seconds'] for c in table[lab].values()]):.2f} s"
        for lab in labels
    )
    return "\n".join(
        [
            *rmse,
            "",
            *cover,
            "",
            f"Data sets per cell: {sizes}.",
            f"Median time per data set: {times}.",
        ]
    )


def _slash(v, digits: int = 3) -> str:
    return " / ".join(f"{x:.{digits}f}" for x in v)


def _fmt(v) -> str:
    return " ".join(f"{x:7.3f}" for x in v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default="mle,data2ld,nuts,sft")
    ap.add_argument("--n", type=int, default=200, help="data sets per cell (mle, data2ld)")
    ap.add_argument("--n-bayes", type=int, default=40, help="data sets per cell (nuts, sft)")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: CPUs)")
    ap.add_argument("--quick", action="store_true", help="10 data sets, N = 51 only")
    ap.add_argument("--store", type=Path, default=OUT / "higher_order")
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--report", action="store_true", help="only report what the stores hold")
    ap.add_argument("--markdown", action="store_true", help="also print markdown tables")
    args = ap.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    ns, n, n_bayes, store = NS, args.n, args.n_bayes, args.store
    if args.quick:
        ns, n, n_bayes, store = (51,), 10, 4, store.with_name(store.name + "_quick")
    sample = {"draws": args.draws, "tune": args.tune, "chains": 2}
    if args.report:
        methods = [*FREQUENTIST, *BAYES]
    run_args = (n, n_bayes, ns, SIGMAS, args.workers, store, sample, not args.report)
    prob, results = run(methods, *run_args)
    table = summarise(prob, results, ns, SIGMAS)
    summary = store / "summary.json"
    if summary.exists():  # keep methods whose runs this checkout does not hold (or did not run)
        table = {**json.loads(summary.read_text()), **table}
    report(prob, table, ns, SIGMAS)
    if args.markdown:
        print("\n" + markdown(prob, table, ns, SIGMAS))
    summary.write_text(json.dumps(table, indent=1))
    print(f"\nwritten: {summary}")


if __name__ == "__main__":
    main()
