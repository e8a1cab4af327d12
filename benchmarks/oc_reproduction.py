"""Reproduce the alpha-pinene cells of Brunel, Clairon & d'Alché-Buc (2014), Table 5.1.

Setting (paper sec. 5.2): the alpha-pinene network

    x1' = -(th1 + th2) x1,  x2' = th1 x1,  x3' = th2 x1 - (th3 + th4) x3 + th5 x5,
    x4' = th3 x3,           x5' = th4 x3 - th5 x5,

with ``x(0) = (100, 0, 0, 0, 0)``, all five states observed at ``n`` uniform times on
``[0, 100]`` with Gaussian noise of standard deviation ``sigma`` (``n`` in 400, 200, 50;
``sigma`` in 3, 8), ``fit(method="oc")`` with B-spline test functions (the paper's choice
for this model) and ``2 <= L <= 15`` chosen by prediction error, splines' knots by GCV.
Reported per cell, over ``R`` replicates: ``MSE = mean |theta_hat - theta*|^2`` and
``Tr V = mean trace of the closed-form (sandwich) variance`` (the paper's "asymptotic
variance" column), each with its Monte Carlo standard error, plus the trace of the empirical
covariance of the estimates and the coverage of the 95 % confidence ellipsoid.

The paper's text does not give ``theta*`` (it is lost in the preprint). We use the classical
values of Box et al. / Rodriguez-Fernandez et al. (5.93, 2.96, 2.05, 27.5, 4.0) 1e-5 per
minute rescaled by 1e3, ``theta* = (5.93, 2.96, 2.05, 27.5, 4.0) 1e-2``, so that the network
is almost stationary at ``T = 100`` as the paper says. As a check of the setting the script
prints the trace of the NLS Cramér-Rao bound (``sigma^2 (S^T S)^{-1}``, ``S`` the output
sensitivities, known initial state) beside the paper's NLS column, which should match if the
setting were the paper's. The paper also says the B-spline test functions have support in
``]0, 20[``; ours span the whole observation interval ``[0, 100]``.

Run:  python benchmarks/oc_reproduction.py [--quick] [--replicates R] [--families bspline,sine]
      [--cells 200x8,50x8] [--nonneg] [--out PATH]

``--nonneg`` bounds the rates to ``[0, 1]`` (``fit(bounds=...)``).
Writes ``benchmarks/results/oc_reproduction/oc_alpha_pinene[_quick].json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402
from scipy.linalg import expm  # noqa: E402

import pymc_wendy as pw  # noqa: E402

THETA = np.array([5.93, 2.96, 2.05, 27.5, 4.0]) * 1e-2
X0 = np.array([100.0, 0.0, 0.0, 0.0, 0.0])
T_END = 100.0
CELLS = [(400, 3.0), (400, 8.0), (200, 3.0), (200, 8.0), (50, 3.0), (50, 8.0)]
QUICK_CELLS = [(400, 3.0), (50, 8.0)]
# Table 5.1 (x 1e-2): MSE of OC / OC,0 / NLS and Tr V of OC / OC,0 / NLS
PAPER = {
    (400, 3.0): {"mse_oc": 0.05, "mse_oc0": 0.04, "mse_nls": 0.02, "tr_oc": 0.04, "tr_nls": 0.02},
    (400, 8.0): {"mse_oc": 0.22, "mse_oc0": 0.25, "mse_nls": 0.10, "tr_oc": 0.95, "tr_nls": 0.12},
    (200, 3.0): {"mse_oc": 0.27, "mse_oc0": 0.30, "mse_nls": 0.03, "tr_oc": 0.09, "tr_nls": 0.03},
    (200, 8.0): {"mse_oc": 0.44, "mse_oc0": 0.37, "mse_nls": 0.18, "tr_oc": 2.66, "tr_nls": 0.27},
    (50, 3.0): {"mse_oc": 0.27, "mse_oc0": 0.26, "mse_nls": 0.16, "tr_oc": 1.37, "tr_nls": 0.16},
    (50, 8.0): {"mse_oc": 1.03, "mse_oc0": 0.93, "mse_nls": 0.68, "tr_oc": 7.96, "tr_nls": 1.68},
}


def alpha_pinene() -> pw.ODEModel:
    """The alpha-pinene isomerisation network (5 states, 5 rate constants)."""

    def rhs(t, u, p):
        x1, x2, x3, x4, x5 = u
        return [
            -(p[0] + p[1]) * x1,
            p[0] * x1,
            p[1] * x1 - (p[2] + p[3]) * x3 + p[4] * x5,
            p[2] * x3,
            p[3] * x3 - p[4] * x5,
        ]

    return pw.ODEModel(
        rhs, states=["x1", "x2", "x3", "x4", "x5"], params=["th1", "th2", "th3", "th4", "th5"],
        name="alpha_pinene",
    )  # fmt: skip


def _matrix(theta) -> np.ndarray:
    t1, t2, t3, t4, t5 = theta
    return np.array(
        [
            [-(t1 + t2), 0, 0, 0, 0],
            [t1, 0, 0, 0, 0],
            [t2, 0, -(t3 + t4), 0, t5],
            [0, 0, t3, 0, 0],
            [0, 0, t4, 0, -t5],
        ]
    )


def solution(theta, t) -> np.ndarray:
    """Closed form ``exp(t A) x0`` at every ``t``, shape (n, 5)."""
    w, V = np.linalg.eig(_matrix(theta))
    c = np.linalg.solve(V, X0)
    return np.real((V * c) @ np.exp(np.outer(w, t))).T


def nls_crb_trace(n: int, sigma: float) -> float:
    """Trace of the NLS Cramér-Rao bound with known initial state (sensitivities from
    ``expm`` of the augmented system, so no eigen-decomposition issues)."""
    t = np.linspace(0, T_END, n)
    A = _matrix(THETA)
    S = np.zeros((n * 5, 5))
    for j in range(5):  # d x / d theta_j from the block matrix [[A, dA], [0, A]]
        dA = _matrix(np.eye(5)[j])  # A is linear in theta
        big = np.block([[A, dA], [np.zeros((5, 5)), A]])
        z0 = np.r_[np.zeros(5), X0]
        S[:, j] = np.array([(expm(big * ti) @ z0)[:5] for ti in t]).ravel()
    return float(sigma**2 * np.trace(np.linalg.inv(S.T @ S)))


def run_cell(model, n, sigma, family, R, seed0, progress, bounds=None) -> dict:
    t = np.linspace(0, T_END, n)
    X = solution(THETA, t)
    est, traces, cover, Ls, fails = [], [], [], [], 0
    crit = stats.chi2.ppf(0.95, 5)
    start = time.perf_counter()
    for r in range(R):
        rng = np.random.default_rng([seed0, n, int(sigma), r])
        U = X + sigma * rng.standard_normal(X.shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pw.FitWarning)
            res = pw.fit(
                model, t, U, method="oc", bounds=bounds, options={"test_functions": family}
            )
        fails += not res.success
        V = res.covariance("oc")
        d = res.x - THETA
        est.append(res.x)
        traces.append(np.trace(V))
        cover.append(float(d @ np.linalg.solve(V, d)) <= crit)
        Ls.append(res.history["n_test"])
        if progress and (r + 1) % max(1, R // 10) == 0:
            el = time.perf_counter() - start
            print(f"    {family} n={n} sigma={sigma:g}: {r + 1}/{R}  ({el:.0f} s)", flush=True)
    est, traces = np.array(est), np.array(traces)
    sq = np.sum((est - THETA) ** 2, axis=1)
    return {
        "n": n,
        "sigma": sigma,
        "family": family,
        "replicates": R,
        "mse": float(sq.mean()),
        "mse_mc_se": float(sq.std(ddof=1) / np.sqrt(R)),
        # the squared error is heavy-tailed here (th4, th5 nearly unidentified when the x3,
        # x4 proxies are flat): robust summaries beside the mean
        "median_sq_error": float(np.median(sq)),
        "mse_without_worst_5pct": float(np.sort(sq)[: int(np.ceil(0.95 * R))].mean()),
        "trace_sandwich_without_worst_5pct": float(
            np.sort(traces)[: int(np.ceil(0.95 * R))].mean()
        ),
        "trace_sandwich_mean": float(traces.mean()),
        "trace_sandwich_mc_se": float(traces.std(ddof=1) / np.sqrt(R)),
        "trace_sandwich_median": float(np.median(traces)),
        "trace_empirical_cov": float(np.trace(np.cov(est.T))),
        "bias": (est.mean(axis=0) - THETA).tolist(),
        "coverage_95_ellipsoid": float(np.mean(cover)),
        "L_chosen_counts": {
            str(k): int(v) for k, v in zip(*np.unique(Ls, return_counts=True), strict=True)
        },
        "not_success": int(fails),
        "estimates": est.tolist(),
        "sandwich_traces": traces.tolist(),
        "seconds": time.perf_counter() - start,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two cells, 20 replicates")
    ap.add_argument("--replicates", type=int, default=None)
    ap.add_argument("--families", default="bspline,sine")
    ap.add_argument("--seed", type=int, default=20140)
    ap.add_argument("--out", default=None)
    ap.add_argument("--cells", default=None, help="e.g. 200x8,50x8 (default: all, or quick)")
    ap.add_argument(
        "--nonneg", action="store_true", help="rates bounded to [0, 1] (fit(bounds=...))"
    )
    args = ap.parse_args(argv)
    cells = QUICK_CELLS if args.quick else CELLS
    if args.cells:
        cells = [(int(a), float(b)) for a, b in (c.split("x") for c in args.cells.split(","))]
    bounds = [(0.0, 1.0)] * 5 if args.nonneg else None
    R = args.replicates or (20 if args.quick else 200)
    families = args.families.split(",")
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / "oc_reproduction" / (
        "oc_alpha_pinene_quick.json" if args.quick else "oc_alpha_pinene.json"
    )  # fmt: skip
    model = alpha_pinene()
    print(f"alpha-pinene, Table 5.1 (known x0; OC does not use it); theta* = {THETA}")
    print(f"{len(cells)} cells x {families} x {R} replicates", flush=True)
    rows = []
    wall = time.perf_counter()
    for n, sigma in cells:
        crb = nls_crb_trace(n, sigma)
        for fam in families:
            row = run_cell(model, n, sigma, fam, R, args.seed, progress=True, bounds=bounds)
            row["bounds"] = bounds
            row["nls_crb_trace"] = crb
            row["paper_x1e-2"] = PAPER[(n, sigma)]
            rows.append(row)
    wall = time.perf_counter() - wall

    print(
        "\nAll numbers x 1e-2; ours +- Monte Carlo standard error. med SE: median squared "
        "error; MSE95 / TrV95: means without the worst 5 % of replicates."
    )
    hdr = (
        f"{'(n, sigma)':>10} {'family':>8} | {'MSE ours':>14} {'paper OC':>8} | "
        f"{'Tr V ours':>14} {'paper OC':>8} | {'Tr cov(est)':>11} | {'NLS CRB':>7} "
        f"{'paper NLS':>9} | {'cover95':>7} | {'med SE':>6} {'MSE95':>6} {'TrV95':>6}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        p = r["paper_x1e-2"]
        print(
            f"{f'({r["n"]}, {r["sigma"]:g})':>10} {r['family']:>8} | "
            f"{100 * r['mse']:7.3f} ±{100 * r['mse_mc_se']:5.3f} {p['mse_oc']:8.2f} | "
            f"{100 * r['trace_sandwich_mean']:7.3f} ±{100 * r['trace_sandwich_mc_se']:5.3f} "
            f"{p['tr_oc']:8.2f} | {100 * r['trace_empirical_cov']:11.3f} | "
            f"{100 * r['nls_crb_trace']:7.3f} {p['tr_nls']:9.2f} | "
            f"{r['coverage_95_ellipsoid']:7.2f} | {100 * r['median_sq_error']:6.3f} "
            f"{100 * r['mse_without_worst_5pct']:6.3f} "
            f"{100 * r['trace_sandwich_without_worst_5pct']:6.3f}"
        )
    record = {
        "benchmark": "oc_reproduction (Brunel, Clairon & d'Alche-Buc 2014, Table 5.1)",
        "theta_true": THETA.tolist(),
        "x0": X0.tolist(),
        "t": f"n uniform points on [0, {T_END}]",
        "options": "fit(method='oc', options={'test_functions': family}); defaults otherwise",
        "seed": args.seed,
        "wall_seconds": wall,
        "python": sys.version.split()[0],
        "cells": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))
    print(f"\nwrote {out} ({wall:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
