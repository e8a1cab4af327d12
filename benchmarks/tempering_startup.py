"""Start-up of ``sample_sft``: what a call costs before its first transition, per model.

``sample_sft`` compiles the tempered model (a pytensor function with the numba linker) and
then runs NUTS transitions compiled with numba. Until 2026-11-30 the transition was
specialised on each model's log-density function, so every call on a new model compiled the
tree building again (10-30 s); it now takes the log density as a first-class function of one
fixed signature and is compiled once, cached on disk.

Printed per model, in one process, in order: the wall time of a short ``sample_sft`` call
(``--draws`` + ``--tune``, 4 chains, 6 rungs), its sampling time (the transitions and
swaps, from ``sample_stats.attrs["sampling_time"]``) and the difference, the start-up; and
the start-up as a share of the call. Measured against the same call's own sampling, so
the ratio carries over between machines and loads better than the seconds.

Run:  python benchmarks/tempering_startup.py [--draws 50] [--tune 50]
          [--problems lotka_volterra,logistic,fitzhugh_nagumo,lotka_volterra]
"""

from __future__ import annotations

import argparse
import time
import warnings

import pymc as pm

import pymc_wendy as pw


def _one(name: str, draws: int, tune: int) -> tuple[float, float]:
    prob = pw.get_problem(name)
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    with pm.Model() as model:
        p = pm.Normal("p", 0.0, 10.0, shape=len(prob.params))
        pw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short runs: the ladder diagnostics warn
        dt = pw.sample_sft(
            draws, tune=tune, chains=4, rungs=6, model=model, random_seed=1, progressbar=False,
            check=False,
        )  # fmt: skip
    return time.perf_counter() - start, float(dt.sample_stats.attrs["sampling_time"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=50)
    ap.add_argument("--tune", type=int, default=50)
    ap.add_argument("--problems", default="lotka_volterra,logistic,fitzhugh_nagumo,lotka_volterra")
    args = ap.parse_args(argv)
    print(f"{'problem':<18} {'wall s':>8} {'sampling s':>11} {'start-up s':>11} {'share':>6}")
    for name in args.problems.split(","):
        wall, sampling = _one(name, args.draws, args.tune)
        print(
            f"{name:<18} {wall:8.1f} {sampling:11.1f} {wall - sampling:11.1f} "
            f"{(wall - sampling) / wall:6.2f}"
        )


if __name__ == "__main__":
    main()
