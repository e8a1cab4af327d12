"""Banded against dense weak covariance: value + gradient time as the series grows.

Two tables.

1. *Catalogue*: for every problem of ``pw.list_problems()`` at its default size, the
   half-bandwidth ``w`` (in test-function index) and the share of ``S`` inside the band, for the
   default test functions (SVD-reduced: every row spans the grid, so ``w = K - 1``) and for
   un-reduced bumps at the default smallest radius with centres every half radius.
2. *Scaling*: FitzHugh-Nagumo (10 % noise) at 257 ... 16385 points with bumps of a fixed radius
   (``--fixed points``: ``--radius`` grid points at every size, so ``K`` grows with ``M`` and
   ``w`` stays put; ``--fixed time``: the radius in time units it has at 513 points, so ``w``
   grows too), centres every ``--stride`` points. Median wall time of value + gradient
   (``kernels.evaluate`` + ``kernels.gradient_parts`` against ``banded.evaluate`` +
   ``banded.gradient_parts``), their ratio, and the largest relative difference of the value
   and gradient where both run. Column ``numba`` is the compiled dense kernel the Op runs
   (``kernel_cache.make_kernel``, general path, noise fixed) on a ``WeakLikelihood`` with
   the same test functions, for scale; column ``nb band`` is the compiled banded kernel
   the Op runs with local test functions (``pymc_wendy/backends/numba_banded.py``; bumps of
   the same radius and stride from ``build_local_test_functions``), and ``n/nb`` the ratio
   of the two compiled kernels. A dense path is skipped once its predicted time (the
   last measured one times the cube of the growth in ``K``) passes ``--dense-limit`` seconds;
   the banded one once its neighbour stacks (``LocalRows.neighbours``) would pass 2 GB.

The bumps are built as windows (:meth:`LocalRows.from_windows`), never as a ``K x (M+1)``
matrix, except to feed the dense kernels.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/banded_scaling.py [--repeats N] [--fixed time]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings

import numpy as np

from pymc_wendy.backends import kernel_cache
from pymc_wendy.problems import get_problem, list_problems
from pymc_wendy.weak import banded, kernels
from pymc_wendy.weak.likelihood import WeakLikelihood
from pymc_wendy.weak.test_functions import bump, bump_derivative

SIZES = (257, 513, 1025, 2049, 4097, 8193, 16385)
RIDGE = 1e-10
MAX_STACK_BYTES = 2 * 2**30


def bump_windows(t: np.ndarray, r: int, stride: int, eta: float = 9.0) -> banded.LocalRows:
    """Unit-norm trapezoid-weighted bumps of radius ``r`` points on a uniform grid, centred
    every ``stride`` points with the support inside the grid (what ``Grid.rows`` gives for
    these centres), as windows of ``2 r + 1`` points."""
    dt = float(t[1] - t[0])
    s = np.arange(-r, r + 1) / r
    row = bump(s, eta) * dt  # the end points of the window are the support's: zero weight
    scale = 1.0 / np.linalg.norm(row)
    drow = bump_derivative(s, eta) * dt * scale / (r * dt)
    centres = np.arange(r, t.size - r, stride)
    K = centres.size
    return banded.LocalRows.from_windows(
        centres - r, np.tile(row * scale, (K, 1)), np.tile(drow, (K, 1)), t.size
    )


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up (numba compilation, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def catalogue() -> None:
    print("Catalogue, default sizes: bandwidth of S (w in test functions, band share of KD x KD)")
    head = (
        f"{'problem':<20} {'M+1':>5} {'D':>2} | {'K':>4} {'w':>4} {'band':>6} | "
        f"{'r pts':>5} {'K loc':>5} {'w':>3} {'band':>6}"
    )
    print(head)
    print("-" * len(head))
    for name in list_problems():
        prob = dataclasses.replace(get_problem(name), observed=None)  # every state measured
        data = prob.simulate(noise_ratio=0.1, seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lik = WeakLikelihood(prob.model, data.t, data.U, noise=prob.noise, inputs=prob.inputs)
        D = lik.X.shape[1]
        rows = banded.local_rows(lik.phi, lik.dphi)
        # un-reduced bumps at the smallest default radius, centres every half radius
        dt = float(np.median(np.diff(data.t)))
        r = max(2, round(lik.test_functions.min_radius / dt))
        loc = bump_windows(data.t, r, max(1, r // 2))
        print(
            f"{name:<20} {data.t.size:>5} {D:>2} | {rows.K:>4} {rows.w:>4} "
            f"{rows.band_fraction(D):>6.3f} | {r:>5} {loc.K:>5} {loc.w:>3} "
            f"{loc.band_fraction(D):>6.3f}"
        )


def _inputs(n_points: int, r: int, stride: int):
    prob = get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=n_points, noise_ratio=0.1, seed=0)
    rows = bump_windows(data.t, r, stride)
    p = data.p_true * 1.01
    model, t, U = prob.model, data.t, data.U
    F, Ju, Jp, Jup = (model.evaluate(w, t, U, p) for w in ("f", "f_u", "f_p", "f_up"))
    b = np.empty((rows.K, U.shape[1]))
    b[rows.order] = np.einsum("pt,ptd->pd", rows.dphi, rows.gather(U))
    s2 = data.sigma**2
    # the likelihood's relative ridge: ridge * (mean squared row norm of dPhi) * min variance
    diag = RIDGE * float(np.mean(np.sum(rows.dphi**2, axis=1))) * float(np.min(s2))
    return rows, (b, F, Ju, s2, RIDGE, diag), (Jp, Jup), (prob, data, p)


def _rel(x, y) -> float:
    return float(np.max(np.abs(np.asarray(x) - y)) / max(np.max(np.abs(y)), 1e-300))


class _Dense:
    """A dense timing that stops once its predicted cost passes the limit."""

    def __init__(self, limit: float):
        self.limit, self.last = limit, None  # last: (K, seconds)

    def predicted(self, K: int) -> float:
        return 0.0 if self.last is None else self.last[1] * (K / self.last[0]) ** 3

    def allowed(self, K: int) -> bool:
        return self.predicted(K) <= self.limit

    def time(self, K: int, fn, repeats: int) -> float:
        seconds = _median_time(fn, repeats if self.predicted(K) < 1 else 1)
        self.last = (K, seconds)
        return seconds


def _numba_kernel(rows: banded.LocalRows, problem):
    prob, data, p = problem
    phi, dphi = rows.to_dense()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lik = WeakLikelihood(
            prob.model, data.t, data.U, sigma=data.sigma, test_functions=(phi, dphi),
            linear="general",
        )  # fmt: skip
    kernel = kernel_cache.make_kernel(lik, infer_sigma=False, want_grad=True)
    s2 = lik.sigma**2
    return lambda: kernel(p, s2, 0.0)


def _numba_banded_kernel(r: int, stride: int, problem):
    prob, data, p = problem
    dt = float(data.t[1] - data.t[0])
    lik = WeakLikelihood(
        prob.model, data.t, data.U, sigma=data.sigma, linear="general",
        test_functions={"local": True, "radius": r * dt, "stride": stride},
    )  # fmt: skip
    assert lik.banded
    kernel = kernel_cache.make_kernel(lik, infer_sigma=False, want_grad=True)
    s2 = lik.sigma**2
    return lambda: kernel(p, s2, 0.0)


def _row(args, M1: int, dense: _Dense, compiled: _Dense) -> str:
    r = args.radius if args.fixed == "points" else round(args.radius * (M1 - 1) / 512)
    rows, ev_args, g_args, problem = _inputs(M1, r, args.stride)
    D = ev_args[1].shape[1]

    def run_banded():
        ev = banded.evaluate(None, None, *ev_args, rows=rows)
        return ev, banded.gradient_parts(ev, None, *g_args, ev_args[4])

    stack = 16 * rows.K * rows.width * (2 * rows.w + 1)
    t_band = _median_time(run_banded, args.repeats) if stack <= MAX_STACK_BYTES else None
    phi, dphi = rows.to_dense() if dense.allowed(rows.K) else (None, None)

    def run_dense():
        ev = kernels.evaluate(phi, dphi, *ev_args)
        return ev, kernels.gradient_parts(ev, phi, *g_args, ev_args[4])

    t_dense = dense.time(rows.K, run_dense, args.repeats) if phi is not None else None
    t_nb = _median_time(_numba_banded_kernel(r, args.stride, problem), args.repeats)
    t_numba = None
    if compiled.allowed(rows.K):
        t_numba = compiled.time(rows.K, _numba_kernel(rows, problem), args.repeats)
    diff = "-"
    if t_dense is not None and t_band is not None:
        (evd, gd), (evb, gb) = run_dense(), run_banded()
        diff = f"{max(abs(evd.nll - evb.nll) / abs(evd.nll), _rel(gb[0], gd[0])):.1e}"

    def ms(x):
        return "skipped" if x is None else f"{1e3 * x:.1f}"

    def ratio(x):
        return "-" if x is None or t_band is None else f"{x / t_band:.1f}"

    return (
        f"{M1:>6} {r:>5} {rows.K:>5} {rows.w:>4} {rows.bandwidth(D):>4} "
        f"{rows.band_fraction(D):>6.3f} {ms(t_dense):>9} {ms(t_numba):>9} {ms(t_band):>9} "
        f"{1e3 * t_nb:>9.2f} {ratio(t_dense):>7} {ratio(t_numba):>7} "
        f"{'-' if t_numba is None else f'{t_numba / t_nb:.0f}':>7} {diff:>8}"
    )


def scaling(args) -> None:
    print(
        f"\nFitzHugh-Nagumo, bumps radius {args.radius} points at 513 "
        f"(fixed in {args.fixed}), centres every {args.stride} points; median of "
        f"{args.repeats} value+gradient calls"
    )
    head = (
        f"{'M+1':>6} {'r pts':>5} {'K':>5} {'w':>4} {'b':>4} {'band':>6} {'dense ms':>9} "
        f"{'numba ms':>9} {'banded ms':>9} {'nb band':>9} {'d/b':>7} {'n/b':>7} {'n/nb':>7} "
        f"{'rel diff':>8}"
    )
    print(head)
    print("-" * len(head))
    dense, compiled = _Dense(args.dense_limit), _Dense(args.dense_limit)
    for M1 in SIZES:
        print(_row(args, M1, dense, compiled), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--radius", type=int, default=8, help="bump radius in points at 513")
    parser.add_argument("--stride", type=int, default=4, help="centre spacing in points")
    parser.add_argument("--fixed", choices=("points", "time"), default="points")
    parser.add_argument("--dense-limit", type=float, default=10.0, help="seconds per call")
    parser.add_argument("--no-catalogue", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_catalogue:
        catalogue()
    scaling(args)


if __name__ == "__main__":
    main()
