"""The correction's NUTS route: nutpie on the compiled forward model against PyMC's NUTS.

Per case, one data set and one weak posterior (``pw.sample(check=False)``), then
``pw.forward_correction(method="nuts")`` twice on the same draws, once per sampler
(``nuts_sampler="nutpie"``: the solves compiled into nutpie's log-density; ``"pymc"``: PyMC's
NUTS around the Python solve Op). Printed per sampler: the route's time (compilation
included), the minimum bulk ESS over the parameters and noise levels, ESS per second and its
ratio nutpie / PyMC, divergences; and the largest difference of the two posterior means in
PyMC's posterior sds (the same target: it should be within Monte Carlo error).

Run:  python benchmarks/nuts_route.py [--cases lv21,fhn129,pk_oral] [--draws 1000]
      [--chains 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_wendy as pw

CASES = {
    "lv21": ("lotka_volterra", {"n_points": 21, "noise_ratio": 0.1}, "normal"),
    "fhn129": ("fitzhugh_nagumo", {"n_points": 129, "noise_ratio": 0.1}, "normal"),
    "pk_oral": ("pk_oral", {"n_points": 24, "noise_ratio": 0.1}, "lognormal"),
}


def _model(problem: str, options: dict, noise: str, seed: int) -> pm.Model:
    prob = pw.get_problem(problem)
    data = prob.simulate(seed=seed, **options)
    ode = prob.model
    with pm.Model(coords={"param": ode.params, "state": ode.states}) as model:
        if noise == "lognormal":  # positive rates and positive data
            p = pm.LogNormal("p", np.log(prob.p_true), 1.0, dims="param")
            kwargs, U = {"noise": "lognormal"}, np.abs(data.U)
        else:  # benchmarks/forward_correction.py's priors
            p = pm.Normal("p", 0.0, 10.0, dims="param")
            kwargs, U = {}, data.U
        sigma = pm.HalfNormal("sigma", 1.0, dims="state")
        pw.WeakODELikelihood("U", ode=ode, params=p, sigma=sigma, t=data.t, observed=U, **kwargs)
    return model


def _min_ess(idata) -> float:
    ess = az.ess(idata, var_names=["p", "sigma"], method="bulk")
    return float(min(float(ess[v].min()) for v in ess.data_vars))


def _run(case: str, args) -> dict:
    problem, options, noise = CASES[case]
    model = _model(problem, options, noise, args.seed)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weak = pw.sample(args.draws, chains=args.chains, check=False, progressbar=False,
                         random_seed=args.seed)  # fmt: skip
    out = {"case": case}
    post = {}
    for sampler in ("nutpie", "pymc"):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = pw.forward_correction(
                weak, model, method="nuts", nuts_sampler=sampler, draws=args.draws,
                chains=args.chains, random_seed=args.seed, progressbar=False,
            )  # fmt: skip
        seconds = time.perf_counter() - start
        ess = _min_ess(result)
        out[sampler] = {
            "seconds": round(seconds, 1),
            "min_ess": round(ess, 0),
            "ess_per_s": round(ess / seconds, 2),
            "divergences": int(result.sample_stats["diverging"].sum()),
        }
        post[sampler] = result.posterior
    out["ess_per_s_ratio"] = round(out["nutpie"]["ess_per_s"] / out["pymc"]["ess_per_s"], 2)
    shifts = []
    for var in ("p", "sigma"):
        a = post["nutpie"][var].mean(("chain", "draw")).values
        b = post["pymc"][var].mean(("chain", "draw")).values
        sd = post["pymc"][var].std(("chain", "draw")).values
        shifts.append(np.max(np.abs(a - b) / sd))
    out["max_mean_difference_sd"] = round(float(max(shifts)), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="lv21,fhn129,pk_oral")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        row = _run(case, args)
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
