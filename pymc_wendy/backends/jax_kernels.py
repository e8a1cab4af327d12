r"""JAX implementation of :class:`pymc_wendy.backends.op.WeakLogLikelihoodOp`.

Registers the Op with pytensor's ``jax_funcify`` so that graphs containing the weak
likelihood compile with ``mode="JAX"`` and run under PyMC's JAX samplers
(``pm.sample(nuts_sampler="numpyro")`` / ``"blackjax"``). :mod:`pymc_wendy.backends.op` imports this
module optionally: without jax installed nothing is registered and nothing else changes.

**Importing this module enables 64-bit JAX** (``jax_enable_x64``), process-wide. The weak
likelihood needs double precision (``S`` is close to singular at low noise and the ridge is
``1e-10``); pytensor's JAX backend does the same when ``floatX`` is ``float64`` (the default).

Formulas (the same as :mod:`pymc_wendy.weak.kernels`, state-major flattening: residual entry
``(d, k)`` at ``d*K + k``, columns of ``L`` ``(e, m)`` at ``e*(M+1) + m``)::

    r                = vec(Phi F + b)
    L[(d,k),(e,m)]   = Phi[k,m] df_d/du_e(X_m) + dPhi[k,m] delta_de
    S                = L diag(s2') L^T + ridge I,   s2' = (1 - ridge) sigma2 per column (e, m)
    nll              = 1/2 (log det S + r^T S^{-1} r + K D log 2 pi)

evaluated with one Cholesky factor and one triangular solve. ``f`` and ``df/du`` are the
model's sympy expressions turned into JAX code by :func:`sympy.lambdify` (with common
subexpressions shared), vectorised over the time points. Gradients come from JAX's reverse
mode (``jax.value_and_grad``), not from the analytic adjoint formulas of the numba kernels;
the two are tested against each other.

Failure points (non-finite right-hand side, ``S`` not positive definite: JAX's Cholesky then
returns NaN) give log-likelihood ``-inf`` and a zero gradient, as in the other backends.

Two variants, following the Op's ``compute_grad`` prop:

* ``compute_grad=True`` returns ``(logp, dlogp/dp[, dlogp/dsigma2])`` from one
  ``value_and_grad`` pass (what ``pytensor.function(..., mode="JAX")`` of value and
  ``pytensor.grad`` runs).
* ``compute_grad=False`` (the graph rewrite installs it where only the value is used, which is
  the case for PyMC's JAX samplers: they differentiate the jaxified log-density with JAX
  itself) returns ``logp`` through a :func:`jax.custom_vjp` whose backward pass is the same
  single ``value_and_grad`` pass with the failure masking. So ``jax.grad`` of the model
  log-density costs one likelihood evaluation plus its reverse sweep and is exactly zero (not
  NaN) at failure points. Its gradient outputs are zeros, as in the other backends.

Limitations: ``jax.custom_vjp`` supports reverse mode only, so forward-mode derivatives
(``jax.jvp``, ``jax.hessian``) of the value-only variant are not available; the
``compute_grad=True`` outputs are plain JAX code and can be differentiated again (second
derivatives are then NaN at failure points instead of zero). Piecewise right-hand sides are
evaluated with ``jnp.select``: every branch is computed at every time point, so a branch that
is invalid where it is not selected (e.g. ``sqrt`` of a negative number) gives a NaN gradient
and hence ``-inf`` at such points, where the numba backend (scalar branching) does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import sympy as sp
from jax.scipy.linalg import solve_triangular
from pytensor.link.jax.dispatch import jax_funcify

from pymc_wendy.backends.op import WeakLogLikelihoodOp
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak.likelihood import WeakLikelihood

jax.config.update("jax_enable_x64", True)

__all__ = ["jax_array_function", "jax_loglik_functions", "jax_nll"]

_LOG_2PI = math.log(2.0 * math.pi)


def jax_array_function(model: ODEModel, which: str) -> Callable:
    """JAX version of ``model.evaluate(which, t, X, p)``: ``fn(t, X, p)`` -> (n, ...).

    ``which`` is one of ``"f", "f_u", "f_p", "f_up", "f_pp", "f_upp"``; ``t`` has shape
    (n,), ``X`` shape (n, D), ``p`` shape (J,). Entries that do not depend on the time point
    (constants, pure parameter terms) are broadcast over the n rows.
    """
    arr = np.asarray(model.derivative_expressions(which).tolist(), dtype=object)
    shape = arr.shape
    exprs = [sp.sympify(e) for e in arr.ravel()]
    D, J = model.n_states, model.n_params
    sym = model.symbols
    fn = sp.lambdify(
        [sym.t, list(sym.u), list(sym.p)], exprs, modules="jax", cse=True, dummify=True
    )

    def evaluate(t, X, p):
        n = t.shape[0]
        vals = fn(t, [X[:, d] for d in range(D)], [p[j] for j in range(J)])
        cols = [jnp.broadcast_to(jnp.asarray(v, dtype=jnp.float64), (n,)) for v in vals]
        return jnp.stack(cols, axis=-1).reshape((n, *shape))

    return evaluate


def jax_nll(lik: WeakLikelihood, free_initial: bool = False, per_entry: bool = False) -> Callable:
    """The negative log-likelihood ``nll(p, sigma2)`` of ``lik`` as a pure JAX function.

    The data, test functions and ridge are constants of the returned function; ``sigma2`` are
    the per-state noise variances (D,), or with ``per_entry`` every entry's variance (M1, D)
    (:meth:`~pymc_wendy.WeakLikelihood.nll_grad_variances`). Non-finite values (failure
    points) are returned as they come (NaN or inf); :func:`jax_loglik_functions` masks them.
    ``free_initial``: ``p`` ends with the initial row, which replaces the known one
    (:meth:`~pymc_wendy.WeakLikelihood.initial_nll_grad`).
    """
    if free_initial:
        lik.check_free_initial()
    model = lik.model
    if lik.form.kind != "general":
        raise NotImplementedError(
            f"{model.name}: the JAX backend covers first-order models without inputs; use the "
            "default (numba) backend for models of order > 1 or with inputs"
        )
    D = model.n_states
    phi = jnp.asarray(lik.phi, dtype=jnp.float64)
    b = jnp.asarray(lik.form.b, dtype=jnp.float64)
    # the grid the residual is built on (with a known initial state, one more row than the data)
    t = jnp.asarray(lik.form.t, dtype=jnp.float64)
    X = jnp.asarray(lik.form.X, dtype=jnp.float64)
    K, M1 = lik.phi.shape
    n = K * D
    ridge = float(lik.ridge)
    f = jax_array_function(model, "f")
    f_u = jax_array_function(model, "f_u")
    # the dPhi part of L does not depend on p: [d, k, e, m] = dPhi[k, m] delta_de
    L_data = jnp.asarray(
        np.eye(D)[:, None, :, None] * np.asarray(lik.dphi)[None, :, None, :], dtype=jnp.float64
    )
    ridge_eye = float(lik.ridge_diag) * jnp.eye(n)
    # per-entry noise weights, column (e, m) -> weights[m, e]
    col_weights = jnp.asarray(lik.form.weights_or_ones().T.reshape(-1), dtype=jnp.float64)
    const = n * _LOG_2PI
    corr = lik.correction  # bias-corrected objective: quadratic form minus a linear tilt
    if corr is not None:
        tilt = jnp.asarray(corr.tilt, dtype=jnp.float64)
        ref = jnp.asarray(corr.reference, dtype=jnp.float64)
        offset = float(corr.offset)

    J = model.n_params
    dphi0 = jnp.asarray(lik.dphi[:, 0], dtype=jnp.float64)

    def nll(p, sigma2):
        X_, b_ = X, b
        if free_initial:
            p, x0 = p[:J], p[J:]
            X_ = X.at[0].set(x0)
            b_ = b + jnp.outer(dphi0, x0 - X[0])
        return _nll(p, sigma2, X_, b_)

    def _nll(p, sigma2, X, b):
        F = f(t, X, p)  # (M1, D)
        Ju = f_u(t, X, p)  # (M1, D, D): [m, d, e]
        r = (phi @ F + b).T.reshape(n)
        L = phi[None, :, None, :] * jnp.transpose(Ju, (1, 2, 0))[:, None, :, :] + L_data
        L = L.reshape(n, D * M1)
        if per_entry:  # column (e, m)
            w = (1.0 - ridge) * sigma2.T.reshape(-1)
        else:
            w = jnp.repeat((1.0 - ridge) * sigma2, M1) * col_weights
        S = (L * w) @ L.T + ridge_eye
        C = jnp.linalg.cholesky(S)
        z = solve_triangular(C, r, lower=True)
        if corr is not None:
            return 0.5 * jnp.dot(z, z) - jnp.dot(tilt, p - ref) + offset
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(C)))
        return 0.5 * (logdet + jnp.dot(z, z) + const)

    return nll


def jax_loglik_functions(
    lik: WeakLikelihood, infer_sigma: bool, free_initial: bool = False, per_entry: bool = False
) -> tuple[Callable, Callable]:
    """``(value_and_grads, value)`` for the log-likelihood ``-nll`` of ``lik``.

    With ``infer_sigma`` both take ``(p, sigma2)``, else ``(p,)`` with ``lik.sigma`` fixed.
    ``value_and_grads`` returns ``(logp, dlogp/dp[, dlogp/dsigma2])``; ``value`` returns
    ``logp`` and is differentiable by ``jax.grad`` (custom VJP, one pass, see module doc).
    At failure points ``logp = -inf`` and every gradient is zero. ``free_initial`` and
    ``per_entry`` (``sigma2`` is then every entry's variance): as :func:`jax_nll`.
    """
    nll = jax_nll(lik, free_initial, per_entry)
    neg_inf = -jnp.inf

    if infer_sigma:
        vg = jax.value_and_grad(nll, argnums=(0, 1))

        def value_and_grads(p, sigma2):
            val, (gp, gs) = vg(p, sigma2)
            ok = jnp.isfinite(val) & jnp.all(jnp.isfinite(gp)) & jnp.all(jnp.isfinite(gs))
            return (
                jnp.where(ok, -val, neg_inf),
                jnp.where(ok, -gp, 0.0),
                jnp.where(ok, -gs, 0.0),
            )

        @jax.custom_vjp
        def value(p, sigma2):
            val = nll(p, sigma2)
            return jnp.where(jnp.isfinite(val), -val, neg_inf)

        def value_fwd(p, sigma2):
            lp, gp, gs = value_and_grads(p, sigma2)
            return lp, (gp, gs)

        def value_bwd(res, ct):
            gp, gs = res
            return ct * gp, ct * gs

    else:
        s2 = jnp.asarray(np.asarray(lik.sigma, dtype=float) ** 2)
        vg = jax.value_and_grad(lambda p: nll(p, s2))

        def value_and_grads(p):
            val, gp = vg(p)
            ok = jnp.isfinite(val) & jnp.all(jnp.isfinite(gp))
            return jnp.where(ok, -val, neg_inf), jnp.where(ok, -gp, 0.0)

        @jax.custom_vjp
        def value(p):
            val = nll(p, s2)
            return jnp.where(jnp.isfinite(val), -val, neg_inf)

        def value_fwd(p):
            lp, gp = value_and_grads(p)
            return lp, gp

        def value_bwd(gp, ct):
            return (ct * gp,)

    value.defvjp(value_fwd, value_bwd)
    return value_and_grads, value


@jax_funcify.register(WeakLogLikelihoodOp)
def _jax_funcify_weak_loglik(op, node=None, **kwargs):
    if op.relax_scale is not None:
        # a silent alpha = 0 would give every tempering rung the model's likelihood
        raise NotImplementedError(
            "the relaxed weak likelihood of the tempering ladder has no JAX implementation; "
            "use pymc_wendy.sample_sft with the default (numba) backend"
        )
    lik = op.likelihood
    J, shape = op.n_inputs_p, op.noise_shape
    value_and_grads, value = jax_loglik_functions(
        lik, op.infer_sigma, op.free_initial, op.per_entry
    )

    if op.compute_grad:
        return value_and_grads

    if op.infer_sigma:

        def weak_loglik_value_sigma(p, sigma2):
            return value(p, sigma2), jnp.zeros(J), jnp.zeros(shape)

        return weak_loglik_value_sigma

    def weak_loglik_value(p):
        return value(p), jnp.zeros(J)

    return weak_loglik_value
