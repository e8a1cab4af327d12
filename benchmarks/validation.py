"""Coverage of nominal 95 % intervals, frequentist and Bayesian, on the same data sets.

The study behind ``docs/validation.md``: logistic growth, Lotka-Volterra and FitzHugh-Nagumo at
5, 10 and 20 % noise with 513 points (the papers' M = 512), 100 seeded data sets each, and four
interval methods per data set: WENDy-MLE with the eq. 9 sandwich covariance, WENDy-MLE with the
inverse Hessian, the NUTS posterior through ``WeakODELikelihood`` and the Laplace approximation
at the posterior mode.

Finished runs are kept in ``benchmarks/results/validation/<problem>/runs.jsonl`` (committed, so
the study resumes across sessions and machines: rerunning does only what is missing). The
cheap methods run first for every problem, NUTS last. Prints, per problem and setting, the
coverage of each method with its Monte Carlo standard error, the mean interval width relative
to the Hessian interval's, the share of runs that did not report success, the mean wall time
per data set and method, and the mean and sd of the standardised errors (``summarize``).

Run:  python benchmarks/validation.py [--problems a,b] [--datasets N] [--workers W]
      [--stage cheap|nuts|all] [--report-only] [--markdown] [--figures DIR]
      [--test-functions default|local|k<N>] [--noise 0.05,0.1,0.2]
      [--compare-local]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import _variants
import numpy as np

import pymc_wendy as pw
from pymc_wendy.studies.coverage import summarize

ROOT = Path(__file__).resolve().parent / "results" / "validation"
PROBLEMS = ["logistic", "lotka_volterra", "fitzhugh_nagumo"]
NOISE = [0.05, 0.1, 0.2]
N_POINTS = [513]
CHEAP = ["mle-sandwich", "mle-hessian", "laplace"]
# 2 chains x 500 draws after 500 tuning steps: the minimum bulk ESS of the 2.5 % / 97.5 %
# quantiles is then about 1000 (measured on FHN: 1.5 effective draws per draw), so the Monte
# Carlo error of an interval end is a few percent of the posterior sd.
SAMPLE_OPTIONS = {"draws": 500, "tune": 500, "chains": 2}


def _variant(name: str) -> tuple[Path, object]:
    """Store directory and ``test_functions`` option of a variant (:mod:`_variants`)."""
    return (ROOT if name == "default" else ROOT / name), _variants.test_functions(name)


def run(
    problem,
    methods,
    n_datasets,
    workers=1,
    progress=False,
    execute=True,
    variant="default",
    noise=NOISE,
):
    """The study of one problem; a ``variant`` other than the default (:func:`_variant`) has
    its own store and the same seeds, so the same data sets as the default study."""
    root, test_functions = _variant(variant)
    return pw.run_coverage(
        problem,
        methods=methods,
        noise_ratios=noise,
        n_points=N_POINTS,
        n_datasets=n_datasets,
        level=0.95,
        seed=2026,
        store=root / problem,
        max_workers=workers,
        progress=progress,
        sample_options=SAMPLE_OPTIONS,
        fit_options=None if test_functions is None else {"test_functions": test_functions},
        execute=execute,
    )


def report(problem: str, ds) -> None:
    s = summarize(ds)
    print(f"\n## {problem} ({int(ds.attrs['n_done'])} of {int(ds.attrs['n_runs'])} runs done)")
    # the two MLE intervals share one fit per data set: count its time once
    own = [e for e in ds.estimator.values if e != "mle-sandwich"]
    seconds = ds["wall_time"].sel(estimator=own).sum(["noise_ratio", "n_points", "dataset"])
    parts = ", ".join(
        f"{e} {float(v) / 3600:.2f} h" for e, v in zip(own, seconds.values, strict=True)
    )
    print(f"study time (sum of per-run wall times): {float(seconds.sum()) / 3600:.2f} h ({parts})")
    print("coverage of nominal 95 % intervals (Monte Carlo s.e.), per parameter")
    for nr in s.noise_ratio.values:
        for est in s.estimator.values:
            c = s["coverage"].sel(estimator=est, noise_ratio=nr).squeeze("n_points")
            se = s["coverage_se"].sel(estimator=est, noise_ratio=nr).squeeze("n_points")
            n = int(s["n_ci"].sel(estimator=est, noise_ratio=nr).squeeze("n_points").min())
            w = s["width"].sel(estimator=est, noise_ratio=nr).squeeze("n_points")
            w0 = s["width"].sel(estimator="mle-hessian", noise_ratio=nr).squeeze("n_points")
            cells = " ".join(f"{float(v):.2f}" for v in c)
            sel = {"estimator": est, "noise_ratio": nr}
            zm = s["zscore_mean"].sel(sel).squeeze("n_points")
            zs = s["zscore_sd"].sel(sel).squeeze("n_points")
            zcells = " ".join(
                f"{float(a):+.2f}/{float(b):.2f}" for a, b in zip(zm, zs, strict=True)
            )
            print(
                f"  nr={nr:<5} {est:<13} n={n:<4} coverage [{cells}] "
                f"mean {float(c.mean()):.3f} (s.e. {float(se.mean()):.3f}) "
                f"width/hessian {float((w / w0).mean()):.2f} "
                f"not ok {float(s['not_ok_rate'].sel(estimator=est, noise_ratio=nr).item()):.2f} "
                f"time {float(s['wall_time'].sel(estimator=est, noise_ratio=nr).item()):.2f} s\n"
                f"{'':<22} z-score mean/sd [{zcells}] "
                f"(s.e. {float(s['zscore_mean_se'].sel(sel).mean()):.2f}/"
                f"{float(s['zscore_sd_se'].sel(sel).mean()):.2f})"
            )


def compare(problem: str, noise, variant: str = "local") -> None:
    """A variant's study against the default one on the same data sets: per noise level and
    method, coverage of each, the mean interval width and the root mean squared error of the
    variant over the default (paired, per parameter)."""
    methods = CHEAP + ["nuts"]
    base = run(problem, methods, 100, execute=False, noise=noise)
    other = run(problem, methods, 100, execute=False, variant=variant, noise=noise)
    print(f"\n## {problem}: test functions {variant!r} against the default (same data sets)")
    for nr in noise:
        for est in ("mle-hessian", "nuts"):
            sel = {"estimator": est, "noise_ratio": nr}
            a, b = base.sel(sel).squeeze("n_points"), other.sel(sel).squeeze("n_points")
            both = np.isfinite(a["estimate"]).all("param") & np.isfinite(b["estimate"]).all("param")
            if int(both.sum()) == 0:
                continue
            a, b = a.sel(dataset=both), b.sel(dataset=both)

            def width(d):
                iv = d["interval"]
                return (iv.sel(bound="upper") - iv.sel(bound="lower")).mean("dataset")

            def rmse(d):
                return np.sqrt(((d["estimate"] - d["truth"]) ** 2).mean("dataset"))

            cov = " ".join(
                f"{float(x):.2f}/{float(y):.2f}"
                for x, y in zip(
                    a["covered"].mean("dataset"), b["covered"].mean("dataset"), strict=True
                )
            )
            w = " ".join(f"{float(v):.2f}" for v in width(b) / width(a))
            r = " ".join(f"{float(v):.2f}" for v in rmse(b) / rmse(a))
            t = float(b["wall_time"].mean()) / float(a["wall_time"].mean())
            print(
                f"  nr={nr:<5} {est:<12} n={int(both.sum()):<4} "
                f"coverage default/{variant} [{cov}]\n"
                f"{'':<20}width {variant}/default [{w}]  rmse {variant}/default [{r}]  "
                f"time {t:.2f}x"
            )


def markdown(problem: str, ds) -> None:
    """The tables of ``docs/validation.md`` for one problem: coverage per parameter (p1 / p2 /
    ...; eq. 9 with its mean width relative to the Hessian interval), mean / sd of the
    standardised errors, and mean wall time per data set."""
    s = summarize(ds).squeeze("n_points")
    order = ["mle-sandwich", "mle-hessian", "laplace", "nuts"]
    names = ["eq. 9 sandwich (width vs Hessian)", "inverse Hessian", "Laplace", "NUTS"]

    def row(cells):
        return "| " + " | ".join(cells) + " |"

    def cov(est, nr):
        c = " / ".join(f"{float(v):.2f}" for v in s["coverage"].sel(estimator=est, noise_ratio=nr))
        if est != "mle-sandwich":
            return c
        w = s["width"].sel(noise_ratio=nr)
        ratio = float((w.sel(estimator=est) / w.sel(estimator="mle-hessian")).mean())
        return f"{c} ({ratio:.1f}x)"

    def zs(est, nr):
        sel = s.sel(estimator=est, noise_ratio=nr)
        pairs = zip(sel["zscore_mean"].values, sel["zscore_sd"].values, strict=True)
        return ", ".join(f"{m:+.2f} / {d:.2f}" for m, d in pairs)

    print(f"\n### {problem}: coverage ({' / '.join(map(str, ds.param.values))})\n")
    print(row(["noise", *names]) + "\n" + row(["---"] * 5))
    for nr in s.noise_ratio.values:
        print(row([f"{100 * nr:g} %", *(cov(e, nr) for e in order)]))
    print(f"\n### {problem}: standardised errors, mean / sd per parameter\n")
    print(row(["noise", *names[1:], names[0].split(" (")[0]]) + "\n" + row(["---"] * 5))
    for nr in s.noise_ratio.values:
        print(row([f"{100 * nr:g} %", *(zs(e, nr) for e in order[1:] + order[:1])]))
    print(f"\n### {problem}: mean wall time per data set\n")
    print(row(["noise", "MLE (both intervals)", "Laplace", "NUTS"]) + "\n" + row(["---"] * 4))
    for nr in s.noise_ratio.values:
        t = [f"{float(s['wall_time'].sel(estimator=e, noise_ratio=nr)):.2f} s" for e in order[1:]]
        print(row([f"{100 * nr:g} %", *t]))


def figures(problem: str, ds, outdir: Path) -> list[Path]:
    """The docs' figures for one problem: coverage against noise, one panel per parameter
    and one line per method with its Monte Carlo error bar; and the mean estimate with the
    mean interval against noise, beside the truth (WENDy-MLE Figs. 2-7)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summarize(ds)
    names = ds["param"].values.tolist()
    ncols = min(len(names), 3)
    nrows = -(-len(names) // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), sharey=True,
                             squeeze=False)  # fmt: skip
    for ax in grid.ravel()[len(names) :]:
        ax.set_visible(False)
    for k, (ax, name) in enumerate(zip(grid.ravel(), names, strict=False)):
        pw.plot_study(s.sel(param=name), "coverage", axes=[ax])
        ax.set_title(name)
        ax.set_ylabel("coverage" if k % ncols == 0 else "")
        if k and ax.get_legend() is not None:
            ax.get_legend().remove()
    fig.suptitle(f"{problem}: coverage of nominal 95 % intervals, {int(ds.n_points[0])} points")
    fig.tight_layout()
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [
        outdir / f"validation_{problem}_coverage.png",
        outdir / f"validation_{problem}_intervals.png",
    ]
    fig.savefig(paths[0], dpi=90)
    plt.close(fig)
    fig = pw.plot_intervals(ds)
    fig.savefig(paths[1], dpi=90)
    plt.close(fig)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--datasets", type=int, default=100)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--stage", choices=["cheap", "nuts", "all"], default="all")
    ap.add_argument("--report-only", action="store_true", help="summarise what is stored")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="also print the docs' tables")
    ap.add_argument("--figures", type=Path, help="write the docs' figures to this directory")
    ap.add_argument(
        "--test-functions", default="default", metavar="default|local|k<N>",
        help="local: test_functions='local'; k<N>: the default construction with Kmax=N; "
        "each in results/validation/<variant>/",
    )  # fmt: skip
    ap.add_argument("--noise", default=",".join(map(str, NOISE)), help="noise ratios")
    ap.add_argument(
        "--compare-local", action="store_true",
        help="only compare the --test-functions variant's study (local unless given) with "
        "the default one (what both stores hold)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    try:  # a bad name fails before any work
        _variant(args.test_functions)
    except ValueError as exc:
        ap.error(str(exc))
    opts = {"variant": args.test_functions, "noise": [float(x) for x in args.noise.split(",")]}
    problems = [p for p in args.problems.split(",") if p]
    if args.compare_local:
        variant = "local" if args.test_functions == "default" else args.test_functions
        for problem in problems:
            compare(problem, opts["noise"], variant)
        return
    stages = {"cheap": [CHEAP], "nuts": [CHEAP + ["nuts"]], "all": [CHEAP, CHEAP + ["nuts"]]}
    methods = CHEAP + ["nuts"]
    if not args.report_only:
        for stage in stages[args.stage]:
            for problem in problems:
                run(problem, stage, args.datasets, args.workers, not args.no_progress, **opts)
    for problem in problems:
        ds = run(problem, methods, args.datasets, execute=False, **opts)
        report(problem, ds)
        if args.markdown:
            markdown(problem, ds)
        if args.figures is not None:
            for path in figures(problem, ds, args.figures):
                print(f"wrote {path}")


if __name__ == "__main__":
    main()
