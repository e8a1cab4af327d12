"""Lynx and hare pelts (Hudson's Bay Company, 1900-1920): pw.sample's default result against a
forward-solve NUTS reference from the ``peers`` extra (numpyro + diffrax).

The model is the Stan case study's ("Predator-prey population dynamics", B. Carpenter, 2018),
in the catalogue's Lotka-Volterra parametrisation (hare u, lynx v; years since 1900):

    u' = p1 u + p2 u v,   v' = p3 v + p4 u v,
    p ~ Normal([1, -0.05, -1, 0.05], [0.5, 0.05, 0.5, 0.05]),
    sigma ~ LogNormal(-1, 1) per species,   u(0) ~ LogNormal(log 10, 1) per species,
    pelts ~ LogNormal(log u(t), sigma) at all 21 years.

Ours: one ``WeakODELikelihood`` (log-normal noise) sampled by ``pw.sample`` with its
defaults (the check, and the correction where the weak posterior is off; the initial-state
prior above given to both). The reference: numpyro's NUTS on a diffrax ``Tsit5`` solve
(rtol = atol = 1e-8), the same priors and likelihood, 4 x (1000 + 1000). Printed per
variable: the weak posterior's and the final result's mean shift in reference sds and their
sd ratios. Results: ``benchmarks/results/lynx_hare/``.

Run:  pip install -e ".[peers]" && python benchmarks/lynx_hare.py [--draws 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_wendy as pw

ROOT = Path(__file__).resolve().parent / "results" / "lynx_hare"
P_MU, P_SD = np.array([1.0, -0.05, -1.0, 0.05]), np.array([0.5, 0.05, 0.5, 0.05])
U0_MU, U0_SD = np.log(10.0), 1.0


def data() -> tuple[np.ndarray, np.ndarray]:
    df = pw.problems.lynx_hare()
    return (df["year"].to_numpy() - 1900).astype(float), df[["hare", "lynx"]].to_numpy()


def ours(t, U, draws: int, seed: int) -> tuple[object, float]:
    ode = pw.get_problem("lotka_volterra").model
    start = time.perf_counter()
    with pm.Model(coords={"param": ode.params, "state": ["hare", "lynx"]}):
        p = pm.Normal("p", P_MU, P_SD, dims="param")
        sigma = pm.LogNormal("sigma", -1.0, 1.0, dims="state")
        pw.WeakODELikelihood(
            "U", ode=ode, params=p, sigma=sigma, t=t, observed=U, noise="lognormal"
        )
        initial = pm.LogNormal.dist(U0_MU, U0_SD, shape=2)
        idata = pw.sample(
            draws, chains=4, random_seed=seed, progressbar=False,
            correction_kwargs={"initial_state": initial, "progressbar": False},
        )  # fmt: skip
    return idata, time.perf_counter() - start


def reference(t, U, draws: int, seed: int) -> tuple[dict, float]:
    import jax

    jax.config.update("jax_enable_x64", True)
    import diffrax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS, init_to_median

    ts, obs = jnp.asarray(t), jnp.asarray(U)

    def field(tt, y, p):
        u, v = y[0], y[1]
        return jnp.stack([p[0] * u + p[1] * u * v, p[2] * v + p[3] * u * v])

    term = diffrax.ODETerm(field)
    controller = diffrax.PIDController(rtol=1e-8, atol=1e-8)

    def model():
        p = numpyro.sample("p", dist.Normal(jnp.asarray(P_MU), jnp.asarray(P_SD)))
        sigma = numpyro.sample("sigma", dist.LogNormal(-1.0, 1.0).expand([2]))
        u0 = numpyro.sample("u0", dist.LogNormal(U0_MU, U0_SD).expand([2]))
        sol = diffrax.diffeqsolve(
            term, diffrax.Tsit5(), t0=ts[0], t1=ts[-1], dt0=None, y0=u0, args=p,
            saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller, max_steps=100_000,
            throw=False,  # a failed solve (a wild proposal) is a rejected point
        )  # fmt: skip
        ok = (sol.result == diffrax.RESULTS.successful) & jnp.all(sol.ys > 0)
        ys = jnp.where(ok, sol.ys, 1.0)
        numpyro.factor("solve_failed", jnp.where(ok, 0.0, -jnp.inf))
        numpyro.sample("U", dist.LogNormal(jnp.log(ys), sigma), obs=obs)

    start = time.perf_counter()
    # chains one after another: diffrax's solve inside numpyro's pmap of parallel chains
    # fails to trace ("closure-converted function called with different dynamic arguments")
    mcmc = MCMC(
        # started at the prior median (p, sigma, u0): from numpyro's default uniform
        # start, chains stuck near p = 0, where the solution is flat
        NUTS(model, init_strategy=init_to_median()), num_warmup=1000, num_samples=draws,
        num_chains=4,
        chain_method="sequential", progress_bar=False,
    )  # fmt: skip
    mcmc.run(jax.random.PRNGKey(seed))
    seconds = time.perf_counter() - start
    chains = mcmc.get_samples(group_by_chain=True)
    print("reference per-chain means of p:", np.asarray(chains["p"]).mean(1).round(3).tolist())
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
    return samples, seconds


def moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x[:, None]
    return x.mean(0), x.std(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    ROOT.mkdir(parents=True, exist_ok=True)
    t, U = data()
    idata, t_ours = ours(t, U, args.draws, args.seed)
    ref, t_ref = reference(t, U, args.draws, args.seed)
    corrected = bool(idata.posterior.attrs.get("corrected"))
    weak = idata.weak_posterior if corrected else idata.posterior
    check = idata["weak_check"].attrs
    record = {"seconds": {"ours": t_ours, "reference": t_ref}, "corrected": corrected}
    record["check"] = {k: check[k] for k in ("verdict", "note", "pareto_k", "time_s")}
    record["correction"] = {k: idata.attrs.get(k) for k in ("route", "pareto_k", "time_s")}
    print(
        f"ours (pw.sample defaults): {t_ours:.1f} s; reference (numpyro + diffrax): {t_ref:.1f} s"
    )
    print(f"check: {check['verdict']} ({check['note']}); corrected: {corrected}")
    for name, ref_name in (("p", "p"), ("sigma", "sigma"), ("U_u0", "u0")):
        m_ref, s_ref = moments(ref[ref_name])
        row = {"reference_mean": m_ref.tolist(), "reference_sd": s_ref.tolist()}
        for label, post in (("weak", weak), ("final", idata.posterior)):
            if name not in post:
                continue
            m, s = moments(np.asarray(post[name]).reshape(-1, m_ref.size))
            row[f"{label}_shift"] = ((m - m_ref) / s_ref).round(2).tolist()
            row[f"{label}_sd_ratio"] = (s / s_ref).round(2).tolist()
        record[name] = row
        print(name, json.dumps({k: v for k, v in row.items() if "shift" in k or "ratio" in k}))
    path = ROOT / f"lynx_hare_{args.draws}_{args.seed}.json"
    path.write_text(json.dumps(record, indent=1))
    print(f"written {path}")


if __name__ == "__main__":
    main()
