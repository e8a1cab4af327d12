r"""The weak log-likelihood as a pytensor Op with analytic gradients.

:class:`WeakLogLikelihoodOp` maps the parameter vector ``p`` (and, when the noise level is
inferred, the per-state noise variances ``sigma2``) to the weak log-likelihood
``-l(p, sigma2)`` **and its gradient**, in one pass. Its ``pullback`` multiplies the gradient
outputs by the incoming cotangent, so when a sampler compiles value and gradient together
(nutpie, PyMC's NUTS, ``find_MAP``) pytensor merges them into a single evaluation. When only
the value is used (SMC's likelihood, predictive checks), a graph rewrite swaps in a value-only
variant that skips the gradient work.

Backends: the numba implementation (:mod:`pymc_wendy.backends.numba_kernels`) runs natively
in nopython mode, so pytensor's numba linker (the default, also used by nutpie) never falls
back to object mode. ``perform`` (Python, the ``"c"``/``"py"`` linkers) uses the numpy reference in
:mod:`pymc_wendy.weak.kernels`; the two are tested against each other. There is no JAX
implementation yet (see ``docs/pymc.md``).

Points where the likelihood is undefined (non-finite right-hand side, covariance not positive
definite) give log-likelihood ``-inf`` and a zero gradient, never an exception, so samplers
reject them like any other point outside the support.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
from pytensor.tensor.rewriting.basic import register_specialize

from pymc_wendy.backends import kernel_cache, numba_kernels
from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.likelihood import WeakLikelihood

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
    relax_scale : float, optional
        Makes the relaxed variant the tempering ladder uses (:mod:`pymc_wendy.bayes.tempering`):
        a last scalar input ``alpha`` in [0, 1] replaces the covariance by
        ``(1 - alpha) S(p) + alpha * relax_scale * I``; ``alpha = 0`` is the model's likelihood.
    free_initial : bool
        The first input is ``(p, x0)`` (J + D): the known initial row of the likelihood is
        replaced by ``x0`` (an initial state with a prior;
        :meth:`~pymc_wendy.WeakLikelihood.initial_nll_grad`), and the gradient output has
        J + D entries.
    per_entry : bool
        With ``infer_sigma``: the second input is the noise variance of every entry of the
        form's grid, (M1, D), and the gradient is per entry too
        (:meth:`~pymc_wendy.WeakLikelihood.nll_grad_variances`): what an observation model
        whose variance parameters are random variables (a negative binomial ``alpha``) builds
        its variances into, differentiated by pytensor from there.

    Outputs are ``(logp, dlogp/dp)`` or ``(logp, dlogp/dp, dlogp/dsigma2)``.
    """

    __props__ = (
        "likelihood", "infer_sigma", "compute_grad", "relax_scale", "free_initial", "per_entry"
    )  # fmt: skip

    def __init__(
        self,
        likelihood: WeakLikelihood,
        infer_sigma: bool,
        compute_grad: bool = True,
        relax_scale: float | None = None,
        free_initial: bool = False,
        per_entry: bool = False,
    ):
        if not isinstance(likelihood, WeakLikelihood):
            raise TypeError(f"likelihood must be a WeakLikelihood; got {type(likelihood)!r}")
        if per_entry and not (infer_sigma and not free_initial):
            raise ValueError(
                "per-entry noise variances are an inferred noise input: not with a fixed "
                "noise or a free initial state"
            )
        if free_initial:
            likelihood.check_free_initial()
            if relax_scale is not None:
                raise ValueError("the tempering ladder does not take an initial state with a prior")
        if relax_scale is not None and not (np.isfinite(relax_scale) and relax_scale > 0):
            raise ValueError(f"relax_scale must be positive and finite; got {relax_scale}")
        self.likelihood = likelihood
        self.infer_sigma = bool(infer_sigma)
        self.compute_grad = bool(compute_grad)
        self.relax_scale = None if relax_scale is None else float(relax_scale)
        self.free_initial = bool(free_initial)
        self.per_entry = bool(per_entry)

    @property
    def noise_shape(self) -> tuple[int, ...]:
        """The shape of the noise input and its gradient: (D,), or (M1, D) per entry."""
        if self.per_entry:
            return self.likelihood.form.X.shape
        return (self.likelihood.model.n_states,)

    @property
    def n_inputs_p(self) -> int:
        """Length of the first input: J, plus D with a free initial row."""
        model = self.likelihood.model
        return model.n_params + (model.n_states if self.free_initial else 0)

    def __str__(self) -> str:
        what = "value" if not self.compute_grad else "value+grad"
        sig = ", sigma" if self.infer_sigma else ""
        rel = ", relaxed" if self.relax_scale is not None else ""
        return f"WeakLogLikelihood{{{self.likelihood.model.name}{sig}{rel}, {what}}}"

    def relaxed(self, relax_scale: float) -> WeakLogLikelihoodOp:
        """The same likelihood with the covariance relaxation input (class doc)."""
        return type(self)(
            self.likelihood, self.infer_sigma, self.compute_grad, relax_scale, self.free_initial,
            self.per_entry,
        )  # fmt: skip

    # --- graph ---------------------------------------------------------------------------
    def make_node(self, p, *rest) -> Apply:
        J = self.n_inputs_p
        p = pt.as_tensor_variable(p).astype("float64")
        if p.type.ndim != 1 or p.type.shape[0] not in (None, J):
            raise ValueError(f"p must be a vector of length {J}; got type {p.type}")
        want = int(self.infer_sigma) + int(self.relax_scale is not None)
        if len(rest) != want:
            raise ValueError(
                f"{self} takes p{', sigma2' * self.infer_sigma}"
                f"{', alpha' * (self.relax_scale is not None)}; got {1 + len(rest)} inputs"
            )
        rest = list(rest)
        alpha = rest.pop() if self.relax_scale is not None else None
        sigma2 = rest.pop() if self.infer_sigma else None
        inputs = [p]
        outputs = [pt.dscalar(), pt.tensor(dtype="float64", shape=(J,))]
        if self.infer_sigma:
            sigma2 = pt.as_tensor_variable(sigma2).astype("float64")
            shape = self.noise_shape
            if sigma2.type.ndim != len(shape) or any(
                n not in (None, want) for n, want in zip(sigma2.type.shape, shape, strict=True)
            ):
                what = "per-entry variances" if self.per_entry else "sigma2"
                raise ValueError(f"{what} must have shape {shape}; got type {sigma2.type}")
            inputs.append(sigma2)
            outputs.append(pt.tensor(dtype="float64", shape=shape))
        if alpha is not None:
            alpha = pt.as_tensor_variable(alpha).astype("float64")
            if alpha.type.ndim != 0:
                raise ValueError(f"alpha must be a scalar; got type {alpha.type}")
            inputs.append(alpha)
        return Apply(self, inputs, outputs)

    def infer_shape(self, node, shapes):
        out = [(), (self.n_inputs_p,)]
        if self.infer_sigma:
            out.append(self.noise_shape)
        return out

    def pullback(self, inputs, outputs, cotangents):
        for c in cotangents[1:]:
            if not isinstance(c.type, DisconnectedType):
                # Second derivatives of the weak likelihood are not wired into pytensor.
                return [grad_not_implemented(self, i, x) for i, x in enumerate(inputs)]
        g = cotangents[0]
        if isinstance(g.type, DisconnectedType):
            return [DisconnectedType()() for _ in inputs]
        grads = [g * out for out in outputs[1:]]
        if self.relax_scale is not None:
            # the ladder never differentiates in alpha
            grads.append(grad_not_implemented(self, len(inputs) - 1, inputs[-1]))
        return grads

    def connection_pattern(self, node):
        n_out = len(node.outputs)
        return [[True] * n_out for _ in node.inputs]

    # --- Python implementation -----------------------------------------------------------
    def perform(self, node, inputs, output_storage):
        lik = self.likelihood
        p = np.asarray(inputs[0], dtype=float)
        J = self.n_inputs_p
        sigma = np.sqrt(inputs[1]) if self.infer_sigma and not self.per_entry else None
        gs = np.zeros(self.noise_shape)
        try:
            if self.per_entry:
                relax = () if self.relax_scale is None else (float(inputs[-1]), self.relax_scale)
                nll, gp, gs = lik.nll_grad_variances(p, inputs[1], *relax)
            elif self.free_initial:
                Jm = lik.model.n_params
                s2 = np.asarray(inputs[1], dtype=float) if self.infer_sigma else None
                nll, gp, gx, gs = lik.initial_nll_grad(p[:Jm], p[Jm:], s2)
                gp = np.concatenate([gp, gx])
            elif self.relax_scale is not None:
                s2 = lik.sigma**2 if sigma is None else sigma**2
                nll, gp, gs = _relaxed_reference(lik, p, s2, float(inputs[-1]), self.relax_scale)
            elif self.infer_sigma:
                nll, gp, gs = lik.nll_grad_sigma2(p, sigma)
            elif self.compute_grad:
                nll, gp = lik.nll_grad(p)
            else:
                nll, gp = lik.nll(p), np.zeros(J)
        except (WeakLikelihoodError, ValueError):
            nll, gp, gs = np.inf, np.zeros(J), np.zeros(self.noise_shape)
        output_storage[0][0] = np.asarray(-nll)
        output_storage[1][0] = -np.asarray(gp, dtype=float)
        if self.infer_sigma:
            output_storage[2][0] = -np.asarray(gs, dtype=float)


def _relaxed_reference(lik: WeakLikelihood, p, s2, alpha: float, c: float):
    """numpy reference of the relaxed likelihood: ``(nll, grad_p, grad_sigma2)``."""
    return lik.relaxed_nll_grad_sigma2(p, s2, alpha, c)


def weak_loglik(
    likelihood: WeakLikelihood, p, sigma=None, x0=None, noise=None
) -> pt.TensorVariable:
    """Symbolic weak log-likelihood of ``p`` (and of the noise scale ``sigma`` if symbolic).

    ``sigma=None`` uses ``likelihood.sigma``; a tensor (scalar or (D,)) is the noise standard
    deviation per state and makes the result differentiable in it. ``x0`` (D,), a tensor,
    replaces the likelihood's known initial row (``log u0`` for log-normal noise): an
    initial state with a prior, differentiable in it too. ``noise``, an observation model
    whose variance parameters are tensors (``pw.NegativeBinomial(alpha)`` with ``alpha`` a
    random variable), replaces the likelihood's variances entry by entry
    (:meth:`~pymc_wendy.WeakLikelihood.entry_variance_terms`), differentiable in them.
    """
    if noise is not None:
        if sigma is not None or x0 is not None:
            raise ValueError("variance parameters as random variables take no sigma or x0")
        V = pt.as_tensor_variable(likelihood.entry_variances(noise)).astype("float64")
        op = WeakLogLikelihoodOp(likelihood, infer_sigma=True, per_entry=True)
        return op(pt.as_tensor_variable(p).astype("float64"), V)[0]
    free = x0 is not None
    if free:
        x0 = pt.as_tensor_variable(x0).astype("float64")
        p = pt.concatenate([pt.as_tensor_variable(p).astype("float64"), x0])
    if sigma is None:
        return WeakLogLikelihoodOp(likelihood, infer_sigma=False, free_initial=free)(p)[0]
    sigma = noise_scale_vector(sigma, likelihood.model.n_states)
    op = WeakLogLikelihoodOp(likelihood, infer_sigma=True, free_initial=free)
    return op(p, sigma**2)[0]


def noise_scale_vector(sigma, D: int) -> pt.TensorVariable:
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
    new = WeakLogLikelihoodOp(
        op.likelihood, op.infer_sigma, compute_grad=False, relax_scale=op.relax_scale,
        free_initial=op.free_initial, per_entry=op.per_entry,
    )(*node.inputs)  # fmt: skip
    return {node.outputs[0]: new[0]}


#: the packed data of each likelihood (:func:`.numba_kernels.kernel_inputs`) per Op
#: flags: every compilation of a graph holding the Op (``pw.sample``'s posterior mode, then
#: nutpie's, then predictive draws) reuses it instead of packing it again
_DATA: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _kernel_data(
    lik: WeakLikelihood, infer_sigma: bool, relax_scale: float, free: bool, per_entry: bool
):
    per_lik = _DATA.setdefault(lik, {})
    key = (infer_sigma, relax_scale, free, per_entry)
    if key not in per_lik:
        per_lik[key] = numba_kernels.kernel_inputs(
            lik, infer_sigma=infer_sigma, relax_scale=relax_scale, free_initial=free,
            per_entry=per_entry,
        )  # fmt: skip
    return per_lik[key]


def _per_entry(call, M1: int, D: int, relaxed: bool):
    """The Op's numba function with every entry's noise variance ``V`` (M1, D) as input (and
    the relaxation ``alpha`` on the tempering ladder): the kernel reads the entries
    state-major (:func:`.numba_kernels.entry_variances`)."""
    from pytensor.link.numba.dispatch.basic import numba_njit

    @numba_njit
    def entries(p, V, a):
        if not 0.0 <= a <= 1.0:
            return np.array(-np.inf), np.zeros_like(p), np.zeros_like(V)
        value, gp, gV = call(p, np.ascontiguousarray(V.T).ravel(), a)
        return value, gp, np.ascontiguousarray(gV.reshape((D, M1)).T)

    if relaxed:

        @numba_njit
        def weak_loglik_entries_relaxed(p, V, alpha):
            return entries(p, V, alpha[()])

        return weak_loglik_entries_relaxed

    @numba_njit
    def weak_loglik_entries(p, V):
        return entries(p, V, 0.0)

    return weak_loglik_entries


@register_funcify_and_cache_key(WeakLogLikelihoodOp)
def _numba_funcify(op, node=None, **kwargs):
    # The kernel is compiled once per model structure (its terms) and per kind, and called
    # through its addresses; the function returned here only binds this likelihood's data (a
    # constant in the caller), so compiling it takes milliseconds. It is not cached by
    # pytensor (no key): the data is part of its code.
    lik = op.likelihood
    relaxed = op.relax_scale is not None
    kind, buf = _kernel_data(
        lik, op.infer_sigma, op.relax_scale if relaxed else 1.0, op.free_initial, op.per_entry
    )
    kernel = kernel_cache.kernel_for(
        lik, kind, infer_sigma=op.infer_sigma, want_grad=op.compute_grad
    )
    terms_fn, entry, flags = kernel.terms, kernel.entry, kernel.flags
    n_terms = kernel_cache.terms_size(lik, kind, want_grad=op.compute_grad)
    J = op.n_inputs_p
    D = int(np.prod(op.noise_shape)) if op.infer_sigma else 0
    n_buf = buf.size
    from pytensor.link.numba.dispatch.basic import numba_njit

    @numba_njit
    def call(p, sigma2, alpha):
        if p.size != J or sigma2.size != D:  # the kernel reads exactly these lengths
            raise ValueError("weak log-likelihood: wrong length of p or sigma2")
        p = np.ascontiguousarray(p)
        s2 = np.ascontiguousarray(sigma2)
        terms = np.empty(n_terms)
        out = np.empty(1 + J + D)
        if terms_fn(p.ctypes, J, buf.ctypes, n_buf, terms.ctypes, n_terms) != n_terms:
            raise ValueError("weak log-likelihood: the model's terms do not match their buffer")
        entry(p.ctypes, J, s2.ctypes, D, alpha, buf.ctypes, n_buf, terms.ctypes, n_terms,
              flags, out.ctypes)  # fmt: skip
        return np.array(-out[0]), -out[1 : 1 + J], -out[1 + J :]

    if op.per_entry:
        return _per_entry(call, *op.noise_shape, relaxed), None

    if op.infer_sigma and relaxed:

        @numba_njit
        def weak_loglik_sigma_relaxed(p, sigma2, alpha):
            a = alpha[()]
            if not 0.0 <= a <= 1.0:
                return np.array(-np.inf), np.zeros_like(p), np.zeros_like(sigma2)
            return call(p, sigma2, a)

        return weak_loglik_sigma_relaxed, None

    if op.infer_sigma:

        @numba_njit
        def weak_loglik_sigma(p, sigma2):
            return call(p, sigma2, 0.0)

        return weak_loglik_sigma, None

    if relaxed:

        @numba_njit
        def weak_loglik_fixed_relaxed(p, alpha):
            a = alpha[()]
            if not 0.0 <= a <= 1.0:
                return np.array(-np.inf), np.zeros_like(p)
            value, gp, _ = call(p, np.zeros(0), a)
            return value, gp

        return weak_loglik_fixed_relaxed, None

    @numba_njit
    def weak_loglik_fixed(p):
        value, gp, _ = call(p, np.zeros(0), 0.0)
        return value, gp

    return weak_loglik_fixed, None
