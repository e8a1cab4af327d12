"""Compilation per model with a cold cache: what a fresh install (or CI) pays per model.

For each problem in turn, a new Python process builds the problem's compiled solver and runs
one sensitivity solve (``CompiledSolver.sensitivities``, what the exact stage and the forward
check call first), or with ``--part kernel`` builds the compiled weak-likelihood kernel
(general path, noise inferred, value and gradient: what ``pw.sample`` compiles first) and
evaluates it once, in a fresh cache directory shared by the processes of the run
(``NUMBA_CACHE_DIR`` and ``PYMC_WENDY_CACHE_DIR``). The first problem also compiles what every
model shares; later ones only their own functions. Then the same processes run again on the
now warm cache (what every later process pays: loading machine code). Printed per problem:
the seconds of the solve call in the cold and in the warm process, and the numba compilation
inside the cold call (numba's compile events).

Run:  python benchmarks/compile_time.py [--problems logistic,lotka_volterra,...] [--part kernel]
To compare with another checkout: PYTHONPATH=/path/to/checkout python benchmarks/compile_time.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = """
import json, sys, time
import numpy as np
from numba.core import event

compiling = []


class _Listener(event.Listener):
    def on_start(self, ev):
        compiling.append(time.perf_counter())

    def on_end(self, ev):
        start = compiling.pop()
        if not compiling:
            total[0] += time.perf_counter() - start


total = [0.0]
event.register("numba:compile", _Listener())
import pymc_wendy as pw
from pymc_wendy.model.compiled_solve import compiled_solver

prob = pw.get_problem(sys.argv[1])
t = np.linspace(*prob.t_span, 513)
if sys.argv[2] == "kernel":
    from pymc_wendy.backends.kernel_cache import make_kernel

    data = prob.simulate(n_points=257, noise_ratio=0.05, seed=1)
    lik = pw.WeakLikelihood(prob.model, data.t, data.U, linear="general")
    start = time.perf_counter()
    make_kernel(lik, infer_sigma=True, want_grad=True)(
        prob.p_true, np.full(prob.model.n_states, 0.01), 0.0
    )
else:
    start = time.perf_counter()
    compiled_solver(prob.model).sensitivities(prob.p_true, prob.u0, t)
print(json.dumps({"seconds": time.perf_counter() - start, "compile": total[0]}))
"""

DEFAULT = "lotka_volterra,logistic,fitzhugh_nagumo,goodwin_3d,lorenz,sir_tdi"


def _run(problem: str, part: str, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, problem, part], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"{problem}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=DEFAULT)
    parser.add_argument("--part", choices=("solver", "kernel"), default="solver")
    args = parser.parse_args()
    problems = args.problems.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "NUMBA_CACHE_DIR": os.path.join(tmp, "numba"),
            "PYMC_WENDY_CACHE_DIR": os.path.join(tmp, "pymc_wendy"),
        }
        cold = {p: _run(p, args.part, env) for p in problems}
        warm = {p: _run(p, args.part, env) for p in problems}
    print(f"{'problem':22s} {'cold s':>8s} {'compiling s':>12s} {'warm s':>8s}")
    for p in problems:
        c, w = cold[p], warm[p]
        print(f"{p:22s} {c['seconds']:8.2f} {c['compile']:12.2f} {w['seconds']:8.3f}")
    total = sum(c["seconds"] for c in cold.values())
    print(f"{'all, cold':22s} {total:8.2f}")


if __name__ == "__main__":
    main()
