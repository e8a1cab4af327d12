"""Weak posterior against the exact posterior on one-compartment oral data (issue 34).

``pk_oral`` (one oral dose at t = 0, ``C(0) = 0`` known): C(t) = a ka / (ka - ke)
(exp(-ke t) - exp(-ka t)). Because the ODE has this closed form, the reference posterior is
the exact one: the same priors and the same Gaussian noise model with the solution computed
exactly (no solver error), sampled by NUTS (nutpie). It is what a forward-solve sampler
(numpyro + diffrax in ``benchmarks/peers.py``) converges to.

Ours: ``pw.WeakODELikelihood(..., initial_state=[0], t0=0)`` with the noise level inferred,
sampled by ``pw.sample``; and the same without the known state.

Data: ``n`` samples from 0.5 h to 24 h (geometric spacing: dense early, where the rise is),
additive noise of ``noise_ratio`` x RMS(C). Priors: ``ka, ke, a ~ LogNormal(log truth, 1)``,
``sigma ~ HalfNormal(RMS(C))``.

Prints, per data set: posterior means and sds of both, ``(mean - mean_ref) / sd_ref``, the sd
ratio and the sampling times. Results are written to
``benchmarks/results/pk_reference/<n>_<noise>.json``.

``--radii`` gives the weak likelihood's test-function radii (hours) instead of the default.

``--coverage N`` runs the frequentist check instead: WENDy-MLE with the known state and the
true noise level (``pw.fit``, Hessian intervals; ``--bias-correction`` passes
``bias_correction=``) on ``N`` data sets of the design, the
coverage of 95 % intervals per parameter with its Monte Carlo standard error, the mean
z-score and the median standard error beside the exact likelihood's (Fisher information of
the closed form). Written to ``<n>_<noise>_coverage.json``.

Run:  python benchmarks/pk_reference.py [--n 20] [--noise 0.1] [--seeds 0,1,2] [--radii ...]
      [--coverage 200 [--bias-correction profile]]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt

import pymc_wendy as pw

ROOT = Path(__file__).resolve().parent / "results" / "pk_reference"
P = pw.get_problem("pk_oral")
NAMES = list(P.params)


def data(n: int, noise: float, seed: int):
    t = np.geomspace(0.5, 24.0, n)
    C = pw.solve(P.model, P.p_true, P.u0, np.r_[0.0, t])[1:, 0]
    sigma = noise * np.sqrt(np.mean(C**2))
    return t, C + sigma * np.random.default_rng(seed).standard_normal(n), sigma


def _priors(scale: float):
    p = pm.LogNormal("p", mu=np.log(P.p_true), sigma=1.0, shape=3)
    s = pm.HalfNormal("sigma", sigma=scale)
    return p, s


def reference(t, y, draws: int):
    with pm.Model() as model:
        p, s = _priors(np.sqrt(np.mean(y**2)))
        ka, ke, a = p[0], p[1], p[2]
        mean = a * ka / (ka - ke) * (pt.exp(-ke * t) - pt.exp(-ka * t))
        pm.Normal("y", mu=mean, sigma=s, observed=y)
    start = time.perf_counter()
    idata = pm.sample(
        draws, tune=1000, chains=4, nuts_sampler="nutpie", progressbar=False,
        initvals={"p": P.p_true}, random_seed=1, model=model,
    )  # fmt: skip
    return idata, time.perf_counter() - start, model


def weak(t, y, draws: int, known: bool, radii=None):
    opts = {"initial_state": [0.0], "t0": 0.0} if known else {}
    if radii is not None:
        opts["test_functions"] = {"radii": radii}
    with pm.Model():
        p, s = _priors(np.sqrt(np.mean(y**2)))
        pw.WeakODELikelihood("y", ode=P.model, params=p, t=t, observed=y[:, None], sigma=s, **opts)
        start = time.perf_counter()
        idata = pw.sample(draws, chains=4, progressbar=False, random_seed=1)
    return idata, time.perf_counter() - start


def exact_stderr(t: np.ndarray, sigma: float) -> np.ndarray:
    """Standard errors of the exact likelihood at the truth (Fisher information)."""
    ka, ke, a = P.p_true
    e1, e2 = np.exp(-ke * t), np.exp(-ka * t)
    g = a / (ka - ke)
    J = np.column_stack(
        [
            -g * ke / (ka - ke) * (e1 - e2) + g * ka * t * e2,
            g * ka / (ka - ke) * (e1 - e2) - g * ka * t * e1,
            ka / (ka - ke) * (e1 - e2),
        ]
    )
    return sigma * np.sqrt(np.diag(np.linalg.inv(J.T @ J)))


def coverage(n: int, noise: float, n_sets: int, bias_correction=None) -> dict:
    z, se, failed = [], [], 0
    for seed in range(n_sets):
        if seed % 20 == 0:
            print(f"  data set {seed}/{n_sets}", flush=True)
        t, y, sigma = data(n, noise, 1000 + seed)
        res = pw.fit(P.model, t, y[:, None], initial_state=[0.0], t0=0.0, p0=P.p_true, sigma=sigma)
        if not res.success:
            failed += 1
            continue
        z.append((res.x - P.p_true) / res.stderr)
        se.append(res.stderr)
    z, se = np.array(z), np.array(se)
    cover = np.mean(np.abs(z) < 1.959964, axis=0)
    t, _, sigma = data(n, noise, 0)
    return {
        "n_sets": n_sets,
        "failed": failed,
        "coverage": cover.tolist(),
        "mc_se": np.sqrt(cover * (1 - cover) / len(z)).tolist(),
        "mean_z": z.mean(0).tolist(),
        "sd_z": z.std(0).tolist(),
        "median_se": np.median(se, 0).tolist(),
        "exact_se": exact_stderr(t, sigma).tolist(),
    }


def summary(idata) -> dict:
    post = idata.posterior
    p = post["p"].values.reshape(-1, 3)
    s = post["sigma"].values.ravel()
    return {
        "mean": [*p.mean(0).tolist(), float(s.mean())],
        "sd": [*p.std(0).tolist(), float(s.std())],
        "divergences": int(idata.sample_stats["diverging"].values.sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument(
        "--radii", default=None,
        help="comma-separated test-function radii in hours (default: the library's choice)",
    )  # fmt: skip
    ap.add_argument("--coverage", type=int, default=None, help="number of data sets")
    ap.add_argument("--bias-correction", default=None, help="bias_correction= of the fits")
    args = ap.parse_args()
    ROOT.mkdir(parents=True, exist_ok=True)
    if args.coverage is not None:
        record = coverage(args.n, args.noise, args.coverage, args.bias_correction)
        for key, value in record.items():
            print(f"{key:10s} {np.round(value, 4)}")
        bc = "" if args.bias_correction is None else f"_{args.bias_correction}"
        path = ROOT / f"{args.n}_{args.noise:g}_coverage{bc}.json"
        path.write_text(json.dumps(record | {"params": NAMES}, indent=1))
        print(f"written {path}")
        return
    out = {}
    radii = None if args.radii is None else [float(r) for r in args.radii.split(",")]
    for seed in map(int, args.seeds.split(",")):
        t, y, sigma = data(args.n, args.noise, seed)
        ref, t_ref, _ = reference(t, y, args.draws)
        row = {"true_sigma": sigma, "reference": summary(ref) | {"seconds": t_ref}}
        for known in (True, False):
            idata, t_weak = weak(t, y, args.draws, known, radii)
            row["weak_known" if known else "weak_free"] = summary(idata) | {"seconds": t_weak}
        out[seed] = row
        r = row["reference"]
        print(f"seed {seed}: reference mean {np.round(r['mean'], 4)} sd {np.round(r['sd'], 4)}"
              f" ({t_ref:.1f} s)")  # fmt: skip
        for key in ("weak_known", "weak_free"):
            w = row[key]
            shift = (np.array(w["mean"]) - r["mean"]) / np.array(r["sd"])
            ratio = np.array(w["sd"]) / np.array(r["sd"])
            print(
                f"  {key:10s} shift/sd_ref {np.round(shift, 2)}  sd ratio {np.round(ratio, 2)}"
                f"  div {w['divergences']}  ({w['seconds']:.1f} s)"
            )
    tag = "" if radii is None else "_radii-" + "-".join(f"{r:g}" for r in radii)
    path = ROOT / f"{args.n}_{args.noise:g}{tag}.json"
    record = {"params": [*NAMES, "sigma"], "radii": radii, "runs": out}
    path.write_text(json.dumps(record, indent=1))
    print(f"written {path}")


if __name__ == "__main__":
    main()
