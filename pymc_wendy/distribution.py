r"""``WeakODELikelihood``: the weak-form ODE likelihood as an observed PyMC distribution.

Inside ``pm.Model()``::

    with pm.Model(coords={"param": ode.params}) as model:
        p = pm.Normal("p", 0, 10, dims="param")
        pmw.WeakODELikelihood("U", ode=ode, params=p, t=t, observed=U)
        idata = pm.sample()

The log-density of the observed data is the WENDy-MLE weak log-likelihood ``-l(p)``
(:class:`pymc_wendy.op.WeakLogLikelihoodOp`); the test functions, the data-side terms and,
for models linear in the parameters, the covariance coefficients are fixed when the variable
is created, which is why the data must be a plain array (no ``pm.Data`` container whose
value could later change).

Random draws (prior and posterior predictive) solve the ODE from the drawn parameters and an
initial state and add noise of the chosen model, so they are draws of the data, not of the
weak residual. See ``docs/pymc.md`` for the statistical meaning of each ``sigma`` option and of
the initial state.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numba
import numpy as np
import pytensor.tensor as pt
from pymc.distributions.distribution import Distribution
from pymc.logprob.abstract import _logprob
from pytensor.graph.basic import Constant, Variable
from pytensor.link.numba.dispatch.basic import numba_njit
from pytensor.link.numba.dispatch.random import numba_core_rv_funcify
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.random.op import RandomVariable
from scipy.signal import savgol_filter

from pymc_wendy.estimators import weak_least_squares, wendy_mle
from pymc_wendy.kernels import WeakLikelihoodError
from pymc_wendy.likelihood import Noise, WeakLikelihood
from pymc_wendy.ode import ODEModel
from pymc_wendy.op import _noise_scale_vector, weak_loglik
from pymc_wendy.problems import SimulationError, solve

__all__ = ["WeakODELikelihood", "estimate_initial_state"]

#: Solver settings for predictive draws: LSODA switches to a stiff method by itself, and the
#: tolerances are far below any noise level while keeping thousands of solves affordable.
DEFAULT_SOLVER: dict = {"method": "LSODA", "rtol": 1e-7, "atol": 1e-9, "max_nfev": 200_000}


def estimate_initial_state(t, U, noise: Noise = "normal", window: int | None = None) -> np.ndarray:
    """Initial state ``u(t_0)`` estimated from noisy data by a local quadratic fit.

    A Savitzky-Golay fit (polynomial order 2) over the first ``window`` points, evaluated at
    ``t_0``; on the log scale for log-normal noise so the estimate stays positive.
    ``window`` defaults to ``clip(n // 20, 7, 31)`` (odd), a short stretch over which a
    smooth trajectory is well approximated by a parabola while the noise averages out.
    """
    U = np.asarray(U, dtype=float)
    n = U.shape[0]
    if window is None:
        window = int(np.clip(n // 20, 7, 31))
    window = min(window, n - (1 - n % 2))  # odd and at most n
    window += 1 - window % 2
    if window < 3:
        return U[0].copy()
    X = np.log(U) if noise == "lognormal" else U
    # savgol assumes uniform spacing; on a grid that is not, fit the parabola in t directly
    tt = np.asarray(t, dtype=float)[:window]
    if np.allclose(np.diff(tt), tt[1] - tt[0], rtol=1e-6):
        x0 = savgol_filter(X[:window], window, 2, axis=0, mode="interp")[0]
    else:
        V = np.vander(tt - tt[0], 3)
        x0 = np.linalg.lstsq(V, X[:window], rcond=None)[0][-1]
    return np.exp(x0) if noise == "lognormal" else x0


class WeakODERV(RandomVariable):
    """Random variable behind :class:`WeakODELikelihood`: data simulated from the ODE.

    Parameters (``dist_params``) are the parameter vector ``p`` (J,), the noise scale per
    state (D,) and the initial state (D,); a draw has shape (M+1, D).
    """

    name = "weak_ode"
    signature = "(j),(d),(d)->(m,d)"
    dtype = "floatX"
    _print_name = ("WeakODE", "\\operatorname{WeakODE}")
    __props__ = ("name", "signature", "dtype", "inplace", "likelihood", "infer_sigma", "solver")

    def __init__(
        self,
        likelihood: WeakLikelihood,
        infer_sigma: bool,
        solver: tuple = (),
        **kwargs,
    ):
        self.likelihood = likelihood
        self.infer_sigma = bool(infer_sigma)
        self.solver = tuple(solver)
        super().__init__(**kwargs)

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (self.likelihood.t.size, self.likelihood.model.n_states)

    def trajectory(self, p: np.ndarray, u0: np.ndarray) -> np.ndarray:
        """Noise-free solution at the data times, or NaN (with a warning) if the solve fails."""
        lik = self.likelihood
        try:
            return solve(lik.base_model, p, u0, lik.t, **dict(self.solver))
        except (SimulationError, ValueError) as exc:
            warnings.warn(
                f"predictive draw: the ODE solve failed for p = {np.array2string(p, precision=4)}"
                f" ({exc}); the draw is NaN",
                RuntimeWarning,
                stacklevel=2,
            )
            return np.full((lik.t.size, lik.model.n_states), np.nan)

    def rng_fn(self, rng, p, sigma, u0, size):
        lik = self.likelihood
        M1, D = lik.t.size, lik.model.n_states
        batch = np.broadcast_shapes(p.shape[:-1], sigma.shape[:-1], u0.shape[:-1])
        if size is not None:
            batch = tuple(size)
        p, sigma, u0 = (np.broadcast_to(a, (*batch, a.shape[-1])) for a in (p, sigma, u0))
        out = np.empty((*batch, M1, D))
        for idx in np.ndindex(*batch):
            eps = rng.standard_normal((M1, D))
            out[idx] = _add_noise(self.trajectory(p[idx], u0[idx]), eps, sigma[idx], lik.noise)
        return out


def _add_noise(U: np.ndarray, eps: np.ndarray, sigma: np.ndarray, noise: str) -> np.ndarray:
    return U * np.exp(eps * sigma) if noise == "lognormal" else U + eps * sigma


@numba_core_rv_funcify.register(WeakODERV)
def _numba_core_weak_ode(op, node):
    # The ODE solve is scipy's, called through an explicit object-mode block: predictive
    # sampling is not a hot path, and the random numbers stay on numba's generator.
    M1, D = op.likelihood.t.size, op.likelihood.model.n_states
    lognormal = op.likelihood.noise == "lognormal"

    @numba_njit
    def weak_ode_draw(rng, p, sigma, u0):
        eps = rng.standard_normal((M1, D))
        with numba.objmode(U="float64[:, :]"):
            U = np.ascontiguousarray(op.trajectory(np.asarray(p), np.asarray(u0)))
        if lognormal:
            return U * np.exp(eps * sigma)
        return U + eps * sigma

    return weak_ode_draw


class WeakODELikelihood(Distribution):
    r"""Observed noisy ODE trajectories with the weak-form (WENDy-MLE) likelihood.

    Parameters
    ----------
    name : str
        Variable name.
    ode : ODEModel
        The ODE ``du/dt = f(t, u, p)``.
    params : tensor of shape (J,) or sequence of J scalars
        The parameters, in the order of ``ode.params`` (random variables, or constants).
    t : array, shape (M+1,)
        Strictly increasing sample times.
    observed : array, shape (M+1, D)
        The data (required: the likelihood is built from them).
    sigma : None, float, array of shape (D,), or tensor
        Noise standard deviation per state (of ``log U`` for log-normal noise).
        ``None``: estimated once from the data (WENDy) and then treated as known.
        A number or array: known. A random variable (or any symbolic tensor, scalar or (D,)):
        inferred jointly with ``params``; the gradient with respect to it is analytic.
    noise : {"normal", "lognormal"}
        Additive Gaussian noise or multiplicative log-normal noise.
    u0 : None, array of shape (D,), or tensor
        Initial state used only for predictive draws (the weak likelihood does not depend on
        it). ``None``: :func:`estimate_initial_state` from the data.
    test_functions, ridge, linear, max_precompute_bytes
        Passed to :class:`pymc_wendy.WeakLikelihood`.
    solver : dict, optional
        Options for the ODE solves of predictive draws (:func:`pymc_wendy.solve`); defaults
        :data:`DEFAULT_SOLVER`.
    init : {"wendy", None}
        ``"wendy"`` (default): set the initial values of the parameter variables to the
        WENDy-MLE and of a random ``sigma`` to the data's noise estimate, where those are free
        variables without a user-given ``initval`` and the values lie in their support.
        Samplers then start (with their usual jitter) in the main basin of the weak
        likelihood rather than at the prior's centre, from where chains can drift into
        spurious "one equation is all noise" modes when ``sigma`` is inferred.
        ``None``: leave initial values to PyMC.
    **kwargs
        ``dims``, ``rng`` and the other arguments of :class:`pymc.Distribution`.
    """

    rv_type = WeakODERV

    def __new__(
        cls,
        name: str,
        *,
        ode: ODEModel,
        params,
        t,
        observed=None,
        sigma=None,
        noise: Noise = "normal",
        u0=None,
        test_functions=None,
        ridge: float = 1e-10,
        linear: str = "auto",
        max_precompute_bytes: int = 256 * 2**20,
        solver: Mapping | None = None,
        init: str | None = "wendy",
        **kwargs,
    ):
        if init not in ("wendy", None):
            raise ValueError(f"init must be 'wendy' or None; got {init!r}")
        if observed is None:
            raise TypeError(
                "WeakODELikelihood needs observed data: the weak likelihood is built from them "
                "(use pymc_wendy.simulate to generate data)"
            )
        if isinstance(observed, Variable):
            if not isinstance(observed, Constant):
                raise TypeError(
                    "observed must be a fixed array, not a pm.Data or symbolic variable: the "
                    "test functions and covariance are built from the data when the variable "
                    "is created"
                )
            observed = observed.data
        likelihood = _likelihood(
            ode, t, observed, sigma, noise, test_functions, ridge, linear, max_precompute_bytes
        )
        rv = super().__new__(
            cls,
            name,
            likelihood=likelihood,
            params=params,
            sigma=sigma,
            u0=u0,
            solver=solver,
            observed=likelihood.U,
            **kwargs,
        )
        if init == "wendy":
            _set_initial_values(likelihood, params, sigma)
        return rv

    @classmethod
    def dist(
        cls,
        *,
        likelihood: WeakLikelihood,
        params,
        sigma=None,
        u0=None,
        solver: Mapping | None = None,
        size=None,
        shape=None,
        return_next_rng: bool = False,
        **kwargs,
    ):
        """An unregistered variable for a ready :class:`WeakLikelihood` (see the class doc)."""
        if not isinstance(likelihood, WeakLikelihood):
            raise TypeError(f"likelihood must be a WeakLikelihood; got {type(likelihood)!r}")
        model = likelihood.base_model
        M1, D = likelihood.t.size, model.n_states
        if shape is not None and _static_shape(shape) not in (None, (M1, D)):
            raise ValueError(
                f"the data have shape {(M1, D)} (time points x states) but shape {tuple(shape)} "
                "was requested; batches of data sets are not supported"
            )
        if size not in (None, ()):
            raise ValueError("size is not supported: one WeakODELikelihood per data set")
        p = _params_vector(params, model)
        infer_sigma = _is_symbolic(sigma)
        if infer_sigma:
            sig = _noise_scale_vector(sigma, D)
        else:
            sig = pt.constant(likelihood.sigma, dtype="float64")
        if u0 is None:
            u0 = estimate_initial_state(likelihood.t, likelihood.U, likelihood.noise)
        u0 = pt.as_tensor_variable(u0).astype("float64")
        if u0.type.ndim != 1 or u0.type.shape[0] not in (None, D):
            raise ValueError(f"u0 must have {D} entries (one per state); got {u0.type}")
        solver_items = tuple(sorted({**DEFAULT_SOLVER, **(solver or {})}.items()))
        op = WeakODERV(likelihood=likelihood, infer_sigma=infer_sigma, solver=solver_items)
        next_rng, rv = op(p, sig, u0, return_next_rng=True, **kwargs)
        return (next_rng, rv) if return_next_rng else rv


@_logprob.register(WeakODERV)
def _weak_ode_logp(op, values, rng, size, p, sigma, u0, **kwargs):
    [value] = values
    lik = op.likelihood
    if isinstance(value, Constant) and value.data.shape != lik.U.shape:
        raise ValueError(
            f"the value has shape {value.data.shape}; the likelihood was built for {lik.U.shape}"
        )
    return weak_loglik(lik, p, sigma if op.infer_sigma else None)


def _set_initial_values(lik: WeakLikelihood, params, sigma) -> None:
    """Initial values from the WENDy estimate for free parameter/noise variables (see ``init``)."""
    import pymc as pm

    model = pm.modelcontext(None)
    J, D = lik.model.n_params, lik.model.n_states
    if isinstance(params, Sequence) and not isinstance(params, str):
        targets = [(v, slice(j, j + 1)) for j, v in enumerate(params)]
    else:
        targets = [(params, slice(0, J))]
    if _is_symbolic(sigma):
        targets.append((sigma, slice(J, J + D)))
    targets = [
        (v, sl)
        for v, sl in targets
        if v in model.free_RVs and model.rvs_to_initial_values.get(v) is None
    ]
    if not targets:
        return
    try:
        guess = _initial_params(model, _params_vector(params, lik.base_model))
        p_hat = wendy_mle(lik, weak_least_squares(lik, guess)).x
        nll = lik.nll(p_hat)
    except (WeakLikelihoodError, np.linalg.LinAlgError, ValueError):
        return
    if not np.isfinite(nll):
        return
    values = np.concatenate([p_hat, lik.sigma])
    for v, sl in targets:
        value = values[sl] if v.type.ndim == 1 else np.mean(values[sl])
        if v.type.ndim > 1:
            continue
        # a value outside the support (a negative estimate under a positive prior) maps to a
        # non-finite transformed value: leave that variable to PyMC
        transform = model.rvs_to_transforms.get(v)
        with np.errstate(all="ignore"):
            z = (
                value
                if transform is None
                else transform.forward(pt.as_tensor(value), *v.owner.inputs).eval()
            )
        if np.all(np.isfinite(z)):
            model.set_initval(v, value)


def _initial_params(model, p: pt.TensorVariable) -> np.ndarray:
    """The parameter vector at the model's initial point (the start for nonlinear models)."""
    import pytensor

    [p_values] = model.replace_rvs_by_values([p])
    fn = pytensor.function(
        model.value_vars, p_values, on_unused_input="ignore", mode="FAST_COMPILE"
    )
    point = model.initial_point()
    return np.asarray(fn(*(point[v.name] for v in model.value_vars)), dtype=float)


def _likelihood(ode, t, observed, sigma, noise, test_functions, ridge, linear, budget):
    if not isinstance(ode, ODEModel):
        raise TypeError(f"ode must be an ODEModel; got {type(ode)!r}")
    return WeakLikelihood(
        ode,
        t,
        observed,
        noise=noise,
        sigma=None if _is_symbolic(sigma) else sigma,
        test_functions=test_functions,
        ridge=ridge,
        linear=linear,
        max_precompute_bytes=budget,
    )


def _static_shape(shape) -> tuple[int, ...] | None:
    """``shape`` as integers, or None when some entry is symbolic (dims from coords)."""
    try:
        return tuple(int(pt.get_underlying_scalar_constant_value(s)) for s in shape)
    except (TypeError, ValueError, NotScalarConstantError):
        return None


def _is_symbolic(x) -> bool:
    return isinstance(x, Variable) and not isinstance(x, Constant)


def _params_vector(params, model: ODEModel) -> pt.TensorVariable:
    J = model.n_params
    if isinstance(params, Sequence) and not isinstance(params, str):
        if len(params) != J:
            raise ValueError(
                f"the ODE has {J} parameters {list(model.params)} but {len(params)} were given"
            )
        items = [pt.as_tensor_variable(x).astype("float64") for x in params]
        for name, x in zip(model.params, items, strict=True):
            if x.type.ndim != 0:
                raise ValueError(f"parameter {name!r} must be a scalar; got {x.type}")
        return pt.stack(items)
    p = pt.as_tensor_variable(params).astype("float64")
    if p.type.ndim != 1 or p.type.shape[0] not in (None, J):
        raise ValueError(
            f"params must be a vector of the {J} parameters {list(model.params)} or a list of "
            f"scalars; got {p.type}"
        )
    return p
