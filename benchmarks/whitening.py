"""Whitened against plain NUTS in ``pw.sample``: tuning cost, ESS/s and R-hat, in one run.

``pw.sample(whiten=True)`` samples the model in coordinates whitened by the Laplace
approximation at the posterior mode (``pymc_wendy.bayes.whitening``) and tunes for fewer iterations;
``whiten=False`` is the plain run (nutpie, low-rank mass matrix adaptation, from the
WENDy-MLE). Each case is sampled with the same data, priors, chains and seed:

* FitzHugh-Nagumo, 513 points, 10 % noise, and Lotka-Volterra, 257 points, 10 % noise;
  ``p ~ Normal(truth, 0.5 |truth| + 0.1)``, ``sigma ~ HalfNormal(1)`` per state (issue 20's
  setting).
* Variants: plain with PyMC's default 1000 tuning iterations; plain with a short tuning;
  whitened with the short tuning; whitened with 1000.

Printed per variant: wall time of ``pw.sample`` (everything: WENDy-MLE, mode and Hessian,
compilation, sampling), nutpie's sampling time, gradient evaluations in tuning and in draws
and the tuning share, min bulk ESS over ``p`` and ``sigma``, ESS per second of sampling and of
wall time, max R-hat, divergences, and the largest difference of posterior means from the
plain 1000-tuning run in posterior sd.

Run:  python benchmarks/whitening.py [--cases fitzhugh_nagumo,lotka_volterra] [--draws 1000]
          [--chains 4] [--short-tune 300] [--json PATH]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_wendy as pw  # noqa: E402

CASES = {"fitzhugh_nagumo": 513, "lotka_volterra": 257}
NOISE_RATIO, DATA_SEED = 0.10, 0


def _model(prob, data) -> pm.Model:
    truth = np.asarray(prob.p_true, dtype=float)
    with pm.Model() as model:
        p = pm.Normal("p", truth, 0.5 * np.abs(truth) + 0.1)
        sigma = pm.HalfNormal("sigma", 1.0, shape=prob.model.n_states)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, sigma=sigma, t=data.t, observed=data.U)
    return model


def _run(model, whiten: bool, tune: int, args) -> dict:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pw.sample(
            args.draws,
            model=model,
            tune=tune,
            chains=args.chains,
            whiten=whiten,
            random_seed=args.seed,
            progressbar=False,
            discard_tuned_samples=False,
        )
    wall = time.perf_counter() - t0
    post = idata.posterior.to_dataset()[["p", "sigma"]]
    ess = az.ess(post)
    rhat = az.rhat(post)
    sampling = float(idata.posterior.attrs["sampling_time"])
    n_tune = int(idata.warmup_sample_stats.n_steps.sum())
    n_draw = int(idata.sample_stats.n_steps.sum())
    min_ess = min(float(ess[v].min()) for v in ess.data_vars)
    return {
        "whiten": whiten,
        "tune": tune,
        "wall_s": wall,
        "sampling_s": sampling,
        "grads_tune": n_tune,
        "grads_draws": n_draw,
        "tune_share": n_tune / (n_tune + n_draw),
        "min_ess": min_ess,
        "ess_per_s_sampling": min_ess / sampling,
        "ess_per_s_wall": min_ess / wall,
        "max_rhat": max(float(rhat[v].max()) for v in rhat.data_vars),
        "divergences": int(idata.sample_stats.diverging.sum()),
        "mean": {v: post[v].mean(("chain", "draw")).values.tolist() for v in post.data_vars},
        "sd": {v: post[v].std(("chain", "draw")).values.tolist() for v in post.data_vars},
    }


def _max_z(row: dict, ref: dict) -> float:
    return max(
        float(np.max(np.abs(np.subtract(row["mean"][v], ref["mean"][v])) / np.array(ref["sd"][v])))
        for v in ref["mean"]
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--short-tune", type=int, default=pw.bayes.sampling.WHITENED_TUNE)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    out = {"args": vars(args), "cases": {}}
    for name in args.cases.split(","):
        prob = pw.get_problem(name)
        data = prob.simulate(n_points=CASES[name], noise_ratio=NOISE_RATIO, seed=DATA_SEED)
        model = _model(prob, data)
        print(f"\n{name}, {CASES[name]} points, 10 % noise, {args.chains} x {args.draws} draws")
        print(
            f"{'variant':<18}{'wall s':>8}{'sample s':>9}{'grads tune':>11}{'draws':>8}"
            f"{'tune %':>7}{'min ESS':>8}{'ESS/s':>7}{'ESS/s wall':>11}{'R-hat':>7}{'div':>5}"
            f"{'|dmean|/sd':>11}"
        )
        rows = []
        for whiten, tune in (
            (False, 1000),
            (False, args.short_tune),
            (True, args.short_tune),
            (True, 1000),
        ):
            row = _run(model, whiten, tune, args)
            rows.append(row)
            label = f"{'whitened' if whiten else 'plain'}, tune {tune}"
            print(
                f"{label:<18}{row['wall_s']:8.1f}{row['sampling_s']:9.1f}"
                f"{row['grads_tune']:11d}{row['grads_draws']:8d}{100 * row['tune_share']:7.0f}"
                f"{row['min_ess']:8.0f}{row['ess_per_s_sampling']:7.0f}"
                f"{row['ess_per_s_wall']:11.0f}{row['max_rhat']:7.3f}{row['divergences']:5d}"
                f"{_max_z(row, rows[0]):11.2f}",
                flush=True,
            )
        out["cases"][name] = rows
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
