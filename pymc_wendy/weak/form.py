"""Kinds of model in weak form: the interface, and the registry that picks one for a model.

A :class:`WeakForm` is what one kind of model contributes to the weak likelihood: how the data
and test functions make the weak residual ``r(p)`` and its linearisation ``L(p)`` in the noise,
and the derivatives of both in ``p``. :class:`~pymc_wendy.WeakLikelihood` owns the rest (data
checks, the noise level, the covariance algebra shared by every kind, bias correction,
estimator covariances) and delegates the model-dependent part to its form, so a new kind of
model is one new :class:`WeakForm` subclass, registered with :func:`register_form`, plus (for
the compiled Op) one kernel builder in :mod:`pymc_wendy.backends.numba_kernels` under the
form's :attr:`WeakForm.kind`.

Kinds today:

* :class:`~pymc_wendy.weak.first_order.FirstOrderForm`: ``du/dt = f(t, u, p)``, the WENDy
  papers' form (kernels in :mod:`pymc_wendy.weak.kernels`);
* :class:`~pymc_wendy.weak.operator.OperatorForm`: models of order > 1 or with known inputs
  (kernels in :mod:`pymc_wendy.weak.operator_kernels`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from pymc_wendy.weak import kernels

if TYPE_CHECKING:
    from pymc_wendy.model.observation import Observation
    from pymc_wendy.model.ode import ODEModel
    from pymc_wendy.weak.test_functions import TestFunctions

__all__ = ["KernelSpec", "WeakForm", "form_for", "register_form"]


@dataclass(frozen=True)
class KernelSpec:
    """What a compiled kernel of a form reads (:mod:`pymc_wendy.backends.numba_kernels`).

    Attributes
    ----------
    kind : str
        The kernel builder to use (the form's :attr:`WeakForm.kind`).
    arrays : tuple of ndarray
        The data side, packed into the kernel's runtime buffer in this order (the noise level,
        tilt and scalars are appended by the backend).
    functions : dict
        The numba-compiled model functions the kernel calls, by name.
    shapes : dict
        Shapes of the arrays those functions fill, where the builder needs them.
    """

    kind: str
    arrays: tuple[np.ndarray, ...]
    functions: dict[str, Callable] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


class WeakForm(abc.ABC):
    """The weak residual of one kind of model on one data set.

    Parameters
    ----------
    model : ODEModel
        The model the residual is built from (for log-normal noise, the log-state model).
    t : ndarray, shape (M+1,)
        Sample times.
    X : ndarray, shape (M+1, D)
        The data the residual uses (``log U`` for log-normal noise).
    test_functions : TestFunctions
        The test functions (rows of ``phi``, ``dphi``).
    inputs : dict
        Known inputs by name (:class:`~pymc_wendy.model.inputs.Input`).
    ridge : float
        The covariance ridge, relative: ``S <- (1 - ridge) S + ridge c I`` with ``c`` the
        scale of ``S`` (:attr:`ridge_diag` holds ``ridge c``; ``c = 1`` until the likelihood
        sets it from :meth:`operator_scale` and the noise level).
    weights : ndarray, shape (M+1, D), optional
        The noise variance of data entry ``(m, d)`` is ``sigma_d^2 * weights[m, d]``; a row of
        zeros is a time point whose state is known exactly (a known initial state). None:
        all ones.

    Notes
    -----
    Residual entries are state-major (entry ``d * K + k``). ``evaluation`` returns an object
    with at least ``C`` (lower Cholesky factor of ``S``), ``nll``, ``quadratic`` and
    ``logdet``; ``gradient`` returns ``(grad_p, grad_sigma2 or None, state)`` where ``state``
    is whatever ``hessian`` reuses at the same point.
    """

    #: the compiled backend's kernel builder for this kind (:class:`KernelSpec`)
    kind: ClassVar[str]
    #: whether the weak form can work on ``log u`` (the log-state model of log-normal noise)
    log_scale: ClassVar[bool] = True

    def __init__(
        self,
        model: ODEModel,
        t: np.ndarray,
        X: np.ndarray,
        test_functions: TestFunctions,
        inputs: dict,
        ridge: float,
        weights: np.ndarray | None = None,
    ):
        self.model = model
        self.t = t
        self.X = X
        self.test_functions = test_functions
        self.inputs = inputs
        self.ridge = ridge
        #: what the ridge adds to the diagonal of ``S`` (absolute)
        self.ridge_diag = ridge
        #: the test functions as windows (:class:`~pymc_wendy.weak.banded.LocalRows`) when
        #: they are local ones (``test_functions="local"``), else None
        self.rows = getattr(test_functions, "windows", None)
        self._phi: np.ndarray | None = None
        self._dphi: np.ndarray | None = None
        if self.rows is None:
            self._phi = np.ascontiguousarray(test_functions.phi)
            self._dphi = np.ascontiguousarray(test_functions.dphi)
        self.weights = None if weights is None else np.ascontiguousarray(weights, dtype=float)

    @property
    def phi(self) -> np.ndarray:
        """``Phi`` (K, M+1); for local test functions built from the windows on first use."""
        if self._phi is None:
            self._phi = np.ascontiguousarray(self.test_functions.phi)
        return self._phi

    @phi.setter
    def phi(self, value: np.ndarray) -> None:
        self._phi = value

    @property
    def dphi(self) -> np.ndarray:
        """``dPhi`` (K, M+1); for local test functions built from the windows on first use."""
        if self._dphi is None:
            self._dphi = np.ascontiguousarray(self.test_functions.dphi)
        return self._dphi

    @dphi.setter
    def dphi(self, value: np.ndarray) -> None:
        self._dphi = value

    @property
    def K(self) -> int:
        """Number of test functions."""
        return self.rows.K if self.rows is not None else int(self.phi.shape[0])

    def weights_or_ones(self) -> np.ndarray:
        """:attr:`weights`, ones where none were given (what compiled kernels read)."""
        return np.ones(self.X.shape) if self.weights is None else self.weights

    def operator_scale(self) -> float:
        """Mean squared row norm of the residual's leading, parameter-free operator (here
        ``dPhi``): times a noise variance, the size of a diagonal entry of ``S``. It scales
        with time like ``S`` does, which keeps the relative ridge unit-free."""
        dphi = self.rows.dphi if self.rows is not None else self.dphi
        return float(np.mean(np.sum(dphi**2, axis=1)))

    def _diag(self, diag: float | None) -> float:
        return self.ridge_diag if diag is None else diag

    # --- which models, which test functions --------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def accepts(cls, model: ODEModel) -> bool:
        """Whether this form handles ``model`` (the registry asks the newest form first)."""

    @classmethod
    def check_noise(cls, model: ODEModel, noise: Observation) -> None:
        """Raise a clear error if this form cannot handle the noise model (every noise model
        is fine unless a form says otherwise)."""
        return None

    @classmethod
    def default_test_functions(
        cls, t: np.ndarray, X: np.ndarray, model: ODEModel, **where
    ) -> TestFunctions | None:
        """Test functions when the user gives none, or None for the library default;
        ``where`` holds the data's ``breaks`` and ``kinks`` (doses), for
        :func:`build_test_functions`."""
        return None

    # --- model derivatives at the data --------------------------------------------------------
    def derivs(self, p: np.ndarray, *which: str) -> list[np.ndarray]:
        """The model's generated derivatives (``"f"``, ``"f_u"``, ...) at every data row,
        with a clear error naming the first non-finite one."""
        out = []
        for w in which:
            arr = self.model.evaluate(w, self.t, self.X, p)
            kernels.check_finite(w, arr, self.t)
            out.append(arr)
        return out

    # --- the residual and its derivatives ------------------------------------------------------
    @abc.abstractmethod
    def residual(self, p: np.ndarray) -> np.ndarray:
        """Weak residual ``r(p)``, shape (K*D,)."""

    @abc.abstractmethod
    def dr_dp(self, p: np.ndarray) -> np.ndarray:
        """Jacobian ``dr/dp``, shape (K*D, J)."""

    @abc.abstractmethod
    def evaluation(self, p: np.ndarray, s2: np.ndarray, diag: float | None = None):
        """Residual, covariance factor and value at ``p`` for noise variances ``s2``; ``diag``
        replaces the ridge's diagonal term (the tempering ladder's relaxed rungs)."""

    @abc.abstractmethod
    def gradient(self, p: np.ndarray, ev, logdet: bool, sigma2: bool) -> tuple:
        """``(grad_p, grad_sigma2 or None, state)`` at an :meth:`evaluation` of ``p``."""

    @abc.abstractmethod
    def hessian(self, p: np.ndarray, ev, state, logdet: bool, exact: bool) -> np.ndarray:
        """Hessian in ``p`` from a :meth:`gradient` state; ``exact=False`` may leave out the
        log-determinant's trace terms."""

    @abc.abstractmethod
    def linear_coefficients(self, s2e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(r0, G, A)`` of a model linear in ``p`` (:mod:`pymc_wendy.weak.linear_form`) for
        effective noise variances ``s2e``."""

    def whitener(self, p: np.ndarray, s2: np.ndarray):
        """``B -> C^-1 B`` with ``C`` the lower Cholesky factor of ``S(p)`` (state-major rows)."""
        C = self.evaluation(p, s2).C
        return lambda B: kernels.solve_lower(C, B)

    def covariance_times(self, p: np.ndarray, s2: np.ndarray, A: np.ndarray) -> np.ndarray:
        """``S(p) A`` for state-major rows ``A`` (n, c)."""
        C = self.evaluation(p, s2).C
        return C @ (C.T @ A)

    @abc.abstractmethod
    def score_mean(self, p: np.ndarray, ev) -> np.ndarray:
        """Estimated mean of the quadratic form's score at ``p`` under the data noise
        (:func:`pymc_wendy.weak.bias.score_mean`), from an :meth:`evaluation` at ``p``."""

    @abc.abstractmethod
    def kernel_spec(self) -> KernelSpec:
        """What the compiled kernel of this form reads."""


_FORMS: list[type[WeakForm]] = []


def register_form(form: type[WeakForm]) -> type[WeakForm]:
    """Register a :class:`WeakForm` subclass (usable as a class decorator). Forms registered
    later are asked first, so a more specific kind registers after the general one."""
    if not (isinstance(form, type) and issubclass(form, WeakForm)):
        raise TypeError(f"register_form needs a WeakForm subclass; got {form!r}")
    if form not in _FORMS:
        _FORMS.append(form)
    return form


def form_for(model: ODEModel) -> type[WeakForm]:
    """The registered form that handles ``model`` (the most recently registered first)."""
    for form in reversed(_FORMS):
        if form.accepts(model):
            return form
    raise TypeError(f"no weak form handles the model {model.name!r}")
