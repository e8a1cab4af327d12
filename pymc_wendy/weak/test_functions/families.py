"""Test-function families: the interface, the registry by name, and the built-in families.

A *family* supplies test functions and their time derivatives of any order on supports
``[c - r, c + r]`` given by centres ``c`` and widths (half-lengths) ``r``.  Two kinds:

- a **local** family (:class:`LocalFamily`) is one reference shape ``psi`` on ``[-1, 1]``
  placed by centre and width, ``phi(t) = psi((t - c) / r)``, one function per support.
  WENDy's construction (:func:`~pymc_wendy.weak.test_functions.build_test_functions`) places
  copies at many centres and radii and needs a local family.  Built in: ``"bump"``, the
  C-infinity bump ``exp(-eta / (1 - s^2))`` of WENDy (:class:`BumpFamily`).
- a **spanning** family (:class:`SpanningFamily`) carries any number ``n`` of functions on
  one interval.  Built in, for the orthogonality-conditions baseline (``fit(method="oc")``),
  which needs one: ``"sine"`` (:class:`SineFamily`, orthonormal) and ``"bspline"``
  (:class:`BSplineFamily`).

Families are selected by name: :func:`get_family`, :func:`register_family`, :func:`families`.
A new local family needs a ``name`` and :meth:`LocalFamily.shape`::

    class PolyBump(LocalFamily):
        name = "poly_bump"

        def shape(self, s, order=0):
            psi = np.polynomial.Polynomial([1.0, 0.0, -1.0]) ** 4  # (1 - s^2)^4
            s = np.asarray(s, dtype=float)
            return np.where(np.abs(s) < 1.0, psi.deriv(order)(s), 0.0)

    register_family(PolyBump())
    build_test_functions(t, U, family="poly_bump")
    pw.WeakLikelihood(model, t, U, test_functions={"family": "poly_bump"})  # or fit(...)

``tests/test_families.py`` runs this example.
"""

from __future__ import annotations

import abc

import numpy as np
from scipy.interpolate import BSpline

__all__ = [
    "BSplineFamily",
    "BumpFamily",
    "LocalFamily",
    "SineFamily",
    "SpanningFamily",
    "TestFunctionFamily",
    "bump",
    "bump_derivative",
    "list_families",
    "get_family",
    "local_family",
    "register_family",
]


# --- the interface ---------------------------------------------------------------------------


class TestFunctionFamily(abc.ABC):
    """Interface of a test-function family: values and time derivatives of any order.

    Implement it through one of its two kinds, :class:`LocalFamily` (one shape per support,
    what :func:`~pymc_wendy.weak.test_functions.build_test_functions` needs) or
    :class:`SpanningFamily` (any number of functions on one interval, what ``oc`` needs).

    Attributes
    ----------
    name : str
        The name the registry knows the family by.
    orthonormal : bool
        Whether the ``n`` functions of one support are orthonormal in ``L^2([c - r, c + r])``;
        consumers that need an orthonormal set orthonormalise the others.
    """

    # Keeps pytest from collecting the class when a test module imports it.
    __test__ = False

    name: str = ""
    orthonormal: bool = False

    @abc.abstractmethod
    def evaluate(
        self,
        t: np.ndarray,
        centres: np.ndarray,
        widths: np.ndarray,
        order: int = 0,
        n: int = 1,
    ) -> np.ndarray:
        """Time derivatives of order ``order`` of the family's functions at times ``t``.

        Parameters
        ----------
        t : array_like, shape (T,)
            Evaluation times; outside a support its functions are zero.
        centres, widths : array_like, shape (S,) or scalars
            Supports ``[centres[i] - widths[i], centres[i] + widths[i]]``.
        order : int, default 0
            Derivative order in ``t`` (0: the values).
        n : int, default 1
            Functions per support (1 for a local family).

        Returns
        -------
        numpy.ndarray, shape (S n, T)
            Support by support, the ``n`` functions of each.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class LocalFamily(TestFunctionFamily):
    """A reference shape ``psi`` on ``[-1, 1]`` placed by centre and width.

    ``phi(t) = psi((t - c) / r)``, so ``phi^(k)(t) = psi^(k)(s) / r^k``.  Subclasses set
    ``name`` and implement :meth:`shape`; for the weak form of an order-``q`` model the first
    ``q - 1`` derivatives of ``psi`` must vanish at ``s = +-1`` (the shape itself always).
    """

    @abc.abstractmethod
    def shape(self, s: np.ndarray, order: int = 0) -> np.ndarray:
        """``psi^(order)(s)``: derivative in the reference coordinate, zero outside ``|s| < 1``,
        same shape as ``s``."""

    def evaluate(self, t, centres, widths, order=0, n=1) -> np.ndarray:
        order = _check_order(order)
        if n != 1:
            raise ValueError(f"the {self.name!r} family has one function per support; got n={n}")
        t, c, r = _supports(t, centres, widths)
        s = (t[None, :] - c[:, None]) / r[:, None]
        return self.shape(s, order) / r[:, None] ** order


class SpanningFamily(TestFunctionFamily):
    """Any number ``n`` of functions on one interval ``[lo, hi]``, vanishing at both ends.

    Subclasses set ``name`` and implement :meth:`on_interval` (and :meth:`breakpoints` when
    the functions are piecewise smooth); :meth:`evaluate` applies it to every support
    ``[c - r, c + r]``.  Consumers that work on one interval call :meth:`on_interval` with
    its exact ends.
    """

    @abc.abstractmethod
    def on_interval(
        self, t: np.ndarray, lo: float, hi: float, order: int = 0, n: int = 1
    ) -> np.ndarray:
        """The ``n`` functions on ``[lo, hi]`` (their ``order``-th time derivatives) at ``t``,
        shape (n, T), zero outside the interval."""

    def breakpoints(self, lo: float, hi: float, n: int = 1) -> np.ndarray:
        """Times where the ``n`` functions on ``[lo, hi]`` are not smooth (spline knots), for
        quadrature rules that need smooth integrands between interval ends; none by default."""
        return np.empty(0)

    def evaluate(self, t, centres, widths, order=0, n=1) -> np.ndarray:
        order = _check_order(order)
        t, c, r = _supports(t, centres, widths)
        rows = [self.on_interval(t, lo, hi, order, n) for lo, hi in zip(c - r, c + r, strict=True)]
        return np.concatenate(rows)


def _check_order(order: int) -> int:
    order = int(order)
    if order < 0:
        raise ValueError(f"order must be >= 0; got {order}")
    return order


def _supports(t, centres, widths) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.atleast_1d(np.asarray(t, dtype=float))
    c, r = np.broadcast_arrays(
        np.atleast_1d(np.asarray(centres, dtype=float)),
        np.atleast_1d(np.asarray(widths, dtype=float)),
    )
    if t.ndim != 1 or c.ndim != 1:
        raise ValueError("t, centres and widths must be 1-D")
    if np.any(~np.isfinite(r)) or np.any(r <= 0):
        raise ValueError(f"widths must be positive and finite; got {r.tolist()}")
    return t, c, r


def _check_members(family: TestFunctionFamily, n: int, least: int) -> int:
    if int(n) != n or n < least:
        raise ValueError(f"the {family.name!r} family needs n >= {least} functions; got {n!r}")
    return int(n)


# --- the C-infinity bump (WENDy) -------------------------------------------------------------


def bump(s: np.ndarray, eta: float = 9.0) -> np.ndarray:
    """Evaluate the C-infinity bump ``exp(-eta / (1 - s^2))`` on ``|s| < 1``, zero elsewhere.

    Parameters
    ----------
    s : array_like
        Points in the reference coordinate ``s = (t - c) / r``.
    eta : float, default 9.0
        Shape parameter; larger values concentrate the bump around ``s = 0``.

    Returns
    -------
    numpy.ndarray
        Bump values, same shape as ``s``.  No normalising constant is applied.
    """
    return _on_support(s, lambda x, q: np.exp(-eta / q))


def bump_derivative(s: np.ndarray, eta: float = 9.0, order: int = 1) -> np.ndarray:
    """Evaluate the ``order``-th derivative in ``s`` of :func:`bump`.

    ``psi^(k)(s) = psi(s) N_k(s) / (1 - s^2)^(2k)`` with polynomials ``N_0 = 1``,
    ``N_{k+1} = q (q N_k' + 4 k s N_k) - 2 eta s N_k`` (``q = 1 - s^2``); ``N_1 = -2 eta s``
    gives ``psi' = psi (-2 eta s / (1 - s^2)^2)``. Every derivative vanishes at ``|s| = 1``,
    which is what lets the weak form move ``order`` derivatives onto the test function.

    Parameters
    ----------
    s : array_like
        Points in the reference coordinate.
    eta : float, default 9.0
        Shape parameter.
    order : int, default 1
        Order of the derivative (0 is :func:`bump` itself).

    Returns
    -------
    numpy.ndarray
        Derivative values, same shape as ``s`` (zero outside ``|s| < 1``).
    """
    order = _check_order(order)
    numerator = _bump_numerator(order, float(eta))
    return _on_support(s, lambda x, q: np.exp(-eta / q) * numerator(x) / q ** (2 * order))


def _on_support(s, values) -> np.ndarray:
    """``values(s, 1 - s^2)`` on ``|s| < 1``, zero elsewhere. Evaluated on the support only:
    most entries of a row matrix lie outside it, and the exponential over every entry was a
    tenth of a default fit at 1025 points."""
    s = np.asarray(s, dtype=float)
    out = np.zeros(s.shape)
    inside = np.abs(s) < 1.0
    x = s[inside]
    out[inside] = values(x, 1.0 - x * x)
    return out


def _bump_numerator(order: int, eta: float) -> np.polynomial.Polynomial:
    """``N_order`` of :func:`bump_derivative`."""
    P = np.polynomial.Polynomial
    q, x = P([1.0, 0.0, -1.0]), P([0.0, 1.0])
    N = P([1.0])
    for k in range(order):
        N = q * (q * N.deriv() + 4 * k * x * N) - 2 * eta * x * N
    return N


class BumpFamily(LocalFamily):
    """WENDy's C-infinity bump ``psi(s) = exp(-eta / (1 - s^2))`` (:func:`bump`), the default.

    Parameters
    ----------
    eta : float, default 9.0
        Shape parameter; larger values concentrate the bump around its centre.
    """

    name = "bump"

    def __init__(self, eta: float = 9.0):
        eta = float(eta)
        if not (np.isfinite(eta) and eta > 0):
            raise ValueError(f"eta must be a positive finite number, got {eta!r}")
        self.eta = eta

    def shape(self, s, order=0) -> np.ndarray:
        if int(order) == 0:
            return bump(s, self.eta)
        return bump_derivative(s, self.eta, order)

    def __repr__(self) -> str:
        return f"BumpFamily(eta={self.eta!r})"


# --- families spanning one support (the oc baseline's) ---------------------------------------


class SineFamily(SpanningFamily):
    """Sines ``phi_l(t) = sqrt(2/T) sin(l pi (t - a) / T)``, ``l = 1..n``, on ``[a, a + T]``.

    The orthonormal basis of ``H_0^1`` that Brunel, Clairon & d'Alché-Buc (2014) use; every
    function vanishes at both ends, its derivative does not.
    """

    name = "sine"
    orthonormal = True

    def on_interval(self, t, lo, hi, order=0, n=1) -> np.ndarray:
        order = _check_order(order)
        n = _check_members(self, n, 1)
        t = np.asarray(t, dtype=float)
        T = hi - lo
        freq = np.arange(1, n + 1)[:, None] * np.pi / T
        arg = freq * (t - lo)
        # d^k/dt^k sin(f x) = f^k sin(f x + k pi / 2): sin, cos, -sin, -cos
        trig = np.sin(arg) if order % 2 == 0 else np.cos(arg)
        if order % 4 >= 2:
            trig = -trig
        scale = np.sqrt(2 / T) if order == 0 else np.sqrt(2 / T) * freq**order
        return np.where((t >= lo) & (t <= hi), scale * trig, 0.0)


class BSplineFamily(SpanningFamily):
    """The ``n`` B-splines of a clamped uniform knot sequence on ``[a, b]`` that vanish at both
    ends (all but the first and last of ``n + 2``), degree ``degree`` (cubic by default).

    Not orthonormal: the ``oc`` baseline orthonormalises them in ``L^2`` (its criterion then
    depends on their span only).
    """

    name = "bspline"

    def __init__(self, degree: int = 3):
        if int(degree) != degree or degree < 1:
            raise ValueError(f"degree must be an integer >= 1; got {degree!r}")
        self.degree = int(degree)

    def breakpoints(self, lo, hi, n=1) -> np.ndarray:
        """The clamped uniform knot vector of the ``n + 2`` B-splines on ``[lo, hi]``."""
        k = self.degree
        n = _check_members(self, n, k - 1)
        inner = np.linspace(lo, hi, n + 3 - k)[1:-1]
        return np.r_[np.full(k + 1, lo), inner, np.full(k + 1, hi)]

    def on_interval(self, t, lo, hi, order=0, n=1) -> np.ndarray:
        order = _check_order(order)
        t = np.asarray(t, dtype=float)
        basis = BSpline(self.breakpoints(lo, hi, n), np.eye(n + 2), self.degree)
        if order > self.degree:
            return np.zeros((n, t.size))
        values = (basis.derivative(order) if order else basis)(t).T[1:-1]
        return np.where((t >= lo) & (t <= hi), values, 0.0)

    def __repr__(self) -> str:
        return f"BSplineFamily(degree={self.degree})"


# --- the registry ----------------------------------------------------------------------------

_REGISTRY: dict[str, TestFunctionFamily] = {}


def register_family(family, *, replace: bool = False):
    """Make a family selectable by its ``name``.

    Parameters
    ----------
    family : TestFunctionFamily or subclass of it
        An instance, or a class that is instantiated without arguments (so the function also
        works as a class decorator).
    replace : bool, default False
        Whether to replace a family registered under the same name.

    Returns
    -------
    The argument, unchanged.

    Raises
    ------
    TypeError
        If ``family`` is not a :class:`TestFunctionFamily`.
    ValueError
        If it has no name, or the name is taken and ``replace`` is false.
    """
    instance = family() if isinstance(family, type) else family
    if not isinstance(instance, TestFunctionFamily):
        raise TypeError(f"a family must be a TestFunctionFamily; got {family!r}")
    name = instance.name
    if not isinstance(name, str) or not name:
        raise ValueError(f"{family!r} needs a non-empty string `name`")
    if name in _REGISTRY and not replace:
        raise ValueError(f"a test-function family named {name!r} is already registered")
    _REGISTRY[name] = instance
    return family


def get_family(family: str | TestFunctionFamily) -> TestFunctionFamily:
    """The family registered as ``family`` (a name), or ``family`` itself (an instance).

    Raises
    ------
    ValueError
        For an unknown name (the message lists the registered ones).
    TypeError
        For anything else.
    """
    if isinstance(family, TestFunctionFamily):
        return family
    if isinstance(family, str):
        try:
            return _REGISTRY[family]
        except KeyError:
            raise ValueError(
                f"unknown test-function family {family!r}; registered: {list(_REGISTRY)}"
            ) from None
    raise TypeError(f"family must be a name or a TestFunctionFamily; got {family!r}")


def local_family(
    family: str | TestFunctionFamily = "bump", eta: float | None = None
) -> LocalFamily:
    """The local family that ``build_test_functions(family=..., eta=...)`` means.

    ``eta`` is the bump's shape parameter: with ``family="bump"`` it gives
    ``BumpFamily(eta)`` (default 9.0); with any other family it must be left ``None`` (a
    family object carries its own parameters).

    Raises
    ------
    ValueError
        For an unknown name, a family with several functions per support, or ``eta`` given
        with another family.
    """
    if eta is not None:
        if family != "bump":
            raise ValueError(
                f"eta is the shape parameter of the 'bump' family; got family={family!r} "
                "(give the family's own parameters to its constructor)"
            )
        return BumpFamily(eta)
    found = get_family(family)
    if not isinstance(found, LocalFamily):
        raise ValueError(
            f"the {found.name!r} family has several functions per support; WENDy's test "
            "functions need a local family (one shape placed by centre and width), e.g. "
            f"{[n for n in _REGISTRY if isinstance(_REGISTRY[n], LocalFamily)]}"
        )
    return found


def list_families() -> tuple[str, ...]:
    """Names of the registered families, in registration order."""
    return tuple(_REGISTRY)


register_family(BumpFamily)
register_family(SineFamily)
register_family(BSplineFamily)
