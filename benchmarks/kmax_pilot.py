"""WENDy-MLE accuracy against the cap ``Kmax`` on the number of SVD test functions.

The pilot behind ``docs/performance.md``, "The dense kernel's floor": for each problem, noise
level and seeded data set, ``pw.fit`` with ``test_functions={"Kmax": k}`` for each ``k``;
prints, per cell, the mean relative coefficient error (with its standard error), the share of
parameters with ``|error| < 1.96 se`` and the mean fit time, and the paired difference of the
error against the first ``k``.

Run:  python benchmarks/kmax_pilot.py [--problems logistic,lotka_volterra,fitzhugh_nagumo]
          [--kmax 200,140,100,70] [--points 513] [--noise 0.1,0.2] [--datasets 12]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import pymc_wendy as pw  # noqa: E402


def _cell(prob, noise: float, kmax: list[int], points: int, datasets: int) -> dict:
    err = {k: [] for k in kmax}
    covered = {k: [] for k in kmax}
    seconds = {k: [] for k in kmax}
    truth = np.asarray(prob.p_true, dtype=float)
    for s in range(datasets):
        data = prob.simulate(n_points=points, noise_ratio=noise, seed=1000 + s)
        for k in kmax:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = pw.fit(prob.model, data.t, data.U, test_functions={"Kmax": k})
            seconds[k].append(time.perf_counter() - t0)
            p = np.asarray(r.x, dtype=float)
            err[k].append(np.linalg.norm(p - truth) / np.linalg.norm(truth))
            covered[k].append(np.mean(np.abs(p - truth) < 1.96 * np.asarray(r.stderr)))
    return {"err": err, "covered": covered, "seconds": seconds}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="logistic,lotka_volterra,fitzhugh_nagumo")
    ap.add_argument("--kmax", default="200,140,100,70")
    ap.add_argument("--points", type=int, default=513)
    ap.add_argument("--noise", default="0.1,0.2")
    ap.add_argument("--datasets", type=int, default=12)
    args = ap.parse_args(argv)
    kmax = [int(k) for k in args.kmax.split(",")]
    for name in args.problems.split(","):
        prob = pw.get_problem(name)
        for noise in (float(x) for x in args.noise.split(",")):
            cell = _cell(prob, noise, kmax, args.points, args.datasets)
            ref = np.asarray(cell["err"][kmax[0]])
            for k in kmax:
                e = np.asarray(cell["err"][k])
                d = e - ref
                print(
                    f"{name:<16} noise {noise:<5} Kmax {k:>4}: error {e.mean():.4f} +- "
                    f"{e.std(ddof=1) / np.sqrt(e.size):.4f}, within 1.96 se "
                    f"{np.mean(cell['covered'][k]):.2f}, fit {np.mean(cell['seconds'][k]):.1f} s, "
                    f"paired vs Kmax {kmax[0]} {d.mean():+.4f} +- "
                    f"{d.std(ddof=1) / np.sqrt(d.size):.4f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
