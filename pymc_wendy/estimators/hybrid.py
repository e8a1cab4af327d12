"""WENDy-MLE then output error, ``fit(method="hybrid")``.

Output error started from the WENDy-MLE (and the initial state fitted with ``p`` held
there); its estimate is kept unless its weak NLL is worse than the MLE's by more than
``_TOLERANCE`` of ``|l(p_MLE)|``, which guards against output error's local minima. That
guard trusts the weak likelihood, so it does not apply where the MLE fails ``fit``'s
forward check (its ODE solution misses the data, or its weak covariance claims more than
the forward information allows): there a converged output error is kept.
Options: ``{"mle": {...}, "oels": {...}}``, each checked as that method's.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pymc_wendy.estimators import mle, oels
from pymc_wendy.estimators._problem import FitProblem, check_options

# hybrid is output error started from the MLE: it runs oels's fitting step itself
from pymc_wendy.estimators.oels import _fit_oe, estimate_initial_state
from pymc_wendy.estimators.registry import Estimator
from pymc_wendy.estimators.results import FitResult

_TOLERANCE = 0.05


def _hybrid(mle: FitResult, u0, box, solver, options, common, inputs=None, check=None) -> FitResult:
    lik = common["likelihood"]
    known = getattr(lik, "initial_state", None)
    if u0 is None and known is None and np.isfinite(mle.nll):
        if lik.experiments != (lik,):  # several experiments: one initial state each
            u0 = np.array(
                [estimate_initial_state(e, mle.x, solver=solver) for e in lik.experiments]
            )
        else:
            u0 = estimate_initial_state(lik, mle.x, solver=solver)
    oe = _fit_oe(
        mle.model,
        mle.t,
        mle.U,
        mle.x,
        u0,
        mle.noise,
        mle.sigma,
        mle.sigma_estimated,
        box,
        solver,
        options,
        common,
        inputs,
        known,
    )
    history = {"mle": mle, "oels": oe}
    keep_oe, why = _choose(mle, oe, check, history)
    if keep_oe and "observation" in oe.history:
        history["observation"] = oe.history["observation"]
    chosen = oe if keep_oe else mle
    return FitResult(
        x=chosen.x,
        method="hybrid",
        success=mle.success and (oe.success or not keep_oe),
        status="output_error" if keep_oe else "fallback",
        message=f"{why} (MLE: {mle.message}; output error: {oe.message})",
        nit=mle.nit + oe.nit,
        nfev=mle.nfev + oe.nfev,
        wall_time=0.0,
        fun=chosen.fun,
        nll=chosen.nll,
        covariance_kind=chosen.covariance_kind,
        u0=oe.u0 if keep_oe else None,
        history=history,
        covariances=dict(oe.covariances) if keep_oe else {},
        # output error's own rank test; the MLE's is made by fit on this result
        identifiability=oe.identifiability if keep_oe else None,
        **common,
    )


def _choose(mle: FitResult, oe: FitResult, check, history: dict) -> tuple[bool, str]:
    """``(keep output error, why)`` by the module's rule; a fallback's forward check entry
    goes into ``history`` (``fit`` checks the fallback: not twice)."""
    threshold = mle.nll + _TOLERANCE * abs(mle.nll)
    if oe.success and oe.nll is not None and oe.nll <= threshold:
        return True, f"output error kept: weak NLL {oe.nll:.6g} <= {threshold:.6g}"
    if not oe.success:
        return False, "WENDy-MLE kept: output error failed"
    why = f"WENDy-MLE kept: output error weak NLL {oe.nll:.6g} > {threshold:.6g}"
    if check is None or not mle.success:
        return False, why
    entry, failure = check(mle)
    mle.history["forward_check"] = entry
    if failure is None:
        history["forward_check"] = entry
        return False, why
    return True, (
        f"output error kept: the WENDy-MLE failed the forward check ({failure}), so its "
        f"weak NLL ({oe.nll:.6g} > {threshold:.6g}) does not judge output error's estimate"
    )


def run(problem: FitProblem) -> FitResult:
    """``fit(method="hybrid")``."""
    first = mle.fit_mle(problem, problem.options.get("mle", {}))
    return _hybrid(
        first, problem.u0, problem.bounds, problem.solver, problem.options.get("oels", {}),
        problem.common(), problem.inputs, problem.check,
    )  # fmt: skip


def _check_options(options: Mapping, where: str) -> None:
    unknown = set(options) - {"mle", "oels"}
    if unknown:
        raise ValueError(
            f"unknown hybrid {where} {sorted(unknown)}: give a dict with keys 'mle' and "
            "'oels', each holding that method's options"
        )
    for stage in (mle, oels):
        name = stage.ESTIMATOR.name
        check_options(stage.ESTIMATOR, dict(options.get(name) or {}), f"{where}['{name}']")


ESTIMATOR = Estimator(
    name="hybrid",
    run=run,
    options=frozenset({"mle", "oels"}),
    summary="WENDy-MLE, then output error from it unless its weak NLL is clearly worse",
    covariance="hessian",  # that of the kept estimate: "oe" when output error is kept
    alternatives=("oe", "sandwich", "gls"),
    check_options=_check_options,
    operator_models=True,
    initial_state=True,
)
