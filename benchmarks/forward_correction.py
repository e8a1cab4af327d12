"""The forward-solve correction against a cold forward-solve NUTS reference, side by side.

Per case, one data set, the same PyMC model:

* **weak**: ``pw.sample`` on ``pw.WeakODELikelihood`` (p ~ Normal(0, 10) per parameter,
  sigma ~ HalfNormal(1) per state);
* **corrected**: ``pw.forward_correction`` of those draws (route chosen automatically;
  the initial state gets the default prior of ``pw.forward_model``);
* **reference** (``--reference``), a cold forward-solve sampler of exactly the target of the
  correction (``pw.forward_model`` of the same model: same priors, the initial state's
  default prior ``Normal(U[0], 0.5 sd(U))``), ``--ref-tune`` + ``--ref-draws`` per chain,
  started at the truth with default adaptation, as a user without the weak posterior would
  run it:

  - ``numpyro`` (default when the ``peers`` extra is installed): numpyro NUTS on a diffrax
    ``Tsit5`` solve, one process per chain (``benchmarks/peers.py``'s worker);
  - ``pymc``: PyMC's NUTS on ``pw.forward_model`` itself.

The time comparison: the reference's time to the corrected posterior's minimum ESS
(sampling time x ESS_corrected / ESS_reference), against weak sampling + correction. The
corrected posterior's ESS is its NUTS bulk ESS on the NUTS route; on the importance route
with the moved weak draws, the weak draws' minimum bulk ESS times ``importance_ess / S`` (the
weights' efficiency times the chains'); with the t proposals, whose draws are independent,
``importance_ess`` itself.

Printed per case: the time of each stage, the route, the Pareto k and the importance ESS,
the reference's minimum bulk ESS, and per variable ``(mean - mean_ref) / sd_ref`` and
``sd / sd_ref`` for the weak and the corrected posterior.

Run:  python benchmarks/forward_correction.py [--cases lv21,lv41,fhn10,fhn20]
          [--chains 2 --draws 1000] [--reference numpyro|pymc]
          [--ref-tune 1000 --ref-draws 1000] [--test-functions local] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
import xarray as xr

import pymc_wendy as pw

# each case's name in benchmarks/peers.py (the numpyro worker takes its problem from it)
PEER_CASE = {"lotka_volterra": "lv", "fitzhugh_nagumo": "fhn", "lorenz": "lorenz"}
CASES = {
    "lv21": ("lotka_volterra", {"n_points": 21, "noise_ratio": 0.1}),
    "lv41": ("lotka_volterra", {"n_points": 41, "noise_ratio": 0.1}),
    "fhn10": ("fitzhugh_nagumo", {"subsample": 2, "noise_ratio": 0.1}),
    "fhn20": ("fitzhugh_nagumo", {"subsample": 2, "noise_ratio": 0.2}),
    # on demand (--cases lorenz): a cold reference may not finish (--ref-budget)
    "lorenz": ("lorenz", {"n_points": 513, "noise_ratio": 0.1}),
}


def _model(prob, data, test_functions=None) -> pm.Model:
    ode = prob.model
    coords = {"param": ode.params, "state": ode.states, "time": data.t}
    with pm.Model(coords=coords) as model:
        p = pm.Normal("p", 0.0, 10.0, dims="param")
        sigma = pm.HalfNormal("sigma", 1.0, dims="state")
        pw.WeakODELikelihood(
            "U", ode=ode, params=p, sigma=sigma, t=data.t, observed=data.U,
            dims=("time", "state"), test_functions=test_functions,
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


def _min_ess(idata, names=("p", "sigma")) -> float:
    ess = az.ess(idata, var_names=list(names), method="bulk")
    return float(min(float(ess[v].min()) for v in ess.data_vars))


def _pymc_reference(model, prob, data, args) -> dict:
    fmodel, _ = pw.forward_model(model)
    truth = {"p": prob.p_true, "sigma": data.sigma, "U_u0": data.U_true[0]}
    t0 = time.perf_counter()
    with fmodel:
        ref = pm.sample(
            args.ref_draws, tune=args.ref_tune, chains=args.chains, initvals=truth,
            init="adapt_diag", cores=min(args.chains, len(os.sched_getaffinity(0))),
            progressbar=False, random_seed=3, compile_kwargs={"mode": "CVM"},
        )  # fmt: skip
    return {
        "sampler": "PyMC NUTS on pw.forward_model",
        "finished": True,
        "sampling_s": round(time.perf_counter() - t0, 1),
        "min_ess": round(_min_ess(ref), 1),
        "divergences": int(ref.sample_stats["diverging"].sum()),
        "moments": _moments(ref, ["p", "sigma", "U_u0"]),
    }


def _numpyro_reference(problem, prob, data, args) -> dict:
    """numpyro + diffrax through benchmarks/peers.py's worker, one process per chain."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peers

    case = PEER_CASE[problem]
    tmp = Path(tempfile.mkdtemp(prefix="forward_correction_"))
    J = len(prob.params)
    np.savez(
        tmp / f"{case}.npz", t=data.t, U=data.U, p_mu=np.zeros(J), p_sd=np.full(J, 10.0),
        u0_mu=data.U[0], u0_sd=0.5 * np.std(data.U, axis=0), init_p=prob.p_true,
        init_sigma=data.sigma, init_u0=data.U_true[0],
    )  # fmt: skip
    # test_functions: what peers.py's worker passes to our sampler; numpyro ignores it
    opts = argparse.Namespace(
        chains=args.chains, tune=args.ref_tune, draws=args.ref_draws, seed=3, cores=args.chains,
        test_functions="default",
    )  # fmt: skip
    res = peers.finish_peer(peers.start_peer("numpyro", [case], tmp, opts, args.ref_budget))[case]
    out = {"sampler": "numpyro + diffrax (Tsit5, rtol=atol=1e-6)", "finished": res["finished"]}
    if not res["finished"]:
        return {**out, "status": res["status"]}
    parts = [json.loads((tmp / f"{case}-numpyro-{c}.json").read_text()) for c in range(args.chains)]
    post = xr.Dataset(
        {
            name: (("chain", "draw", f"{name}_dim"), np.concatenate(
                [np.asarray(p[f"{key}_draws"]) for p in parts], axis=0))
            for name, key in (("p", "p"), ("sigma", "sigma"), ("U_u0", "u0"))
        }
    )  # fmt: skip
    return {
        **out,
        "compile_s": round(res["compile_s"], 1),
        "sampling_s": round(res["sampling_s"], 1),
        "min_ess": round(_min_ess(post), 1),
        "divergences": res["divergences"],
        "moments": _moments(post, ["p", "sigma", "U_u0"]),
    }


def run_case(name: str, args) -> dict:
    problem, opts = CASES[name]
    prob = pw.get_problem(problem)
    data = prob.simulate(seed=args.seed, **opts)
    model = _model(prob, data, None if args.test_functions == "default" else "local")
    t0 = time.perf_counter()
    with model:
        weak = pw.sample(args.draws, chains=args.chains, progressbar=False, random_seed=1)
    t_weak = time.perf_counter() - t0
    t0 = time.perf_counter()
    corrected = pw.forward_correction(weak, model, random_seed=2, progressbar=False)
    t_corr = time.perf_counter() - t0
    if args.reference == "numpyro":
        ref = _numpyro_reference(problem, prob, data, args)
    else:
        ref = _pymc_reference(model, prob, data, args)
    attrs = corrected.attrs
    if attrs["route"] == "importance" and attrs["proposal"] == "moved":
        S = corrected.posterior.sizes["draw"]
        ess = _min_ess(weak) * attrs["importance_ess"] / S
    elif attrs["route"] == "importance":
        ess = attrs["importance_ess"]
    else:
        ess = _min_ess(corrected)
    out = {
        "case": name,
        "n_points": int(data.t.size),
        "weak_s": round(t_weak, 1),
        "correction_s": round(t_corr, 1),
        "route": attrs["route"],
        "pareto_k": round(float(attrs["pareto_k"]), 3),
        "importance_ess": round(float(attrs["importance_ess"]), 1),
        "n_forward_solves": int(attrs["n_forward_solves"]),
        "corrected_min_ess": round(ess, 1),
        "reference": {k: v for k, v in ref.items() if k != "moments"},
    }
    if ref["finished"]:
        ref_m = ref["moments"]
        to_same_ess = ref["sampling_s"] * ess / ref["min_ess"]
        out["reference_s_to_same_ess"] = round(to_same_ess, 1)
        out["speedup"] = round(to_same_ess / (t_weak + t_corr), 2)
        out["weak_vs_ref"] = _agreement(_moments(weak, ["p", "sigma"]), ref_m)
        out["corrected_vs_ref"] = _agreement(_moments(corrected, ["p", "sigma", "U_u0"]), ref_m)
    return out


def _print(r: dict) -> None:
    ref = r["reference"]
    print(
        f"\n{r['case']} ({r['n_points']} points): weak {r['weak_s']} s, correction "
        f"{r['correction_s']} s ({r['route']}, k = {r['pareto_k']}, ESS {r['importance_ess']}, "
        f"{r['n_forward_solves']} solves; min ESS {r['corrected_min_ess']})"
    )
    if not ref["finished"]:
        print(f"  reference {ref['sampler']}: {ref['status']}")
        return
    print(
        f"  reference {ref['sampler']}: {ref['sampling_s']} s sampling (min ESS "
        f"{ref['min_ess']}, {ref['divergences']} divergences); to the corrected min ESS "
        f"{r['reference_s_to_same_ess']} s: weak + correction {r['speedup']}x faster"
    )
    for label in ("weak_vs_ref", "corrected_vs_ref"):
        for n, v in r[label].items():
            print(f"  {label:17s} {n:6s} z {v['z']}  sd ratio {v['sd_ratio']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="lv21,lv41,fhn10,fhn20")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--draws", type=int, default=1000)
    have_peers = all(importlib.util.find_spec(m) for m in ("jax", "numpyro", "diffrax"))
    ap.add_argument(
        "--reference", choices=("numpyro", "pymc"), default="numpyro" if have_peers else "pymc"
    )
    ap.add_argument("--ref-budget", type=float, default=7200.0, help="numpyro: seconds")
    ap.add_argument("--ref-tune", type=int, default=1000)
    ap.add_argument("--ref-draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--test-functions",
        choices=("default", "local"),
        default="default",
        help="of the weak likelihood (the correction's target does not depend on them)",
    )
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
