"""Time the weak negative log-likelihood and its gradient against the dense linear-algebra floor.

The floor, measured in the same run on the same matrix sizes, is one Cholesky factorisation of a
KD x KD matrix plus one (KD x D(M+1)) by (D(M+1) x KD) matrix product: the least any evaluation
of S(p) = L Sigma L^T followed by a factorisation can cost.

Rows ``numpy`` time :class:`WeakLikelihood` (the reference implementation); rows ``numba`` time
the compiled kernels the pytensor Op runs (``pymc_wendy.backends.numba_kernels``), with the
noise fixed or inferred (the Op's second input). The last rows time the operator path (models
of order 2 with a known input): head acceleration, and two coupled second-order states with a
parameter-dependent derivative coefficient (``D = 2``).

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/likelihood_speed.py  [--repeats N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.linalg as sla

import pymc_wendy as pw
from pymc_wendy.backends import kernel_cache
from pymc_wendy.model.inputs import Input
from pymc_wendy.problems import get_problem
from pymc_wendy.weak.likelihood import WeakLikelihood

CASES = [
    ("fitzhugh_nagumo", 513, 0.10),
    ("hindmarsh_rose", 1025, 0.02),
]


def _best(fn, repeats: int) -> float:
    """Best of ``repeats`` batch means; batches last >= 0.2 s to average out scheduler ticks."""
    fn()  # warm-up: code paths, caches, BLAS threads
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    per_batch = max(1, int(0.2 / once))
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        best = min(best, (time.perf_counter() - t0) / per_batch)
    return float(best)


def _floor(n: int, q: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, q))
    B = np.ascontiguousarray(A.T.copy())  # a separate operand: a general matrix product
    S = A @ A.T + n * np.eye(n)

    def run():
        A @ B
        sla.cholesky(S, lower=True, check_finite=False)

    return _best(run, repeats)


def _coupled(t, u, p, w):
    x, dx, y, dy = u
    return [
        -(p[0] ** 2) * x - p[1] * p[0] * dx + p[2] * w[0] + 0.2 * (y - x),
        -p[3] * y - 0.3 * dy + 0.1 * dx + 0.05 * x**2,
    ]


def _operator_cases(n_points: int = 513):
    """``(name, likelihood, point)`` of the operator path."""
    head = get_problem("head_acceleration")
    d = head.simulate(n_points=n_points, noise_ratio=0.05, seed=1)
    yield (
        "head_acceleration",
        WeakLikelihood(head.model, d.t, d.U, inputs=d.inputs, linear="general"),
        head.p_true * 1.03,
    )
    model = pw.ODEModel(_coupled, ["x", "y"], ["w", "z", "g", "k"], order=2, inputs=["u"])
    pulse = Input.pulse(14.0, 15.0)
    p = np.array([0.3, 0.2, 0.5, 0.15])
    t = np.linspace(0.0, 60.0, n_points)
    X = pw.solve(model, p, [0.1, 0.0, -0.1, 0.05], t, inputs={"u": pulse})[:, [0, 2]]
    U = X + 0.01 * np.random.default_rng(3).standard_normal(X.shape)
    lik = WeakLikelihood(model, t, U, inputs={"u": pulse}, sigma=[0.01, 0.01])
    yield "coupled_2nd_order", lik, p * 1.03


def _print_compiled(lik, p, path: str, floor: float, repeats: int) -> None:
    for infer in (False, True):
        kv = kernel_cache.make_kernel(lik, infer_sigma=infer, want_grad=False)
        kvg = kernel_cache.make_kernel(lik, infer_sigma=infer, want_grad=True)
        s2 = np.asarray(lik.sigma, dtype=float) ** 2
        t_v = _best(lambda k=kv, p=p, s2=s2: k(p, s2, 0.0), repeats)
        t_vg = _best(lambda k=kvg, p=p, s2=s2: k(p, s2, 0.0), repeats)
        label = f"numba {path}" + (", sigma in" if infer else "")
        print(
            f"{'':<16} {'':>5} {'':>4} {'':>5} {label:<22} {1e3 * t_v:>9.2f} "
            f"{1e3 * t_vg:>11.2f} {'':>8} {1e3 * floor:>9.2f} {t_vg / floor:>8.2f} "
            f"{t_vg / t_v:>8.2f}"
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    header = (
        f"{'problem':<16} {'M+1':>5} {'K':>4} {'KD':>5} {'path':<22} {'value ms':>9} "
        f"{'val+grad ms':>11} {'hess ms':>8} {'floor ms':>9} {'vg/floor':>8} {'vg/value':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, n_points, nr in CASES:
        prob = get_problem(name)
        data = prob.simulate(n_points=n_points, noise_ratio=nr, seed=0)
        base = WeakLikelihood(prob.model, data.t, data.U)
        K, D = base.K, prob.model.n_states
        n, q = K * D, D * n_points
        floor = _floor(n, q, args.repeats)
        p = data.p_true * 1.01
        for path in ("general", "fast"):
            lik = WeakLikelihood(
                prob.model,
                data.t,
                data.U,
                test_functions=base.test_functions,
                linear=path,
                max_precompute_bytes=2**31,
            )
            t_setup = time.perf_counter()
            lik.nll(p)  # builds the linear-in-parameters coefficients on the fast path
            t_setup = time.perf_counter() - t_setup
            t_v = _best(lambda lik=lik, p=p: lik.nll(p), args.repeats)
            t_vg = _best(lambda lik=lik, p=p: lik.nll_grad(p), args.repeats)
            t_h = (
                _best(lambda lik=lik, p=p: lik.hessian(p), max(2, args.repeats // 2))
                if path == "general"
                else float("nan")
            )
            print(
                f"{name:<16} {n_points:>5} {K:>4} {n:>5} {'numpy ' + path:<22} {1e3 * t_v:>9.2f} "
                f"{1e3 * t_vg:>11.2f} {1e3 * t_h:>8.1f} {1e3 * floor:>9.2f} {t_vg / floor:>8.2f} "
                f"{t_vg / t_v:>8.2f}"
            )
            if path == "fast":
                print(f"{'':<16} (fast path one-off set-up {1e3 * t_setup:.0f} ms)")
            _print_compiled(lik, p, path, floor, args.repeats)
    for name, lik, p in _operator_cases():
        D, n_points = lik.model.n_states, lik.t.size
        floor = _floor(lik.K * D, D * n_points, args.repeats)
        t_v = _best(lambda lik=lik, p=p: lik.nll(p), args.repeats)
        t_vg = _best(lambda lik=lik, p=p: lik.nll_grad(p), args.repeats)
        print(
            f"{name[:16]:<16} {n_points:>5} {lik.K:>4} {lik.K * D:>5} {'numpy operator':<22} "
            f"{1e3 * t_v:>9.2f} {1e3 * t_vg:>11.2f} {'':>8} {1e3 * floor:>9.2f} "
            f"{t_vg / floor:>8.2f} {t_vg / t_v:>8.2f}"
        )
        _print_compiled(lik, p, "operator", floor, args.repeats)


if __name__ == "__main__":
    main()
