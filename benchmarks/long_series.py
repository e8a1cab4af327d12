"""Long series: WENDy-MLE with local test functions (banded covariance) against the default.

FitzHugh-Nagumo, 10 % additive noise, M+1 = 1025, 4097, 16385, 100 000 points (``--sizes``).
For each size and each path (``local``: ``test_functions="local"``; ``svd``: the SVD
construction), the wall time of building the likelihood (test functions, noise estimate),
of one value + gradient at the truth (median of ``--repeats``), and of ``pw.fit`` (the
whole WENDy-MLE, likelihood construction and the Hessian covariance at the estimate
included), the number of test functions ``K``, the band share of ``S`` and the relative
coefficient error. The SVD path is skipped once its predicted fit time (the last
measured one times the cube of the growth in ``M``: the SVD of the stacked bumps) passes
``--limit`` seconds; the skip is printed.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/long_series.py [--sizes 1025 4097 ...]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

import pymc_wendy as pw
from pymc_wendy.weak.likelihood import WeakLikelihood


def _median(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run_one(prob, data, spec, repeats: int) -> dict:
    p = np.asarray(prob.p_true, dtype=float)
    t0 = time.perf_counter()
    lik = WeakLikelihood(prob.model, data.t, data.U, test_functions=spec)
    build = time.perf_counter() - t0
    vg = _median(lambda: lik.nll_grad(p), repeats)
    t0 = time.perf_counter()
    res = pw.fit(prob.model, data.t, data.U, test_functions=spec)
    se = res.stderr  # the Hessian covariance, as a user would ask for it
    fit = time.perf_counter() - t0
    rows = getattr(lik.test_functions, "windows", None)
    share = rows.band_fraction(data.U.shape[1]) if rows is not None else 1.0
    return {
        "K": lik.K,
        "share": share,
        "build": build,
        "vg": vg,
        "fit": fit,
        "err": float(np.linalg.norm(res.x - p) / np.linalg.norm(p)),
        "ok": bool(res.success and np.all(np.isfinite(se))),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1025, 4097, 16385, 100_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=float, default=60.0)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    prob = pw.get_problem("fitzhugh_nagumo")
    print(f"load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    head = (
        f"{'M+1':>7} {'path':>8} {'K':>5} {'band':>6} {'build s':>8} {'v+g s':>8} "
        f"{'fit s':>8} {'err':>7} {'ok':>3}"
    )
    print(head)
    print("-" * len(head))
    last_default: tuple[int, float] | None = None
    for n in args.sizes:
        data = prob.simulate(n_points=n, noise_ratio=0.1, seed=1)
        for label, spec in (("local", "local"), ("svd", {})):
            if label == "svd" and last_default is not None:
                predicted = last_default[1] * (n / last_default[0]) ** 3
                if predicted > args.limit:
                    print(
                        f"{n:>7} {label:>8}   skipped: predicted {predicted:.0f} s"
                        f" > {args.limit:g} s"
                    )
                    continue
            r = run_one(prob, data, spec, args.repeats)
            if label == "svd":
                last_default = (n, r["fit"])
            print(
                f"{n:>7} {label:>8} {r['K']:>5} {r['share']:>6.3f} {r['build']:>8.2f} "
                f"{r['vg']:>8.3f} {r['fit']:>8.2f} {r['err']:>7.4f} {'y' if r['ok'] else 'n':>3}",
                flush=True,
            )
    fixed_radius(prob, args.repeats)
    print(f"load: {os.getloadavg()[0]:.1f}")


def fixed_radius(prob, repeats: int, points: int = 16, stride: int = 8) -> None:
    """Value + gradient through ``WeakLikelihood`` at a fixed radius in grid points: the
    cost per time point should stay flat (linear in ``M``)."""
    print(f"\nValue + gradient, local test functions of radius {points} points, stride {stride}")
    head = f"{'M+1':>7} {'K':>6} {'band':>6} {'v+g ms':>8} {'us/point':>9}"
    print(head)
    print("-" * len(head))
    p = np.asarray(prob.p_true, dtype=float)
    for n in (257, 1025, 4097, 16385, 100_000):
        data = prob.simulate(n_points=n, noise_ratio=0.1, seed=1)
        dt = float(data.t[1] - data.t[0])
        spec = {"local": True, "radius": points * dt, "stride": stride}
        lik = WeakLikelihood(prob.model, data.t, data.U, test_functions=spec)
        vg = _median(lambda lik=lik: lik.nll_grad(p), repeats)
        share = lik.test_functions.windows.band_fraction(2)
        print(f"{n:>7} {lik.K:>6} {share:>6.3f} {1e3 * vg:>8.2f} {1e6 * vg / n:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
