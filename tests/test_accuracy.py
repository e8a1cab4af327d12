"""Estimator accuracy on the papers' benchmark settings, with the papers' figures beside.

Each test simulates N seeded data sets, fits them, and compares the per-parameter mean
squared error ``mean((p_hat - p*)^2)`` with the paper's figure at the same setting. The
tolerance is the Monte Carlo error of our own N-run mean: for normal errors the relative
standard error of a mean of N squared errors is ``sqrt(2 / N)``, so we allow
``paper * (1 + 3 sqrt(2 / N))``.

The WENDy-MLE tables' Bias/Variance/MSE are read as *absolute* (not relative) values: only
that reading is plausible for parameters far from 1 (SIR-TDI p5 = 0.0024 has MSE 1.3e-9 at
5 % noise, a 0.004 % relative error if relative, 1.5 % if absolute; Hindmarsh-Rose p6 = 50
has MSE 24 with 99 % coverage, 490 % if relative, 10 % if absolute). For logistic growth,
p* = (1, 1), the two readings coincide. See docs/estimators.md.
"""

from __future__ import annotations

import numpy as np
import pytest

import pymc_wendy as pw


def _fit_many(name, n, *, noise_ratio, subsample, method="mle", random_start=False, options=None):
    prob = pw.get_problem(name)
    est = []
    for seed in range(n):
        data = prob.simulate(noise_ratio=noise_ratio, subsample=subsample, seed=seed)
        p0 = None
        if random_start:  # the papers' protocol: a start drawn uniformly in the bounds
            lo, hi = np.array(prob.bounds).T
            p0 = np.random.default_rng(1000 + seed).uniform(lo, hi)
        bounds = prob.bounds if random_start else None
        res = pw.fit(
            prob.model,
            data.t,
            data.U,
            method=method,
            noise=prob.noise,
            p0=p0,
            bounds=bounds,
            options=options,
        )
        est.append(res.x)
    return prob, np.array(est)


def _assert_mse_within(prob, est, paper_mse):
    n = est.shape[0]
    mse = np.mean((est - prob.p_true) ** 2, axis=0)
    allowed = np.asarray(paper_mse) * (1 + 3 * np.sqrt(2 / n))
    assert np.all(mse <= allowed), f"MSE {mse} > allowed {allowed} (paper {paper_mse})"


def _coefficient_error(prob, est):
    return np.linalg.norm(est - prob.p_true, axis=1) / np.linalg.norm(prob.p_true)


def _assert_mean_error_below(err, paper):
    """The mean of N errors, allowing 3 Monte Carlo standard errors."""
    allowed = paper + 3 * err.std(ddof=1) / np.sqrt(err.size)
    assert err.mean() < allowed, f"mean coefficient error {err.mean():.3g} > {allowed:.3g}: {err}"


def test_logistic_10_percent():
    # WENDy-MLE Table 5, 10 % noise, M = 512: MSE p1 0.0012, p2 0.0017 (bias -0.0037, -0.0043)
    prob, est = _fit_many("logistic", 20, noise_ratio=0.1, subsample=2)
    _assert_mse_within(prob, est, [0.0012, 0.0017])


def test_logistic_30_percent():
    # WENDy-MLE Table 5, 30 % noise, M = 512: MSE p1 0.013, p2 0.016 (bias -0.045, -0.047)
    prob, est = _fit_many("logistic", 20, noise_ratio=0.3, subsample=2)
    _assert_mse_within(prob, est, [0.013, 0.016])


def test_lotka_volterra_10_percent():
    # WENDy 2023 Fig. 6 / sec. 3.2.2: coefficient error below 10 % even at 30 % noise with
    # 64 time points. At 10 % noise and 65 points we ask for the same on every data set and
    # a mean below 5 %.
    prob, est = _fit_many("lotka_volterra", 10, noise_ratio=0.1, subsample=16)
    err = _coefficient_error(prob, est)
    assert err.max() < 0.10 and err.mean() < 0.05, err


# the estimates' error is the claim here; the standard errors are not: at this noise the
# information check rightly flags seed 5 (a weak standard error 0.5 of the forward bound's,
# the estimate 2.9 se off; docs/validation.md)
@pytest.mark.filterwarnings("ignore::pymc_wendy.FitWarning")
def test_lotka_volterra_30_percent_64_points():
    # WENDy 2023 sec. 3.2.2: "even with 30 % noise and only 64 timepoints, the coefficient
    # error is still less than 10 %" (a mean over 100 runs)
    prob, est = _fit_many("lotka_volterra", 10, noise_ratio=0.3, subsample=16)
    _assert_mean_error_below(_coefficient_error(prob, est), 0.10)


def test_fitzhugh_nagumo_10_percent():
    # WENDy 2023 sec. 3.2.3 / Fig. 7: "on average 6 % coefficient errors at 10 % noise with
    # only 128 timepoints"
    prob, est = _fit_many("fitzhugh_nagumo", 10, noise_ratio=0.1, subsample=8)
    _assert_mean_error_below(_coefficient_error(prob, est), 0.06)


@pytest.mark.filterwarnings("ignore::pymc_wendy.FitWarning")
@pytest.mark.parametrize(
    ("name", "noise_ratio", "n"),
    [
        # WENDy-MLE sec. 3.5 / Fig. 2: at 30 % noise the data at t0 are often negative, and
        # output error cannot get back to u0 > 0 (measured: OE median error 1.1, MLE 0.057)
        ("logistic", 0.3, 10),
        # WENDy-MLE sec. 3.5 / Fig. 1: Lorenz on [0, 10] is chaotic, output error stalls in
        # local minima (measured at 5 %, 1025 points: OE median 0.33, MLE 0.0016). Slow:
        # output error needs up to 36 s per data set here (150 s for the test).
        pytest.param("lorenz", 0.1, 6, marks=pytest.mark.slow),
    ],
)
def test_mle_beats_output_error(name, noise_ratio, n):
    # Same data, same starts (uniform in the bounds, the papers' protocol); output error is
    # allowed to run to convergence (WENDy 2023 Table 3: 2000 evaluations).
    kwargs = {"noise_ratio": noise_ratio, "subsample": 2, "random_start": True}
    prob, mle = _fit_many(name, n, **kwargs)
    _, oe = _fit_many(name, n, method="oels", options={"max_nfev": 2000}, **kwargs)
    e_mle, e_oe = _coefficient_error(prob, mle), _coefficient_error(prob, oe)
    # Paired: WENDy-MLE must win on at least 3/4 of the data sets (if both were equally good
    # this would happen by chance with probability 5.5 % at n = 10, 11 % at n = 6) and by a
    # clear factor in the median.
    wins = int(np.sum(e_mle < e_oe))
    assert wins >= int(np.ceil(0.75 * n)), (wins, e_mle, e_oe)
    assert np.median(e_oe) > 3 * np.median(e_mle), (e_mle, e_oe)


@pytest.mark.slow
def test_hindmarsh_rose_2_percent():
    # WENDy-MLE Table 7, 2 % noise. At M = 1024 the paper's MSEs (4.2 5.9 53 6.1 5.4 2.5 5.1
    # 0.015 9.3e-5 0.058) are larger than at M = 512; we hold ourselves to the M = 512 column:
    # 0.036 0.059 0.76 1.1 0.11 24 0.099 2.6e-5 0.00013 0.002.
    # The forward check of pw.fit flags one of the four: its solution's spikes drift from
    # the data's over the 1025 points (y's residual sd 2.4 times the noise), a weak-form
    # estimate whose exact counterpart differs, which the check exists to say.
    with pytest.warns(pw.FitWarning, match="does not fit the data"):
        prob, est = _fit_many("hindmarsh_rose", 4, noise_ratio=0.02, subsample=1)
    _assert_mse_within(
        prob, est, [0.036, 0.059, 0.76, 1.1, 0.11, 24, 0.099, 2.6e-5, 0.00013, 0.002]
    )


@pytest.mark.slow
def test_goodwin_3d_lognormal_5_percent():
    # WENDy-MLE Table 15, log-normal 5 %, M = 512, random starts in the bounds:
    # MSE 2.6 0.00022 0.35 0.76 5.3e-6 1.1e-5 1e-5 6.8e-6
    prob, est = _fit_many("goodwin_3d", 6, noise_ratio=0.05, subsample=2, random_start=True)
    _assert_mse_within(prob, est, [2.6, 0.00022, 0.35, 0.76, 5.3e-6, 1.1e-5, 1e-5, 6.8e-6])


@pytest.mark.slow
def test_sir_tdi_lognormal_5_percent():
    # WENDy-MLE Table 20, log-normal 5 %, M = 512, random starts in the bounds
    prob, est = _fit_many("sir_tdi", 6, noise_ratio=0.05, subsample=2, random_start=True)
    _assert_mse_within(prob, est, [9.3e-6, 0.00039, 4.5e-6, 3.8e-6, 1.3e-9])


# Coverage of nominal 95 % intervals on logistic growth, 10 % noise, 513 points, 100 seeded
# data sets (WENDy-MLE, default starts). Measured when this test was written:
MEASURED_COVERAGE = {"sandwich": (1.00, 1.00), "gls": (0.96, 0.96), "hessian": (0.96, 0.96)}


@pytest.mark.slow
def test_logistic_interval_coverage():
    """Empirical coverage per covariance kind, against the measured values above within the
    Monte Carlo error of 100 runs (s.e. sqrt(0.95 * 0.05 / 100) = 0.022, three of them).

    The WENDy-MLE eq. 9 sandwich is the covariance of *ordinary* weak least squares, wider
    than that of the MLE, hence its 100 % (as in WENDy-MLE Table 5); the inverse Hessian and
    the GLS covariance are calibrated."""
    prob = pw.get_problem("logistic")
    n = 100
    covered = {k: np.zeros(2) for k in MEASURED_COVERAGE}
    for seed in range(n):
        data = prob.simulate(noise_ratio=0.1, subsample=2, seed=seed)
        res = pw.fit(prob.model, data.t, data.U)
        for kind in covered:
            lo, hi = res.conf_int(0.95, kind=kind).T
            covered[kind] += (lo <= prob.p_true) & (prob.p_true <= hi)
    se = np.sqrt(0.95 * 0.05 / n)
    for kind, measured in MEASURED_COVERAGE.items():
        coverage = covered[kind] / n
        np.testing.assert_allclose(coverage, measured, atol=3 * se, err_msg=kind)
    for kind in ("gls", "hessian"):
        assert np.all(np.abs(covered[kind] / n - 0.95) <= 3 * se), kind
    assert np.all(covered["sandwich"] / n >= 0.99)
