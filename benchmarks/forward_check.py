"""pw.fit's forward check (issue 55 item 2, ``docs/validation.md``): false alarms and catches.

Cells (problem, points, noise ratio, variant), seeded data sets ``0..n-1`` each:

- ``silent``: the well-specified catalogue data at 513 points (logistic, Lotka-Volterra,
  FitzHugh-Nagumo, Goodwin 2D; 5, 10, 20 % noise), ``pw.fit`` with its defaults: the share
  of fits whose check fires is the false-alarm rate.
- ``others``: the rest of the first-order catalogue at 513 points, 10 %, fewer data sets.
- ``lv21``: Lotka-Volterra at 21 points, 10 %, with the default noise level (from the
  forward residuals) and with the true ``sigma`` given; each beside ``method="hybrid"`` on
  the same data, so that a poor weak estimate (hybrid moves it by more than a standard error,
  or it misses the truth by more than 2) can be told from a good one; and how often hybrid
  keeps output error, and its intervals' share that holds the truth.
- ``known``: Lotka-Volterra with the wrong known initial state ``[5, 5]`` (the data start near
  ``[1.09, 0.91]``), 257, 513 and 1025 points.
- ``lorenz``: Lorenz over 10, 20 and 30 time units, 513 points, 5 and 20 %.
- ``carrying``: logistic data at the carrying capacity (``u0 = K``, ``p = [1, 1]``: any
  ``a = b`` fits as well), 257 and 513 points, 1, 5 and 10 % noise: the information check
  (weak covariance against the forward Cramer-Rao bound) should fire on every one.

The information check's ratio (``history["forward_check"]["information_ratio"]``: the least
weak variance over the forward bound, over all directions) is recorded with each run; the
report counts the runs below today's ``INFORMATION_FLOOR`` (where ``pw.fit`` says
``"overconfident"``).

Per run: whether the fit succeeded, its status, the check's verdict, residual sd over noise
sd per state, the check's time and the fit's without it, the z-scores of the estimate.
Records go to ``benchmarks/results/forward_check/<group>.jsonl`` (one line per run; existing
runs are kept).

Run:  python benchmarks/forward_check.py [--groups silent,others,lv21,known,lorenz,carrying]
      [--seeds 20] [--report-only] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np

import pymc_wendy as pw
from pymc_wendy.estimators._forward_check import INFORMATION_FLOOR

ROOT = Path(__file__).resolve().parent / "results" / "forward_check"
SILENT = ["logistic", "lotka_volterra", "fitzhugh_nagumo", "goodwin_2d"]
OTHERS = ["hindmarsh_rose", "protein_transduction", "lorenz", "goodwin_3d", "sir_tdi"]


def _fit_record(prob, data, **kwargs) -> dict:
    kw = dict(kwargs)
    if prob.bounds is not None and not prob.model.is_linear_in_params and "p0" not in kw:
        kw.setdefault("bounds", prob.bounds)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = pw.fit(prob.model, data.t, data.U, **kw)
    entry = res.history.get("forward_check", {})
    try:
        se = res.stderr
    except Exception:  # noqa: BLE001 (a failed covariance is a NaN here)
        se = np.full(res.x.size, np.nan)
    check_time = float(entry.get("time_s", 0.0))
    ratio = entry.get("ratio")
    return {
        "success": bool(res.success),
        "status": res.status,
        "verdict": entry.get("verdict"),
        "note": entry.get("note", ""),
        "ratio": None if ratio is None else [float(r) for r in ratio],
        "recovery_ratio": (
            None
            if entry.get("recovery_ratio") is None
            else [float(r) for r in entry["recovery_ratio"]]
        ),
        "growth": entry.get("growth"),
        "information_ratio": entry.get("information_ratio"),
        "check_s": check_time,
        "fit_s": float(res.wall_time) - check_time,
        "x": res.x.tolist(),
        "se": [float(s) for s in se],
        "z": ((res.x - prob.p_true) / se).tolist(),
        "warnings": sorted({w.category.__name__ for w in caught}),
    }


def _data(prob, n_points, noise, seed, t_end=None):
    if prob.name == "logistic" and t_end == "carrying":
        return pw.simulate(
            prob.model, [1.0, 1.0], [1.0], (0.0, 10.0), n_points=n_points, noise_ratio=noise,
            seed=seed,
        )  # fmt: skip
    if t_end is None:
        return prob.simulate(n_points=n_points, noise_ratio=noise, seed=seed)
    return pw.simulate(
        prob.model, prob.p_true, prob.u0, (0.0, t_end), n_points=n_points, noise_ratio=noise,
        seed=seed, stiff=prob.stiff, noise=prob.noise,
    )  # fmt: skip


def cells(group: str, seeds: int):
    if group == "silent":
        for name in SILENT:
            for noise in (0.05, 0.1, 0.2):
                for seed in range(seeds):
                    yield {"problem": name, "n": 513, "noise": noise, "seed": seed}
    elif group == "others":
        for name in OTHERS:
            for seed in range(max(1, seeds // 4)):
                yield {"problem": name, "n": 513, "noise": 0.1, "seed": seed}
    elif group == "lv21":
        for variant in ("default", "sigma"):
            for seed in range(seeds):
                yield {"problem": "lotka_volterra", "n": 21, "noise": 0.1, "seed": seed,
                       "variant": variant}  # fmt: skip
    elif group == "known":
        for n in (257, 513, 1025):
            for seed in range(max(1, seeds // 4)):
                yield {"problem": "lotka_volterra", "n": n, "noise": 0.1, "seed": seed}
    elif group == "lorenz":
        for t_end in (10.0, 20.0, 30.0):
            for noise in (0.05, 0.2):
                for seed in range(max(1, seeds // 4)):
                    yield {"problem": "lorenz", "n": 513, "noise": noise, "seed": seed,
                           "t_end": t_end}  # fmt: skip
    elif group == "carrying":
        for n in (257, 513):
            for noise in (0.01, 0.05, 0.1):
                for seed in range(max(1, seeds // 4)):
                    yield {"problem": "logistic", "n": n, "noise": noise, "seed": seed,
                           "t_end": "carrying"}  # fmt: skip


def run_one(group: str, cell: dict) -> dict:
    prob = pw.get_problem(cell["problem"])
    data = _data(prob, cell["n"], cell["noise"], cell["seed"], cell.get("t_end"))
    out = dict(cell)
    if group == "known":
        out.update(_fit_record(prob, data, initial_state=[5.0, 5.0], t0=0.0))
    elif group == "lv21":
        kw = {"sigma": data.sigma} if cell["variant"] == "sigma" else {}
        out.update(_fit_record(prob, data, **kw))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hyb = pw.fit(prob.model, data.t, data.U, method="hybrid", **kw)
        out["hybrid_x"] = hyb.x.tolist()
        out["hybrid_shift_se"] = ((hyb.x - np.array(out["x"])) / np.array(out["se"])).tolist()
        out["hybrid_status"] = hyb.status
        out["hybrid_z"] = ((hyb.x - prob.p_true) / hyb.stderr).tolist()
    else:
        out.update(_fit_record(prob, data))
    if out["verdict"] == "misfit" and group != "lv21":  # what the warning points to
        kw = {"initial_state": [5.0, 5.0], "t0": 0.0} if group == "known" else {}
        if prob.bounds is not None and not prob.model.is_linear_in_params:
            kw["bounds"] = prob.bounds
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if group == "known":  # hybrid takes no known state: output error fits u0 itself
                kw.pop("initial_state"), kw.pop("t0")
            hyb = pw.fit(prob.model, data.t, data.U, method="hybrid", **kw)
        out["hybrid_x"] = hyb.x.tolist()
        out["hybrid_shift_se"] = ((hyb.x - np.array(out["x"])) / np.array(out["se"])).tolist()
        out["hybrid_z"] = ((hyb.x - prob.p_true) / hyb.stderr).tolist()
    return out


def _key(cell: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in cell.items()))


def report(group: str, root: Path = ROOT) -> None:
    path = root / f"{group}.jsonl"
    if not path.exists():
        return
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    by: dict = {}
    for r in rows:
        key = (r["problem"], r["n"], r["noise"], r.get("variant", ""), r.get("t_end", ""))
        by.setdefault(key, []).append(r)
    print(f"\n## {group}")
    print("| cell | runs | fired | skipped | solve failed | max ratio | overconfident | "
          "least information ratio | median check s | median fit s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, rs in sorted(by.items(), key=lambda kv: str(kv[0])):
        fired = sum(r["verdict"] == "misfit" for r in rs)
        skipped = sum(r["verdict"] == "skipped" for r in rs)
        failed = sum(r["verdict"] == "solve_failed" for r in rs)
        ratios = [max(r["ratio"]) for r in rs if r["ratio"]]
        info = [r["information_ratio"] for r in rs if r.get("information_ratio") is not None]
        over = sum(i < INFORMATION_FLOOR for i in info)  # records of an earlier floor too
        cell = ", ".join(str(k) for k in key if k != "")
        print(
            f"| {cell} | {len(rs)} | {fired} | {skipped} | {failed} | "
            f"{max(ratios) if ratios else float('nan'):.2f} | {over} | "
            f"{min(info) if info else float('nan'):.3g} | "
            f"{np.median([r['check_s'] for r in rs]):.3f} | "
            f"{np.median([r['fit_s'] for r in rs]):.2f} |"
        )
    for r in rows:
        if r["verdict"] == "misfit" and "hybrid_shift_se" in r and group != "lv21":
            print(
                f"  fired: {r['problem']} n={r['n']} {r['noise']:.0%} seed {r['seed']}"
                f"{' T=' + str(r['t_end']) if 't_end' in r else ''}: ratio "
                f"{np.round(r['ratio'], 2).tolist()}, weak max |z| "
                f"{np.nanmax(np.abs(r['z'])):.1f}, hybrid moves it by "
                f"{np.nanmax(np.abs(r['hybrid_shift_se'])):.1f} weak se (hybrid max |z| "
                f"{np.nanmax(np.abs(r['hybrid_z'])):.1f})"
            )
    if group == "lv21":
        for variant in ("default", "sigma"):
            rs = [r for r in rows if r.get("variant") == variant]
            if not rs:
                continue
            poor = [
                r for r in rs
                if max(abs(np.array(r["hybrid_shift_se"]))) > 1 or max(abs(np.array(r["z"]))) > 2
            ]  # fmt: skip
            fired_poor = sum(r["verdict"] == "misfit" for r in poor)
            fired_good = sum(r["verdict"] == "misfit" for r in rs if r not in poor)
            print(
                f"lv21 {variant}: {len(poor)} of {len(rs)} weak estimates poor (hybrid moves > 1 "
                f"se or |z| > 2); check fired on {fired_poor} of them and on {fired_good} of "
                f"the {len(rs) - len(poor)} others; max ratio on the poor ones "
                f"{max((max(r['ratio']) for r in poor if r['ratio']), default=float('nan')):.2f}"
            )
            hz = [np.abs(r["hybrid_z"]) for r in rs if "hybrid_z" in r]
            if hz:  # records before hybrid's rule looked at the forward check have none
                kept = sum(r["hybrid_status"] == "output_error" for r in rs if "hybrid_z" in r)
                inside = (np.array(hz) < 1.96).mean(axis=0)
                print(
                    f"lv21 {variant}: hybrid kept output error on {kept} of {len(hz)}; "
                    f"share within 1.96 se per parameter {np.round(inside, 2).tolist()}"
                )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", default="silent,others,lv21,known,lorenz")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="records directory")
    args = ap.parse_args()
    root = args.out or ROOT
    root.mkdir(parents=True, exist_ok=True)
    for group in args.groups.split(","):
        if not args.report_only:
            path = root / f"{group}.jsonl"
            done = set()
            if path.exists():
                done = {
                    _key({k: v for k, v in json.loads(line).items() if k in _CELL_KEYS})
                    for line in path.read_text().splitlines()
                }
            for cell in cells(group, args.seeds):
                if _key(cell) in done:
                    continue
                rec = run_one(group, cell)
                with path.open("a") as fh:
                    fh.write(json.dumps(rec) + "\n")
                print(group, cell, rec["verdict"], rec["ratio"], flush=True)
        report(group, root)


_CELL_KEYS = ("problem", "n", "noise", "seed", "variant", "t_end")

if __name__ == "__main__":
    main()
