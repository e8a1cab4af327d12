r"""The weak log-likelihood as a pytensor Op with analytic gradients.

:class:`WeakLogLikelihoodOp` maps the parameter vector ``p`` (and, when the noise level is
inferred, the per-state noise variances ``sigma2``) to the weak log-likelihood
``-l(p, sigma2)`` **and its gradient**, in one pass. Its ``pullback`` multiplies the gradient
outputs by the incoming cotangent, so when a sampler compiles value and gradient together
(nutpie, PyMC's NUTS, ``find_MAP``) pytensor merges them into a single evaluation. When only
the value is used (SMC's likelihood, predictive checks), a graph rewrite swaps in a value-only
variant that skips the gradient work.

Backends: the numba implementation (:mod:`pymc_wendy._compiled`) runs natively in nopython
mode, so pytensor's numba linker (the default, also used by nutpie) never falls back to object
mode. ``perform`` (Python, the ``"c"``/``"py"`` linkers) uses the numpy reference in
:mod:`pymc_wendy.kernels`; the two are tested against each other. There is no JAX
implementation yet (see ``docs/pymc.md``).

Points where the likelihood is undefined (non-finite right-hand side, covariance not positive
definite) give log-likelihood ``-inf`` and a zero gradient, never an exception, so samplers
reject them like any other point outside the support.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
from pytensor.tensor.rewriting.basic import register_specialize

from pymc_wendy import _compiled
from pymc_wendy.kernels import WeakLikelihoodError
from pymc_wendy.likelihood import WeakLikelihood

__all__ = ["WeakLogLikelihoodOp", "weak_loglik"]


class WeakLogLikelihoodOp(Op):
    """Weak log-likelihood ``-l`` and its gradient for one :class:`WeakLikelihood`.

    Parameters
    ----------
    likelihood : WeakLikelihood
        The data, test functions and model; frozen into the compiled code.
    infer_sigma : bool
        If True the Op takes a second input, the per-state noise variances (D,), and returns
        the gradient with respect to them; otherwise ``likelihood.sigma`` is used.
    compute_grad : bool
        False for the value-only variant (gradient outputs are zeros); the rewrite
        ``weak_loglik_value_only`` installs it where no gradient is used.

    Outputs are ``(logp, dlogp/dp)`` or ``(logp, dlogp/dp, dlogp/dsigma2)``.
    """

    __props__ = ("likelihood", "infer_sigma", "compute_grad")

    def __init__(self, likelihood: WeakLikelihood, infer_sigma: bool, compute_grad: bool = True):
        if not isinstance(likelihood, WeakLikelihood):
            raise TypeError(f"likelihood must be a WeakLikelihood; got {type(likelihood)!r}")
        self.likelihood = likelihood
        self.infer_sigma = bool(infer_sigma)
        self.compute_grad = bool(compute_grad)

    def __str__(self) -> str:
        what = "value" if not self.compute_grad else "value+grad"
        sig = ", sigma" if self.infer_sigma else ""
        return f"WeakLogLikelihood{{{self.likelihood.model.name}{sig}, {what}}}"

    # --- graph ---------------------------------------------------------------------------
    def make_node(self, p, sigma2=None) -> Apply:
        J, D = self.likelihood.model.n_params, self.likelihood.model.n_states
        p = pt.as_tensor_variable(p).astype("float64")
        if p.type.ndim != 1 or p.type.shape[0] not in (None, J):
            raise ValueError(f"p must be a vector of length {J}; got type {p.type}")
        inputs = [p]
        outputs = [pt.dscalar(), pt.tensor(dtype="float64", shape=(J,))]
        if self.infer_sigma:
            if sigma2 is None:
                raise ValueError("this Op infers sigma: pass the noise variances as sigma2")
            sigma2 = pt.as_tensor_variable(sigma2).astype("float64")
            if sigma2.type.ndim != 1 or sigma2.type.shape[0] not in (None, D):
                raise ValueError(f"sigma2 must be a vector of length {D}; got type {sigma2.type}")
            inputs.append(sigma2)
            outputs.append(pt.tensor(dtype="float64", shape=(D,)))
        elif sigma2 is not None:
            raise ValueError("this Op uses the likelihood's fixed sigma; sigma2 must be None")
        return Apply(self, inputs, outputs)

    def infer_shape(self, node, shapes):
        J, D = self.likelihood.model.n_params, self.likelihood.model.n_states
        out = [(), (J,)]
        if self.infer_sigma:
            out.append((D,))
        return out

    def pullback(self, inputs, outputs, cotangents):
        for c in cotangents[1:]:
            if not isinstance(c.type, DisconnectedType):
                # Second derivatives of the weak likelihood are not wired into pytensor.
                return [grad_not_implemented(self, i, x) for i, x in enumerate(inputs)]
        g = cotangents[0]
        if isinstance(g.type, DisconnectedType):
            return [DisconnectedType()() for _ in inputs]
        return [g * out for out in outputs[1:]]

    def connection_pattern(self, node):
        n_out = len(node.outputs)
        return [[True] * n_out for _ in node.inputs]

    # --- Python implementation -----------------------------------------------------------
    def perform(self, node, inputs, output_storage):
        lik = self.likelihood
        p = np.asarray(inputs[0], dtype=float)
        D, J = lik.model.n_states, lik.model.n_params
        sigma = np.sqrt(inputs[1]) if self.infer_sigma else None
        gs = np.zeros(D)
        try:
            if self.infer_sigma:
                nll, gp, gs = lik.nll_grad_sigma2(p, sigma)
            elif self.compute_grad:
                nll, gp = lik.nll_grad(p)
            else:
                nll, gp = lik.nll(p), np.zeros(J)
        except (WeakLikelihoodError, ValueError):
            nll, gp, gs = np.inf, np.zeros(J), np.zeros(D)
        output_storage[0][0] = np.asarray(-nll)
        output_storage[1][0] = -np.asarray(gp, dtype=float)
        if self.infer_sigma:
            output_storage[2][0] = -np.asarray(gs, dtype=float)


def weak_loglik(likelihood: WeakLikelihood, p, sigma=None) -> pt.TensorVariable:
    """Symbolic weak log-likelihood of ``p`` (and of the noise scale ``sigma`` if symbolic).

    ``sigma=None`` uses ``likelihood.sigma``; a tensor (scalar or (D,)) is the noise standard
    deviation per state and makes the result differentiable in it.
    """
    if sigma is None:
        return WeakLogLikelihoodOp(likelihood, infer_sigma=False)(p)[0]
    sigma = _noise_scale_vector(sigma, likelihood.model.n_states)
    return WeakLogLikelihoodOp(likelihood, infer_sigma=True)(p, sigma**2)[0]


def _noise_scale_vector(sigma, D: int) -> pt.TensorVariable:
    """A scalar or (D,) noise scale as a (D,) float64 tensor, with a clear error otherwise."""
    sig = pt.as_tensor_variable(sigma).astype("float64")
    if sig.type.ndim > 1 or (sig.type.ndim == 1 and sig.type.shape[0] not in (None, 1, D)):
        raise ValueError(
            f"sigma must be a scalar or a vector of length {D} (one per state); got {sig.type}"
        )
    return pt.broadcast_to(sig, (D,))


@register_specialize
@node_rewriter([WeakLogLikelihoodOp])
def weak_loglik_value_only(fgraph, node):
    """Use the value-only Op when no gradient output is consumed."""
    op = node.op
    if not op.compute_grad:
        return None
    if any(fgraph.clients.get(out) for out in node.outputs[1:]):
        return None
    new = WeakLogLikelihoodOp(op.likelihood, op.infer_sigma, compute_grad=False)(*node.inputs)
    return {node.outputs[0]: new[0]}


@register_funcify_and_cache_key(WeakLogLikelihoodOp)
def _numba_funcify(op, node=None, **kwargs):
    kernel = _compiled.make_kernel(
        op.likelihood, infer_sigma=op.infer_sigma, want_grad=op.compute_grad
    )
    fixed_s2 = np.asarray(op.likelihood.sigma, dtype=float) ** 2
    from pytensor.link.numba.dispatch.basic import numba_njit

    if op.infer_sigma:

        @numba_njit
        def weak_loglik_sigma(p, sigma2):
            nll, gp, gs = kernel(p, sigma2)
            return np.array(-nll), -gp, -gs

        return weak_loglik_sigma, None

    @numba_njit
    def weak_loglik_fixed(p):
        nll, gp, _ = kernel(p, fixed_s2)
        return np.array(-nll), -gp

    return weak_loglik_fixed, None


try:  # optional JAX backend: registers jax_funcify for the Op when jax is installed
    from pymc_wendy import _jax  # noqa: F401
except ImportError:
    pass
