r"""A hidden state eliminated: the equations of the observed states of a nonlinear model.

A first-order model whose state ``h`` is never measured satisfies equations in the observed
states alone when ``h`` can be solved for from one observed equation. With ``y`` that state,

.. math::

    y' = a(x, p) + c(y, p)\, h, \qquad h' = \alpha(x, p) + \gamma(x, p)\, h,

(``x`` the observed states; ``h`` enters both equations affinely) the first gives
``h = y'/c(y) - a/c``, and ``y'/c(y) = d/dt B(y)`` with ``B = int dy / c``. Then ``h'`` is a
total derivative, and so is ``gamma h`` when ``gamma / c`` depends on ``y`` alone
(``C = int gamma / c dy``):

.. math::

    \frac{d^2}{dt^2} B(y) = \frac{d}{dt}\Big(C(y) + \frac{a}{c}\Big) + \alpha - \gamma \frac{a}{c}.

Every term is a function of the observed states or a total derivative of one, so the weak
form moves the derivatives onto the test functions (:mod:`.total_derivative`) and needs no
derivative of the data: the weak form of input-output equations (Heitzman-Breen, Dukic and
Bortz 2025) for the class of models where one substitution suffices. SIR observed in ``I``
gives ``(log I)'' = -beta I' - beta gamma I``; FitzHugh-Nagumo observed in ``V`` a Liénard
equation in ``V``; Hes1 observed in two of its three species an equation of order two in one
of them. Another observed equation holding ``h`` keeps first order, with the total
derivative ``d/dt E(y)``, ``E = int c_s / c dy``.

The equation is scaled so that its highest term ``d^2/dt^2 B~(y)`` carries no parameter
(``B = kappa(p) B~``): the weak likelihood is not invariant to a parameter-dependent factor
of the residual, and this is the scaling of the first-order weak form (``dPhi U``, no
parameter). Hidden states no observed one depends on are dropped with their equations.

What the observed states determine: the equations' functions of the states, at generic
points, as functions of the parameters; a Jacobian of lower rank than the number of
parameters means directions in which the parameters move without changing any equation, and
:func:`eliminate` refuses them, naming the parameters that move.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import sympy as sp

from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.total_derivative import derivative

__all__ = ["Eliminated", "eliminate"]


class Eliminated(NamedTuple):
    """What :func:`eliminate` derives (:class:`~pymc_wendy.InputOutput` presents it)."""

    model: ODEModel
    observed: tuple[str, ...]
    hidden: dict[str, sp.Expr]
    dropped: tuple[str, ...]


def eliminate(model: ODEModel, observed: Sequence[str]):
    """The equations of ``observed`` with the model's hidden states eliminated.

    Parameters
    ----------
    model : ODEModel
        First order, without inputs.
    observed : sequence of str
        The measured states; every other state is hidden.

    Returns
    -------
    Eliminated
        ``model`` holds the equations in the observed states (the one that took the hidden
        state in second order), ``hidden`` each eliminated state's expression in the
        observed states and their derivatives.

    Raises
    ------
    ValueError
        A model outside the class of the module doc, more than one hidden state that the
        observed ones depend on, or parameters that the observed states cannot determine,
        each named.
    """
    names = _check(model, observed)
    obs = [model.states.index(n) for n in names]
    needed = _needed_hidden(model, obs)
    dropped = tuple(n for i, n in enumerate(model.states) if i not in obs and i not in needed)
    if len(needed) > 1:
        raise ValueError(
            f"{model.name}: the observed states {list(names)} depend on "
            f"{len(needed)} hidden states {[model.states[i] for i in needed]}; equations in "
            "the observed states are derived for one hidden state (observe another state)"
        )
    f = model.full_expressions
    if not needed:
        equations, hidden, raised = {i: f[i] for i in obs}, {}, None
    else:
        (h,) = needed
        raised, equations, h_expr = _substituted(model, obs, h)
        hidden = {model.states[h]: h_expr}
    io = _as_model(model, obs, raised, equations)
    _check_identifiable(model, io, names)
    return Eliminated(io, names, hidden, dropped)


def _check(model: ODEModel, observed) -> tuple[str, ...]:
    names = (observed,) if isinstance(observed, str) else tuple(observed)
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"observed must name states of {model.name}; got {observed!r}")
    unknown = [n for n in names if n not in model.states]
    if unknown:
        raise ValueError(f"observed states {unknown} are not states of {model.name}")
    if len(set(names)) != len(names):
        raise ValueError(f"observed names a state twice: {list(names)}")
    if model.has_operator_terms or model.transform is not None:
        raise ValueError(
            f"{model.name}: hidden states are eliminated from first-order models without "
            "inputs, derivative terms or a log transform"
        )
    return tuple(sorted(names, key=model.states.index))


def _needed_hidden(model: ODEModel, obs: list[int]) -> list[int]:
    """Hidden states that an observed state depends on, directly or through another one."""
    u = model.symbols.u
    deps = [{i for i, ui in enumerate(u) if ui in e.free_symbols} for e in model.full_expressions]
    seen, todo = set(obs), list(obs)
    while todo:
        for j in deps[todo.pop()] - seen:
            seen.add(j)
            todo.append(j)
    return sorted(seen - set(obs))


def _affine(expr: sp.Expr, h: sp.Symbol) -> tuple[sp.Expr, sp.Expr] | None:
    """``(a, c)`` with ``expr = a + c h``, or None when ``expr`` is not affine in ``h``."""
    c = sp.simplify(sp.diff(expr, h))
    if c.has(h):
        return None
    return sp.simplify(expr.xreplace({h: 0})), c


def _integral(expr: sp.Expr, y: sp.Symbol) -> sp.Expr | None:
    """An antiderivative of ``expr`` in ``y``, or None when sympy finds none in closed form."""
    out = sp.simplify(sp.integrate(expr, y))
    return None if out.has(sp.Integral) else out


def _substituted(model: ODEModel, obs: list[int], h: int):
    """``(raised, equations, h_expression)`` for the one hidden state ``h`` (module doc)."""
    u, params = model.symbols.u, set(model.symbols.p)
    f = model.full_expressions
    hs = u[h]
    fh = _affine(f[h], hs)
    if fh is None:
        raise ValueError(
            f"{model.name}: the equation of the hidden state {model.states[h]!r} is not affine "
            f"in it ({model.named(f[h])}); it cannot be eliminated by substitution"
        )
    alpha, gamma = fh
    chosen = None
    for e in obs:
        split = _affine(f[e], hs) if hs in f[e].free_symbols else None
        if split is None:
            continue
        a, c = split
        ok = c.free_symbols <= params | {u[e]} and (gamma / c).free_symbols <= params | {u[e]}
        if ok and (chosen is None or sp.count_ops(c) < sp.count_ops(chosen[2])):
            chosen = (e, a, c)
    if chosen is None:
        raise ValueError(
            f"{model.name}: no observed equation gives the hidden state "
            f"{model.states[h]!r} by substitution (it must enter one affinely, with a "
            "coefficient of that equation's own state and the parameters only, and the hidden "
            "equation's coefficient of it over that one must be of the same state too); "
            "the equations of the observed states are not derived for this model"
        )
    e, a, c = chosen
    y = u[e]
    B, C = _integral(1 / c, y), _integral(gamma / c, y)
    if B is None or C is None:
        raise ValueError(f"{model.name}: no closed-form antiderivative of 1/{model.named(c)}")
    kappa, B_tilde = _parameter_factor(B, u)
    A = -a / c
    # the equation as the model writes it, y'' = d2/dt2 (y - B~) + ...: its highest term B~''
    top = y - sp.expand(B_tilde)
    rhs = derivative(top, 2) + (derivative(C - A, 1) + alpha + gamma * A) / kappa
    equations = {e: rhs}
    for s in obs:
        if s == e:
            continue
        if hs not in f[s].free_symbols:
            equations[s] = f[s]
            continue
        split = _affine(f[s], hs)
        E = None if split is None else _integral(split[1] / c, y)
        if E is None or not (split[1] / c).free_symbols <= params | {y}:
            raise ValueError(
                f"{model.name}: the observed equation of {model.states[s]!r} holds the hidden "
                f"state {model.states[h]!r} in a way the substitution cannot carry "
                f"({model.named(f[s])})"
            )
        equations[s] = derivative(E, 1) + split[0] + split[1] * A
    dy = sp.Symbol(f"{model.states[e]}'")
    return e, equations, model.named((dy - a) / c)


def _parameter_factor(B: sp.Expr, u) -> tuple[sp.Expr, sp.Expr]:
    """``(kappa(p), B~(u))`` with ``B = kappa B~``; ``kappa = 1`` when ``B`` has no such factor."""
    kappa, rest = sp.factor_terms(B).as_independent(*u, as_Add=False)
    if kappa == 0 or rest == 0:
        return sp.Integer(1), B
    return kappa, rest


def _as_model(model: ODEModel, obs: list[int], raised: int | None, equations: dict) -> ODEModel:
    """The equations as an :class:`ODEModel` in the observed states (order 2 for ``raised``)."""
    u, P = model.symbols.u, model.symbols.p
    orders = [2 if i == raised else 1 for i in obs]

    def rhs(t, y, p):
        sub = {model.symbols.t: t, **dict(zip(P, p, strict=True))}
        j = 0
        for i, q in zip(obs, orders, strict=True):
            sub[u[i]] = y[j]
            j += q
        return [equations[i].xreplace(sub) for i in obs]

    return ODEModel(
        rhs,
        states=[model.states[i] for i in obs],
        params=model.params,
        order=orders,
        name=f"{model.name}[{','.join(model.states[i] for i in obs)}]",
    )


def _check_identifiable(model: ODEModel, io: ODEModel, names) -> None:
    """Refuse parameters the observed states cannot determine (module doc)."""
    u, p = io.symbols.u, io.symbols.p
    # (function of the states, whether it is differentiated: its constant part is lost)
    parts = [(g, False) for g in io.expressions]
    parts += [(G, True) for G in io.total_derivative_terms.values()]
    parts += [(c * u[e], True) for (_, e, _), c in io.derivative_terms.items()]
    used = set().union(*(g.free_symbols for g, _ in parts))
    lost = [n for n, pj in zip(model.params, p, strict=True) if pj not in used]
    if lost:
        raise ValueError(
            f"the equations of {list(names)} in {model.name} do not depend on the parameters "
            f"{lost}: data of {list(names)} cannot determine them (fix them at known values, "
            "or observe a state they act on)"
        )
    rng = np.random.default_rng(0)
    points = rng.uniform(0.5, 2.0, (4 * len(p) + 4, len(u)))
    jac = [
        (sp.lambdify([*u, *p], [sp.diff(g, pj) for pj in p], "numpy"), centred)
        for g, centred in parts
    ]
    ranks, null = [], np.zeros((0, len(p)))
    for _ in range(2):  # two generic parameter points: a rank drop at both is structural
        theta = rng.uniform(0.5, 2.0, len(p))
        rows = []
        for fn, centred in jac:
            vals = np.array([np.broadcast_to(fn(*x, *theta), (len(p),)) for x in points], float)
            rows.append(vals - vals.mean(axis=0) if centred else vals)
        Jm = np.vstack(rows)
        Jm = Jm[np.all(np.isfinite(Jm), axis=1)]
        _, s, vt = np.linalg.svd(Jm / np.maximum(np.linalg.norm(Jm, axis=0), 1e-300))
        rank = int(np.sum(s > 1e-8 * s[0]))
        ranks.append(rank)
        null = vt[rank:]
    if max(ranks) < len(p):
        moving = [n for j, n in enumerate(model.params) if np.any(np.abs(null[:, j]) > 1e-6)]
        raise ValueError(
            f"data of {list(names)} determine only {max(ranks)} combinations of the "
            f"{len(p)} parameters of {model.name}: {moving} can move together without "
            "changing the observed states' equations (a rescaling of a hidden state, say). "
            "Fix one of them at a known value, or observe another state"
        )
