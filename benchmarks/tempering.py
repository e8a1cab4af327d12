"""Replica-exchange tempering (``sample_sft``) against plain NUTS and SMC: wall time, ESS/s, R-hat.

Three cases:

* ``bimodal``: logistic growth written with ``p1 = q1^2`` (129 points, 10 % noise): the weak
  likelihood is exactly symmetric in ``q1``, the prior ``N(0.5, 1)`` makes ``q1 = +1`` about e
  times heavier than ``q1 = -1``, and between them the weak likelihood is about 2300 log-density
  units lower. Four chains start two per mode. Plain NUTS (PyMC's sampler, which takes one
  start per chain) keeps them there; ``sample_sft`` (power ladder) should mix them;
  ``pm.sample_smc`` (likelihood tempering from the prior) is the other baseline.
* ``spurious``: Lotka-Volterra (129 points, 10 % noise, seed 11, ``N(0, 10)`` prior), whose
  weak likelihood has a local mode about 1840 log-density units below the WENDy-MLE mode
  (where ``pm.find_MAP`` from zeros ends). Two chains start there, two at the WENDy-MLE.
  Plain NUTS, ``sample_sft`` with each relaxation, and SMC; the share of draws left in the
  spurious mode is printed.
* ``workers``: the same ``sample_sft`` run (Lotka-Volterra, 129 points) with its populations
  in one process and in ``--cores`` worker processes: the speed-up.
* ``fhn``: FitzHugh-Nagumo, 513 points, 10 % noise (unimodal): the price of the ladder on the
  problem of the NUTS speed goal, against ``pymc_wendy.sample`` (nutpie) and SMC.

For each method: wall time (sampling, compile included), minimum bulk ESS over parameters of the
posterior (the top rung for SFT), ESS per second, max R-hat, and for ``bimodal`` the share of
draws in the heavier mode. Ratios against plain NUTS are printed from the same run.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/tempering.py [--cases bimodal,spurious,fhn,workers]
      [--draws N] [--rungs R] [--cores C]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_wendy as pw  # noqa: E402


def _model(name: str, n_points: int, seed: int):
    prob = pw.get_problem(name)
    data = prob.simulate(n_points=n_points, noise_ratio=0.1, seed=seed)
    with pm.Model(coords={"param": list(prob.params)}) as model:
        p = pm.Normal("p", 0.0, 10.0, dims="param")
        pw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    return model


def _row(label, dt, seconds, var="p"):
    ess = float(az.ess(dt, var_names=[var])[var].min())
    rhat = float(az.rhat(dt, var_names=[var])[var].max())
    print(
        f"{label:<26} {seconds:>8.1f} s   min ESS {ess:>7.0f}   ESS/s {ess / seconds:>7.2f}   "
        f"max R-hat {rhat:>7.3f}",
        flush=True,
    )
    return ess / seconds


def _swaps(dt) -> np.ndarray:
    return dt.sample_stats["swap_accept"].mean("chain").values.round(2)


def _timed(fn):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn()
    return out, time.perf_counter() - start


def _split_nuts(model, starts, draws):
    """PyMC's NUTS with one start per chain (nutpie takes one start for all)."""
    return pm.sample(
        draws,
        tune=draws,
        chains=4,
        cores=1,
        initvals=starts,
        model=model,
        nuts_sampler="pymc",
        random_seed=1,
        progressbar=False,
        compute_convergence_checks=False,
    )


def _squared_logistic(t, u, q):
    return [q[0] ** 2 * u[0] - q[1] * u[0] ** 2]


def bimodal(draws: int, rungs: int, cores: int | None) -> None:
    print("\n## bimodal: logistic with p1 = q1^2 (129 points, 10 % noise); q1 ~ N(0.5, 1)")
    ode = pw.ODEModel(_squared_logistic, ["u"], ["q1", "q2"])
    data = pw.get_problem("logistic").simulate(n_points=129, noise_ratio=0.1, seed=5)
    with pm.Model() as model:
        q1 = pm.Normal("q1", 0.5, 1.0)
        q2 = pm.Normal("q2", 0.0, 10.0)
        pw.WeakODELikelihood("U", ode=ode, params=[q1, q2], t=data.t, observed=data.U)
    starts = [{"q1": -1.0, "q2": 1.0}, {"q1": 1.0, "q2": 1.0}] * 2
    expected = 1.0 / (1.0 + np.exp(-1.0))  # share of the q1 > 0 mode (prior ratio e)

    def share(dt):
        return float((dt.posterior["q1"].values > 0).mean())

    nuts, t_nuts = _timed(lambda: _split_nuts(model, starts, draws))
    base = _row("NUTS (pymc), split starts", nuts, t_nuts, var="q1")
    print(f"{'':<26} share of q1 > 0: {share(nuts):.3f} (exact about {expected:.3f})")
    sft, t_sft = _timed(
        lambda: pw.sample_sft(
            draws,
            tune=draws,
            chains=4,
            rungs=rungs,
            relaxation="power",
            model=model,
            initvals=starts,
            random_seed=2,
            progressbar=False,
            cores=cores,
        )
    )
    r = _row(f"sample_sft power ({rungs})", sft, t_sft, var="q1")
    print(f"{'':<26} share of q1 > 0: {share(sft):.3f}; swap acceptance per pair {_swaps(sft)}")
    smc, t_smc = _timed(
        lambda: pm.sample_smc(
            draws, chains=4, cores=1, model=model, random_seed=4, progressbar=False
        )
    )
    s = _row("pm.sample_smc", smc, t_smc, var="q1")
    print(f"{'':<26} share of q1 > 0: {share(smc):.3f}")
    print(f"ESS/s ratios to plain NUTS: sample_sft {r / base:.2f}, SMC {s / base:.2f}")


def spurious(draws: int, rungs: int, cores: int | None) -> None:
    print("\n## spurious: Lotka-Volterra, 129 points, 10 % noise, seed 11; p ~ N(0, 10)")
    prob = pw.get_problem("lotka_volterra")
    data = prob.simulate(n_points=129, noise_ratio=0.1, seed=11)
    with pm.Model() as model:
        p = pm.Normal("p", 0.0, 10.0, shape=4)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the local mode pm.find_MAP reaches from zeros, polished
        wrong = pm.find_MAP(
            start={"p": np.array([1.84, 40.4, -2.66, -26.2])}, model=model, progressbar=False
        )["p"]
    mle = pw.initial_values(model)["p"]
    logp = model.compile_logp()
    print(
        f"spurious mode p = {wrong.round(2)} (log density {logp({'p': wrong}):.0f}); "
        f"WENDy-MLE p = {mle.round(2)} ({logp({'p': mle}):.0f})"
    )
    starts = [{"p": wrong}, {"p": mle}] * 2

    def wrong_share(dt):  # the spurious mode has p2 near 40, the WENDy-MLE near -1
        return float((dt.posterior["p"].values[..., 1] > 20).mean())

    nuts, t_nuts = _timed(lambda: _split_nuts(model, starts, draws))
    base = _row("NUTS (pymc), split starts", nuts, t_nuts)
    print(f"{'':<26} share of draws in the spurious mode: {wrong_share(nuts):.3f}")
    for relaxation in ("hybrid", "covariance", "power"):
        sft, t_sft = _timed(
            lambda relaxation=relaxation: pw.sample_sft(
                draws,
                tune=draws,
                chains=4,
                rungs=rungs,
                relaxation=relaxation,
                model=model,
                initvals=starts,
                random_seed=2,
                progressbar=False,
                cores=cores,
            )
        )
        r = _row(f"sample_sft {relaxation} ({rungs})", sft, t_sft)
        print(
            f"{'':<26} share of draws in the spurious mode: {wrong_share(sft):.3f}; "
            f"swap acceptance per pair {_swaps(sft)}; ESS/s ratio to NUTS {r / base:.2f}"
        )
    smc, t_smc = _timed(
        lambda: pm.sample_smc(
            draws, chains=4, cores=1, model=model, random_seed=4, progressbar=False
        )
    )
    s = _row("pm.sample_smc", smc, t_smc)
    print(f"{'':<26} share of draws in the spurious mode: {wrong_share(smc):.3f}")
    print(f"ESS/s ratio to plain NUTS: SMC {s / base:.2f}")


def workers(draws: int, rungs: int, cores: int | None) -> None:
    cores = cores or os.cpu_count() or 1
    print(f"\n## workers: sample_sft with populations in 1 and in {cores} processes")
    model = _model("lotka_volterra", 129, 0)
    times = {}
    for c in (1, cores):
        dt, times[c] = _timed(
            lambda c=c: pw.sample_sft(
                draws,
                tune=draws,
                chains=4,
                rungs=rungs,
                model=model,
                random_seed=2,
                progressbar=False,
                cores=c,
            )
        )
        print(
            f"cores={c}: {times[c]:.1f} s (sampling {dt.sample_stats.attrs['sampling_time']:.1f} s)"
        )
    print(f"speed-up with {cores} processes: {times[1] / times[cores]:.2f}x")


def fhn(draws: int, rungs: int, cores: int | None) -> None:
    print("\n## fhn: FitzHugh-Nagumo, 513 points, 10 % noise")
    model = _model("fitzhugh_nagumo", 513, 0)
    nuts, t_nuts = _timed(
        lambda: pw.sample(
            draws, tune=draws, chains=4, model=model, random_seed=1, progressbar=False
        )
    )
    base = _row("pw.sample (nutpie)", nuts, t_nuts)
    sft, t_sft = _timed(
        lambda: pw.sample_sft(
            draws,
            tune=draws,
            chains=4,
            rungs=rungs,
            model=model,
            random_seed=2,
            progressbar=False,
            cores=cores,
        )
    )
    r = _row(f"sample_sft ({rungs} rungs)", sft, t_sft)
    print(f"{'':<26} swap acceptance per pair {_swaps(sft)}")
    smc, t_smc = _timed(
        lambda: pm.sample_smc(
            draws, chains=4, cores=1, model=model, random_seed=4, progressbar=False
        )
    )
    s = _row("pm.sample_smc", smc, t_smc)
    print(f"ESS/s ratios to nutpie: sample_sft {r / base:.3f}, SMC {s / base:.3f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="bimodal,fhn")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--rungs", type=int, default=6)
    ap.add_argument("--cores", type=int, default=None, help="sample_sft worker processes")
    args = ap.parse_args(argv)
    for case in args.cases.split(","):
        cases = {"bimodal": bimodal, "spurious": spurious, "fhn": fhn, "workers": workers}
        cases[case](args.draws, args.rungs, args.cores)


if __name__ == "__main__":
    main()
