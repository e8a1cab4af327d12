"""Whether the data determine the parameters at an estimate.

Every :func:`~pymc_wendy.fit` result passes through :func:`assess` before it is returned. A
fit whose residuals cannot separate the parameters (fewer residuals than parameters, a
parameter the residuals do not depend on, or a combination of parameters that leaves them
unchanged) or, for the Hessian covariance, whose Hessian is not positive definite at the
estimate, is not a fit: it gets ``success=False``, a message naming the parameters involved,
a :class:`~pymc_wendy.estimators.results.FitWarning` (from ``fit``) and NaN covariances and
intervals, never finite ones.

The test is on the Jacobian ``A`` of the residuals the estimator fits, with respect to the
parameters, at the estimate: the weak residual ``dr/dp`` whitened by the covariance factor
(``C^{-1} G`` with ``S = C C^T``, the matrix whose ``(A^T A)^{-1}`` is the GLS covariance)
for the weak-form estimators, and each method's own weighted residual Jacobian for output
error (``"oels"``), ``"deq"`` and ``"oc"``. Its columns are scaled to unit length first, so
that the verdict does not depend on the parameters' units (rescaling time or data rescales
the columns and nothing else). The scaled Jacobian is rank deficient when its smallest
singular value is below :data:`RTOL` times its largest: then ``cond(A^T A) > 1 / eps``, so
the inverse that every covariance kind needs has no correct digit in double precision
(``RTOL = sqrt(eps)``, about ``1.5e-8``: a condition number of ``6.7e7`` for the scaled
Jacobian). Well-posed fits are far from it: on the benchmark problems of the catalogue (257
points, 5 % noise; the eleven-parameter protein transduction and the ten-parameter
Hindmarsh-Rose included) the condition number of the scaled weak Jacobian at the MLE, IRLS
and weak least-squares estimates is 2 to 211. A column that is exactly zero (an input that
vanishes over the data) is rank deficient whatever its scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import linalg as sla

from pymc_wendy.weak.kernels import WeakLikelihoodError
from pymc_wendy.weak.protocol import Likelihood

__all__ = ["RTOL", "Identifiability", "assess", "jacobian_identifiability", "weak_identifiability"]

#: Relative singular-value tolerance of the column-scaled Jacobian (module docstring)
RTOL = float(np.sqrt(np.finfo(float).eps))

#: A parameter takes part in a null direction when its share of the (unit) direction is at
#: least this (1 % of the squared length)
_INVOLVED = 0.1

_WEAK_KINDS = ("sandwich", "gls", "hessian")


@dataclass(frozen=True)
class Identifiability:
    """What :func:`assess` found at an estimate (``FitResult.identifiability``).

    Attributes
    ----------
    identifiable : bool
        Whether the residual Jacobian has full column rank (enough residuals, no parameter
        without effect, no flat combination).
    n_residuals, n_params : int
        Rows and columns of the Jacobian.
    rank : int
        Its numerical rank after column scaling (relative tolerance :data:`RTOL`).
    condition : float
        Condition number of the column-scaled Jacobian (``inf`` when rank deficient).
    null_params : tuple of str
        The parameters that take part in a direction the residuals do not see (empty when
        identifiable).
    hessian_definite : bool or None
        For the Hessian covariance: whether the Hessian is positive definite at the
        estimate (None when not checked).
    message : str
        Why not (empty when all is well).
    """

    identifiable: bool
    n_residuals: int
    n_params: int
    rank: int
    condition: float
    null_params: tuple[str, ...] = ()
    hessian_definite: bool | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        """Identifiable and, where checked, a positive definite Hessian."""
        return self.identifiable and self.hessian_definite is not False


def jacobian_identifiability(
    jac: np.ndarray, names: Sequence[str], what: str = "residuals", rtol: float = RTOL
) -> Identifiability:
    """The rank test of the module docstring on a residual Jacobian ``jac`` (n, J).

    Parameters
    ----------
    jac : ndarray, shape (n, J)
        Derivative of the (weighted) residuals with respect to the unknowns ``names``.
    names : sequence of str
        The unknowns, one per column (named in the message).
    what : str
        What the rows are, for the message (``"weak residuals"``, ...).
    rtol : float
        Relative singular-value tolerance of the column-scaled Jacobian.
    """
    A = np.asarray(jac, dtype=float)
    n, J = A.shape
    names = tuple(names)
    if not np.all(np.isfinite(A)):
        return Identifiability(
            False, n, J, 0, np.inf, names,
            message=f"the Jacobian of the {what} is not finite at the estimate",
        )  # fmt: skip
    norms = np.linalg.norm(A, axis=0)
    dead = norms == 0.0
    live = np.flatnonzero(~dead)
    null = [j for j in np.flatnonzero(dead)]
    s = np.zeros(0)
    if live.size:
        # with fewer rows than columns the null space is in the last rows of the full Vt;
        # with more, the thin SVD has all of Vt, and the full one would form an n x n U
        # (12.8 GB for the 40 000 weak residuals of 10^5 points)
        _, s, Vt = np.linalg.svd(A[:, live] / norms[live], full_matrices=n < live.size)
        rank = int(np.sum(s > rtol * s[0]))
        for v in Vt[rank:]:
            null.extend(live[np.abs(v) >= _INVOLVED])
    else:
        rank = 0
    null_params = tuple(names[j] for j in sorted(set(null)))
    identifiable = rank == J
    condition = float(s[0] / s[-1]) if identifiable else np.inf
    message = "" if identifiable else _message(n, J, rank, what, names, dead, null_params)
    return Identifiability(identifiable, n, J, rank, condition, null_params, message=message)


def _message(n, J, rank, what, names, dead, null_params) -> str:
    listed = ", ".join(null_params)
    if n < J:
        return (
            f"{n} {what} for {J} parameters: the data cannot determine them (not determined: "
            f"{listed}); use more data points or more test functions, or fewer free parameters"
        )
    if np.any(dead):
        flat = ", ".join(np.asarray(names)[dead])
        return (
            f"the {what} do not depend on {flat} at the estimate (a zero column of the "
            "Jacobian: an input that is zero over the data, say), so the data say nothing "
            f"about {'it' if dead.sum() == 1 else 'them'}"
        )
    return (
        f"the Jacobian of the {what} has rank {rank} < {J} (unknowns: {', '.join(names)}) at "
        f"the estimate: a combination of {listed} leaves the fit unchanged, so the data "
        "cannot separate them"
    )


def weak_identifiability(lik: Likelihood, p, names: Sequence[str]) -> Identifiability:
    """The rank test on the weak residual's Jacobian ``dr/dp`` at ``p``, whitened by the
    covariance factor (plain where the covariance cannot be factored there)."""
    G = lik.dr_dp(p)
    try:
        own = getattr(lik, "whitener", None)  # banded for local test functions
        if own is not None:
            A = own(p)(G)
        else:
            A = sla.solve_triangular(lik.covariance_factor(p), G, lower=True, check_finite=False)
    except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
        A = G
    return jacobian_identifiability(A, names, "weak residuals (test functions x states)")


def _hessian_check(result, record: Identifiability, bounds) -> Identifiability:
    """``record`` with ``hessian_definite`` set from the Hessian covariance of ``result``."""
    nll = result.nll if result.nll is not None else np.inf
    if not np.isfinite(nll):
        return record
    try:
        se2 = np.diag(result.covariance("hessian"))
        definite = bool(np.all(np.isfinite(se2)) and np.all(se2 > 0))
    except (WeakLikelihoodError, np.linalg.LinAlgError):
        definite = False
    message = record.message
    if not definite:
        message = (
            "the Hessian of the weak negative log-likelihood is not positive definite at the "
            "estimate (not a local minimum), so it gives no covariance"
        )
        at = _at_bounds(result, bounds)
        if at:
            message += f"; {', '.join(at)} at a bound"
    return Identifiability(
        record.identifiable, record.n_residuals, record.n_params, record.rank,
        record.condition, record.null_params, definite, message,
    )  # fmt: skip


def _at_bounds(result, bounds) -> list[str]:
    if bounds is None:
        return []
    lo, hi = bounds
    on = np.isclose(result.x, lo) | np.isclose(result.x, hi)
    return [n for n, b in zip(result.param_names, on, strict=True) if b]


def _stored_covariance_ok(result) -> bool:
    """Whether the covariance the method computed itself has finite, positive variances."""
    cov = result.covariances.get(result.covariance_kind)
    if cov is None:
        return True
    se2 = np.diag(np.asarray(cov, dtype=float))
    return bool(np.all(np.isfinite(se2)) and np.all(se2 > 0))


def assess(result, bounds=None) -> None:
    """Check a :class:`~pymc_wendy.estimators.results.FitResult` in place.

    Sets ``result.identifiability`` (unless the estimator already did, from its own
    Jacobian) for results whose covariance comes from the weak likelihood; when the check
    fails, or a covariance the method computed itself is singular, a successful result
    becomes ``success=False`` (status ``"unidentifiable"``, or ``"indefinite_hessian"``)
    with the reason first in its message, and its covariances NaN. ``bounds`` (the fit's
    ``(lower, upper)``) only name the parameters at a bound in the message.
    """
    record = result.identifiability
    weak = result.likelihood is not None and result.covariance_kind in _WEAK_KINDS
    if record is None and weak and np.all(np.isfinite(result.x)):
        try:
            record = weak_identifiability(result.likelihood, result.x, result.param_names)
        except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
            record = None  # the likelihood is undefined at x: the estimator said so
        if record is not None and record.identifiable and result.covariance_kind == "hessian":
            record = _hessian_check(result, record, bounds)
    result.identifiability = record
    if record is not None and not record.ok:
        status = "unidentifiable" if not record.identifiable else "indefinite_hessian"
        _fail(result, status, record.message)
    elif result.success and not weak and not _stored_covariance_ok(result):
        _fail(
            result,
            "unidentifiable",
            f"the {result.covariance_kind!r} covariance is singular or not finite at the "
            "estimate: the data do not determine every parameter",
        )


def _fail(result, status: str, reason: str) -> None:
    # an unidentifiable problem is the cause of whatever else went wrong (an iteration that
    # wanders along the null direction and hits max_iter, say): it names the status
    if result.success or status == "unidentifiable":
        result.success = False
        result.status = status
        result.message = f"{reason} (estimator: {result.message})"
    elif reason not in result.message:
        result.message = f"{result.message}; {reason}"
