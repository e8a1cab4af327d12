"""The weak likelihood of models with derivative terms and known inputs.

A model declared with ``order > 1`` or ``inputs`` (:class:`~pymc_wendy.ODEModel`) gets the
:class:`OperatorForm` (:mod:`pymc_wendy.weak.form`) in its :class:`~pymc_wendy.WeakLikelihood`;
the public interface (value, gradient, Hessian, covariances, the Op, the PyMC distribution, the
estimators) is the same. Every derivative ``x^(k)`` is moved onto the test functions by ``k``
integrations by parts, so only the measured states enter, and each input enters through its
exact integrals against the test functions (:mod:`pymc_wendy.model.inputs`). The kernels are in
:mod:`pymc_wendy.weak.operator_kernels`; the choices are in ``docs/higher_order.md``.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from pymc_wendy.model import codegen
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.weak import kernels, operator_kernels
from pymc_wendy.weak.form import KernelSpec, WeakForm, register_form
from pymc_wendy.weak.test_functions import (
    MAX_MOMENT_ERROR,
    TestFunctions,
    accurate_test_functions,
    moment_error,
)

__all__ = ["OperatorForm", "default_test_functions", "moment_error"]


class _Coefficients:
    """Generated functions for the operator coefficients ``C(p)``, ``beta(p)`` (module
    :mod:`pymc_wendy.weak.operator_kernels`) and their first and second parameter derivatives."""

    def __init__(self, model: ODEModel):
        D, J, I = model.n_states, model.n_params, len(model.inputs)
        Q = max(model.orders)
        C = np.full((Q, D, D), sp.Integer(0), dtype=object)
        for (d, e, k), coeff in model.derivative_terms.items():
            C[k - 1, d, e] += (-1) ** k * coeff
        for d, q in enumerate(model.orders):
            C[q - 1, d, d] -= (-1) ** q  # the equation's left-hand side x_d^(q)
        beta = np.full((D, I), sp.Integer(0), dtype=object)
        for (d, i), coeff in model.input_terms.items():
            beta[d, i] = coeff
        p = list(model.symbols.p)
        self.shapes = {}
        self._fns = {}
        self._entries = {}
        self._numba = {}
        self._syms = (model.symbols.t, p)
        for name, arr in (("C", C), ("beta", beta)):
            first = np.array(
                [[sp.diff(e, pj) for pj in p] for e in arr.ravel()], dtype=object
            ).reshape(*arr.shape, J)
            second = np.array(
                [[sp.diff(e, pi, pj) for pj in p] for e in arr.ravel() for pi in p], dtype=object
            ).reshape(*arr.shape, J, J)
            for suffix, a in (("", arr), ("_p", first), ("_pp", second)):
                self.shapes[name + suffix] = a.shape
                self._entries[name + suffix] = codegen.nonzero_entries(a)
                self._fns[name + suffix] = codegen.generate(
                    f"_{name}{suffix}",
                    self._entries[name + suffix],
                    t=model.symbols.t,
                    u=[],
                    p=p,
                )
        self.Q = Q

    def numba_function(self, name: str):
        """The numba-compiled ``fn(t, U, p, out)`` of ``name`` (``"C"``, ``"beta_p"``, ...),
        evaluated with one dummy time row and no states."""
        fn = self._numba.get(name)
        if fn is None:
            import numba  # deferred: only the compiled likelihood needs it

            fn = self._numba[name] = numba.njit(
                codegen.generate(
                    f"_{name}",
                    self._entries[name],
                    t=self._syms[0],
                    u=[],
                    p=self._syms[1],
                    style="loop",
                )
            )
        return fn

    def _eval(self, name: str, p: np.ndarray) -> np.ndarray:
        out = np.zeros((1, *self.shapes[name]))
        return self._fns[name](np.zeros(1), np.zeros((1, 0)), p, out)[0]

    def terms(self, p: np.ndarray, level: int = 0) -> operator_kernels.Terms:
        """Coefficients at ``p``; ``level`` 1 adds first, 2 also second derivatives."""
        get = [self._eval(n, p) for n in ("C", "beta")]
        if level >= 1:
            get += [self._eval(n, p) for n in ("C_p", "beta_p")]
        if level >= 2:
            get += [self._eval(n, p) for n in ("C_pp", "beta_pp")]
        return operator_kernels.Terms(*get)


def _coefficients(model: ODEModel) -> _Coefficients:
    return model.cached(("operator", "coefficients"), _Coefficients)


class _TotalTerms:
    """Generated functions of a model's total derivative terms
    (:attr:`~pymc_wendy.ODEModel.total_derivative_terms`): ``(-1)^k G_{dk}`` stacked over the
    orders ``k`` present (``orders``), and their derivatives in the states and parameters
    with the layout of the model's ``f``, ``f_u``, ... after the stack axis: each enters
    the residual as ``f`` does, through ``Phi^(k)`` instead of ``Phi``."""

    def __init__(self, model: ODEModel):
        self.orders = sorted({k for _, k in model.total_derivative_terms})
        t, u, p = model.symbols
        G = np.full((len(self.orders), model.n_states), sp.Integer(0), dtype=object)
        for (d, k), expr in model.total_derivative_terms.items():
            G[self.orders.index(k), d] = (-1) ** k * expr
        arrays = {"f": G}
        arrays["f_u"] = _derived(G, u)
        arrays["f_p"] = _derived(G, p)
        arrays["f_up"] = _derived(arrays["f_u"], p)
        arrays["f_pp"] = _derived(arrays["f_p"], p)
        arrays["f_upp"] = _derived(arrays["f_up"], p)
        self.shapes = {w: a.shape for w, a in arrays.items()}
        self._arrays = arrays
        self._syms = (t, list(u), list(p))
        self._numba: dict = {}
        self._fns = {
            w: codegen.generate(
                f"_total_{w}", codegen.nonzero_entries(a), t=t, u=list(u), p=list(p)
            )
            for w, a in arrays.items()
        }

    def numba_function(self, which: str):
        """The numba-compiled ``fn(t, U, p, out)`` of ``which``, ``out`` (M+1, P, D, ...)."""
        fn = self._numba.get(which)
        if fn is None:
            import numba  # deferred: only the compiled likelihood needs it

            t, u, p = self._syms
            entries = codegen.nonzero_entries(self._arrays[which])
            source = codegen.generate(f"_total_{which}", entries, t=t, u=u, p=p, style="loop")
            fn = self._numba[which] = numba.njit(source, error_model="numpy")
        return fn

    def evaluate(self, which: str, t: np.ndarray, X: np.ndarray, p: np.ndarray) -> np.ndarray:
        """``which`` at every data row, the stack axis first: ``(len(orders), M+1, D, ...)``."""
        out = np.zeros((t.size, *self.shapes[which]))
        with np.errstate(all="ignore"):
            out = self._fns[which](t, X, np.asarray(p, dtype=float), out)
        return np.moveaxis(out, 1, 0)


def _derived(a: np.ndarray, symbols) -> np.ndarray:
    """``a`` differentiated in each of ``symbols``, a new last axis."""
    out = np.empty((*a.shape, len(symbols)), dtype=object)
    for idx in np.ndindex(*a.shape):
        for j, s in enumerate(symbols):
            out[(*idx, j)] = sp.diff(a[idx], s)
    return out


def _all_total_terms(model: ODEModel) -> _TotalTerms:
    return model.cached(("operator", "total_terms"), _TotalTerms)


def _total_terms(model: ODEModel) -> _TotalTerms | None:
    """The model's :class:`_TotalTerms`, or None without total derivative terms."""
    return _all_total_terms(model) if model.total_derivative_terms else None


def default_test_functions(t: np.ndarray, X: np.ndarray, model: ODEModel, **where) -> TestFunctions:
    """The default test functions of a model of order ``q`` (``docs/higher_order.md``).

    :func:`~pymc_wendy.weak.test_functions.accurate_test_functions` with ``q`` and ``2 J``
    test functions wanted: radii ``r, 2r, 4r`` with ``r`` = ``4 + 2q`` grid spacings (where
    the ``q``-th derivatives integrate to about 3e-4), or fewer down to 3 on a short grid.
    The first-order default (a data-driven corner rule with radii up to 8 r) picks radii of
    4-5 spacings, where the integration error of ``q``-th derivatives biases the estimate by
    several standard errors at low noise (head acceleration, N = 101, 1 % noise: 8 se).
    """
    q = max(model.orders)
    try:
        return accurate_test_functions(t, X, q, 2 * model.n_params, **where)
    except ValueError as exc:
        raise ValueError(f"{model.name} has order {q}: {exc}") from None


@register_form
class OperatorForm(WeakForm):
    """:class:`~pymc_wendy.weak.form.WeakForm` of a model with derivative terms or inputs.

    Chosen for a model with ``model.has_operator_terms``. Any observation model that does
    not work on ``log u`` (log-normal noise uses proportional weights here).
    Test functions must have an analytic form (built by :func:`build_test_functions`), since
    derivatives of order above one are evaluated from it; the default is
    :func:`default_test_functions`.
    """

    kind = "operator"
    log_scale = False

    @classmethod
    def accepts(cls, model: ODEModel) -> bool:
        return model.has_operator_terms

    @classmethod
    def check_noise(cls, model: ODEModel, noise) -> None:
        if noise.log_scale:
            raise ValueError(
                f"{model.name}: the weak form of a model of order > 1 or with inputs cannot "
                f"work on log u (its derivative terms would become nonlinear); got "
                f"noise={noise.name!r}. noise='proportional' has the same relative error "
                "without the log transform"
            )

    @classmethod
    def default_test_functions(cls, t, X, model, **where) -> TestFunctions:
        return default_test_functions(t, X, model, **where)

    def __init__(self, model, t, X, test_functions, inputs, ridge, weights=None):
        super().__init__(model, t, X, test_functions, inputs, ridge, weights)
        tf = test_functions
        self.coefficients = _coefficients(model)
        Q = self.coefficients.Q
        if Q > 1 and tf.coefficients is None:
            raise ValueError(
                f"{model.name} has order {Q}: its weak form needs derivatives of order {Q} of "
                "the test functions, which user matrices (phi, dphi) do not provide; use "
                "build_test_functions options instead"
            )
        err = moment_error(tf, Q)
        if err > MAX_MOMENT_ERROR:
            raise ValueError(
                f"{model.name} has order {Q}, but the test functions' {Q}-th derivatives are "
                f"integrated with relative error {err:.2g} on this grid (smallest radius "
                f"{tf.min_radius:g}); use larger radii (test_functions={{'min_radius': ...}}) "
                "or more time points"
            )
        #: relative error of the discrete integration by parts (:func:`moment_error`)
        self.moment_error = err
        ops = np.stack([np.ascontiguousarray(tf.derivative_matrix(q)) for q in range(1, Q + 1)])
        psi = np.stack([w.integrate(tf) for w in inputs.values()] or [np.zeros(tf.K)], axis=1)
        #: the total derivative terms' generated functions, or None
        self.totals = _total_terms(model)
        orders = self.totals.orders if self.totals is not None else []
        self.data = operator_kernels.Data(
            phi=self.phi,
            ops=ops,
            OX=np.einsum("qkm,me->qke", ops, X),
            Psi=psi[:, : len(inputs)],
            pointwise=np.stack([self.phi, *(ops[k - 1] for k in orders)]),
        )

    def operator_scale(self) -> float:
        # the highest derivative of the test functions: the term of the residual that scales
        # with time like S (every other term carries parameters with matching time units)
        return float(np.mean(np.sum(self.data.ops[-1] ** 2, axis=1)))

    def pointwise(self, p: np.ndarray, *which: str) -> list[np.ndarray]:
        """The model's derivatives ``which`` (``"f"``, ``"f_u"``, ...) at the data, each
        stacked with those of the total derivative terms (:class:`_TotalTerms`): shape
        ``(P, M+1, ...)`` in the order of ``data.pointwise``."""
        out = []
        for w, arr in zip(which, self.derivs(p, *which), strict=True):
            if self.totals is None:
                out.append(arr[None])
                continue
            extra = self.totals.evaluate(w, self.t, self.X, p)
            kernels.check_finite(f"a total derivative term ({w})", np.moveaxis(extra, 0, 1), self.t)
            out.append(np.concatenate([arr[None], extra]))
        return out

    def evaluation(self, p, s2, diag=None) -> operator_kernels.Evaluation:
        F, Ju = self.pointwise(p, "f", "f_u")
        terms = self.coefficients.terms(p)
        return operator_kernels.evaluate(
            self.data, F, Ju, terms, s2, self.ridge, self._diag(diag), self.weights
        )

    def gradient(self, p, ev, logdet: bool, sigma2: bool) -> tuple:
        Jp, Jup = self.pointwise(p, "f_p", "f_up")
        terms = self.coefficients.terms(p, 1)
        g, gs, BT = operator_kernels.gradient_parts(
            ev, self.data, Jp, Jup, terms, self.ridge, logdet, sigma2
        )
        return g, gs, (Jp, Jup, BT)

    def hessian(self, p, ev, state: tuple, logdet: bool, exact: bool) -> np.ndarray:
        Jp, Jup, BT = state
        Jpp, Jupp = self.pointwise(p, "f_pp", "f_upp")
        terms = self.coefficients.terms(p, 2)
        return operator_kernels.hessian(ev, self.data, Jp, Jup, Jpp, Jupp, terms, BT, logdet, exact)

    def residual(self, p) -> np.ndarray:
        (F,) = self.pointwise(p, "f")
        return operator_kernels.residual(self.data, F, self.coefficients.terms(p))

    def dr_dp(self, p) -> np.ndarray:
        (Jp,) = self.pointwise(p, "f_p")
        return operator_kernels.dr_dp(self.data, Jp, self.coefficients.terms(p, 1))

    def linear_coefficients(self, s2e: np.ndarray):
        """``(r0, G, A)`` of the linear-in-parameters form (:mod:`pymc_wendy.weak.linear_form`):
        the residual and ``L`` are affine in ``p``, read off at ``p = 0``."""
        J = self.model.n_params
        zero = np.zeros(J)
        F0, Ju0, Jup = self.pointwise(zero, "f", "f_u", "f_up")
        terms = self.coefficients.terms(zero, 1)
        r0 = operator_kernels.residual(self.data, F0, terms)
        G = self.dr_dp(zero)
        La = [operator_kernels.linearisation(self.data, Ju0, terms.C)]
        La += list(operator_kernels.dL_dp(self.data, Jup, terms))
        sq = np.sqrt((s2e[:, None] * self.weights_or_ones().T).ravel())
        Ls = [x * sq[None, :] for x in La]
        ia, ib = np.triu_indices(J + 1)
        A = np.empty((ia.size, r0.size, r0.size))
        for q, (a, b) in enumerate(zip(ia, ib, strict=True)):  # pairs of parameters only
            Aab = Ls[a] @ Ls[b].T
            A[q] = Aab if a == b else Aab + Aab.T
        return r0, G, A

    def score_mean(self, p, ev) -> np.ndarray:
        # Linear in the states, r(p*) = L(p*) eps exactly and S does not depend on the data:
        # the quadratic form's score has mean zero at the truth ("analytic" is "profile").
        if self.model.is_linear_in_states:
            return np.zeros(self.model.n_params)
        raise ValueError(
            f"{self.model.name}: the analytic bias correction of models of order > 1 or with "
            "inputs needs them linear in the states; use bias_correction='profile'"
        )

    def kernel_spec(self) -> KernelSpec:
        model, coeff, d = self.model, self.coefficients, self.data
        totals = _all_total_terms(model)  # none: empty functions, one kernel for both
        fns = {w: model.numba_function(w) for w in ("f", "f_u", "f_p", "f_up")}
        fns |= {w: coeff.numba_function(w) for w in ("C", "beta", "C_p", "beta_p")}
        fns |= {f"total_{w}": totals.numba_function(w) for w in ("f", "f_u", "f_p", "f_up")}
        shapes = dict(coeff.shapes) | {f"total_{w}": s for w, s in totals.shapes.items()}
        arrays = (self.t, self.X, d.pointwise, d.ops, d.OX, d.Psi, self.weights_or_ones())
        return KernelSpec(self.kind, arrays, fns, shapes)
