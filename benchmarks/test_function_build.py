"""The default test functions' construction against the whole default fit, by series length.

``pw.fit`` with defaults builds WENDy's SVD test functions (radius search, the full bump
matrix, its singular vectors) and then runs the WENDy-MLE. At a thousand points and more the
construction is most of the fit. Printed per number of points (logistic growth, 10 % noise,
``--repeats`` data sets, one BLAS thread): the median wall time of ``pw.fit`` and of the
construction alone (``WeakLikelihood`` of the same data), and the construction's share.

Run:  python benchmarks/test_function_build.py [--points 257,1025,4097] [--repeats 5]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import pymc_wendy as pw  # noqa: E402


def _median_time(fun, args_list) -> float:
    times = []
    for args in args_list:
        start = time.perf_counter()
        fun(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="257,1025,4097")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    prob = pw.get_problem("logistic")
    print(f"{'points':>7} {'fit s':>8} {'build s':>8} {'share':>6}")
    for n in (int(x) for x in args.points.split(",")):
        data = [
            (prob.model, d.t, d.U)
            for d in (
                prob.simulate(n_points=n, noise_ratio=0.1, seed=s) for s in range(args.repeats)
            )
        ]
        pw.fit(*data[0])  # compile and warm the caches outside the timing
        fit = _median_time(pw.fit, data)
        build = _median_time(pw.WeakLikelihood, data)
        print(f"{n:7d} {fit:8.3f} {build:8.3f} {build / fit:6.2f}")


if __name__ == "__main__":
    main()
