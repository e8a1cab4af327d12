"""The README's tempering example: ``sample_sft`` against ``pw.sample`` on the same model.

The README's Lotka-Volterra model (257 points, 10 % noise, ``p ~ Normal(0, 10)``, ``sigma ~
HalfNormal(1)`` per state) with the default or local test functions;
``sample_sft(draws, tune=tune, chains=chains, rungs=rungs)`` and then ``pw.sample(draws,
chains=chains)`` on the same model. Printed: ``sample_sft``'s wall time, the top rung's mean
leapfrog steps per draw, min bulk ESS over ``p`` and ``sigma``, ESS/s, the swap acceptance
per pair and the per-rung ESS/s (min ESS x rungs / wall); ``pw.sample``'s wall and sampling
time, min ESS and ESS/s of both.

Run:  python benchmarks/tempering_readme.py [--test-functions default|local] [--draws 500]
          [--tune 500] [--chains 4] [--rungs 10]
"""

from __future__ import annotations

import argparse
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_wendy as pw


def lotka_volterra(t, u, p):
    x, y = u
    return [p[0] * x + p[1] * x * y, p[2] * y + p[3] * x * y]


def _min_ess(idata) -> float:
    ess = az.ess(idata.posterior.to_dataset()[["p", "sigma"]])
    return min(float(ess[v].min()) for v in ess.data_vars)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test-functions", choices=("default", "local"), default="local")
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--rungs", type=int, default=10)
    args = ap.parse_args(argv)
    ode = pw.ODEModel(lotka_volterra, states=["x", "y"], params=["p1", "p2", "p3", "p4"])
    data = pw.simulate(
        ode, [3, -1, -6, 1], u0=[1, 1], t_span=(0, 5), n_points=257, noise_ratio=0.1, seed=0
    )
    tf = None if args.test_functions == "default" else args.test_functions
    with pm.Model(coords={"param": ode.params, "state": ode.states}) as model:
        p = pm.Normal("p", 0, 10, dims="param")
        sigma = pm.HalfNormal("sigma", 1, dims="state")
        pw.WeakODELikelihood(
            "U", ode=ode, params=p, sigma=sigma, t=data.t, observed=data.U, test_functions=tf
        )
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pw.sample_sft(
            args.draws, tune=args.tune, chains=args.chains, rungs=args.rungs,
            progressbar=False, random_seed=1,
        )  # fmt: skip
    wall = time.perf_counter() - t0
    ss = idata.sample_stats
    ess = _min_ess(idata)
    print(
        f"sample_sft, {args.test_functions} test functions: wall {wall:.1f} s; top-rung steps "
        f"per draw {float(ss['n_steps'].mean()):.1f}; min ESS {ess:.0f}; ESS/s {ess / wall:.1f}; "
        f"per-rung ESS/s {ess * args.rungs / wall:.1f}\n"
        f"  swap acceptance per pair {np.round(ss['swap_accept'].mean('chain').values, 2)}"
    )
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = pw.sample(args.draws, chains=args.chains, progressbar=False, random_seed=1)
    wall = time.perf_counter() - t0
    sampling = float(ref.posterior.attrs["sampling_time"])
    ess = _min_ess(ref)
    print(
        f"pw.sample: wall {wall:.1f} s, sampling {sampling:.1f} s, min ESS {ess:.0f}; ESS/s "
        f"{ess / wall:.1f} (wall), {ess / sampling:.1f} (sampling)"
    )


if __name__ == "__main__":
    main()
