"""WENDy-MLE Table 5 (logistic growth) reproduced with :func:`pymc_wendy.run_coverage` (slow).

The study: logistic growth, additive noise at 1, 2, 5, 10, 15 and 20 %, 1025, 513 and 257
points on [0, 10] (the paper's M = 1024, 512, 256), 100 seeded data sets per setting,
WENDy-MLE with the inverse-Hessian and the eq. 9 sandwich intervals. One study per grid, each
on its own worker: about 8, 3 and 1 minutes for 1025, 513 and 257 points (CI machine).
``PYMC_WENDY_TABLE5_WORKERS=n`` runs n processes per study; ``PYMC_WENDY_TABLE5_STORE=dir``
keeps the runs (``dir/<points>-points``; a rerun resumes) and writes each grid's comparison
table there as ``table5_comparison_<points>.md``. Measured numbers and the investigation of the
differences: ``docs/validation.md``, "Reproduction of WENDy-MLE Table 5".

**How the paper's columns are read.** In every cell the printed MSE equals Bias^2 + 2 Variance,
while the paper's own definitions (WENDy-MLE eqs. 15-17) give MSE = Bias^2 + Variance. The
printed Variance equals the Cramér-Rao bound of the setting (full-data likelihood, ``u0``
unknown; e.g. 3.1e-6 against 3.1e-6 for p1 at 1 %, M = 1024, 6.1e-4 against 6.2e-4 at 10 %,
M = 512) and our estimator's variance (geometric-mean ratio 0.99 over the 36 entries), so it
is the plain variance of the estimates and the MSE column counts it twice. We compare our
variance with the printed Variance and our MSE with Bias^2 + Variance from the paper's own
columns. Bias, Variance and MSE are absolute (``docs/estimators.md``); for logistic growth,
p* = (1, 1), absolute and relative coincide.

**Tolerance.** A difference counts as Monte Carlo noise when
``|ours - paper| < Z sqrt(se_ours^2 + se_paper^2)``. ``se_ours`` is the empirical standard
error over our 100 data sets; the paper's, from its own numbers with N = 100 and normal
errors: ``sqrt(V / N)`` for the bias, ``V sqrt(2 / (N - 1))`` for the variance,
``sqrt((2 V^2 + 4 b^2 V) / N)`` for the MSE, plus the rounding of the printed two significant
digits (uniform, s.d. ``unit / sqrt(12)``). ``Z = 3.5`` is the Bonferroni bound for a 5 %
family-wise false-alarm rate over the 108 comparisons (18 settings x 2 parameters x bias,
variance, MSE): ``norm.isf(0.05 / (2 * 108)) = 3.50``. Positively correlated comparisons (p1
and p2 share data) make it conservative; the right skew of a mean of squared errors makes
the upper tail of the MSE comparison a little heavier than normal.

**Which comparisons are one-sided, and why.** The variance is compared two-sided: it is the
estimator's precision and should be the same. Bias and MSE are compared one-sided (ours must
not be *worse* than the paper's, in ``|bias|`` and MSE), because test-function choices shift
the bias systematically in both directions: at 1-2 % noise the paper's estimates carry a bias
of +0.002 at every M (8-12 of its own standard errors from zero) that ours do not have (our
quadrature-error bias, the linear response of the noise-free residual, is below 2e-4), and at
257 points and 10-20 % noise ours is a half to two thirds of the paper's in this study (400
fresh data sets give about the paper's: docs/validation.md). A smaller bias or
MSE than the paper's is not a failure to reproduce WENDy-MLE's accuracy.

**Known mismatch.** At 1025 points and 15-20 % noise our estimates have a positive bias
(+0.021 and +0.047 for p1) that the paper's do not (-0.005, -0.003): the second-order noise
term of the u^2 nonlinearity (E[(u + e)^2] = u^2 + sigma^2, about +0.08 for p1 at 20 % at
every M, by linear response) is no longer offset by the errors-in-variables bias, which
shrinks as the grid gets finer. Changing the minimum test-function radius (2 to 31 grid
spacings) does not remove it. Those two settings are ``xfail(strict=True)``: the test fails if
they start to pass, so the documented mismatch is revisited.

Intervals: the paper's eq. 9 sandwich covers 1.00 in every cell but one (0.99); ours must
not fall below the nominal 95 %. The inverse-Hessian interval must be calibrated,
``|coverage - 0.95| < Z sqrt(0.95 * 0.05 / N)``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from pymc_wendy import run_coverage
from pymc_wendy.studies.coverage import summarize

NOISE = (0.01, 0.02, 0.05, 0.10, 0.15, 0.20)
POINTS = (1025, 513, 257)  # the paper's M = 1024, 512, 256
N = 100
LEVEL = 0.95
Z = 3.5  # scipy.stats.norm.isf(0.05 / (2 * 108)) = 3.501

# WENDy-MLE Table 5, as printed: {(noise, points): (Bias, Variance, MSE, Coverage)}, each
# (p1, p2). Only the cells of the noise levels above.
PAPER = {
    (0.01, 1025): ((0.0021, 0.0016), (3.1e-06, 4.1e-06), (1.1e-05, 1.1e-05), (1, 1)),
    (0.01, 513): ((0.002, 0.0016), (6.7e-06, 9.3e-06), (1.7e-05, 2.1e-05), (1, 1)),
    (0.01, 257): ((0.0015, 0.0012), (1.2e-05, 1.8e-05), (2.5e-05, 3.7e-05), (0.99, 1)),
    (0.02, 1025): ((0.002, 0.0016), (1.3e-05, 1.6e-05), (2.9e-05, 3.5e-05), (1, 1)),
    (0.02, 513): ((0.0018, 0.0014), (2.7e-05, 3.7e-05), (5.7e-05, 7.6e-05), (1, 1)),
    (0.02, 257): ((0.00093, 0.00053), (4.6e-05, 7e-05), (9.3e-05, 0.00014), (1, 1)),
    (0.05, 1025): ((0.0011, 0.00055), (8e-05, 0.0001), (0.00016, 0.00021), (1, 1)),
    (0.05, 513): ((0.0006, 6.5e-05), (0.00016, 0.00022), (0.00032, 0.00043), (1, 1)),
    (0.05, 257): ((-0.0022, -0.0024), (0.00028, 0.00043), (0.00056, 0.00086), (1, 1)),
    (0.10, 1025): ((-0.0018, -0.0025), (0.00033, 0.00042), (0.00066, 0.00085), (1, 1)),
    (0.10, 513): ((-0.0037, -0.0043), (0.00061, 0.00084), (0.0012, 0.0017), (1, 1)),
    (0.10, 257): ((-0.011, -0.011), (0.0011, 0.0017), (0.0023, 0.0035), (1, 1)),
    (0.15, 1025): ((-0.0052, -0.0061), (0.00074, 0.00094), (0.0015, 0.0019), (1, 1)),
    (0.15, 513): ((-0.0058, -0.0073), (0.0014, 0.0019), (0.0028, 0.0038), (1, 1)),
    (0.15, 257): ((-0.023, -0.023), (0.0024, 0.0037), (0.0053, 0.0079), (1, 1)),
    (0.20, 1025): ((-0.0034, -0.0057), (0.0017, 0.002), (0.0034, 0.004), (1, 1)),
    (0.20, 513): ((-0.01, -0.012), (0.0023, 0.0031), (0.0048, 0.0064), (1, 1)),
    (0.20, 257): ((-0.037, -0.038), (0.0043, 0.0066), (0.0099, 0.015), (1, 1)),
}

KNOWN_MISMATCH = {
    (0.15, 1025): "our bias +0.021 (p1) against the paper's -0.0052; see the module docstring",
    (0.20, 1025): "our bias +0.047/+0.038 against the paper's -0.0034/-0.0057, MSE of p1 "
    "3.9e-3 against 1.7e-3; see the module docstring",
}


def _rounding_sd(x: float) -> float:
    """S.d. of the rounding error of a value printed with two significant digits."""
    if x == 0:
        return 0.0
    unit = 10.0 ** (math.floor(math.log10(abs(x))) - 1)
    return unit / math.sqrt(12.0)


def _paper_stats(nr: float, n: int, j: int) -> dict[str, tuple[float, float]]:
    """``{metric: (value, standard error)}`` of the paper's cell, read as the module says."""
    b, v = PAPER[nr, n][0][j], PAPER[nr, n][1][j]
    sb, sv = _rounding_sd(b), _rounding_sd(v)
    mse = b**2 + v
    return {
        "bias": (b, math.hypot(math.sqrt(v / N), sb)),
        "variance": (v, math.hypot(v * math.sqrt(2 / (N - 1)), sv)),
        "mse": (mse, math.hypot(math.sqrt((2 * v**2 + 4 * b**2 * v) / N), 2 * abs(b) * sb, sv)),
    }


def _our_stats(ds, s, nr: float, n: int, j: int) -> dict[str, tuple[float, float]]:
    """``{metric: (value, standard error)}`` of our runs (WENDy-MLE; both methods share it)."""
    cell = {"estimator": "mle-hessian", "noise_ratio": nr, "n_points": n}
    err = (ds["estimate"] - ds["truth"]).sel(**cell).isel(param=j).values
    dev2 = (err - err.mean()) ** 2
    got = s.sel(**cell).isel(param=j)
    return {
        "bias": (float(got["bias"]), float(got["bias_se"])),
        # the paper's eq. 16 divides by N; summarize's ``variance`` by N - 1
        "variance": (float(dev2.mean()), float(dev2.std(ddof=1) / math.sqrt(N))),
        "mse": (float(got["mse"]), float(got["mse_se"])),
    }


def _compare(ds, s, nr: float, n: int) -> list[dict]:
    """Every comparison of one setting, with its verdict."""
    rows = []
    for j, name in enumerate(ds["param"].values):
        ours, paper = _our_stats(ds, s, nr, n, j), _paper_stats(nr, n, j)
        for metric in ("bias", "variance", "mse"):
            (o, so), (p, sp) = ours[metric], paper[metric]
            tol = Z * math.hypot(so, sp)
            if metric == "variance":
                ok, excess = abs(o - p) < tol, abs(o - p) / tol
            elif metric == "bias":  # one-sided: not a larger bias than the paper's
                ok, excess = abs(o) - abs(p) < tol, (abs(o) - abs(p)) / tol
            else:  # one-sided: not a larger MSE than the paper's
                ok, excess = o - p < tol, (o - p) / tol
            rows.append(
                {"noise": nr, "points": n, "param": str(name), "metric": metric, "ours": o,
                 "se_ours": so, "paper": p, "se_paper": sp, "tol": tol, "two_sided_ok":
                 abs(o - p) < tol, "excess": excess, "ok": bool(ok)}
            )  # fmt: skip
    for est in ("mle-sandwich", "mle-hessian"):
        cov = s["coverage"].sel(estimator=est, noise_ratio=nr, n_points=n).values
        for j, name in enumerate(ds["param"].values):
            if est == "mle-sandwich":
                ok, tol = cov[j] >= LEVEL, 0.0
            else:
                tol = Z * math.sqrt(LEVEL * (1 - LEVEL) / N)
                ok = abs(cov[j] - LEVEL) < tol
            rows.append(
                {"noise": nr, "points": n, "param": str(name), "metric": f"coverage {est}",
                 "ours": float(cov[j]), "paper": float(PAPER[nr, n][3][j]) if est ==
                 "mle-sandwich" else np.nan, "tol": tol, "ok": bool(ok)}
            )  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def table5(request, tmp_path_factory):
    """The study on one grid (``request.param`` points): the three grids run in parallel
    on separate workers (tests/conftest.py)."""
    n_points = request.param
    store = os.environ.get("PYMC_WENDY_TABLE5_STORE") or tmp_path_factory.mktemp("table5")
    store = Path(store) / f"{n_points}-points"
    workers = int(os.environ.get("PYMC_WENDY_TABLE5_WORKERS", "0")) or None
    ds = run_coverage(
        "logistic",
        methods=["mle-sandwich", "mle-hessian"],
        noise_ratios=NOISE,
        n_points=(n_points,),
        n_datasets=N,
        level=LEVEL,
        store=store,
        max_workers=workers,
        progress=False,
    )
    return ds, summarize(ds), store


def _cases():
    for nr in NOISE:
        for n in POINTS:
            reason = KNOWN_MISMATCH.get((nr, n))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(nr, n, marks=marks, id=f"{nr:g}-{n}")


@pytest.mark.slow
# scope="module": one study per grid, not per test (with a direct argument, pytest's default
# parametrization scope is the function's)
@pytest.mark.parametrize(
    ("noise_ratio", "table5"), list(_cases()), indirect=["table5"], scope="module"
)
def test_table5_setting(table5, noise_ratio):
    ds, s, _ = table5
    n_points = int(ds["n_points"].values[0])
    n = s["n"].sel(estimator="mle-hessian", noise_ratio=noise_ratio, n_points=n_points)
    assert np.all(n.values == N), "every data set must give an estimate"
    rows = _compare(ds, s, noise_ratio, n_points)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, "\n".join(
        f"{r['param']} {r['metric']}: ours {r['ours']:.3g}, paper {r['paper']:.3g}, "
        f"tolerance {r['tol']:.3g}"
        for r in bad
    )


@pytest.mark.slow
@pytest.mark.parametrize("table5", POINTS, indirect=True, ids=lambda n: f"{n}")
def test_table5_variance_column_is_the_variance(table5):
    """The reading of the paper's columns (module docstring), checked on the data, and the
    grid's comparison written to ``table5_comparison_<points>.md`` in the store.

    One cell cannot tell Variance from 2 Variance (the tolerance of a variance from 100 runs
    is about its own size), but the 12 of a grid together can: the mean log ratio of our
    variance to the printed Variance must be compatible with 0 and incompatible with log 2
    (its standard error is about 0.08 per grid, log 2 = 0.69)."""
    pd = pytest.importorskip("pandas")
    ds, s, store = table5
    n_points = int(ds["n_points"].values[0])
    table = pd.DataFrame([r for nr in NOISE for r in _compare(ds, s, nr, n_points)])
    text = table.to_string(index=False, float_format=lambda x: f"{x:.3g}")
    (store.parent / f"table5_comparison_{n_points}.md").write_text(text + "\n")
    print(text)
    var = table[table.metric == "variance"]
    log_ratio = np.log(var.ours / var.paper)
    var_log = (var.se_ours / var.ours) ** 2 + (var.se_paper / var.paper) ** 2
    # p1 and p2 share their data sets: count each setting once
    se = math.sqrt(var_log.mean() / len(NOISE))
    assert abs(log_ratio.mean()) < Z * se, (log_ratio.mean(), se)
    assert abs(log_ratio.mean() - math.log(2)) > Z * se, (log_ratio.mean(), se)
