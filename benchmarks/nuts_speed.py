"""NUTS on FitzHugh-Nagumo: the WeakODELikelihood Op against the same likelihood as a plain graph.

Both models have the same prior (``p ~ Normal(0, 10)`` per parameter), the same
:class:`pymc_wendy.WeakLikelihood` (same test functions, same estimated noise level), start
from the same point (the WENDy-MLE, no jitter) and are sampled in the same run with
:func:`pymc_wendy.sample` (one BLAS thread per chain) and nutpie:

* **ours**: ``WeakODELikelihood("U", ode=..., params=p, t=t, observed=U)`` (the numba Op).
* **plain**: ``pm.Potential("weak", -plain_weak_nll(lik, p, data="shared"))``
  (:mod:`pymc_wendy.backends.graph`: dense pytensor graph, pytensor autodiff).

Timings:

* *build*: constructing the PyMC model in Python, including the weak likelihood (for *plain*
  also the WENDy-MLE start, which for *ours* ``pymc_wendy.sample`` computes: see *other*).
* *compile*: ``nutpie.compile_pymc_model`` and *sampling*: ``nutpie.sample`` (tuning + draws,
  all chains), each timed by wrapping the two nutpie functions while ``pymc_wendy.sample`` runs
  (so the sampler is exactly the user path); the rest of ``pymc_wendy.sample`` (for *ours*
  the WENDy-MLE start values, then converting the trace) is reported as *other*.
* *CPU ms per leapfrog step*: process CPU time during ``nutpie.sample`` over all gradient
  evaluations (tuning included); on a shared machine the wall time per step also counts time
  the sampler threads waited for a core, the CPU time does not.
* *logp+grad*: the numba-compiled pytensor function (flat unconstrained vector -> logp,
  gradient) that nutpie wraps in its C callback (``compiled.logp_func``), called from Python at
  the start point with one BLAS thread; best of 7 batch means.

``OPENBLAS_NUM_THREADS=1`` (and the same for MKL/OpenMP) is set at the very top, before numpy
is imported, unless already set; ``pymc_wendy.sample`` also limits BLAS to one thread.

Run:  python benchmarks/nuts_speed.py [--draws 1000 --tune 1000 --chains 4] [--skip-plain]
          [--plain-draws N] [--plain-tune N] [--adaptation diag|low_rank|...] [--json PATH]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import nutpie  # noqa: E402
import pymc as pm  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import pymc_wendy  # noqa: E402
from pymc_wendy.backends.graph import plain_weak_nll  # noqa: E402
from pymc_wendy.bayes.distribution import WeakODELikelihood  # noqa: E402
from pymc_wendy.bayes.sampling import initial_values, sample  # noqa: E402
from pymc_wendy.estimators import wendy_mle  # noqa: E402

PROBLEM, N_POINTS, NOISE_RATIO, DATA_SEED = "fitzhugh_nagumo", 513, 0.10, 0


@contextlib.contextmanager
def _timed_nutpie(record: dict):
    """Time ``nutpie.compile_pymc_model`` and ``nutpie.sample`` as called by ``pm.sample``."""
    compile_fn, sample_fn = nutpie.compile_pymc_model, nutpie.sample

    def compile_wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        compiled = compile_fn(*args, **kwargs)
        record["compile_s"] = time.perf_counter() - t0
        record["compiled"] = compiled
        return compiled

    def sample_wrapper(*args, **kwargs):
        record["adaptation"] = kwargs.get("adaptation", "diag")  # nutpie's default is diag
        record["blas_threads"] = max(
            (i.get("num_threads") or 0 for i in threadpool_info() if i.get("user_api") == "blas"),
            default=0,
        )
        t0, c0 = time.perf_counter(), time.process_time()
        out = sample_fn(*args, **kwargs)
        record["sampling_s"] = time.perf_counter() - t0
        record["sampling_cpu_s"] = time.process_time() - c0  # all threads of this process
        return out

    nutpie.compile_pymc_model, nutpie.sample = compile_wrapper, sample_wrapper
    try:
        yield record
    finally:
        nutpie.compile_pymc_model, nutpie.sample = compile_fn, sample_fn


def _logp_grad_ms(compiled, point: np.ndarray, repeats: int = 7) -> float:
    """Ms per logp + gradient evaluation of the function nutpie samples with (1 BLAS thread).

    ``compiled.logp_func`` is the numba-mode pytensor function of the flat unconstrained
    vector behind nutpie's C callback; called from Python, so a few microseconds of call
    overhead are included. Best of ``repeats`` batch means (batches of >= 0.2 s).
    """
    fn = compiled.logp_func
    x = np.ascontiguousarray(point, dtype=float)
    with threadpool_limits(1, user_api="blas"):
        fn(x)  # warm-up
        t0 = time.perf_counter()
        fn(x)
        per_batch = max(1, int(0.2 / max(time.perf_counter() - t0, 1e-6)))
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(per_batch):
                fn(x)
            best = min(best, (time.perf_counter() - t0) / per_batch)
    return 1e3 * float(best)


def _scalar(x) -> np.ndarray:
    """Values of an arviz diagnostic result (Dataset or DataTree) for the variable ``p``."""
    for getter in (lambda d: d["p"], lambda d: d.posterior["p"], lambda d: d["posterior"]["p"]):
        try:
            return np.asarray(getter(x).values, dtype=float).ravel()
        except (KeyError, AttributeError, TypeError):
            continue
    raise TypeError(f"cannot read 'p' from {type(x)!r}")


def _stats(idata) -> tuple[dict, np.ndarray]:
    post = idata["posterior"].to_dataset() if hasattr(idata, "children") else idata.posterior
    stats = idata["sample_stats"].to_dataset() if hasattr(idata, "children") else idata.sample_stats
    out: dict = {}
    out["ess_bulk"] = _scalar(az.ess(post, var_names=["p"], method="bulk"))
    out["rhat"] = _scalar(az.rhat(post, var_names=["p"]))
    out["divergences"] = int(np.asarray(stats["diverging"]).sum())
    for name, key in (("depth", "mean_tree_depth"), ("n_steps", "mean_leapfrog")):
        out[key] = float(np.asarray(stats[name]).mean()) if name in stats else float("nan")
    warm = None
    if hasattr(idata, "children") and "warmup_sample_stats" in idata.children:
        warm = idata["warmup_sample_stats"].to_dataset()
    elif hasattr(idata, "warmup_sample_stats"):
        warm = idata.warmup_sample_stats
    total = float(np.asarray(stats["n_steps"]).sum()) if "n_steps" in stats else float("nan")
    if warm is not None and "n_steps" in warm:
        total += float(np.asarray(warm["n_steps"]).sum())
        out["total_leapfrog"] = total
    else:
        out["total_leapfrog"] = float("nan")
    return out, np.asarray(post["p"].mean(("chain", "draw")))


def run_one(
    label: str, model: pm.Model, point: np.ndarray, args, draws: int, initvals=None
) -> dict:
    record: dict = {}
    tune = args.tune if label.startswith("ours") or args.plain_tune is None else args.plain_tune
    load_before = os.getloadavg()[0]
    extra = {"nuts": {"adaptation": args.adaptation}} if args.adaptation else {}
    t0 = time.perf_counter()
    with model, _timed_nutpie(record):
        idata = sample(
            draws,
            initvals=initvals,
            **extra,
            tune=tune,
            chains=args.chains,
            cores=args.cores,
            random_seed=args.seed,
            discard_tuned_samples=False,  # keep tuning stats to count all gradient evaluations
            progressbar=False,
        )
    total = time.perf_counter() - t0
    res, post_mean = _stats(idata)
    ms = _logp_grad_ms(record["compiled"], point)
    wall = record["sampling_s"]
    ess_min = float(res["ess_bulk"].min())
    out = {
        "label": label,
        "draws": draws,
        "tune": tune,
        "adaptation": record["adaptation"],
        "blas_threads": record["blas_threads"],
        "chains": args.chains,
        "compile_s": record["compile_s"],
        "sampling_s": wall,
        "sampling_cpu_s": record["sampling_cpu_s"],
        "other_s": total - record["compile_s"] - wall,
        "ess_bulk_min": ess_min,
        "ess_bulk_median": float(np.median(res["ess_bulk"])),
        "ess_per_s": ess_min / wall,
        "divergences": res["divergences"],
        "mean_tree_depth": res["mean_tree_depth"],
        "mean_leapfrog": res["mean_leapfrog"],
        "total_leapfrog": res["total_leapfrog"],
        "rhat_max": float(res["rhat"].max()),
        "logp_grad_ms": ms,
        "posterior_mean": post_mean.tolist(),
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": os.getloadavg()[0],
    }
    # sampler time per gradient evaluation, per core in use (overhead included)
    cores = min(args.cores, args.chains)
    out["sampling_ms_per_grad"] = 1e3 * wall * cores / res["total_leapfrog"]
    # CPU time per leapfrog step: unlike wall time, not inflated by other processes' load
    out["sampling_cpu_ms_per_grad"] = 1e3 * record["sampling_cpu_s"] / res["total_leapfrog"]
    return out


def build_ours(prob, data, coords):
    t0 = time.perf_counter()
    with pm.Model(coords=coords) as model:
        p = pm.Normal("p", 0, 10, dims="param")
        WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    return model, time.perf_counter() - t0


def build_plain(lik, coords):
    t0 = time.perf_counter()
    with pm.Model(coords=coords) as model:
        p = pm.Normal("p", 0, 10, dims="param")
        pm.Potential("weak", -plain_weak_nll(lik, p, data="shared"))
    return model, time.perf_counter() - t0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--cores", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-plain", action="store_true", help="only sample our Op")
    parser.add_argument(
        "--plain-draws", type=int, default=None, help="draws for the plain graph (default --draws)"
    )
    parser.add_argument(
        "--plain-tune", type=int, default=None, help="tuning steps for the plain graph (--tune)"
    )
    parser.add_argument(
        "--adaptation",
        choices=["diag", "draw_diag", "low_rank", "flow"],
        default=None,
        help="nutpie mass matrix adaptation (default: pymc_wendy.sample's)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)

    blas = [(i.get("internal_api"), i.get("num_threads")) for i in threadpool_info()]
    print(
        f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']} (set before importing numpy "
        f"unless given); BLAS pools {blas}; {os.cpu_count()} CPUs, --cores {args.cores}"
    )
    print(
        f"{PROBLEM}: {N_POINTS} points, {100 * NOISE_RATIO:.0f} % noise, data seed {DATA_SEED}; "
        f"NUTS (nutpie via pymc_wendy.sample) {args.chains} chains x {args.draws} draws after "
        f"{args.tune} tuning steps, seed {args.seed}"
    )
    prob = pymc_wendy.get_problem(PROBLEM)
    data = prob.simulate(n_points=N_POINTS, noise_ratio=NOISE_RATIO, seed=DATA_SEED)
    coords = {"param": list(prob.model.params)}

    model_a, build_a = build_ours(prob, data, coords)
    # what pymc_wendy.sample starts ours from (it computes this itself when sampling)
    p0_a = np.asarray(initial_values(model_a)["p"], dtype=float)

    t0 = time.perf_counter()
    lik = pymc_wendy.WeakLikelihood(prob.model, data.t, data.U)
    p0 = wendy_mle(lik).x
    t_lik = time.perf_counter() - t0
    if not np.allclose(p0, p0_a, rtol=1e-6, atol=1e-8):
        print(f"note: WENDy-MLE {p0} differs from ours' initial value {p0_a}; using ours'")
    p0 = p0_a  # the same start for both
    print(f"start (WENDy-MLE): {np.array2string(p0, precision=4)}; true {data.p_true}")

    results: list[dict] = []

    def report(res: dict) -> None:  # print and save each run as soon as it is done
        results.append(res)
        _print_table([res])
        if args.json is not None:
            _write_json(args.json, args, data, p0, results)

    res = run_one("ours (WeakODELikelihood Op)", model_a, p0, args, args.draws)
    res["build_s"] = build_a
    report(res)
    if not args.skip_plain:
        model_b, build_b = build_plain(lik, coords)
        # same log density (both -nll + the same prior): checked at the start
        la = model_a.compile_logp()({"p": p0})
        lb = model_b.compile_logp()({"p": p0})
        print(f"logp at the start: ours {float(la):.6f}, plain {float(lb):.6f}")
        draws_b = args.plain_draws or args.draws
        res = run_one("plain pytensor graph", model_b, p0, args, draws_b, initvals={"p": p0})
        res["build_s"] = build_b + t_lik
        report(res)
        print("\n== both ==")
        _print_table(results)


def _write_json(path: Path, args, data, p0: np.ndarray, results: list[dict]) -> None:
    payload = {
        "problem": PROBLEM,
        "n_points": N_POINTS,
        "noise_ratio": NOISE_RATIO,
        "data_seed": DATA_SEED,
        "sampler_seed": args.seed,
        "cores": args.cores,
        "cpu_count": os.cpu_count(),
        "openblas_num_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "start": p0.tolist(),
        "p_true": np.asarray(data.p_true).tolist(),
        "results": results,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")


def _print_table(results: list[dict]) -> None:
    rows = [
        ("draws per chain", "draws", "{:d}"),
        ("tuning steps per chain", "tune", "{:d}"),
        ("mass matrix adaptation (nutpie)", "adaptation", "{}"),
        ("BLAS threads while sampling", "blas_threads", "{:d}"),
        ("model build s", "build_s", "{:.2f}"),
        ("compile s (nutpie.compile_pymc_model)", "compile_s", "{:.1f}"),
        ("sampling wall s (nutpie.sample)", "sampling_s", "{:.1f}"),
        ("other pmw.sample s (start, trace conversion)", "other_s", "{:.1f}"),
        ("ESS-bulk min", "ess_bulk_min", "{:.0f}"),
        ("ESS-bulk median", "ess_bulk_median", "{:.0f}"),
        ("ESS/s (min ESS-bulk / sampling s)", "ess_per_s", "{:.1f}"),
        ("divergences", "divergences", "{:d}"),
        ("mean tree depth", "mean_tree_depth", "{:.2f}"),
        ("mean leapfrog steps per draw", "mean_leapfrog", "{:.1f}"),
        ("leapfrog steps, all chains incl. tuning", "total_leapfrog", "{:.0f}"),
        ("max R-hat", "rhat_max", "{:.4f}"),
        ("logp+grad ms (compiled.logp_func)", "logp_grad_ms", "{:.3f}"),
        ("sampling CPU s (process, all threads)", "sampling_cpu_s", "{:.1f}"),
        ("sampling ms per leapfrog step per core", "sampling_ms_per_grad", "{:.3f}"),
        ("sampling CPU ms per leapfrog step", "sampling_cpu_ms_per_grad", "{:.3f}"),
        ("1-min load average before / after", "load", "{}"),
    ]
    labels = [r["label"] for r in results]
    width = max(len(r[0]) for r in rows)
    print()
    print(f"{'':<{width}}  " + "  ".join(f"{lab:>28}" for lab in labels))
    for title, key, fmt in rows:
        cells = [
            f"{r['loadavg_1min_before']:.2f} / {r['loadavg_1min_after']:.2f}"
            if key == "load"
            else fmt.format(r[key])
            for r in results
        ]
        print(f"{title:<{width}}  " + "  ".join(f"{c:>28}" for c in cells))
    for r in results:
        print(f"posterior mean ({r['label']}): {np.array2string(np.asarray(r['posterior_mean']))}")
    if len(results) == 2:
        a, b = results
        print()
        print(f"ours / plain, sampling wall time: {a['sampling_s'] / b['sampling_s']:.3f}")
        print(f"ours / plain, ESS/s:              {a['ess_per_s'] / b['ess_per_s']:.2f}")
        per_step = a["sampling_ms_per_grad"] / b["sampling_ms_per_grad"]
        print(f"ours / plain, wall per leapfrog:  {per_step:.3f}")
        print(f"ours / plain, compile time:       {a['compile_s'] / b['compile_s']:.3f}")
        print(f"ours / plain, logp+grad time:     {a['logp_grad_ms'] / b['logp_grad_ms']:.3f}")
        if (a["draws"], a["tune"]) != (b["draws"], b["tune"]):
            print("(the plain graph ran fewer iterations: compare ESS/s, not wall time)")


if __name__ == "__main__":
    main()
