"""Frequentist estimators behind one entry point, :func:`fit`.

=========  ==================================================================================
method     estimator (module)
=========  ==================================================================================
"mle"      WENDy-MLE (:mod:`.mle`): trust-region Newton on the weak negative log-likelihood
           with the analytic gradient and Hessian (``trust-exact``; Newton steps over the
           free parameters, then ``trust-constr``, with box bounds), optionally from several
           starts, keeping the lowest NLL; ``bias_correction`` minimises the corrected
           objective of :mod:`pymc_wendy.weak.bias` from there.
"irls"     WENDy-IRLS (:mod:`.irls`; WENDy 2023, Algorithm 2): generalised least squares
           with the weight ``S(p_prev)^{-1}`` updated each iteration, stopping on a fixed
           point, an iteration cap, or a failed Shapiro-Wilk test of the whitened residual
           after 10 iterations.
"wls"      Weak least squares ``min ||r(p)||^2`` (:mod:`.wls`; one linear solve when linear
           in ``p``; Gauss-Newton otherwise). Biased at high noise (errors in variables).
"oels"     Output-error least squares over ``(p, u0)`` with forward sensitivities
           (:mod:`.oels` on :mod:`pymc_wendy.estimators.output_error`).
"hybrid"   WENDy-MLE, then output error started from it (:mod:`.hybrid`); the output-error
           estimate is kept unless its weak NLL is worse than the MLE's by more than 5 % of
           ``|l(p_MLE)|``.
"deq"      Matsuda-Miyatake discretization-error quantification (:mod:`.deq`): fixed-step
           Euler / Heun / RK4 output error over ``(p, u0)`` whose residual variances (noise
           plus discretization error, non-decreasing in time) are re-estimated by isotonic
           regression between weighted least-squares steps (IRLS, exact discrete Jacobian).
"oc"       Brunel-Clairon-d'Alché-Buc orthogonality conditions (:mod:`.oc`): weak-form
           conditions on a GCV-chosen regression-spline proxy, sine or B-spline test
           functions, their number chosen by prediction error, ``min |e(p)|^2``, and the
           paper's closed-form sandwich variance (kind ``"oc"``).
"data2ld"  Carey & Ramsay's Data2LD (:mod:`.data2ld`): parameter cascading for one linear
           ODE with known inputs; a B-spline fit penalised by the ODE's residual, its
           weight ``rho`` raised along a logistic ladder to 0.99 with the parameters
           re-estimated (``least_squares`` on ``|y - Phi c_hat(theta)|^2``) at each step,
           and the paper's delta-method covariance (kind ``"data2ld"``).
=========  ==================================================================================

Each method is one module describing itself by an :class:`~.registry.Estimator`; ``fit``
validates its inputs once (:mod:`._problem`) and dispatches through :mod:`.registry`.
Choices and their reasons are collected in ``docs/estimators.md``.
"""

from pymc_wendy.estimators import data2ld, deq, hybrid, irls, mle, oc, oels, wls
from pymc_wendy.estimators._fit import fit
from pymc_wendy.estimators.mle import wendy_mle
from pymc_wendy.estimators.oels import estimate_initial_state
from pymc_wendy.estimators.registry import Estimator, register
from pymc_wendy.estimators.registry import names as methods
from pymc_wendy.estimators.results import BiasCorrection, FitResult, FitWarning
from pymc_wendy.estimators.wls import weak_least_squares

__all__ = [
    "BiasCorrection",
    "Estimator",
    "FitResult",
    "FitWarning",
    "estimate_initial_state",
    "fit",
    "methods",
    "register",
    "weak_least_squares",
    "wendy_mle",
]

for _module in (mle, irls, wls, oels, hybrid, deq, oc, data2ld):
    register(_module.ESTIMATOR)
del _module
