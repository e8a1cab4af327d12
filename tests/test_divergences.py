"""Where divergences sit (pymc_wendy.bayes.divergences) and pw.sample's warning about it."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_wendy as pw
from pymc_wendy.bayes.divergences import divergence_report

RNG = np.random.default_rng(0)
TAU = RNG.gamma(2.0, 0.1, size=(2, 1000))
Z = RNG.standard_normal((2, 1000, 5))


def _idata(diverging: np.ndarray):
    return az.from_dict(
        {"posterior": {"tau": TAU, "z": Z}, "sample_stats": {"diverging": diverging}}
    )


def _at(draws: np.ndarray) -> np.ndarray:
    """Divergences at the given flat draw indices, each one its own run."""
    div = np.zeros(TAU.size, dtype=bool)
    div[draws] = True
    return div.reshape(TAU.shape)


def test_no_divergences_no_report():
    assert divergence_report(_idata(np.zeros(TAU.shape, dtype=bool)), {"tau"}) is None


def test_divergences_at_large_scale_advise_the_centred_form():
    order = np.argsort(TAU.ravel())
    report = divergence_report(_idata(_at(order[-30::2])), {"tau"})
    assert report.startswith("15 divergent transition(s) of 2000, at large tau")
    assert "try the centred form (Normal(mu, tau))" in report


def test_divergences_at_small_scale_advise_the_non_centred_form():
    order = np.argsort(TAU.ravel())
    report = divergence_report(_idata(_at(order[:30:2])), {"tau"})
    assert "at small tau" in report and "non-centred form mu + tau * z" in report


def test_a_tail_of_another_variable_is_named_with_its_index():
    order = np.argsort(Z[..., 3].ravel())
    report = divergence_report(_idata(_at(order[-30::2])), {"tau"})
    assert "at large z[3]" in report and "raise target_accept" in report


def test_scattered_divergences_are_not_given_a_tail():
    # 15 draws at random: the most extreme of 6 scalars is not far enough out by chance
    draws = np.random.default_rng(1).choice(TAU.size, 15, replace=False)
    report = divergence_report(_idata(_at(draws)), {"tau"})
    assert (
        report
        == "15 divergent transition(s) of 2000, not concentrated in one tail of any variable."
    )


def test_one_stuck_run_is_one_piece_of_evidence():
    # 15 consecutive divergent draws at the top of tau are one run: not enough to name it,
    # while 15 separate ones are (test above)
    div = np.zeros(TAU.shape, dtype=bool)
    div[0, 100:115] = True
    tau = TAU.copy()
    tau[0, 100:115] = TAU.max() + np.arange(15)
    idata = az.from_dict({"posterior": {"tau": tau, "z": Z}, "sample_stats": {"diverging": div}})
    assert "not concentrated" in divergence_report(idata, {"tau"})


def test_sample_warns_where_a_centred_funnel_diverges():
    # the centred eight schools at a low target_accept: 40 divergences, at small tau
    y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
    s = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])
    with pm.Model():
        mu, tau = pm.Normal("mu", 0, 5), pm.HalfCauchy("tau", 5)
        theta = pm.Normal("theta", mu, tau, shape=8)
        pm.Normal("y", theta, s, observed=y)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            idata = pw.sample(
                1000,
                tune=300,
                chains=2,
                random_seed=1,
                progressbar=False,
                target_accept=0.6,
                check=False,
            )
    assert int(idata.sample_stats["diverging"].sum()) > 0
    reports = [str(w.message) for w in caught if issubclass(w.category, pw.DivergenceWarning)]
    assert len(reports) == 1 and "at small tau" in reports[0], reports


def test_sample_stats_of_other_draws_are_an_error():
    with pytest.raises(ValueError, match="has 1998 entries but the posterior has 2 x 1000"):
        divergence_report(_idata(np.ones((2, 999), dtype=bool)), {"tau"})
