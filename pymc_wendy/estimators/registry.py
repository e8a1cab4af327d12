"""The estimators :func:`~pymc_wendy.fit` dispatches to, by name.

Each method module describes itself by one :class:`Estimator`: the function that turns a validated
:class:`~pymc_wendy.estimators._problem.FitProblem` into a
:class:`~pymc_wendy.estimators.results.FitResult`, the option names it accepts, and what it
needs from ``fit``'s inputs. ``fit`` validates the data once, builds the problem and calls
``run``; it knows nothing else about any method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pymc_wendy.estimators._problem import FitProblem
    from pymc_wendy.estimators.results import FitResult

__all__ = ["Estimator", "get", "kinds", "names", "register"]


@dataclass(frozen=True)
class Estimator:
    """One estimation method behind ``fit(method=name)``.

    Attributes
    ----------
    name : str
        The ``method`` string.
    run : callable
        ``run(problem) -> FitResult``; ``problem.options`` have passed :attr:`check_options`.
    options : frozenset of str
        Option names accepted in ``fit(options=...)``.
    summary : str
        One line for the method table.
    covariance : str or None
        Default covariance kind of its results (``FitResult.covariance_kind``).
    alternatives : tuple of str
        The other covariance kinds its results offer (coverage studies can ask for them as
        ``"mle-sandwich"``).
    weak_likelihood : bool
        Whether it needs a weak likelihood built from the data (output-error methods do
        not: ``problem.likelihood`` is then None unless the user passed one).
    needs_start : bool
        Whether ``fit`` should compute a default start when ``p0`` is not given
        (:func:`~pymc_wendy.estimators.wls.default_start`) and pass it as
        ``problem.start``.
    check_options : callable, optional
        ``check_options(options, where)``: the method's own rules (a scheme's name, nested
        options), run before the generic check of names, counts, tolerances and flags.
    operator_models : bool
        Whether it handles models of order > 1 or with inputs
        (``ODEModel.has_operator_terms``); ``fit`` refuses them early otherwise.
    bias_correction : bool
        Whether it runs ``problem.bias_correction`` (:mod:`pymc_wendy.weak.bias`); ``fit``
        refuses ``bias_correction=`` for the others.
    initial_state : bool
        Whether it takes a known ``initial_state``: the weak-likelihood estimators through
        its boundary test functions, output error by solving from it; ``fit`` refuses
        ``initial_state=`` for the others rather than ignore it.
    weak_only : bool
        Whether all it estimates from is the weak likelihood: its estimate never met a
        forward solve, so ``fit`` checks it against one (the forward check).
    per_entry_noise : bool
        For a method without a weak likelihood: whether it weighs each data entry by the
        observation model's variance at the solution (proportional, combined and count
        noise). ``fit`` then builds the weak likelihood for the model's noise level and
        parameters (``problem.likelihood``); it refuses those noise models for the others.
    """

    name: str
    run: Callable[[FitProblem], FitResult]
    options: frozenset[str]
    summary: str
    covariance: str | None = None
    alternatives: tuple[str, ...] = ()
    weak_likelihood: bool = True
    needs_start: bool = True
    check_options: Callable[[Mapping, str], None] | None = field(default=None, compare=False)
    operator_models: bool = False
    bias_correction: bool = False
    initial_state: bool = False
    weak_only: bool = False
    per_entry_noise: bool = False


_REGISTRY: dict[str, Estimator] = {}


def register(estimator: Estimator) -> Estimator:
    """Make ``estimator`` available as ``fit(method=estimator.name)``; returns it."""
    if not isinstance(estimator, Estimator):
        raise TypeError(f"register takes an Estimator; got {type(estimator)!r}")
    if estimator.name in _REGISTRY:
        raise ValueError(f"an estimator named {estimator.name!r} is already registered")
    _REGISTRY[estimator.name] = estimator
    return estimator


def get(name: str) -> Estimator:
    """The estimator registered as ``name``; a ValueError naming the known ones otherwise."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"method must be one of {names()}; got {name!r}") from None


def kinds(name: str) -> tuple[str, ...]:
    """Covariance kinds the results of ``name`` offer, the default first."""
    est = get(name)
    return tuple(k for k in (est.covariance, *est.alternatives) if k is not None)


def names() -> tuple[str, ...]:
    """Registered method names, in registration order."""
    return tuple(_REGISTRY)
