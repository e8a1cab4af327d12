"""The hierarchical model of ``docs/experiments.md`` with ``pw.sample`` defaults, over seeds.

Five Lotka-Volterra units (65 points, 10 % noise), each with its own prey growth rate
``rate[i] ~ Normal(mu, tau)`` and shared ``p2, p3, p4``: the model of the docs, on the docs'
data. ``--form`` chooses the parametrisation of ``rate``: ``pw.hierarchical_normal`` with the
units' own fits (the docs'), non-centred, centred or partially centred with one weight.
For every sampler seed: the largest R-hat and smallest bulk ESS over all
free variables and ``rate``, the number of divergences, the wall time, and what ``pw.sample``
chose (``posterior.attrs``). The goal of issue 37: R-hat <= 1.01 and no divergences on all
10 seeds, with defaults.

Run:  python benchmarks/hierarchical.py [--seeds 10] [--form non-centred] [--draws 1000]
"""

from __future__ import annotations

import argparse
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_wendy as pw

LV = pw.get_problem("lotka_volterra")


def units(n: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    """The docs' data: prey growth rates from ``Normal(3, 0.3)`` (seed 7), one series each."""
    rates = np.random.default_rng(7).normal(3.0, 0.3, n)
    out = []
    for i, a in enumerate(rates):
        d = LV.simulate(n_points=65, noise_ratio=0.1, seed=100 + i, p=[a, -1.0, -6.0, 1.0])
        out.append((d.t, d.U))
    return out


def model(data, form: str = "informed", weight: float = 0.5) -> pm.Model:
    """The docs' model; ``form`` is how ``rate ~ Normal(mu, tau)`` is parametrised."""
    with pm.Model(coords={"unit": range(len(data))}) as m:
        mu, tau = pm.Normal("mu", 3, 2), pm.HalfNormal("tau", 1)
        if form == "informed":  # the docs' form
            fits = [pw.fit(LV.model, t, U) for t, U in data]
            est, se = [f.x[0] for f in fits], [f.stderr[0] for f in fits]
            rate = pw.hierarchical_normal("rate", mu, tau, estimate=est, stderr=se, dims="unit")
        elif form == "non-centred":
            rate = pw.hierarchical_normal("rate", mu, tau, dims="unit")
        elif form == "centred":
            rate = pm.Normal("rate", mu, tau, dims="unit")
        else:  # partially centred with one weight for all units
            r = pm.Normal("r", weight * mu, tau**weight, dims="unit")
            rate = pm.Deterministic(
                "rate", mu + tau ** (1 - weight) * (r - weight * mu), dims="unit"
            )
        p2, p3, p4 = pm.Normal("p2", 0, 5), pm.Normal("p3", 0, 10), pm.Normal("p4", 0, 5)
        for i, (t, U) in enumerate(data):
            pw.WeakODELikelihood(
                f"U{i}", ode=LV.model, params=[rate[i], p2, p3, p4], t=t, observed=U
            )
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument(
        "--form",
        choices=("informed", "non-centred", "centred", "partial"),
        default="informed",
        help="parametrisation of rate (default: the docs', pw.hierarchical_normal with the "
        "units' fits)",
    )
    ap.add_argument("--weight", type=float, default=0.5, help="of --form partial")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--target-accept", type=float, default=None, help="default: pw.sample's")
    ap.add_argument("--whiten", default=None, help="True, False or auto (default: pw.sample's)")
    ap.add_argument("--tune", type=int, default=None, help="default: pw.sample's")
    ap.add_argument("--adaptation", default=None, help="nutpie's mass matrix adaptation")
    ap.add_argument("--chains", type=int, default=None, help="default: pw.sample's")
    args = ap.parse_args()
    m = model(units(), args.form, args.weight)
    names = list(dict.fromkeys([v.name for v in m.free_RVs] + ["rate"]))
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t0 = time.perf_counter()
        with m, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            extra = {} if args.target_accept is None else {"target_accept": args.target_accept}
            if args.whiten is not None:
                extra["whiten"] = {"True": True, "False": False}.get(args.whiten, args.whiten)
            if args.tune is not None:
                extra["tune"] = args.tune
            if args.chains is not None:
                extra["chains"] = args.chains
            if args.adaptation is not None:
                extra["nuts"] = {"adaptation": args.adaptation}
            idata = pw.sample(args.draws, random_seed=seed, progressbar=False, **extra)
        wall = time.perf_counter() - t0
        summ = az.summary(idata, var_names=names, kind="diagnostics")
        row = {
            "seed": seed,
            "rhat_max": round(float(summ["r_hat"].max()), 3),
            "ess_bulk_min": int(summ["ess_bulk"].min()),
            "divergences": int(idata.sample_stats["diverging"].sum()),
            "wall_s": round(wall, 1),
            "attrs": {
                k: v for k, v in idata.posterior.attrs.items() if k in ("whitened", "target_accept")
            },
        }
        rows.append(row)
        print(row, flush=True)
    ok = sum(r["rhat_max"] <= 1.01 and r["divergences"] == 0 for r in rows)
    print(f"{ok} of {len(rows)} seeds with R-hat <= 1.01 and no divergences")


if __name__ == "__main__":
    main()
