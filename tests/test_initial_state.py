"""Known initial states (boundary test functions) and per-entry noise weights in the kernels."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

import pymc_wendy as pw
from pymc_wendy.backends import kernel_cache
from pymc_wendy.backends.graph import plain_weak_nll
from pymc_wendy.model.inputs import Input
from pymc_wendy.weak import kernels
from pymc_wendy.weak.test_functions import bump, bump_derivative
from pymc_wendy.weak.test_functions.boundary import product_weights

LOGISTIC = pw.get_problem("logistic")
LV = pw.get_problem("lotka_volterra")


PK_PROBLEM = pw.get_problem("pk_oral")  # one oral dose at t = 0, C(0) = 0 known
PK = PK_PROBLEM.model
PK_TRUE = PK_PROBLEM.p_true


def _fd_grad(f, p, eps=1e-6):
    E = np.eye(p.size)
    return np.array([(f(p + eps * E[j]) - f(p - eps * E[j])) / (2 * eps) for j in range(p.size)])


# --- product integration -----------------------------------------------------------------------
@pytest.mark.parametrize("uniform", [True, False])
def test_product_weights_exact_for_cubics(uniform):
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 2.0, 31) if uniform else np.sort(rng.uniform(0, 2, 31))
    t[0], t[-1] = 0.0, 2.0
    r = 1.3

    def g(s):
        return bump(s / r)

    w = product_weights(t, g)
    y = 1.0 - 2.0 * t + 0.5 * t**3  # a cubic: its interpolant is itself
    exact = integrate.quad(lambda s: g(s) * (1.0 - 2.0 * s + 0.5 * s**3), 0.0, r, limit=200)[0]
    assert w @ y == pytest.approx(exact, rel=1e-9)


def test_product_weights_fourth_order():
    """Halving the spacing divides the error on a smooth integrand by about 16."""
    r = 1.0

    def g(s):
        return bump_derivative(s / r) / r

    exact = integrate.quad(lambda s: g(s) * np.sin(3 * s), 0.0, r, limit=200)[0]
    errs = []
    for n in (41, 81, 161):
        t = np.linspace(0.0, 2.0, n)
        errs.append(abs(product_weights(t, g) @ np.sin(3 * t) - exact))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all(ratios > 10), ratios


def test_product_weights_refuses_short_grid():
    with pytest.raises(ValueError, match="at least 4"):
        product_weights(np.array([0.0, 1.0, 2.0]), np.ones_like)


# --- the boundary residual ---------------------------------------------------------------------
@pytest.mark.parametrize("before", [False, True])
def test_boundary_residual_vanishes_on_exact_data(before):
    """On noise-free data the boundary row's residual is at the level of the interior rows'
    quadrature error, with t0 on the first time point or before the first observation."""
    t = np.linspace(0.0, 10.0, 201)
    U = pw.solve(LOGISTIC.model, LOGISTIC.p_true, LOGISTIC.u0, t)
    keep = slice(6, None) if before else slice(None)
    lik = pw.WeakLikelihood(
        LOGISTIC.model, t[keep], U[keep], sigma=0.01, initial_state=LOGISTIC.u0, t0=0.0
    )
    tf = lik.test_functions
    assert tf.n_boundary == 1 and lik.form.t[0] == 0.0
    assert lik.form.t.size == t[keep].size + int(before)
    r = lik.residual(LOGISTIC.p_true)
    scale = np.linalg.norm(lik.dphi[-1]) * np.max(np.abs(U))
    assert abs(r[-1]) < 1e-6 * scale
    # a wrong initial state shows in the boundary row only
    wrong = pw.WeakLikelihood(
        LOGISTIC.model, t[keep], U[keep], sigma=0.01, initial_state=[0.05], t0=0.0
    )
    rw = wrong.residual(LOGISTIC.p_true)
    assert abs(rw[-1]) > 1e3 * abs(r[-1])
    np.testing.assert_allclose(rw[:-1], r[:-1], atol=1e-6 * scale)


def test_known_row_is_exact_in_the_covariance():
    """The known state's row has noise weight zero: S is L diag(sigma^2 w) L' with the
    linearisation's columns at t0 left out."""
    d = LV.simulate(n_points=81, noise_ratio=0.05, seed=2)
    lik = pw.WeakLikelihood(LV.model, d.t, d.U, sigma=[0.1, 0.2], initial_state=LV.u0, ridge=0)
    p = LV.p_true * 1.05
    Ju = LV.model.evaluate("f_u", lik.form.t, lik.form.X, p)
    L = kernels.linearisation(lik.phi, lik.dphi, Ju)  # [d, k, e, m]
    L[:, :, :, 0] = 0.0
    n = lik.n_residuals
    L2 = L.reshape(n, -1)
    v = np.repeat(np.array([0.1, 0.2]) ** 2, lik.form.t.size)
    np.testing.assert_allclose(lik.covariance(p), (L2 * v) @ L2.T, rtol=1e-10, atol=1e-14)


# --- derivatives and backends with noise weights -----------------------------------------------
def _weighted(lik, seed=0):
    """The same likelihood with random per-entry noise weights (and the known row's zero)."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.3, 3.0, lik.form.X.shape)
    if lik.form.weights is not None:
        w[lik.form.weights == 0] = 0.0
    lik.form.weights = w
    lik._linear_cache = None
    return lik


def _likelihoods():
    d = LV.simulate(n_points=61, noise_ratio=0.05, seed=4)
    lv = pw.WeakLikelihood(LV.model, d.t, d.U, sigma=[0.2, 0.3], linear="general")
    lv0 = pw.WeakLikelihood(
        LV.model, d.t[3:], d.U[3:], sigma=[0.2, 0.3], initial_state=LV.u0, t0=0.0,
        linear="general",
    )  # fmt: skip
    head = pw.get_problem("head_acceleration")
    h = head.simulate(n_points=201, noise_ratio=0.02, seed=1)
    op = pw.WeakLikelihood(head.model, h.t, h.U, sigma=0.05, inputs=h.inputs, linear="general")
    return {
        "lv": (_weighted(lv), LV.p_true),
        "lv_known": (_weighted(lv0), LV.p_true),
        "operator": (_weighted(op), head.p_true),
    }


LIKS = _likelihoods()


@pytest.mark.parametrize("name", list(LIKS))
def test_weighted_gradients_against_finite_differences(name):
    lik, p_true = LIKS[name]
    p = p_true * 1.03
    s = lik.sigma * 1.2
    _, g = lik.nll_grad(p, s)
    np.testing.assert_allclose(g, _fd_grad(lambda q: lik.nll(q, s), p), rtol=2e-5, atol=1e-6)
    _, _, gs2 = lik.nll_grad_sigma2(p, s)
    fd_s2 = _fd_grad(lambda v: lik.nll(p, np.sqrt(v)), s**2, eps=1e-8)
    np.testing.assert_allclose(gs2, fd_s2, rtol=2e-5, atol=1e-6)
    H = lik.hessian(p, s)
    Hfd = np.array([_fd_grad(lambda q, j=j: lik.nll_grad(q, s)[1][j], p) for j in range(p.size)])
    np.testing.assert_allclose(H, Hfd, rtol=1e-4, atol=1e-4 * np.abs(H).max())


@pytest.mark.parametrize("name", list(LIKS))
def test_weighted_numba_kernel_matches_numpy(name):
    lik, p_true = LIKS[name]
    p = p_true * 0.97
    s2 = lik.sigma**2 * 0.8
    kernel = kernel_cache.make_kernel(lik, infer_sigma=True, want_grad=True)
    nll, gp, gs = kernel(p, s2, 0.0)
    v, g, g2 = lik.nll_grad_sigma2(p, np.sqrt(s2))
    assert nll == pytest.approx(v, rel=1e-10)
    np.testing.assert_allclose(gp, g, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(gs, g2, rtol=1e-8, atol=1e-8)


def test_weighted_linear_path_matches_general():
    """Lotka-Volterra is linear in its parameters: the precomputed covariance carries the
    weights too (numpy and compiled)."""
    lik, p_true = LIKS["lv_known"]
    fast = pw.WeakLikelihood(
        LV.model, lik.t, lik.U, sigma=lik.sigma, initial_state=LV.u0, t0=0.0, linear="fast"
    )
    fast.form.weights = lik.form.weights
    p = p_true * 1.02
    assert fast.nll_grad(p)[0] == pytest.approx(lik.nll_grad(p)[0], rel=1e-10)
    np.testing.assert_allclose(fast.nll_grad(p)[1], lik.nll_grad(p)[1], rtol=1e-8)
    kernel = kernel_cache.make_kernel(fast, infer_sigma=False, want_grad=True)
    nll, gp, _ = kernel(p, np.zeros(0), 0.0)
    assert nll == pytest.approx(lik.nll(p), rel=1e-10)


@pytest.mark.slow
def test_weighted_plain_graph_matches():
    import pytensor
    import pytensor.tensor as pt

    lik, p_true = LIKS["lv_known"]
    p = pt.vector("p")
    f = pytensor.function([p], plain_weak_nll(lik, p))
    assert float(f(p_true * 1.01)) == pytest.approx(lik.nll(p_true * 1.01), rel=1e-9)


# --- fits ----------------------------------------------------------------------------------------
def _pk_data(n, first, noise, seed):
    t = np.linspace(first, 24.0, n)
    U = pw.solve(PK, PK_TRUE, [0.0], np.concatenate([[0.0], t]))[1:]
    sd = noise * np.sqrt(np.mean(U**2))
    return t, U + np.random.default_rng(seed).normal(size=U.shape) * sd


def test_known_initial_state_before_first_observation_informs_absorption():
    """A dose at t = 0 with C(0) = 0 known, first sample at 0.5 h: the rise is unobserved,
    and only the known state pins the absorption rate and the amplitude."""
    t, U = _pk_data(101, 0.5, 0.05, seed=1)
    free = pw.fit(PK, t, U, p0=PK_TRUE)
    known = pw.fit(PK, t, U, p0=PK_TRUE, initial_state=[0.0], t0=0.0)
    assert known.success
    assert np.all(np.abs(known.x - PK_TRUE) < 3 * known.stderr)
    # measured over 100 data sets: median se 0.066 / 0.0029 / 0.13 against 0.27 / 0.0034 / 3.4
    assert known.stderr[0] < 0.5 * free.stderr[0]
    assert known.stderr[2] < 0.2 * free.stderr[2]


def _exact_stderr(model, p, t, sd) -> np.ndarray:
    """Standard errors of the exact (forward-solve) likelihood: Fisher information from
    central differences of the solution at the data times, C(0) = 0 known."""
    times = np.r_[0.0, t]
    J = np.empty((t.size, p.size))
    for j in range(p.size):
        e = np.zeros(p.size)
        e[j] = 1e-6 * p[j]
        hi, lo = (pw.solve(model, q, [0.0], times, rtol=1e-12, atol=1e-12) for q in (p + e, p - e))
        J[:, j] = (hi[1:, 0] - lo[1:, 0]) / (2 * e[j])
    return sd * np.sqrt(np.diag(np.linalg.inv(J.T @ J)))


def test_known_initial_state_on_a_nonuniform_design():
    """Geometric sampling (dense after the dose, sparse later), as in pharmacokinetic
    studies: product integration for every row, radii reaching down into the dense start.
    The known state then gives standard errors close to the exact likelihood's (median ratio
    1.14 / 0.92 / 1.03 over these four data sets; 2.0 / 1.1 / 1.4 before the radii reached
    down, and a bias of 3 se in ke while narrow bumps were integrated on the pieces' own
    nodes). On 200 data sets of this design (noise level from the fit) the coverage of 95 %
    intervals was 0.98 / 0.96 / 0.96 (mean z +0.06 / -0.18 / -0.10)."""
    t = np.geomspace(0.25, 24.0, 41)
    U0 = pw.solve(PK, PK_TRUE, [0.0], np.r_[0.0, t])[1:]
    sd = 0.05 * np.sqrt(np.mean(U0**2))
    exact = _exact_stderr(PK, PK_TRUE, t, sd)
    ratios, gains = [], []
    for seed in range(4):
        U = U0 + np.random.default_rng(seed).normal(size=U0.shape) * sd
        known = pw.fit(PK, t, U, p0=PK_TRUE, initial_state=[0.0], t0=0.0)
        free = pw.fit(PK, t, U, p0=PK_TRUE)
        assert known.likelihood.test_functions.quadrature == "product"
        assert known.success and np.all(np.abs(known.x - PK_TRUE) < 3 * known.stderr)
        ratios.append(known.stderr / exact)
        gains.append(known.stderr / free.stderr)
    ratio = np.median(ratios, axis=0)
    assert np.all((ratio > 0.8) & (ratio < 1.4)), ratio
    assert np.median(gains, axis=0)[2] < 0.8


def _infusion():
    """One compartment, an intravenous infusion over the first 2 h (a known input)."""

    def rhs(t, u, p, w):
        return [p[0] * w[0] - p[1] * u[0]]

    model = pw.ODEModel(rhs, states=["C"], params=["k_in", "ke"], inputs=["rate"], name="iv")
    return model, {"rate": Input.pulse(0.0, 2.0)}, np.array([5.0, 0.3])


def test_known_initial_state_with_an_input():
    """First-order models with known inputs take the operator form: the boundary row's
    integral of the input is exact, the compiled kernel agrees, and the known C(0) = 0 with
    the first sample at 0.5 h (mid-infusion) pins k_in."""
    model, inputs, p_true = _infusion()
    t = np.linspace(0.5, 12.0, 81)
    clean = pw.solve(model, p_true, [0.0], np.r_[0.0, t], inputs=inputs)[1:]
    lik = pw.WeakLikelihood(model, t, clean, sigma=0.05, inputs=inputs, initial_state=[0.0], t0=0.0)
    assert lik.form.kind == "operator" and lik.test_functions.n_boundary == 1
    # in noise units (the infusion's end is a kink of C that no quadrature integrates to
    # round-off): 0.005 for the boundary row against up to 0.11 for the interior ones
    z = lik.residual(p_true) / np.sqrt(np.diag(lik.covariance(p_true)))
    assert abs(z[-1]) < 0.05 and abs(z[-1]) < np.max(np.abs(z[:-1]))
    noisy = clean + np.random.default_rng(2).normal(size=clean.shape) * 0.05
    lik = pw.WeakLikelihood(model, t, noisy, sigma=0.05, inputs=inputs, initial_state=[0.0], t0=0.0)
    p = p_true * 1.05
    _, g = lik.nll_grad(p)
    np.testing.assert_allclose(g, _fd_grad(lik.nll, p), rtol=1e-5)
    kernel = kernel_cache.make_kernel(lik, infer_sigma=True, want_grad=True)
    nll, gp, gs = kernel(p, lik.sigma**2, 0.0)
    v, g2, gs2 = lik.nll_grad_sigma2(p)
    assert nll == pytest.approx(v, rel=1e-10)
    np.testing.assert_allclose(gp, g2, rtol=1e-8)
    known = pw.fit(model, t, noisy, inputs=inputs, initial_state=[0.0], t0=0.0, p0=p_true)
    free = pw.fit(model, t, noisy, inputs=inputs, p0=p_true)
    assert known.success and np.all(np.abs(known.x - p_true) < 3 * known.stderr)
    assert known.stderr[0] < free.stderr[0]


def test_known_initial_state_is_unit_free():
    t, U = _pk_data(101, 0.5, 0.05, seed=2)
    base = pw.fit(PK, t, U, p0=PK_TRUE, initial_state=[0.0], t0=0.0)
    ct, cu = 60.0, 1e-3  # hours -> minutes, mg/L -> g/L
    p0 = PK_TRUE * np.array([1 / ct, 1 / ct, cu])
    scaled = pw.fit(PK, t * ct, U * cu, p0=p0, initial_state=[0.0], t0=0.0)
    back = np.array([ct, ct, 1 / cu])
    np.testing.assert_allclose(scaled.x * back, base.x, rtol=1e-6)
    np.testing.assert_allclose(scaled.stderr * back, base.stderr, rtol=1e-6)


def test_initial_state_by_name_and_datetime_t0():
    import pandas as pd

    d = LV.simulate(n_points=81, noise_ratio=0.02, seed=5)
    days = pd.Timestamp("2024-01-01") + pd.to_timedelta(d.t[2:], unit="D")
    frame = pd.DataFrame(d.U[2:], index=days, columns=["x", "y"])
    res = pw.fit(
        LV.model, None, frame, initial_state={"y": LV.u0[1], "x": LV.u0[0]},
        t0=pd.Timestamp("2024-01-01"),
    )  # fmt: skip
    ref = pw.fit(LV.model, d.t[2:], d.U[2:], initial_state=LV.u0, t0=0.0)
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-8)
    assert res.likelihood.initial_state.t0 == pytest.approx(-d.t[2])


@pytest.mark.slow
def test_weak_ode_likelihood_with_initial_state():
    import pymc as pm

    t, U = _pk_data(61, 0.5, 0.05, seed=3)
    lik = pw.WeakLikelihood(PK, t, U, sigma=0.3, initial_state=[0.0], t0=0.0)
    with pm.Model() as m:
        p = pm.LogNormal("p", mu=np.log(PK_TRUE), sigma=1.0, shape=3)
        pw.WeakODELikelihood(
            "C", ode=PK, params=p, t=t, observed=U, sigma=0.3, initial_state=[0.0], t0=0.0
        )
    logp = m.compile_logp(jacobian=False, sum=False)
    point = {"p_log__": np.log(PK_TRUE * 1.1)}
    assert float(logp(point)[-1]) == pytest.approx(-lik.nll(PK_TRUE * 1.1), rel=1e-9)
    dlogp = m.compile_dlogp(jacobian=False)
    assert np.all(np.isfinite(dlogp(point)))
    # predictive draws solve from the known state at t0, before the first observation
    traj = m["C"].owner.op.trajectory(PK_TRUE, np.full(1, np.nan))
    np.testing.assert_allclose(traj, pw.solve(PK, PK_TRUE, [0.0], np.r_[0.0, t])[1:], rtol=1e-6)


# --- an initial state with a prior ------------------------------------------------------------
def _free(t0: float, noise: str = "normal"):
    """pk_oral on a geometric design, built with some initial state (its row is replaced)."""
    t, U = _pk_data(30, 0.5, 0.05, seed=4)
    if noise == "lognormal":  # multiplicative noise keeps the decaying tail positive
        U = _pk_data(30, 0.5, 0.0, seed=4)[1] * np.exp(
            0.05 * np.random.default_rng(4).normal(size=U.shape)
        )
    sigma = 0.05 if noise == "lognormal" else 0.3
    u0 = [0.5] if noise == "lognormal" else [0.0]
    return pw.WeakLikelihood(PK, t, U, sigma=sigma, initial_state=u0, t0=t0, noise=noise)


@pytest.mark.parametrize("t0, noise", [(0.0, "normal"), (0.5, "normal"), (0.0, "lognormal")])
def test_free_initial_gradients_against_finite_differences(t0, noise):
    lik = _free(t0, noise)
    p, x0, s2 = PK_TRUE * [0.9, 1.1, 0.95], np.array([0.2]), np.array([0.5 * lik.sigma[0] ** 2])
    nll, gp, gx, gs = lik.initial_nll_grad(p, x0, s2)
    np.testing.assert_allclose(
        gp, _fd_grad(lambda q: lik.initial_nll_grad(q, x0, s2)[0], p), rtol=1e-5
    )
    np.testing.assert_allclose(
        gx, _fd_grad(lambda q: lik.initial_nll_grad(p, q, s2)[0], x0), rtol=1e-5
    )
    fd_s = _fd_grad(lambda q: lik.initial_nll_grad(p, x0, q)[0], s2, eps=1e-7 * s2[0])
    np.testing.assert_allclose(gs, fd_s, rtol=1e-5)
    # at the known value it is the likelihood with that known state
    known = lik.initial_state.u0
    x_known = np.log(known) if noise == "lognormal" else known
    assert lik.initial_nll_grad(p, x_known)[0] == pytest.approx(lik.nll(p), rel=1e-12)


@pytest.mark.slow  # the plain graph's numba compilation: 30-50 s cold
@pytest.mark.parametrize("t0", [0.0, 0.5])
def test_free_initial_numba_and_plain_graph_match_numpy(t0):
    import pytensor
    import pytensor.tensor as pt

    lik = _free(t0)
    p, x0, s2 = PK_TRUE * [1.1, 0.9, 1.05], np.array([0.3]), np.array([0.08])
    nll, gp, gx, gs = lik.initial_nll_grad(p, x0, s2)
    kernel = kernel_cache.make_kernel(lik, infer_sigma=True, want_grad=True, free_initial=True)
    k_nll, k_g, k_gs = kernel(np.r_[p, x0], s2, 0.0)
    np.testing.assert_allclose(k_nll, nll, rtol=1e-10)
    np.testing.assert_allclose(k_g, np.r_[gp, gx], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(k_gs, gs, rtol=1e-8)
    q, v = pt.vector("q"), pt.vector("v")
    graph = plain_weak_nll(lik, q[:3], v, x0=q[3:])
    f = pytensor.function([q, v], [graph, pytensor.grad(graph, q)])
    g_nll, g_g = f(np.r_[p, x0], s2)
    np.testing.assert_allclose(g_nll, nll, rtol=1e-10)
    np.testing.assert_allclose(g_g, np.r_[gp, gx], rtol=1e-7, atol=1e-9)


def test_free_initial_op_verify_grad():
    import pytensor

    from pymc_wendy.backends.op import weak_loglik

    lik = _free(0.0)
    rng = np.random.default_rng(1)
    point = np.r_[PK_TRUE * 0.95, 0.1]
    pytensor.gradient.verify_grad(lambda q: weak_loglik(lik, q[:3], x0=q[3:]), [point], rng=rng)
    pytensor.gradient.verify_grad(
        lambda q, s: weak_loglik(lik, q[:3], sigma=s, x0=q[3:]), [point, np.array(0.4)], rng=rng
    )


@pytest.mark.slow
def test_initial_state_with_a_prior_in_pymc():
    """A prior on C(0) instead of the known 0: with a tight prior at 0 the posterior is the
    known state's; with a wide one it is wider in the amplitude, which C(0) trades against."""
    import pymc as pm

    t = np.geomspace(0.5, 24.0, 30)  # the rise sampled densely (docs/data.md)
    C = pw.solve(PK, PK_TRUE, [0.0], np.r_[0.0, t])[1:]
    sd = 0.1 * np.sqrt(np.mean(C**2))
    U = C + sd * np.random.default_rng(5).normal(size=C.shape)
    summaries = {}
    for label in ("known", "tight", "wide"):
        with pm.Model():
            p = pm.LogNormal("p", mu=np.log(PK_TRUE), sigma=1.0, shape=3)
            scale = {"tight": 1e-3, "wide": 1.0}.get(label)
            init = [0.0] if scale is None else pm.Normal("c0", 0.0, scale, shape=1)
            pw.WeakODELikelihood(
                "C", ode=PK, params=p, t=t, observed=U, sigma=sd, initial_state=init, t0=0.0
            )
            idata = pw.sample(500, chains=2, progressbar=False, random_seed=3, check=False)
        post = idata.posterior["p"].values.reshape(-1, 3)
        summaries[label] = (post.mean(0), post.std(0))
        assert int(idata.sample_stats["diverging"].sum()) == 0
    (m_k, s_k), (m_t, s_t), (_, s_w) = summaries["known"], summaries["tight"], summaries["wide"]
    assert np.all(np.abs(m_t - m_k) < 0.25 * s_k)  # Monte Carlo error of 1000 draws
    assert np.all((s_t / s_k > 0.8) & (s_t / s_k < 1.25))
    assert s_w[2] > 1.3 * s_k[2]


def test_initial_state_prior_predictive_solves_from_the_drawn_state():
    import pymc as pm

    t, U = _pk_data(30, 0.5, 0.05, seed=6)
    with pm.Model() as m:
        c0 = pm.Normal("c0", 0.0, 1.0, shape=1)
        pw.WeakODELikelihood(
            "C", ode=PK, params=PK_TRUE, t=t, observed=U, sigma=0.3, initial_state=c0, t0=0.0
        )
    op = m["C"].owner.op
    assert op.free_initial
    traj = op.trajectory(PK_TRUE, np.array([2.0]))
    np.testing.assert_allclose(traj, pw.solve(PK, PK_TRUE, [2.0], np.r_[0.0, t])[1:], rtol=1e-6)
    logp = m.compile_logp(sum=False)
    lik = pw.WeakLikelihood(PK, t, U, sigma=0.3, initial_state=[0.7], t0=0.0)
    assert float(logp({"c0": np.array([0.7])})[-1]) == pytest.approx(-lik.nll(PK_TRUE), rel=1e-9)


def test_output_error_solves_from_a_known_initial_state():
    """oels and hybrid take a known initial state: only p is fitted and every solve starts
    at t0, here before the first sample (oral PK, C(0) = 0 at t = 0, 40 samples from 0.6 h).
    The estimate is the least squares of the closed-form solution (scipy, none of ours)."""
    from scipy.optimize import curve_fit

    pk = pw.get_problem("pk_oral")
    d = pk.simulate(n_points=41, noise_ratio=0.1, seed=0)
    t, U = d.t[1:], d.U[1:]
    assert t[0] > 0

    def closed_form(s, ka, ke, a):
        return a * ka / (ka - ke) * (np.exp(-ke * s) - np.exp(-ka * s))

    ref, _ = curve_fit(closed_form, t, U[:, 0], p0=pk.p_true, xtol=1e-12, ftol=1e-12)
    known = {"initial_state": [0.0], "t0": 0.0, "bounds": pk.bounds}
    oe = pw.fit(pk.model, t, U, method="oels", **known)
    hybrid = pw.fit(pk.model, t, U, method="hybrid", **known)
    for res in (oe, hybrid):
        assert res.success and res.identifiability.identifiable
        np.testing.assert_allclose(res.x, ref, rtol=1e-4)
        np.testing.assert_array_equal(res.u0, [0.0])
        assert np.all(np.abs(res.x - pk.p_true) < 3 * res.stderr)
        # the trajectory from the known state at t = 0, not from u0 put at t[0]
        np.testing.assert_allclose(res.simulate()[:, 0], closed_form(t, *res.x), rtol=1e-5)
    assert hybrid.status == "output_error"
