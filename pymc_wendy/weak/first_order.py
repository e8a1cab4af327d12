"""The weak form of a first-order system ``du/dt = f(t, u, p)`` (the WENDy papers' form).

One integration by parts moves the derivative onto the test functions:
``r[k, d](p) = sum_m Phi[k, m] f_d(p, U[m], t_m) + sum_m dPhi[k, m] U[m, d]`` (BRIEF.md sec. 2),
with the kernels of :mod:`pymc_wendy.weak.kernels`.
"""

from __future__ import annotations

import numpy as np

from pymc_wendy.weak import kernels, linear_form
from pymc_wendy.weak.form import KernelSpec, WeakForm, register_form
from pymc_wendy.weak.test_functions import (
    TestFunctions,
    accurate_test_functions,
    build_test_functions,
)

__all__ = ["FirstOrderForm"]


@register_form
class FirstOrderForm(WeakForm):
    """:class:`~pymc_wendy.weak.form.WeakForm` of ``du/dt = f(t, u, p)``; the fallback for
    every model no more specific form accepts."""

    kind = "general"

    def __init__(self, model, t, X, test_functions, inputs, ridge, weights=None):
        super().__init__(model, t, X, test_functions, inputs, ridge, weights)
        #: the data's constant part of the residual, ``dPhi X``
        self.b = self.dphi @ X

    @classmethod
    def accepts(cls, model) -> bool:
        return True

    @classmethod
    def default_test_functions(cls, t, X, model, **where) -> TestFunctions:
        """WENDy's construction (corner-rule radius, multiples up to 8x); on a series too
        short for it to give ``2 J`` weak residuals (``K D``), the narrowest accurate radii
        instead (:func:`~pymc_wendy.weak.test_functions.accurate_test_functions`, as for
        higher-order models; ``docs/data.md`` has the measurements)."""
        D, J = X.shape[1], model.n_params
        try:
            tf = build_test_functions(t, X, **where)
        except ValueError:  # the corner rule's radii do not fit: the short rule may
            tf = None
        if tf is not None and tf.K * D >= 2 * J:
            return tf
        try:
            short = accurate_test_functions(t, X, 1, -(-2 * J // D), **where)
        except ValueError:
            if tf is None:
                raise
            return tf
        return short if tf is None or short.K > tf.K else tf

    def residual(self, p):
        (F,) = self.derivs(p, "f")
        return kernels.residual(self.phi, F, self.b)

    def dr_dp(self, p):
        (Jp,) = self.derivs(p, "f_p")
        return kernels.dr_dp(self.phi, Jp)

    def evaluation(self, p, s2, diag=None):
        F, Ju = self.derivs(p, "f", "f_u")
        return kernels.evaluate(
            self.phi, self.dphi, self.b, F, Ju, s2, self.ridge, self._diag(diag), self.weights
        )

    def gradient(self, p, ev, logdet, sigma2):
        Jp, Jup = self.derivs(p, "f_p", "f_up")
        g, gs, B = kernels.gradient_parts(ev, self.phi, Jp, Jup, self.ridge, logdet, sigma2)
        return g, gs, (Jp, Jup, B)

    def hessian(self, p, ev, state, logdet, exact):
        Jp, Jup, B = state
        Jpp, Jupp = self.derivs(p, "f_pp", "f_upp")
        return kernels.hessian(ev, self.phi, Jp, Jup, Jpp, Jupp, B, logdet, exact)

    def linear_coefficients(self, s2e):
        J = self.model.n_params
        F0, Ju0, Jp, Jup = self.derivs(np.zeros(J), "f", "f_u", "f_p", "f_up")
        r0 = kernels.residual(self.phi, F0, self.b)
        G = kernels.dr_dp(self.phi, Jp)
        A = linear_form.covariance_coefficients(self.phi, self.dphi, Ju0, Jup, s2e, self.weights)
        return r0, G, A

    def score_mean(self, p, ev):
        Jp, Juu = self.derivs(p, "f_p", "f_uu")
        return kernels.quadratic_score_mean(ev, self.phi, Jp, Juu)

    def kernel_spec(self):
        fns = {w: self.model.numba_function(w) for w in ("f", "f_u", "f_p", "f_up")}
        arrays = (self.t, self.X, self.phi, self.dphi, self.b, self.weights_or_ones())
        return KernelSpec(self.kind, arrays, fns)
