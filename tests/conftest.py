"""Helpers shared by the test files.

Plain functions rather than fixtures, since the tests call them with their own functions and
points: ``from conftest import central_differences, relative_error`` (``tests/`` has no
``__init__.py``, so pytest puts it on ``sys.path`` and this module is importable by name).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

# PyMC's rich progress bars bind ``sys.stderr`` when this module is first imported
# (``from sys import stderr``). Imported first inside a test that uses ``capsys``, they keep
# that test's capture stream, and every later progress bar writes to a closed file.
import pymc.progress_bar.rich_progress  # noqa: E402, F401
import pytest


def central_differences(
    fun: Callable, x: np.ndarray, rel_step: float = 1e-5, floor: float = 1e-3
) -> np.ndarray:
    """Central-difference derivative of ``fun`` at ``x``, one column per entry of ``x``.

    The step along ``x_j`` is ``h_j = rel_step * max(|x_j|, floor)``: relative for large
    entries, ``rel_step * floor`` near zero (``floor=0`` makes every step relative). The
    error is ``O(h^2)`` plus round-off of order ``eps |fun| / h``.

    Parameters
    ----------
    fun : callable
        ``fun(x)``, scalar or array valued.
    x : ndarray, shape (n,)
        The point, a float array.
    rel_step : float
        Step relative to ``|x_j|``.
    floor : float
        Smallest ``|x_j|`` the step is taken relative to.

    Returns
    -------
    ndarray, shape ``np.shape(fun(x)) + (n,)``
        ``[..., j]`` is the derivative along ``x_j``: the gradient of a scalar ``fun``, the
        Jacobian of a vector one (rows the outputs).
    """
    cols = []
    for j in range(x.size):
        h = rel_step * max(abs(x[j]), floor)
        e = np.zeros_like(x)
        e[j] = h
        cols.append((np.asarray(fun(x + e)) - np.asarray(fun(x - e))) / (2 * h))
    return np.stack(cols, axis=-1)


def relative_error(a, b) -> float:
    """``||a - b|| / ||b||``, the Euclidean norms over all entries."""
    return np.linalg.norm(np.ravel(a - b)) / np.linalg.norm(np.ravel(b))


def run_twice_with_cache(script: str, cache_dir) -> list[list[str]]:
    """Run ``script`` in two fresh Python processes sharing the disk cache ``cache_dir``
    (``PYMC_WENDY_CACHE_DIR``); each run's standard output, split on white space."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYMC_WENDY_CACHE_DIR": str(cache_dir)}
    return [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]


#: the drift model's noise level and prior sds (:func:`drift_posterior`)
DRIFT_SIGMA, DRIFT_A_SD, DRIFT_U0_SD = 0.2, 10.0, 5.0


def drift_posterior():
    """``u' = a``, 41 points on [0, 2], the noise level known: the forward solution ``u0 + a t``
    is linear in ``(a, u0)``, so with Gaussian priors (``a`` sd :data:`DRIFT_A_SD`, ``u0`` sd
    :data:`DRIFT_U0_SD`) the exact posterior is Gaussian in closed form.

    Returns ``(model, weak idata, exact mean of (a, u0), exact covariance)``; the weak
    posterior from ``pw.sample`` (2 x 1000 draws)."""
    import pymc as pm

    import pymc_wendy as pw

    ode = pw.ODEModel(lambda t, u, p: [p[0]], states=["u"], params=["a"])
    rng = np.random.default_rng(3)
    t = np.linspace(0.0, 2.0, 41)
    y = 0.7 - 1.3 * t + DRIFT_SIGMA * rng.standard_normal(t.size)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, DRIFT_A_SD)
        pw.WeakODELikelihood(
            "U", ode=ode, params=[a], sigma=[DRIFT_SIGMA], t=t, observed=y[:, None]
        )
        idata = pw.sample(1000, chains=2, progressbar=False, random_seed=5, check=False)
    X = np.column_stack([t, np.ones_like(t)])
    precision = X.T @ X / DRIFT_SIGMA**2 + np.diag([DRIFT_A_SD**-2, DRIFT_U0_SD**-2])
    cov = np.linalg.inv(precision)
    return model, idata, cov @ (X.T @ y / DRIFT_SIGMA**2), cov


# --- a warning that no test asked for fails the run ----------------------------------------
# A test asks for a warning with ``pytest.warns``, ``warnings.catch_warnings`` or a
# ``filterwarnings`` mark (pyproject.toml lists the few that come from the environment, not
# from this library). Anything else is a defect of the library (a warning a user would see
# for no reason) or of a test (a case that should say what it expects), so the run fails
# and names it, instead of printing it among dozens of others.
_UNASKED: list[str] = []


def pytest_warning_recorded(warning_message, when, nodeid, location):
    where = nodeid or (f"{location[0]}:{location[1]}" if location else when)
    _UNASKED.append(f"{where}: {warning_message.category.__name__}: {warning_message.message}")


def pytest_sessionfinish(session, exitstatus):
    _store_durations(session)
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: its warnings are reported to the controller
    if _UNASKED and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _UNASKED and not hasattr(config, "workerinput"):
        terminalreporter.section("warnings that no test asked for (they fail the run)")
        for line in dict.fromkeys(_UNASKED):
            terminalreporter.line(line.splitlines()[0][:300])


# --- which tests must share a pytest-xdist worker, and which start first ------------------
# ``--dist loadgroup`` (pyproject.toml) sends each group of tests to one worker and the groups
# to whichever worker is free. Tests that share a fixture wider than a function (a sampled
# posterior, a coverage study) must run in one worker, or each worker computes it again: they
# are grouped by their module and by the parameters of those fixtures (so the three grids of
# a parametrized study go to three workers). Every other test is a group of its own. The slow
# tier is mostly long single tests (notebooks, documentation pages, samplers); grouping them
# by file, as ``--dist loadfile`` did, left one worker running a file's hour of tests while
# the other idled (CI of 2026-11-29: 121 % CPU on 2 cores, over 78 min).
#
# The groups are queued longest first (``--no-loadscope-reorder`` keeps this order), by the
# durations measured in an earlier run (``tests/durations.json``; unknown tests count as 1 s):
# with two workers, a 15-minute test that starts last ends the run 15 minutes late. Refresh the
# file with ``PYMC_WENDY_STORE_DURATIONS=1 python -m pytest -m slow`` (and the default tier).

DURATIONS = Path(__file__).with_name("durations.json")
_MEASURED: dict[str, float] = {}


def _shared_scope_key(item) -> str | None:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    # a direct parametrization argument is a pseudo-fixture of the parametrization's scope:
    # not shared state (its values would make every test a group of its own)
    shared = [
        name
        for name, defs in info.name2fixturedefs.items()
        if defs
        and defs[-1].scope != "function"
        and getattr(defs[-1].func, "__name__", "") != "get_direct_param_fixture_func"
    ]
    if not shared:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    key = [f"{name}={params[name]!r}" for name in sorted(shared) if name in params]
    return "::".join([item.module.__name__, *key])


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist appends the group to the node id
def pytest_collection_modifyitems(config, items):
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    cost: dict[str, float] = {}
    group_of = {}
    for item in items:
        group = item.get_closest_marker("xdist_group")
        if group is None:
            name = _shared_scope_key(item) or item.nodeid
            # pytest-xdist reads the group after the last "@" only if no "]" follows it
            name = name.translate(str.maketrans("[]@", "()_"))
            item.add_marker(pytest.mark.xdist_group(name))
        else:
            name = group.args[0] if group.args else group.kwargs.get("name", "default")
        group_of[item.nodeid] = name
        cost[name] = cost.get(name, 0.0) + float(known.get(item.nodeid, 1.0))
    items.sort(key=lambda item: -cost[group_of[item.nodeid]])  # stable within a group


def pytest_runtest_logreport(report):
    if os.environ.get("PYMC_WENDY_STORE_DURATIONS"):
        nodeid = report.nodeid.split("@")[0]
        _MEASURED[nodeid] = _MEASURED.get(nodeid, 0.0) + report.duration


def _store_durations(session) -> None:
    if not _MEASURED or hasattr(session.config, "workerinput"):
        return
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    known.update({k: round(v, 1) for k, v in _MEASURED.items()})
    DURATIONS.write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n")
