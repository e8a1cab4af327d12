"""Time the compiled forward solve (DOPRI5 in numba, LSODA when stiff) against scipy's solve_ivp.

Three parts, in one run:

1. Every catalogue problem the compiled solver takes (``compiled_solve.supports``), plus
   Robertson's stiff chemical kinetics, at ``--points`` uniform output times over the
   problem's span, all at ``pw.solve``'s default tolerances (rtol 1e-10, atol 1e-12):
   ``compiled`` is ``pw.solve``'s default (odeint's LSODA on the compiled functions, asked
   for a tenth of the tolerances), ``DOP853`` and ``Radau`` are ``pw.solve(method=...)``
   (``solve_ivp``, Radau with the generated Jacobian; DOP853 is explicit and takes none),
   ``ivp-LSODA`` is ``solve_ivp``'s Python LSODA with the Jacobian (the path ``method="LSODA"``
   took before). Time: median of ``--repeats`` solves after a warm-up (numba compiles at the
   first); fewer repeats for solves over a second. Error: max |U - U_ref| / max |U_ref|, the
   reference DOP853 at rtol 1e-12, atol 1e-14 (Radau for Robertson; DOP853 gets nowhere there
   and is cut off after 50 000 evaluations).
2. The headline, posterior-predictive trajectories: FitzHugh-Nagumo, ``--draws`` parameter
   draws ``p_true * (1 + 0.02 z)``, at the predictive settings (``DEFAULT_SOLVER``: rtol 1e-7,
   atol 1e-9, 20 000 evaluations): ``CompiledSolver.solve_many`` (rtol 1e-8, atol 1e-10, as
   ``pw.solve`` asks it), a loop of ``pw.solve`` (the same compiled solve per call), a loop
   of ``pw.solve(method="Radau")``, and the old predictive path, ``solve_ivp`` LSODA with the
   Jacobian (``simulate.integrate``). Error: the worst over the first 20 draws.
3. ``pm.sample_posterior_predictive`` with 1 and ``--draws`` draws on a PyMC model with
   ``pw.WeakODELikelihood`` (FitzHugh-Nagumo data, 513 points, known ``u0``; the posterior a
   fake one, the draws of part 2), with the default solver and with ``solver={"method":
   "Radau"}``. Each call compiles its sampling function; the cost per draw is the difference
   of the two calls over ``draws - 1``. ``--skip-pymc`` leaves this part out.

4. Dosed models (``pk_iv_doses``, ``pk_oral_doses``, ``pk_two_compartment`` at their
   default grids): the exact stage's ``ForwardSolver``, compiled stretch by stretch between
   the doses (``model/piecewise_solve.py``), against the same solves on the ``solve_ivp``
   route, values and sensitivities, and the two routes' difference.

5. The compiled solver's two paths at the exact stage's tolerances (rtol 1e-8, atol 1e-10):
   the sensitivity solve of every catalogue problem it takes, and Robertson's, by the explicit
   pair (DOPRI5 in numba, ``CompiledSolver.explicit``) and by LSODA (``odeint`` on the same
   numba functions), at 21 and at ``--points`` output times; the path the solver takes (the
   explicit pair's status: 0 solved, 3 stiff) and the largest difference of the two
   relative to the largest value.

Run:  python benchmarks/forward_solve.py [--points 513] [--repeats 5] [--draws 200]
      [--problems a,b] [--skip-pymc] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np

import pymc_wendy as pw
from pymc_wendy.model.compiled_solve import compiled_solver, supports
from pymc_wendy.model.simulate import SimulationError, integrate

TOL = {"rtol": 1e-10, "atol": 1e-12}  # pw.solve's defaults
TIGHT = {"rtol": 1e-12, "atol": 1e-14}
PREDICTIVE = {"rtol": 1e-7, "atol": 1e-9, "max_nfev": 20_000}  # DEFAULT_SOLVER's
METHODS = ("compiled", "DOP853", "Radau", "ivp-LSODA")


def _robertson():
    def rhs(t, u, p):
        a, b, c = u
        return [-p[0] * a + p[1] * b * c, p[0] * a - p[1] * b * c - p[2] * b**2, p[2] * b**2]

    model = pw.ODEModel(rhs, states=["a", "b", "c"], params=["k1", "k2", "k3"], name="robertson")
    return model, np.array([0.04, 1e4, 3e7]), np.array([1.0, 0.0, 0.0]), (0.0, 40.0)


def _cases(names: list[str] | None) -> list[tuple]:
    """(name, model, p, u0, t_span, stiff reference) for each case."""
    out = []
    for name in names or pw.list_problems():
        if name == "robertson":
            continue
        prob = pw.get_problem(name)
        if supports(prob.model):
            out.append((name, prob.model, prob.p_true, prob.u0, prob.t_span, False))
    if names is None or "robertson" in names:
        model, p, u0, span = _robertson()
        out.append(("robertson", model, p, u0, span, True))
    return out


def _median_time(fn, repeats: int, budget: float = 2.0) -> float:
    """Median wall time of ``fn()`` (seconds) after one warm-up call; fewer repeats when one
    call takes more than ``budget / repeats``."""
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    n = max(1, min(repeats, int(budget / max(once, 1e-9))))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _old_lsoda(model, p, u0, t, *, rtol, atol, max_nfev):
    """What ``pw.solve(method="LSODA")`` ran before: solve_ivp's LSODA with the Jacobian."""
    return integrate(
        lambda s, u: model(s, u, p),
        np.asarray(u0, dtype=float),
        t,
        method="LSODA",
        rtol=rtol,
        atol=atol,
        max_nfev=max_nfev,
        jac=lambda s, u: model.jacobian(s, u, p),
        name=model.name,
    )


def _solvers(model, p, u0, t) -> dict:
    return {
        "compiled": lambda: pw.solve(model, p, u0, t, **TOL),
        "DOP853": lambda: pw.solve(model, p, u0, t, method="DOP853", max_nfev=50_000, **TOL),
        "Radau": lambda: pw.solve(model, p, u0, t, method="Radau", **TOL),
        "ivp-LSODA": lambda: _old_lsoda(model, p, u0, t, max_nfev=500_000, **TOL),
    }


def _error(U: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(U - ref)) / np.max(np.abs(ref)))


def catalogue(names: list[str] | None, n_points: int, repeats: int) -> list[dict]:
    """Part 1: one row per case with time (ms) and error of every method."""
    rows = []
    for name, model, p, u0, span, stiff in _cases(names):
        t = np.linspace(*span, n_points)
        ref_method = "Radau" if stiff else "DOP853"
        ref = pw.solve(model, p, u0, t, method=ref_method, **TIGHT)
        row = {"problem": name, "states": model.n_states, "reference": ref_method}
        for method, fn in _solvers(model, p, u0, t).items():
            try:
                err = _error(fn(), ref)
                ms = 1e3 * _median_time(fn, repeats)
            except SimulationError as exc:
                err, ms = float("nan"), float("nan")
                row[f"{method}_failure"] = str(exc)
            row[f"{method}_ms"], row[f"{method}_err"] = ms, err
        rows.append(row)
        _print_catalogue_row(row)
    return rows


def _print_catalogue_header() -> None:
    head = f"{'problem':<21}" + "".join(f" {m + ' ms':>13} {'err':>8}" for m in METHODS)
    head += f" {'DOP853/comp':>11} {'Radau/comp':>10}"
    print(head)
    print("-" * len(head))


def _print_catalogue_row(row: dict) -> None:
    line = f"{row['problem']:<21}"
    for m in METHODS:
        ms, err = row[f"{m}_ms"], row[f"{m}_err"]
        line += f" {ms:>13.2f} {err:>8.1e}" if np.isfinite(ms) else f" {'failed':>13} {'':>8}"
    comp = row["compiled_ms"]
    line += f" {row['DOP853_ms'] / comp:>11.0f} {row['Radau_ms'] / comp:>10.0f}"
    print(line)


def _draws(prob, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return prob.p_true * (1 + 0.02 * rng.standard_normal((n, prob.model.n_params)))


def predictive(n_points: int, n_draws: int, seed: int) -> list[dict]:
    """Part 2: ``n_draws`` FitzHugh-Nagumo trajectories along four paths."""
    prob = pw.get_problem("fitzhugh_nagumo")
    model, u0 = prob.model, prob.u0
    t = np.linspace(*prob.t_span, n_points)
    P = _draws(prob, n_draws, seed)
    solver = compiled_solver(model)
    steps = max(100, PREDICTIVE["max_nfev"] // t.size)  # as pw.solve bounds LSODA's steps
    tenth = {"rtol": 0.1 * PREDICTIVE["rtol"], "atol": 0.1 * PREDICTIVE["atol"]}
    solver.solve(P[0], u0, t)  # compile

    def many():
        U, ok = solver.solve_many(P, u0, t, max_steps=steps, **tenth)
        return list(U), int(ok.sum())

    def loop(**kw):
        out, ok = [], 0
        for p in P:
            try:
                out.append(pw.solve(model, p, u0, t, **kw))
                ok += 1
            except SimulationError:
                out.append(np.full((t.size, model.n_states), np.nan))
        return out, ok

    paths = {
        "CompiledSolver.solve_many": many,
        "pw.solve loop (compiled)": lambda: loop(**PREDICTIVE),
        'pw.solve loop (method="Radau")': lambda: loop(method="Radau", **PREDICTIVE),
        "old path: solve_ivp LSODA + jac": lambda: _old_loop(model, P, u0, t),
    }
    refs = [pw.solve(model, p, u0, t, method="DOP853", **TIGHT) for p in P[:20]]
    # solve_many passes read-only (broadcast) arrays, another numba specialisation than the
    # writable ones above: its first call compiles again unless an earlier solve (part 1's,
    # on the catalogue's read-only p_true) did; time that call apart and the paths after it
    t0 = time.perf_counter()
    solver.solve_many(P[:2], u0, t, max_steps=steps, **tenth)
    rows = [{"path": "(first solve_many call, 2 draws)", "seconds": time.perf_counter() - t0}]
    for label, fn in paths.items():
        t0 = time.perf_counter()
        Us, ok = fn()
        total = time.perf_counter() - t0
        err = max(_error(U, ref) for U, ref in zip(Us, refs, strict=False))
        rows.append({"path": label, "seconds": total, "ok": ok, "draws": n_draws, "err": err})
    return rows


def _old_loop(model, P, u0, t):
    out, ok = [], 0
    for p in P:
        try:
            out.append(_old_lsoda(model, p, u0, t, **PREDICTIVE))
            ok += 1
        except SimulationError:
            out.append(np.full((t.size, model.n_states), np.nan))
    return out, ok


def _print_predictive(rows: list[dict]) -> None:
    first, rows = rows[0], rows[1:]
    base = rows[0]["seconds"]
    head = (
        f"{'path':<34} {'total s':>9} {'ms/draw':>9} {'ok':>5} {'max err':>9} {'x solve_many':>12}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['path']:<34} {r['seconds']:>9.3f} {1e3 * r['seconds'] / r['draws']:>9.2f} "
            f"{r['ok']:>5} {r['err']:>9.1e} {r['seconds'] / base:>12.1f}"
        )
    print(
        f"{first['path']}: {first['seconds']:.2f} s (it compiles for read-only arrays unless an "
        "earlier solve did)"
    )


def pymc_predictive(n_draws: int, seed: int) -> list[dict]:
    """Part 3: ``pm.sample_posterior_predictive`` on a fake posterior of ``n_draws`` draws."""
    import arviz as az
    import pymc as pm

    prob = pw.get_problem("fitzhugh_nagumo")
    data = prob.simulate(noise_ratio=0.1, subsample=2, seed=seed)  # 513 points
    P = _draws(prob, n_draws, seed)
    coords = {"param": list(prob.model.params)}
    rows = []
    for label, solver in (("default (compiled)", None), ('solver={"method": "Radau"}', "Radau")):
        with pm.Model(coords=coords) as model:
            p = pm.Normal("p", 0, 10, dims="param")
            pw.WeakODELikelihood(
                "U",
                ode=prob.model,
                params=p,
                t=data.t,
                observed=data.U,
                u0=prob.u0,
                solver=None if solver is None else {"method": solver},
            )
        seconds = {}
        for n in (1, 1, n_draws) if not rows else (1, n_draws):  # a warm-up call first
            post = az.from_dict(
                {"posterior": {"p": P[None, :n]}}, coords=coords, dims={"p": ["param"]}
            )
            t0 = time.perf_counter()
            with model, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pp = pm.sample_posterior_predictive(post, progressbar=False, random_seed=seed)
            seconds[n] = time.perf_counter() - t0
        n_nan = int(np.isnan(pp.posterior_predictive["U"].values).any(axis=(-1, -2)).sum())
        per_draw = (seconds[n_draws] - seconds[1]) / (n_draws - 1)
        rows.append(
            {
                "solver": label,
                "seconds_1": seconds[1],
                "seconds_n": seconds[n_draws],
                "draws": n_draws,
                "ms_per_draw": 1e3 * per_draw,
                "nan_draws": n_nan,
            }
        )
    return rows


def _print_pymc(rows: list[dict]) -> None:
    n = rows[0]["draws"]
    head = f"{'solver':<28} {'1 draw s':>9} {f'{n} draws s':>11} {'ms/draw':>9} {'NaN draws':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['solver']:<28} {r['seconds_1']:>9.2f} {r['seconds_n']:>11.2f} "
            f"{r['ms_per_draw']:>9.2f} {r['nan_draws']:>9}"
        )


def _ivp_dosed(model, p, u0, t, inputs):
    """What ``pw.solve`` ran for dosed models before: solve_ivp's LSODA, restarting at the
    breakpoints and jumping at the boluses, at the exact stage's tolerances."""
    from pymc_wendy.bayes.forward import SOLVER_OPTIONS
    from pymc_wendy.model.simulate import vector_field

    rhs, jac, breaks = vector_field(model, p, inputs, t)
    jumps = None if breaks.jump is None else (breaks.jump_times, lambda s, y: y + breaks.jump(s, y))
    return integrate(
        rhs, np.asarray(u0, dtype=float), t, method="LSODA", rtol=SOLVER_OPTIONS["rtol"],
        atol=SOLVER_OPTIONS["atol"], max_nfev=None, jac=jac, breaks=breaks.times, jumps=jumps,
    )  # fmt: skip


def dosed(repeats: int) -> list[dict]:
    """The exact stage's solves of dosed models: ``ForwardSolver`` (the compiled piecewise
    route) against the same solver forced onto the ``solve_ivp`` route, values and
    sensitivities, at the exact stage's tolerances; error relative to max |u|."""
    from pymc_wendy.bayes.forward import SOLVER_OPTIONS
    from pymc_wendy.model.inputs import as_inputs
    from pymc_wendy.model.sensitivities import ForwardSolver

    rows = []
    for name in ("pk_iv_doses", "pk_oral_doses", "pk_two_compartment"):
        prob = pw.get_problem(name)
        t = np.linspace(*prob.t_span, prob.n_points)
        inputs = as_inputs(prob.model.inputs, prob.inputs, t)
        new = ForwardSolver(prob.model, t, inputs, **SOLVER_OPTIONS)
        old = ForwardSolver(prob.model, t, inputs, **SOLVER_OPTIONS)
        old._solver, old.compiled = None, False
        args = (prob.p_true, prob.u0)
        calls = {
            "solve": (partial(new.solve, *args), partial(_ivp_dosed, prob.model, *args, t, inputs)),
            "sensitivities": (partial(new.sensitivities, *args), partial(old.sensitivities, *args)),
        }
        row = {"problem": name, "points": t.size}
        for what, (piecewise, ivp) in calls.items():
            row[f"{what}_piecewise_ms"] = 1e3 * _median_time(piecewise, repeats)
            row[f"{what}_ivp_ms"] = 1e3 * _median_time(ivp, repeats)
        row["error"] = _error(new.solve(*args), _ivp_dosed(prob.model, *args, t, inputs))
        rows.append(row)
        speed = {w: row[f"{w}_ivp_ms"] / row[f"{w}_piecewise_ms"] for w in calls}
        print(
            f"{name:20s} {t.size:5d}  values {row['solve_piecewise_ms']:7.2f} / "
            f"{row['solve_ivp_ms']:7.1f} ms ({speed['solve']:4.0f}x)  sensitivities "
            f"{row['sensitivities_piecewise_ms']:7.2f} / {row['sensitivities_ivp_ms']:7.1f} ms "
            f"({speed['sensitivities']:4.0f}x)  error {row['error']:.1e}"
        )
    return rows


def _sensitivity_start(model, u0) -> np.ndarray:
    D, P = model.n_states, model.n_params + model.n_states
    y0 = np.zeros(D + D * P)
    y0[:D] = u0
    y0[D:].reshape(D, P)[:, model.n_params :] = np.eye(D)
    return y0


def explicit_vs_lsoda(n_points: int, repeats: int) -> list[dict]:
    """Part 5: the explicit pair against LSODA on the sensitivity system."""
    rtol, atol, steps = 1e-8, 1e-10, 5000
    rows = []
    print(f"{'problem':<21} {'points':>6} {'status':>6} {'explicit ms':>11} {'LSODA ms':>9} "
          f"{'ratio':>6} {'difference':>10}")  # fmt: skip
    for name, model, p, u0, span, _ in _cases(None):
        solver = compiled_solver(model)
        p, y0 = np.asarray(p, float), _sensitivity_start(model, np.asarray(u0, float))
        for n in (21, n_points):
            t = np.linspace(*span, n)
            total = 20 * n + 5000
            explicit = partial(solver.explicit, y0, t, p, rtol, atol, steps, total, True)
            lsoda = partial(
                solver._odeint, solver.sensitivity_rhs, y0, t, p, None, rtol, atol, steps
            )
            Y, status = explicit()
            ref = lsoda()
            diff = float(np.max(np.abs(Y - ref)) / np.max(np.abs(ref))) if status == 0 else np.nan
            row = {
                "problem": name, "points": n, "status": int(status), "difference": diff,
                "explicit_ms": 1e3 * _median_time(explicit, repeats),
                "lsoda_ms": 1e3 * _median_time(lsoda, repeats),
            }  # fmt: skip
            rows.append(row)
            print(
                f"{name:<21} {n:>6} {status:>6} {row['explicit_ms']:>11.3f} "
                f"{row['lsoda_ms']:>9.3f} {row['lsoda_ms'] / row['explicit_ms']:>6.1f} "
                f"{diff:>10.1e}"
            )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=513)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--problems", default=None, help="comma-separated (and/or robertson)")
    parser.add_argument("--skip-pymc", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    names = args.problems.split(",") if args.problems else None
    print(f"1. forward solves, {args.points} points, rtol 1e-10, atol 1e-12 (ms; error / max|u|)")
    _print_catalogue_header()
    results = {"catalogue": catalogue(names, args.points, args.repeats)}
    print(f"\n2. {args.draws} FitzHugh-Nagumo trajectories, {args.points} points, rtol 1e-7")
    results["predictive"] = predictive(args.points, args.draws, args.seed)
    _print_predictive(results["predictive"])
    print("\n4. dosed models, the exact stage's solves: compiled piecewise / solve_ivp")
    results["dosed"] = dosed(args.repeats)
    print("\n5. sensitivity solves: the explicit pair (DOPRI5) / LSODA, rtol 1e-8")
    results["explicit"] = explicit_vs_lsoda(args.points, args.repeats)
    if not args.skip_pymc:
        print("\n3. pm.sample_posterior_predictive, FitzHugh-Nagumo, 513 points")
        results["pymc"] = pymc_predictive(args.draws, args.seed)
        _print_pymc(results["pymc"])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"settings": {k: v for k, v in vars(args).items() if k != "json"}, **results}
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
