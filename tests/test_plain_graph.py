"""The plain-pytensor reference likelihood (pymc_wendy.backends.graph) against the numpy one."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import sympy as sp

from pymc_wendy import get_problem
from pymc_wendy.backends import graph as plain
from pymc_wendy.weak.likelihood import WeakLikelihood

#: Python linker: same graph and numerics without numba compilation (~20 s per new graph, and
#: ~2 min for the first one on an empty cache). ``test_numba_backend`` covers the numba backend.
MODE = "FAST_COMPILE"

CASES = [
    ("fitzhugh_nagumo", "normal"),
    ("lotka_volterra", "normal"),
    ("lotka_volterra", "lognormal"),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request):
    name, noise = request.param
    prob = get_problem(name)
    data = prob.simulate(n_points=257, noise_ratio=0.05, seed=1, noise=noise)
    lik = WeakLikelihood(prob.model, data.t, data.U, noise=noise)
    return lik, 1.05 * prob.p_true


def test_value_and_gradient_match_numpy(case):
    lik, p = case
    fn = plain.plain_logp_function(lik, mode=MODE)
    value, grad = fn(p)
    ref_value, ref_grad = lik.nll_grad(p)
    np.testing.assert_allclose(value, lik.nll(p), rtol=1e-9)
    np.testing.assert_allclose(value, ref_value, rtol=1e-9)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6, atol=1e-9 * np.abs(ref_grad).max())


@pytest.mark.slow
def test_numba_backend():
    """Default mode (numba linker); shared data, whose compiled graph numba caches on disk."""
    prob = get_problem("fitzhugh_nagumo")
    data = prob.simulate(n_points=257, noise_ratio=0.05, seed=1)
    lik = WeakLikelihood(prob.model, data.t, data.U)
    p = 1.05 * prob.p_true
    fn = plain.plain_logp_function(lik, data="shared")
    assert "numba" in type(fn.maker.linker).__name__.lower()
    value, grad = fn(p)
    ref_value, ref_grad = lik.nll_grad(p)
    np.testing.assert_allclose(value, ref_value, rtol=1e-9)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-6, atol=1e-9 * np.abs(ref_grad).max())


def test_sigma2_input_matches_numpy(case):
    lik, p = case
    pv = pt.vector("p", dtype="float64")
    s2v = pt.vector("sigma2", dtype="float64")
    nll = plain.plain_weak_nll(lik, pv, s2v, data="shared")
    fn = pytensor.function([pv, s2v], [nll, *pytensor.grad(nll, [pv, s2v])], mode=MODE)
    s2 = (lik.sigma * np.linspace(0.8, 1.3, lik.model.n_states)) ** 2
    value, grad_p, grad_s2 = fn(p, s2)
    ref_value, ref_p, ref_s2 = lik.nll_grad_sigma2(p, sigma=np.sqrt(s2))
    np.testing.assert_allclose(value, ref_value, rtol=1e-9)
    np.testing.assert_allclose(grad_p, ref_p, rtol=1e-6, atol=1e-9 * np.abs(ref_p).max())
    np.testing.assert_allclose(grad_s2, ref_s2, rtol=1e-6)
    # the default (constant sigma) differs from this sigma2: the input is really used
    assert not np.isclose(value, lik.nll(p), rtol=1e-6)


def test_unknown_data_option(case):
    lik, _ = case
    with pytest.raises(ValueError, match="data must be"):
        plain.plain_weak_nll(lik, pt.vector("p"), data="numpy")


@pytest.mark.parametrize("name", ["sir_tdi", "goodwin_3d", "protein_transduction"])
def test_converter_matches_generated_code(name):
    """exp, t-dependence, non-integer powers and rational terms convert like the model code."""
    prob = get_problem(name)
    model = prob.model
    rng = np.random.default_rng(0)
    t = np.linspace(0.1, 2.0, 7)
    U = rng.uniform(0.2, 1.5, size=(t.size, model.n_states))
    p = prob.p_true
    env = {model._t: pt.constant(t)}
    env |= {u: pt.constant(U[:, d]) for d, u in enumerate(model._u)}
    env |= {pj: pt.constant(p[j]) for j, pj in enumerate(model._p)}
    for which in ("f", "f_u"):
        exprs = np.array(model._jacobians[which].tolist(), dtype=object)
        got = np.stack(
            [
                np.broadcast_to(plain.sympy_to_pytensor(e, env).eval(mode=MODE), t.shape)
                for e in exprs.ravel()
            ],
            axis=1,
        ).reshape(t.size, *exprs.shape)
        np.testing.assert_allclose(got, model.evaluate(which, t, U, p), rtol=1e-12, atol=1e-14)


def test_converter_piecewise_and_unknown():
    x = sp.Symbol("x", real=True)
    xv = np.array([-1.5, 0.0, 0.7, 2.0])
    env = {x: pt.constant(xv)}
    expr = sp.Piecewise((x**2, x < 0), (sp.Max(x, 1) + sp.Heaviside(x), True))
    got = plain.sympy_to_pytensor(expr, env).eval(mode=MODE)
    want = np.where(xv < 0, xv**2, np.maximum(xv, 1) + np.heaviside(xv, 0.5))
    np.testing.assert_allclose(got, want)
    with pytest.raises(NotImplementedError):
        plain.sympy_to_pytensor(sp.besselj(0, x), env)
