"""Method names of a coverage study: ``"<estimator>[+<correction>][-<covariance>]"``.

:func:`parse_methods` validates the names a study is given and maps each to the estimator that
runs (shared by every method naming it) and the interval it reads; :func:`split_estimator`
takes a bias correction off an estimator. The package docstring lists the methods.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BAYES", "parse_methods", "split_estimator"]

#: the Bayesian estimators: one posterior interval each, no covariance kinds
BAYES = ("nuts", "sft", "laplace", "forward")
# those a weak-form bias correction applies to ("forward" is the exact posterior)
_CORRECTABLE = ("mle", "nuts", "sft", "laplace")


def parse_methods(methods: Iterable[str]) -> dict[str, tuple[str, str | None]]:
    """``{label: (estimator, covariance kind or None)}``, validated, in the given order."""
    if isinstance(methods, str):
        methods = [methods]
    from pymc_wendy.estimators import registry

    fit_kinds = {m: registry.kinds(m) for m in registry.names()}
    out: dict[str, tuple[str, str | None]] = {}
    for name in methods:
        base, _, kind = str(name).strip().lower().partition("-")
        base, base_label = _with_correction(name, base)
        if base in BAYES and not kind:
            out[base_label] = (base_label, None)
            continue
        if base not in fit_kinds:
            raise ValueError(
                f"unknown method {name!r}: use one of {sorted(fit_kinds) + list(BAYES)}, "
                "optionally with a covariance, e.g. 'mle-sandwich'"
            )
        kind = kind or fit_kinds[base][0]
        if kind not in fit_kinds[base]:
            raise ValueError(
                f"method {name!r}: covariance {kind!r} is not available for {base!r} "
                f"(choose from {list(fit_kinds[base])})"
            )
        out[f"{base_label}-{kind}"] = (base_label, kind)
    if not out:
        raise ValueError("methods must name at least one method")
    return out


def _with_correction(name: str, base: str) -> tuple[str, str]:
    """``(estimator, label)`` of ``"mle+auto"``-like names: the correction validated and
    spelled as :func:`~pymc_wendy.weak.bias.resolve` names it."""
    from pymc_wendy.weak.bias import resolve

    base, plus, correction = base.partition("+")
    if not plus:
        return base, base
    if base not in _CORRECTABLE:
        raise ValueError(
            f"method {name!r}: a bias correction applies to "
            + ", ".join(map(repr, _CORRECTABLE[:-1]))
            + f" or {_CORRECTABLE[-1]!r}"
        )
    return base, f"{base}+{resolve(correction)}"


def split_estimator(estimator: str) -> tuple[str, str | None]:
    """``"mle+analytic"`` -> ``("mle", "analytic")``; ``"mle"`` -> ``("mle", None)``."""
    base, _, correction = estimator.partition("+")
    return base, correction or None
