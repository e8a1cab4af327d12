"""Where WENDy-MLE's O(sigma^2) bias comes from: an experiment on the validation data sets.

``docs/validation.md`` finds the FitzHugh-Nagumo cubic equation's parameters biased by an
amount that grows like sigma^2 (-10 % for p1 at 20 % noise, 2.5 standard errors). Two
mechanisms predict exactly that order; this script removes each in turn and measures what is
left, on the same seeded data sets the validation study uses (``benchmarks/validation.py``).

1. **The log-determinant.** At the truth the residual's noise is ``L eps`` to first order and
   the noise in its Jacobian ``dr/dp_j`` is ``(dL/dp_j) eps``. The score of the quadratic form
   ``r' S^-1 r / 2`` then has zero mean (the noise in the Jacobian and the ``dS/dp`` term cancel,
   as in total least squares), while the log-determinant adds ``tr(S^-1 dS/dp_j) / 2``: a
   score bias of order one against an information of order ``1/sigma^2``, so a parameter bias
   of order sigma^2 wherever S depends on p. Variant ``no-logdet`` minimises the quadratic
   form alone (the linearised functional errors-in-variables likelihood, with the true states
   profiled out).
2. **The mean of f at noisy data.** ``E f(U + eps) != f(U)`` for a nonlinear right-hand side
   (``E (v + eps)^3 = v^3 + 3 sigma^2 v``), so the residual's mean at the truth is not zero.
   For Gaussian noise ``E g(U + eps) = exp(sigma^2 Delta / 2) g (U)``; the right-hand side
   ``f_c = exp(-sigma^2 Delta / 2) f`` (a terminating series for polynomials, exact for
   FitzHugh-Nagumo's cubic) has ``E f_c(U + eps) = f(U)``. Variant ``+mean`` fits the model
   with ``f_c`` (sigma from the data, as the MLE estimates it).

Prints, per variant, the relative bias with its Monte Carlo standard error, the relative
standard deviation, and the bias in units of the MLE's inverse-Hessian standard error (the
number that decides coverage). Exploratory: nothing here is library API. The quadratic
form's gradient is tested in ``tests/test_likelihood.py``.

Outputs measured for ``docs/validation.md`` are in ``benchmarks/results/bias_mechanisms/``.

Usage: ``python benchmarks/bias_mechanisms.py [--problem fitzhugh_nagumo] [--noise 0.2]
[--datasets 40]``
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import scipy.optimize as so
import sympy as sp

import pymc_wendy as pw
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.studies.coverage.runners import data_seed as _data_seed
from pymc_wendy.weak import kernels
from pymc_wendy.weak.likelihood import WeakLikelihood

SEED, N_POINTS = 2026, 513  # the validation study's


def mean_corrected(model: ODEModel, sigma2) -> ODEModel:
    """``f_c = exp(-Delta_sigma / 2) f`` with ``Delta_sigma = sum_d sigma_d^2 d^2/du_d^2``.

    The series stops when a term vanishes (polynomials) or after the sigma^4 term.
    """
    exprs = []
    for e in model.expressions:
        out, term = e, e
        for k in range(1, 3):
            term = sp.expand(
                sum(s2 * sp.diff(term, u, 2) for s2, u in zip(sigma2, model.symbols.u, strict=True))
                / 2
            )
            if term == 0:
                break
            out += (-1) ** k * term / sp.factorial(k)
        exprs.append(sp.expand(out))
    return ODEModel.from_expressions(exprs, model.states, model.params, name=model.name)


def _quadratic(lik: WeakLikelihood, p: np.ndarray) -> tuple[float, np.ndarray]:
    """``r' S^-1 r / 2`` and its gradient: ``nll_grad`` without the log-determinant part."""
    ev = lik.form.evaluation(p, lik.sigma**2)
    Jp, Jup = lik.form.derivs(p, "f_p", "f_up")
    g, _, _ = kernels.gradient_parts(ev, lik.phi, Jp, Jup, lik.ridge, logdet=False)
    return 0.5 * float(ev.r @ ev.a), g


def _no_logdet(lik: WeakLikelihood, start: np.ndarray) -> np.ndarray:
    res = so.minimize(
        lambda p: _quadratic(lik, p),
        start,
        jac=True,
        method="BFGS",
        options={"gtol": 1e-9, "maxiter": 2000},
    )
    return res.x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problem", default="fitzhugh_nagumo")
    ap.add_argument("--noise", type=float, default=0.2)
    ap.add_argument("--datasets", type=int, default=40)
    args = ap.parse_args()
    prob = pw.get_problem(args.problem)
    if prob.noise != "normal":
        # the mean correction is derived for additive Gaussian noise on the states
        raise SystemExit(f"{prob.name} has {prob.noise} noise; this experiment needs 'normal'")
    p_true = prob.p_true
    variants = ["mle", "mle+mean", "no-logdet", "no-logdet+mean"]
    est = {v: [] for v in variants}
    se = []
    start = time.perf_counter()
    for i in range(args.datasets):
        data = prob.simulate(
            n_points=N_POINTS,
            noise_ratio=args.noise,
            seed=_data_seed(SEED, args.noise, N_POINTS, i),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mle = pw.fit(prob.model, data.t, data.U, bounds=prob.bounds, noise=prob.noise)
        lik = mle.likelihood
        corr = mean_corrected(prob.model, list(mle.sigma**2))
        lik_c = WeakLikelihood(
            corr, data.t, data.U, sigma=mle.sigma, test_functions=lik.test_functions
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est["mle+mean"].append(pw.fit(lik_c, bounds=prob.bounds, p0=mle.x).x)
        est["mle"].append(mle.x)
        est["no-logdet"].append(_no_logdet(lik, mle.x))
        est["no-logdet+mean"].append(_no_logdet(lik_c, mle.x))
        se.append(np.sqrt(np.diag(mle.covariance("hessian"))))
    n = args.datasets
    s_mle = np.mean(se, axis=0)
    print(
        f"{prob.name}, {args.noise:.0%} noise, {N_POINTS} points, {n} data sets "
        f"({time.perf_counter() - start:.0f} s)"
    )
    np.set_printoptions(precision=4, suppress=True, linewidth=120)
    for v in variants:
        x = np.array(est[v])
        err = x - p_true
        print(f"\n{v}")
        print("  rel bias      ", err.mean(0) / np.abs(p_true))
        print("  MC s.e.       ", err.std(0, ddof=1) / np.sqrt(n) / np.abs(p_true))
        print("  rel sd        ", x.std(0, ddof=1) / np.abs(p_true))
        print("  bias / s.e.   ", err.mean(0) / s_mle)


if __name__ == "__main__":
    main()
