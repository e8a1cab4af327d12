"""Compilation per data set: ``pw.sample`` on several data sets of one model, in one process.

The compiled likelihood is built once per model structure (``pymc_wendy.backends.numba_kernels``: a
C-callable kernel reading the data from a runtime buffer) and the Op's numba functions call
it through its address. This script measures what that buys where it matters, a study that
samples many data sets of one model (coverage, ``benchmarks/higher_order.py``):

* ``reuse``: the library as it is; the first data set compiles the kernel, later ones only
  the small callers and the rest of the graph.
* ``reference``: the kernel caches (in memory and on disk: a fresh cache directory) are
  emptied before every data set, so every data set compiles its kernel again (what a new
  likelihood cost before the kernel was shared, and what a new process cost before the
  kernel was cached on disk).

Printed per case: the wall time of ``pw.sample`` (WENDy-MLE, posterior mode and Hessian,
compilation, sampling; 2 chains x (300 + 300) on one core) for the first data set and the
median over the later ones, for both variants, and their ratio.

Run:  python benchmarks/compile_reuse.py [--datasets 4] [--cases head_acceleration,...]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_wendy as pw  # noqa: E402
from pymc_wendy.backends import kernel_cache  # noqa: E402
from pymc_wendy.studies.coverage import default_priors  # noqa: E402


def _forget_kernels() -> None:
    kernel_cache._KERNELS.clear()
    for name in [
        m for m in sys.modules if m.startswith("pymc_wendy._generated.pymc_wendy_kernel_")
    ]:
        del sys.modules[name]
    os.environ["PYMC_WENDY_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile_reuse_")


#: case: (problem, points, noise ratio, WeakODELikelihood's ``linear``); one per compiled path
CASES = {
    "head_acceleration": ("head_acceleration", 51, 0.05, "auto"),  # linear path, order 2, input
    "head_operator": ("head_acceleration", 51, 0.05, "general"),  # operator path
    "lotka_volterra": ("lotka_volterra", 129, 0.05, "auto"),  # linear path
    "lotka_volterra_general": ("lotka_volterra", 129, 0.05, "general"),  # general path
}


def _one(prob: pw.Problem, n: int, noise: float, linear: str, seed: int) -> float:
    data = prob.simulate(n_points=n, noise_ratio=noise, seed=seed)
    start = time.perf_counter()
    with pm.Model(coords={"param": list(prob.params)}) as model:
        p = default_priors(prob)("p")
        pw.WeakODELikelihood(
            "U",
            ode=prob.model,
            params=p,
            t=data.t,
            observed=data.U,
            inputs=data.inputs,
            linear=linear,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pw.sample(
            model=model, tune=300, draws=300, chains=2, cores=1, progressbar=False,
            random_seed=seed,
        )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=4)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    print(
        f"{'case':24s} {'variant':10s} {'first s':>8s} {'later s (median)':>17s}  "
        "later: reference / reuse"
    )
    for name in args.cases.split(","):
        problem, n, noise, linear = CASES[name]
        prob = pw.get_problem(problem)
        rows = {}
        for variant in ("reuse", "reference"):
            times = []
            for seed in range(args.datasets):
                if variant == "reference":
                    _forget_kernels()
                times.append(_one(prob, n, noise, linear, 100 * (variant == "reference") + seed))
            rows[variant] = times
            print(
                f"{name:24s} {variant:10s} {times[0]:8.2f} {np.median(times[1:]):17.2f}",
                flush=True,
            )
        ratio = np.median(rows["reference"][1:]) / np.median(rows["reuse"][1:])
        print(f"{name:24s} {'':10s} {'':8s} {'':17s}  {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    main()
