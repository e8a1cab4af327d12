r"""Total derivatives of functions of the states: ``d^k/dt^k G(x, p)`` as a term of a model.

A right-hand side may hold ``derivative(G, k)``, the ``k``-th time derivative of an expression
``G`` in the states and parameters, entering linearly with a coefficient of the parameters
alone. The weak form never differentiates the data: ``k`` integrations by parts move the
derivative onto the test functions, ``int phi (d^k/dt^k G) dt = (-1)^k int phi^(k) G dt``,
so such a term costs what a pointwise term costs (:mod:`pymc_wendy.weak.operator`).

Two uses:

* a second-order model written as physicists write it, the Van der Pol oscillator
  ``x'' = mu d/dt (x - x^3/3) - x`` (``mu (1 - x^2) x'`` is not a linear derivative term);
* the equations of the observed states of a model with a hidden one
  (:func:`~pymc_wendy.model.elimination.eliminate`): SIR observed in ``I`` satisfies
  ``(log I)'' = -(beta/N) I' - (beta gamma/N) I``, whose terms are all of this kind.

A forward solve needs the explicit right-hand side: :func:`explicit` expands each total
derivative by the chain rule in the companion states (``x, x', ...``); an equation whose own
highest derivative sits inside a term (``(log I)''``) is implicit but linear in that
derivative, and is solved for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp

__all__ = ["TotalDerivative", "derivative", "domain_check", "explicit", "split", "undefined_rows"]


class TotalDerivative(sp.Function):
    """``TotalDerivative(G, k)``: the ``k``-th time derivative of ``G`` along a solution.

    Kept unevaluated by sympy; :class:`~pymc_wendy.ODEModel` takes it apart
    (:func:`split`). ``G`` free of every state is a constant in time, so its derivative is 0.
    """

    nargs = 2

    @classmethod
    def eval(cls, expr, k):
        if not (k.is_Integer and k >= 1):
            raise ValueError(f"the order of a total derivative must be an integer >= 1; got {k}")
        if expr.is_number:
            return sp.Integer(0)
        return None

    def _eval_derivative(self, s):
        # a derivative with respect to a symbol G does not hold (a companion state, an
        # input) is 0; the weak form never asks for one with respect to G's own states
        if s in self.args[0].free_symbols:
            raise ValueError(f"{self} cannot be differentiated pointwise in {s}")
        return sp.Integer(0)


def derivative(expr, order: int = 1) -> sp.Expr:
    """The ``order``-th time derivative of ``expr``, for a model's right-hand side.

    Parameters
    ----------
    expr : expression
        A function of the states (not their derivatives or the inputs) and the parameters,
        written with the ``u`` and ``p`` the right-hand side receives.
    order : int, default 1
        How many times to differentiate; at most the order of the equation it enters.

    Returns
    -------
    sympy.Expr
        A marker the model splits off: it enters the weak form through derivatives of the
        test functions, never through derivatives of the data.

    Examples
    --------
    The Van der Pol oscillator, ``x'' = mu (1 - x^2) x' - x``, whose damping term is the
    derivative of ``x - x^3 / 3``:

    >>> import pymc_wendy as pw
    >>> vdp = pw.ODEModel(
    ...     lambda t, u, p: [p[0] * pw.derivative(u[0] - u[0] ** 3 / 3) - u[0]],
    ...     states=["x"], params=["mu"], order=2)
    >>> vdp.has_operator_terms
    True
    """
    if isinstance(order, bool) or int(order) != order:
        raise ValueError(f"order must be an integer >= 1; got {order!r}")
    return TotalDerivative(sp.sympify(expr), sp.Integer(int(order)))


def split(
    expr: sp.Expr,
    order: int,
    states: Sequence[sp.Symbol],
    params: set,
    named: Callable[[sp.Expr], sp.Expr],
    where: str,
) -> tuple[sp.Expr, dict[int, sp.Expr]]:
    """``expr`` without its total derivatives, and ``{k: G_k}`` with ``expr = rest + sum_k
    d^k/dt^k G_k`` (each ``G_k`` with its coefficient folded in).

    Refused, naming the term (``where`` names the equation): an order above ``order``, a ``G``
    holding anything but the states ``states`` and the parameters, a total derivative that
    enters nonlinearly or with a coefficient that is not a function of the parameters alone.
    """
    terms: dict[int, sp.Expr] = {}
    atoms = sorted(expr.atoms(TotalDerivative), key=sp.default_sort_key)
    allowed = set(states) | params
    for atom in atoms:
        G, k = atom.args[0], int(atom.args[1])
        if k > order:
            raise ValueError(
                f"{where}: {named(atom)} has order {k}, above the equation's order {order}"
            )
        extra = G.free_symbols - allowed
        if extra or G.atoms(TotalDerivative):
            raise ValueError(
                f"{where}: {named(atom)} must differentiate a function of the states and "
                f"parameters only; it holds {sorted(map(str, map(named, extra))) or 'a nested one'}"
            )
        x = sp.Dummy("x")
        linear = expr.xreplace({atom: x})
        coeff = sp.diff(linear, x)
        if coeff.has(x) or not coeff.free_symbols <= params:
            raise ValueError(
                f"{where}: {named(atom)} must enter linearly with a coefficient of the "
                f"parameters alone; its coefficient is {named(coeff)}"
            )
        terms[k] = terms.get(k, sp.Integer(0)) + coeff * G
    rest = expr.xreplace({atom: 0 for atom in atoms}) if atoms else expr
    # a part free of the states is constant in time: its derivative is 0
    terms = {k: sp.expand(G).as_independent(*states, as_Add=True)[1] for k, G in terms.items()}
    return rest, {k: G for k, G in terms.items() if G != 0}


def explicit(
    exprs: Sequence[sp.Expr], chain: dict[sp.Symbol, sp.Symbol | None], t: sp.Symbol
) -> tuple[sp.Expr, ...]:
    """The right-hand sides ``exprs`` (one per state, each defining that state's highest
    derivative) with every total derivative expanded by the chain rule.

    ``chain`` maps each companion symbol to the symbol of its derivative, or to None for a
    state's highest derivative. A term may hold a highest derivative (``(log I)''`` in an
    equation for ``I''``): the equations are then implicit but linear in the highest
    derivatives (the chain rule makes every total derivative so), and are solved for them.
    A ValueError when that linear system is singular at a generic point.
    """
    tops = [sp.Dummy(f"top{i}") for i, nxt in enumerate(chain.values()) if nxt is None]
    top_of = dict(zip([s for s, nxt in chain.items() if nxt is None], tops, strict=True))

    def d_dt(e: sp.Expr) -> sp.Expr:
        out = sp.diff(e, t)
        for sym in e.free_symbols & set(chain):
            nxt = chain[sym]
            out += sp.diff(e, sym) * (top_of[sym] if nxt is None else nxt)
        return out

    def expand(atom: TotalDerivative) -> sp.Expr:
        G, k = atom.args[0], int(atom.args[1])
        for _ in range(k):
            G = d_dt(G)
        return G

    out = [e.xreplace({a: expand(a) for a in e.atoms(TotalDerivative)}) for e in exprs]
    present = [x for x in tops if any(e.has(x) for e in out)]
    if not present:
        return tuple(out)
    # top_d = E_d(tops), linear in the tops: (I - dE/dtops) tops = E(0)
    E = sp.Matrix(out)
    X = sp.Matrix(tops)
    A = sp.eye(len(tops)) - E.jacobian(X)
    b = E.xreplace({x: 0 for x in tops})
    if A.has(*tops) or A.det() == 0:
        raise ValueError(
            "the equations are implicit in their highest derivatives and cannot be solved for them"
        )
    return tuple(sp.simplify(x) for x in A.LUsolve(b))


def undefined_rows(model, t: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, str]:
    """Rows of the data where a total derivative term of ``model`` is undefined (``log I`` at
    ``I <= 0``), and the terms' expressions for a message.

    A term's domain may depend on the parameters; it is evaluated at two generic parameter
    points (uniform in 0.5-2), and a row counts when the term is not finite at both: the
    domains of the eliminated equations (:mod:`.elimination`) are the data's
    (``log I``, ``1/P``), whatever the parameters.
    """
    terms = list(model.total_derivative_terms.values())
    if not terms:
        return np.zeros(t.size, dtype=bool), ""
    sym = model.symbols
    fn = sp.lambdify([sym.t, *sym.u, *sym.p], terms, "numpy")
    rng = np.random.default_rng(0)
    bad = np.ones(t.size, dtype=bool)
    with np.errstate(all="ignore"):
        for _ in range(2):
            theta = rng.uniform(0.5, 2.0, model.n_params)
            vals = fn(t, *U.T, *theta)
            finite = np.all([np.isfinite(np.broadcast_to(v, t.shape)) for v in vals], axis=0)
            bad &= ~finite
    return bad, ", ".join(str(model.named(G)) for G in terms)


def domain_check(model) -> Callable | None:
    """:func:`undefined_rows` of ``model`` as :func:`~pymc_wendy.model.data.as_data` takes it,
    or None for a model without total derivative terms."""
    if not getattr(model, "total_derivative_terms", None):
        return None
    return lambda t, U: undefined_rows(model, t, U)
