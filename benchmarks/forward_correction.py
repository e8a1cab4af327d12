"""The forward-solve correction against a cold forward-solve NUTS reference, side by side.

Per case, one data set, the same PyMC model:

* **weak**: ``pw.sample`` on ``pw.WeakODELikelihood`` (p ~ Normal(0, 10) per parameter,
  sigma ~ HalfNormal(1) per state);
* **corrected**: ``pw.forward_correction`` of those draws (route chosen automatically;
  the initial state gets the default prior of ``pw.forward_model``);
* **reference**: PyMC's NUTS on ``pw.forward_model`` of the same model (exactly the target
  of the correction), started at PyMC's default initial point with its default jitter and
  diagonal adaptation, ``--ref-tune`` + ``--ref-draws`` per chain: a cold forward-solve
  sampler, as a user without the weak posterior would run it.

Printed per case: the time of each stage, the route, the Pareto k and the importance ESS,
the reference's minimum bulk ESS, and per variable ``(mean - mean_ref) / sd_ref`` and
``sd / sd_ref`` for the weak and the corrected posterior.

Run:  python benchmarks/forward_correction.py [--cases lv21,lv41,fhn10,fhn20]
          [--chains 2 --draws 1000] [--ref-tune 1000 --ref-draws 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import arviz as az
import numpy as np
import pymc as pm

import pymc_wendy as pw

CASES = {
    "lv21": ("lotka_volterra", {"n_points": 21, "noise_ratio": 0.1}),
    "lv41": ("lotka_volterra", {"n_points": 41, "noise_ratio": 0.1}),
    "fhn10": ("fitzhugh_nagumo", {"subsample": 2, "noise_ratio": 0.1}),
    "fhn20": ("fitzhugh_nagumo", {"subsample": 2, "noise_ratio": 0.2}),
}


def _model(prob, data) -> pm.Model:
    ode = prob.model
    coords = {"param": ode.params, "state": ode.states, "time": data.t}
    with pm.Model(coords=coords) as model:
        p = pm.Normal("p", 0.0, 10.0, dims="param")
        sigma = pm.HalfNormal("sigma", 1.0, dims="state")
        pw.WeakODELikelihood(
            "U", ode=ode, params=p, sigma=sigma, t=data.t, observed=data.U,
            dims=("time", "state"),
        )  # fmt: skip
    return model


def _moments(idata, names) -> dict:
    post = idata if "chain" in getattr(idata, "dims", {}) else idata.posterior
    out = {}
    for n in names:
        x = np.asarray(post[n])
        x = x.reshape(-1, *x.shape[2:]).reshape(x.shape[0] * x.shape[1], -1)
        out[n] = (x.mean(axis=0), x.std(axis=0))
    return out


def _agreement(mom, ref) -> dict:
    return {
        n: {
            "z": ((mom[n][0] - ref[n][0]) / ref[n][1]).round(2).tolist(),
            "sd_ratio": (mom[n][1] / ref[n][1]).round(2).tolist(),
        }
        for n in ref
        if n in mom
    }


def run_case(name: str, args) -> dict:
    problem, opts = CASES[name]
    prob = pw.get_problem(problem)
    data = prob.simulate(seed=args.seed, **opts)
    model = _model(prob, data)
    t0 = time.perf_counter()
    with model:
        weak = pw.sample(args.draws, chains=args.chains, progressbar=False, random_seed=1)
    t_weak = time.perf_counter() - t0
    t0 = time.perf_counter()
    corrected = pw.forward_correction(weak, model, random_seed=2, progressbar=False)
    t_corr = time.perf_counter() - t0
    fmodel, _ = pw.forward_model(model)
    t0 = time.perf_counter()
    truth = {"p": prob.p_true, "sigma": data.sigma, "U_u0": data.U_true[0]}
    with fmodel:
        ref = pm.sample(
            args.ref_draws, tune=args.ref_tune, chains=args.chains, initvals=truth,
            init="adapt_diag", cores=min(args.chains, len(os.sched_getaffinity(0))),
            progressbar=False, random_seed=3, compile_kwargs={"mode": "CVM"},
        )  # fmt: skip
    t_ref = time.perf_counter() - t0
    names = ["p", "sigma", "U_u0"]
    ref_m = _moments(ref, names)
    ess = az.ess(ref, var_names=["p", "sigma"])
    return {
        "case": name,
        "n_points": int(data.t.size),
        "weak_s": round(t_weak, 1),
        "correction_s": round(t_corr, 1),
        "reference_s": round(t_ref, 1),
        "route": corrected.attrs["route"],
        "pareto_k": round(float(corrected.attrs["pareto_k"]), 3),
        "importance_ess": round(float(corrected.attrs["importance_ess"]), 1),
        "n_forward_solves": int(corrected.attrs["n_forward_solves"]),
        "reference_min_ess": round(float(min(float(ess[v].min()) for v in ess.data_vars)), 1),
        "reference_divergences": int(ref.sample_stats["diverging"].sum()),
        "weak_vs_ref": _agreement(_moments(weak, ["p", "sigma"]), ref_m),
        "corrected_vs_ref": _agreement(_moments(corrected, names), ref_m),
    }


def _print(r: dict) -> None:
    print(
        f"\n{r['case']} ({r['n_points']} points): weak {r['weak_s']} s, correction "
        f"{r['correction_s']} s ({r['route']}, k = {r['pareto_k']}, ESS {r['importance_ess']}, "
        f"{r['n_forward_solves']} solves); reference {r['reference_s']} s (min ESS "
        f"{r['reference_min_ess']}, {r['reference_divergences']} divergences)"
    )
    for label in ("weak_vs_ref", "corrected_vs_ref"):
        for n, v in r[label].items():
            print(f"  {label:17s} {n:6s} z {v['z']}  sd ratio {v['sd_ratio']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="lv21,lv41,fhn10,fhn20")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--ref-tune", type=int, default=1000)
    ap.add_argument("--ref-draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = []
    for name in args.cases.split(","):
        results.append(run_case(name, args))
        _print(results[-1])
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"settings": vars(args), "cases": results}, fh, indent=1)


if __name__ == "__main__":
    main()
