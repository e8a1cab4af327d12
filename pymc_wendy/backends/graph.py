r"""Reference WENDy weak negative log-likelihood as a plain pytensor graph.

A reference for the hand-written numba Op (:mod:`pymc_wendy.backends.op`): what pytensor does
on its own, used by ``benchmarks/nuts_speed.py`` and the tests. ``f`` and ``df/du`` are
converted from the model's sympy expressions into pytensor expressions evaluated on the data
(vectorised over the time points, no scan), ``S(p)`` is assembled densely, factorised with
``pt.linalg.cholesky`` and solved with ``pt.linalg.solve_triangular``; every gradient comes
from pytensor's autodiff.

The data enter as constants by default (``data="constant"``): pytensor sees every size and can
fold data-only terms, but the numba backend embeds the arrays in the generated code, so each
graph compiles for ~20 s and is never cached on disk. ``data="shared"`` keeps the data, noise
level and sizes symbolic: the compiled graph is cached on disk and reused for any data set of
the same model. Run times per evaluation were the same within timing noise (FHN, 513 points).

Notation and flattening as in :mod:`pymc_wendy.weak.kernels` (state-major residual ``d*K + k``,
noise columns ``e*(M+1) + m``)::

    F[m, d]            = f_d(p, X[m], t[m])
    r                  = vec_state_major(Phi F + b)
    L[(d,k), (e,m)]    = Phi[k,m] df_d/du_e(p, X[m], t[m]) + dPhi[k,m] delta(d, e)
    S                  = L diag((1 - ridge) sigma_e^2) L^T + ridge I
    nll                = (log det S + r^T S^{-1} r + K D log 2 pi) / 2
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Literal

import numpy as np
import pytensor
import pytensor.tensor as pt
import sympy as sp

if TYPE_CHECKING:
    from pymc_wendy.weak.likelihood import WeakLikelihood

__all__ = ["plain_logp_function", "plain_weak_nll", "sympy_to_pytensor"]

_LOG_2PI = float(np.log(2.0 * np.pi))

# sympy function class -> pytensor elementwise function
_UNARY = {
    sp.exp: pt.exp,
    sp.log: pt.log,
    sp.sin: pt.sin,
    sp.cos: pt.cos,
    sp.tan: pt.tan,
    sp.asin: pt.arcsin,
    sp.acos: pt.arccos,
    sp.atan: pt.arctan,
    sp.sinh: pt.sinh,
    sp.cosh: pt.cosh,
    sp.tanh: pt.tanh,
    sp.asinh: pt.arcsinh,
    sp.acosh: pt.arccosh,
    sp.atanh: pt.arctanh,
    sp.Abs: pt.abs,
    sp.erf: pt.erf,
    sp.erfc: pt.erfc,
    sp.sign: pt.sign,
}
_RELATIONAL = {
    sp.StrictLessThan: pt.lt,
    sp.LessThan: pt.le,
    sp.StrictGreaterThan: pt.gt,
    sp.GreaterThan: pt.ge,
    sp.Equality: pt.eq,
    sp.Unequality: pt.neq,
}


def sympy_to_pytensor(expr: sp.Basic, env: dict, _cache: dict | None = None):
    """Convert a sympy expression to a pytensor expression.

    ``env`` maps sympy symbols to pytensor variables (or constants); unknown constructs raise
    ``NotImplementedError`` so a silent mistranslation cannot happen.
    """
    cache = {} if _cache is None else _cache
    if expr in cache:
        return cache[expr]

    def rec(e):
        return sympy_to_pytensor(e, env, cache)

    if expr in env:
        out = env[expr]
    else:
        for convert in (_leaf, _arithmetic, _function, _logic):
            out = convert(expr, rec)
            if out is not None:
                break
        else:
            raise NotImplementedError(f"cannot convert {type(expr).__name__} ({expr}) to pytensor")
    cache[expr] = out
    return out


# Each converter below returns the pytensor expression of the sympy nodes it knows, None for
# the others; sympy_to_pytensor tries them in turn, recursing into arguments through ``rec``.


def _leaf(expr, rec):
    """Booleans and numbers (a symbol not in ``env`` is an error)."""
    if expr is sp.true or expr is sp.S.true:
        return pt.constant(True)
    if expr is sp.false or expr is sp.S.false:
        return pt.constant(False)
    if expr.is_number and not expr.free_symbols:
        value = complex(expr)
        if value.imag != 0.0:
            raise NotImplementedError(f"complex constant {expr} in a right-hand side")
        return pt.constant(value.real, dtype="float64")
    if isinstance(expr, sp.Symbol):
        raise KeyError(f"no pytensor value for the symbol {expr}")
    return None


def _arithmetic(expr, rec):
    """Sums, products and powers."""
    if isinstance(expr, sp.Add):
        return functools.reduce(operator.add, [rec(a) for a in expr.args])
    if isinstance(expr, sp.Mul):
        return functools.reduce(operator.mul, [rec(a) for a in expr.args])
    if isinstance(expr, sp.Pow):
        base, exponent = expr.args
        if exponent == sp.Rational(1, 2):
            return pt.sqrt(rec(base))
        if exponent == -1:
            return 1.0 / rec(base)
        if exponent.is_Integer:
            return pt.pow(rec(base), int(exponent))
        return pt.pow(rec(base), rec(exponent))
    return None


def _function(expr, rec):
    """Elementwise functions: :data:`_UNARY`, ``atan2``, ``Max``, ``Min``, ``Heaviside``."""
    if type(expr) in _UNARY:
        return _UNARY[type(expr)](rec(expr.args[0]))
    if isinstance(expr, sp.atan2):
        return pt.arctan2(rec(expr.args[0]), rec(expr.args[1]))
    if isinstance(expr, sp.Max):
        return functools.reduce(pt.maximum, [rec(a) for a in expr.args])
    if isinstance(expr, sp.Min):
        return functools.reduce(pt.minimum, [rec(a) for a in expr.args])
    if isinstance(expr, sp.Heaviside):
        x = rec(expr.args[0])
        h0 = rec(expr.args[1]) if len(expr.args) > 1 else pt.constant(0.5)
        return pt.switch(pt.gt(x, 0.0), 1.0, pt.switch(pt.lt(x, 0.0), 0.0, h0))
    return None


def _logic(expr, rec):
    """``Piecewise``, comparisons (:data:`_RELATIONAL`) and boolean connectives."""
    if isinstance(expr, sp.Piecewise):
        out = None
        for value, cond in reversed(expr.args):
            if out is None:
                if cond not in (sp.true, True):
                    raise NotImplementedError("Piecewise without a final 'True' branch")
                out = rec(value)
            else:
                out = pt.switch(rec(cond), rec(value), out)
        return out
    if type(expr) in _RELATIONAL:
        return _RELATIONAL[type(expr)](rec(expr.args[0]), rec(expr.args[1]))
    if isinstance(expr, sp.And):
        return functools.reduce(pt.and_, [rec(a) for a in expr.args])
    if isinstance(expr, sp.Or):
        return functools.reduce(pt.or_, [rec(a) for a in expr.args])
    if isinstance(expr, sp.Not):
        return pt.invert(rec(expr.args[0]))
    return None


def _on_grid(exprs, env: dict, cache: dict, n: int):
    """Stack converted expressions into shape (n, len(exprs)), broadcasting constants."""
    cols = [pt.broadcast_to(sympy_to_pytensor(e, env, cache), (n,)) for e in exprs]
    return pt.stack(cols, axis=1)


def plain_weak_nll(
    lik: WeakLikelihood, p, sigma2=None, *, data: Literal["constant", "shared"] = "constant",
    x0=None,
):  # fmt: skip
    """The weak negative log-likelihood of ``lik`` as a plain pytensor graph.

    Parameters
    ----------
    lik : WeakLikelihood
        Supplies the (possibly log-transformed) model, data ``X``, times, test functions,
        the noise level and the ridge.
    p : pytensor vector, shape (J,)
    sigma2 : pytensor vector, shape (D,), optional
        Noise variances per state; defaults to ``lik.sigma**2`` (entering like the data).
    data : {"constant", "shared"}
        How the data arrays (``t``, ``X``, ``Phi``, ``dPhi``, ``b``) enter the graph: as
        constants (slow, uncacheable numba compilation) or as shared variables with symbolic
        sizes (numba-cacheable); see the module doc.
    x0 : pytensor vector, shape (D,), optional
        Replaces the known initial row (an initial state with a prior,
        :meth:`~pymc_wendy.WeakLikelihood.initial_nll_grad`).

    Returns
    -------
    pytensor scalar: the negative log-likelihood (matches ``lik.nll(p, sigma)``).
    """
    if data not in ("shared", "constant"):
        raise ValueError(f"data must be 'shared' or 'constant'; got {data!r}")

    def array(x):
        x = np.ascontiguousarray(x, dtype=float)
        return pytensor.shared(x) if data == "shared" else pt.constant(x)

    model = lik.model
    D = model.n_states
    # the grid the residual is built on (with a known initial state, one more row than the data)
    X = np.asarray(lik.form.X, dtype=float)
    dphi = np.asarray(lik.dphi, dtype=float)
    phi = array(lik.phi)
    # Sizes are taken from the data variables, not Python ints: with shared data they stay
    # symbolic, so no size-dependent constants (eye(KD), masks in the Cholesky gradient) get
    # folded into the graph, which numba would embed as large uncacheable globals.
    K, M1 = phi.shape[0], phi.shape[1]
    n = K * D
    if sigma2 is None:
        sigma2 = array(np.asarray(lik.sigma, dtype=float) ** 2)
    p = pt.as_tensor_variable(p)
    sigma2 = pt.as_tensor_variable(sigma2)

    symbols = model.symbols
    env = {symbols.t: array(lik.form.t)}
    columns = [array(X[:, d]) for d in range(D)]
    if x0 is not None:
        lik.check_free_initial()
        x0 = pt.as_tensor_variable(x0)
        columns = [pt.set_subtensor(c[0], x0[d]) for d, c in enumerate(columns)]
    env |= dict(zip(symbols.u, columns, strict=True))
    env |= {pj: p[j] for j, pj in enumerate(symbols.p)}
    cache: dict = {}

    F = _on_grid(model.expressions, env, cache, M1)  # (M1, D)
    f_u = model.derivative_expressions("f_u")  # (D, D): [d, e]
    Ju = pt.stack(  # (D, D, M1): [d, e, m]
        [_on_grid([f_u[d, e] for e in range(D)], env, cache, M1).T for d in range(D)]
    )

    b = array(dphi @ X)  # dPhi X
    if x0 is not None:
        b = b + pt.outer(array(dphi[:, 0]), x0 - array(X[0]))
    r = (pt.dot(phi, F) + b).T.flatten()  # state-major
    eye = np.eye(D)[:, None, :, None]  # [d, ., e, .]
    L4 = phi[None, :, None, :] * Ju[:, None, :, :] + array(eye * dphi[None, :, None, :])
    L = L4.reshape((n, D * M1))
    s2 = (1.0 - lik.ridge) * sigma2
    # column (e, m) -> s2[e] * weights[m, e]
    s2_cols = pt.repeat(s2, M1) * array(lik.form.weights_or_ones().T.reshape(-1))
    S = pt.dot(L * s2_cols[None, :], L.T) + lik.ridge_diag * pt.eye(n)
    C = pt.linalg.cholesky(S, lower=True)
    z = pt.linalg.solve_triangular(C, r, lower=True, b_ndim=1)
    logdet = 2.0 * pt.sum(pt.log(pt.diagonal(C)))
    return 0.5 * (logdet + pt.dot(z, z) + n * _LOG_2PI)


def plain_logp_function(
    lik: WeakLikelihood, mode=None, data: Literal["constant", "shared"] = "constant"
):
    """Compile ``p -> (nll, dnll/dp)`` from :func:`plain_weak_nll` (default pytensor mode)."""
    p = pt.vector("p", dtype="float64")
    nll = plain_weak_nll(lik, p, data=data)
    return pytensor.function([p], [nll, pytensor.grad(nll, p)], mode=mode)
