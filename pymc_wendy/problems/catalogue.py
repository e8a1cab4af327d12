"""The benchmark catalogue: the ODE systems of the WENDy papers as :class:`Problem` objects.

The nine systems of WENDy 2023 Table 1 and WENDy-MLE Table 2 (BRIEF.md sec. 8), plus the
head-acceleration model of seed 004, each with true parameters, initial condition, time span,
noise model and bounds::

    >>> from pymc_wendy.problems import get_problem
    >>> data = get_problem("logistic").simulate(noise_ratio=0.1, subsample=2, seed=0)
    >>> data.U.shape
    (513, 1)

Data are made with :func:`pymc_wendy.simulate` (:mod:`pymc_wendy.model.simulate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_wendy._validation import check_vector
from pymc_wendy.model.doses import Doses
from pymc_wendy.model.inputs import Input
from pymc_wendy.model.observation import as_observation
from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.simulate import SimulatedData, add_noise, simulate

__all__ = ["PROBLEMS", "Problem", "get_problem", "list_problems"]


@dataclass(frozen=True, eq=False)
class Problem:
    """A benchmark ODE problem: model, true parameters, initial condition, time span, noise.

    Attributes
    ----------
    name : str
        Key in :data:`PROBLEMS`.
    model : ODEModel
        The system; parameters are named ``p1..pJ`` as in the papers.
    p_true : ndarray, shape (J,)
        True parameters (read-only).
    u0 : ndarray, shape (D,)
        Initial condition at ``t_span[0]`` (read-only).
    t_span : (float, float)
        Time interval.
    noise : {"normal", "lognormal"}
        Noise model of the benchmark.
    bounds : tuple of (float, float), or None
        Per-parameter search box of the paper, or None if it gives none.
    stiff : bool
        When scipy's solvers are asked for, use the stiff one (Radau with the analytic
        Jacobian); the default compiled LSODA switches to BDF by itself.
    reference : str
        Where the problem comes from.
    notes : str
        Choices made where the sources disagree or are silent.
    inputs : dict or None
        Known inputs of a forced model (name to :class:`~pymc_wendy.model.inputs.Input`).
    noise_scale : {"rms", "range"}
        How ``noise_ratio`` sets the additive noise level (:func:`add_noise`).
    n_points : int
        Default size of the simulation grid.
    observed : tuple of str or None
        The states the benchmark observes (None: all). ``simulate`` puts noise on these only
        (NaN for the others in ``U``; ``U_true`` has every state); fit them, e.g. with the
        input-output equation (:func:`~pymc_wendy.input_output`) for one observed state.
    """

    name: str
    model: ODEModel
    p_true: np.ndarray
    u0: np.ndarray
    t_span: tuple[float, float]
    noise: str
    bounds: tuple[tuple[float, float], ...] | None
    stiff: bool
    reference: str
    notes: str
    inputs: dict | None = None
    noise_scale: str = "rms"
    n_points: int = 1025
    observed: tuple[str, ...] | None = None

    def __post_init__(self):
        # The instances in PROBLEMS are shared module state: freeze their arrays so a caller
        # cannot change the benchmark for everyone else by editing p_true in place.
        m = self.model
        p = check_vector(self.p_true, m.n_params, f"{self.name}: p_true", m.params).copy()
        u0 = check_vector(
            self.u0, len(m.companion_states), f"{self.name}: u0", m.companion_states
        ).copy()
        p.setflags(write=False)
        u0.setflags(write=False)
        object.__setattr__(self, "p_true", p)
        object.__setattr__(self, "u0", u0)
        object.__setattr__(self, "t_span", (float(self.t_span[0]), float(self.t_span[1])))
        object.__setattr__(self, "noise", as_observation(self.noise).name)
        if not self.t_span[1] > self.t_span[0]:
            raise ValueError(f"{self.name}: t_span must have end > start; got {self.t_span}")
        if self.bounds is not None:
            bounds = tuple((float(lo), float(hi)) for lo, hi in self.bounds)
            if len(bounds) != m.n_params:
                raise ValueError(
                    f"{self.name}: {len(bounds)} bounds for {m.n_params} parameters {m.params}"
                )
            for name, (lo, hi), v in zip(m.params, bounds, p, strict=True):
                if not lo < hi or not lo <= v <= hi:
                    raise ValueError(f"{self.name}: {name} = {v:g} is not inside ({lo:g}, {hi:g})")
            object.__setattr__(self, "bounds", bounds)
        if self.observed is not None:
            unknown = [s for s in self.observed if s not in m.states]
            if unknown:
                raise ValueError(f"{self.name}: observed states {unknown} are not states")
            object.__setattr__(self, "observed", tuple(self.observed))

    @property
    def states(self) -> tuple[str, ...]:
        """State names."""
        return tuple(self.model.states)

    @property
    def params(self) -> tuple[str, ...]:
        """Parameter names, ``p1..pJ``."""
        return tuple(self.model.params)

    def simulate(
        self,
        *,
        n_points: int | None = None,
        subsample: int = 1,
        noise_ratio: float = 0.1,
        noise: str | None = None,
        seed: int | None = None,
        p=None,
        u0=None,
        method: str | None = None,
    ) -> SimulatedData:
        """Simulate a data set of this problem.

        Parameters
        ----------
        n_points : int, optional
            Fine uniform grid on ``t_span``; default ``self.n_points`` (WENDy-MLE: 1025).
        subsample : int
            Keep every ``subsample``-th point (papers: 1, 2, 4 -> 1025, 513, 257 points).
        noise_ratio : float
            Noise ratio ``nr`` (see :func:`add_noise`).
        noise : str or Observation, optional
            Defaults to the benchmark's noise model ``self.noise``.
        seed : int, optional
            Seed of the noise generator.
        p, u0 : array_like, optional
            Override the true parameters / initial condition.
        method : str, optional
            The solver (:func:`~pymc_wendy.solve`); default its own choice.

        Returns
        -------
        SimulatedData

        Notes
        -----
        With log-normal noise, grid points where some noise-free state is <= 0 are dropped,
        because such values cannot be logged; the removed times are listed in
        ``SimulatedData.dropped_times``. For SIR-TDI, whose initial condition is (1, 0, 0), this
        removes the initial point only (the solution is positive for t > 0), so the data start
        one step after ``t_span[0]``. Additive noise keeps every point.

        A problem with unobserved states (:attr:`observed`) returns NaN for them in ``U`` (and
        ``sigma``), and its noise level is ``noise_ratio`` times the observed states' own
        scale: the unobserved ones (a dose in the gut, in mg) must not set it. ``U_true``
        holds every state.
        """
        noise = as_observation(self.noise if noise is None else noise)
        if self.observed is not None:
            return self._simulate_observed(
                noise, noise_ratio, seed, n_points, subsample, p, u0, method
            )
        return simulate(
            self.model,
            self.p_true if p is None else p,
            self.u0 if u0 is None else u0,
            self.t_span,
            n_points=self.n_points if n_points is None else n_points,
            subsample=subsample,
            noise=noise,
            noise_ratio=noise_ratio,
            seed=seed,
            stiff=self.stiff,
            method=method,
            drop_nonpositive=noise.log_scale,
            problem=self.name,
            inputs=self.inputs,
            noise_scale=self.noise_scale,
        )

    def _simulate_observed(self, noise, noise_ratio, seed, n_points, subsample, p, u0, method):
        exact = dataclasses.replace(self, observed=None).simulate(
            n_points=n_points, subsample=subsample, noise_ratio=0.0, noise=noise, seed=seed,
            p=p, u0=u0, method=method,
        )  # fmt: skip
        cols = [self.model.states.index(s) for s in self.observed]
        U_obs, sigma_obs = add_noise(
            exact.U_true[:, cols], noise=noise, noise_ratio=noise_ratio, seed=seed,
            noise_scale=self.noise_scale,
        )  # fmt: skip
        U = np.full_like(exact.U_true, np.nan)
        U[:, cols] = U_obs
        sigma = np.full(self.model.n_states, np.nan)
        sigma[cols] = sigma_obs
        return dataclasses.replace(exact, U=U, sigma=sigma, noise_ratio=float(noise_ratio))

    def __repr__(self) -> str:
        return (
            f"Problem {self.name!r}: {self.model.n_states} states {list(self.states)}, "
            f"{self.model.n_params} params, t in [{self.t_span[0]:g}, {self.t_span[1]:g}], "
            f"{self.noise} noise{', stiff' if self.stiff else ''}"
        )


# --- the benchmark suite (BRIEF.md sec. 8) -------------------------------------------------
# Right-hand sides use numpy functions so that ODEModel can trace them symbolically.


def _logistic(t, u, p):
    (x,) = u
    return [p[0] * x - p[1] * x**2]


def _lotka_volterra(t, u, p):
    x, y = u
    return [p[0] * x + p[1] * x * y, p[2] * y + p[3] * x * y]


def _fitzhugh_nagumo(t, u, p):
    v, w = u
    return [p[0] * v + p[1] * v**3 + p[2] * w, p[3] * v + p[4] + p[5] * w]


def _hindmarsh_rose(t, u, p):
    x, y, z = u
    return [
        p[0] * y - p[1] * x**3 + p[2] * x**2 - p[3] * z,
        p[4] - p[5] * x**2 - p[6] * y,
        p[7] * x + p[8] - p[9] * z,
    ]


def _protein_transduction(t, u, p):
    s, ds, r, rs, rpp = u
    mm = rpp / (0.3 + rpp)  # Michaelis-Menten term
    return [
        p[0] * s + p[1] * s * r + p[2] * rs,
        p[3] * s,
        p[4] * s * r + p[5] * rs + p[6] * mm,
        p[7] * s * r + p[8] * rs,
        p[9] * rs + p[10] * mm,
    ]


def _lorenz(t, u, p):
    x, y, z = u
    return [p[0] * (y - x), x * (p[1] - z) - y, x * y - p[2] * z]


def _goodwin_2d(t, u, p):
    x, y = u
    return [p[0] / (36 + p[1] * y) - p[2], p[3] * x - p[4]]


def _goodwin_3d(t, u, p):
    x, y, z = u
    return [p[0] / (2.15 + p[2] * z ** p[3]) - p[1] * x, p[4] * x - p[5] * y, p[6] * y - p[7] * z]


def _sir_tdi(t, u, p):
    s, i, r = u
    loss = p[0] * np.exp(-p[0] * p[1]) / (1 - np.exp(-p[0] * p[1]))  # immunity-loss rate
    delayed = p[3] * (1 - np.exp(-p[4] * t**2))  # time-dependent recovery
    return [
        -p[0] * s + p[2] * i + loss * r,
        p[0] * s - p[2] * i - delayed * i,
        delayed * i - loss * r,
    ]


def _pk_oral(t, u, p):
    (c,) = u
    # one oral dose at t = 0: the gut amount decays as exp(-ka t), in closed form
    return [p[2] * p[0] * np.exp(-p[0] * t) - p[1] * c]


def _sir(t, u, p):
    s, i, _ = u
    return [-p[0] * s * i, p[0] * s * i - p[1] * i, p[1] * i]


def _head_acceleration(t, u, p, w):
    x, dx = u
    return [-p[0] * x - p[1] * dx + p[2] * w[0]]


def _pnames(j: int) -> list[str]:
    return [f"p{k}" for k in range(1, j + 1)]


_WENDY_2023 = "Bortz, Messenger, Dukic (2023), WENDy, Table 1"
_WENDY_MLE = "Rummel, Messenger, Becker, Dukic, Bortz (2025), WENDy-MLE, Table 2"


def _build(
    name: str,
    rhs: Callable,
    states: list[str],
    p_true: list[float],
    u0: list[float],
    t_span: tuple[float, float],
    *,
    noise: str = "normal",
    bounds: list[tuple[float, float]] | None = None,
    stiff: bool = False,
    reference: str,
    notes: str = "",
) -> Problem:
    model = ODEModel(rhs, states=states, params=_pnames(len(p_true)), name=name)
    return Problem(
        name=name,
        model=model,
        p_true=np.array(p_true, dtype=float),
        u0=np.array(u0, dtype=float),
        t_span=t_span,
        noise=noise,
        bounds=None if bounds is None else tuple(bounds),
        stiff=stiff,
        reference=reference,
        notes=notes,
    )


#: keyword arguments of :func:`_build` for the problems of the two papers' tables, in their
#: order (the head-acceleration model, second order with an input, is built on its own)
_PAPER_PROBLEMS: tuple[dict, ...] = (
    dict(
        name="logistic",
        rhs=_logistic,
        states=["u"],
        p_true=[1.0, 1.0],
        u0=[0.01],
        t_span=(0.0, 10.0),
        bounds=[(0.0, 10.0)] * 2,
        reference=f"{_WENDY_MLE}; {_WENDY_2023}",
        notes=(
            "u' = p1 u - p2 u^2 with p* = (1, 1) as in the authors' code; WENDy-MLE prints "
            "u' = p1 u + p2 u^2 with p* = (1, -1) (same relative metrics). Exact solution "
            "u(t) = 1 / (1 + 99 exp(-t))."
        ),
    ),
    dict(
        name="lotka_volterra",
        rhs=_lotka_volterra,
        states=["x", "y"],
        p_true=[3.0, -1.0, -6.0, 1.0],
        u0=[1.0, 1.0],
        t_span=(0.0, 5.0),
        reference=_WENDY_2023,
        notes=(
            "Prey x, predator y. Conserved: p4 x + p3 log x - p2 y - p1 log y "
            "(= x - 6 log x + y - 3 log y at p*). No bounds in the paper."
        ),
    ),
    dict(
        name="fitzhugh_nagumo",
        rhs=_fitzhugh_nagumo,
        states=["v", "w"],
        p_true=[3.0, -3.0, 3.0, -1.0 / 3.0, 17.0 / 150.0, 1.0 / 15.0],
        u0=[0.0, 0.1],
        t_span=(0.0, 25.0),
        reference=_WENDY_2023,
        notes="Voltage v, recovery w. No bounds in the paper.",
    ),
    dict(
        name="hindmarsh_rose",
        rhs=_hindmarsh_rose,
        states=["x", "y", "z"],
        p_true=[10.0, 10.0, 30.0, 10.0, 10.0, 50.0, 10.0, 0.04, 0.0319, 0.01],
        u0=[-1.31, -7.6, -0.2],
        t_span=(0.0, 10.0),
        bounds=[
            (0.0, 20.0),
            (0.0, 20.0),
            (0.0, 60.0),
            (0.0, 20.0),
            (0.0, 20.0),
            (0.0, 100.0),
            (0.0, 20.0),
            (0.0, 1.0),
            (0.0, 1.0),
            (0.0, 1.0),
        ],
        stiff=True,
        reference=f"{_WENDY_MLE}; {_WENDY_2023}",
        notes=(
            "Signs as in the authors' code: y' = p5 - p6 x^2 - p7 y and z' = p8 x + p9 - p10 z "
            "(WENDy-MLE prints +p7 y; WENDy 2023 writes the same system with all terms added "
            "and p = (10, -10, 30, -10, 10, -50, -10, 0.04, 0.0319, -0.01)). Bursting, "
            "slow-fast; marked stiff, so it is solved with Radau and the analytic Jacobian."
        ),
    ),
    dict(
        name="protein_transduction",
        rhs=_protein_transduction,
        states=["S", "dS", "R", "RS", "Rpp"],
        p_true=[-0.07, -0.6, 0.35, 0.07, -0.6, 0.05, 0.017, 0.6, -0.35, 0.3, -0.017],
        u0=[1.0, 0.0, 1.0, 0.0, 1.0],
        t_span=(0.0, 25.0),
        reference=_WENDY_2023,
        notes=(
            "States S, dS, R, RS, Rpp (Schoeberl et al. 2002 / Vyshemirsky and Girolami "
            "2008). p7 = 0.017 as in the authors' MATLAB data file; WENDy 2023 Table 1 prints "
            "0.17, but the rms(vec U*) = 0.81 that the same table prints is reproduced by "
            "p7 = 0.017 (0.17 gives about 1.20), so the paper's runs used 0.017. No bounds "
            "in the paper."
        ),
    ),
    dict(
        name="lorenz",
        rhs=_lorenz,
        states=["x", "y", "z"],
        p_true=[10.0, 28.0, 8.0 / 3.0],
        u0=[2.0, 1.0, 1.0],
        t_span=(0.0, 10.0),
        bounds=[(0.0, 20.0), (0.0, 35.0), (0.0, 5.0)],
        reference=_WENDY_MLE,
        notes=(
            "Chaotic: solver errors are amplified along the trajectory; at the default "
            "rtol = 1e-10 the 1025-point truth differs from an rtol = 1e-13 solve by about "
            "1e-8 (1e-10 relative to max |u|) on [0, 10]."
        ),
    ),
    dict(
        name="goodwin_2d",
        rhs=_goodwin_2d,
        states=["x", "y"],
        p_true=[72.0, 1.0, 2.0, 1.0, 1.0],
        u0=[7.0, -10.0],
        t_span=(0.0, 60.0),
        bounds=[(60.0, 80.0), (1.0, 3.0), (0.5, 3.0), (0.5, 3.0), (0.5, 3.0)],
        reference=_WENDY_MLE,
        notes="p2* = 1 lies on its lower bound, as in the paper.",
    ),
    dict(
        name="goodwin_3d",
        rhs=_goodwin_3d,
        states=["x", "y", "z"],
        p_true=[3.4884, 0.0969, 1.0, 10.0, 0.0969, 0.0581, 0.0969, 0.0775],
        u0=[0.3617, 0.9137, 1.3934],
        t_span=(0.0, 80.0),
        noise="lognormal",
        bounds=[(1.0, 5.0), (0.0, 0.2), (0.0, 2.0), (5.0, 15.0)] + [(0.0, 0.2)] * 4,
        reference=_WENDY_MLE,
        notes=(
            "Eight parameters with p3 = 1 as in the authors' code (WENDy-MLE Table 2 prints "
            "seven, omitting p3). Hill coefficient p4 = 10. The solution is positive."
        ),
    ),
    dict(
        name="sir_tdi",
        rhs=_sir_tdi,
        states=["S", "I", "R"],
        p_true=[0.2, 1.5, 0.074, 0.113, 0.0024],
        u0=[1.0, 0.0, 0.0],
        t_span=(0.0, 50.0),
        noise="lognormal",
        bounds=[(1e-4, 1.0), (1e-4, 2.0), (1e-4, 1.0), (1e-4, 1.0), (1e-4, 1.0)],
        reference=_WENDY_MLE,
        notes=(
            "p1 = 0.2 as in the authors' code (WENDy-MLE Table 2 prints 1.99, outside its "
            "own bounds). u(0) = (1, 0, 0) cannot be logged: under log-normal noise "
            "Problem.simulate drops the initial point (the only one with a state <= 0) and "
            "records it in SimulatedData.dropped_times. R grows like t^4 at first (about "
            "8e-11 at the first step of a 1025-point grid), so log-normal data are solved "
            "with relative error control only."
        ),
    ),
)


def _make_problems() -> dict[str, Problem]:
    problems = [_build(**spec) for spec in _PAPER_PROBLEMS] + [_head_acceleration_problem()]
    problems += [_pk_oral_problem(), _pk_iv_problem(), _pk_doses_problem()]
    problems += [_pk_two_compartment_problem(), _sir_problem()]
    problems += [_fhn_v_problem(), _hes1_problem()]
    return {prob.name: prob for prob in problems}


def _pk_oral_problem() -> Problem:
    model = ODEModel(_pk_oral, states=["C"], params=["ka", "ke", "a"], name="pk_oral")
    return Problem(
        name="pk_oral",
        model=model,
        p_true=np.array([1.5, 0.2, 10.0]),
        u0=np.array([0.0]),
        t_span=(0.0, 24.0),
        noise="normal",
        bounds=((0.01, 10.0), (0.001, 2.0), (0.1, 100.0)),
        stiff=False,
        reference=(
            "ours (issue 34): one-compartment pharmacokinetics, first-order absorption of one "
            "oral dose at t = 0 and first-order elimination, C' = a ka exp(-ka t) - ke C with "
            "a = F dose / V; C(0) = 0 known"
        ),
        notes=(
            "Time in hours, concentration in mg/L: ka = 1.5 / h, ke = 0.2 / h, a = 10 mg/L. "
            "The gut compartment is solved in closed form, so the model is first order in C "
            "alone. The concentration is known to be 0 at the dose: fit with "
            "initial_state=P.u0 (t0=0), which is what pins ka and a when the rise before the "
            "first sample is not observed (docs/data.md, Known initial states). Flip-flop: "
            "(ka, ke, a) and (ke, ka, a ka / ke) give the same concentration curve, so the "
            "likelihood has a second, equally good optimum; a start or bounds with ka > ke "
            "pick the usual one. The bounds are a search box of ours and do not."
        ),
        n_points=101,
    )


def _pk_doses(t, u, p, w):
    gut, c = u
    ka, ke, v = p
    return [-ka * gut + w[0], ka * gut / v - ke * c]


def _pk_two_compartment(t, u, p, w):
    gut, c, peripheral = u
    ka, v, k10, k12, k21 = p
    return [
        -ka * gut + w[0],
        ka * gut / v - (k10 + k12) * c + k21 * peripheral,
        k12 * c - k21 * peripheral,
    ]


def _pk_iv(t, u, p, w):
    (c,) = u
    ke, v = p
    return [-ke * c + w[0] / v]


def _pk_iv_problem() -> Problem:
    model = ODEModel(_pk_iv, states=["C"], params=["ke", "V"], inputs=["dose"], name="pk_iv_doses")
    return Problem(
        name="pk_iv_doses",
        model=model,
        p_true=np.array([0.2, 10.0]),
        u0=np.array([0.0]),
        t_span=(0.0, 24.0),
        noise="normal",
        bounds=((0.001, 2.0), (0.1, 1000.0)),
        stiff=False,
        reference=(
            "ours (issue 34): one-compartment pharmacokinetics, intravenous boluses of 100 mg "
            "at 0, 8 and 16 h; the concentration C (mg/L) is observed"
        ),
        notes=(
            "C' = -ke C + dose / V: every bolus makes C jump by 100 / V, which the weak form "
            "takes from the dose term dose * phi(t_dose) and the data on both sides of the "
            "jump (docs/doses.md). A sample at a dose time is the value before the dose. The "
            "bounds are a search box of ours."
        ),
        inputs={"dose": Doses([0.0, 8.0, 16.0], 100.0)},
        n_points=97,
    )


def _pk_doses_problem() -> Problem:
    model = ODEModel(
        _pk_doses, states=["gut", "C"], params=["ka", "ke", "V"], inputs=["dose"],
        name="pk_oral_doses",
    )  # fmt: skip
    return Problem(
        name="pk_oral_doses",
        model=model,
        p_true=np.array([1.5, 0.2, 30.0]),
        u0=np.array([0.0, 0.0]),
        t_span=(0.0, 48.0),
        noise="normal",
        bounds=((0.01, 10.0), (0.001, 2.0), (1.0, 300.0)),
        stiff=False,
        reference=(
            "ours (issue 34): one-compartment pharmacokinetics with first-order absorption, "
            "three oral doses of 320 mg at 0, 12 and 24 h into the gut; only the "
            "concentration C (mg/L) is observed"
        ),
        notes=(
            "gut' = -ka gut + dose, C' = ka gut / V - ke C, at rest before the first dose. The "
            "gut is not observed: fit the input-output equation pw.input_output(P.model, 'C') "
            "(C'' + (ka + ke) C' + ka ke C = ka / V dose) to the C column, with "
            "initial_state=[0, 0] for the rest state (docs/doses.md). Flip-flop: (ka, ke, V) "
            "and (ke, ka, V ke / ka) give the same curve; bounds or a start with ka > ke pick "
            "the usual one. The bounds are a search box of ours."
        ),
        inputs={"dose": Doses([0.0, 12.0, 24.0], 320.0)},
        n_points=97,
        observed=("C",),
    )


def _pk_two_compartment_problem() -> Problem:
    model = ODEModel(
        _pk_two_compartment, states=["gut", "C", "peripheral"],
        params=["ka", "V", "k10", "k12", "k21"], inputs=["dose"], name="pk_two_compartment",
    )  # fmt: skip
    return Problem(
        name="pk_two_compartment",
        model=model,
        p_true=np.array([1.2, 20.0, 0.15, 0.4, 0.2]),
        u0=np.array([0.0, 0.0, 0.0]),
        t_span=(0.0, 72.0),
        noise="normal",
        bounds=((0.01, 10.0), (1.0, 200.0), (0.001, 2.0), (0.001, 2.0), (0.001, 2.0)),
        stiff=False,
        reference=(
            "ours (issue 34): two-compartment pharmacokinetics with first-order absorption, "
            "three oral doses of 500 mg at 0, 24 and 48 h; only the central concentration C "
            "is observed"
        ),
        notes=(
            "gut' = -ka gut + dose, C' = ka gut / V - (k10 + k12) C + k21 peripheral, "
            "peripheral' = k12 C - k21 peripheral (peripheral in concentration units of the "
            "central volume). Its input-output equation in C is of order 3 with the dose's "
            "derivative, C''' + a2 C'' + a1 C' + a0 C = ka / V (dose' + k21 dose), and needs "
            "dense data (radii of 10 grid spacings): simulate with n_points >= 289. The "
            "bounds are a search box of ours."
        ),
        inputs={"dose": Doses([0.0, 24.0, 48.0], 500.0)},
        n_points=289,
        observed=("C",),
    )


def _fhn_magi(t, u, p):
    V, R = u
    a, b, c = p
    return [c * (V - V**3 / 3 + R), -(V - a + b * R) / c]


def _hes1(t, u, p):
    P, M, H = u
    a, b, c, d, e, f, g = p
    return [
        -a * P * H + b * M - c * P,
        -d * M + e / (1 + P**2),
        -a * P * H + f / (1 + P**2) - g * H,
    ]


_MAGI = (
    "Yang, Wong and Kou, Inference of dynamic systems from noisy and sparse data via "
    "manifold-constrained Gaussian processes, PNAS 118 (2021) e2020397118"
)


def _fhn_v_problem() -> Problem:
    model = ODEModel(_fhn_magi, states=["V", "R"], params=["a", "b", "c"], name="fhn_v")
    return Problem(
        name="fitzhugh_nagumo_v",
        model=model,
        p_true=np.array([0.2, 0.2, 3.0]),
        u0=np.array([-1.0, 1.0]),
        t_span=(0.0, 20.0),
        noise="normal",
        bounds=((-2.0, 2.0), (-2.0, 2.0), (0.1, 10.0)),
        stiff=False,
        reference=_MAGI + " (its FitzHugh-Nagumo example, observed in V only here)",
        notes=(
            "V' = c (V - V^3/3 + R), R' = -(V - a + b R) / c, the parametrisation MAGI uses "
            "(the catalogue's fitzhugh_nagumo, with six linear parameters, is not "
            "identifiable from v alone). MAGI observes both components at 41 points with "
            "noise sd 0.2; here R is never observed (NaN) and the noise is set relative to "
            "the RMS of V by noise_ratio. The bounds are a search box of ours."
        ),
        n_points=41,
        observed=("V",),
    )


def _hes1_problem() -> Problem:
    model = ODEModel(_hes1, states=["P", "M", "H"], params=list("abcdefg"), name="hes1")
    return Problem(
        name="hes1",
        model=model,
        p_true=np.array([0.022, 0.3, 0.031, 0.028, 0.5, 20.0, 0.3]),
        u0=np.array([1.439, 2.037, 17.904]),
        t_span=(0.0, 240.0),
        noise="normal",
        bounds=tuple((v / 10, v * 10) for v in (0.022, 0.3, 0.031, 0.028, 0.5, 20.0, 0.3)),
        stiff=False,
        reference=_MAGI + " (its Hes1 example: the Hes1 protein P and mRNA M observed, H never)",
        notes=(
            "P' = -a P H + b M - c P, M' = -d M + e / (1 + P^2), H' = -a P H + f / (1 + P^2) "
            "- g H, minutes. MAGI observes P and M at 33 points (every 7.5 min) with "
            "multiplicative noise of sd 0.15 on the log scale, P and M at alternating times. "
            "Here both at every point, the noise set by noise_ratio; H is NaN. The equation "
            "of the observed states raises P to order 2 ((log P)'' on the left, "
            "docs/hidden_states.md). The bounds are a box of ours, a factor 10 each way."
        ),
        n_points=33,
        observed=("P", "M"),
    )


def _sir_problem() -> Problem:
    model = ODEModel(_sir, states=["S", "I", "R"], params=["beta", "gamma"], name="sir")
    return Problem(
        name="sir",
        model=model,
        p_true=np.array([0.5, 0.2]),
        u0=np.array([0.99, 0.01, 0.0]),
        t_span=(0.0, 60.0),
        noise="normal",
        bounds=((1e-3, 5.0), (1e-3, 5.0)),
        stiff=False,
        reference=(
            "ours (issue 34): the SIR epidemic in population fractions, observed in the "
            "infected fraction I only, as case counts are"
        ),
        notes=(
            "Time in days, R0 = beta / gamma = 2.5; the epidemic peaks near day 22. Observed "
            "in I only (S and R are NaN in simulated data) it is identifiable: S is "
            "eliminated, R dropped, and the equation of I is (log I)'' = -beta I' - beta gamma "
            "I (pw.input_output, docs/hidden_states.md). Under additive noise the tail where "
            "I <= 0 lies outside the domain of log I and is left out by the weak form."
        ),
        n_points=121,
        observed=("I",),
    )


def _head_acceleration_problem() -> Problem:
    model = ODEModel(
        _head_acceleration,
        states=["x"],
        params=["beta0", "beta1", "alpha"],
        order=2,
        inputs=["u"],
        name="head_acceleration",
    )
    return Problem(
        name="head_acceleration",
        model=model,
        p_true=np.array([0.05, 0.15, 0.39]),
        u0=np.array([0.0, 0.0]),
        t_span=(0.0, 60.0),
        noise="normal",
        bounds=((0.0, 0.5), (0.0, 1.0), (0.0, 2.0)),
        stiff=False,
        reference=(
            "Carey & Ramsay, Data2LD (seed 004), sec. 5: x'' = -0.05 x - 0.15 x' + 0.39 u, "
            "u = 1 on [14, 15], x(0) = x'(0) = 0, N = 21, 51, 101 points on [0, 60], noise sd "
            "sigma * range(x) with sigma = 0.01, 0.05, 0.10"
        ),
        notes=(
            "Second order, one observed state, one known input (a unit pulse). Parameters "
            "named as in the paper and taken positive (x'' = -beta0 x - beta1 x' + alpha u; "
            "the extracted text lost the signs). noise_ratio is the paper's sigma: the noise "
            "sd is noise_ratio * range(x) (noise_scale='range'). Simulate with n_points = N "
            "(default 101). The bounds are a search box of ours (the paper gives none)."
        ),
        inputs={"u": Input.pulse(14.0, 15.0)},
        noise_scale="range",
        n_points=101,
    )


PROBLEMS: dict[str, Problem] = _make_problems()
"""The benchmark problems by name; see :func:`get_problem`."""


def list_problems() -> list[str]:
    """Names of the benchmark problems, in the order of the papers' tables."""
    return list(PROBLEMS)


def get_problem(name: str) -> Problem:
    """Return a benchmark problem by name.

    Names are matched case-insensitively, with ``-`` or spaces allowed for ``_``
    (``"Lotka-Volterra"`` finds ``"lotka_volterra"``).

    Raises
    ------
    KeyError
        Unknown name; the message lists the available names.
    """
    key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
    try:
        return PROBLEMS[key]
    except KeyError:
        raise KeyError(
            f"unknown problem {name!r}; available problems: {', '.join(PROBLEMS)}"
        ) from None
