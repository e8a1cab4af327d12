"""Test-function families (``pymc_wendy.weak.test_functions.families``): the registry, every
family's derivatives against finite differences, and a family added from user code."""

from __future__ import annotations

import numpy as np
import pytest

import pymc_wendy as pw
from pymc_wendy.model.simulate import solve
from pymc_wendy.weak.test_functions import (
    BSplineFamily,
    BumpFamily,
    LocalFamily,
    SineFamily,
    SpanningFamily,
    build_test_functions,
    get_family,
    list_families,
    quadrature_weights,
    register_family,
)
from pymc_wendy.weak.test_functions import families as families_module


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, so that families registered by a test do not leak."""
    monkeypatch.setattr(families_module, "_REGISTRY", dict(families_module._REGISTRY))
    return families_module._REGISTRY


def central_difference(f, t: np.ndarray, h: float) -> np.ndarray:
    """``(f(t + h) - f(t - h)) / 2h`` in the time argument of a vectorised ``f(t)`` (the
    shared ``conftest.central_differences`` steps a parameter vector one entry at a time)."""
    return (f(t + h) - f(t - h)) / (2 * h)


class PolyBump(LocalFamily):
    """The worked example: a polynomial bump ``(1 - s^2)^k``, C^(k-1) at the ends of its support."""

    name = "poly_bump"

    def __init__(self, k: int = 4):
        self.k = k

    def shape(self, s, order=0):
        psi = np.polynomial.Polynomial([1.0, 0.0, -1.0]) ** self.k
        s = np.asarray(s, dtype=float)
        return np.where(np.abs(s) < 1.0, psi.deriv(int(order))(s), 0.0)


# --- the registry ----------------------------------------------------------------------------


def test_builtin_families_are_registered_by_name():
    assert list_families()[:3] == ("bump", "sine", "bspline")
    bump = get_family("bump")
    assert isinstance(bump, BumpFamily) and isinstance(bump, LocalFamily) and bump.eta == 9.0
    assert isinstance(get_family("sine"), SineFamily) and get_family("sine").orthonormal
    assert isinstance(get_family("bspline"), BSplineFamily)
    assert isinstance(get_family("bspline"), SpanningFamily)
    assert not get_family("bspline").orthonormal
    mine = BumpFamily(eta=4.0)
    assert get_family(mine) is mine  # an instance is used as given


def test_registry_errors(registry):
    with pytest.raises(ValueError, match=r"unknown test-function family 'nope'.*'bump'"):
        get_family("nope")
    with pytest.raises(TypeError, match="name or a TestFunctionFamily"):
        get_family(3)
    with pytest.raises(ValueError, match="'bump' is already registered"):
        register_family(BumpFamily(eta=2.0))
    register_family(BumpFamily(eta=2.0), replace=True)
    assert get_family("bump").eta == 2.0
    with pytest.raises(TypeError, match="must be a TestFunctionFamily"):
        register_family(object())

    class Nameless(PolyBump):
        name = ""

    with pytest.raises(ValueError, match="non-empty string `name`"):
        register_family(Nameless())
    with pytest.raises(ValueError, match="eta must be a positive"):
        BumpFamily(eta=-1.0)


def test_register_family_works_as_a_class_decorator(registry):
    @register_family
    class Wide(PolyBump):
        name = "wide_poly"

    assert isinstance(Wide, type) and isinstance(get_family("wide_poly"), Wide)
    assert "wide_poly" in list_families()


# --- derivatives against finite differences --------------------------------------------------

CENTRES = np.array([1.0, 2.5])
WIDTHS = np.array([0.8, 1.5])
# inside both supports' interiors and away from the B-spline knots (at 1 +- 0.8 k/4, ...)
TIMES = np.linspace(0.35, 1.7, 12) + 0.0123


@pytest.mark.parametrize(
    "family, n, orders",
    [
        (BumpFamily(), 1, 4),
        (BumpFamily(eta=3.0), 1, 3),
        (PolyBump(), 1, 4),
        (SineFamily(), 5, 4),
        (BSplineFamily(), 6, 3),
    ],
    ids=["bump", "bump_eta3", "poly_bump", "sine", "bspline"],
)
def test_derivatives_match_finite_differences(family, n, orders):
    h = 1e-5
    for order in range(1, orders + 1):
        exact = family.evaluate(TIMES, CENTRES, WIDTHS, order=order, n=n)
        fd = central_difference(
            lambda x, k=order: family.evaluate(x, CENTRES, WIDTHS, order=k - 1, n=n), TIMES, h
        )
        assert exact.shape == (CENTRES.size * n, TIMES.size)
        scale = np.max(np.abs(exact))
        np.testing.assert_allclose(fd, exact, rtol=0, atol=1e-6 * scale, err_msg=f"order {order}")


@pytest.mark.parametrize("family, n", [(BumpFamily(), 1), (PolyBump(), 1), (SineFamily(), 3)])
def test_functions_vanish_at_and_outside_their_support(family, n):
    for c, r in zip(CENTRES, WIDTHS, strict=True):
        values = family.evaluate(np.array([c - r, c + r, c - 3 * r, c + 3 * r]), c, r, n=n)
        np.testing.assert_allclose(values[:, :2], 0.0, atol=1e-12)  # at the ends
        np.testing.assert_array_equal(values[:, 2:], 0.0)  # outside


def test_local_shape_and_time_derivatives_agree():
    fam = BumpFamily()
    t = np.linspace(0.3, 1.7, 9)
    s = (t - 1.0) / 0.8
    np.testing.assert_array_equal(fam.evaluate(t, 1.0, 0.8), fam.shape(s)[None])
    np.testing.assert_allclose(fam.evaluate(t, 1.0, 0.8, order=2), fam.shape(s, 2)[None] / 0.64)
    with pytest.raises(ValueError, match="one function per support"):
        fam.evaluate(t, 1.0, 0.8, n=2)
    with pytest.raises(ValueError, match="order must be >= 0"):
        fam.evaluate(t, 1.0, 0.8, order=-1)
    np.testing.assert_array_equal(BSplineFamily().evaluate(t, 1.0, 0.8, order=4, n=3), 0.0)


# --- build_test_functions with a family -----------------------------------------------------


def _data(n=201):
    t = np.linspace(0.0, 10.0, n)
    U = 1.0 / (1.0 + 99.0 * np.exp(-t))
    return t, (U + 0.02 * np.random.default_rng(0).standard_normal(n))[:, None]


def test_default_family_is_the_bump_bit_for_bit():
    t, U = _data()
    default = build_test_functions(t, U)
    for tf in (
        build_test_functions(t, U, family="bump"),
        build_test_functions(t, U, family=BumpFamily(9.0)),
        build_test_functions(t, U, eta=9.0),
    ):
        np.testing.assert_array_equal(tf.phi, default.phi)
        np.testing.assert_array_equal(tf.dphi, default.dphi)
    assert isinstance(default.family, BumpFamily) and default.eta == 9.0


def test_build_needs_a_local_family_and_eta_only_with_the_bump():
    t, U = _data(101)
    with pytest.raises(ValueError, match="'sine' family has several functions per support"):
        build_test_functions(t, U, family="sine")
    with pytest.raises(ValueError, match="eta is the shape parameter of the 'bump' family"):
        build_test_functions(t, U, family=PolyBump(), eta=3.0)
    with pytest.raises(ValueError, match="unknown test-function family"):
        build_test_functions(t, U, family="nope")


def test_worked_example_a_user_family_in_build_and_in_the_likelihood(registry):
    register_family(PolyBump(k=4))
    t, U = _data()
    tf = build_test_functions(t, U, family="poly_bump")
    assert tf.family.name == "poly_bump" and np.isnan(tf.eta)
    np.testing.assert_allclose(tf.phi @ tf.phi.T, np.eye(tf.K), atol=1e-10)
    w = quadrature_weights(t)
    np.testing.assert_allclose(tf.phi, tf.evaluate(t) * w, atol=1e-9)
    np.testing.assert_allclose(tf.dphi, tf.evaluate(t, 1) * w, atol=1e-7 * np.abs(tf.dphi).max())
    # integration by parts on the grid: int phi' x = -int phi x' for a smooth x
    x = np.sin(t)
    lhs, rhs = tf.dphi @ x, -tf.phi @ np.cos(t)
    assert np.max(np.abs(lhs - rhs)) < 1e-3 * np.max(np.abs(rhs))
    bump = build_test_functions(t, U)
    assert tf.phi.shape != bump.phi.shape or not np.allclose(tf.phi, bump.phi)

    prob = pw.get_problem("logistic")
    data = prob.simulate(n_points=201, noise_ratio=0.02, seed=0)
    for spec in ("poly_bump", PolyBump(k=4)):
        lik = pw.WeakLikelihood(prob.model, data.t, data.U, test_functions={"family": spec})
        assert lik.test_functions.family.name == "poly_bump"
    res = pw.fit(prob.model, data.t, data.U, test_functions={"family": "poly_bump"})
    assert np.all(np.abs(res.x - prob.p_true) < 4 * res.stderr)


# --- a spanning family from user code in the oc baseline -------------------------------------


class LegendreSpan(SpanningFamily):
    """``(1 - s^2) s^l`` on ``[lo, hi]`` (``s`` mapped to ``[-1, 1]``), ``l = 0..n-1``; not
    orthonormal, so ``oc`` orthonormalises it."""

    name = "poly_span"

    def on_interval(self, t, lo, hi, order=0, n=1):
        c, r = (lo + hi) / 2, (hi - lo) / 2
        s = (np.asarray(t, dtype=float) - c) / r
        bubble = np.polynomial.Polynomial([1.0, 0.0, -1.0])
        rows = [
            (bubble * np.polynomial.Polynomial.basis(j)).deriv(order)(s) / r**order
            for j in range(n)
        ]
        return np.where(np.abs(s) <= 1, np.array(rows), 0.0)


def test_oc_uses_the_registry(registry):
    from pymc_wendy.estimators import oc

    assert oc.usable_families() == ("sine", "bspline")
    register_family(LegendreSpan())
    assert oc.usable_families() == ("sine", "bspline", "poly_span")
    prob = pw.get_problem("logistic")
    t = np.linspace(0, 10, 101)
    U = solve(prob.model, prob.p_true, prob.u0, t)
    U = U + 0.01 * np.random.default_rng(2).standard_normal(U.shape)
    for spec in ("poly_span", LegendreSpan()):
        res = pw.fit(prob.model, t, U, method="oc", options={"test_functions": spec, "n_test": 4})
        assert res.history["test_functions"] == "poly_span"
        np.testing.assert_allclose(res.x, prob.p_true, rtol=0.05)
    with pytest.raises(ValueError, match=r"test_functions.*'sine', 'bspline', 'poly_span'.*bump"):
        pw.fit(prob.model, t, U, method="oc", options={"test_functions": "bump"})
