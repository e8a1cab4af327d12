"""``pw.sample`` on FitzHugh-Nagumo, 513 points: default (SVD) against local test functions.

The issue's speed goal is stated on this case (4 chains x 1000 draws, 2 cores, sampling under
30 s). Both variants use the same data (10 % noise, seed 0), priors (``p ~ Normal(truth,
0.5 |truth| + 0.1)``, ``sigma ~ HalfNormal(1)`` per state), ``pw.sample`` defaults (whitened,
short tuning, nutpie, cores = CPUs) and sampler seed:

* ``default``: the default test functions (the SVD construction, K = 200: a dense ``S``, the
  compiled linear-in-parameters kernel);
* ``local``: ``test_functions="local"`` (bumps of one radius at strided centres: a banded
  ``S``, the compiled banded kernel, ``pymc_wendy/backends/numba_banded.py``).

Printed per variant: K, wall time of ``pw.sample`` (WENDy-MLE, mode, compilation, sampling),
nutpie's sampling time, gradient evaluations (tuning + draws), sampling CPU ms per gradient
(sampling time x cores / gradients: an upper bound that includes the sampler's own work), min
bulk ESS over ``p`` and ``sigma``, ESS per second of sampling, max R-hat, divergences; and the
largest difference of the two posteriors' means in the default's posterior sd and the ratio
of their sds (the two variants are different approximations, not one computed two ways).
With ``--exact`` both are also compared with the forward-solve posterior of the same model
(``pw.forward_correction`` of the default's draws, validated against a cold numpyro + diffrax
reference in ``docs/forward.md``), which says which approximation is closer.

Run:  python benchmarks/sample_speed.py [--draws 1000] [--chains 4] [--seed 1] [--points 513]
          [--exact] [--variants default,local,k100]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import _variants  # noqa: E402
import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_wendy as pw  # noqa: E402


def _model(prob, data, test_functions: str | None) -> pm.Model:
    truth = np.asarray(prob.p_true, dtype=float)
    with pm.Model() as model:
        p = pm.Normal("p", truth, 0.5 * np.abs(truth) + 0.1)
        sigma = pm.HalfNormal("sigma", 1.0, shape=prob.model.n_states)
        pw.WeakODELikelihood(
            "U", ode=prob.model, params=p, sigma=sigma, t=data.t, observed=data.U,
            test_functions=test_functions,
        )  # fmt: skip
    return model


def _moments(post) -> dict:
    return {
        "mean": {v: post[v].mean(("chain", "draw")).values for v in ("p", "sigma")},
        "sd": {v: post[v].std(("chain", "draw")).values for v in ("p", "sigma")},
    }


def _against(row: dict, ref: dict) -> str:
    z = np.concatenate([(row["mean"][v] - ref["mean"][v]) / ref["sd"][v] for v in ref["mean"]])
    ratio = np.concatenate([row["sd"][v] / ref["sd"][v] for v in ref["sd"]])
    return (
        f"max |mean diff| / sd {np.max(np.abs(z)):.2f} (median {np.median(np.abs(z)):.2f}); "
        f"sd ratio {ratio.min():.2f}-{ratio.max():.2f}\n    (mean diff) / sd "
        f"{np.array2string(z, precision=2)}\n    sd ratio {np.array2string(ratio, precision=2)}"
    )


def _run(model, args) -> dict:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pw.sample(
            args.draws, model=model, chains=args.chains, random_seed=args.seed,
            progressbar=False, discard_tuned_samples=False,
        )  # fmt: skip
    wall = time.perf_counter() - t0
    post = idata.posterior.to_dataset()[["p", "sigma"]]
    ess, rhat = az.ess(post), az.rhat(post)
    sampling = float(idata.posterior.attrs["sampling_time"])
    grads = int(idata.warmup_sample_stats.n_steps.sum() + idata.sample_stats.n_steps.sum())
    return {
        "wall": wall,
        "sampling": sampling,
        "grads": grads,
        "min_ess": min(float(ess[v].min()) for v in ess.data_vars),
        "rhat": max(float(rhat[v].max()) for v in rhat.data_vars),
        "div": int(idata.sample_stats.diverging.sum()),
        "idata": idata,
        **_moments(post),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--points", type=int, default=513)
    ap.add_argument("--exact", action="store_true", help="compare with the forward-solve posterior")
    ap.add_argument(
        "--variants", default="default,local",
        help="comma-separated: default, local, k<N> (Kmax = N); the first is the reference",
    )  # fmt: skip
    args = ap.parse_args(argv)
    try:
        variants = {v: _variants.test_functions(v) for v in args.variants.split(",") if v}
    except ValueError as exc:
        ap.error(str(exc))
    prob = pw.get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=args.points, noise_ratio=0.1, seed=0)
    cores = min(4, len(os.sched_getaffinity(0)))
    print(
        f"FitzHugh-Nagumo, {args.points} points, 10 % noise; pw.sample {args.chains} x "
        f"{args.draws}, {cores} cores\n"
        f"{'variant':<9}{'K':>5}{'wall s':>8}{'sample s':>9}{'grads':>8}{'CPU ms/grad':>12}"
        f"{'min ESS':>8}{'ESS/s':>7}{'R-hat':>7}{'div':>5}"
    )
    rows, models = {}, {}
    for name, tf in variants.items():
        model = models[name] = _model(prob, data, tf)
        K = model["U"].owner.op.likelihood.K
        r = rows[name] = _run(model, args)
        print(
            f"{name:<9}{K:>5}{r['wall']:>8.1f}{r['sampling']:>9.1f}{r['grads']:>8}"
            f"{1e3 * r['sampling'] * min(cores, args.chains) / r['grads']:>12.2f}"
            f"{r['min_ess']:>8.0f}{r['min_ess'] / r['sampling']:>7.0f}{r['rhat']:>7.3f}"
            f"{r['div']:>5}",
            flush=True,
        )
    first, ref = next(iter(rows.items()))
    for name, row in list(rows.items())[1:]:
        print(f"{name} against {first}: {_against(row, ref)}; sampling time ratio "
              f"{ref['sampling'] / row['sampling']:.1f}x")  # fmt: skip
    if args.exact:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exact = pw.forward_correction(
                ref["idata"], models[first], random_seed=2, progressbar=False
            )
        print(f"forward-solve posterior ({exact.attrs['route']}, Pareto k "
              f"{exact.attrs['pareto_k']:.2f}, {time.perf_counter() - t0:.0f} s)")  # fmt: skip
        truth = _moments(exact.posterior.to_dataset())
        for name, row in rows.items():
            print(f"{name} against the forward-solve posterior: {_against(row, truth)}")


if __name__ == "__main__":
    main()
