r"""Bias correction of the weak-form estimator and posterior.

WENDy-MLE is biased by order ``sigma^2`` wherever the model is nonlinear in the states
(``docs/validation.md``: FitzHugh-Nagumo's cubic, 2-3 standard errors at 20 % noise). Two
terms make the bias, and this module removes both (``docs/bias.md`` has the derivation and
the measurements):

1. **The log-determinant.** At the truth the score of the quadratic form
   ``Q(p) = r' S(p)^-1 r / 2`` has mean zero to first order: the noise in ``dr/dp`` and the
   ``dS/dp`` term cancel (as in total least squares). The log-determinant adds
   ``tr(S^-1 dS/dp_j) / 2``, a score bias of order one. ``"profile"`` drops it and minimises
   ``Q``, the linearised errors-in-variables likelihood with the noise-free states profiled out.
2. **Curvature of f and S at noisy data.** What is left of the score's mean is of order one
   too: the residual's mean ``E f(U* + eps) - f(U*)`` and the correlation of ``S(p; U)``
   with the residual. ``"analytic"`` computes that mean in closed form
   (:func:`score_mean`, from the model's generated ``d2f/du2``) and solves the corrected
   estimating equation ``grad Q(p) = c``, i.e. minimises ``Q(p) - c' p``.

The corrected objective is a :class:`~pymc_wendy.WeakLikelihood` made by
:meth:`~pymc_wendy.WeakLikelihood.corrected`; the estimator (:func:`pymc_wendy.fit` with
``bias_correction=``), its inverse-Hessian intervals, and the posterior
(:class:`~pymc_wendy.WeakODELikelihood` with ``bias_correction=``, sampled by NUTS,
``find_MAP`` or :func:`~pymc_wendy.sample_sft`) all use it.
"""

from __future__ import annotations

import numpy as np

from pymc_wendy.weak.protocol import Likelihood

__all__ = ["BIAS_CORRECTIONS", "corrected_likelihood", "resolve", "score_mean"]

#: Available corrections, and what ``"auto"`` means (``docs/bias.md`` for the evidence).
BIAS_CORRECTIONS = ("profile", "analytic")
AUTO = "analytic"


def resolve(bias_correction: str | None) -> str | None:
    """Validate a ``bias_correction`` argument; ``"auto"`` becomes the recommended method."""
    if bias_correction is None:
        return None
    if not isinstance(bias_correction, str):
        raise TypeError(
            f"bias_correction must be None, 'auto' or one of {BIAS_CORRECTIONS}; "
            f"got {bias_correction!r}"
        )
    name = bias_correction.strip().lower()
    if name == "auto":
        return AUTO
    if name not in BIAS_CORRECTIONS:
        raise ValueError(
            f"unknown bias_correction {bias_correction!r}; use None, 'auto' or one of "
            f"{BIAS_CORRECTIONS}"
        )
    return name


def score_mean(lik: Likelihood, p) -> np.ndarray:
    """Estimated mean of the quadratic form's score at ``p`` under the data noise, shape (J,).

    :func:`pymc_wendy.weak.kernels.quadratic_score_mean` evaluated at the data, with the
    likelihood's noise level. Additive Gaussian noise on the states the likelihood sees (for
    log-normal noise, on ``log U``). For several experiments, the sum of theirs (their noise
    is independent). Models of order > 1 or with inputs that are linear in the states have
    mean zero; other such models have no analytic correction (a clear error).
    """
    return lik.score_mean(p)


def corrected_likelihood(lik: Likelihood, method: str, reference) -> Likelihood:
    """The bias-corrected objective of ``method`` with its tilt evaluated at ``reference``.

    ``"profile"``: the quadratic form alone (tilt zero). ``"analytic"``: tilted by
    :func:`score_mean` at ``reference`` (held constant: it changes by a fraction of its size
    over the estimator's spread, and a constant tilt keeps the objective a function with a
    Hessian, usable as a log-density).
    """
    method = resolve(method)
    if method is None:
        raise ValueError("corrected_likelihood needs a method")
    if lik.correction_method is not None:
        raise ValueError("the likelihood is already bias-corrected")
    reference = lik.check_params(reference)
    if method == "profile":
        tilt = np.zeros(lik.model.n_params)
    else:
        tilt = score_mean(lik, reference)
    return lik.corrected(method, tilt, reference)
