"""The weak-form likelihood bound to a model and a data set.

:class:`WeakLikelihood` validates the data, applies the log transform for log-normal noise,
builds (or accepts) the test functions, estimates the noise level when it is not given and
exposes the weak residual, its covariance, the negative log-likelihood, its gradient (with
respect to the parameters and to the per-state noise variances), its Hessian and the
estimator covariances at a point estimate.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from pymc_wendy._threads import single_blas_thread
from pymc_wendy._validation import check_data, check_positive_data
from pymc_wendy.model.inputs import as_inputs
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak import kernels, linear_form
from pymc_wendy.weak.noise import estimate_noise
from pymc_wendy.weak.test_functions import TestFunctions, build_test_functions, from_matrices

__all__ = ["WeakLikelihood"]

Noise = Literal["normal", "lognormal"]

#: Below this noise-to-signal ratio the data are treated as noise-free (S(p) ~ ridge * I).
NOISE_FREE_RATIO = 1e-6


class WeakLikelihood:
    """Weak-form Gaussian likelihood with parameter-dependent covariance (WENDy-MLE).

    Parameters
    ----------
    model : ODEModel
        The ODE. For ``noise="lognormal"`` the log-state model is derived automatically.
    t : array, shape (M+1,)
        Strictly increasing sample times (non-uniform grids are supported).
    U : array, shape (M+1, D)
        Observations, one row per time point.
    noise : {"normal", "lognormal"}
        Additive Gaussian noise, or multiplicative log-normal noise (all data must be > 0).
    sigma : float or array of shape (D,), optional
        Noise standard deviation per state (of ``log U`` for log-normal noise). Estimated from
        the data with the high-order filter when omitted.
    test_functions : TestFunctions, mapping, or (phi, dphi), optional
        Ready test functions, options for :func:`build_test_functions`, or user matrices.
    ridge : float
        ``S <- (1 - ridge) S + ridge I`` (WENDy.jl and the MATLAB code use 1e-10).
    linear : {"auto", "fast", "general"}
        Use the precomputed quadratic form of S(p) for linear-in-parameter models when it fits
        in ``max_precompute_bytes`` ("auto"), always ("fast"), or never ("general").
    max_precompute_bytes : int
        Memory budget for the linear-in-parameters precomputation.
    inputs : mapping, optional
        Values of the model's known inputs (``ODEModel(..., inputs=[...])``): names to
        :class:`~pymc_wendy.model.inputs.Input` objects, callables, or arrays on the times ``t``.

    Notes
    -----
    For a model of order > 1 or with inputs the constructor returns an
    :class:`~pymc_wendy.weak.operator.OperatorLikelihood`, a subclass with the same interface.
    """

    def __new__(cls, model=None, *args, **kwargs):
        if cls is WeakLikelihood and getattr(model, "has_operator_terms", False):
            from pymc_wendy.weak.operator import OperatorLikelihood

            return super().__new__(OperatorLikelihood)
        return super().__new__(cls)

    def __init__(
        self,
        model: ODEModel,
        t,
        U,
        *,
        inputs=None,
        noise: Noise = "normal",
        sigma=None,
        test_functions: TestFunctions | Mapping | Sequence | None = None,
        ridge: float = 1e-10,
        linear: Literal["auto", "fast", "general"] = "auto",
        max_precompute_bytes: int = 256 * 2**20,
    ):
        if not isinstance(model, ODEModel):
            raise TypeError(f"model must be an ODEModel; got {type(model)!r}")
        if noise not in ("normal", "lognormal"):
            raise ValueError(f"noise must be 'normal' or 'lognormal'; got {noise!r}")
        if not 0.0 <= ridge < 1.0:
            raise ValueError(f"ridge must be in [0, 1); got {ridge}")
        if linear not in ("auto", "fast", "general"):
            raise ValueError(f"linear must be 'auto', 'fast' or 'general'; got {linear!r}")
        t, U = check_data(t, U, model.n_states)
        self.inputs = as_inputs(model.inputs, inputs, t)
        self.base_model = model
        self.noise = noise
        self.t = t
        self.U = U
        if noise == "lognormal":
            check_positive_data(t, U, model.states)
            self.model = model.log_transformed()
            self.X = np.log(U)
        else:
            self.model = model
            self.X = U
        self.test_functions = self._test_functions(test_functions)
        self.phi = np.ascontiguousarray(self.test_functions.phi)
        self.dphi = np.ascontiguousarray(self.test_functions.dphi)
        self.b = self.dphi @ self.X
        self.ridge = float(ridge)
        self.sigma, self.sigma_estimated = self._sigma(sigma)
        self._linear_mode = linear
        self._max_precompute = max_precompute_bytes
        self._linear_cache: linear_form.LinearForm | None = None
        self._correction: dict | None = None

    # --- set-up --------------------------------------------------------------------------
    def _test_functions(self, spec) -> TestFunctions:
        if spec is None:
            return build_test_functions(self.t, self.X)
        if isinstance(spec, TestFunctions):
            tf = spec
        elif isinstance(spec, Mapping):
            return build_test_functions(self.t, self.X, **spec)
        elif isinstance(spec, Sequence) and len(spec) == 2:
            tf = from_matrices(spec[0], spec[1], self.t)
        else:
            raise TypeError(
                "test_functions must be a TestFunctions, a dict of build options, or (phi, dphi)"
            )
        if tf.phi.shape[1] != self.t.size:
            raise ValueError(
                f"test functions have {tf.phi.shape[1]} columns but the data have {self.t.size} "
                "time points"
            )
        return tf

    def _sigma(self, sigma) -> tuple[np.ndarray, bool]:
        if sigma is None:
            est = estimate_noise(self.X)
            scale = np.sqrt(np.mean(self.X**2, axis=0))
            if np.all(est <= NOISE_FREE_RATIO * np.maximum(scale, np.finfo(float).tiny)):
                warnings.warn(
                    "the data look noise-free (estimated noise "
                    f"{np.array2string(est, precision=2)}); S(p) is then ~ ridge * I and the "
                    "weak likelihood reduces to weak least squares",
                    stacklevel=3,
                )
            return est, True
        return self.check_sigma(sigma), False

    def check_sigma(self, sigma) -> np.ndarray:
        """Broadcast a noise standard deviation to shape (D,) and validate it."""
        D = self.model.n_states
        s = np.asarray(sigma, dtype=float)
        try:
            s = np.broadcast_to(s, (D,)).copy()
        except ValueError:
            raise ValueError(
                f"sigma must be a scalar or have {D} entries; got shape {s.shape}"
            ) from None
        if not np.all(np.isfinite(s)) or np.any(s < 0):
            raise ValueError(f"sigma must be finite and non-negative; got {s}")
        return s

    # --- sizes ---------------------------------------------------------------------------
    @property
    def K(self) -> int:
        """Number of test functions."""
        return self.phi.shape[0]

    @property
    def n_residuals(self) -> int:
        """Length of the weak residual, K * D."""
        return self.phi.shape[0] * self.model.n_states

    def __repr__(self) -> str:
        return (
            f"WeakLikelihood({self.model.name!r}, noise={self.noise!r}, M+1={self.t.size}, "
            f"D={self.model.n_states}, J={self.model.n_params}, K={self.K}, "
            f"sigma={np.array2string(self.sigma, precision=3)}"
            f"{' (estimated)' if self.sigma_estimated else ''}"
            f"{'' if self._correction is None else ', bias-corrected: ' + self.correction_method})"
        )

    # --- bias correction -------------------------------------------------------------------
    def corrected(self, method: str, tilt, reference) -> WeakLikelihood:
        """A copy whose objective is the bias-corrected weak quasi-likelihood.

        The copy's :meth:`nll` (and gradient, Hessian, ``parameter_covariance(method=
        "hessian")``, and the pytensor Op built on it) is

            l_c(p) = r' S(p)^-1 r / 2 - tilt' (p - reference) + l_0,

        the quadratic form without the log-determinant, tilted by the constant ``tilt`` (the
        estimated mean of its score, :func:`pymc_wendy.weak.bias.score_mean`), with
        ``l_0 = (log det S(reference) + n log 2 pi) / 2`` so that ``l_c`` and ``l`` agree at
        ``reference``. The noise level is held at ``sigma``. Built by
        :func:`pymc_wendy.weak.bias.corrected_likelihood`; see ``docs/bias.md``.
        """
        if self._correction is not None:
            raise ValueError("this likelihood is already bias-corrected")
        tilt = _check_tilt(tilt, self.model.n_params)
        reference = self._p(reference).copy()
        ev = self._evaluation(reference, self.sigma**2)
        new = copy.copy(self)
        new._correction = {
            "method": str(method),
            "tilt": tilt,
            "reference": reference,
            "offset": 0.5 * (ev.logdet + self.n_residuals * kernels._LOG_2PI),
        }
        return new

    @property
    def correction_method(self) -> str | None:
        """The bias correction this objective carries (:meth:`corrected`), or None."""
        return None if self._correction is None else self._correction["method"]

    @property
    def tilt(self) -> np.ndarray | None:
        """The constant subtracted from the score by :meth:`corrected`, or None."""
        return None if self._correction is None else self._correction["tilt"].copy()

    def _tilted(self, p: np.ndarray, value: float, grad: np.ndarray | None = None):
        c = self._correction
        value = value - c["tilt"] @ (p - c["reference"]) + c["offset"]
        return value if grad is None else (value, grad - c["tilt"])

    def _fixed_noise(self, sigma, what: str) -> None:
        if self._correction is not None and sigma is not None:
            if not np.allclose(self.check_sigma(sigma), self.sigma, rtol=1e-12, atol=0.0):
                raise ValueError(
                    f"{what}: a bias-corrected likelihood holds the noise level at the "
                    "sigma it was built with (its quadratic form has no normaliser in sigma)"
                )

    # --- evaluation ------------------------------------------------------------------------
    def _p(self, p) -> np.ndarray:
        p = np.asarray(p, dtype=float)
        if p.shape != (self.model.n_params,):
            raise ValueError(f"p must have shape ({self.model.n_params},); got {p.shape}")
        if not np.all(np.isfinite(p)):
            raise ValueError(f"p must be finite; got {p}")
        return p

    def _s2(self, sigma) -> np.ndarray:
        s = self.sigma if sigma is None else self.check_sigma(sigma)
        return s**2

    def _derivs(self, p: np.ndarray, *which: str) -> list[np.ndarray]:
        out = []
        for w in which:
            arr = self.model.evaluate(w, self.t, self.X, p)
            kernels._check_finite(w, arr, self.t)
            out.append(arr)
        return out

    # The three hooks below are all that depends on the form of the weak residual; the
    # operator form of higher-order and forced models (pymc_wendy.weak.operator) replaces them.
    def _evaluation(self, p: np.ndarray, s2: np.ndarray, diag: float | None = None):
        """Residual, covariance factor and value at ``p`` (``diag``: see kernels.evaluate)."""
        F, Ju = self._derivs(p, "f", "f_u")
        return kernels.evaluate(self.phi, self.dphi, self.b, F, Ju, s2, self.ridge, diag)

    def _gradient(self, p: np.ndarray, ev, logdet: bool, sigma2: bool) -> tuple:
        """``(grad_p, grad_sigma2 or None, state)``; ``state`` is what :meth:`_hessian_at`
        reuses at the same point."""
        Jp, Jup = self._derivs(p, "f_p", "f_up")
        g, gs, B = kernels.gradient_parts(ev, self.phi, Jp, Jup, self.ridge, logdet, sigma2)
        return g, gs, (Jp, Jup, B)

    def _hessian_at(self, p: np.ndarray, ev, state: tuple, logdet: bool, exact: bool):
        Jp, Jup, B = state
        Jpp, Jupp = self._derivs(p, "f_pp", "f_upp")
        return kernels.hessian(ev, self.phi, Jp, Jup, Jpp, Jupp, B, logdet, exact)

    def _linear_coefficients(self, s2e: np.ndarray):
        """``(r0, G, A)`` of the linear-in-parameters form for effective variances ``s2e``."""
        return linear_form._coefficients(self, s2e)

    def _linear_form(self, s2: np.ndarray) -> linear_form.LinearForm | None:
        if self._linear_mode == "general" or not self.model.is_linear_in_params:
            return None
        cache = self._linear_cache
        if cache is not None and np.array_equal(cache.s2_raw, s2):
            return cache
        need = linear_form.precompute_bytes(self.K, self.model.n_states, self.model.n_params)
        if self._linear_mode == "auto" and need > self._max_precompute:
            return None
        self._linear_cache = linear_form.LinearForm.build(self, s2)
        return self._linear_cache

    def residual(self, p) -> np.ndarray:
        """Weak residual ``r(p)``, shape (K*D,), state-major (entry ``d*K + k``)."""
        p = self._p(p)
        (F,) = self._derivs(p, "f")
        return kernels.residual(self.phi, F, self.b)

    @single_blas_thread
    def covariance(self, p, sigma=None) -> np.ndarray:
        """Weak-residual covariance ``S(p)`` including the ridge, shape (K*D, K*D)."""
        p = self._p(p)
        ev = self._evaluation(p, self._s2(sigma))
        return ev.C @ ev.C.T

    @single_blas_thread
    def nll(self, p, sigma=None) -> float:
        """Negative log-likelihood ``l(p)`` (WENDy-MLE eq. 6); ``l_c`` if :meth:`corrected`."""
        p = self._p(p)
        self._fixed_noise(sigma, "nll")
        s2 = self._s2(sigma)
        logdet = self._correction is None
        lin = self._linear_form(s2)
        if lin is not None:
            value = lin.nll(p, logdet)
        else:
            ev = self._evaluation(p, s2)
            value = ev.nll if logdet else ev.quadratic
        return value if logdet else self._tilted(p, value)

    @single_blas_thread
    def nll_grad(self, p, sigma=None) -> tuple[float, np.ndarray]:
        """Negative log-likelihood and its gradient with respect to ``p``."""
        p = self._p(p)
        self._fixed_noise(sigma, "nll_grad")
        s2 = self._s2(sigma)
        logdet = self._correction is None
        lin = self._linear_form(s2)
        if lin is not None:
            value, g = lin.nll_grad(p, logdet)
        else:
            ev = self._evaluation(p, s2)
            g, _, _ = self._gradient(p, ev, logdet, False)
            value = ev.nll if logdet else ev.quadratic
        return (value, g) if logdet else self._tilted(p, value, g)

    @single_blas_thread
    def nll_grad_sigma2(self, p, sigma=None) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, gradient in ``p`` and gradient in the per-state noise variances ``sigma**2``."""
        if self._correction is not None:
            raise ValueError(
                "a bias-corrected likelihood holds the noise level fixed; it has no gradient "
                "in sigma (its quadratic form has no normaliser in sigma)"
            )
        p = self._p(p)
        ev = self._evaluation(p, self._s2(sigma))
        g, gs, _ = self._gradient(p, ev, True, True)
        return ev.nll, g, gs

    def _relaxed_parts(self, p: np.ndarray, s2: np.ndarray, diag: float, logdet: bool):
        """Evaluation, gradient in ``p`` and in the variances for ``S = (1 - ridge) L diag(s2)
        L' + diag I`` (the tempering ladder's relaxed rungs; numpy reference of the Op)."""
        ev = self._evaluation(p, s2, diag)
        g, gs, _ = self._gradient(p, ev, logdet, True)
        return ev, g, gs

    @single_blas_thread
    def hessian(self, p, sigma=None) -> np.ndarray:
        """Hessian of the negative log-likelihood with respect to ``p`` (WENDy-MLE eq. 8).

        For a :meth:`corrected` likelihood, the Hessian of ``l_c`` (that of the quadratic
        form; the tilt is linear).
        """
        p = self._p(p)
        self._fixed_noise(sigma, "hessian")
        logdet = self._correction is None
        ev = self._evaluation(p, self._s2(sigma))
        _, _, state = self._gradient(p, ev, logdet, False)
        return self._hessian_at(p, ev, state, logdet, True)

    @single_blas_thread
    def _newton_point(self, p) -> tuple[float, np.ndarray, tuple]:
        """Value and gradient (general path, noise at ``sigma``) and the state that a Hessian
        at the same ``p`` reuses (:meth:`_newton_hessian`): the optimiser asks for the
        Hessian at every accepted point, and the evaluation and ``B`` are most of its cost."""
        p = self._p(p)
        logdet = self._correction is None
        ev = self._evaluation(p, self.sigma**2)
        g, _, state = self._gradient(p, ev, logdet, False)
        value = ev.nll if logdet else ev.quadratic
        if not logdet:
            value, g = self._tilted(p, value, g)
        return value, g, (p, ev, state)

    @single_blas_thread
    def _newton_hessian(self, state: tuple, exact: bool) -> np.ndarray:
        """Hessian at the point of a :meth:`_newton_point` state; ``exact=False`` leaves out
        the log-determinant's trace terms (``kernels.hessian``), the optimiser's cheap model."""
        p, ev, grad_state = state
        return self._hessian_at(p, ev, grad_state, self._correction is None, exact)

    @single_blas_thread
    def whitened_residual(self, p, sigma=None) -> np.ndarray:
        """``C^{-1} r(p)`` with ``S = C C^T``: i.i.d. standard normal at the truth (first order)."""
        p = self._p(p)
        return kernels.whiten(self._evaluation(p, self._s2(sigma)))

    def dr_dp(self, p) -> np.ndarray:
        """Jacobian of the weak residual with respect to ``p``, shape (K*D, J)."""
        p = self._p(p)
        (Jp,) = self._derivs(p, "f_p")
        return kernels.dr_dp(self.phi, Jp)

    @single_blas_thread
    def parameter_covariance(
        self, p, sigma=None, method: Literal["sandwich", "gls", "hessian"] = "sandwich"
    ) -> np.ndarray:
        """Approximate covariance of an estimator at ``p``.

        ``"sandwich"``: WENDy-MLE eq. 9, ``G^+ S(p) G^{+T}`` with ``G = dr/dp`` (the
        first-order covariance of weak least squares).
        ``"gls"``: ``(G^T S(p)^{-1} G)^{-1}`` (generalised least squares with fixed weights).
        ``"hessian"``: the inverse observed information, ``H(p)^{-1}``.
        """
        p = self._p(p)
        if method in ("sandwich", "gls"):
            G = self.dr_dp(p)
            C = self._evaluation(p, self._s2(sigma)).C
            if method == "sandwich":
                A = np.linalg.pinv(G) @ C
                return A @ A.T
            return _gls_covariance(kernels._tri(C, G))
        if method == "hessian":
            return _inverse_information(self.hessian(p, sigma))
        raise ValueError(f"method must be 'sandwich', 'gls' or 'hessian'; got {method!r}")


def _gls_covariance(A: np.ndarray) -> np.ndarray:
    """``(A^T A)^-1`` for the whitened Jacobian ``A = C^-1 G``, through the R factor of ``A``
    for accuracy."""
    R = np.linalg.qr(A, mode="r")
    Ri = np.linalg.solve(R, np.eye(R.shape[0]))
    return Ri @ Ri.T


def _inverse_information(H: np.ndarray) -> np.ndarray:
    """``H^-1`` for a Hessian of the negative log-likelihood, by Cholesky; a clear error
    where ``H`` is not positive definite."""
    try:
        Lh = np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        raise kernels.WeakLikelihoodError(
            "the Hessian is not positive definite at p: not a local minimum of the "
            "negative log-likelihood, so its inverse is no covariance"
        ) from None
    Li = np.linalg.solve(Lh, np.eye(H.shape[0]))
    return Li.T @ Li


def _check_tilt(tilt, J: int) -> np.ndarray:
    """A bias correction's tilt as ``J`` finite values, or a clear error."""
    tilt = np.array(tilt, dtype=float).reshape(-1)
    if tilt.shape != (J,) or not np.all(np.isfinite(tilt)):
        raise ValueError(f"tilt must be {J} finite values; got {tilt}")
    return tilt
