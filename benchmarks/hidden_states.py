"""Hidden states of nonlinear models (issue 57): our posterior against a forward-solve one.

Cases (``--cases``): ``fhn41``, ``fhn201`` (FitzHugh-Nagumo as MAGI writes it, observed in V
only, 41 or 201 points on [0, 20]), ``hes1`` (MAGI's Hes1, P and M observed at 33 points,
H never), ``sir`` (the catalogue's SIR observed in I, 121 points). Additive noise
``--noise`` x RMS of each observed state, seeds ``--seeds``.

Ours: ``pw.WeakODELikelihood`` of the model itself with the hidden columns NaN (the
likelihood eliminates them: ``docs/hidden_states.md``), sampled by ``pw.sample`` with its
defaults (the weak NUTS run, the check, the exact stage where the check finds a
difference), 2 chains x 1000 draws.

Reference: numpyro NUTS on a diffrax solve of the full model (every state, the hidden
initial state a parameter; the ``peers`` extra), 2 chains x 1000 draws after 1000 warm-up
steps, Tsit5 at rtol = atol = 1e-8. Priors shared where the two models share the variable:
``p ~ LogNormal(0, 2)`` per parameter, ``sigma ~ HalfNormal(RMS)`` per observed state. The
initial state differs by construction: the reference puts ``Normal(first point, RMS)`` on
the observed states and ``Normal(truth, |truth| + 1)`` on the hidden ones; ours puts its
default on the equations' companion state (the observed states and the raised one's
derivative at t0, ``pymc_wendy.bayes.forward``). With these data the initial state's prior
moves the parameters' posterior little; the table says how much the two agree.

Prints per parameter: reference mean and sd, ours, ``(ours - ref) / ref sd``, the sd ratio,
and both wall times. Written to ``benchmarks/results/hidden_states/<case>_<noise>_<seed>.json``.

Run:  python benchmarks/hidden_states.py [--cases fhn41 fhn201 hes1 sir] [--noise 0.05]
      [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_wendy as pw

ROOT = Path(__file__).resolve().parent / "results" / "hidden_states"
CASES = {
    "fhn41": ("fitzhugh_nagumo_v", 41),
    "fhn201": ("fitzhugh_nagumo_v", 201),
    "hes1": ("hes1", 33),
    "sir": ("sir", 121),
}


def ours(prob, data, draws: int) -> dict:
    obs = [prob.model.states.index(s) for s in prob.observed]
    rms = np.sqrt(np.nanmean(data.U[:, obs] ** 2, axis=0))
    t0 = time.perf_counter()
    with pm.Model():
        p = pm.LogNormal("p", 0.0, 2.0, shape=prob.model.n_params)
        sigma = pm.HalfNormal("sigma", rms)
        pw.WeakODELikelihood("U", ode=prob.model, params=p, sigma=sigma, t=data.t, observed=data.U)
        idata = pw.sample(draws, chains=2, progressbar=False)
    post = idata.posterior["p"].values.reshape(-1, prob.model.n_params)
    return {
        "p_draws": post.tolist(),
        "seconds": time.perf_counter() - t0,
        "corrected": bool(idata.posterior.attrs.get("corrected")),
        "verdict": idata["weak_check"].attrs["verdict"],
    }


def reference(prob, data, draws: int) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    import diffrax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS, init_to_value

    model, D = prob.model, prob.model.n_states
    obs = np.array([model.states.index(s) for s in prob.observed])
    hidden = np.setdiff1d(np.arange(D), obs)
    t, Y = jnp.asarray(data.t), jnp.asarray(data.U[:, obs])
    rms = jnp.asarray(np.sqrt(np.mean(data.U[:, obs] ** 2, axis=0)))
    u0_mu = np.array(prob.u0, dtype=float)
    u0_mu[obs] = data.U[0, obs]
    u0_sd = np.abs(u0_mu) + 1.0
    u0_sd[obs] = np.asarray(rms)
    term = diffrax.ODETerm(lambda tt, y, p: jnp.stack(list(model.rhs(tt, list(y), p))))

    def fwd():
        p = numpyro.sample("p", dist.LogNormal(jnp.zeros(model.n_params), 2.0))
        sigma = numpyro.sample("sigma", dist.HalfNormal(rms))
        u0 = numpyro.sample("u0", dist.Normal(jnp.asarray(u0_mu), jnp.asarray(u0_sd)))
        sol = diffrax.diffeqsolve(
            term, diffrax.Tsit5(), t0=t[0], t1=t[-1], dt0=None, y0=u0, args=p,
            saveat=diffrax.SaveAt(ts=t), max_steps=100_000, throw=False,
            stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        )  # fmt: skip
        ok = sol.result == diffrax.RESULTS.successful
        numpyro.factor("solve_failed", jnp.where(ok, 0.0, -jnp.inf))
        numpyro.sample("Y", dist.Normal(jnp.where(ok, sol.ys[:, obs], 0.0), sigma), obs=Y)

    start = {"p": jnp.asarray(prob.p_true), "sigma": rms * 0.1, "u0": jnp.asarray(prob.u0)}
    mcmc = MCMC(
        NUTS(fwd, init_strategy=init_to_value(values=start)),
        num_warmup=1000, num_samples=draws, num_chains=2, chain_method="sequential",
        progress_bar=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(0))
    draws_p = np.asarray(mcmc.get_samples()["p"])
    return {
        "p_draws": draws_p.tolist(),
        "seconds": time.perf_counter() - t0,
        "hidden": hidden.tolist(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--draws", type=int, default=1000)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    ROOT.mkdir(parents=True, exist_ok=True)
    for case in args.cases:
        name, n = CASES[case]
        prob = pw.get_problem(name)
        for seed in args.seeds:
            data = prob.simulate(n_points=n, noise_ratio=args.noise, seed=seed)
            a, b = ours(prob, data, args.draws), reference(prob, data, args.draws)
            P, R = np.array(a["p_draws"]), np.array(b["p_draws"])
            shift = (P.mean(0) - R.mean(0)) / R.std(0)
            ratio = P.std(0) / R.std(0)
            print(f"\n{case} noise {args.noise} seed {seed}: ours {a['seconds']:.1f} s "
                  f"(check {a['verdict']}, corrected {a['corrected']}), reference "
                  f"{b['seconds']:.1f} s")  # fmt: skip
            for j, pname in enumerate(prob.model.params):
                print(f"  {pname:>6} ref {R[:, j].mean():10.4g} +- {R[:, j].std():9.3g}   ours "
                      f"{P[:, j].mean():10.4g} +- {P[:, j].std():9.3g}   shift {shift[j]:+.2f} "
                      f"sd, sd ratio {ratio[j]:.2f}")  # fmt: skip
            out = {"ours": a, "reference": b, "shift": shift.tolist(), "sd_ratio": ratio.tolist()}
            path = ROOT / f"{case}_{args.noise}_{seed}.json"
            path.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
