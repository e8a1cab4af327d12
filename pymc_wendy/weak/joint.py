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
import types
from collections.abc import Sequence
from typing import Literal

import numpy as np
import scipy.linalg as sla
from scipy import stats

from pymc_wendy._threads import single_blas_thread
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak import kernels
from pymc_wendy.weak.likelihood import (
    WeakLikelihood,
    _check_tilt,
    _gls_covariance,
    _inverse_information,
)

__all__ = ["JointLikelihood", "diagnose", "same_model"]


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
        self._correction: dict | None = None

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
    def _p(self, p) -> np.ndarray:
        return self.experiments[0]._p(p)

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

    def _evaluation(self, p: np.ndarray, s2) -> types.SimpleNamespace:
        """The block-diagonal Cholesky factor of the joint ``S(p)`` (what IRLS reweights by)."""
        s2 = np.broadcast_to(np.asarray(s2, dtype=float), (self.n_experiments, self.model.n_states))
        evs = [e._evaluation(p, v) for e, v in zip(self.experiments, s2, strict=True)]
        return types.SimpleNamespace(C=sla.block_diag(*(ev.C for ev in evs)), parts=evs)

    # --- bias correction -------------------------------------------------------------------
    def corrected(self, method: str, tilt, reference) -> JointLikelihood:
        """A copy whose objective is the bias-corrected one (see
        :meth:`WeakLikelihood.corrected`): the sum of the experiments' quadratic forms, tilted
        by ``tilt`` (the summed score means, :func:`pymc_wendy.weak.bias.score_mean`)."""
        if self.correction_method is not None:
            raise ValueError("this likelihood is already bias-corrected")
        J = self.model.n_params
        tilt = _check_tilt(tilt, J)
        reference = self._p(reference).copy()
        new = copy.copy(self)
        # each experiment carries its quadratic form and its share of l(reference); the tilt
        # is one vector for the sum
        new.experiments = tuple(
            e.corrected(method, np.zeros(J), reference) for e in self.experiments
        )
        new._correction = {"method": str(method), "tilt": tilt, "reference": reference}
        return new

    @property
    def correction_method(self) -> str | None:
        """The bias correction of the joint objective, or of its experiments (all alike)."""
        if self._correction is not None:
            return self._correction["method"]
        return self.experiments[0].correction_method

    @property
    def tilt(self) -> np.ndarray | None:
        """The constant subtracted from the joint score, or None."""
        if self._correction is not None:
            return self._correction["tilt"].copy()
        if self.correction_method is None:
            return None
        return np.sum([e.tilt for e in self.experiments], axis=0)

    def _tilt_value(self, p: np.ndarray) -> float:
        c = self._correction
        return 0.0 if c is None else float(c["tilt"] @ (p - c["reference"]))

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

    def nll(self, p, sigma=None) -> float:
        """Sum of the experiments' negative log-likelihoods (corrected objectives)."""
        p = self._p(p)
        sig = self._sigmas(sigma)
        value = sum(e.nll(p, s) for e, s in zip(self.experiments, sig, strict=True))
        return value - self._tilt_value(p)

    def nll_grad(self, p, sigma=None) -> tuple[float, np.ndarray]:
        p = self._p(p)
        sig = self._sigmas(sigma)
        parts = [e.nll_grad(p, s) for e, s in zip(self.experiments, sig, strict=True)]
        value = sum(v for v, _ in parts) - self._tilt_value(p)
        grad = np.sum([g for _, g in parts], axis=0)
        if self._correction is not None:
            grad = grad - self._correction["tilt"]
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
        p = self._p(p)
        if method == "hessian":
            return _inverse_information(self.hessian(p, sigma))
        if method not in ("sandwich", "gls"):
            raise ValueError(f"method must be 'sandwich', 'gls' or 'hessian'; got {method!r}")
        sig = self._sigmas(sigma)
        Gs = [e.dr_dp(p) for e in self.experiments]
        Cs = [e._evaluation(p, e._s2(s)).C for e, s in zip(self.experiments, sig, strict=True)]
        if method == "gls":
            return _gls_covariance(
                np.vstack([kernels._tri(C, G) for C, G in zip(Cs, Gs, strict=True)])
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
        joint_tilt = None if self._correction is None else self._correction["tilt"]
        return diagnose(self.experiments, self._p(p), joint_tilt)


@single_blas_thread
def diagnose(experiments: Sequence[WeakLikelihood], p, tilt=None) -> dict[str, np.ndarray]:
    """Per-experiment diagnostics of the experiments' weak likelihoods at a joint estimate.

    ``tilt`` is the bias correction's tilt of the joint objective (shared evenly among the
    experiments' scores), if any.

    Returns a dict of arrays with one entry per experiment:

    ``n_points``, ``n_test_functions``
        Sizes.
    ``nll``
        The experiment's share of the (corrected) objective.
    ``whitened_ms``
        Mean square of the whitened residual ``C^-1 r``: about 1 when the experiment's
        data, noise level and the joint estimate agree.
    ``shapiro_pvalue``
        Shapiro-Wilk p-value of the whitened residual (WENDy's normality check).
    ``consistency``, ``consistency_dof``, ``consistency_pvalue``
        A score test of the experiment against the others: its own Newton step from the
        joint estimate, ``d = -H_e^-1 g_e``, in the metric of its covariance
        ``H_e^-1 - H^-1``; chi-square with ``consistency_dof`` degrees of freedom when all
        experiments share the parameters. A small p-value flags an experiment whose data
        want other parameters (or another noise level). NaN when the experiment alone
        does not determine the parameters (``H_e`` singular).
    """
    p = np.asarray(p, dtype=float)
    E = len(experiments)
    out = {
        "n_points": np.array([e.t.size for e in experiments]),
        "n_test_functions": np.array([e.K for e in experiments]),
        "nll": np.full(E, np.nan),
        "whitened_ms": np.full(E, np.nan),
        "shapiro_pvalue": np.full(E, np.nan),
        "consistency": np.full(E, np.nan),
        "consistency_dof": np.zeros(E, dtype=int),
        "consistency_pvalue": np.full(E, np.nan),
    }
    grads, hessians = [], []
    for i, e in enumerate(experiments):
        try:
            value, g = e.nll_grad(p)
            w = e.whitened_residual(p)
            H = e.hessian(p)
        except kernels.WeakLikelihoodError:
            grads.append(None)
            hessians.append(None)
            continue
        out["nll"][i] = value
        out["whitened_ms"][i] = float(w @ w) / w.size
        out["shapiro_pvalue"][i] = stats.shapiro(w).pvalue if w.size >= 3 else np.nan
        grads.append(g)
        hessians.append(H)
    if E < 2 or any(h is None for h in hessians):
        return out
    if tilt is not None:  # the tilt belongs to the sum: share it evenly
        grads = [g - tilt / E for g in grads]
    try:
        V_joint = _inverse_information(np.sum(hessians, axis=0))
    except kernels.WeakLikelihoodError:
        return out
    for i, (g, H) in enumerate(zip(grads, hessians, strict=True)):
        try:
            V_e = _inverse_information(H)
        except kernels.WeakLikelihoodError:
            continue
        d = -V_e @ g
        V = V_e - V_joint
        w, vec = np.linalg.eigh(0.5 * (V + V.T))
        keep = w > 1e-10 * w.max()
        z = (vec[:, keep].T @ d) / np.sqrt(w[keep])
        out["consistency"][i] = float(z @ z)
        out["consistency_dof"][i] = int(keep.sum())
        out["consistency_pvalue"][i] = float(stats.chi2.sf(z @ z, keep.sum()))
    return out
