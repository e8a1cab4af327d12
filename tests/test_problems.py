"""Benchmark problems, forward solves and noise generation (pymc_wendy.problems)."""

import numpy as np
import pytest

from pymc_wendy.model.ode import ODEModel
from pymc_wendy.model.simulate import SimulatedData, SimulationError, add_noise, simulate, solve
from pymc_wendy.problems import PROBLEMS, Problem, get_problem, list_problems

NAMES = [
    "logistic",
    "lotka_volterra",
    "fitzhugh_nagumo",
    "hindmarsh_rose",
    "protein_transduction",
    "lorenz",
    "goodwin_2d",
    "goodwin_3d",
    "sir_tdi",
]
# higher-order problems (their own tests: tests/test_higher_order.py)
HIGHER_ORDER = ["head_acceleration"]
# problems of ours for the initial-state and dosing features (tests/test_initial_state.py)
OURS = ["pk_oral", "pk_iv_doses", "pk_oral_doses", "pk_two_compartment", "sir"]
OURS += ["fitzhugh_nagumo_v", "hes1"]  # MAGI's examples with a hidden state (issue 57)
LOGNORMAL = {"goodwin_3d", "sir_tdi"}


def _lotka_volterra_model():
    def rhs(t, u, p):
        x, y = u
        return [p[0] * x + p[1] * x * y, p[2] * y + p[3] * x * y]

    return ODEModel(rhs, states=["x", "y"], params=["p1", "p2", "p3", "p4"])


# --- registry ------------------------------------------------------------------------------


def test_registry_names():
    assert list_problems() == NAMES + HIGHER_ORDER + OURS
    assert set(PROBLEMS) == set(NAMES + HIGHER_ORDER + OURS)
    for name in NAMES:
        assert get_problem(name) is PROBLEMS[name]
        assert PROBLEMS[name].name == name


@pytest.mark.parametrize(
    "alias, name",
    [
        ("Lotka-Volterra", "lotka_volterra"),
        ("SIR-TDI", "sir_tdi"),
        ("  Hindmarsh Rose ", "hindmarsh_rose"),
        ("GOODWIN_3D", "goodwin_3d"),
    ],
)
def test_get_problem_normalises_names(alias, name):
    assert get_problem(alias) is PROBLEMS[name]


def test_get_problem_unknown_lists_available_names():
    with pytest.raises(KeyError, match="unknown problem 'van_der_pol'; available problems:") as exc:
        get_problem("van_der_pol")
    message = str(exc.value)
    for name in NAMES:
        assert name in message


@pytest.mark.parametrize("name", NAMES)
def test_problem_definition_consistent(name):
    prob = PROBLEMS[name]
    model = prob.model
    # the WENDy papers' p1..pJ; Data2LD's head acceleration keeps the paper's names
    names = ("beta0", "beta1", "alpha") if name == "head_acceleration" else None
    names = names or tuple(f"p{j}" for j in range(1, model.n_params + 1))
    assert prob.params == model.params == names
    assert prob.states == model.states
    assert prob.p_true.shape == (model.n_params,)
    assert prob.u0.shape == (model.n_states,)
    assert prob.noise == ("lognormal" if name in LOGNORMAL else "normal")
    assert prob.t_span[0] == 0.0 and prob.t_span[1] > 0
    if prob.bounds is not None:
        lo, hi = np.array(prob.bounds).T
        assert np.all(lo <= prob.p_true) and np.all(prob.p_true <= hi)
    assert prob.reference and prob.notes
    # The benchmark is shared state: its arrays must not be editable in place.
    with pytest.raises(ValueError, match="read-only"):
        prob.p_true[0] = 1.0


# BRIEF.md sec. 8, transcribed independently of the module: p*, u(0), t, noise, bounds.
TABLE = {
    "logistic": ([1, 1], [0.01], 10, "normal", [(0, 10)] * 2),
    "lotka_volterra": ([3, -1, -6, 1], [1, 1], 5, "normal", None),
    "fitzhugh_nagumo": ([3, -3, 3, -1 / 3, 17 / 150, 1 / 15], [0, 0.1], 25, "normal", None),
    "hindmarsh_rose": (
        [10, 10, 30, 10, 10, 50, 10, 0.04, 0.0319, 0.01],
        [-1.31, -7.6, -0.2],
        10,
        "normal",
        [(0, 20), (0, 20), (0, 60), (0, 20), (0, 20), (0, 100), (0, 20), (0, 1), (0, 1), (0, 1)],
    ),
    "protein_transduction": (
        [-0.07, -0.6, 0.35, 0.07, -0.6, 0.05, 0.017, 0.6, -0.35, 0.3, -0.017],
        [1, 0, 1, 0, 1],
        25,
        "normal",
        None,
    ),
    "lorenz": ([10, 28, 8 / 3], [2, 1, 1], 10, "normal", [(0, 20), (0, 35), (0, 5)]),
    "goodwin_2d": (
        [72, 1, 2, 1, 1],
        [7, -10],
        60,
        "normal",
        [(60, 80), (1, 3), (0.5, 3), (0.5, 3), (0.5, 3)],
    ),
    "goodwin_3d": (
        [3.4884, 0.0969, 1, 10, 0.0969, 0.0581, 0.0969, 0.0775],
        [0.3617, 0.9137, 1.3934],
        80,
        "lognormal",
        [(1, 5), (0, 0.2), (0, 2), (5, 15)] + [(0, 0.2)] * 4,
    ),
    "sir_tdi": (
        [0.2, 1.5, 0.074, 0.113, 0.0024],
        [1, 0, 0],
        50,
        "lognormal",
        [(1e-4, 1), (1e-4, 2)] + [(1e-4, 1)] * 3,
    ),
}


@pytest.mark.parametrize("name", NAMES)
def test_values_match_brief_table(name):
    p, u0, T, noise, bounds = TABLE[name]
    prob = PROBLEMS[name]
    np.testing.assert_array_equal(prob.p_true, p)
    np.testing.assert_array_equal(prob.u0, u0)
    assert prob.t_span == (0.0, T)
    assert prob.noise == noise
    assert prob.bounds == (None if bounds is None else tuple(bounds))


def test_brief_choices_recorded():
    ptb = PROBLEMS["protein_transduction"]
    assert ptb.p_true[6] == 0.017
    assert "0.017" in ptb.notes and "0.17" in ptb.notes
    assert PROBLEMS["hindmarsh_rose"].stiff
    assert PROBLEMS["hindmarsh_rose"].bounds[5] == (0.0, 100.0)
    assert PROBLEMS["goodwin_3d"].p_true.shape == (8,) and PROBLEMS["goodwin_3d"].p_true[2] == 1.0
    assert PROBLEMS["sir_tdi"].p_true[0] == 0.2
    assert "drops the initial point" in PROBLEMS["sir_tdi"].notes
    assert PROBLEMS["lotka_volterra"].bounds is None


# --- every problem simulates ---------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_problem_simulates(name):
    prob = PROBLEMS[name]
    D = prob.model.n_states
    t0, t1 = prob.t_span
    for subsample, expected in [(1, 1025), (2, 513), (4, 257)]:
        data = prob.simulate(n_points=1025, subsample=subsample, noise_ratio=0.05, seed=3)
        assert isinstance(data, SimulatedData)
        n = expected - len(data.dropped_times)
        assert data.t.shape == (n,)
        assert data.U.shape == data.U_true.shape == (n, D)
        assert data.sigma.shape == (D,)
        assert np.all(np.isfinite(data.U)) and np.all(np.isfinite(data.U_true))
        assert data.states == prob.model.states and data.params == prob.model.params
        assert data.problem == name and data.noise == prob.noise and data.seed == 3
        np.testing.assert_array_equal(data.p_true, prob.p_true)
        np.testing.assert_array_equal(data.u0, prob.u0)
        assert data.t[-1] == pytest.approx(t1)
        np.testing.assert_allclose(np.diff(data.t), subsample * (t1 - t0) / 1024, rtol=1e-9)
        if prob.noise == "lognormal":
            # Positive truth away from the dropped points, so every datum can be logged.
            assert np.all(data.U_true > 0) and np.all(data.U > 0)
        else:
            assert data.dropped_times == ()
            assert data.t[0] == t0
            np.testing.assert_array_equal(data.U_true[0], prob.u0)


def test_sir_tdi_lognormal_drops_only_the_initial_point():
    prob = PROBLEMS["sir_tdi"]
    data = prob.simulate(noise_ratio=0.1, seed=0)
    assert data.dropped_times == (0.0,)
    assert data.t[0] == pytest.approx(50 / 1024)
    assert data.t.shape == (1024,)
    # Additive noise keeps the initial point with its zeros.
    normal = prob.simulate(noise="normal", noise_ratio=0.1, seed=0)
    assert normal.dropped_times == () and normal.t.shape == (1025,)
    np.testing.assert_array_equal(normal.U_true[0], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(normal.U_true[1:], data.U_true, rtol=1e-6, atol=1e-12)


def test_lognormal_truth_is_accurate_on_the_log_scale():
    # R starts at zero and grows like t^4, so early values are ~1e-10: only relative error
    # control makes their logarithm accurate.
    prob = PROBLEMS["sir_tdi"]
    data = prob.simulate(noise_ratio=0.0)
    t = np.concatenate([[0.0], data.t])
    tight = solve(prob.model, prob.p_true, prob.u0, t, rtol=1e-13, atol=1e-22)[1:]
    assert data.U_true[0, 2] < 1e-9
    assert np.max(np.abs(np.log(data.U_true / tight))) < 1e-8


def test_goodwin_3d_lognormal_drops_nothing():
    data = PROBLEMS["goodwin_3d"].simulate(noise_ratio=0.1, seed=0)
    assert data.dropped_times == () and data.t.shape == (1025,)


# --- accuracy ------------------------------------------------------------------------------


def test_logistic_matches_exact_solution():
    data = PROBLEMS["logistic"].simulate(noise_ratio=0.0)
    exact = 1.0 / (1.0 + 99.0 * np.exp(-data.t))
    assert np.max(np.abs(data.U_true[:, 0] - exact)) < 1e-8
    np.testing.assert_array_equal(data.U, data.U_true)


@pytest.mark.parametrize("name", ["fitzhugh_nagumo", "goodwin_3d"])
def test_default_tolerance_agrees_with_tight_tolerance(name):
    prob = PROBLEMS[name]
    t = np.linspace(*prob.t_span, 1025)
    default = solve(prob.model, prob.p_true, prob.u0, t, stiff=prob.stiff)
    tight = solve(prob.model, prob.p_true, prob.u0, t, rtol=1e-13, atol=1e-15)
    assert np.max(np.abs(default - tight)) < 1e-7 * np.max(np.abs(tight))


def test_stiff_and_explicit_solvers_agree_on_hindmarsh_rose():
    prob = PROBLEMS["hindmarsh_rose"]
    data = prob.simulate(noise_ratio=0.0)  # Radau, cached
    explicit = solve(prob.model, prob.p_true, prob.u0, data.t, method="DOP853")
    assert np.max(np.abs(explicit - data.U_true)) < 1e-6


@pytest.mark.parametrize(
    "name, printed, p_override",
    [
        ("logistic", 0.66, None),
        ("lotka_volterra", 6.8, None),
        ("fitzhugh_nagumo", 0.68, None),
        ("hindmarsh_rose", 2.8, None),
        # Table 1's printed 0.81 is what p7 = 0.017 (the MATLAB value, our default) gives.
        ("protein_transduction", 0.81, None),
    ],
)
def test_rms_matches_wendy_2023_table_1(name, printed, p_override):
    """||vec U*||_rms of WENDy 2023 Table 1 (two printed digits: allow 2 %)."""
    prob = PROBLEMS[name]
    p = prob.p_true.copy()
    for j, v in (p_override or {}).items():
        p[j] = v
    data = prob.simulate(noise_ratio=0.0, p=p)
    assert np.sqrt(np.mean(data.U_true**2)) == pytest.approx(printed, rel=0.02)


def test_ptb_with_printed_p7_does_not_reproduce_printed_rms():
    """Why p7 = 0.017: Table 1's own p7 = 0.17 gives rms 1.20, not the printed 0.81."""
    prob = PROBLEMS["protein_transduction"]
    p = prob.p_true.copy()
    p[6] = 0.17
    data = prob.simulate(noise_ratio=0.0, p=p)
    assert np.sqrt(np.mean(data.U_true**2)) == pytest.approx(1.20, abs=0.01)


def test_lotka_volterra_invariant_is_conserved():
    # u1' = u1 (p1 + p2 u2), u2' = u2 (p3 + p4 u1). With H = a(u1) + b(u2),
    # dH/dt = a'(u1) u1 (p1 + p2 u2) + b'(u2) u2 (p3 + p4 u1) vanishes for
    # a'(u1) u1 = p3 + p4 u1 and b'(u2) u2 = -(p1 + p2 u2), so
    # H = p4 u1 + p3 log u1 - p2 u2 - p1 log u2 (= x - 6 log x + y - 3 log y at p*).
    prob = PROBLEMS["lotka_volterra"]
    p1, p2, p3, p4 = prob.p_true
    x, y = prob.simulate(noise_ratio=0.0).U_true.T
    H = p4 * x + p3 * np.log(x) - p2 * y - p1 * np.log(y)
    assert np.max(np.abs(H - H[0])) < 1e-8
    # The trajectory is a real orbit, so a wrong sign on any term is far from constant.
    wrong = p4 * x - p3 * np.log(x) - p2 * y - p1 * np.log(y)
    assert np.ptp(wrong) > 1.0


# --- noise ---------------------------------------------------------------------------------

N_SEEDS = 20


def test_additive_noise_level_matches_noise_ratio():
    """Pooled residual std equals nr * rms(vec U*), the same for every state.

    With N i.i.d. normal residuals the sample std has relative standard error
    1 / sqrt(2 N): pooled over 20 seeds x 1025 times x 2 states (N = 41000) that is 0.35 %,
    per state (N = 20500) 0.49 %. The tolerances are 5 standard errors: 1.75 % and 2.5 %.
    """
    prob = PROBLEMS["lotka_volterra"]
    nr = 0.2
    runs = [prob.simulate(noise_ratio=nr, seed=s) for s in range(N_SEEDS)]
    U_true = runs[0].U_true
    sigma = nr * np.sqrt(np.mean(U_true**2))
    for run in runs:
        np.testing.assert_allclose(run.sigma, [sigma, sigma])
    E = np.stack([run.U - run.U_true for run in runs])  # (seeds, M+1, D)
    N = E.size
    assert np.std(E) == pytest.approx(sigma, rel=5 / np.sqrt(2 * N))
    assert abs(np.mean(E)) < 5 * sigma / np.sqrt(N)
    per_state = np.std(E, axis=(0, 1))
    np.testing.assert_allclose(per_state, sigma, rtol=5 / np.sqrt(2 * N / 2))


def test_lognormal_noise_level_matches_noise_ratio():
    """std of log(U / U*) equals nr; N = 20 seeds x 1025 x 3 = 61500, tolerance 5 / sqrt(2 N)."""
    prob = PROBLEMS["goodwin_3d"]
    nr = 0.1
    runs = [prob.simulate(noise_ratio=nr, seed=s) for s in range(N_SEEDS)]
    logs = np.stack([np.log(run.U / run.U_true) for run in runs])
    N = logs.size
    assert np.std(logs) == pytest.approx(nr, rel=5 / np.sqrt(2 * N))
    assert abs(np.mean(logs)) < 5 * nr / np.sqrt(N)
    for run in runs:
        np.testing.assert_array_equal(run.sigma, [nr, nr, nr])


def test_add_noise_directly():
    U_true = np.column_stack([np.linspace(1, 2, 500), np.linspace(-3, 3, 500)])
    U, sigma = add_noise(U_true, noise="normal", noise_ratio=0.5, seed=1)
    expected = 0.5 * np.sqrt(np.mean(U_true**2))
    np.testing.assert_allclose(sigma, [expected, expected])
    assert not np.allclose(U, U_true)
    U0, sigma0 = add_noise(U_true, noise_ratio=0.0, seed=1)
    np.testing.assert_array_equal(U0, U_true)
    np.testing.assert_array_equal(sigma0, [0.0, 0.0])


def test_seeds_reproduce_and_differ():
    prob = PROBLEMS["fitzhugh_nagumo"]
    a = prob.simulate(noise_ratio=0.1, seed=7)
    b = prob.simulate(noise_ratio=0.1, seed=7)
    c = prob.simulate(noise_ratio=0.1, seed=8)
    np.testing.assert_array_equal(a.U, b.U)
    assert not np.any(a.U == c.U)
    np.testing.assert_array_equal(a.U_true, c.U_true)
    d = prob.simulate(noise_ratio=0.1)
    e = prob.simulate(noise_ratio=0.1)
    assert d.seed is None and not np.array_equal(d.U, e.U)


def test_returned_arrays_do_not_alias_the_cached_solution():
    prob = PROBLEMS["logistic"]
    first = prob.simulate(noise_ratio=0.0)
    first.U_true[:] = -1.0
    first.t[:] = -1.0
    second = prob.simulate(noise_ratio=0.0)
    assert np.all(second.U_true > 0) and second.t[0] == 0.0


# --- generic simulate ----------------------------------------------------------------------


def test_simulate_custom_model_on_explicit_grid():
    model = _lotka_volterra_model()
    t = np.concatenate([np.linspace(0, 1, 11), np.linspace(1.5, 5, 8)])
    data = simulate(model, [3, -1, -6, 1], [1, 1], t=t, noise_ratio=0.1, seed=0)
    np.testing.assert_array_equal(data.t, t)
    ref = PROBLEMS["lotka_volterra"].simulate(noise_ratio=0.0)
    # Grid points 0 .. 1 in steps of 0.1 are not on the 1025-grid; compare at t = 5 only.
    np.testing.assert_allclose(data.U_true[-1], ref.U_true[-1], rtol=1e-8)
    assert data.problem is None and data.states == ("x", "y")


def test_solve_reports_solver_failure():
    blowup = ODEModel(lambda t, u, p: [p[0] * u[0] ** 2], states=["u"], params=["p1"])
    # u' = u^2, u(0) = 1 blows up at t = 1.
    with pytest.raises(
        SimulationError, match=r"failed on \[0, 2\] after the output time t = 1: Required step"
    ):
        solve(blowup, [1.0], [1.0], np.linspace(0, 2, 21), method="DOP853")
    # the default, compiled path reports where, and that it is a blow-up
    with pytest.raises(
        SimulationError, match=r"blows up on \[0, 2\] after the output time t = 0.9 "
    ):
        solve(blowup, [1.0], [1.0], np.linspace(0, 2, 21))


# --- bad inputs ----------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    model = _lotka_volterra_model()
    p, u0, t = [3, -1, -6, 1], [1, 1], np.linspace(0, 5, 11)
    with pytest.raises(ValueError, match="strictly increasing"):
        solve(model, p, u0, t[::-1])
    with pytest.raises(ValueError, match="strictly increasing"):
        simulate(model, p, u0, t=np.array([0.0, 2.0, 1.0, 3.0]))
    with pytest.raises(ValueError, match=r"u0 must have length 2 \(\['x', 'y'\]\)"):
        solve(model, p, [1, 1, 1], t)
    with pytest.raises(ValueError, match="p must have length 4"):
        solve(model, p[:3], u0, t)
    with pytest.raises(ValueError, match="p must have length 4"):
        PROBLEMS["lotka_volterra"].simulate(p=[1.0, 2.0])
    with pytest.raises(ValueError, match="u0 must be finite"):
        solve(model, p, [1, np.nan], t)
    with pytest.raises(ValueError, match="noise_ratio must be finite and >= 0"):
        add_noise(np.ones((5, 2)), noise_ratio=-0.1)
    with pytest.raises(ValueError, match="noise_ratio must be finite and >= 0"):
        PROBLEMS["logistic"].simulate(noise_ratio=-1)
    with pytest.raises(ValueError, match="noise must be one of"):
        add_noise(np.ones((5, 2)), noise="cauchy", noise_ratio=0.1)
    with pytest.raises(ValueError, match="exactly one of t_span and t"):
        simulate(model, p, u0)
    with pytest.raises(ValueError, match="exactly one of t_span and t"):
        simulate(model, p, u0, (0, 5), t=t)
    with pytest.raises(ValueError, match="n_points applies to t_span only"):
        simulate(model, p, u0, t=t, n_points=10)
    with pytest.raises(ValueError, match="end > start"):
        simulate(model, p, u0, (5, 0))
    with pytest.raises(ValueError, match="subsample must be an integer >= 1"):
        simulate(model, p, u0, (0, 5), subsample=0)
    with pytest.raises(TypeError, match="seed must be a non-negative int"):
        simulate(model, p, u0, (0, 5), seed=1.5)


def test_lognormal_with_nonpositive_truth_raises():
    U_true = np.array([[1.0, 0.0], [2.0, 1.0]])
    with pytest.raises(
        ValueError, match=r"positive data.*1 entries <= 0 \(first at row 0, state 1"
    ):
        add_noise(U_true, noise="lognormal", noise_ratio=0.1)
    sir = PROBLEMS["sir_tdi"]
    # The generic simulate does not drop points unless asked to.
    with pytest.raises(ValueError, match="log-normal noise needs positive data"):
        simulate(sir.model, sir.p_true, sir.u0, sir.t_span, noise="lognormal", noise_ratio=0.1)
    with pytest.raises(ValueError, match="drop_nonpositive applies to log-normal noise only"):
        simulate(sir.model, sir.p_true, sir.u0, sir.t_span, drop_nonpositive=True)


def test_problem_validates_its_definition():
    model = _lotka_volterra_model()
    common = dict(
        name="lv",
        model=model,
        u0=[1.0, 1.0],
        t_span=(0.0, 5.0),
        noise="normal",
        stiff=False,
        reference="",
        notes="",
    )
    with pytest.raises(ValueError, match="p_true must have length 4"):
        Problem(p_true=[1.0, 2.0], bounds=None, **common)
    with pytest.raises(ValueError, match=r"p1 = 3 is not inside \(0, 1\)"):
        Problem(p_true=[3, -1, -6, 1], bounds=[(0, 1), (-2, 0), (-7, 0), (0, 2)], **common)
    prob = Problem(p_true=[3, -1, -6, 1], bounds=None, **common)
    assert prob.simulate(noise_ratio=0.0, subsample=4).t.shape == (257,)


def test_runaway_solve_gives_up_instead_of_hanging():
    prob = PROBLEMS["hindmarsh_rose"]
    p = prob.p_true.copy()
    p[6] = -10.0  # y' = ... + 10 y: y grows like e^(10 t) and the steps shrink without end
    with pytest.raises(SimulationError, match="gave up after 20000 right-hand side evaluations"):
        solve(prob.model, p, prob.u0, np.linspace(0, 10, 101), method="DOP853", max_nfev=20_000)


def test_theophylline_data_set():
    """The shipped data are R's datasets::Theoph (values of subject 1 as published)."""
    from pymc_wendy.problems import theophylline

    df = theophylline()
    assert len(df) == 132 and sorted(df["subject"].unique()) == list(range(1, 13))
    s1 = df[df["subject"] == 1]
    assert s1["time"].tolist()[:4] == [0.0, 0.25, 0.57, 1.12]
    assert s1["conc"].tolist()[-3:] == [6.89, 5.94, 3.28]
    assert float(s1["dose"].iloc[0]) == 4.02 and float(s1["weight"].iloc[0]) == 79.6
    assert "Boeckmann" in df.attrs["source"]


def test_lynx_hare_data_set():
    """The shipped pelts are the published table (first, peak and last years)."""
    from pymc_wendy.problems import lynx_hare

    df = lynx_hare()
    assert df.columns.tolist() == ["year", "hare", "lynx"] and df["year"].tolist()[-1] == 1920
    assert df.iloc[0, 1:].tolist() == [30.0, 4.0] and df.iloc[4, 1:].tolist() == [36.3, 59.4]
    assert df.iloc[-1, 1:].tolist() == [24.7, 8.6] and "Hudson" in df.attrs["source"]
    assert df["hare"].sum() == pytest.approx(715.7) and df["lynx"].sum() == pytest.approx(423.5)


def test_boarding_school_data_set():
    """The shipped counts are the published ones (first, peak, last and the total)."""
    from pymc_wendy.problems import boarding_school

    df = boarding_school()
    assert df.columns.tolist() == ["day", "in_bed"] and df["day"].tolist() == list(range(1, 15))
    assert df["in_bed"].tolist()[:2] == [3.0, 8.0] and df["in_bed"].max() == 298.0
    assert df["in_bed"].iloc[-1] == 4.0 and df["in_bed"].sum() == 1559.0
    assert df.attrs["pupils"] == 763 and "British Medical Journal" in df.attrs["source"]


def test_problem_with_unobserved_states_simulates_the_observed_ones():
    """Noise only on the observed state, at its own scale (the gut's doses in mg must not set
    it); the unobserved state is NaN in U and its truth stays in U_true."""
    prob = get_problem("pk_oral_doses")
    d = prob.simulate(noise_ratio=0.05, seed=1)
    assert np.all(np.isnan(d.U[:, 0])) and np.isnan(d.sigma[0])
    c = d.U_true[:, 1]
    assert d.sigma[1] == pytest.approx(0.05 * np.sqrt(np.mean(c**2)))
    assert np.all(np.isfinite(d.U[:, 1])) and np.all(d.U_true[:, 0] >= 0)
    resid = d.U[:, 1] - c
    assert 0.7 * d.sigma[1] < np.std(resid) < 1.3 * d.sigma[1]  # 97 draws: sd within ~15 %
