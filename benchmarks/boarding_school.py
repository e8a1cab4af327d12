"""The 1978 boarding-school influenza outbreak (issue 57): our posterior against a forward-solve
one.

Data: ``pw.problems.boarding_school()``, 14 daily counts of pupils in bed, as ``I`` of an SIR
model in counts (``S' = -beta S I / N``, ``I' = beta S I / N - gamma I``, ``R' = gamma I``,
``N = 763``), ``S`` and ``R`` never observed, the state known at day 0 as in the published
analyses (``S = 762``, ``I = 1``, ``R = 0``). Poisson counts; priors those of the Stan case
study (Grinsztajn et al. 2021): ``beta ~ Normal(2, 1)``, ``gamma ~ Normal(0.4, 0.5)``, both
truncated at 0.

Ours: ``pw.WeakODELikelihood`` of the model given with the hidden columns NaN and the known
initial state, sampled by ``pw.sample`` with its defaults (the weak NUTS run, the check, the
exact stage when the check finds a difference), 2 chains x 1000 draws.

``--noise negbinomial``: negative binomial counts with the dispersion a random variable, as in
the Stan case study (``phi_inv ~ Exponential(5)``, ``alpha = 1 / phi_inv``; PyMC's ``mu``,
``alpha`` and numpyro's ``NegativeBinomial2``), ``phi_inv`` reported too.

Reference: numpyro NUTS on a diffrax solve of the same model (the ``peers`` extra), 2 chains x
1000 draws after 1000 warm-up steps, Tsit5 at rtol = atol = 1e-8.

Prints, for ``beta``, ``gamma``, ``R0 = beta / gamma`` and the recovery time ``1 / gamma``
(days): the reference's mean and sd, ours, ``(ours - ref) / ref sd`` and the sd ratio, and
both wall times. Written to ``benchmarks/results/boarding_school/{noise}.json``.

Run:  python benchmarks/boarding_school.py [--noise negbinomial]
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_wendy as pw

ROOT = Path(__file__).resolve().parent / "results" / "boarding_school"
U0 = np.array([762.0, 1.0, 0.0])


def _data():
    df = pw.problems.boarding_school()
    N = float(df.attrs["pupils"])
    t = df["day"].to_numpy(dtype=float)
    U = np.full((t.size, 3), np.nan)
    U[:, 1] = df["in_bed"].to_numpy()
    return N, t, U


def _sir(N: float):
    def rhs(t, u, p):
        s, i, _ = u
        return [-p[0] * s * i / N, p[0] * s * i / N - p[1] * i, p[1] * i]

    return pw.ODEModel(rhs, ["S", "I", "R"], ["beta", "gamma"], name="influenza")


def ours(draws: int, noise: str) -> dict:
    N, t, U = _data()
    t0 = time.perf_counter()
    with pm.Model():
        beta = pm.TruncatedNormal("beta", 2.0, 1.0, lower=0.0)
        gamma = pm.TruncatedNormal("gamma", 0.4, 0.5, lower=0.0)
        names = ["beta", "gamma"]
        obs = "poisson"
        if noise == "negbinomial":
            obs = pw.NegativeBinomial(1.0 / pm.Exponential("phi_inv", 5.0))
            names.append("phi_inv")
        pw.WeakODELikelihood(
            "I", ode=_sir(N), params=pm.math.stack([beta, gamma]), t=t, observed=U,
            noise=obs, initial_state=U0, t0=0.0,
        )  # fmt: skip
        idata = pw.sample(draws, chains=2, progressbar=False, random_seed=1)
    post = idata.posterior
    return {
        "draws": np.column_stack([post[v].values.ravel() for v in names]).tolist(),
        "seconds": time.perf_counter() - t0,
        "verdict": idata["weak_check"].attrs["verdict"],
    }


def reference(draws: int, noise: str) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    import diffrax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    N, t, U = _data()
    ts, Y = jnp.asarray(t), jnp.asarray(U[:, 1])

    def rhs(tt, y, p):
        s, i, _ = y
        return jnp.stack([-p[0] * s * i / N, p[0] * s * i / N - p[1] * i, p[1] * i])

    term = diffrax.ODETerm(rhs)

    def fwd():
        beta = numpyro.sample("beta", dist.TruncatedNormal(2.0, 1.0, low=0.0))
        gamma = numpyro.sample("gamma", dist.TruncatedNormal(0.4, 0.5, low=0.0))
        sol = diffrax.diffeqsolve(
            term, diffrax.Tsit5(), t0=0.0, t1=ts[-1], dt0=None, y0=jnp.asarray(U0),
            args=jnp.stack([beta, gamma]), saveat=diffrax.SaveAt(ts=ts), max_steps=100_000,
            throw=False, stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        )  # fmt: skip
        ok = sol.result == diffrax.RESULTS.successful
        numpyro.factor("solve_failed", jnp.where(ok, 0.0, -jnp.inf))
        mean = jnp.where(ok, jnp.maximum(sol.ys[:, 1], 1e-10), 1.0)
        if noise == "negbinomial":
            phi_inv = numpyro.sample("phi_inv", dist.Exponential(5.0))
            numpyro.sample("Y", dist.NegativeBinomial2(mean, 1.0 / phi_inv), obs=Y)
        else:
            numpyro.sample("Y", dist.Poisson(mean), obs=Y)

    mcmc = MCMC(
        NUTS(fwd), num_warmup=1000, num_samples=draws, num_chains=2,
        chain_method="sequential", progress_bar=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(0))
    s = mcmc.get_samples()
    names = ["beta", "gamma"] + (["phi_inv"] if noise == "negbinomial" else [])
    return {
        "draws": np.column_stack([np.asarray(s[v]) for v in names]).tolist(),
        "seconds": time.perf_counter() - t0,
    }


def _derived(draws: np.ndarray) -> dict[str, np.ndarray]:
    beta, gamma = draws[:, 0], draws[:, 1]
    out = {"beta": beta, "gamma": gamma, "R0": beta / gamma, "recovery_days": 1.0 / gamma}
    return out | ({"phi_inv": draws[:, 2]} if draws.shape[1] > 2 else {})


def main(draws: int = 1000, noise: str = "poisson") -> None:
    warnings.simplefilter("ignore")
    ROOT.mkdir(parents=True, exist_ok=True)
    a, b = ours(draws, noise), reference(draws, noise)
    A, B = _derived(np.array(a["draws"])), _derived(np.array(b["draws"]))
    print(f"ours {a['seconds']:.1f} s (check {a['verdict']}), reference {b['seconds']:.1f} s")
    table = {}
    for name in A:
        ref_sd = B[name].std()
        shift = (A[name].mean() - B[name].mean()) / ref_sd
        ratio = A[name].std() / ref_sd
        table[name] = {
            "reference": [B[name].mean(), ref_sd], "ours": [A[name].mean(), A[name].std()],
            "shift": shift, "sd_ratio": ratio,
        }  # fmt: skip
        print(f"  {name:>13} ref {B[name].mean():8.4f} +- {ref_sd:7.4f}   ours "
              f"{A[name].mean():8.4f} +- {A[name].std():7.4f}   shift {shift:+.2f} sd, "
              f"sd ratio {ratio:.2f}")  # fmt: skip
    out = {"ours": a, "reference": b, "table": table}
    (ROOT / f"{noise}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", choices=["poisson", "negbinomial"], default="poisson")
    parser.add_argument("--draws", type=int, default=1000)
    args = parser.parse_args()
    main(args.draws, args.noise)
