"""The weak form of a first-order system ``du/dt = f(t, u, p)`` (the WENDy papers' form).

One integration by parts moves the derivative onto the test functions:
``r[k, d](p) = sum_m Phi[k, m] f_d(p, U[m], t_m) + sum_m dPhi[k, m] U[m, d]`` (BRIEF.md sec. 2),
with the kernels of :mod:`pymc_wendy.weak.kernels`, or, for local test functions whose
covariance is banded (:func:`pymc_wendy.weak.banded.use_banded`), those of
:mod:`pymc_wendy.weak.banded`.

The banded path (``FirstOrderForm.banded``) never forms ``phi`` or ``S``: value, gradient,
the optimiser's Newton model, ``S`` times a matrix (the sandwich covariance) and the
whitening ``C^-1`` all work on the windows and the band. The exact Hessian's trace term needs
``S^-1`` outside the band, so there the Hessian is central differences of the analytic
gradient (``2 J`` gradients, relative error about ``1e-8``: :meth:`FirstOrderForm.hessian`).
What still needs the dense ``S`` (the covariance factor itself, the bias correction's score
mean, the compiled Op) densifies the test functions, with a clear error where they would
not fit in memory (:data:`~pymc_wendy.weak.test_functions.local.DENSE_LIMIT_BYTES`).
"""

from __future__ import annotations

import numpy as np

from pymc_wendy.weak import banded, kernels, linear_form
from pymc_wendy.weak.form import KernelSpec, WeakForm, register_form
from pymc_wendy.weak.test_functions import (
    TestFunctions,
    accurate_test_functions,
    build_local_test_functions,
    build_test_functions,
)

__all__ = ["LONG_SERIES_POINTS", "FirstOrderForm"]

#: Above this many time points the default test functions of a first-order model are local
#: ones (:meth:`FirstOrderForm.default_test_functions`).
LONG_SERIES_POINTS = 1025


@register_form
class FirstOrderForm(WeakForm):
    """:class:`~pymc_wendy.weak.form.WeakForm` of ``du/dt = f(t, u, p)``; the fallback for
    every model no more specific form accepts."""

    kind = "general"

    def __init__(self, model, t, X, test_functions, inputs, ridge, weights=None):
        super().__init__(model, t, X, test_functions, inputs, ridge, weights)
        self._hessian_cache: tuple | None = None
        #: whether value, gradient and Newton model take the banded path
        self.banded = self.rows is not None and banded.use_banded(self.rows, X.shape[1])
        #: the data's constant part of the residual, ``dPhi X``
        self.b = self._window_sum("dphi", X) if self.banded else self.dphi @ X

    @classmethod
    def accepts(cls, model) -> bool:
        return True

    @classmethod
    def default_test_functions(cls, t, X, model, **where) -> TestFunctions:
        """WENDy's construction (corner-rule radius, multiples up to 8x); on a series too
        short for it to give ``2 J`` weak residuals (``K D``), the narrowest accurate radii
        instead (:func:`~pymc_wendy.weak.test_functions.accurate_test_functions`, as for
        higher-order models; ``docs/data.md`` has the measurements). Above
        :data:`LONG_SERIES_POINTS` points on a uniform grid without doses, local test
        functions (:func:`~pymc_wendy.weak.test_functions.build_local_test_functions`): the
        SVD of the stacked bumps costs about ``M^3`` (10 s at 2049 points, 152 s and 4.2 GB
        at 4097), and at 2049 and 4097 points local ones were as accurate
        (``docs/performance.md``, "Long series")."""
        D, J = X.shape[1], model.n_params
        if t.size > LONG_SERIES_POINTS and not any(np.size(v) for v in where.values()):
            try:
                return build_local_test_functions(t, X)
            except ValueError:  # a non-uniform grid, say: the default construction
                pass
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

    # --- the windows (banded path) ----------------------------------------------------------
    def _window_sum(self, which: str, A: np.ndarray) -> np.ndarray:
        """``Phi A`` (``which="phi"``) or ``dPhi A`` from the windows: shape (K, ...) in the
        original row order, for ``A`` of shape (M+1, ...)."""
        rows = self.rows
        out = np.einsum("pt,pt...->p...", getattr(rows, which), rows.gather(A), optimize=True)
        res = np.empty_like(out)
        res[rows.order] = out
        return res

    def _window_transpose(self, which: str, A: np.ndarray) -> np.ndarray:
        """``Phi^T A`` (or ``dPhi^T A``) from the windows, ``A`` (K, c) in the original row
        order: shape (M+1, c)."""
        rows = self.rows
        return rows.scatter(getattr(rows, which)[:, :, None] * A[rows.order][:, None, :])

    def residual(self, p):
        (F,) = self.derivs(p, "f")
        if self.banded:
            return (self._window_sum("phi", F) + self.b).T.ravel()
        return kernels.residual(self.phi, F, self.b)

    def dr_dp(self, p):
        (Jp,) = self.derivs(p, "f_p")
        if self.banded:
            G = self._window_sum("phi", Jp)  # (K, D, J)
            return G.transpose(1, 0, 2).reshape(-1, Jp.shape[2])
        return kernels.dr_dp(self.phi, Jp)

    def evaluation(self, p, s2, diag=None):
        if not self.banded:
            return self.dense_evaluation(p, s2, diag)
        F, Ju = self.derivs(p, "f", "f_u")
        ev = banded.evaluate(
            None, None, self.b, F, Ju, s2, self.ridge, self._diag(diag), self.weights,
            rows=self.rows,
        )  # fmt: skip
        ev.sigma2, ev.diag = np.asarray(s2, dtype=float), diag  # for the Hessian's differences
        return ev

    def dense_evaluation(self, p, s2, diag=None):
        """:func:`kernels.evaluate` with the dense ``phi`` (densified for local test
        functions): what needs the Cholesky factor of the whole ``S``."""
        F, Ju = self.derivs(p, "f", "f_u")
        b = self.b if not self.banded else self.dphi @ self.X
        return kernels.evaluate(
            self.phi, self.dphi, b, F, Ju, s2, self.ridge, self._diag(diag), self.weights
        )

    def gradient(self, p, ev, logdet, sigma2):
        Jp, Jup = self.derivs(p, "f_p", "f_up")
        parts = banded.gradient_parts if self.banded else kernels.gradient_parts
        g, gs, B = parts(ev, None if self.banded else self.phi, Jp, Jup, self.ridge, logdet, sigma2)
        return g, gs, (Jp, Jup, B)

    def hessian(self, p, ev, state, logdet, exact):
        """Hessian in ``p``; on the banded path the exact one (``exact`` and ``logdet``) is
        central differences of the analytic gradient (module docstring)."""
        Jp, Jup, B = state
        if self.banded and exact and logdet:
            # the fit asks twice at its estimate (stationarity, then the covariance)
            key = (np.asarray(p, dtype=float).tobytes(), ev.sigma2.tobytes(), ev.diag)
            if self._hessian_cache is None or self._hessian_cache[0] != key:
                self._hessian_cache = (key, self._difference_hessian(p, ev))
            return self._hessian_cache[1].copy()
        Jpp, Jupp = self.derivs(p, "f_pp", "f_upp")
        if self.banded:
            return banded.hessian(ev, None, Jp, Jup, Jpp, Jupp, B, logdet, exact)
        return kernels.hessian(ev, self.phi, Jp, Jup, Jpp, Jupp, B, logdet, exact)

    def _difference_hessian(self, p, ev) -> np.ndarray:
        """Central differences of the banded gradient, steps ``1e-4`` of each parameter's
        size (at least ``1e-2`` of the largest): relative error about ``h^2 ~ 1e-8``."""
        p = np.asarray(p, dtype=float)
        size = np.maximum(np.abs(p), 1e-2 * max(float(np.max(np.abs(p))), 1e-6))
        h = 1e-4 * size
        H = np.empty((p.size, p.size))
        for j in range(p.size):  # loop over parameters: 2 J gradients
            step = np.zeros(p.size)
            step[j] = h[j]
            g = []
            for q in (p + step, p - step):
                e = self.evaluation(q, ev.sigma2, ev.diag)
                g.append(self.gradient(q, e, True, False)[0])
            H[:, j] = (g[0] - g[1]) / (2.0 * h[j])
        return 0.5 * (H + H.T)

    def whitener(self, p, s2):
        """``B -> C^-1 B`` for a factor ``S = C C'`` (state-major rows of ``B``): the dense
        Cholesky factor, or on the banded path the band factor in the interleaved order (an
        orthogonal rotation of the dense whitening: same norms and least-squares fits)."""
        ev = self.evaluation(p, s2)
        if not self.banded:
            return lambda B: kernels.solve_lower(ev.C, B)
        return ev.whiten_rows

    def covariance_times(self, p, s2, A: np.ndarray) -> np.ndarray:
        """``S(p) A`` for state-major rows ``A`` (n, c), from the windows on the banded path
        (``L diag(v) L' A + ridge``): what the sandwich covariance needs."""
        if not self.banded:
            C = self.evaluation(p, s2).C
            return C @ (C.T @ A)
        (Ju,) = self.derivs(p, "f_u")
        D, K = self.X.shape[1], self.K
        Ab = A.reshape(D, K, -1).transpose(1, 0, 2).reshape(K, -1)  # (K, D c)
        c = A.shape[1]
        PA = self._window_transpose("phi", Ab).reshape(-1, D, c)  # Phi^T A_d: (M+1, D, c)
        DA = self._window_transpose("dphi", Ab).reshape(-1, D, c)
        y = np.einsum("mde,mdc->mec", Ju, PA, optimize=True) + DA  # L^T A: (M+1, e, c)
        v = (1.0 - self.ridge) * np.asarray(s2, dtype=float)
        y *= (v[None, :] if self.weights is None else v[None, :] * self.weights)[:, :, None]
        out = self._window_sum("phi", np.einsum("mde,mec->mdc", Ju, y, optimize=True))
        out += self._window_sum("dphi", y)  # (K, D, c)
        return out.transpose(1, 0, 2).reshape(D * K, c) + self.ridge_diag * A

    def linear_coefficients(self, s2e):
        J = self.model.n_params
        F0, Ju0, Jp, Jup = self.derivs(np.zeros(J), "f", "f_u", "f_p", "f_up")
        r0 = kernels.residual(self.phi, F0, self.b)
        G = kernels.dr_dp(self.phi, Jp)
        A = linear_form.covariance_coefficients(self.phi, self.dphi, Ju0, Jup, s2e, self.weights)
        return r0, G, A

    def score_mean(self, p, ev):
        Jp, Juu = self.derivs(p, "f_p", "f_uu")
        if self.banded:  # needs S^-1 beyond the band: the dense evaluation
            ev = self.dense_evaluation(p, ev.sigma2, ev.diag)
        return kernels.quadratic_score_mean(ev, self.phi, Jp, Juu)

    def kernel_spec(self):
        fns = {w: self.model.numba_function(w) for w in ("f", "f_u", "f_p", "f_up")}
        if self.banded:  # the windows, in the band's order (backends/numba_banded.py)
            rows = self.rows
            Gp, Gd = rows.neighbours
            arrays = (
                self.t, self.X, rows.start.astype(float), rows.phi, rows.dphi, Gp, Gd,
                self.b[rows.order], self.weights_or_ones(),
            )  # fmt: skip
            return KernelSpec("banded", arrays, fns)
        arrays = (self.t, self.X, self.phi, self.dphi, self.b, self.weights_or_ones())
        return KernelSpec(self.kind, arrays, fns)
