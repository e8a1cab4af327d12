"""Reproduce Matsuda & Miyatake's DEQ experiments with ``fit(method="deq")``.

* Lorenz, error (4.1) against the step size (paper Fig. 4): theta = (x0, sigma, rho,
  beta), truth (-10, -1, 40, 10, 28, 8/3), t = 0, 0.01, ..., 2 (K = 201), noise variances
  (0.5, 0.1, 0.1), initial guess (-9, -1.5, 39, 11, 29, 3); Euler, Heun and RK4.
* FitzHugh-Nagumo, squared error against the step size (Fig. 13): V' = c (V - V^3/3 + R),
  R' = -(V - a + b R) / c, (a, b, c) = (0.2, 0.2, 3), u0 = (-1, -1) known, V observed at
  t = 0, 0.2, ..., 40 with noise variance 0.01, Euler, initial guess (1, 1, 1).
* Lorenz Table 1: coverage, average length and MSE of the profile-likelihood 95 %
  intervals (section 3.5), RK4 with dt = 5e-3, from the paper's initial guess.

Estimators compared per data set: the conventional fixed-step estimator (2.4), IRLS(L) for
L = 1, 2, 3 and IRLS (= IRLS(20) or earlier convergence) from the paper's start (the
paper's Algorithm 3.1: ``qml_start=False``), and the library default ``deq`` (IRLS also
restarted at the conventional estimate, lower objective kept). The truth is solved with
DOP853 at rtol = atol = 1e-12 (the paper: ode45 at 3e-14); (4.1) uses the trapezoidal rule
on 10^4 points.

The figures' values are not in the paper's text, so for Figs. 4 and 13 the paper's stated
findings are printed beside our numbers; Table 1 is compared number by number.

Usage: ``python benchmarks/deq_reproduction.py [--quick] [--reps N] [--table-reps N]``.
Writes ``benchmarks/results/deq_reproduction/deq_{lorenz_steps,fhn_steps,table1}[_quick].json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

import pymc_wendy as pw
from pymc_wendy.estimators import deq
from pymc_wendy.model.simulate import solve

OUT = Path(__file__).parent / "results" / "deq_reproduction"

LORENZ_P = np.array([10.0, 28.0, 8.0 / 3.0])
LORENZ_U0 = np.array([-10.0, -1.0, 40.0])
LORENZ_GAMMA = np.sqrt([0.5, 0.1, 0.1])
LORENZ_START = (np.array([11.0, 29.0, 3.0]), np.array([-9.0, -1.5, 39.0]))
LORENZ_T = np.arange(201) * 0.01

FHN_P = np.array([0.2, 0.2, 3.0])
FHN_U0 = np.array([-1.0, -1.0])
FHN_GAMMA = 0.1
FHN_T = np.arange(201) * 0.2

# Table 1 of the paper: coverage (%), average length, MSE
PAPER_TABLE1 = {
    "x(t0)": (83, 0.5976, 4.22e-2),
    "y(t0)": (88, 0.3291, 1.23e-2),
    "z(t0)": (86, 0.1799, 3.58e-3),
    "p1": (84, 0.1891, 5.00e-3),
    "p2": (82, 0.0636, 6.51e-4),
    "p3": (87, 0.0149, 2.68e-5),
}
PAPER_FIG4 = (
    "Euler, dt >= 5e-3: IRLS(1) better than conventional; 5e-5 <= dt <= 5e-3: about the "
    "same; dt <= 5e-5: IRLS(L>1) better. RK4: error almost independent of dt, IRLS(L>1) "
    "consistently better than conventional. Heun about the same as RK4."
)
PAPER_FIG13 = (
    "IRLS better than conventional for dt < 1e-2; about the same for larger dt; IRLS(2), "
    "IRLS(3) and IRLS almost coincide."
)


def _fhn(t, u, p):
    V, R = u
    a, b, c = p
    return [c * (V - V**3 / 3 + R), -(V - a + b * R) / c]


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fit(model, t, U, p0, u0, sigma, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pw.FitWarning)
        return pw.fit(model, t, U, method="deq", p0=p0, u0=u0, sigma=sigma, options=options)


def _compare(model, t, U, start, sigma, options, error):
    """Conventional, IRLS(1,2,3), IRLS (paper) and the library default on one data set."""
    p0, u0 = start
    J = model.n_params
    conv = _fit(model, t, U, p0, u0, sigma, update_variance=False, **options)
    paper = _fit(model, t, U, p0, u0, sigma, qml_start=False, **options)
    again = _fit(model, t, U, conv.x, conv.u0, sigma, qml_start=False, **options)
    default = again if again.fun < paper.fun else paper
    path = paper.history["iterations"]["theta"]
    out = {"conventional": error(conv.x, conv.u0)}
    for L in (1, 2, 3):
        th = path[min(L, len(path) - 1)]
        out[f"IRLS({L})"] = error(th[:J], th[J:])
    out["IRLS"] = error(paper.x, paper.u0)
    out["deq default"] = error(default.x, default.u0)
    out["nit IRLS"] = int(paper.nit)
    out["status IRLS"] = paper.status
    return out


def _summ(rows, keys):
    return {k: float(np.median([r[k] for r in rows])) for k in keys}


KEYS = ["conventional", "IRLS(1)", "IRLS(2)", "IRLS(3)", "IRLS", "deq default"]


def lorenz_steps(quick: bool, reps: int) -> dict:
    model = pw.get_problem("lorenz").model
    X = solve(model, LORENZ_P, LORENZ_U0, LORENZ_T, rtol=1e-12, atol=1e-12)
    tf = np.linspace(0.0, 2.0, 10_000)
    Xf = solve(model, LORENZ_P, LORENZ_U0, tf, rtol=1e-12, atol=1e-12)

    def error(p, u0):
        try:
            Xh = solve(model, p, u0, tf, rtol=1e-12, atol=1e-12)
        except Exception:  # noqa: BLE001 - a wild estimate whose solve blows up
            return float("inf")
        return float(np.trapezoid(np.sum((Xh - Xf) ** 2, axis=1), tf))

    if quick:
        grid = {"euler": [1e-2, 5e-3, 1e-3, 1e-4], "rk4": [1e-2, 5e-3, 1e-3]}
    else:
        grid = {
            "euler": [1e-2, 5e-3, 2e-3, 1e-3, 5e-4, 2e-4, 1e-4, 5e-5, 2e-5, 1e-5],
            "heun": [1e-2, 5e-3, 1e-3, 1e-4],
            "rk4": [1e-2, 5e-3, 2e-3, 1e-3, 5e-4, 1e-4],
        }
    rows = []
    for scheme, dts in grid.items():
        for dt in dts:
            n = round(0.01 / dt)
            t0 = time.perf_counter()
            per = []
            for rep in range(reps):
                U = X + np.random.default_rng(rep).normal(size=X.shape) * LORENZ_GAMMA
                per.append(
                    _compare(
                        model,
                        LORENZ_T,
                        U,
                        LORENZ_START,
                        LORENZ_GAMMA,
                        {"scheme": scheme, "n_steps": n},
                        error,
                    )  # fmt: skip
                )
            row = {"scheme": scheme, "dt": dt, "reps": reps, "median": _summ(per, KEYS)}
            row["runs"] = per
            rows.append(row)
            _progress(
                f"lorenz {scheme:5s} dt={dt:.0e}: "
                + "  ".join(f"{k} {row['median'][k]:.3g}" for k in KEYS)
                + f"  ({time.perf_counter() - t0:.1f} s)"
            )
    return {"experiment": "Lorenz error (4.1) vs step size (paper Fig. 4)", "paper": PAPER_FIG4,
            "rows": rows}  # fmt: skip


def fhn_steps(quick: bool, reps: int) -> dict:
    model = pw.ODEModel(_fhn, ["V", "R"], ["a", "b", "c"], name="fitzhugh_nagumo_mm")
    X = solve(model, FHN_P, FHN_U0, FHN_T, rtol=1e-12, atol=1e-12)

    def error(p, u0):
        return float(np.sum((p - FHN_P) ** 2))

    dts = [0.1, 0.05, 0.02, 0.01, 0.005] if quick else [0.1, 0.05, 0.02, 0.01, 0.005, 2e-3, 1e-3]
    rows = []
    for dt in dts:
        n = round(0.2 / dt)
        t0 = time.perf_counter()
        per = []
        for rep in range(reps):
            U = X + np.random.default_rng(100 + rep).normal(size=X.shape) * FHN_GAMMA
            opts = {"scheme": "euler", "n_steps": n, "fit_u0": False, "observed": ["V"]}
            per.append(_compare(model, FHN_T, U, (np.ones(3), FHN_U0), FHN_GAMMA, opts, error))
        row = {"scheme": "euler", "dt": dt, "reps": reps, "median": _summ(per, KEYS), "runs": per}
        rows.append(row)
        _progress(
            f"fhn euler dt={dt:.0e}: "
            + "  ".join(f"{k} {row['median'][k]:.3g}" for k in KEYS)
            + f"  ({time.perf_counter() - t0:.1f} s)"
        )
    return {"experiment": "FitzHugh-Nagumo squared error vs step size (paper Fig. 13)",
            "paper": PAPER_FIG13, "rows": rows}  # fmt: skip


def table1(reps: int) -> dict:
    """Coverage of the profile intervals at the chi2_1 95 % threshold (3.84 on -2 log L),
    and at half of it (1.92), which is what the paper's numbers look like (module doc)."""
    model = pw.get_problem("lorenz").model
    X = solve(model, LORENZ_P, LORENZ_U0, LORENZ_T, rtol=1e-12, atol=1e-12)
    truth = np.concatenate([LORENZ_P, LORENZ_U0])
    half_level = float(stats.chi2.cdf(stats.chi2.ppf(0.95, 1) / 2, 1))
    est, ci95, cihalf, wald = [], [], [], []
    names = None
    t0 = time.perf_counter()
    for rep in range(reps):
        U = X + np.random.default_rng(1000 + rep).normal(size=X.shape) * LORENZ_GAMMA
        res = _fit(model, LORENZ_T, U, *LORENZ_START, LORENZ_GAMMA, scheme="rk4", n_steps=2)
        names = res.history["theta_names"]
        theta = np.concatenate([res.x, res.u0])
        se = np.sqrt(np.diag(res.history["theta_covariance"]))
        est.append(theta)
        wald.append(np.stack([theta - 1.959964 * se, theta + 1.959964 * se], axis=1))
        ci95.append(deq.profile_intervals(res, 0.95))
        cihalf.append(deq.profile_intervals(res, half_level))
        el = time.perf_counter() - t0
        left = el / (rep + 1) * (reps - rep - 1)
        _progress(f"table 1: {rep + 1}/{reps} ({el:.0f} s, ~{left:.0f} s left)")
    est, ci95, cihalf, wald = map(np.array, (est, ci95, cihalf, wald))

    def summary(ci):
        inside = (ci[:, :, 0] <= truth) & (truth <= ci[:, :, 1])
        ok = np.all(np.isfinite(ci), axis=2)
        cov = inside.sum(0) / reps
        return {
            "coverage": cov.tolist(),
            "coverage_mc_se": np.sqrt(cov * (1 - cov) / reps).tolist(),
            "mean_length": np.nanmean(ci[:, :, 1] - ci[:, :, 0], axis=0).tolist(),
            "n_finite": ok.sum(0).tolist(),
        }

    mse = np.mean((est - truth) ** 2, axis=0)
    mse_se = np.std((est - truth) ** 2, axis=0, ddof=1) / np.sqrt(reps)
    return {
        "experiment": "Lorenz Table 1: profile-likelihood 95% intervals, RK4 dt = 5e-3",
        "reps": reps,
        "names": names,
        "paper": PAPER_TABLE1,
        "profile_95": summary(ci95),
        "profile_half_threshold": {"level": half_level, **summary(cihalf)},
        "wald_95": summary(wald),
        "mse": mse.tolist(),
        "mse_mc_se": mse_se.tolist(),
        "estimates": est.tolist(),
    }


def _print_table1(tab: dict) -> None:
    print(f"\nTable 1 (Lorenz, RK4 dt=5e-3), {tab['reps']} replicates; ours +- Monte Carlo se")
    print(
        f"{'':7s} {'paper cov':>9s} {'ours cov':>13s} {'ours cov@1.92':>14s} {'Wald cov':>9s}"
        f" {'paper len':>9s} {'ours len':>9s} {'len@1.92':>9s} {'paper MSE':>9s} {'ours MSE':>20s}"
    )
    for i, name in enumerate(tab["names"]):
        pc, pl, pm = tab["paper"][name]
        a, h, w = tab["profile_95"], tab["profile_half_threshold"], tab["wald_95"]
        ca, sa = 100 * a["coverage"][i], 100 * a["coverage_mc_se"][i]
        ch, sh = 100 * h["coverage"][i], 100 * h["coverage_mc_se"][i]
        print(
            f"{name:7s} {pc:9d} {ca:6.0f} +- {sa:3.0f} {ch:8.0f} +- {sh:2.0f}"
            f" {100 * w['coverage'][i]:9.0f} {pl:9.4f} {a['mean_length'][i]:9.4f}"
            f" {h['mean_length'][i]:9.4f} {pm:9.3g} {tab['mse'][i]:9.3g}"
            f" +- {tab['mse_mc_se'][i]:8.2g}"
        )


def _print_steps(res: dict) -> None:
    print(f"\n{res['experiment']} (median over replicates)")
    print(f"paper: {res['paper']}")
    print(f"{'scheme':6s} {'dt':>7s} " + " ".join(f"{k:>12s}" for k in KEYS))
    for row in res["rows"]:
        med = row["median"]
        print(f"{row['scheme']:6s} {row['dt']:7.0e} " + " ".join(f"{med[k]:12.4g}" for k in KEYS))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer step sizes and replicates")
    ap.add_argument("--reps", type=int, default=None, help="replicates per step size")
    ap.add_argument("--table-reps", type=int, default=None, help="replicates for Table 1")
    ap.add_argument("--only", choices=["lorenz", "fhn", "table1"], default=None)
    args = ap.parse_args(argv)
    reps = args.reps or (1 if args.quick else 10)
    table_reps = args.table_reps or (10 if args.quick else 100)
    suffix = "_quick" if args.quick else ""
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    jobs = {
        "lorenz_steps": lambda: lorenz_steps(args.quick, reps),
        "fhn_steps": lambda: fhn_steps(args.quick, reps),
        "table1": lambda: table1(table_reps),
    }
    for key, job in jobs.items():
        if args.only and not key.startswith(args.only):
            continue
        t0 = time.perf_counter()
        res = job()
        res["wall_time_s"] = time.perf_counter() - t0
        res["quick"] = args.quick
        path = OUT / f"deq_{key}{suffix}.json"
        path.write_text(json.dumps(res, indent=1, default=str))
        (_print_table1 if key == "table1" else _print_steps)(res)
        print(f"-> {path} ({res['wall_time_s']:.0f} s)")
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
