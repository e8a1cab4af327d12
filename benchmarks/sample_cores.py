"""``pw.sample``'s default ``cores`` against one core, FitzHugh-Nagumo, in one run.

PyMC's default ``cores`` counts physical cores, so on a 2-CPU virtual machine every chain ran
on one; ``pw.sample`` now defaults to the CPUs the process may use (at most 4). Prints wall
time, CPU time / wall time and min bulk ESS per setting, and the wall-time ratio.

Run:  python benchmarks/sample_cores.py [--draws 500] [--tune 500] [--chains 4]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import arviz as az
import pymc as pm

import pymc_wendy as pw
from pymc_wendy.bayes.sampling import _usable_cpus


def _cpu_seconds() -> float:
    # PyMC samples in worker processes: count the reaped children's CPU time too.
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run(data, prob, cores, args):
    with pm.Model():
        p = pm.Normal("p", 0, 10, shape=prob.model.n_params)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
        kw = {} if cores is None else {"cores": cores}
        wall, cpu = time.perf_counter(), _cpu_seconds()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pw.sample(
                args.draws,
                tune=args.tune,
                chains=args.chains,
                random_seed=1,
                progressbar=False,
                **kw,
            )
        wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
    ess = float(az.ess(idata)["p"].min())
    label = f"default (cores={min(4, _usable_cpus())})" if cores is None else f"cores={cores}"
    print(f"{label:<22} wall {wall:6.1f} s  CPU/wall {cpu / wall:.2f}  min ESS {ess:.0f}")
    return wall


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--chains", type=int, default=4)
    args = ap.parse_args(argv)
    prob = pw.get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=513, noise_ratio=0.1, seed=0)
    print(f"FitzHugh-Nagumo 513 pts, 10 %, {args.chains} x ({args.tune} + {args.draws})")
    one = run(data, prob, 1, args)
    default = run(data, prob, None, args)
    print(f"wall time default / one core: {default / one:.2f}")


if __name__ == "__main__":
    main()
