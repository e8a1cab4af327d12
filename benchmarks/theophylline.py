"""Theophylline: per-subject fits and a hierarchical weak model against the exact posterior.

The Theophylline study (12 subjects, one oral dose at t = 0, 10 samples after it; the
pre-dose sample is left out and ``C(0) = 0`` is known) with the one-compartment model of
``pk_oral``: ``C' = a ka exp(-ka t) - ke C``, ``a = dose / V`` (dose in mg/kg, V in L/kg).

Per subject: WENDy-MLE (``pw.fit``, known state) beside nonlinear least squares on the
closed-form solution (scipy), the exact estimator for this model.

Hierarchical (partial pooling of ``log ka, log ke, log V``, non-centred; ``--informed``:
``pw.hierarchical_normal`` with the subjects' own fits, ``--max-log-se`` above which a value
stays non-centred):

    mu ~ Normal(log [1.5, 0.08, 0.5], 1),  tau ~ HalfNormal(0.5),  z_i ~ Normal(0, 1),
    (ka_i, ke_i, V_i) = exp(mu + tau z_i),  sigma ~ HalfNormal(1),

with one ``WeakODELikelihood`` per subject sampled by ``pw.sample`` (defaults), against the same
model with the exact closed-form solution and a Gaussian likelihood sampled by nutpie (the
posterior a forward-solve sampler converges to, without solver error).

Prints the per-subject table and, for the population parameters and sigma, the weak
posterior's mean shift in reference sd and its sd ratio, R-hat, divergences and times.
Results: ``benchmarks/results/theophylline/``.

``--simulated SEED`` replaces the concentrations by the closed-form solution at the reference
posterior's mean per subject plus Gaussian noise of its mean sigma (the same design, a model
that is right by construction): it tells the weak form's short-series error from model
misfit in the real data.

Run:  python benchmarks/theophylline.py [--draws 1000] [--seed 1] [--simulated SEED]
      [--target-accept 0.95] [--informed [--max-log-se 0.5]]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy.optimize import curve_fit

import pymc_wendy as pw

ROOT = Path(__file__).resolve().parent / "results" / "theophylline"
MODEL = pw.get_problem("pk_oral").model
PRIOR_CENTRE = np.log([1.5, 0.08, 0.5])  # ka (1/h), ke (1/h), V (L/kg)
NAMES = ("ka", "ke", "V")


def subjects() -> list[dict]:
    """Per subject: times and concentrations after the dose, and the dose (mg/kg)."""
    df = pw.problems.theophylline()
    out = []
    for sid, g in df.groupby("subject"):
        g = g[g.time > 0]
        out.append(
            {
                "subject": int(sid),
                "t": g.time.to_numpy(),
                "y": g.conc.to_numpy(),
                "dose": float(g.dose.iloc[0]),
            }
        )
    return out


def closed_form(t, ka, ke, a):
    return a * ka / (ka - ke) * (np.exp(-ke * t) - np.exp(-ka * t))


def per_subject(data: list[dict]) -> list[dict]:
    rows = []
    for d in data:
        ref, cov = curve_fit(closed_form, d["t"], d["y"], p0=[1.5, 0.08, 10.0], maxfev=20000)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pw.ShortSeriesWarning)
            fit = pw.fit(
                MODEL, d["t"], d["y"][:, None], initial_state=[0.0], t0=0.0,
                p0=[1.5, 0.08, 10.0], sigma="residual",
            )  # fmt: skip
        rows.append(
            {
                "subject": d["subject"],
                "nls": ref.tolist(),
                "nls_se": np.sqrt(np.diag(cov)).tolist(),
                "weak": fit.x.tolist(),
                "weak_se": fit.stderr.tolist(),
                "weak_success": bool(fit.success),
            }
        )
    return rows


def _log_fits(
    data: list[dict], rows: list[dict], max_se: float = np.inf
) -> tuple[np.ndarray, np.ndarray]:
    """Each subject's weak fit of ``log ka, log ke, log V`` and its standard errors (delta
    method); infinite where the fit failed or the standard error is above ``max_se``."""
    est, se = [], []
    for d, r in zip(data, rows, strict=True):
        x = np.array(r["weak"])  # ka, ke, a = dose / V
        with np.errstate(invalid="ignore", divide="ignore"):
            e = np.log([x[0], x[1], d["dose"] / x[2]])
            s = np.array(r["weak_se"]) / x  # the delta method: se(log x) = se(x) / x
        bad = ~(np.isfinite(e) & (s > 0) & (s <= max_se)) | (not r["weak_success"])
        est.append(np.where(bad, np.nan, e))
        se.append(np.where(bad, np.inf, s))
    return np.array(est), np.array(se)


def _population(fits=None):
    mu = pm.Normal("mu", mu=PRIOR_CENTRE, sigma=1.0, dims="param")
    tau = pm.HalfNormal("tau", sigma=0.5, dims="param")
    est, se = (None, None) if fits is None else fits
    log_theta = pw.hierarchical_normal(
        "log_theta", mu, tau, estimate=est, stderr=se, dims=("subject", "param")
    )
    theta = pm.Deterministic("theta", pt.exp(log_theta), dims=("subject", "param"))
    sigma = pm.HalfNormal("sigma", sigma=1.0)
    return theta, sigma


def _coords(data):
    return {"param": list(NAMES), "subject": [d["subject"] for d in data]}


def weak_model(data: list[dict], fits=None) -> pm.Model:
    with pm.Model(coords=_coords(data)) as model:
        theta, sigma = _population(fits)
        for i, d in enumerate(data):
            ka, ke, V = theta[i, 0], theta[i, 1], theta[i, 2]
            pw.WeakODELikelihood(
                f"C{d['subject']}", ode=MODEL, params=pt.stack([ka, ke, d["dose"] / V]),
                t=d["t"], observed=d["y"][:, None], sigma=sigma,
                initial_state=[0.0], t0=0.0,
            )  # fmt: skip
    return model


def exact_model(data: list[dict]) -> pm.Model:
    with pm.Model(coords=_coords(data)) as model:
        theta, sigma = _population()
        for i, d in enumerate(data):
            ka, ke, V = theta[i, 0], theta[i, 1], theta[i, 2]
            mean = d["dose"] / V * ka / (ka - ke) * (pt.exp(-ke * d["t"]) - pt.exp(-ka * d["t"]))
            pm.Normal(f"C{d['subject']}", mu=mean, sigma=sigma, observed=d["y"])
    return model


def summary(idata, seconds: float) -> dict:
    post = idata.posterior
    # a reweighted exact posterior keeps the weak sampler's statistics beside it
    stats = idata.get("sample_stats", idata.get("weak_sample_stats"))
    out = {"seconds": seconds, "divergences": int(stats["diverging"].sum())}
    if "weak_check" in idata.children:
        check = idata["weak_check"].attrs
        out["check"] = {k: check[k] for k in ("verdict", "note", "pareto_k", "time_s")}
        out["corrected"] = {k: idata.attrs.get(k) for k in ("route", "pareto_k", "time_s")}
    for var in ("mu", "tau", "sigma"):
        x = post[var].values.reshape(*post[var].shape[:2], -1)  # (chain, draw, k)
        out[var] = {
            "mean": x.mean((0, 1)).tolist(),
            "sd": x.std((0, 1)).tolist(),
            "rhat": [float(az.rhat(x[..., j])) for j in range(x.shape[-1])],
        }
    out["theta"] = post["theta"].mean(("chain", "draw")).values.tolist()
    return out


def simulated(data: list[dict], draws: int, seed: int, noise_seed: int) -> list[dict]:
    """The design of ``data`` with concentrations from the exact model at the reference
    posterior's means (computed once and stored)."""
    path = ROOT / f"hierarchical_{draws}_{seed}.json"
    if not path.exists():
        raise SystemExit(f"run without --simulated first (needs {path})")
    ref = json.loads(path.read_text())["reference"]
    theta, sigma = np.array(ref["theta"]), ref["sigma"]["mean"][0]
    rng = np.random.default_rng(noise_seed)
    out = []
    for d, (ka, ke, V) in zip(data, theta, strict=True):
        y = closed_form(d["t"], ka, ke, d["dose"] / V)
        out.append(d | {"y": y + sigma * rng.standard_normal(y.size)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--simulated", type=int, default=None, help="noise seed of simulated data")
    ap.add_argument(
        "--target-accept", type=float, default=None,
        help="target_accept of the weak model's NUTS (default: pw.sample's)",
    )  # fmt: skip
    ap.add_argument(
        "--informed", action="store_true",
        help="the weak model's log-parameters by pw.hierarchical_normal with the subjects' fits",
    )  # fmt: skip
    ap.add_argument(
        "--max-log-se", type=float, default=np.inf,
        help="--informed: subjects whose log-parameter's standard error is above it get the "
        "non-centred form for it",
    )  # fmt: skip
    ap.add_argument(
        "--weak-only", action="store_true",
        help="the weak posterior alone (pw.sample(check=False)), as before the exact-by-default "
        "result; default: pw.sample's own result (checked, corrected where it differs)",
    )  # fmt: skip
    args = ap.parse_args()
    ROOT.mkdir(parents=True, exist_ok=True)
    data = subjects()
    tag = ""
    if args.simulated is not None:
        data = simulated(data, args.draws, args.seed, args.simulated)
        tag = f"_simulated{args.simulated}"
    if args.target_accept is not None:
        tag += f"_ta{args.target_accept:g}"
    if args.informed:
        tag += "_informed" + ("" if np.isinf(args.max_log_se) else f"{args.max_log_se:g}")
    if not args.weak_only:
        tag += "_default"

    rows = per_subject(data)
    print("subject | NLS (closed form) ka ke a [se] | WENDy-MLE ka ke a [se]")
    for r in rows:
        print(
            f"{r['subject']:2d} | {np.round(r['nls'], 3)} [{np.round(r['nls_se'], 3)}] | "
            f"{np.round(r['weak'], 3)} [{np.round(r['weak_se'], 3)}]"
            + ("" if r["weak_success"] else " (failed)")
        )

    start = time.perf_counter()
    ref = pm.sample(
        args.draws, tune=1000, chains=4, nuts_sampler="nutpie", progressbar=False,
        random_seed=args.seed, model=exact_model(data), target_accept=0.9,
    )  # fmt: skip
    ref_s = summary(ref, time.perf_counter() - start)
    start = time.perf_counter()
    with weak_model(data, _log_fits(data, rows, args.max_log_se) if args.informed else None):
        opts = {} if args.target_accept is None else {"target_accept": args.target_accept}
        opts |= {"check": False} if args.weak_only else {}
        weak = pw.sample(args.draws, chains=4, progressbar=False, random_seed=args.seed, **opts)
    weak_s = summary(weak, time.perf_counter() - start)

    print(f"\nreference (exact, nutpie): {ref_s['seconds']:.1f} s, {ref_s['divergences']} div")
    print(f"weak (pw.sample defaults): {weak_s['seconds']:.1f} s, {weak_s['divergences']} div")
    if "check" in weak_s:
        print(f"check: {weak_s['check']}; correction: {weak_s['corrected']}")
    for var in ("mu", "tau", "sigma"):
        r, w = ref_s[var], weak_s[var]
        shift = (np.array(w["mean"]) - r["mean"]) / np.array(r["sd"])
        ratio = np.array(w["sd"]) / np.array(r["sd"])
        print(
            f"{var:5s} ref mean {np.round(r['mean'], 3)} sd {np.round(r['sd'], 3)} | weak mean "
            f"{np.round(w['mean'], 3)} | shift/sd_ref {np.round(shift, 2)} sd ratio "
            f"{np.round(ratio, 2)} | rhat weak {np.round(w['rhat'], 3)}"
        )
    path = ROOT / f"hierarchical_{args.draws}_{args.seed}{tag}.json"
    record = {"per_subject": rows, "reference": ref_s, "weak": weak_s, "names": list(NAMES)}
    path.write_text(json.dumps(record, indent=1))
    print(f"written {path}")


if __name__ == "__main__":
    main()
