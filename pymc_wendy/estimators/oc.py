"""Orthogonality conditions, ``fit(method="oc")`` (Brunel, Clairon & d'Alché-Buc, 2014).

A gradient-matching estimator built on the weak form of the ODE. Steps:

1. **Proxy.** Each state ``d`` is smoothed by a least-squares regression spline
   (``scipy.interpolate.make_lsq_spline``, degree ``spline_degree``, 3 by default) on a
   *uniform* sequence of ``K_d`` interior knots; ``K_d`` minimises the generalised
   cross-validation score ``GCV(K) = n RSS(K) / (n - (K + k + 1))^2`` over
   ``K = 0 .. max_knots`` (the hat matrix of a full-rank least-squares spline has trace
   ``K + k + 1``), as in the paper's experiments (section 5.1).
2. **Conditions.** With test functions ``phi_1 .. phi_L`` vanishing at both ends of the
   observation interval ``[t_0, t_n]`` (so integration by parts has no boundary term), every
   state ``d`` and test function ``l`` give

   ``e_{d,l}(theta) = int f_d(t, phi_hat(t), theta) phi_l(t) dt + int phi_hat_d(t) phi_l'(t) dt``

   (paper eq. 2.7), computed by composite Gauss-Legendre quadrature
   (:func:`pymc_wendy.weak.test_functions.gauss_legendre`, ``n_quad`` nodes on every
   interval between proxy knots, test-function knots and a uniform grid fine enough for the
   highest sine). The test functions are a family of the registry
   (:mod:`pymc_wendy.weak.test_functions.families`) that carries any number of functions on
   one support, here ``[t_0, t_n]``: ``test_functions="sine"``:
   ``phi_l(t) = sqrt(2/T) sin(l pi (t - t_0)/T)`` (the paper's orthonormal basis of
   ``H_0^1``); ``"bspline"``: the ``L`` cubic B-splines of a clamped uniform knot sequence on
   ``[t_0, t_n]`` that vanish at both ends. A family that is not orthonormal is
   orthonormalised in ``L^2`` (Cholesky of its Gram matrix), so that the criterion depends on
   its span only (condition C4 of the paper asks for an orthonormal family).
3. **Estimate.** ``theta_hat_L = argmin |e(theta)|^2`` (eq. 2.8) over the ``D L`` stacked
   conditions: one linear least-squares solve when the model is linear in the parameters
   (``lsq_linear`` within ``bounds``), otherwise ``scipy.optimize.least_squares`` with the
   analytic Jacobian ``J_theta = [int f_{d,theta_j}(t, phi_hat, theta) phi_l dt]``.
4. **Number of conditions.** Unless ``n_test`` fixes ``L``, ``theta_hat_L`` is computed for
   every ``L`` in ``n_test_range`` and the one with the smallest prediction error is kept
   (paper section 5.1): the ODE is solved from ``u0`` (the ``u0`` passed to ``fit``, else the
   proxy's value ``phi_hat(t_0)``) with ``theta_hat_L`` and scored by the unweighted sum of
   squared errors ``sum_i |y_i - phi(t_i; u0, theta_hat_L)|^2`` over all states. ``L`` whose
   Jacobian has rank below the number of parameters, or whose solve fails, are skipped
   (their score is ``inf``). Default range: ``L_min = max(2, ceil((J + 1) / D))`` (more
   conditions than parameters), ``L_max = max(L_min, min(15, 3 J, n // 4))`` (the paper used
   ``2 <= L <= 15`` for alpha-pinene, ``J = 5``).
5. **Variance.** The paper's closed form (eqs. 4.9-4.12): with ``c_hat_k`` the spline
   coefficients of state ``k``, ``V(c_hat_k) = sigma_k^2 (P_k^T P_k)^{-1}`` and
   ``G_k = d e / d c_k`` with entries
   ``int (f_{d,u_k}(t, phi_hat, theta) phi_l + delta_{dk} phi_l') p_{k,m} dt``,
   ``V_e = sum_k G_k V(c_hat_k) G_k^T`` (independent noise across states) and
   ``V(theta_hat) = M V_e M^T``, ``M = (J_theta^T J_theta)^{-1} J_theta^T``, at ``theta_hat``.
   ``sigma_k`` is the ``sigma`` passed to ``fit``; when none was given it is the spline's
   residual estimate ``RSS_k / (n - K_k - k - 1)`` (the "classical estimate" of eq. 4.7),
   which is also what the result reports as ``sigma``. The variance ignores the selection of
   knots and of ``L`` (as the paper's does). It is ``res.covariance("oc")``, the default.

Options
-------
``test_functions`` ("sine" | "bspline" | another registered family with any number of
functions per support, or such a family object; default "sine"); ``n_test`` (fixed ``L``) or
``n_test_range`` ((lo, hi), both >= 2); ``n_knots`` (fixed interior-knot count, an int or one
per state, skipping GCV); ``max_knots`` (largest count GCV tries; default
``min(40, (n - k - 3) // 2)``); ``spline_degree`` (1-5, default 3); ``n_quad`` (Gauss nodes
per quadrature interval, default 8); ``max_nfev``, ``xtol``, ``ftol``, ``gtol`` (for
``least_squares``, nonlinear-in-parameter models).

``history`` keys
----------------
``"n_knots"`` (interior knots per state), ``"knots"`` (their positions, one array per
state), ``"n_knots_candidates"`` and ``"gcv"`` (GCV score per state and candidate, shape
(D, candidates); absent with fixed ``n_knots``), ``"proxy_sigma"`` (residual sd of each
spline), ``"test_functions"``, ``"n_test"`` (chosen ``L``), ``"n_test_candidates"``,
``"prediction_sse"`` (SSE per candidate, ``inf`` where skipped), ``"estimates"`` (one row
``theta_hat_L`` per candidate), ``"conditions"`` (``e(theta_hat)`` as a (D, L) array) and
``"u0"`` (the initial state used for prediction). Data sets with several experiments and
log-normal noise are not supported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import linalg, optimize
from scipy.interpolate import BSpline, make_lsq_spline

from pymc_wendy.estimators._bounds import check_closed_box
from pymc_wendy.estimators._problem import FitProblem, safe_nll
from pymc_wendy.estimators.identifiability import jacobian_identifiability
from pymc_wendy.estimators.registry import Estimator
from pymc_wendy.estimators.results import FitResult
from pymc_wendy.estimators.wls import screened_start
from pymc_wendy.model.observation import as_observation
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.simulate import SimulationError, solve
from pymc_wendy.weak.test_functions import (
    SpanningFamily,
    gauss_legendre,
    get_family,
    list_families,
)

__all__ = ["OPTIONS", "usable_families"]

#: Option names accepted by ``fit(method="oc", options=...)``
OPTIONS = frozenset(
    {"test_functions", "n_test", "n_test_range", "n_knots", "max_knots", "spline_degree"}
    | {"n_quad", "max_nfev", "xtol", "ftol", "gtol"}
)
_DEFAULTS = {"test_functions": "sine", "spline_degree": 3, "n_quad": 8}


# --- options -------------------------------------------------------------------------------
def usable_families() -> tuple[str, ...]:
    """Registered test-function families ``oc`` can use: the spanning ones (any number of
    functions on one interval; the bump has one per support)."""
    return tuple(n for n in list_families() if isinstance(get_family(n), SpanningFamily))


def _family(spec, where: str = "options") -> SpanningFamily:
    """The family named (or given) by ``options['test_functions']``."""
    names = usable_families()
    if isinstance(spec, SpanningFamily):
        return spec
    if isinstance(spec, str) and spec in names:
        return get_family(spec)
    raise ValueError(f"{where}['test_functions'] must be one of {list(names)}; got {spec!r}")


def _is_int(v, lo: int) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= lo


def _check_options(options: Mapping, where: str = "options") -> None:
    """The values of the ``oc``-specific options (names, ``max_nfev`` and the tolerances
    are the generic check's)."""
    _family(options.get("test_functions", "sine"), where)
    if "n_test" in options and "n_test_range" in options:
        raise ValueError(f"give {where}['n_test'] or {where}['n_test_range'], not both")
    if "n_test" in options and not _is_int(options["n_test"], 2):
        raise ValueError(f"{where}['n_test'] must be an integer >= 2; got {options['n_test']!r}")
    if "n_test_range" in options:
        rng = options["n_test_range"]
        ok = isinstance(rng, list | tuple) and len(rng) == 2 and all(_is_int(v, 2) for v in rng)
        if not ok or rng[0] > rng[1]:
            raise ValueError(
                f"{where}['n_test_range'] must be (lo, hi) integers with 2 <= lo <= hi; got {rng!r}"
            )
    if "n_knots" in options:
        k = options["n_knots"]
        ks = k if isinstance(k, list | tuple | np.ndarray) else [k]
        if len(ks) == 0 or not all(_is_int(v, 0) for v in ks):
            raise ValueError(
                f"{where}['n_knots'] must be an integer >= 0 or one per state; got {k!r}"
            )
    if "max_knots" in options and not _is_int(options["max_knots"], 0):
        raise ValueError(f"{where}['max_knots'] must be an integer >= 0")
    deg = options.get("spline_degree", 3)
    if not (_is_int(deg, 1) and deg <= 5):
        raise ValueError(f"{where}['spline_degree'] must be an integer in 1..5; got {deg!r}")
    if "n_quad" in options and not _is_int(options["n_quad"], 2):
        raise ValueError(f"{where}['n_quad'] must be an integer >= 2")


# --- step 1: the regression-spline proxy ----------------------------------------------------
@dataclass(frozen=True)
class _Proxy:
    """Least-squares splines of the D states and what the variance needs of them."""

    splines: tuple[BSpline, ...]
    #: ``(P_d^T P_d)^{-1}``: the coefficients' covariance per unit noise variance
    unit_cov: tuple[np.ndarray, ...]
    #: residual standard deviation ``sqrt(RSS / (n - n_coef))`` per state
    sigma: np.ndarray
    n_knots: np.ndarray
    candidates: np.ndarray | None
    gcv: np.ndarray | None

    @property
    def knots(self) -> list[np.ndarray]:
        """Interior knots of each state's spline."""
        return [np.unique(s.t[s.k + 1 : -s.k - 1]) for s in self.splines]


def _uniform_knots(t0: float, t1: float, n_interior: int, k: int) -> np.ndarray:
    inner = np.linspace(t0, t1, n_interior + 2)[1:-1]
    return np.r_[np.full(k + 1, t0), inner, np.full(k + 1, t1)]


def _lsq_spline(t, y, n_interior: int, k: int):
    """The least-squares spline and its residual sum of squares; None if it does not exist
    (too few data between knots: the Schoenberg-Whitney condition fails)."""
    knots = _uniform_knots(t[0], t[-1], n_interior, k)
    try:
        spl = make_lsq_spline(t, y, knots, k)
    except (ValueError, np.linalg.LinAlgError):
        return None, np.inf
    r = spl(t) - y
    rss = float(r @ r)
    return (spl, rss) if np.isfinite(rss) else (None, np.inf)


def _fit_proxy(t, U, k: int, n_knots=None, max_knots: int | None = None) -> _Proxy:
    """Regression splines of every state, the knot count of each chosen by GCV."""
    n, D = U.shape
    if n < k + 3:
        raise ValueError(
            f"oc needs at least {k + 3} observation times for a degree-{k} regression spline "
            f"(GCV needs n > k + 2); got {n}"
        )
    top = n - k - 3  # keeps n - n_coef >= 2
    if n_knots is not None:
        fixed = np.broadcast_to(np.asarray(n_knots, dtype=int), (D,))
        if np.any(fixed > top):
            raise ValueError(
                f"n_knots = {fixed.max()} leaves too few data for a degree-{k} spline on {n} "
                f"points (at most {top} interior knots)"
            )
        candidates, gcv = None, None
        chosen = fixed
    else:
        hi = min(40, top // 2) if max_knots is None else min(int(max_knots), top)
        candidates = np.arange(hi + 1)
        gcv = np.full((D, candidates.size), np.inf)
        for d in range(D):  # a loop over candidate spline spaces, each fit vectorised
            for i, K in enumerate(candidates):
                _, rss = _lsq_spline(t, U[:, d], int(K), k)
                gcv[d, i] = n * rss / (n - (K + k + 1)) ** 2
        if not np.all(np.isfinite(gcv.min(axis=1))):
            raise ValueError("no regression spline could be fitted to the data")
        chosen = candidates[np.argmin(gcv, axis=1)]
    splines, unit_cov, sig = [], [], np.empty(D)
    for d in range(D):
        spl, rss = _lsq_spline(t, U[:, d], int(chosen[d]), k)
        if spl is None:
            raise ValueError(
                f"no degree-{k} spline with {chosen[d]} uniform interior knots fits state {d} "
                "(too few observations between knots)"
            )
        P = BSpline.design_matrix(t, spl.t, k).toarray()
        unit_cov.append(np.linalg.pinv(P.T @ P))
        sig[d] = np.sqrt(rss / (n - P.shape[1]))
        splines.append(spl)
    return _Proxy(tuple(splines), tuple(unit_cov), sig, np.asarray(chosen), candidates, gcv)


# --- step 2: test functions, quadrature and the conditions ---------------------------------
def _nodes(t0: float, t1: float, breaks, n_sub: int, n_quad: int):
    """Composite Gauss-Legendre nodes and weights on ``[t0, t1]``: ``n_sub`` uniform intervals
    with every break point (spline knots) an interval end too, so that the integrands are
    smooth on each interval."""
    return gauss_legendre(np.r_[np.linspace(t0, t1, n_sub + 1), np.clip(breaks, t0, t1)], n_quad)


def _test_breaks(family, Ls, t0: float, t1: float) -> np.ndarray:
    """Where the test functions of every candidate ``L`` are not smooth (B-spline knots)."""
    fam = _family(family)
    return np.concatenate([np.empty(0), *(fam.breakpoints(t0, t1, L) for L in Ls)])


def _test_functions(family, L: int, t0: float, t1: float, tq, wq):
    """``phi_l`` and ``phi_l'`` at the nodes, shape (L, Q) each; orthonormal in ``L^2``."""
    fam = _family(family)
    Phi = fam.on_interval(tq, t0, t1, order=0, n=L)
    dPhi = fam.on_interval(tq, t0, t1, order=1, n=L)
    if fam.orthonormal:
        return Phi, dPhi
    chol = np.linalg.cholesky((Phi * wq) @ Phi.T)
    return (
        linalg.solve_triangular(chol, Phi, lower=True),
        linalg.solve_triangular(chol, dPhi, lower=True),
    )


class _Conditions:
    """``e(theta)`` for a fixed proxy and test functions, stacked state by state (row
    ``d L + l``), with its derivatives in ``theta`` and in the proxy's coefficients."""

    def __init__(self, model: ODEModel, proxy: _Proxy, Phi, dPhi, tq, wq):
        self.model, self.proxy, self.tq = model, proxy, tq
        self.A, self.dA = Phi * wq, dPhi * wq
        self.L = Phi.shape[0]
        # the proxy's basis at the nodes: phi_hat_d(t_q) = B_d c_d
        self.B = [BSpline.design_matrix(tq, s.t, s.k).toarray() for s in proxy.splines]
        self.X = np.column_stack([B @ s.c for B, s in zip(self.B, proxy.splines, strict=True)])
        self.h = self.dA @ self.X  # int phi_hat_d phi_l' dt, (L, D)

    def residual(self, p) -> np.ndarray:
        return (self.A @ self.model.f(self.tq, self.X, p) + self.h).T.ravel()

    def jac(self, p) -> np.ndarray:
        """``d e / d theta``, shape (D L, J)."""
        fp = self.model.evaluate("f_p", self.tq, self.X, p)
        return np.einsum("lq,qdj->dlj", self.A, fp).reshape(-1, self.model.n_params)

    def jac_coef(self, p) -> list[np.ndarray]:
        """``G_k = d e / d c_k`` for every state ``k``, shape (D L, K_k) each."""
        fu = self.model.evaluate("f_u", self.tq, self.X, p)  # (Q, D, D): [q, d, k]
        D, L = self.model.n_states, self.L
        out = []
        for k, Bk in enumerate(self.B):  # a loop over states
            G = np.einsum("lq,qd,qm->dlm", self.A, fu[:, :, k], Bk)
            G[k] += self.dA @ Bk
            out.append(G.reshape(D * L, -1))
        return out

    def covariance(self, p, sigma) -> np.ndarray:
        """The paper's ``M V_e M^T`` at ``p`` with per-state noise sd ``sigma``."""
        Ve = sum(
            s**2 * G @ C @ G.T
            for s, G, C in zip(sigma, self.jac_coef(p), self.proxy.unit_cov, strict=True)
        )
        M = np.linalg.pinv(self.jac(p))
        return M @ Ve @ M.T


# --- step 3: the estimate for one L ---------------------------------------------------------
def _minimise(cond: _Conditions, start, bounds, options) -> tuple[np.ndarray, int, bool, str]:
    """``argmin |e|^2``: ``(p, residual evaluations, success, message)``."""
    model = cond.model
    if model.is_linear_in_params:
        zero = np.zeros(model.n_params)
        G, r0 = cond.jac(zero), cond.residual(zero)
        if bounds is None:
            return np.linalg.lstsq(G, -r0, rcond=None)[0], 1, True, "closed form"
        res = optimize.lsq_linear(G, -r0, bounds=bounds)
        return res.x, 1, bool(res.success), "bounded linear least squares"
    kw = {k: options[k] for k in ("max_nfev", "xtol", "ftol", "gtol") if k in options}
    lo, hi = bounds if bounds is not None else (-np.inf, np.inf)
    x0 = start if bounds is None else np.clip(start, *bounds)
    res = optimize.least_squares(
        cond.residual, x0, jac=cond.jac, bounds=(lo, hi), x_scale="jac", **kw
    )
    return res.x, int(res.nfev), bool(res.success), res.message


def _nonlinear_start(problem: FitProblem, cond: _Conditions) -> np.ndarray:
    """``p0``; else the best of bounded fits from the box's centre and a Sobol design."""
    if problem.p0 is not None:
        return problem.p0
    if problem.bounds is None:
        raise ValueError(
            f"{problem.model.name} is nonlinear in its parameters: give p0, or bounds (then "
            "the orthogonality conditions are minimised from 17 points in them)"
        )
    check_closed_box(problem.bounds, problem.model.params)

    def fit_from(s):
        p = _minimise(cond, s, problem.bounds, {"max_nfev": 50})[0]
        r = cond.residual(p)
        return p, float(r @ r)

    return screened_start(problem.bounds, fit_from)


def _prediction_sse(model, p, u0, t, U, solver) -> float:
    try:
        X = solve(model, p, u0, t, **(solver or {}))
    except (SimulationError, ValueError):
        return np.inf
    sse = float(np.sum((U - X) ** 2))
    return sse if np.isfinite(sse) else np.inf


# --- the estimator --------------------------------------------------------------------------
def _default_range(J: int, D: int, n: int) -> tuple[int, int]:
    lo = max(2, -(-(J + 1) // D))
    return lo, max(lo, min(15, 3 * J, n // 4))


def run(problem: FitProblem) -> FitResult:
    """``fit(method="oc")``."""
    if problem.several:
        raise ValueError("method='oc' fits one experiment; got several")
    if as_observation(problem.noise).log_scale:
        raise ValueError("method='oc' supports additive normal noise only")
    opts = {**_DEFAULTS, **problem.options}
    model, t, U = problem.model, problem.t, problem.U
    D = model.n_states
    proxy, sigma = _proxy_of(problem, opts)
    family = _family(opts["test_functions"])
    Ls = _candidate_Ls(opts, model.n_params, D, U.shape[0])
    t0, t1 = float(t[0]), float(t[-1])
    breaks = np.concatenate([*(s.t for s in proxy.splines), _test_breaks(family, Ls, t0, t1)])
    tq, wq = _nodes(t0, t1, breaks, max(32, 4 * int(Ls.max())), int(opts["n_quad"]))
    u0, proxy_u0 = _initial_state(problem, proxy, t0)
    path = _path_in_L(problem, proxy, family, Ls, (tq, wq), opts, u0)
    best, status = _choose_L(path.sse)
    p, cond = path.estimates[best], path.conds[best]
    ok, msg = path.info[best]
    r = cond.residual(p)
    L = int(Ls[best])
    history = {
        "n_knots": proxy.n_knots.copy(),
        "knots": proxy.knots,
        "proxy_sigma": proxy.sigma.copy(),
        "test_functions": family.name,
        "n_test": L,
        "n_test_candidates": Ls,
        "prediction_sse": path.sse if Ls.size > 1 else None,
        "estimates": path.estimates,
        "conditions": r.reshape(D, L),
        "u0": u0,
        "proxy_u0": proxy_u0,
    }
    if proxy.gcv is not None:
        history |= {"n_knots_candidates": proxy.candidates, "gcv": proxy.gcv}
    common = problem.common()
    common["sigma"] = np.asarray(sigma, dtype=float)
    lik = common["likelihood"]
    # the sandwich's pseudo-inverse would give zero variance along a direction the
    # conditions do not see: NaN there instead (fit turns success off)
    ident = jacobian_identifiability(cond.jac(p), model.params, "orthogonality conditions")
    J = model.n_params
    cov = cond.covariance(p, sigma) if ident.identifiable else np.full((J, J), np.nan)
    return FitResult(
        x=p,
        method="oc",
        success=bool(ok),
        status=status if ok else "not_converged",
        message=f"{msg}; L = {L} {family.name} test functions{_how_chosen(Ls, status)}",
        nit=int(Ls.size),
        nfev=path.nfev,
        wall_time=0.0,
        fun=float(r @ r),
        nll=None if lik is None else safe_nll(lik, p),
        covariance_kind="oc",
        u0=u0,
        history=history,
        covariances={"oc": cov},
        identifiability=ident,
        **common,
    )


def _proxy_of(problem: FitProblem, opts: Mapping) -> tuple[_Proxy, np.ndarray]:
    """The regression-spline proxy of the data and the noise sd (given, or the proxy's)."""
    D = problem.model.n_states
    if "n_knots" in opts and np.ndim(opts["n_knots"]) and len(opts["n_knots"]) != D:
        raise ValueError(f"options['n_knots'] must be one integer or {D} (one per state)")
    k = int(opts["spline_degree"])
    proxy = _fit_proxy(problem.t, problem.U, k, opts.get("n_knots"), opts.get("max_knots"))
    sigma = proxy.sigma if problem.sigma_estimated else np.asarray(problem.sigma, dtype=float)
    return proxy, sigma


def _candidate_Ls(opts: Mapping, J: int, D: int, n: int) -> np.ndarray:
    """The numbers of test functions tried: ``n_test``, or ``n_test_range`` (inclusive)."""
    if "n_test" in opts:
        return np.array([opts["n_test"]])
    return np.arange(*np.add(opts.get("n_test_range", _default_range(J, D, n)), (0, 1)))


def _initial_state(problem: FitProblem, proxy: _Proxy, t0: float):
    """``(u0, proxy_u0)``: the state predictions start from (``u0`` if given, else the
    proxy's value at ``t0``) and the proxy's value."""
    D = problem.model.n_states
    u0 = proxy_u0 = np.array([s(t0) for s in proxy.splines])
    if problem.u0 is not None:
        u0 = np.asarray(problem.u0, dtype=float)
        if u0.shape != (D,) or not np.all(np.isfinite(u0)):
            raise ValueError(f"u0 must be {D} finite values; got {problem.u0!r}")
    return u0, proxy_u0


@dataclass
class _Path:
    """The estimate for every candidate ``L`` and what choosing among them needs."""

    estimates: np.ndarray
    sse: np.ndarray
    conds: list
    info: list
    nfev: int


def _path_in_L(problem: FitProblem, proxy: _Proxy, family, Ls, quadrature, opts, u0) -> _Path:
    """``theta_hat_L`` for every ``L`` in ``Ls`` (continuation in ``L`` for a model nonlinear
    in its parameters), each scored by its prediction error when there is a choice."""
    model, t, U = problem.model, problem.t, problem.U
    tq, wq = quadrature
    J = model.n_params
    t0, t1 = float(t[0]), float(t[-1])
    path = _Path(np.full((Ls.size, J), np.nan), np.full(Ls.size, np.inf), [], [], 0)
    start = None
    for i, L in enumerate(Ls):  # a loop over candidate numbers of conditions
        Phi, dPhi = _test_functions(family, int(L), t0, t1, tq, wq)
        cond = _Conditions(model, proxy, Phi, dPhi, tq, wq)
        path.conds.append(cond)
        if not model.is_linear_in_params and start is None:
            start = _nonlinear_start(problem, cond)
        p, nf, ok, msg = _minimise(cond, start, problem.bounds, opts)
        path.nfev += nf
        path.info.append((ok, msg))
        path.estimates[i] = p
        if not model.is_linear_in_params and ok:
            start = p  # continuation in L
        if Ls.size > 1 and np.linalg.matrix_rank(cond.jac(p)) == J:
            path.sse[i] = _prediction_sse(model, p, u0, t, U, problem.solver)
            path.nfev += 1
    return path


def _choose_L(sse: np.ndarray) -> tuple[int, str]:
    """Index of the chosen ``L`` and the status: the smallest prediction error."""
    if sse.size == 1:
        return 0, "converged"
    if np.isfinite(sse).any():
        return int(np.argmin(sse)), "converged"
    return sse.size - 1, "unscored"  # no candidate could be scored: keep the most conditions


def _how_chosen(Ls: np.ndarray, status: str) -> str:
    if status == "unscored":
        return f"; no L in {Ls[0]}..{Ls[-1]} could be scored (rank or failed solves)"
    return "" if Ls.size == 1 else f" chosen by prediction error among {Ls[0]}..{Ls[-1]}"


ESTIMATOR = Estimator(
    name="oc",
    run=run,
    options=OPTIONS,
    summary="orthogonality conditions on a GCV regression-spline proxy (Brunel et al. 2014)",
    covariance="oc",
    weak_likelihood=False,
    needs_start=False,
    check_options=_check_options,
)
