"""The likelihood interface (pymc_wendy.weak.protocol) and the registry of weak forms."""

from __future__ import annotations

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.weak import bias, form
from pymc_wendy.weak.first_order import FirstOrderForm
from pymc_wendy.weak.operator import OperatorForm
from pymc_wendy.weak.protocol import Correction, Likelihood


@pytest.fixture(scope="module")
def lv():
    prob = pw.get_problem("lotka_volterra")
    a = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    b = prob.simulate(n_points=97, noise_ratio=0.05, seed=2)
    one = pw.WeakLikelihood(prob.model, a.t, a.U)
    two = pw.WeakLikelihood(prob.model, b.t, b.U)
    return prob, one, two, pw.JointLikelihood([one, two])


def test_every_likelihood_implements_the_interface(lv):
    prob, one, _, joint = lv
    for lik in (one, joint, one.corrected("profile", np.zeros(4), prob.p_true)):
        assert isinstance(lik, Likelihood)
    assert one.experiments == (one,) and len(joint.experiments) == 2
    assert not isinstance(prob.model, Likelihood)


def test_form_is_chosen_from_the_model(lv):
    prob, one, _, _ = lv
    assert isinstance(one.form, FirstOrderForm) and one.form.kind == "general"
    head = pw.get_problem("head_acceleration")
    d = head.simulate(n_points=101, noise_ratio=0.05, seed=0)
    lik = pw.WeakLikelihood(head.model, d.t, d.U, inputs=head.inputs)
    assert isinstance(lik.form, OperatorForm) and lik.form.kind == "operator"
    # the operator form cannot work on log u: log-normal noise gets proportional weights there
    # (docs/observation.md), and the form itself refuses a log-scale observation model
    lik = pw.WeakLikelihood(head.model, d.t, np.abs(d.U) + 1, inputs=head.inputs, noise="lognormal")
    assert lik.noise == "proportional" and lik.observation.name == "lognormal"
    with pytest.raises(ValueError, match="cannot work on log u"):
        OperatorForm.check_noise(head.model, pw.LogNormal())


def test_a_registered_form_is_used_by_the_likelihood_and_the_op(lv, monkeypatch):
    """A new kind of model is one WeakForm subclass: registered, it serves the likelihood, its
    estimators and (through its kind's kernel builder) the compiled Op."""
    prob, one, _, _ = lv
    monkeypatch.setattr(form, "_FORMS", list(form._FORMS))
    calls = []

    @form.register_form
    class CountingForm(FirstOrderForm):
        @classmethod
        def accepts(cls, model):
            return model.name == prob.model.name

        def residual(self, p):
            calls.append("residual")
            return super().residual(p)

    assert form.form_for(prob.model) is CountingForm
    lik = pw.WeakLikelihood(
        prob.model, one.t, one.U, test_functions=one.test_functions, linear="general"
    )
    assert isinstance(lik.form, CountingForm)
    np.testing.assert_array_equal(lik.residual(prob.p_true), one.residual(prob.p_true))
    assert calls == ["residual"]
    assert lik.nll(prob.p_true) == pytest.approx(one.nll(prob.p_true), rel=1e-10)
    from pymc_wendy.backends import kernel_cache

    value = kernel_cache.make_kernel(lik, infer_sigma=False, want_grad=True)(prob.p_true, None, 0)
    assert value[0] == pytest.approx(one.nll(prob.p_true), rel=1e-10)
    with pytest.raises(TypeError, match="WeakForm subclass"):
        form.register_form(object)


def test_joint_interface_is_the_sum_of_its_experiments(lv):
    prob, one, two, joint = lv
    p = prob.p_true * 1.02
    assert joint.exact_hessian_is_cheap
    assert one.exact_hessian_is_cheap  # Lotka-Volterra is linear in p: the fast path
    value, grad, state = joint.newton_point(p)
    assert value == pytest.approx(one.nll(p) + two.nll(p), rel=1e-12)
    np.testing.assert_allclose(grad, one.nll_grad(p)[1] + two.nll_grad(p)[1], rtol=1e-10)
    np.testing.assert_allclose(
        joint.newton_hessian(state), one.hessian(p) + two.hessian(p), rtol=1e-10
    )
    C = joint.covariance_factor(p)
    cov = joint.covariance(p)
    # a matrix product is exact to rounding relative to the matrix's scale, not per entry: an
    # entry that is a cancellation (3e-5 in a matrix of entries ~10) differs in its 11th
    # digit with the BLAS's summation order
    np.testing.assert_allclose(C @ C.T, cov, rtol=1e-12, atol=1e-13 * np.abs(cov).max())
    np.testing.assert_allclose(joint.score_mean(p), one.score_mean(p) + two.score_mean(p))
    np.testing.assert_array_equal(bias.score_mean(joint, p), joint.score_mean(p))


def test_single_interface_pieces(lv):
    prob, one, _, _ = lv
    p = prob.p_true * 0.97
    C = one.covariance_factor(p)
    np.testing.assert_allclose(C @ C.T, one.covariance(p), rtol=1e-12)
    value, grad, state = one.newton_point(p)
    v2, g2 = one.nll_grad(p)
    assert value == pytest.approx(v2, rel=1e-10)
    np.testing.assert_allclose(grad, g2, rtol=1e-8)
    np.testing.assert_allclose(one.newton_hessian(state), one.hessian(p), rtol=1e-10)
    relaxed = one.relaxed_nll_grad_sigma2(p, one.sigma**2, 0.0, 1.0)
    exact = one.nll_grad_sigma2(p)
    assert relaxed[0] == pytest.approx(exact[0], rel=1e-12)
    np.testing.assert_allclose(relaxed[1], exact[1], rtol=1e-10)
    np.testing.assert_allclose(relaxed[2], exact[2], rtol=1e-10)
    with pytest.raises(ValueError, match="alpha must be in"):
        one.relaxed_nll_grad_sigma2(p, one.sigma**2, 1.5, 1.0)
    with pytest.raises(ValueError, match="p must have shape"):
        one.check_params([1.0, 2.0])


def test_correction_is_a_public_record(lv):
    prob, one, _, joint = lv
    tilt = np.array([0.1, -0.2, 0.0, 0.3])
    c1 = one.corrected("analytic", tilt, prob.p_true)
    assert isinstance(c1.correction, Correction) and c1.correction.method == "analytic"
    np.testing.assert_array_equal(c1.tilt, tilt)
    assert c1.nll(prob.p_true) == pytest.approx(one.nll(prob.p_true), rel=1e-12)
    cj = joint.corrected("analytic", tilt, prob.p_true)
    assert cj.correction.method == "analytic" and cj.correction_method == "analytic"
    assert one.correction is None and joint.correction is None
    with pytest.raises(ValueError, match="tilt must be 4 finite values"):
        one.corrected("analytic", [1.0, np.nan, 0, 0], prob.p_true)
