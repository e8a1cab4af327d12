"""Several experiments sharing parameters: the joint weak likelihood and fits on it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
from conftest import central_differences

import pymc_wendy as pw
from pymc_wendy.studies.coverage.runners import data_seed as _data_seed
from pymc_wendy.weak.joint import JointLikelihood
from pymc_wendy.weak.test_functions import build_test_functions

LV = pw.get_problem("lotka_volterra")
FHN = pw.get_problem("fitzhugh_nagumo")


def _experiments(prob, designs, noise_ratio=0.1):
    """Data of ``prob`` for each ``(u0, n_points, subsample, seed)``."""
    ts, Us = [], []
    for u0, n, sub, seed in designs:
        d = prob.simulate(n_points=n, subsample=sub, noise_ratio=noise_ratio, seed=seed, u0=u0)
        ts.append(d.t)
        Us.append(d.U)
    return ts, Us


# three Lotka-Volterra experiments: different initial states, grids and lengths
LV_DESIGNS = [((1.0, 1.0), 257, 1, 1), ((2.0, 0.5), 201, 1, 2), ((0.6, 1.6), 513, 2, 3)]


@pytest.fixture(scope="module")
def lv_data():
    return _experiments(LV, LV_DESIGNS)


def _common_sigma(Us):
    """One noise level per state for all experiments (the stacked likelihood has one)."""
    return np.mean([pw.estimate_noise(U) for U in Us], axis=0)


def _stacked(model, ts, Us, sigma):
    """One WeakLikelihood on the experiments laid end to end, with block-diagonal test
    functions: its weak residual is the joint one (reordered). Valid for autonomous models,
    whose right-hand side does not see the time shift. No ridge: it is relative to each
    likelihood's own data, so the stacked one's would differ (by 1e-10 relative)."""
    liks = [
        pw.WeakLikelihood(model, t, U, sigma=sigma, ridge=0.0) for t, U in zip(ts, Us, strict=True)
    ]
    shifted, offset = [], 0.0
    for t in ts:
        shifted.append(t - t[0] + offset)
        offset = shifted[-1][-1] + 1.0
    phi = sla.block_diag(*(lik.phi for lik in liks))
    dphi = sla.block_diag(*(lik.dphi for lik in liks))
    single = pw.WeakLikelihood(
        model,
        np.concatenate(shifted),
        np.vstack(Us),
        sigma=sigma,
        test_functions=(phi, dphi),
        ridge=0.0,
    )
    return JointLikelihood(liks), single


def test_joint_value_gradient_hessian_are_the_stacked_ones(lv_data):
    joint, single = _stacked(LV.model, *lv_data, _common_sigma(lv_data[1]))
    rng = np.random.default_rng(0)
    for _ in range(3):
        p = LV.p_true * rng.uniform(0.8, 1.2, LV.model.n_params)
        assert joint.nll(p) == pytest.approx(single.nll(p), rel=1e-10)
        np.testing.assert_allclose(joint.nll_grad(p)[1], single.nll_grad(p)[1], rtol=1e-8)
        np.testing.assert_allclose(joint.hessian(p), single.hessian(p), rtol=1e-8)
        for kind in ("sandwich", "gls"):  # the Hessian need not be definite away from the MLE
            np.testing.assert_allclose(
                joint.parameter_covariance(p, method=kind),
                single.parameter_covariance(p, method=kind),
                rtol=1e-8,
            )
    assert joint.n_residuals == single.n_residuals


@pytest.mark.parametrize("corrected", [False, True], ids=["mle", "bias-corrected"])
def test_joint_derivatives_against_finite_differences(corrected):
    # FitzHugh-Nagumo is nonlinear in the states (the correction's tilt is non-zero)
    ts, Us = _experiments(FHN, [(None, 257, 1, 4), ((1.0, 0.5), 129, 1, 5)], noise_ratio=0.1)
    joint = JointLikelihood(
        [pw.WeakLikelihood(FHN.model, t, U) for t, U in zip(ts, Us, strict=True)]
    )
    p = FHN.p_true * 1.05
    if corrected:
        joint = pw.bias.corrected_likelihood(joint, "analytic", FHN.p_true)
        assert np.linalg.norm(joint.tilt) > 0
    g = joint.nll_grad(p)[1]
    g_fd = central_differences(joint.nll, p, 1e-6, floor=1.0)
    np.testing.assert_allclose(g, g_fd, rtol=1e-5, atol=1e-6 * abs(g).max())
    H = joint.hessian(p)
    H_fd = central_differences(lambda q: joint.nll_grad(q)[1], p, 1e-6, floor=1.0)
    np.testing.assert_allclose(H, H_fd, rtol=1e-5, atol=1e-6 * abs(H).max())
    if not corrected:
        value, gp, gs = joint.nll_grad_sigma2(p)
        s2 = joint.sigma**2
        for i in range(2):
            for d in range(2):
                e = np.zeros_like(s2)
                e[i, d] = 1e-6 * s2[i, d]
                fd = (joint.nll(p, np.sqrt(s2 + e)) - joint.nll(p, np.sqrt(s2 - e))) / (2 * e[i, d])
                assert gs[i, d] == pytest.approx(fd, rel=1e-5)
        assert value == pytest.approx(joint.nll(p))


@pytest.mark.parametrize("method", ["mle", "irls", "wls"])
def test_joint_fit_equals_the_stacked_fit(lv_data, method):
    sigma = _common_sigma(lv_data[1])
    joint, single = _stacked(LV.model, *lv_data, sigma)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pw.FitWarning)
        a = pw.fit(LV.model, *lv_data, sigma=[sigma] * 3, method=method, ridge=0.0)
        b = pw.fit(single, method=method)
    assert a.likelihood.n_experiments == 3
    np.testing.assert_allclose(a.x, b.x, rtol=1e-8)
    np.testing.assert_allclose(a.stderr, b.stderr, rtol=1e-8)
    assert a.nll == pytest.approx(b.nll, rel=1e-10)


def test_bias_corrected_joint_fit_equals_the_stacked_one():
    ts, Us = _experiments(FHN, [(None, 257, 1, 6), ((1.0, 0.5), 257, 1, 7)], noise_ratio=0.15)
    joint, single = _stacked(FHN.model, ts, Us, _common_sigma(Us))
    a = pw.fit(joint, bias_correction="auto")
    b = pw.fit(single, bias_correction="auto")
    np.testing.assert_allclose(a.bias_correction.tilt, b.bias_correction.tilt, rtol=1e-8)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-7)
    np.testing.assert_allclose(a.stderr, b.stderr, rtol=1e-6)
    assert np.abs(a.bias_correction.shift_in_stderr()).max() > 0.2  # a correction happened


def test_three_like_experiments_shrink_standard_errors_by_sqrt3():
    designs = [(None, 257, 1, s) for s in (11, 12, 13)]
    ts, Us = _experiments(LV, designs)
    one = [pw.fit(LV.model, t, U) for t, U in zip(ts, Us, strict=True)]
    joint = pw.fit(LV.model, ts, Us)
    ratio = joint.stderr / np.mean([r.stderr for r in one], axis=0)
    # same design: the information adds up; the per-data-set Hessians differ by a few %
    np.testing.assert_allclose(ratio, 1 / np.sqrt(3), rtol=0.05)
    # the information adds up; the estimate is where the truth is
    assert np.all(np.abs(joint.x - LV.p_true) < 3 * joint.stderr)


def test_per_experiment_noise_levels_and_test_functions(lv_data):
    ts, Us = lv_data
    sig = [0.7, None, np.array([0.7, 0.8])]
    tf = [None, {"min_radius": 0.2}, build_test_functions(ts[2], Us[2])]
    res = pw.fit(LV.model, ts, Us, sigma=sig, test_functions=tf)
    lik = res.likelihood
    assert res.sigma.shape == (3, 2)
    np.testing.assert_allclose(lik.sigma[0], 0.7)
    np.testing.assert_allclose(lik.sigma[2], [0.7, 0.8])
    assert lik.experiments[1].sigma_estimated and not lik.experiments[0].sigma_estimated
    assert lik.experiments[2].test_functions is tf[2]
    assert lik.experiments[1].test_functions.min_radius == pytest.approx(0.2)


def test_diagnostics_flag_an_experiment_with_other_parameters():
    ts, Us = _experiments(LV, [(None, 257, 1, 21), ((2.0, 0.5), 257, 1, 22)])
    odd = LV.simulate(n_points=257, noise_ratio=0.1, seed=23, p=LV.p_true * [1.3, 1, 1, 1])
    good = pw.fit(LV.model, ts, Us)
    bad = pw.fit(LV.model, [*ts, odd.t], [*Us, odd.U])
    dg, db = good.diagnostics(), bad.diagnostics()
    assert list(dg.experiment.values) == [0, 1]
    assert np.all(dg.consistency_pvalue > 0.01)
    assert db.consistency_pvalue.values[2] < 1e-6
    assert np.all(np.abs(dg.whitened_ms - 1) < 0.25)
    assert set(db.data_vars) >= {"n_points", "nll", "whitened_ms", "shapiro_pvalue"}


def test_single_experiment_fit_has_diagnostics_too(lv_data):
    res = pw.fit(LV.model, lv_data[0][0], lv_data[1][0])
    d = res.diagnostics()
    assert d.sizes["experiment"] == 1
    assert np.isnan(d.consistency_pvalue.values[0])  # nothing to be consistent with


def test_several_experiments_bad_input_is_named():
    (t1, t2), (U1, U2) = _experiments(LV, [(None, 129, 1, 1), (None, 65, 1, 2)])
    with pytest.raises(ValueError, match="lists of the same length"):
        pw.fit(LV.model, [t1, t2], U1)
    with pytest.raises(ValueError, match="2 time arrays but 3 data arrays"):
        pw.fit(LV.model, [t1, t2], [U1, U2, U2])
    with pytest.raises(ValueError, match="sigma for 2 experiments"):
        pw.fit(LV.model, [t1, t2], [U1, U2], sigma=[0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="experiment 1: .*"):
        pw.fit(LV.model, [t1, t2], [U1, U2[:-1]])
    with pytest.raises(ValueError, match="u0 must be 2 x 2 .one row per experiment"):
        pw.fit(LV.model, [t1, t2], [U1, U2], method="oels", u0=[1.0, 1.0])
    a = pw.WeakLikelihood(LV.model, t1, U1)
    (t3,), (U3,) = _experiments(FHN, [(None, 129, 1, 3)])
    with pytest.raises(ValueError, match="experiment 1 has a different model"):
        JointLikelihood([a, pw.WeakLikelihood(FHN.model, t3, U3)])
    positive = pw.WeakLikelihood(LV.model, t2, np.abs(U2) + 0.01, noise="lognormal")
    with pytest.raises(ValueError, match="experiment 1 has noise='lognormal'"):
        JointLikelihood([a, positive])
    with pytest.raises(ValueError, match="at least one experiment"):
        JointLikelihood([])


def test_coverage_study_of_several_experiments(tmp_path):
    exps = [{}, {"u0": [2.0, 0.5], "n_points": 65}]
    kw = dict(
        methods=["mle-hessian", "wls-sandwich", "oels"],
        noise_ratios=[0.05],
        n_points=[129],
        n_datasets=3,
        max_workers=1,
        progress=False,
        experiments=exps,
    )
    ds = pw.run_coverage("lotka_volterra", store=tmp_path, **kw)
    assert ds.sizes["dataset"] == 3 and bool(ds.success.all())
    assert np.all(np.isfinite(ds.fsim_error.values))
    # each run is the joint fit of its experiments' data, reproducible from its seed
    seeds = np.random.SeedSequence(_data_seed(0, 0.05, 129, 1)).generate_state(2)
    d1 = LV.simulate(n_points=129, noise_ratio=0.05, seed=int(seeds[0]))
    d2 = LV.simulate(n_points=65, noise_ratio=0.05, seed=int(seeds[1]), u0=[2.0, 0.5])
    res = pw.fit(LV.model, [d1.t, d2.t], [d1.U, d2.U], bounds=LV.bounds)
    est = ds.estimate.sel(estimator="mle-hessian", noise_ratio=0.05, n_points=129, dataset=1)
    np.testing.assert_allclose(est.values, res.x, rtol=1e-10)
    # the store remembers the experiments: another design is another study
    with pytest.raises(ValueError, match="different settings"):
        pw.run_coverage("lotka_volterra", store=tmp_path, **{**kw, "experiments": exps[:1]})
    with pytest.raises(ValueError, match="experiment 1: u0 must be 2 finite values"):
        pw.run_coverage("lotka_volterra", **{**kw, "experiments": [{}, {"u0": [1.0]}]})


@pytest.mark.parametrize("method", ["oels", "hybrid"])
def test_output_error_over_several_experiments(lv_data, method):
    ts, Us = lv_data
    res = pw.fit(LV.model, ts, Us, method=method)
    assert res.success and res.u0.shape == (3, 2)
    # each experiment keeps its own initial state
    for e, u0 in enumerate([(1.0, 1.0), (2.0, 0.5), (0.6, 1.6)]):
        np.testing.assert_allclose(res.u0[e], u0, atol=0.2)
        traj = res.simulate(experiment=e)
        assert traj.shape == Us[e].shape
    np.testing.assert_allclose(res.x, LV.p_true, rtol=0.05)
    # more data, smaller errors than output error on the first experiment alone
    one = pw.fit(LV.model, ts[0], Us[0], method=method)
    assert np.all(res.stderr < one.stderr)
    with pytest.raises(ValueError, match="pass experiment="):
        res.simulate()


def test_joint_output_error_residual_jacobian_and_optimum(lv_data):
    # against residuals built here from plain forward solves, experiment by experiment
    from pymc_wendy.estimators.output_error import output_error

    ts, Us = lv_data
    sig = np.array([pw.estimate_noise(U) for U in Us])
    u0 = np.array([d[0] for d in LV_DESIGNS])
    fit = output_error(LV.model, ts, Us, LV.p_true * 1.05, u0 * 1.1, sigma=sig)
    assert fit.success and fit.u0.shape == (3, 2)

    def stacked(theta):
        out = []
        for e in range(3):
            U = pw.solve(
                LV.model, theta[:4], theta[4 + 2 * e : 6 + 2 * e], ts[e], rtol=1e-11, atol=1e-12
            )
            out.append(((U - Us[e]) / sig[e]).ravel())
        return np.concatenate(out)

    theta = np.concatenate([fit.p, fit.u0.ravel()])
    r = stacked(theta)
    assert fit.cost == pytest.approx(0.5 * r @ r, rel=1e-5)
    fd = central_differences(stacked, theta, 1e-6, floor=1.0)
    np.testing.assert_allclose(fit.jacobian, fd, rtol=1e-4, atol=1e-5 * np.abs(fd).max())
    # first-order optimality of the joint fit, every block (p and each u0)
    g = fd.T @ r
    assert np.abs(g).max() < 1e-4 * np.linalg.norm(fd, axis=0).max() * np.linalg.norm(r)
