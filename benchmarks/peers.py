"""Ours against forward-solve NUTS (numpyro + diffrax, ``pm.ode``, RK4 in ``pytensor.scan``).

One run samples, per case, the same data under the same priors with the same number of
chains, tuning steps and draws:

* **ours**: ``pw.sample`` (nutpie, started at the WENDy-MLE, its defaults) on
  ``pw.WeakODELikelihood`` with ``sigma`` inferred. No forward solve anywhere.
* **numpyro**: numpyro NUTS on diffrax ``Tsit5`` (``PIDController(rtol=atol=1e-6)``, default
  adjoint = recursive checkpointing), float64, one process per chain (numpyro's parallel
  chains fail with diffrax under jax 0.12), XLA on one thread per process.
* **rk4**: a PyMC model whose solution is classical RK4 with a fixed step (``substeps`` per
  data interval) inside ``pytensor.scan``, gradient by pytensor autodiff, sampled by nutpie.
* **pm.ode**: ``pm.ode.DifferentialEquation`` (scipy ``odeint`` with forward sensitivities),
  sampled by PyMC's own NUTS (nutpie cannot compile its Op), chains in processes.

Priors: ``p ~ Normal(truth, 0.5 |truth| + 0.1)``, ``sigma ~ HalfNormal(1)`` per state; the
forward-solve models also infer ``u0 ~ Normal(U[0], 0.5 sd(U) per state)`` (a data-based scale
a user could choose; the noise at ``U[0]`` is 10 % of the rms). The forward-solve peers start at
the prior centre (numpyro ``init_to_median``, PyMC's default initial point), i.e. at the true
parameters, which favours them; ours starts where ``pw.sample`` puts it (the WENDy-MLE).

Every sampler runs in its own subprocess with a wall-clock budget (``--budget`` seconds per
peer, ``--budget-pmode`` for ``pm.ode``); a peer still running then is killed and reported as
"did not finish (tuning|draws) after N s", with the gradient evaluations it had done where the
sampler reports them while it runs.

Reported per case and sampler:

* *compile s*: ours and rk4 ``nutpie.compile_pymc_model``; numpyro the jax tracing, lowering and
  XLA compile times (``jax.monitoring`` events, slowest chain); pm.ode the time from
  ``pm.sample`` to the first draw (compile and initialisation).
* *sampling s*: tuning + draws, all chains, wall time (numpyro: slowest chain, compile
  excluded; the chains run side by side like nutpie's); *total s*: the subprocess from start to
  end (imports, data, WENDy-MLE, compile, sampling, trace conversion).
* *grads*: leapfrog steps summed over chains, tuning included (= gradient evaluations).
* *min ESS*: minimum bulk ESS over the ODE parameters ``p`` (the quantity all models share);
  *ESS/s* = min ESS / sampling s, and *ESS/s total* = min ESS / total s; *R-hat*: maximum over
  ``p``; *div*: divergences after tuning.
* *ratio*: our ESS/s over the peer's (sampling, and total in brackets). Ours is what
  ``pw.sample`` returns with its defaults: the weak posterior, or the forward-solve one where
  its check finds them apart. Its *total* covers the check and the correction, and its ESS
  is then that of the returned draws (for a reweighted posterior, the importance weights'
  ESS: its draws are resampled, so their own ESS would count repeats); *sampling* is the
  weak NUTS run alone.
* *agreement*: ``(mean - mean_ref) / sd_ref`` per parameter, against the reference =
  the finished forward-solve peer with the largest min ESS (numpyro if it finished).

Needs the ``peers`` extra for numpyro (``pip install -e '.[peers]'``: jax, numpyro, diffrax);
without it the peer is reported as missing (``--quick`` exits with a message instead).

Run:  python benchmarks/peers.py [--quick] [--cases fhn,lv,lorenz] [--chains 2 --tune 500
          --draws 500] [--samplers ours,numpyro,rk4,pmode] [--budget 900] [--budget-pmode 480]
          [--json PATH] [--test-functions default|local]

``--test-functions local``: ours with local test functions (the banded kernel,
``docs/performance.md``), a different weak approximation, compared like the default.

``--quick``: one chain per sampler, 100 tuning steps + 100 draws, ours and numpyro only, each
sampler one process for all cases, the two side by side (one core each), one 150 s budget for
all cases; prints one line per case with the ESS/s ratio (a lower bound when numpyro did not
finish that case in time).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve()

# name -> (problem, observation points, noise ratio, RK4 substeps per data interval). Lorenz is
# the chaotic case: a forward-solve likelihood over 10 time units is rugged, the weak one is not.
CASES = {
    "fhn": ("fitzhugh_nagumo", 513, 0.10, 1),
    "lv": ("lotka_volterra", 257, 0.10, 1),
    "lorenz": ("lorenz", 513, 0.10, 4),
}
SAMPLERS = ("ours", "numpyro", "rk4", "pmode")
LABELS = {
    "ours": "ours (pw.sample)",
    "numpyro": "numpyro+diffrax",
    "rk4": "PyMC RK4-scan",
    "pmode": "pm.ode",
}
DATA_SEED = 0
PEER_PACKAGES = ("jax", "numpyro", "diffrax")


def missing_peer_packages() -> list[str]:
    return [name for name in PEER_PACKAGES if importlib.util.find_spec(name) is None]


# --- data and priors, shared by every sampler ---------------------------------------------


def make_case(case: str, path: Path) -> dict:
    """Simulate the case's data once and store it, so that every subprocess sees the same."""
    import pymc_wendy as pw

    name, n_points, noise_ratio, substeps = CASES[case]
    prob = pw.get_problem(name)
    data = prob.simulate(n_points=n_points, noise_ratio=noise_ratio, seed=DATA_SEED)
    t = np.asarray(data.t, dtype=float)
    if not np.allclose(np.diff(t), t[1] - t[0]):
        raise ValueError(f"{case}: the RK4 model assumes a uniform grid")
    truth = np.asarray(data.p_true, dtype=float)
    np.savez(
        path,
        t=t,
        U=np.asarray(data.U, dtype=float),
        p_true=truth,
        p_mu=truth,
        p_sd=0.5 * np.abs(truth) + 0.1,
        u0_mu=np.asarray(data.U[0], dtype=float),
        u0_sd=0.5 * np.std(data.U, axis=0),
        noise_sd=np.asarray(data.sigma, dtype=float),
    )
    return {
        "case": case,
        "problem": name,
        "n_points": int(t.size),
        "noise_ratio": noise_ratio,
        "rk4_substeps": substeps,
        "data_seed": DATA_SEED,
        "p_true": truth.tolist(),
        "params": list(prob.params),
    }


def _load(args) -> tuple[dict, object]:
    import pymc_wendy as pw

    d = dict(np.load(args.data))
    prob = pw.get_problem(CASES[args.case][0])
    return d, prob


# --- workers (one subprocess each) ----------------------------------------------------------


def _progress(msg: str) -> None:
    # the parent reads these lines after a kill to say how far a peer got
    print(f"PROGRESS {time.perf_counter() - _T0:.1f} [{_CASE}] {msg}", flush=True)


_T0 = time.perf_counter()
_CASE = ""


def _finish(args, out: dict) -> None:
    out["total_s"] = time.perf_counter() - _T0
    Path(args.out).write_text(json.dumps(out))


def _posterior_p(idata) -> np.ndarray:
    post = idata["posterior"].to_dataset() if hasattr(idata, "children") else idata.posterior
    return np.asarray(post["p"].transpose("chain", "draw", ...).values, dtype=float)


def _nutpie_result(idata, rec: dict, **extra) -> dict:
    """A finished nutpie run's record: times, gradient counts, divergences and draws of p."""
    tune_steps, draw_steps, div = _nutpie_steps(rec["raw"])
    return {
        "finished": True,
        "compile_s": rec["compile_s"],
        "sampling_s": rec["sampling_s"],
        "grads_tune": tune_steps,
        "grads": tune_steps + draw_steps,
        "divergences": div,
        **extra,
        "p_draws": _posterior_p(idata).tolist(),
    }


def _nutpie_steps(raw) -> tuple[float, float, int]:
    """(tuning, sampling) leapfrog steps and divergences after tuning from nutpie's own trace."""

    def group(name):
        if hasattr(raw, "children"):
            return raw[name].to_dataset() if name in raw.children else None
        return getattr(raw, name, None)

    warm, stats = group("warmup_sample_stats"), group("sample_stats")
    tune = float(np.asarray(warm["n_steps"]).sum()) if warm is not None else float("nan")
    draws = float(np.asarray(stats["n_steps"]).sum())
    return tune, draws, int(np.asarray(stats["diverging"]).sum())


def _sample_with_timed_nutpie(sample_fn) -> tuple[object, dict]:
    """Run ``sample_fn()`` (which calls nutpie through pm.sample), timing compile and sampling."""
    import nutpie

    rec: dict = {}
    compile_fn, nutpie_sample = nutpie.compile_pymc_model, nutpie.sample

    def compile_wrapper(*a, **k):
        t0 = time.perf_counter()
        out = compile_fn(*a, **k)
        rec["compile_s"] = time.perf_counter() - t0
        _progress("compiled")
        return out

    def sample_wrapper(*a, **k):
        t0 = time.perf_counter()
        out = nutpie_sample(*a, **k)
        rec["sampling_s"] = time.perf_counter() - t0
        rec["raw"] = out
        return out

    nutpie.compile_pymc_model, nutpie.sample = compile_wrapper, sample_wrapper
    try:
        idata = sample_fn()
    finally:
        nutpie.compile_pymc_model, nutpie.sample = compile_fn, nutpie_sample
    return idata, rec


def worker_ours(args) -> None:
    import warnings

    import pymc as pm

    import pymc_wendy as pw

    d, prob = _load(args)
    with pm.Model(coords={"param": list(prob.params), "state": list(prob.states)}):
        p = pm.Normal("p", d["p_mu"], d["p_sd"], dims="param")
        sigma = pm.HalfNormal("sigma", 1, dims="state")
        pw.WeakODELikelihood(
            "U", ode=prob.model, params=p, sigma=sigma, t=d["t"], observed=d["U"],
            test_functions=None if args.test_functions == "default" else args.test_functions,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            idata, rec = _sample_with_timed_nutpie(
                lambda: pw.sample(
                    args.draws,
                    tune=args.tune,
                    chains=args.chains,
                    random_seed=args.seed,
                    discard_tuned_samples=False,  # to count tuning's gradient evaluations
                    progressbar=False,
                )
            )
            final_s = time.perf_counter() - t0
    _finish(
        args,
        _nutpie_result(
            idata,
            rec,
            whitened=bool(idata.posterior.attrs.get("whitened", 0)),
            final_s=final_s,
            **_final_result(idata),
        ),  # fmt: skip
    )


def _final_result(idata) -> dict:
    """What ``pw.sample`` returned beyond its weak NUTS run: the check's verdict, the route
    of the result (``"weak"``, or the correction's ``"importance"`` / ``"nuts"``) and, for a
    reweighted posterior, its ESS: its draws are resampled, so their bulk ESS would count
    repeats; the importance weights' ESS is the one to use (other routes: the draws' own)."""
    check = idata["weak_check"].attrs if "weak_check" in idata.children else {}
    out = {
        "verdict": check.get("verdict", "not checked"),
        "route": idata.attrs.get("route", "weak"),
    }
    if out["route"] == "importance":
        out["final_ess"] = float(idata.attrs["importance_ess"])
    return out


def _pytensor_rhs(rhs, D: int):
    """The problem's right-hand side on pytensor tensors, returning a vector."""
    import pytensor.tensor as pt

    def f(t, u, p):
        return pt.stack(list(rhs(t, [u[i] for i in range(D)], p)))

    return f


def worker_rk4(args) -> None:
    import warnings

    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    d, prob = _load(args)
    D = prob.model.n_states
    f = _pytensor_rhs(prob.model.rhs, D)
    t = d["t"]
    h = (t[1] - t[0]) / args.substeps

    def interval(t0, u, p):
        # fixed-step RK4 across one data interval; unrolled so scan has one step per datum
        for s in range(args.substeps):
            tt = t0 + s * h
            k1 = f(tt, u, p)
            k2 = f(tt + h / 2, u + h / 2 * k1, p)
            k3 = f(tt + h / 2, u + h / 2 * k2, p)
            k4 = f(tt + h, u + h * k3, p)
            u = u + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return u

    with pm.Model(coords={"param": list(prob.params), "state": list(prob.states)}):
        p = pm.Normal("p", d["p_mu"], d["p_sd"], dims="param")
        sigma = pm.HalfNormal("sigma", 1, dims="state")
        u0 = pm.Normal("u0", d["u0_mu"], d["u0_sd"], dims="state")
        path = pytensor.scan(
            interval,
            sequences=[pt.as_tensor(t[:-1])],
            outputs_info=[u0],
            non_sequences=[p],
            return_updates=False,
        )
        pm.Normal("U", pt.concatenate([u0[None, :], path], axis=0), sigma, observed=d["U"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata, rec = _sample_with_timed_nutpie(
                lambda: pm.sample(
                    args.draws,
                    tune=args.tune,
                    chains=args.chains,
                    cores=args.cores,
                    random_seed=args.seed,
                    nuts_sampler="nutpie",
                    # start at the prior centre like the other peers: nutpie's jitter of
                    # +-1 on p5 = 0.11 starts chains in other basins of the rugged likelihood
                    compile_kwargs={"jitter_rvs": set()},
                    discard_tuned_samples=False,
                    progressbar=False,
                )
            )
    _finish(args, _nutpie_result(idata, rec))


def worker_pmode(args) -> None:
    import warnings

    import pymc as pm
    import pytensor.tensor as pt

    d, prob = _load(args)
    D, J = prob.model.n_states, prob.model.n_params
    rhs = prob.model.rhs
    t = d["t"]

    def func(y, tt, theta):
        return list(rhs(tt, [y[i] for i in range(D)], theta))

    ode = pm.ode.DifferentialEquation(func=func, times=t[1:], n_states=D, n_theta=J, t0=t[0])
    counts = {
        "grads": 0.0,
        "grads_tune": 0.0,
        "tuned": set(),
        "first": None,
        "div": 0,
        "printed": 0.0,
    }

    def callback(trace, draw):
        # PyMC calls this in the parent for every draw of every chain, tuning included, so the
        # gradient count survives a kill at the budget
        stats = draw.stats[0] if isinstance(draw.stats, list | tuple) else draw.stats
        n = float(stats.get("tree_size", stats.get("n_steps", 0)))  # the step's raw stats
        counts["grads"] += n
        if counts["first"] is None:
            counts["first"] = time.perf_counter() - t_start
            _progress(f"first draw grads {counts['grads']:.0f}")
        if draw.tuning:
            counts["grads_tune"] += n
        else:
            counts["div"] += int(bool(stats.get("diverging", False)))
            if draw.chain not in counts["tuned"]:
                counts["tuned"].add(draw.chain)
                if len(counts["tuned"]) == args.chains:
                    _progress(f"tuned (all chains) grads {counts['grads']:.0f}")
        # every draw takes seconds here, so report each (at most one line a second): the
        # count at a kill is then the gradient evaluations actually done
        now = time.perf_counter()
        if now - counts["printed"] > 1.0:
            counts["printed"] = now
            stage = "tune" if draw.tuning else "draw"
            _progress(f"chain {draw.chain} {stage} {draw.draw_idx} grads {counts['grads']:.0f}")

    with pm.Model(coords={"param": list(prob.params), "state": list(prob.states)}):
        p = pm.Normal("p", d["p_mu"], d["p_sd"], dims="param")
        sigma = pm.HalfNormal("sigma", 1, dims="state")
        u0 = pm.Normal("u0", d["u0_mu"], d["u0_sd"], dims="state")
        path = ode(y0=u0, theta=p)
        pm.Normal("U", pt.concatenate([u0[None, :], path], axis=0), sigma, observed=d["U"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_start = time.perf_counter()
            idata = pm.sample(
                args.draws,
                tune=args.tune,
                chains=args.chains,
                cores=args.cores,
                random_seed=args.seed,
                nuts_sampler="pymc",
                init="adapt_diag",  # the prior centre, no jitter (as the other peers)
                callback=callback,
                progressbar=False,
                compute_convergence_checks=False,
            )
            wall = time.perf_counter() - t_start
    compile_s = counts["first"] or 0.0
    _finish(
        args,
        {
            "finished": True,
            "compile_s": compile_s,
            "sampling_s": wall - compile_s,
            "grads_tune": counts["grads_tune"],
            "grads": counts["grads"],
            "divergences": counts["div"],
            "p_draws": _posterior_p(idata).tolist(),
        },
    )


def worker_numpyro(args) -> None:
    """One chain of numpyro NUTS on a diffrax solve (float64, XLA on one thread)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import diffrax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS, init_to_median, init_to_value

    compile_s = [0.0]
    events = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )

    def on_event(event, duration, **_):
        if event in events:
            compile_s[0] += duration

    jax.monitoring.register_event_duration_secs_listener(on_event)

    d, prob = _load(args)
    D = prob.model.n_states
    rhs = prob.model.rhs
    t = jnp.asarray(d["t"])
    U = jnp.asarray(d["U"])

    def vector_field(tt, y, p):
        return jnp.stack(list(rhs(tt, [y[i] for i in range(D)], p)))

    term = diffrax.ODETerm(vector_field)
    controller = diffrax.PIDController(rtol=1e-6, atol=1e-6)

    def model():
        p = numpyro.sample("p", dist.Normal(jnp.asarray(d["p_mu"]), jnp.asarray(d["p_sd"])))
        # a data file may give the noise level's prior scale (default 1)
        sigma_sd = jnp.asarray(d["sigma_sd"]) if "sigma_sd" in d else jnp.ones(D)
        sigma = numpyro.sample("sigma", dist.HalfNormal(sigma_sd))
        u0 = numpyro.sample("u0", dist.Normal(jnp.asarray(d["u0_mu"]), jnp.asarray(d["u0_sd"])))
        sol = diffrax.diffeqsolve(
            term,
            diffrax.Tsit5(),
            t0=t[0],
            t1=t[-1],
            dt0=None,
            y0=u0,
            args=p,
            saveat=diffrax.SaveAt(ts=t),
            stepsize_controller=controller,
            max_steps=100_000,
            throw=False,  # a failed solve (wild proposal) is a rejected point, not a crash
        )
        ok = sol.result == diffrax.RESULTS.successful
        ys = jnp.where(ok, sol.ys, 0.0)
        numpyro.factor("solve_failed", jnp.where(ok, 0.0, -jnp.inf))
        numpyro.sample("U", dist.Normal(ys, sigma), obs=U)

    # a data file may name a start (forward_correction.py starts its reference at the truth)
    init = (
        init_to_value(values={k: jnp.asarray(d[f"init_{k}"]) for k in ("p", "sigma", "u0")})
        if "init_p" in d
        else init_to_median
    )
    kernel = NUTS(model, init_strategy=init)
    mcmc = MCMC(
        kernel,
        num_warmup=args.tune,
        num_samples=args.draws,
        num_chains=1,
        chain_method="sequential",
        progress_bar=False,
    )
    key = jax.random.PRNGKey(args.seed * 1000 + args.chain)
    fields = ("num_steps", "diverging")
    t0 = time.perf_counter()
    mcmc.warmup(key, extra_fields=fields, collect_warmup=True)
    warm = mcmc.get_extra_fields()
    grads_tune = float(np.asarray(warm["num_steps"]).sum())
    _progress(f"tuned grads {grads_tune:.0f}")
    mcmc.run(mcmc.post_warmup_state.rng_key, extra_fields=fields)
    jax.block_until_ready(mcmc.get_samples())
    wall = time.perf_counter() - t0
    extra = mcmc.get_extra_fields()
    samples = mcmc.get_samples()
    p_draws = np.asarray(samples["p"])[None]  # (1 chain, draws, J)
    _finish(
        args,
        {
            "finished": True,
            "compile_s": compile_s[0],
            "sampling_s": wall - compile_s[0],
            "grads_tune": grads_tune,
            "grads": grads_tune + float(np.asarray(extra["num_steps"]).sum()),
            "divergences": int(np.asarray(extra["diverging"]).sum()),
            "p_draws": p_draws.tolist(),
            "sigma_draws": np.asarray(samples["sigma"])[None].tolist(),
            "u0_draws": np.asarray(samples["u0"])[None].tolist(),
        },
    )


WORKERS = {
    "ours": worker_ours,
    "rk4": worker_rk4,
    "pmode": worker_pmode,
    "numpyro": worker_numpyro,
}


# --- parent: launch, budget, collect --------------------------------------------------------


def _launch(kind: str, cases: list[str], tmp: Path, log: Path, args, chain=0):
    cmd = [
        sys.executable,
        str(HERE),
        "--worker",
        kind,
        "--case",
        ",".join(cases),
        "--data",
        str(tmp / "{case}.npz"),
        "--out",
        str(tmp / f"{{case}}-{kind}-{chain}.json"),
        "--chains",
        str(args.chains),
        "--tune",
        str(args.tune),
        "--draws",
        str(args.draws),
        "--seed",
        str(args.seed),
        "--chain",
        str(chain),
        "--cores",
        str(args.cores),
        "--test-functions",
        args.test_functions,
    ]
    env = dict(os.environ)
    # one XLA thread per chain process, as nutpie's chains get one core each
    env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    env.setdefault("TQDM_DISABLE", "1")
    with open(log, "w") as fh:
        # own session, so that a kill at the budget takes PyMC's chain processes with it
        return subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _case_progress(text: str, case: str) -> list[str]:
    tag = f"[{case}] "
    return [ln.split(tag, 1)[1] for ln in text.splitlines() if ln.startswith("PROG") and tag in ln]


def start_peer(kind: str, cases: list[str], tmp: Path, args, budget: float) -> tuple:
    """Start one sampler on the cases (one after another in the same process); numpyro as one
    process per chain, side by side."""
    n_proc = args.chains if kind == "numpyro" else 1
    procs = []
    t0 = time.perf_counter()
    for c in range(n_proc):
        log = tmp / f"{'+'.join(cases)}-{kind}-{c}.log"
        procs.append((_launch(kind, cases, tmp, log, args, chain=c), log, c))
    return kind, cases, tmp, procs, t0, budget


def finish_peer(handle: tuple) -> dict:
    """Wait for a started sampler until its budget is spent, kill it then, and collect the
    result of each of its cases."""
    kind, cases, tmp, procs, t0, budget = handle
    timed_out = False
    for proc, _, _ in procs:
        remaining = budget - (time.perf_counter() - t0)
        try:
            proc.wait(timeout=max(remaining, 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for proc, _, _ in procs:
            _kill(proc)
    wall = time.perf_counter() - t0
    load = os.getloadavg()[0]
    out = {case: _collect(kind, case, tmp, procs, timed_out, budget, wall, load) for case in cases}
    # several cases share one budget: a case that did not finish had what the earlier ones
    # left of it, and those after it none
    remaining, reached = budget, True
    for case in cases:
        r = out[case]
        if r.get("finished"):
            remaining -= r["total_s"]
        elif reached:
            reached = False
            if len(cases) > 1 and "did not finish" in r["status"]:
                r["budget_s"] = max(remaining, 0.0)
                r["status"] += f" (shared; {r['budget_s']:.0f} s of it on this case)"
        elif "did not finish" in r["status"]:
            r["status"] = f"not reached within the {budget:.0f} s budget"
    return out


def _collect(kind, case, tmp, procs, timed_out, budget, wall, load) -> dict:
    res = {"sampler": kind, "label": LABELS[kind], "wall_s": wall, "budget_s": budget}
    # other jobs share the machine: keep the load next to the timings
    res["loadavg_1min_after"] = load
    parts, tuned, grads_so_far = [], [], []
    for proc, log, c in procs:
        text = log.read_text(errors="replace")
        lines = _case_progress(text, case)
        tuned.append(any(" tuned" in f" {ln}" for ln in lines))
        last = lines[-1] if lines else ""
        if "grads" in last:
            grads_so_far.append(float(last.split()[-1]))
        out = tmp / f"{case}-{kind}-{c}.json"
        if out.exists():
            parts.append(json.loads(out.read_text()))
        else:
            res["progress"] = last
            if not timed_out:
                tail = text.strip().splitlines()[-15:]
                res["error"] = "\n".join(tail) or f"exit code {proc.returncode}"
    if len(parts) < len(procs):
        res["finished"] = False
        if timed_out:
            # nutpie does not report while it samples: then the stage is unknown
            stage = "" if kind in ("ours", "rk4") else (" draws" if all(tuned) else " tuning")
            res["status"] = f"did not finish{stage} after {budget:.0f} s"
            if grads_so_far and kind == "pmode":
                res["grads_so_far"] = sum(grads_so_far)
        else:
            res["status"] = "failed"
        return res
    res["finished"] = True
    res["status"] = "ok"
    res["compile_s"] = max(p["compile_s"] for p in parts)
    res["sampling_s"] = max(p["sampling_s"] for p in parts)
    res["total_s"] = max(p["total_s"] for p in parts)
    for key in ("grads", "grads_tune"):
        res[key] = float(sum(p[key] for p in parts))
    res["divergences"] = int(sum(p["divergences"] for p in parts))
    for key in ("whitened", "final_s", "route", "verdict", "final_ess"):  # ours only
        if key in parts[0]:
            res[key] = parts[0][key]
    draws = np.concatenate([np.asarray(p["p_draws"], dtype=float) for p in parts], axis=0)
    res.update(_diagnostics(draws))
    return res


def _diagnostics(draws: np.ndarray) -> dict:
    """Min bulk ESS, max R-hat, posterior mean and sd of p from (chains, draws, J) samples."""
    import arviz as az
    import xarray as xr

    ds = xr.Dataset({"p": (("chain", "draw", "param"), draws)})
    ess = np.asarray(az.ess(ds, method="bulk")["p"].values, dtype=float)
    rhat = np.asarray(az.rhat(ds)["p"].values, dtype=float) if draws.shape[0] > 1 else None
    flat = draws.reshape(-1, draws.shape[-1])
    return {
        "ess_bulk_min": float(ess.min()),
        "ess_bulk": ess.tolist(),
        "rhat_max": float(np.nanmax(rhat)) if rhat is not None else float("nan"),
        "mean": flat.mean(0).tolist(),
        "sd": flat.std(0, ddof=1).tolist(),
        # per chain too: forward-solve chains can settle in different modes (R-hat >> 1)
        "chain_mean": draws.mean(1).tolist(),
        "chain_sd": draws.std(1, ddof=1).tolist(),
    }


def _derived(results: dict, params: list[str]) -> str | None:
    """ESS/s, ratios against ours, agreement with the reference forward-solve posterior."""
    for r in results.values():
        if r.get("finished"):
            r["ess_per_s"] = r["ess_bulk_min"] / r["sampling_s"]
            # ours: the ESS of what pw.sample returned, corrected or not
            r["ess_per_s_total"] = r.get("final_ess", r["ess_bulk_min"]) / r["total_s"]
    forward = [k for k in ("numpyro", "rk4", "pmode") if results.get(k, {}).get("finished")]
    ref = max(forward, key=lambda k: results[k]["ess_bulk_min"]) if forward else None
    if "numpyro" in forward:
        ref = "numpyro"  # the adaptive solver at rtol 1e-6, the most accurate forward model
    ours = results.get("ours", {})
    for k, r in results.items():
        if k != "ours" and ours.get("finished"):
            if r.get("finished"):
                r["ratio_ess_per_s"] = ours["ess_per_s"] / r["ess_per_s"]
                r["ratio_ess_per_s_total"] = ours["ess_per_s_total"] / r["ess_per_s_total"]
            elif "did not finish" in r.get("status", ""):
                # even a peer producing ESS = all its draws the moment the budget ended
                n = ours.get("n_draws_total", 0)
                r["ratio_lower_bound"] = ours["ess_per_s"] * r["budget_s"] / max(n, 1)
        if ref is not None and r.get("finished") and k != ref:
            m, mr = np.asarray(r["mean"]), np.asarray(results[ref]["mean"])
            r["agreement_sd"] = ((m - mr) / np.asarray(results[ref]["sd"])).tolist()
            r["agreement_ref"] = ref
            if results[ref]["rhat_max"] > 1.05:
                # the pooled reference mixes modes: compare with each of its chains instead
                cm, cs = (
                    np.asarray(results[ref]["chain_mean"]),
                    np.asarray(results[ref]["chain_sd"]),
                )
                r["agreement_sd_per_ref_chain"] = ((m[None] - cm) / cs).tolist()
    return ref


def _fmt(x, spec="{:.1f}") -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    return spec.format(x)


def print_case(info: dict, results: dict, ref: str | None, args) -> None:
    print(
        f"\n== {info['case']}: {info['problem']}, {info['n_points']} points, "
        f"{100 * info['noise_ratio']:.0f} % noise (seed {info['data_seed']}); "
        f"{args.chains} chains x ({args.tune} tune + {args.draws} draws), seed {args.seed}"
    )
    head = (
        f"{'sampler':<18} {'compile s':>9} {'sampling s':>10} {'total s':>8} {'grads':>9} "
        f"{'tune grads':>10} {'min ESS':>8} {'ESS/s':>8} {'ESS/s tot':>9} {'R-hat':>6} "
        f"{'div':>4} {'ours/peer':>15}"
    )
    print(head)
    for r in results.values():
        if not r.get("finished"):
            extra = ""
            if "grads_so_far" in r:
                extra = f", {r['grads_so_far']:.0f} gradient evaluations by then"
            if "ratio_lower_bound" in r:
                extra += f"; ours/peer ESS/s > {r['ratio_lower_bound']:.0f}"
            if r.get("status") == "failed":
                extra += f": {r.get('error', '')[-400:]}"
            print(f"{r['label']:<18} {r['status']}{extra}")
            continue
        ratio = "-"
        if "ratio_ess_per_s" in r:
            ratio = f"{r['ratio_ess_per_s']:.1f} ({r['ratio_ess_per_s_total']:.1f})"
        print(
            f"{r['label']:<18} {r['compile_s']:>9.1f} {r['sampling_s']:>10.1f} "
            f"{r['total_s']:>8.1f} {r['grads']:>9.0f} {r['grads_tune']:>10.0f} "
            f"{r['ess_bulk_min']:>8.0f} {r['ess_per_s']:>8.2f} {r['ess_per_s_total']:>9.2f} "
            f"{_fmt(r['rhat_max'], '{:.3f}'):>6} {r['divergences']:>4d} {ratio:>15}"
        )
    ours = results.get("ours", {})
    if "route" in ours:
        print(
            f"ours returned: check {ours['verdict']}, route {ours['route']}, ESS "
            f"{ours.get('final_ess', ours['ess_bulk_min']):.0f} ({ours['final_s']:.1f} s in "
            "pw.sample, check and "
            "correction included; ESS/s tot above uses this ESS)"
        )
    if ref is not None:
        print(f"posterior means, (mean - mean_{LABELS[ref]}) / sd_{LABELS[ref]} per parameter:")
        print(f"{'':<18} " + " ".join(f"{p:>8}" for p in info["params"]))
        print(f"{'truth':<18} " + " ".join(f"{v:>8.4g}" for v in info["p_true"]))
        print(f"{'ref. mean':<18} " + " ".join(f"{v:>8.4g}" for v in results[ref]["mean"]))
        print(f"{'ref. sd':<18} " + " ".join(f"{v:>8.3g}" for v in results[ref]["sd"]))
        for r in results.values():
            if "agreement_sd" in r:
                cells = " ".join(f"{v:>8.2f}" for v in r["agreement_sd"])
                print(f"{r['label']:<18} {cells}")
        if results[ref]["rhat_max"] > 1.05:
            print(
                f"{LABELS[ref]}'s chains disagree (R-hat {results[ref]['rhat_max']:.2f}); "
                "per chain: mean, sd, and (mean - chain mean) / chain sd of the others"
            )
            for c, (cm, cs) in enumerate(
                zip(results[ref]["chain_mean"], results[ref]["chain_sd"], strict=True)
            ):
                print(f"{'chain ' + str(c) + ' mean':<18} " + " ".join(f"{v:>8.4g}" for v in cm))
                print(f"{'chain ' + str(c) + ' sd':<18} " + " ".join(f"{v:>8.3g}" for v in cs))
                for r in results.values():
                    if "agreement_sd_per_ref_chain" in r:
                        cells = " ".join(f"{v:>8.2f}" for v in r["agreement_sd_per_ref_chain"][c])
                        print(f"{'  ' + r['label']:<18} {cells}")


def quick_line(info: dict, results: dict) -> str:
    ours, peer = results.get("ours", {}), results.get("numpyro", {})
    if not ours.get("finished"):
        return f"{info['case']}: ours {ours.get('status', 'not run')}"
    text = f"{info['case']}: ours {ours['ess_per_s']:.1f} ESS/s"
    if peer.get("finished"):
        text += (
            f", numpyro+diffrax {peer['ess_per_s']:.2f} ESS/s, "
            f"ESS/s ratio ours/numpyro {peer['ratio_ess_per_s']:.1f}"
        )
    elif "ratio_lower_bound" in peer:
        text += f", numpyro+diffrax {peer['status']}, ESS/s ratio > {peer['ratio_lower_bound']:.1f}"
    else:
        text += f", numpyro+diffrax {peer.get('status', 'not run')}"
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 chain, 100 + 100, ours and numpyro")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated of {list(CASES)}")
    ap.add_argument("--samplers", default=None, help=f"comma-separated of {list(SAMPLERS)}")
    ap.add_argument("--chains", type=int, default=None)
    ap.add_argument("--tune", type=int, default=None)
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cores", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per peer and case (900; --quick: 150 s for all cases)",
    )
    ap.add_argument("--budget-pmode", type=float, default=None, help="seconds for pm.ode (480)")
    ap.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="samplers run side by side within a case (default 1; --quick 2: one chain each)",
    )
    ap.add_argument("--json", type=Path, default=None, help="write all results here")
    ap.add_argument(
        "--test-functions", choices=("default", "local"), default="default",
        help="ours: the default (SVD) test functions or local ones (the banded kernel)",
    )  # fmt: skip
    # worker mode (internal)
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--chain", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--substeps", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        global _T0, _CASE
        for case in args.case.split(","):
            one = argparse.Namespace(**vars(args))
            one.case, one.substeps = case, CASES[case][3]
            one.data, one.out = args.data.format(case=case), args.out.format(case=case)
            # total_s per case: the first case of a process also pays the imports
            _T0, _CASE = time.perf_counter(), case
            WORKERS[args.worker](one)
        return 0

    quick_defaults = {
        "chains": 1,
        "tune": 100,
        "draws": 100,
        "budget": 150.0,
        "budget_pmode": 0,
        "parallel": 1,
    }
    full_defaults = {
        "chains": 2,
        "tune": 500,
        "draws": 500,
        "budget": 900.0,
        "budget_pmode": 480,
        "parallel": 1,
    }
    for key, value in (quick_defaults if args.quick else full_defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    samplers = (
        args.samplers.split(",")
        if args.samplers
        else (["ours", "numpyro"] if args.quick else list(SAMPLERS))
    )
    cases = args.cases.split(",")
    for name in samplers:
        if name not in SAMPLERS:
            ap.error(f"unknown sampler {name!r}; choose from {list(SAMPLERS)}")
    for name in cases:
        if name not in CASES:
            ap.error(f"unknown case {name!r}; choose from {list(CASES)}")

    missing = missing_peer_packages()
    if missing and "numpyro" in samplers:
        msg = (
            f"numpyro + diffrax peer unavailable: {', '.join(missing)} not installed "
            "(pip install -e '.[peers]')"
        )
        if args.quick:
            print(f"{msg}; --quick compares against it, so nothing to do.", file=sys.stderr)
            return 2
        print(f"{msg}; reporting the other samplers only.")
        samplers.remove("numpyro")

    versions = _versions()
    print(
        f"samplers {samplers}; cases {cases}; {args.chains} chains x ({args.tune} + {args.draws})"
        f"; budget {args.budget:.0f} s per peer, pm.ode {args.budget_pmode:.0f} s; "
        f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}\nversions: {versions}"
    )
    t_start = time.perf_counter()
    payload = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {
            k: getattr(args, k)
            for k in ("chains", "tune", "draws", "seed", "cores", "test_functions")
        },
        "versions": versions,
        "cases": [],
    }
    quick_lines = []

    def budget_of(kind: str) -> float:
        return args.budget_pmode if kind == "pmode" else args.budget

    def report(case: str, results: dict) -> None:
        info = infos[case]
        results = {k: results[k] for k in samplers}
        for kind, r in results.items():
            if kind == "ours":
                r["n_draws_total"] = args.chains * args.draws
            print(f"  [{case}] {r['label']}: {r['status']} ({r.get('wall_s', 0):.0f} s)")
        ref = _derived(results, info["params"])
        print_case(info, results, ref, args)
        quick_lines.append(quick_line(info, results))
        payload["cases"].append({**info, "reference": ref, "results": results})
        payload["elapsed_s"] = time.perf_counter() - t_start
        if args.json is not None:
            args.json.write_text(json.dumps(payload, indent=1) + "\n")
        sys.stdout.flush()

    with tempfile.TemporaryDirectory(prefix="peers-") as tmp_name:
        tmp = Path(tmp_name)
        infos = {case: make_case(case, tmp / f"{case}.npz") for case in cases}
        per_case: dict = {case: {} for case in cases}
        for kind in samplers:
            if budget_of(kind) <= 0:
                for case in cases:
                    per_case[case][kind] = {
                        "sampler": kind,
                        "label": LABELS[kind],
                        "finished": False,
                        "status": "skipped",
                    }
        active = [k for k in samplers if budget_of(k) > 0]
        if args.quick:
            # one process per sampler for all cases (imports paid once), samplers side by
            # side, one budget for all cases: the whole run stays under 3 minutes
            handles = [start_peer(k, cases, tmp, args, budget_of(k)) for k in active]
            for handle in handles:
                for case, res in finish_peer(handle).items():
                    per_case[case][handle[0]] = res
            for case in cases:
                report(case, per_case[case])
        else:
            for case in cases:
                running = []
                for i, kind in enumerate(active):
                    running.append(start_peer(kind, [case], tmp, args, budget_of(kind)))
                    if len(running) < args.parallel and i + 1 < len(active):
                        continue
                    for handle in running:
                        per_case[case].update({handle[0]: finish_peer(handle)[case]})
                    running = []
                report(case, per_case[case])
    print(f"\n== ESS/s, ours against numpyro+diffrax ({time.perf_counter() - t_start:.0f} s) ==")
    for line in quick_lines:
        print(line)
    if args.json is not None:
        print(f"wrote {args.json}")
    return 0


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in ("pymc", "pytensor", "nutpie", "jax", "numpyro", "diffrax"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


if __name__ == "__main__":
    sys.exit(main())
