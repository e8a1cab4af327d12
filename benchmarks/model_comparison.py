"""Model comparison with the pointwise weak log-likelihood: does ``pw.compare`` pick the truth?

Two pairs of candidate models fitted to the same simulated data (issue 37):

* ``logistic``: logistic growth ``u' = a u - b u^2`` (the truth, ``a = b = 1``, ``u0 = 0.01``,
  ``t`` in [0, 10]) against Gompertz growth ``u' = a u - b u log u``, log-normal noise (the
  populations are positive; additive noise would make the first counts negative);
* ``lotka_volterra``: Lotka-Volterra (the catalogue problem, ``t`` in [0, 5]) against the same
  model with one wrong term, the prey's loss ``p2 x y`` replaced by ``p2 y``, additive noise;
* ``lotka_volterra_nested``: Lotka-Volterra against itself plus a term ``p5 x^2`` (true value
  0). Both hold the truth; LOO should charge the larger model about one parameter's worth
  (an elpd difference near -0.5 to -1, small against its standard error), not prefer it.

Per data set: both models get ``Normal(0, 10)`` priors on every parameter, the noise level
fixed at the weak estimate (the default), the same test functions (built once from the data),
``pw.sample`` with 2 chains x 1000 draws and the pointwise log-likelihood, then ``pw.compare``
(PSIS-LOO). Recorded: the rank of the true model, the elpd difference and its standard error,
the Pareto k counts above 0.7 for each model, the time.

Every finished data set is appended to ``--store`` (default
``benchmarks/results/model_comparison/runs.jsonl``): interrupt and rerun to resume.

Run:  python benchmarks/model_comparison.py [--pairs logistic,lotka_volterra]
          [--noise 0.05,0.2] [--n-datasets 100] [--points 129]
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
import sympy as sp

import pymc_wendy as pw

HERE = Path(__file__).resolve().parent


def _logistic(t, u, p):
    (x,) = u
    return [p[0] * x - p[1] * x**2]


def _gompertz(t, u, p):
    (x,) = u
    return [p[0] * x - p[1] * x * sp.log(x)]


def _lotka_volterra(t, u, p):
    x, y = u
    return [p[0] * x + p[1] * x * y, p[2] * y + p[3] * x * y]


def _lotka_volterra_wrong(t, u, p):
    x, y = u
    return [p[0] * x + p[1] * y, p[2] * y + p[3] * x * y]


def _lotka_volterra_extra(t, u, p):
    x, y = u
    return [p[0] * x + p[1] * x * y + p[4] * x**2, p[2] * y + p[3] * x * y]


#: pair -> (true model, wrong model, truth, u0, t_span, noise model)
PAIRS = {
    "logistic": (
        pw.ODEModel(_logistic, states=["u"], params=["a", "b"], name="logistic"),
        pw.ODEModel(_gompertz, states=["u"], params=["a", "b"], name="gompertz"),
        [1.0, 1.0], [0.01], (0.0, 10.0), "lognormal",
    ),
    "lotka_volterra": (
        pw.ODEModel(_lotka_volterra, states=["x", "y"], params=["p1", "p2", "p3", "p4"],
                    name="lotka_volterra"),
        pw.ODEModel(_lotka_volterra_wrong, states=["x", "y"], params=["p1", "p2", "p3", "p4"],
                    name="lotka_volterra_wrong_term"),
        [3.0, -1.0, -6.0, 1.0], [1.0, 1.0], (0.0, 5.0), "normal",
    ),
    # nested: the alternative holds the truth (p5 = 0), so LOO should not prefer it by much
    "lotka_volterra_nested": (
        pw.ODEModel(_lotka_volterra, states=["x", "y"], params=["p1", "p2", "p3", "p4"],
                    name="lotka_volterra"),
        pw.ODEModel(_lotka_volterra_extra, states=["x", "y"],
                    params=["p1", "p2", "p3", "p4", "p5"], name="lotka_volterra_extra_term"),
        [3.0, -1.0, -6.0, 1.0], [1.0, 1.0], (0.0, 5.0), "normal",
    ),
}  # fmt: skip


def _fit(ode, data, noise: str, tf, seed: int):
    with pm.Model(coords={"param": ode.params}):
        p = pm.Normal("p", 0, 10, dims="param")
        pw.WeakODELikelihood(
            "U", ode=ode, params=p, t=data.t, observed=data.U, noise=noise, test_functions=tf
        )
        return pw.sample(
            1000, chains=2, progressbar=False, random_seed=seed,
            idata_kwargs={"log_likelihood": True},
        )  # fmt: skip


def run_one(pair: str, noise_ratio: float, n_points: int, dataset: int) -> dict:
    true_ode, wrong_ode, p_true, u0, t_span, noise = PAIRS[pair]
    key = [37, dataset, int(round(noise_ratio * 1000)), n_points]
    seed = int(np.random.SeedSequence(key).generate_state(1)[0])
    data = pw.simulate(
        true_ode, p_true, u0=u0, t_span=t_span, n_points=n_points, noise_ratio=noise_ratio,
        noise=noise, seed=seed,
    )  # fmt: skip
    X = np.log(data.U) if noise == "lognormal" else data.U
    tf = pw.build_test_functions(data.t, X)
    t0 = time.perf_counter()
    record = {"pair": pair, "noise_ratio": noise_ratio, "n_points": n_points, "dataset": dataset,
              "seed": seed}  # fmt: skip
    try:
        fits = {name: _fit(ode, data, noise, tf, seed) for name, ode in
                (("true", true_ode), ("wrong", wrong_ode))}  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the Pareto k warnings: counted below
            table = pw.compare(fits, round_to="none")
            loo = {n: az.loo(f, var_name="U", pointwise=True) for n, f in fits.items()}
    except Exception as exc:  # a failed fit is a result too
        record.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
        return record
    best, other = table.index[0], table.index[1]
    diff = float(loo["true"].elpd - loo["wrong"].elpd)
    record.update(
        ok=True,
        true_first=bool(best == "true"),
        elpd_true=float(loo["true"].elpd),
        elpd_wrong=float(loo["wrong"].elpd),
        elpd_diff=diff,
        dse=float(table.loc[other, "dse"]),
        p_true=float(loo["true"].p),
        k_bad_true=int((loo["true"].pareto_k > 0.7).sum()),
        k_bad_wrong=int((loo["wrong"].pareto_k > 0.7).sum()),
        n_entries=int(loo["true"].n_data_points),
        seconds=round(time.perf_counter() - t0, 1),
    )
    return record


def _median(records: list[dict], name: str) -> float:
    return float(np.median([r[name] for r in records]))


def summarize(records: list[dict]) -> list[dict]:
    """One row per (pair, noise, points): how often the true model ranks first, and more."""
    out = []
    for key in sorted({(r["pair"], r["noise_ratio"], r["n_points"]) for r in records}):
        rs = [r for r in records if (r["pair"], r["noise_ratio"], r["n_points"]) == key]
        ok = [r for r in rs if r["ok"]]
        row = {"pair": key[0], "noise_ratio": key[1], "n_points": key[2], "data sets": len(rs)}
        row["failed"] = len(rs) - len(ok)
        if ok:
            first = np.mean([r["true_first"] for r in ok])
            diff = np.array([r["elpd_diff"] for r in ok])
            z = np.array([r["elpd_diff"] / r["dse"] for r in ok if r["dse"] > 0])
            row.update({
                "true first": round(float(first), 3),
                "MC se": round(float(np.sqrt(first * (1 - first) / len(ok))), 3),
                "median elpd diff": round(float(np.median(diff)), 1),
                "min elpd diff": round(float(np.min(diff)), 1),
                "median diff/se": round(float(np.median(z)), 1) if z.size else None,
                "share diff/se > -2": round(float(np.mean(z > -2)), 3) if z.size else None,
                "median bad k (true)": _median(ok, "k_bad_true"),
                "median entries": _median(ok, "n_entries"),
                "median p_loo (true)": round(_median(ok, "p_true"), 1),
                "median s": round(_median(ok, "seconds"), 1),
            })  # fmt: skip
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default="logistic,lotka_volterra,lotka_volterra_nested")
    ap.add_argument("--noise", default="0.05,0.2")
    ap.add_argument("--n-datasets", type=int, default=100)
    ap.add_argument("--points", type=int, default=129)
    ap.add_argument("--store", default=str(HERE / "results" / "model_comparison" / "runs.jsonl"))
    args = ap.parse_args()
    store = Path(args.store)
    store.parent.mkdir(parents=True, exist_ok=True)
    done = []
    if store.exists():
        done = [json.loads(line) for line in store.read_text().splitlines() if line.strip()]
    have = {(r["pair"], r["noise_ratio"], r["n_points"], r["dataset"]) for r in done}
    todo = [
        (pair, float(nr), args.points, i)
        for nr in args.noise.split(",")  # every pair at the first noise level first
        for pair in args.pairs.split(",")
        for i in range(args.n_datasets)
        if (pair, float(nr), args.points, i) not in have
    ]
    print(f"{len(have)} data sets in the store, {len(todo)} to run", flush=True)
    for n, job in enumerate(todo, 1):
        record = run_one(*job)
        with store.open("a") as f:
            f.write(json.dumps(record) + "\n")
        done.append(record)
        print(f"[{n}/{len(todo)}] {job}: {record.get('true_first', record.get('error'))} "
              f"diff {record.get('elpd_diff', float('nan')):.1f} ({record.get('seconds')} s)",
              flush=True)  # fmt: skip
    for row in summarize(done):
        print(row)


if __name__ == "__main__":
    main()
