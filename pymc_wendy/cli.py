"""Command-line entry point: ``pymc-wendy demo`` fits an embedded default problem."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from scipy import optimize, stats

from pymc_wendy.likelihood import WeakLikelihood
from pymc_wendy.problems import get_problem, list_problems


def _weak_least_squares_start(lik: WeakLikelihood, p_guess: np.ndarray) -> np.ndarray:
    """Gauss-Newton steps on ||r(p)||^2 from a guess (one step is exact when f is linear in p)."""
    p = p_guess.copy()
    for _ in range(1 if lik.model.is_linear_in_params else 20):
        step = np.linalg.lstsq(lik.dr_dp(p), -lik.residual(p), rcond=None)[0]
        p = p + step
        if np.linalg.norm(step) < 1e-10 * np.linalg.norm(p):
            break
    return p


def demo(
    problem: str = "fitzhugh_nagumo", n_points: int = 513, noise_ratio: float = 0.1, seed: int = 0
) -> int:
    """Simulate data, compute the WENDy-MLE with Wald intervals and compare with the truth."""
    prob = get_problem(problem)
    data = prob.simulate(n_points=n_points, noise_ratio=noise_ratio, seed=seed)
    print(f"problem: {prob.name} ({prob.reference})")
    print(
        f"data: {data.t.size} points on [{data.t[0]:g}, {data.t[-1]:g}], "
        f"{noise_ratio:.0%} {data.noise} noise, seed {seed}"
    )
    t0 = time.perf_counter()
    lik = WeakLikelihood(prob.model, data.t, data.U, noise=data.noise)
    t_setup = time.perf_counter() - t0
    tf = lik.test_functions
    print(
        f"test functions: K = {lik.K}, radii = {np.array2string(tf.radii, precision=3)} "
        f"(set-up {t_setup:.2f} s)\n"
        f"noise estimate sigma = {np.array2string(lik.sigma, precision=4)} "
        f"(true {np.array2string(data.sigma, precision=4)})"
    )
    t0 = time.perf_counter()
    start = _weak_least_squares_start(lik, np.ones_like(data.p_true))
    res = optimize.minimize(lik.nll_grad, start, jac=True, hess=lik.hessian, method="trust-exact")
    elapsed = time.perf_counter() - t0
    cov = lik.parameter_covariance(res.x, method="sandwich")
    se = np.sqrt(np.diag(cov))
    z = stats.norm.ppf(0.975)
    print(f"WENDy-MLE: {res.message} ({res.nit} iterations, {elapsed:.2f} s), nll = {res.fun:.3f}")
    print(
        f"{'param':>8} {'true':>10} {'estimate':>10} {'std.err':>10} {'95% CI':>24} {'covers':>7}"
    )
    covered = 0
    for name, truth, est, s in zip(prob.model.params, data.p_true, res.x, se, strict=True):
        lo, hi = est - z * s, est + z * s
        ok = lo <= truth <= hi
        covered += ok
        print(
            f"{name:>8} {truth:>10.4g} {est:>10.4g} {s:>10.3g} [{lo:>10.4g}, {hi:>10.4g}] "
            f"{'yes' if ok else 'no':>7}"
        )
    err = np.linalg.norm(res.x - data.p_true) / np.linalg.norm(data.p_true)
    print(f"relative coefficient error {err:.3%}; {covered}/{len(se)} intervals cover the truth")
    return 0 if res.success else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pymc-wendy", description="Weak-form ODE inference (WENDy) for PyMC"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="fit an embedded benchmark problem to simulated data")
    d.add_argument("--problem", default="fitzhugh_nagumo", choices=list_problems())
    d.add_argument("--points", type=int, default=513)
    d.add_argument("--noise", type=float, default=0.1, help="noise ratio (default 0.1)")
    d.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.problem, args.points, args.noise, args.seed)
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
