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

Run:  python benchmarks/pk_reference.py [--n 20] [--noise 0.1] [--seeds 0,1,2] [--radii ...]
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
    args = ap.parse_args()
    ROOT.mkdir(parents=True, exist_ok=True)
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
