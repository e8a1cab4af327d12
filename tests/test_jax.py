"""The JAX backend of the weak log-likelihood Op (pymc_wendy.backends.jax_kernels) and PyMC's
JAX samplers."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

from pymc_wendy import get_problem, solve  # noqa: E402
from pymc_wendy.backends.op import WeakLogLikelihoodOp, weak_loglik  # noqa: E402
from pymc_wendy.weak.likelihood import WeakLikelihood  # noqa: E402

CASES = [("fitzhugh_nagumo", "normal"), ("lotka_volterra", "lognormal")]


@pytest.fixture(scope="module", params=CASES, ids=[f"{n}-{z}" for n, z in CASES])
def case(request):
    name, noise = request.param
    prob = get_problem(name)
    data = prob.simulate(n_points=257, noise_ratio=0.05, seed=1, noise=noise)
    lik = WeakLikelihood(prob.model, data.t, data.U, noise=noise)
    return lik, 1.05 * prob.p_true


def _assert_grad_close(grad, ref):
    np.testing.assert_allclose(grad, ref, rtol=1e-6, atol=1e-9 * np.abs(ref).max())


def test_fixed_sigma_matches_reference(case):
    lik, p0 = case
    p = pt.dvector("p")
    lp = weak_loglik(lik, p)
    fn = pytensor.function([p], [lp, pytensor.grad(lp, p)], mode="JAX")
    assert "jax" in type(fn.maker.linker).__name__.lower()
    value, grad = fn(p0)
    ref, ref_grad = lik.nll_grad(p0)
    np.testing.assert_allclose(value, -ref, rtol=1e-8)
    _assert_grad_close(grad, -ref_grad)


def test_symbolic_sigma_matches_reference(case):
    lik, p0 = case
    p, sigma = pt.dvector("p"), pt.dvector("sigma")
    lp = weak_loglik(lik, p, sigma)
    fn = pytensor.function([p, sigma], [lp, *pytensor.grad(lp, [p, sigma])], mode="JAX")
    sig = 1.2 * lik.sigma
    value, grad_p, grad_sigma = fn(p0, sig)
    ref, ref_gp, ref_gs2 = lik.nll_grad_sigma2(p0, sig)
    np.testing.assert_allclose(value, -ref, rtol=1e-8)
    _assert_grad_close(grad_p, -ref_gp)
    _assert_grad_close(grad_sigma, -ref_gs2 * 2.0 * sig)  # d/dsigma = 2 sigma d/dsigma2


def test_value_only_variant_is_differentiable_by_jax(case):
    """PyMC's JAX samplers jaxify the value only and differentiate it with jax.grad."""
    from pymc.sampling.jax import get_jaxified_graph

    lik, p0 = case
    p, sigma = pt.dvector("p"), pt.dvector("sigma")
    lp = weak_loglik(lik, p, sigma)
    fn = get_jaxified_graph([p, sigma], [lp])
    vg = jax.jit(jax.value_and_grad(lambda a, b: fn(a, b)[0], argnums=(0, 1)))
    sig = 1.2 * lik.sigma
    value, (grad_p, grad_sigma) = vg(p0, sig)
    ref, ref_gp, ref_gs2 = lik.nll_grad_sigma2(p0, sig)
    np.testing.assert_allclose(value, -ref, rtol=1e-8)
    _assert_grad_close(np.asarray(grad_p), -ref_gp)
    _assert_grad_close(np.asarray(grad_sigma), -ref_gs2 * 2.0 * sig)


def test_failure_points_give_minus_inf_and_zero_gradient(case):
    from pymc.sampling.jax import get_jaxified_graph

    lik, p0 = case
    J, D = lik.model.n_params, lik.model.n_states
    p, s2 = pt.dvector("p"), pt.dvector("s2")
    out = WeakLogLikelihoodOp(lik, infer_sigma=True)(p, s2)[0]
    fn = pytensor.function([p, s2], [out, *pytensor.grad(out, [p, s2])], mode="JAX")
    bad_var = -np.ones(D)  # negative noise variances: S is not positive definite
    for args in [(p0, bad_var), (np.full(J, np.nan), lik.sigma**2)]:
        value, gp, gs = fn(*args)
        assert value == -np.inf
        np.testing.assert_array_equal(gp, 0.0)
        np.testing.assert_array_equal(gs, 0.0)
    value_fn = get_jaxified_graph([p, s2], [out])
    vg = jax.jit(jax.value_and_grad(lambda a, b: value_fn(a, b)[0], argnums=(0, 1)))
    value, (gp, gs) = vg(p0, bad_var)
    assert value == -np.inf
    np.testing.assert_array_equal(gp, 0.0)
    np.testing.assert_array_equal(gs, 0.0)


@pytest.fixture(scope="module")
def logistic_model():
    import pymc as pm

    from pymc_wendy.bayes.distribution import WeakODELikelihood

    prob = get_problem("logistic")
    data = prob.simulate(n_points=129, noise_ratio=0.05, seed=1)
    with pm.Model() as model:
        p = pm.Normal("p", mu=1.0, sigma=1.0, shape=prob.p_true.size)
        WeakODELikelihood("U", ode=prob.model, params=p, t=data.t, observed=data.U)
    return model, prob.p_true


def _check_posterior(draws, p_true, rhat):
    """draws: (chains, draws, J)."""
    assert np.all(np.isfinite(draws))
    assert float(np.max(rhat)) < 1.05
    lo, hi = np.quantile(draws.reshape(-1, p_true.size), [0.005, 0.995], axis=0)
    assert np.all((lo < p_true) & (p_true < hi)), (lo, hi, p_true)


def test_numpyro_nuts_samples_logistic(logistic_model):
    import arviz as az
    import pymc as pm

    pytest.importorskip("numpyro")
    model, p_true = logistic_model
    with model:
        idata = pm.sample(
            300,
            tune=300,
            chains=2,
            nuts_sampler="numpyro",
            random_seed=1,
            # one CPU device: "parallel" would warn and fall back to sequential chains
            nuts={"chain_method": "vectorized"},
            progressbar=False,
            compute_convergence_checks=False,
        )
    post = idata.posterior["p"]
    _check_posterior(post.values, p_true, az.rhat(post).values)


def test_blackjax_nuts_samples_logistic(logistic_model):
    """blackjax on the jaxified model log-density, two chains vectorised with jax.vmap.

    ``pm.sample(nuts_sampler="blackjax")`` itself fails with pymc 6.4.0 and blackjax 1.7.1
    before any model code runs (pymc forwards ``progress_bar`` to blackjax's NUTS kernel), so
    the sampler is driven directly here, the way pymc's ``_blackjax_inference_loop`` does.
    """
    import arviz as az
    from pymc.sampling.jax import get_jaxified_logp

    blackjax = pytest.importorskip("blackjax")
    model, p_true = logistic_model
    logp = get_jaxified_logp(model)  # the log-density (negative_logp=False negates it)
    start = np.asarray(model.initial_point()["p"])
    chains, tune, draws = 2, 200, 200

    def run(key, x0):
        adapt = blackjax.window_adaptation(blackjax.nuts, logp, target_acceptance_rate=0.8)
        k_adapt, k_draw = jax.random.split(key)
        (state, params), _ = adapt.run(k_adapt, [x0], num_steps=tune)
        step = blackjax.nuts(logp, **params).step

        def one(state, k):
            state, _ = step(k, state)
            return state, state.position[0]

        _, samples = jax.lax.scan(one, state, jax.random.split(k_draw, draws))
        return samples

    keys = jax.random.split(jax.random.PRNGKey(1), chains)
    x0 = start * (1.0 + 0.01 * np.random.default_rng(1).standard_normal((chains, start.size)))
    samples = np.asarray(jax.jit(jax.vmap(run))(keys, x0))  # (chains, draws, J)
    rhat = az.rhat(samples)  # (chain, draw, J)
    _check_posterior(samples, p_true, np.asarray(rhat))


@pytest.mark.parametrize("t0", [0.0, 0.5])
def test_free_initial_state_matches_reference(t0):
    """An initial state with a prior: the JAX graph reads (p, x0) like the numba kernel."""
    prob = get_problem("pk_oral")
    t = np.geomspace(0.5, 24.0, 30)
    C = solve(prob.model, prob.p_true, [0.0], np.r_[0.0, t])[1:]
    U = C + 0.3 * np.random.default_rng(2).normal(size=C.shape)
    lik = WeakLikelihood(prob.model, t, U, sigma=0.3, initial_state=[0.0], t0=t0)
    # static shapes, as PyMC's variables have: JAX needs the split of (p, x0) concrete
    q, s = pt.tensor("q", shape=(4,), dtype="float64"), pt.dscalar("s")
    lp = weak_loglik(lik, q[:3], sigma=s, x0=q[3:])
    fn = pytensor.function([q, s], [lp, *pytensor.grad(lp, [q, s])], mode="JAX")
    point, sigma = np.r_[0.95 * prob.p_true, 0.2], 0.4
    value, gq, gs = fn(point, sigma)
    nll, gp, gx, g2 = lik.initial_nll_grad(point[:3], point[3:], np.array([sigma**2]))
    np.testing.assert_allclose(value, -nll, rtol=1e-10)
    _assert_grad_close(gq, -np.r_[gp, gx])
    _assert_grad_close(gs, -2 * sigma * g2[0])


def test_per_entry_variances_match_reference():
    """An observation model's variance parameters as random variables (a negative binomial
    ``alpha``): the JAX backend with every entry's variance as input, against the numpy
    reference, and differentiated through to ``alpha``."""
    from pymc_wendy.model.observation import NegativeBinomial

    lv = get_problem("lotka_volterra")
    truth = lv.simulate(noise_ratio=0.0, subsample=4)
    U = NegativeBinomial(20.0).draw(40.0 * truth.U_true, None, np.random.default_rng(0))
    lik = WeakLikelihood(lv.model, truth.t, U, noise=NegativeBinomial())
    p0 = lv.p_true * np.array([1.0, 1 / 40, 1.0, 1 / 40]) * 1.02
    p, v = pt.dvector("p"), pt.dmatrix("V")
    lp = WeakLogLikelihoodOp(lik, True, per_entry=True)(p, v)[0]
    fn = pytensor.function([p, v], [lp, *pytensor.grad(lp, [p, v])], mode="JAX")
    offset, features = lik.entry_variance_terms()
    V = offset + features[0] / 15.0
    value, grad_p, grad_v = fn(p0, V)
    ref, ref_gp, ref_gv = lik.nll_grad_variances(p0, V)
    np.testing.assert_allclose(value, -ref, rtol=1e-8)
    _assert_grad_close(grad_p, -ref_gp)
    _assert_grad_close(grad_v, -ref_gv)
    a = pt.dvector("alpha")
    lp_a = weak_loglik(lik, p, noise=NegativeBinomial(a))
    jax_fn = pytensor.function([p, a], pytensor.grad(lp_a, a), mode="JAX")
    native = pytensor.function([p, a], pytensor.grad(lp_a, a))
    alpha = np.array([15.0, 25.0])
    _assert_grad_close(jax_fn(p0, alpha), native(p0, alpha))
