"""Several experiments of one ODE sharing its parameters.

Each experiment (its own time grid, data, noise level and test functions) is a
:class:`~pymc_wendy.WeakLikelihood`; their weak residuals are independent, so the joint
weak residual is their concatenation, its covariance is block-diagonal, and the joint negative
log-likelihood, gradient and Hessian are sums. :class:`JointLikelihood` exposes the same
interface as :class:`~pymc_wendy.WeakLikelihood` (so every weak-form estimator of
:func:`pymc_wendy.fit` runs on it unchanged) plus per-experiment diagnostics
(:meth:`JointLikelihood.diagnostics`). ``docs/experiments.md`` shows it in use.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Literal

import numpy as np
import scipy.linalg as sla

from pymc_wendy._threads import single_blas_thread
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak import kernels
from pymc_wendy.weak.diagnostics import diagnose
from pymc_wendy.weak.likelihood import WeakLikelihood
from pymc_wendy.weak.protocol import Correction, check_tilt

__all__ = ["JointLikelihood", "same_model"]


def same_model(a: ODEModel, b: ODEModel) -> bool:
    """Whether two models have the same states, parameters and right-hand side."""
    return a is b or (
        a.states == b.states and a.params == b.params and a.expressions == b.expressions
    )


class JointLikelihood:
    """The weak likelihood of several experiments of one ODE with shared parameters.

    Parameters
    ----------
    experiments : sequence of WeakLikelihood
        One per experiment, all of the same model (states, parameters and right-hand side)
        and the same noise kind; grids, data, noise levels and test functions may differ.

    Notes
    -----
    ``sigma`` arguments of the methods are ``None`` (each experiment's own noise level) or an
    array broadcastable to ``(E, D)``: a row per experiment.
    """

    def __init__(self, experiments: Sequence[WeakLikelihood]):
        experiments = tuple(experiments)
        if not experiments:
            raise ValueError("JointLikelihood needs at least one experiment")
        for i, e in enumerate(experiments):
            if not isinstance(e, WeakLikelihood):
                raise TypeError(f"experiment {i} is a {type(e).__name__}, not a WeakLikelihood")
        first = experiments[0]
        methods = {e.correction_method for e in experiments}
        if len(methods) > 1:
            raise ValueError(
                "the experiments carry different bias corrections "
                f"({[e.correction_method for e in experiments]}); correct all the same way, "
                "or correct the JointLikelihood of the uncorrected ones"
            )
        for i, e in enumerate(experiments[1:], start=1):
            if not same_model(e.base_model, first.base_model):
                raise ValueError(
                    f"experiment {i} has a different model ({e.base_model.name!r}: states "
                    f"{e.base_model.states}, params {e.base_model.params}) than experiment 0 "
                    f"({first.base_model.name!r}); experiments share one ODE"
                )
            if e.noise != first.noise:
                raise ValueError(
                    f"experiment {i} has noise={e.noise!r} but experiment 0 has "
                    f"{first.noise!r}; use one noise kind for all experiments"
                )
        self.experiments = experiments
        self._correction: Correction | None = None

    # --- what the estimators read --------------------------------------------------------
    @property
    def n_experiments(self) -> int:
        return len(self.experiments)

    @property
    def model(self) -> ODEModel:
        return self.experiments[0].model

    @property
    def base_model(self) -> ODEModel:
        return self.experiments[0].base_model

    @property
    def noise(self) -> str:
        return self.experiments[0].noise

    @property
    def t(self) -> tuple[np.ndarray, ...]:
        return tuple(e.t for e in self.experiments)

    @property
    def U(self) -> tuple[np.ndarray, ...]:
        return tuple(e.U for e in self.experiments)

    @property
    def sigma(self) -> np.ndarray:
        """Noise standard deviations, shape (E, D): a row per experiment."""
        return np.array([e.sigma for e in self.experiments])

    @property
    def sigma_estimated(self) -> bool:
        """Whether any experiment's noise level was estimated from its data."""
        return any(e.sigma_estimated for e in self.experiments)

    @property
    def test_functions(self) -> tuple:
        return tuple(e.test_functions for e in self.experiments)

    @property
    def K(self) -> int:
        """Number of test functions over all experiments."""
        return sum(e.K for e in self.experiments)

    @property
    def n_residuals(self) -> int:
        return sum(e.n_residuals for e in self.experiments)

    def __repr__(self) -> str:
        sizes = ", ".join(f"M+1={e.t.size} K={e.K}" for e in self.experiments)
        corrected = (
            "" if self._correction is None else f", bias-corrected: {self.correction_method}"
        )
        return (
            f"JointLikelihood({self.base_model.name!r}, {self.n_experiments} experiments "
            f"[{sizes}], noise={self.noise!r}{corrected})"
        )

    # --- helpers ---------------------------------------------------------------------------
    def check_params(self, p) -> np.ndarray:
        """``p`` as a finite float array of shape (J,), or a clear error."""
        return self.experiments[0].check_params(p)

    def _sigmas(self, sigma) -> list:
        if sigma is None:
            return [None] * self.n_experiments
        E, D = self.n_experiments, self.model.n_states
        s = np.asarray(sigma, dtype=float)
        try:
            s = np.broadcast_to(s, (E, D))
        except ValueError:
            raise ValueError(
                f"sigma for {E} experiments must broadcast to shape ({E}, {D}); got {s.shape}"
            ) from None
        return list(s)

    def _blocks(self) -> list[slice]:
        ends = np.cumsum([0] + [e.n_residuals for e in self.experiments])
        return [slice(a, b) for a, b in zip(ends[:-1], ends[1:], strict=True)]

    def covariance_factor(self, p, sigma=None) -> np.ndarray:
        """The block-diagonal Cholesky factor of the joint ``S(p)`` (what IRLS reweights by)."""
        sig = self._sigmas(sigma)
        return sla.block_diag(
            *(e.covariance_factor(p, s) for e, s in zip(self.experiments, sig, strict=True))
        )

    @property
    def exact_hessian_is_cheap(self) -> bool:
        """True: the joint fit always uses the exact Hessian (a sum over experiments)."""
        return True

    def newton_point(self, p) -> tuple[float, np.ndarray, np.ndarray]:
        """Value and gradient at ``p``; the state is ``p`` (:meth:`newton_hessian` sums the
        experiments' exact Hessians)."""
        value, grad = self.nll_grad(p)
        return value, grad, self.check_params(p)

    def newton_hessian(self, state, exact: bool = True) -> np.ndarray:
        """The exact Hessian at a :meth:`newton_point` state (``exact`` is ignored)."""
        return self.hessian(state)

    def score_mean(self, p) -> np.ndarray:
        """The summed score means of the experiments (their noise is independent)."""
        return np.sum([e.score_mean(p) for e in self.experiments], axis=0)

    # --- bias correction -------------------------------------------------------------------
    def corrected(self, method: str, tilt, reference) -> JointLikelihood:
        """A copy whose objective is the bias-corrected one (see
        :meth:`WeakLikelihood.corrected`): the sum of the experiments' quadratic forms, tilted
        by ``tilt`` (the summed score means, :func:`pymc_wendy.weak.bias.score_mean`)."""
        if self.correction_method is not None:
            raise ValueError("this likelihood is already bias-corrected")
        J = self.model.n_params
        tilt = check_tilt(tilt, J)
        reference = self.check_params(reference).copy()
        new = copy.copy(self)
        # each experiment carries its quadratic form and its share of l(reference); the tilt
        # is one vector for the sum
        new.experiments = tuple(
            e.corrected(method, np.zeros(J), reference) for e in self.experiments
        )
        new._correction = Correction(method=str(method), tilt=tilt, reference=reference)
        return new

    @property
    def correction(self) -> Correction | None:
        """The bias correction of the joint objective (the experiments carry the quadratic
        forms and their shares of the offset; this carries the tilt), or None."""
        return self._correction

    @property
    def correction_method(self) -> str | None:
        """The bias correction of the joint objective, or of its experiments (all alike)."""
        if self._correction is not None:
            return self._correction.method
        return self.experiments[0].correction_method

    @property
    def tilt(self) -> np.ndarray | None:
        """The constant subtracted from the joint score, or None."""
        if self._correction is not None:
            return self._correction.tilt.copy()
        if self.correction_method is None:
            return None
        return np.sum([e.tilt for e in self.experiments], axis=0)

    def _tilt_value(self, p: np.ndarray) -> float:
        c = self._correction
        return 0.0 if c is None else float(c.tilt @ (p - c.reference))

    # --- evaluation ------------------------------------------------------------------------
    def residual(self, p) -> np.ndarray:
        """The experiments' weak residuals, concatenated, shape (sum K_e D,)."""
        return np.concatenate([e.residual(p) for e in self.experiments])

    def dr_dp(self, p) -> np.ndarray:
        """Jacobian of the joint weak residual, shape (sum K_e D, J)."""
        return np.vstack([e.dr_dp(p) for e in self.experiments])

    def covariance(self, p, sigma=None) -> np.ndarray:
        """Block-diagonal covariance of the joint weak residual."""
        sig = self._sigmas(sigma)
        return sla.block_diag(
            *(e.covariance(p, s) for e, s in zip(self.experiments, sig, strict=True))
        )

    def whitened_residual(self, p, sigma=None) -> np.ndarray:
        sig = self._sigmas(sigma)
        return np.concatenate(
            [e.whitened_residual(p, s) for e, s in zip(self.experiments, sig, strict=True)]
        )

    @property
    def observation_key(self) -> str:
        """The experiments' :attr:`~pymc_wendy.WeakLikelihood.observation_key`, in order."""
        return "+".join(e.observation_key for e in self.experiments)

    def loo_log_likelihood(self, p, sigma=None) -> np.ndarray:
        """The experiments' leave-one-out log densities, concatenated: the experiments are
        independent, so an entry given all the others depends on its own experiment only."""
        sig = self._sigmas(sigma)
        return np.concatenate(
            [e.loo_log_likelihood(p, s) for e, s in zip(self.experiments, sig, strict=True)]
        )

    def nll(self, p, sigma=None) -> float:
        """Sum of the experiments' negative log-likelihoods (corrected objectives)."""
        p = self.check_params(p)
        sig = self._sigmas(sigma)
        value = sum(e.nll(p, s) for e, s in zip(self.experiments, sig, strict=True))
        return value - self._tilt_value(p)

    def nll_grad(self, p, sigma=None) -> tuple[float, np.ndarray]:
        p = self.check_params(p)
        sig = self._sigmas(sigma)
        parts = [e.nll_grad(p, s) for e, s in zip(self.experiments, sig, strict=True)]
        value = sum(v for v, _ in parts) - self._tilt_value(p)
        grad = np.sum([g for _, g in parts], axis=0)
        if self._correction is not None:
            grad = grad - self._correction.tilt
        return value, grad

    def nll_grad_sigma2(self, p, sigma=None) -> tuple[float, np.ndarray, np.ndarray]:
        """Value, gradient in ``p`` and in the noise variances, shape (E, D)."""
        sig = self._sigmas(sigma)
        parts = [e.nll_grad_sigma2(p, s) for e, s in zip(self.experiments, sig, strict=True)]
        return (
            sum(v for v, _, _ in parts),
            np.sum([g for _, g, _ in parts], axis=0),
            np.array([gs for _, _, gs in parts]),
        )

    def hessian(self, p, sigma=None) -> np.ndarray:
        sig = self._sigmas(sigma)
        return np.sum([e.hessian(p, s) for e, s in zip(self.experiments, sig, strict=True)], axis=0)

    @single_blas_thread
    def parameter_covariance(
        self, p, sigma=None, method: Literal["sandwich", "gls", "hessian"] = "sandwich"
    ) -> np.ndarray:
        """Approximate covariance of an estimator at ``p`` (see
        :meth:`WeakLikelihood.parameter_covariance`), with the stacked ``G = dr/dp`` and the
        block-diagonal ``S(p)``."""
        p = self.check_params(p)
        if method == "hessian":
            return kernels.inverse_information(self.hessian(p, sigma))
        if method not in ("sandwich", "gls"):
            raise ValueError(f"method must be 'sandwich', 'gls' or 'hessian'; got {method!r}")
        sig = self._sigmas(sigma)
        Gs = [e.dr_dp(p) for e in self.experiments]
        Cs = [e.covariance_factor(p, s) for e, s in zip(self.experiments, sig, strict=True)]
        if method == "gls":
            return kernels.gls_covariance(
                np.vstack([kernels.solve_lower(C, G) for C, G in zip(Cs, Gs, strict=True)])
            )
        Gplus = np.linalg.pinv(np.vstack(Gs))
        cov = np.zeros((Gplus.shape[0],) * 2)
        for block, C in zip(self._blocks(), Cs, strict=True):
            A = Gplus[:, block] @ C
            cov += A @ A.T
        return cov

    # --- per-experiment diagnostics ----------------------------------------------------------
    def diagnostics(self, p) -> dict[str, np.ndarray]:
        """Per-experiment diagnostics at a joint estimate ``p`` (:func:`diagnose`)."""
        joint_tilt = None if self._correction is None else self._correction.tilt
        return diagnose(self.experiments, self.check_params(p), joint_tilt)
