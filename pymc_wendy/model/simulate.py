"""Forward solves and synthetic data: the ODE solved from an initial state, noise models.

:func:`solve` integrates a model (stiff-capable, with the generated Jacobian), :func:`simulate`
makes a noisy data set the way the papers do: the ODE is solved once on a fine uniform grid
(1025 points by default), subsampled (step 1, 2 or 4 in the papers), then noise is added
(:func:`add_noise`) following the papers' noise ratio ``nr`` (WENDy-MLE eq. 19, WENDy 2023
sec. 3.1):

* additive (``"normal"``): ``U = U* + E`` with ``E`` i.i.d. ``N(0, sigma^2)`` and the *same*
  ``sigma = nr * rms(vec U*)`` for every state, the RMS taken over the noise-free values on
  the returned grid;
* multiplicative log-normal (``"lognormal"``): ``U = U* * exp(N(0, nr^2))`` element-wise.

The benchmark systems of the papers live in :mod:`pymc_wendy.problems`.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.integrate import solve_ivp

from pymc_wendy._validation import check_times, check_vector
from pymc_wendy.model import compiled_solve
from pymc_wendy.model.inputs import Input, as_inputs
from pymc_wendy.model.observation import Observation, as_observation
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.piecewise_solve import PiecewiseSolver, supports_piecewise

__all__ = ["SimulatedData", "SimulationError", "add_noise", "simulate", "solve"]

_IMPLICIT_METHODS = ("Radau", "BDF", "LSODA")
# Absolute tolerance when the data will be logged: a state that starts at zero (SIR-TDI) is
# tiny for a while, and an absolute error of 1e-12 on a value of 1e-10 is a 1 % error in log
# space, so control the relative error only.
_LOGNORMAL_ATOL = 1e-20


class SimulationError(RuntimeError):
    """The forward solver failed or produced non-finite values."""


class _EvaluationLimit(Exception):
    # Raised inside the right-hand side to stop solve_ivp, which has no step limit of its own.
    def __init__(self, t: float, u: np.ndarray):
        super().__init__(t)
        self.t = t
        self.u = np.array(u)


# --- data container ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SimulatedData:
    """A synthetic data set and everything needed to reproduce and score it.

    Attributes
    ----------
    t : ndarray, shape (M+1,)
        Observation times.
    U : ndarray, shape (M+1, D)
        Noisy observations.
    U_true : ndarray, shape (M+1, D)
        Noise-free solution on the same grid.
    noise : {"normal", "lognormal"}
        Noise model used.
    noise_ratio : float
        Noise ratio ``nr`` used.
    sigma : ndarray, shape (D,)
        Standard deviation of the noise actually used per state: ``nr * rms(vec U_true)`` for
        every state with additive noise, ``nr`` for every state (on the log scale) with
        log-normal noise.
    p_true : ndarray, shape (J,)
        Parameters the data were generated with.
    u0 : ndarray, shape (D,)
        Initial condition, at the start of the solve grid. When grid points were dropped
        (``dropped_times``), that start is not ``t[0]``.
    seed : int or None
        Seed of the noise generator.
    states, params : tuple of str
        State and parameter names of the model.
    problem : str or None
        Name of the benchmark problem, if any.
    dropped_times : tuple of float
        Grid times removed because some noise-free state was <= 0 there, which log-normal
        noise cannot represent (SIR-TDI drops its initial point). Empty otherwise.
    observation : Observation
        The observation model the noise was drawn from (with its parameters; ``noise`` is its
        name). Pass it as ``noise=`` to fit with the model that made the data.
    inputs : dict or None
        The model's known inputs (name to :class:`~pymc_wendy.model.inputs.Input`), to pass on as
        ``fit(..., inputs=data.inputs)``; None for models without inputs.
    """

    t: np.ndarray
    U: np.ndarray
    U_true: np.ndarray
    noise: str
    noise_ratio: float
    sigma: np.ndarray
    p_true: np.ndarray
    u0: np.ndarray
    seed: int | None
    states: tuple[str, ...]
    params: tuple[str, ...]
    problem: str | None
    dropped_times: tuple[float, ...] = field(default=())
    inputs: dict | None = None
    observation: Observation | None = None

    @property
    def n_points(self) -> int:
        """Number of observation times, ``M + 1``."""
        return self.t.shape[0]

    def __repr__(self) -> str:
        name = f" {self.problem!r}" if self.problem else ""
        return (
            f"SimulatedData{name}: {self.U.shape[0]} times on [{self.t[0]:g}, {self.t[-1]:g}], "
            f"states {list(self.states)}, {self.noise} noise, noise_ratio={self.noise_ratio:g}, "
            f"seed={self.seed}"
        )


# --- validation helpers --------------------------------------------------------------------


def _noise_ratio(noise_ratio) -> float:
    try:
        nr = float(noise_ratio)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"noise_ratio must be a number; got {noise_ratio!r}") from exc
    if not np.isfinite(nr) or nr < 0:
        raise ValueError(f"noise_ratio must be finite and >= 0; got {noise_ratio!r}")
    return nr


def _seed(seed) -> int | None:
    # Only integers are accepted so that the seed stored with the data reproduces it.
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise TypeError(f"seed must be a non-negative int or None; got {seed!r}")
    return int(seed)


def _positive_int(value, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}; got {value!r}")
    return int(value)


# --- forward solve -------------------------------------------------------------------------


def solve(
    model: ODEModel,
    p,
    u0,
    t,
    *,
    method: str | None = None,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    stiff: bool = False,
    max_nfev: int | None = 500_000,
    inputs=None,
) -> np.ndarray:
    """Solve ``du/dt = f(t, u, p)``, ``u(t[0]) = u0`` and return the solution at every ``t``.

    For a model of order > 1 or with inputs the first-order companion system is solved:
    ``u0`` and the columns of the result follow ``model.companion_states`` (each state
    followed by its derivatives), and the solver restarts at every breakpoint of the inputs
    (pulse edges), so discontinuous inputs are integrated without stepping across a jump.

    Parameters
    ----------
    model : ODEModel
        The system.
    p : array_like, shape (J,)
        Parameters.
    u0 : array_like, shape (D,)
        Initial condition at ``t[0]``.
    t : array_like, shape (n,)
        Strictly increasing output times, ``n >= 2``; ``t[0]`` is the initial time.
    method : str, optional
        A :func:`scipy.integrate.solve_ivp` method. For a first-order model without inputs,
        the default and ``"LSODA"`` step LSODA on the compiled right-hand side and Jacobian
        (:mod:`pymc_wendy.model.compiled_solve`; it switches to BDF on stiff stretches by
        itself; it runs at a tenth of ``rtol`` and ``atol``, which gives it about the
        accuracy the Runge-Kutta methods reach at ``rtol``; an ``rtol`` below ``1e-12``
        takes the default below instead); otherwise the default is ``"Radau"`` (with the
        analytic Jacobian ``model.jacobian``) when ``stiff``, else ``"DOP853"``. The
        Jacobian is passed to every implicit method (``"Radau"``, ``"BDF"``, ``"LSODA"``).
    rtol, atol : float
        Solver tolerances. The defaults make the solution accurate far below any noise level
        the papers use.
    stiff : bool
        Choose the stiff default method.
    max_nfev : int or None
        Give up after this many right-hand side evaluations (None: no limit). Parameters far
        from the truth can make a solution grow without bound while the solver takes ever
        smaller steps; the limit turns such a solve into a :class:`SimulationError` within
        seconds instead of a hang. The benchmarks need at most about 50 000.
    inputs : mapping, optional
        Values of the model's inputs (see :class:`~pymc_wendy.WeakLikelihood`).

    Returns
    -------
    ndarray, shape (n, D)
        ``U[m] = u(t[m])``; the first row is ``u0``.

    Raises
    ------
    ValueError
        Inputs with wrong shapes, non-finite values or unsorted times.
    SimulationError
        The solver failed (its message is included) or returned non-finite values.
    """
    if not isinstance(model, ODEModel):
        raise TypeError(f"model must be an ODEModel; got {type(model).__name__}")
    p = check_vector(p, model.n_params, "p", model.params)
    u0 = check_vector(u0, len(model.companion_states), "u0", model.companion_states)
    t = check_times(t)
    if not (rtol > 0 and atol > 0):
        raise ValueError(f"rtol and atol must be > 0; got rtol={rtol!r}, atol={atol!r}")
    if max_nfev is not None:
        max_nfev = _positive_int(max_nfev, "max_nfev", 1)
    lsoda = method in (None, "LSODA") and rtol * _LSODA_TIGHTER >= _LSODA_MIN_RTOL
    if lsoda and compiled_solve.supports(model) and not inputs:
        return _solve_compiled(model, p, u0, t, rtol=rtol, atol=atol, max_nfev=max_nfev)
    if lsoda and inputs:
        checked = as_inputs(model.inputs, inputs, t)
        if supports_piecewise(model, checked):
            solver = PiecewiseSolver(model, t, checked)
            return _solve_compiled(solver, p, u0, t, rtol=rtol, atol=atol, max_nfev=max_nfev)
    if method is None:
        method = "Radau" if stiff else "DOP853"
    rhs, jacobian, breaks = vector_field(model, p, inputs, t)
    jumps = None
    if breaks.jump is not None:
        jumps = (breaks.jump_times, lambda s, y: y + breaks.jump(s, y))
    return integrate(
        rhs,
        u0,
        t,
        method=method,
        rtol=rtol,
        atol=atol,
        max_nfev=max_nfev,
        jac=jacobian if method in _IMPLICIT_METHODS else None,
        name=model.name,
        breaks=breaks.times,
        jumps=jumps,
    )


# At equal tolerances LSODA's global error is 10-1000 times that of DOP853 or Radau
# (Hindmarsh-Rose at rtol=1e-10: 4e-6 against 2e-10), so the compiled path asks for a tenth.
_LSODA_TIGHTER = 0.1
# Below this LSODA refuses the tolerance ("illegal input"); reference solves that tight
# take the Runge-Kutta path.
_LSODA_MIN_RTOL = 1e-13


def _solve_compiled(model, p, u0, t, *, rtol, atol, max_nfev) -> np.ndarray:
    """The compiled solve of a model without inputs, or ``model`` a
    :class:`~pymc_wendy.model.piecewise_solve.PiecewiseSolver` bound to ``t``."""
    options = {
        "rtol": rtol * _LSODA_TIGHTER,
        "atol": atol * _LSODA_TIGHTER,
        "max_steps": compiled_solve.max_steps_for(max_nfev, t.size),
    }
    try:
        if isinstance(model, PiecewiseSolver):
            return model.solve(p, u0, **options)
        return compiled_solve.compiled_solver(model).solve(p, u0, t, **options)
    except compiled_solve.BlowUp as exc:
        raise SimulationError(str(exc)) from None
    except compiled_solve.SolveFailed as exc:
        raise SimulationError(f"{exc}; the solution may blow up, or raise max_nfev") from None


def vector_field(model: ODEModel, p: np.ndarray, inputs, t: np.ndarray, *, jac_p: bool = False):
    """``(rhs(s, u), jacobian(s, u), breaks)`` of the system at ``p`` (the companion system
    with its inputs for a model of order > 1 or with inputs); with ``jac_p`` also
    ``df/dp(s, u)`` last.

    ``breaks`` is a :class:`Breaks`: the inputs' breakpoints, where a solver must restart,
    and the jumps of the state at bolus doses (:class:`~pymc_wendy.Doses`).
    """
    forcing = list(as_inputs(model.inputs, inputs, t).values())
    breaks = np.zeros(0)
    for w in forcing:
        w.check_covers(float(t[0]), float(t[-1]), "the output times")
        w(t)  # a callable of the wrong shape fails here with its name, not inside the solver
    if forcing:
        breaks = np.unique(np.concatenate([_solver_breaks(w) for w in forcing]))
    operator = model.has_operator_terms

    def values(s):
        return [w(s) for w in forcing] if operator else None

    def rhs(s, u):
        return model(s, u, p, values(s))

    def jacobian(s, u):
        return model.jacobian(s, u, p, values(s))

    def parameter_jacobian(s, u):
        return model.parameter_jacobian(s, u, p, values(s))

    doses = [(i, w) for i, w in enumerate(forcing) if hasattr(w, "bolus_amount")]

    def jump(s, u, with_p: bool = False):
        # the inputs enter linearly with coefficients of p alone (ODEModel), so the jump of
        # a bolus A is the right-hand side's change from w = 0 to w = A
        amounts = np.zeros(len(forcing))
        for i, w in doses:
            amounts[i] = w.bolus_amount(s)
        zero = np.zeros(len(forcing))
        du = model(s, u, p, amounts) - model(s, u, p, zero)
        if not with_p:
            return du
        dfp = model.parameter_jacobian(s, u, p, amounts) - model.parameter_jacobian(s, u, p, zero)
        return du, dfp

    times = np.unique(np.concatenate([w.jump_times for _, w in doses])) if doses else None
    out = Breaks(breaks, times, jump if doses else None)
    return (rhs, jacobian, out, parameter_jacobian) if jac_p else (rhs, jacobian, out)


@dataclass(frozen=True)
class Breaks:
    """Where a solve restarts (:attr:`times`) and the state's jumps there: at
    :attr:`jump_times` (bolus doses), ``jump(s, u)`` is the change of the state (with
    ``with_p=True`` also its derivative in the parameters, the jump of the sensitivities)."""

    times: np.ndarray
    jump_times: np.ndarray | None = None
    jump: Callable | None = None


def _solver_breaks(w: Input) -> np.ndarray:
    """Where a solve must restart for the input ``w``: its breakpoints, less the grid times
    where values on a grid are smooth (the slope of a linear one or the value of a held one
    does not change). A restart costs a new solver start; a fine grid has hundreds."""
    if w.values is None:
        return w.breakpoints
    t, v = w.t, w.values
    if w.kind == "constant":
        change = np.r_[False, v[1:] != v[:-1]]
    else:
        slope = np.diff(v) / np.diff(t)
        tol = 1e-9 * float(np.max(np.abs(slope)))
        change = np.r_[False, np.abs(np.diff(slope)) > tol, False]
    return np.union1d(t[change], np.setdiff1d(w.breakpoints, t))


def integrate(
    rhs: Callable,
    y0: np.ndarray,
    t: np.ndarray,
    *,
    method: str,
    rtol: float,
    atol: float,
    max_nfev: int | None,
    jac: Callable | None = None,
    name: str = "ode",
    breaks: np.ndarray | None = None,
    jumps: tuple[np.ndarray, Callable] | None = None,
) -> np.ndarray:
    """``solve_ivp`` at the output times ``t``, with an evaluation limit and clear failures.

    Shared by :func:`solve` and the sensitivity solves of output-error estimation (which
    integrate an augmented system). The solve restarts at every break inside the span; at
    the ``jumps`` times (in ``[t_0, t_M)``, a subset of the breaks or ``t_0``) the state
    becomes ``jump(s, y)`` just after ``s``, and an output at ``s`` is the value before.
    Returns shape (n, len(y0)); raises :class:`SimulationError`.
    """
    kwargs: dict = {} if jac is None else {"jac": jac}
    n_calls = 0

    def counted(s: float, y: np.ndarray) -> np.ndarray:
        nonlocal n_calls
        n_calls += 1
        if max_nfev is not None and n_calls > max_nfev:
            raise _EvaluationLimit(s, y)
        return rhs(s, y)

    # restart at the breakpoints inside the span (jumps of inputs): one solve per piece
    inner = [] if breaks is None else [b for b in np.asarray(breaks) if t[0] < b < t[-1]]
    jump_at, jump = (np.zeros(0), None) if jumps is None else jumps
    jump_at = {float(s) for s in np.asarray(jump_at) if t[0] <= s < t[-1]}
    inner = sorted(set(inner) | (jump_at - {float(t[0])}))
    edges = [t[0], *inner, t[-1]]
    rows, y = [], np.asarray(y0, dtype=float)
    if float(t[0]) in jump_at:  # the output at t_0 is the state before the dose
        rows.append(y[:, None])
        y = jump(float(t[0]), y)
    try:
        # a solution that blows up overflows inside the solver's own step control; the
        # failure is reported below (status, or a non-finite solution), not as warnings
        with np.errstate(over="ignore", invalid="ignore"):
            for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
                last = i == len(edges) - 2
                after = float(a) in jump_at  # a's output was taken before its jump
                upto = last or float(b) in jump_at  # b's output, before its jump, belongs here
                keep = t[((t > a) if after else (t >= a)) & ((t <= b) if upto else (t < b))]
                t_eval = keep if keep.size and keep[-1] == b else np.append(keep, b)
                sol = solve_ivp(
                    counted, (a, b), y, method=method, t_eval=t_eval, rtol=rtol, atol=atol, **kwargs
                )
                if sol.status != 0 or sol.y.shape[1] != t_eval.shape[0]:
                    break
                rows.append(sol.y[:, : keep.size])
                y = sol.y[:, -1]
                if float(b) in jump_at:
                    y = jump(float(b), y)
    except _EvaluationLimit as exc:
        raise SimulationError(
            f"{name}: the solver ({method}) gave up after {max_nfev} right-hand side "
            f"evaluations at t = {exc.t:.6g} of [{t[0]:g}, {t[-1]:g}] (max |u| = "
            f"{np.max(np.abs(exc.u)):.3g}); the solution may blow up or be stiff (try "
            "stiff=True), or raise max_nfev"
        ) from None
    except (ValueError, ArithmeticError) as exc:
        raise SimulationError(f"{name}: the solver ({method}) raised {exc!r}") from exc
    if sol.status != 0 or sol.y.shape[1] != t_eval.shape[0]:
        ts = np.asarray(sol.t)  # a list when the solver fails before its first output
        reached = ts[-1] if ts.size else a
        raise SimulationError(
            f"{name}: the solver ({method}) failed on [{t[0]:g}, {t[-1]:g}] after the "
            f"output time t = {reached:.6g}: {sol.message}"
        )
    U = np.concatenate(rows, axis=1).T.copy()
    if not np.all(np.isfinite(U)):
        bad = int(np.argmax(~np.all(np.isfinite(U), axis=1)))
        raise SimulationError(
            f"{name}: the solution is not finite from t = {t[bad]:g} on ({method})"
        )
    return U


# --- noise ---------------------------------------------------------------------------------


def add_noise(
    U_true,
    *,
    noise: str = "normal",
    noise_ratio: float,
    seed: int | None = None,
    noise_scale: str = "rms",
) -> tuple[np.ndarray, np.ndarray]:
    """Add noise at a given noise ratio to noise-free data.

    Parameters
    ----------
    U_true : array_like, shape (n, D)
        Noise-free values.
    noise : str or Observation
        ``"normal"``: ``U = U_true + E``, ``E`` i.i.d. ``N(0, sigma^2)`` with one
        ``sigma = noise_ratio * sqrt(mean(U_true**2))`` for every state (WENDy-MLE eq. 19,
        isotropic). ``"lognormal"``: ``U = U_true * exp(N(0, noise_ratio^2))`` element-wise;
        every entry of ``U_true`` must then be positive. ``"proportional"``:
        ``U = U_true (1 + noise_ratio E)``. Counts (``"poisson"``, ``pw.NegativeBinomial(alpha)``)
        and ``pw.Combined(additive, proportional)`` carry their own scale and ignore
        ``noise_ratio``; counts need ``U_true >= 0``.
    noise_ratio : float
        ``>= 0``; zero returns ``U_true`` unchanged for the models scaled by it.
    seed : int, optional
        Seed of :func:`numpy.random.default_rng`.
    noise_scale : {"rms", "range"}
        Additive noise only: ``sigma = noise_ratio * rms(vec U_true)`` (the WENDy papers), or
        ``noise_ratio * (max - min)`` of each state (Data2LD's ``sigma x range(x)``).

    Returns
    -------
    U : ndarray, shape (n, D)
        Noisy values.
    sigma : ndarray, shape (D,)
        Standard deviation used per state (on the log scale for log-normal noise).

    Raises
    ------
    ValueError
        Bad noise name or ratio, non-finite data, or log-normal noise on data with entries
        <= 0.
    """
    U_true = np.asarray(U_true, dtype=float)
    if U_true.ndim != 2 or U_true.shape[0] == 0:
        raise ValueError(f"U_true must have shape (n, D); got {U_true.shape}")
    if not np.all(np.isfinite(U_true)):
        raise ValueError("U_true must be finite")
    obs = as_observation(noise)
    nr = _noise_ratio(noise_ratio)
    rng = np.random.default_rng(_seed(seed))
    if noise_scale not in ("rms", "range"):
        raise ValueError(f"noise_scale must be 'rms' or 'range'; got {noise_scale!r}")
    bad = (U_true <= 0) if obs.log_scale else (U_true < 0) if obs.counts else None
    if bad is not None and np.any(bad):
        row, col = np.argwhere(bad)[0]
        need = (
            "log-normal noise needs positive data"
            if obs.log_scale
            else (f"{obs.name} noise needs non-negative means")
        )
        raise ValueError(
            f"{need}, but U_true has {int(bad.sum())} entries {'<= 0' if obs.log_scale else '< 0'} "
            f"(first at row {row}, state {col}: {U_true[row, col]:g}); drop those rows first "
            "(simulate(..., drop_nonpositive=True) does)"
        )
    sigma = obs.scale_from_ratio(nr, U_true, noise_scale)
    return obs.draw(U_true, sigma, rng), sigma


# --- simulation ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _cached_solution(
    model: ODEModel,
    p: bytes,
    u0: bytes,
    t: bytes,
    method: str | None,
    rtol: float,
    atol: float,
    stiff: bool,
    max_nfev: int | None,
    inputs: tuple = (),
) -> np.ndarray:
    # Studies draw many noise realisations of one truth (100 per setting in the papers), and a
    # stiff solve can take seconds, so the noise-free solution is kept. ODEModel hashes by
    # identity, so the key also keeps the model alive and ids cannot be recycled.
    U = solve(
        model,
        np.frombuffer(p),
        np.frombuffer(u0),
        np.frombuffer(t),
        method=method,
        rtol=rtol,
        atol=atol,
        stiff=stiff,
        max_nfev=max_nfev,
        inputs=dict(inputs) or None,
    )
    U.setflags(write=False)
    return U


def _simulation_inputs(model: ODEModel, inputs) -> dict:
    """The model's inputs for :func:`simulate`: :class:`~pymc_wendy.model.inputs.Input`
    objects (on a grid too: the solver reads them between grid times as the input defines)
    or callables. Bare arrays are refused: they mean values on the data times, which
    :func:`simulate` has not made yet."""
    if isinstance(inputs, Mapping):
        given = list(inputs.values())
    else:  # one input without its name (as_inputs refuses that for several)
        given = [inputs] if len(model.inputs) == 1 and inputs is not None else []
    if model.inputs and any(not (isinstance(v, Input) or callable(v)) for v in given):
        raise ValueError(
            "inputs of simulate must be Input objects or callables; for values on a "
            "grid give Input(values, t=times) (kind='linear' or 'constant' says how "
            "they are read between the times), not a bare array"
        )
    # np.zeros(2): never read, arrays are refused above (and a model without inputs refuses any)
    return as_inputs(model.inputs, inputs, np.zeros(2))


def _fine_grid(t_span, t, n_points: int | None) -> np.ndarray:
    """The fine solution grid of :func:`simulate`: ``n_points`` uniform points on ``t_span``
    (default 1025), or the explicit grid ``t``; exactly one of the two is given."""
    if (t_span is None) == (t is None):
        raise ValueError("give exactly one of t_span and t")
    if t is not None:
        if n_points is not None:
            raise ValueError("n_points applies to t_span only; the explicit t defines the grid")
        return check_times(t)
    n_points = 1025 if n_points is None else _positive_int(n_points, "n_points", 2)
    try:
        t0, t1 = (float(s) for s in t_span)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"t_span must be (start, end); got {t_span!r}") from exc
    if not (np.isfinite(t0) and np.isfinite(t1) and t1 > t0):
        raise ValueError(f"t_span must be finite with end > start; got {t_span!r}")
    return np.linspace(t0, t1, n_points)


def _observe(
    model: ODEModel, t_fine: np.ndarray, U_fine: np.ndarray, subsample: int, drop_nonpositive
) -> tuple[np.ndarray, np.ndarray, tuple[float, ...]]:
    """``(t, U_true, dropped_times)``: every ``subsample``-th point of the fine solution, its
    observed columns (the states, not their derivatives), and, with ``drop_nonpositive``,
    without the points where some state is <= 0 (whose times are returned)."""
    t_obs = t_fine[::subsample].copy()
    U_true = U_fine[::subsample][:, model.observed_columns].copy()
    if not drop_nonpositive:
        return t_obs, U_true, ()
    keep = np.all(U_true > 0, axis=1)
    dropped = tuple(float(s) for s in t_obs[~keep])
    if not np.any(keep):
        raise ValueError("every grid point has a state <= 0; nothing is left to observe")
    return t_obs[keep], U_true[keep], dropped


def simulate(
    model: ODEModel,
    p,
    u0,
    t_span: tuple[float, float] | None = None,
    *,
    t=None,
    n_points: int | None = None,
    subsample: int = 1,
    noise: str = "normal",
    noise_ratio: float = 0.0,
    seed: int | None = None,
    stiff: bool = False,
    method: str | None = None,
    rtol: float = 1e-10,
    atol: float | None = None,
    max_nfev: int | None = 500_000,
    drop_nonpositive: bool = False,
    problem: str | None = None,
    inputs=None,
    noise_scale: str = "rms",
) -> SimulatedData:
    """Solve an ODE on a fine grid, subsample it and add noise.

    Parameters
    ----------
    model : ODEModel
        The system.
    p : array_like, shape (J,)
        True parameters.
    u0 : array_like, shape (D,)
        Initial condition at the start of the grid.
    t_span : (float, float), optional
        Start and end time; the fine grid is ``n_points`` uniform points on it. Give exactly
        one of ``t_span`` and ``t``.
    t : array_like, optional
        An explicit strictly increasing fine grid (``t[0]`` is the initial time).
    n_points : int, optional
        Size of the uniform fine grid on ``t_span``; default 1025 (WENDy-MLE). Not allowed
        with ``t``.
    subsample : int
        Keep every ``subsample``-th fine point, starting with the first (the papers use 1, 2
        and 4: 1025 -> 1025, 513, 257 points).
    noise : str or Observation
        Observation model (:mod:`pymc_wendy.model.observation`); see :func:`add_noise`.
    noise_ratio : float
        Noise ratio ``nr >= 0``. With additive noise, ``sigma = nr * rms(vec U*)`` is computed
        from the subsampled noise-free values.
    seed : int, optional
        Seed of the noise generator.
    stiff, method, rtol, max_nfev : optional
        Solver choice, relative tolerance and evaluation limit; see :func:`solve`.
    atol : float, optional
        Absolute tolerance. Default ``1e-12``, or ``1e-20`` (relative error control) for
        log-normal noise, whose data are only meaningful on the log scale.
    drop_nonpositive : bool
        For log-normal noise only: remove the (subsampled) grid points where some noise-free
        state is <= 0 instead of raising; the removed times are reported in
        ``SimulatedData.dropped_times``.
    problem : str, optional
        Name recorded in the result.
    inputs : mapping, optional
        Values of the model's inputs: :class:`~pymc_wendy.model.inputs.Input` objects
        (values on a grid, read between the grid times as the ``Input`` says, or callables;
        the grid must cover the solve) or vectorised callables; kept in
        ``SimulatedData.inputs``. Bare arrays are refused (their times would be ambiguous):
        give ``Input(values, t=times)``.
    noise_scale : {"rms", "range"}
        How the additive noise level follows from ``noise_ratio`` (:func:`add_noise`).

    For a model of order > 1 or with inputs, ``u0`` follows ``model.companion_states``
    (each state and its derivatives up to order - 1); the data are the states themselves.

    Returns
    -------
    SimulatedData

    Notes
    -----
    The noise-free solution of the last few (model, p, u0, grid, solver) combinations is cached,
    so repeated calls that only change the seed, the noise or the subsampling do not solve again.
    """
    if not isinstance(model, ODEModel):
        raise TypeError(f"model must be an ODEModel; got {type(model).__name__}")
    obs = as_observation(noise)
    nr = _noise_ratio(noise_ratio)
    seed = _seed(seed)
    subsample = _positive_int(subsample, "subsample", 1)
    p = check_vector(p, model.n_params, "p", model.params)
    u0 = check_vector(u0, len(model.companion_states), "u0", model.companion_states)
    forcing = _simulation_inputs(model, inputs)
    t_fine = _fine_grid(t_span, t, n_points)
    if atol is None:
        atol = _LOGNORMAL_ATOL if obs.log_scale else 1e-12
    if drop_nonpositive and not obs.log_scale:
        raise ValueError("drop_nonpositive applies to log-normal noise only")

    U_fine = _cached_solution(
        model,
        p.tobytes(),
        u0.tobytes(),
        t_fine.tobytes(),
        method,
        float(rtol),
        float(atol),
        bool(stiff),
        max_nfev,
        tuple(forcing.items()),
    )
    t_obs, U_true, dropped = _observe(model, t_fine, U_fine, subsample, drop_nonpositive)
    U, sigma = add_noise(U_true, noise=obs, noise_ratio=nr, seed=seed, noise_scale=noise_scale)
    return SimulatedData(
        t=t_obs,
        U=U,
        U_true=U_true,
        noise=obs.name,
        observation=obs,
        noise_ratio=nr,
        sigma=sigma,
        p_true=p.copy(),
        u0=u0.copy(),
        seed=seed,
        states=tuple(model.states),
        params=tuple(model.params),
        problem=problem,
        dropped_times=dropped,
        inputs=forcing or None,
    )
