"""The tempered model: ``log pi(x; alpha, beta) = prior(x) + beta * lik_alpha(x)`` compiled as a
function of the unconstrained vector ``x`` and the rung's ``alpha`` and ``beta``, with every
weak likelihood term replaced by its covariance-relaxed variant."""

from __future__ import annotations

import numba
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.blocking import DictToArrayBijection
from pymc.pytensorf import join_nonshared_inputs
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import applys_between

from pymc_wendy.backends.op import WeakLogLikelihoodOp
from pymc_wendy.bayes.tempering.ladder import Relaxation
from pymc_wendy.bayes.tempering.nuts import TARGET, compiled_transition


class TemperedModel:
    """Compiled ``log pi(x; alpha, beta) = prior(x) + beta * lik_alpha(x)`` on the unconstrained
    vector ``x``, its gradient, and the value-only parts used by swaps."""

    def __init__(self, model: pm.Model, start: dict, relaxation: Relaxation):
        value_vars = model.value_vars
        self.point0 = {v.name: np.asarray(start[v.name]) for v in value_vars}
        self.x0 = DictToArrayBijection.map(self.point0)
        prior = model.varlogp
        lik = model.datalogp
        alpha = pt.dscalar("alpha")
        beta = pt.dscalar("beta")
        nodes = [
            n
            for n in applys_between(value_vars, [lik])
            if isinstance(n.op, WeakLogLikelihoodOp) and n.op.relax_scale is None
        ]
        self.relax_scales: list[float] = []
        self.alpha_min = 1e-6
        if relaxation != "power":
            if not nodes:
                raise ValueError(
                    f"relaxation={relaxation!r} relaxes the model's WeakODELikelihood terms and "
                    "there are none; use relaxation='power'"
                )
            scales, eig_min = self._relax_scales(nodes, value_vars)
            self.relax_scales = scales
            self.alpha_min = float(np.clip(eig_min, 1e-12, 0.1))
            replace = {}
            for node, c in zip(nodes, scales, strict=True):
                new = node.op.relaxed(c)(*node.inputs, alpha)
                replace.update(dict(zip(node.outputs, new, strict=True)))
            lik = graph_replace(lik, replace=replace, strict=False)
        (prior_x, lik_x), x = join_nonshared_inputs(self.point0, [prior, lik], value_vars)
        x.name = "x"
        total = prior_x + beta * lik_x
        grad = pt.grad(total, x)
        # One compiled function serves moves and swaps: a second, value-only one cost a numba
        # compile per model (about 0.7 s) for saving some 20 us on each of a few thousand swaps.
        self._fg = pytensor.function(
            [x, alpha, beta], [total, grad, prior_x, lik_x], on_unused_input="ignore",
            mode="NUMBA",
        )  # fmt: skip
        self._fg.trust_input = True
        self._one = np.asarray(1.0)
        self.n = self.x0.data.size
        #: the same function as a first-class numba function of the signature
        #: :data:`~pymc_wendy.bayes.tempering.nuts.TARGET`, what the compiled NUTS
        #: transition calls
        self.compiled = _target_function(self._fg)
        self._warm_up()

    def _relax_scales(self, nodes, value_vars) -> tuple[list[float], float]:
        """``c = tr S / (K D)`` of each weak term at the start, and the smallest eigenvalue
        of ``S / c`` over terms (where the covariance ladder's geometric part begins)."""
        inputs = [i for n in nodes for i in n.inputs]
        fn = pytensor.function(value_vars, inputs, on_unused_input="ignore", mode="FAST_COMPILE")
        values = fn(*(self.point0[v.name] for v in value_vars))
        scales, eig = [], []
        k = 0
        for node in nodes:
            lik = node.op.likelihood
            p = np.asarray(values[k], dtype=float)
            noise = {}
            if node.op.per_entry:  # every entry's variance (variance parameters as variables)
                noise["variances"] = values[k + 1]
            elif node.op.infer_sigma:
                noise["sigma"] = np.sqrt(values[k + 1])
            k += len(node.inputs)
            try:
                S = lik.covariance(p, **noise)
            except Exception as exc:  # noqa: BLE001 - re-raised with the context users need
                raise ValueError(
                    f"the weak likelihood is undefined at the start point (p = {p}): {exc}; "
                    "pass initvals inside its support"
                ) from exc
            c = float(np.trace(S) / S.shape[0])
            scales.append(c)
            eig.append(float(np.linalg.eigvalsh(S)[0]) / c)
        return scales, min(eig)

    def _warm_up(self) -> None:
        """Compile (or load from the disk cache) everything a NUTS transition calls now,
        before the forked workers start, which then inherit it."""
        lp, g, prior, lik = self.value_grad(self.x0.data, 1.0, 1.0)
        compiled_transition()(
            self.compiled, np.eye(self.n), 1.0, 1.0, self.x0.data.copy(), lp,
            np.ascontiguousarray(g, dtype=float), prior, lik, 1e-6, 1, np.random.default_rng(0),
        )  # fmt: skip

    def value_grad(self, x, alpha: float, beta: float):
        total, grad, prior, lik = self._fg(x, np.asarray(alpha), np.asarray(beta))
        return float(total), grad, float(prior), float(lik)

    def parts(self, x, alpha: float) -> tuple[float, float]:
        _, _, prior, lik = self._fg(x, np.asarray(alpha), self._one)
        return float(prior), float(lik)


def _target_function(fn):
    """The numba function behind a pytensor function compiled with the numba linker, as a
    function of the signature :data:`~pymc_wendy.bayes.tempering.nuts.TARGET`, with the
    values of its shared variables (pytensor passes them after the inputs) bound."""
    jit = fn.vm.jit_fn
    shared = tuple(fn.input_storage[i].storage[0] for i in range(3, len(fn.input_storage)))

    @numba.njit(TARGET.signature)
    def target(x, alpha, beta, grad, parts):
        a = np.empty(())
        a[()] = alpha
        b = np.empty(())
        b[()] = beta
        total, g, prior, lik = jit(x, a, b, *shared)
        for i in range(grad.size):  # not grad[:] = g: numba's shape message, 3 s cold
            grad[i] = g[i]
        parts[0] = prior[()]
        parts[1] = lik[()]
        return total[()]

    return target
