"""The likelihood interface: what estimators, backends, the bias correction and samplers read.

Every weak likelihood (one data set, :class:`~pymc_wendy.WeakLikelihood`; several experiments,
:class:`~pymc_wendy.JointLikelihood`; either of them bias-corrected, :meth:`Likelihood.corrected`)
implements :class:`Likelihood`. Code outside :mod:`pymc_wendy.weak` uses only these members,
never a likelihood's private attributes and never its class: what differs between kinds of
models or of likelihoods is a method here, not a flag checked elsewhere. ``docs/architecture.md``
says where a new kind goes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from pymc_wendy.model.ode import ODEModel

__all__ = ["Correction", "Likelihood", "check_tilt"]

CovarianceMethod = Literal["sandwich", "gls", "hessian"]


@dataclass(frozen=True)
class Correction:
    """The bias correction an objective carries (:meth:`Likelihood.corrected`).

    The corrected objective is ``l_c(p) = r' S(p)^-1 r / 2 - tilt' (p - reference) + offset``:
    the quadratic form without the log-determinant, tilted by the constant ``tilt``, shifted
    by ``offset`` so that ``l_c`` and ``l`` agree at ``reference``. ``docs/bias.md``.
    """

    method: str
    tilt: np.ndarray
    reference: np.ndarray
    offset: float = 0.0

    def value(self, p: np.ndarray) -> float:
        """The tilt's contribution ``- tilt' (p - reference) + offset`` at ``p``."""
        return float(self.offset - self.tilt @ (p - self.reference))


def check_tilt(tilt, J: int) -> np.ndarray:
    """A bias correction's tilt as ``J`` finite values, or a clear error."""
    tilt = np.array(tilt, dtype=float).reshape(-1)
    if tilt.shape != (J,) or not np.all(np.isfinite(tilt)):
        raise ValueError(f"tilt must be {J} finite values; got {tilt}")
    return tilt


@runtime_checkable
class Likelihood(Protocol):
    """A weak-form negative log-likelihood of shared parameters ``p`` given data.

    Attributes
    ----------
    model : ODEModel
        The model the weak residual is built from (for log-normal noise, the log-state model).
    base_model : ODEModel
        The model as the user gave it.
    noise : str
        The name of the observation model the weak form uses (``weak_observation.name``;
        compare objects' attributes, never this name: ``tests/test_architecture.py``).
    sigma : ndarray
        The noise level the methods use when their ``sigma`` argument is None.
    sigma_estimated : bool
        Whether ``sigma`` was estimated from the data.
    experiments : tuple
        The single-data-set likelihoods this one sums over (``(self,)`` for one data set).
    correction : Correction or None
        The bias correction of the objective, if any.
    """

    model: ODEModel
    base_model: ODEModel
    noise: str
    sigma: np.ndarray
    sigma_estimated: bool

    @property
    def experiments(self) -> tuple: ...

    @property
    def n_residuals(self) -> int: ...

    @property
    def correction(self) -> Correction | None: ...

    @property
    def correction_method(self) -> str | None: ...

    @property
    def tilt(self) -> np.ndarray | None: ...

    @property
    def exact_hessian_is_cheap(self) -> bool:
        """Whether :meth:`hessian` costs about what :meth:`nll_grad` does (optimisers then
        use it at every step instead of a cheaper model of it)."""
        ...

    def check_params(self, p) -> np.ndarray:
        """``p`` as a finite float array of shape (J,), or a clear error."""
        ...

    # --- the weak residual and its covariance ----------------------------------------------
    def residual(self, p) -> np.ndarray: ...

    def dr_dp(self, p) -> np.ndarray: ...

    def covariance(self, p, sigma=None) -> np.ndarray: ...

    def covariance_factor(self, p, sigma=None) -> np.ndarray:
        """Lower Cholesky factor ``C`` of ``S(p) = C C'`` (ridge included)."""
        ...

    def whitened_residual(self, p, sigma=None) -> np.ndarray: ...

    @property
    def observation_key(self) -> str:
        """A digest of what the residual observes; equal keys, comparable log-likelihoods."""
        ...

    def loo_log_likelihood(self, p, sigma=None) -> np.ndarray:
        """``log p(r_i | r_-i, p)`` per weak-residual entry: the pointwise values of PSIS-LOO."""
        ...

    # --- the objective ---------------------------------------------------------------------
    def nll(self, p, sigma=None) -> float: ...

    def nll_grad(self, p, sigma=None) -> tuple[float, np.ndarray]: ...

    def nll_grad_sigma2(self, p, sigma=None) -> tuple[float, np.ndarray, np.ndarray]: ...

    def hessian(self, p, sigma=None) -> np.ndarray: ...

    def newton_point(self, p) -> tuple[float, np.ndarray, object]:
        """Value, gradient and a state from which :meth:`newton_hessian` finishes the Hessian
        at the same ``p`` cheaply (the optimiser asks for both at every accepted point)."""
        ...

    def newton_hessian(self, state, exact: bool = True) -> np.ndarray:
        """The Hessian at a :meth:`newton_point` state; ``exact=False`` may leave out the
        log-determinant's trace terms (a cheaper positive model for trust-region steps)."""
        ...

    def parameter_covariance(
        self, p, sigma=None, method: CovarianceMethod = "sandwich"
    ) -> np.ndarray: ...

    # --- bias correction and diagnostics ---------------------------------------------------
    def score_mean(self, p) -> np.ndarray:
        """Estimated mean of the quadratic form's score at ``p`` under the data noise."""
        ...

    def corrected(self, method: str, tilt, reference) -> Likelihood: ...

    def diagnostics(self, p) -> dict[str, np.ndarray]:
        """Per-experiment diagnostics at an estimate ``p`` (:func:`~.joint.diagnose`)."""
        ...
