"""The command line (``pymc-wendy``): fast start-up (nothing heavy imported before parsing),
``--version``, help with defaults and valid values, one-line errors with the documented exit
codes; and two library fixes found through it: ``run_coverage`` from a script without a
``__main__`` guard, and overflowing sensitivity solves.

Nothing here samples; the command-line tests of studies that run are in ``test_coverage.py``
and ``test_hostile_studies.py``, the demo's in ``test_docs.py``. Start-up *times* are measured
by ``benchmarks/cli_startup.py``, not here.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from pymc_wendy import cli
from pymc_wendy.cli import main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "scipy", "sympy", "numba", "pytensor", "pymc", "arviz", "xarray", "pandas")


def _run_python(code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


# --- start-up: nothing heavy before the arguments are parsed ---------------------------------


@pytest.mark.parametrize(
    "argv", [["--help"], ["--version"], ["coverage", "--help"], ["coverage", "--methods", "x"]]
)
def test_parsing_imports_nothing_heavy(argv):
    code = f"""
        import sys
        from pymc_wendy.cli import main
        try:
            main(sys.argv[1:])
        except SystemExit as exc:
            code = exc.code
        print(code, [m for m in {HEAVY!r} if m in sys.modules])
        """
    done = _run_python(code, *argv)
    assert done.returncode == 0, done.stderr
    exit_code, heavy = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert heavy == "[]", f"{argv} imported {heavy}"
    assert exit_code == ("2" if "x" in argv else "0")


def test_package_namespace_is_loaded_on_first_use():
    done = _run_python(
        """
        import sys
        import pymc_wendy as pw
        before = "pymc" in sys.modules
        from pymc_wendy import fit  # the first name asked for loads the API
        assert fit is pw.fit and pw.weak.bias is pw.bias and "estimators" in vars(pw)
        print(before, "pymc" in sys.modules, sorted(dir(pw)) == sorted(pw.__all__))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


def test_lazy_imports_are_the_type_checking_imports():
    """``__init__``'s ``TYPE_CHECKING`` block (for static tools) and ``_EXPORTS`` (run time)
    import the same names from the same subpackages."""
    import pymc_wendy

    tree = ast.parse((ROOT / "pymc_wendy" / "__init__.py").read_text())
    static = next(n for n in tree.body if isinstance(n, ast.If))
    imported = {
        (n.module, a.name)
        for n in ast.walk(static)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    exports = pymc_wendy._EXPORTS
    assert imported == {(module, name) for module, names in exports.items() for name in names}
    assert {name for _, name in imported} | {"estimators"} == set(pymc_wendy.__all__)


# --- version, help, valid values -------------------------------------------------------------


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"pymc-wendy {importlib.metadata.version('pymc-wendy')}\n"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_shows_its_default():
    parser = cli._parser()
    commands = _subparsers(parser)
    assert set(commands) == {"demo", "coverage"}
    missing = [
        f"{name} {action.option_strings[0]}"
        for name, p in [("pymc-wendy", parser), *commands.items()]
        for action in p._actions
        if action.option_strings
        and action.dest not in ("help", "version")
        and "(default: " not in (action.help or "")
    ]
    assert not missing, missing
    help_text = commands["coverage"].format_help()
    assert "(default: mle-hessian,mle-sandwich)" in help_text
    assert "(default: logistic)" in help_text and "pk_two_compartment" in help_text


def test_listed_names_are_the_librarys():
    """The names the command line lists without importing the library are its names."""
    from pymc_wendy.estimators import registry
    from pymc_wendy.problems import list_problems
    from pymc_wendy.studies.coverage import methods
    from pymc_wendy.weak.bias import BIAS_CORRECTIONS

    assert cli._PROBLEMS == tuple(list_problems())
    assert cli._ESTIMATORS == {name: registry.kinds(name) for name in registry.names()}
    assert cli._BAYES == methods.BAYES
    assert cli._CORRECTABLE == methods._CORRECTABLE
    assert set(cli._CORRECTIONS) == {*BIAS_CORRECTIONS, "auto"}


def _library_accepts(name: str) -> bool:
    from pymc_wendy.studies.coverage.methods import parse_methods

    try:
        parse_methods([name])
    except ValueError:
        return False
    return True


def _cli_accepts(name: str) -> bool:
    try:
        cli._method(name)
    except argparse.ArgumentTypeError:
        return False
    return True


def test_method_check_is_the_librarys():
    kinds = sorted({k for ks in cli._ESTIMATORS.values() for k in ks} | {"bogus"})
    bases = [*cli._ESTIMATORS, *cli._BAYES, "bogus"]
    corrections = ["", "+", "+bogus", *(f"+{c}" for c in cli._CORRECTIONS)]
    names = [
        f"{b}{c}{k}" for b in bases for c in corrections for k in ["", *(f"-{k}" for k in kinds)]
    ]
    names += ["MLE-Sandwich", "nuts+ANALYTIC"]
    differ = [n for n in names if _cli_accepts(n) != _library_accepts(n)]
    assert not differ, differ
    assert _cli_accepts("mle+auto-sandwich") and not _cli_accepts("nuts-hessian")


def test_invalid_method_is_a_usage_error_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["coverage", "--methods", "mle,bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: pymc-wendy coverage")
    message = err[-1]
    assert message.startswith("pymc-wendy coverage: error: argument --methods: invalid method")
    assert "'bogus'" in message
    for name in [*cli._ESTIMATORS, *cli._BAYES, "sandwich", "analytic"]:
        assert name in message


def test_invalid_problem_is_a_usage_error_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--problem", "lorentz"])
    assert exit_.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --problem: invalid choice: 'lorentz'" in message and "'lorenz'" in message


# --- exit codes and errors -------------------------------------------------------------------


def _documented_codes(text: str) -> set[int]:
    return {int(c) for c in re.findall(r"^\s*\|?\s*(\d+)\s*(?:\||\s{2,})", text, re.M)}


def test_exit_codes_are_documented_in_help_and_readme(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    codes = {cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_INTERRUPTED}
    assert codes == {0, 1, 2, 130}
    epilog = help_text.split("exit codes:")[1]
    assert _documented_codes(epilog) == codes
    assert "R-hat not below" in epilog and "divergence" in epilog
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Command line")[1].split("\n## ")[0]
    assert _documented_codes(section) == codes
    assert "R-hat" in section and "--debug" in section and "--store" in section


def test_library_error_is_one_line_with_exit_code_1(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["coverage", "--report", "--store", str(missing)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith("pymc-wendy coverage: error: ") and str(missing) in err


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(tmp_path, capsys, where):
    args = ["coverage", "--report", "--store", str(tmp_path / "nowhere")]
    argv = ["--debug", *args] if where == "before" else [*args, "--debug"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "FileNotFoundError" in err and "open_coverage" in err
    assert err.splitlines()[-1].startswith("pymc-wendy coverage: error: ")


def test_demo_errors_are_one_line_too(monkeypatch, capsys):
    def fails(*args, **kwargs):
        raise ValueError("n_points must be at least 9;\n  got 3")

    monkeypatch.setattr(cli, "demo", fails)
    assert main(["demo"]) == 1
    assert capsys.readouterr().err == "pymc-wendy demo: error: n_points must be at least 9; got 3\n"


def test_demo_output_that_cannot_be_written_fails_before_sampling(tmp_path, capsys, monkeypatch):
    """Issue 54, defect 11: the error came after a minute of sampling."""
    from pymc_wendy.problems import catalogue

    def no_simulation(*args, **kwargs):  # reached only if the output was not checked first
        raise AssertionError("the demo simulated data before checking --output")

    monkeypatch.setattr(catalogue.Problem, "simulate", no_simulation)
    missing = tmp_path / "no" / "such" / "folder" / "demo.png"
    assert main(["demo", "--output", str(missing)]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and str(missing) in err
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):  # root ignores the mode: nothing to refuse then
            assert main(["demo", "--output", str(locked / "demo.png")]) == 1
            assert "cannot write there" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)


def test_a_bug_keeps_its_traceback(monkeypatch):
    monkeypatch.setattr(cli, "demo", lambda *a, **k: {}["missing"])
    with pytest.raises(KeyError):
        main(["demo"])


def test_interrupt_exits_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "demo", interrupted)
    assert main(["demo"]) == 130
    assert capsys.readouterr().err == "pymc-wendy demo: interrupted\n"
    monkeypatch.setattr(cli, "_run_study", interrupted)
    assert main(["coverage", "--store", "s"]) == 130
    assert (
        capsys.readouterr().err == "pymc-wendy coverage: interrupted; the finished runs are in s\n"
    )


# --- coverage without --store ----------------------------------------------------------------

SMALL_STUDY = ["coverage", "--methods", "wls", "--noise", "0.1", "--points", "65",
               "--datasets", "1", "--workers", "1"]  # fmt: skip


def test_coverage_without_store_warns_that_nothing_is_kept(capsys):
    assert main(SMALL_STUDY) == 0
    captured = capsys.readouterr()
    warning = [ln for ln in captured.err.splitlines() if "warning" in ln]
    assert warning == [
        "pymc-wendy coverage: warning: without --store the finished runs are not kept (an "
        "interrupted study starts again from nothing); keep them, and resume, with --store DIR"
    ]
    assert "wls-sandwich" in captured.out


def test_coverage_with_store_does_not_warn(tmp_path, capsys):
    assert main([*SMALL_STUDY, "--store", str(tmp_path / "s")]) == 0
    assert "warning" not in capsys.readouterr().err


# --- run_coverage from a script without `if __name__ == "__main__":` --------------------------

PLAIN_SCRIPT = """\
import pymc_wendy as pw

ds = pw.run_coverage("logistic", methods=["wls"], noise_ratios=[0.1], n_points=[65],
                     n_datasets=2, max_workers=2, progress=False)
print("finished", ds.attrs["n_done"])
"""


def test_run_coverage_in_a_script_without_main_guard_says_so(tmp_path):
    """Each "spawn" worker runs the main script again: without the guard every worker would
    start the study again and die, and the study end in BrokenProcessPool."""
    script = tmp_path / "study.py"
    script.write_text(PLAIN_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1 and "finished" not in done.stdout
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("RuntimeError: run_coverage's worker processes")
    assert f"{script} again" in message and "its line 3 is not under" in message
    assert 'if __name__ == "__main__":' in message and "max_workers=1" in message
    # refused before any worker started
    assert "BrokenProcessPool:" not in done.stderr and "bootstrapping" not in done.stderr


GUARDED = """\
import pymc_wendy as pw

def main():
    pw.run_coverage("logistic")

if __name__ == "__main__":
    main()
elif True:
    pw.run_coverage("logistic")
if "__main__" == __name__ and pw:
    pw.run_coverage("logistic")
"""


@pytest.mark.parametrize(
    ("line", "guarded"), [(1, False), (4, False), (7, True), (9, False), (11, True)]
)
def test_main_guard_is_found(line, guarded):
    from pymc_wendy.studies.coverage import pool

    assert pool._under_main_guard(ast.parse(GUARDED), line) is guarded


def test_no_guard_needed_without_a_main_script():
    """``python -c`` (and the interactive interpreter, notebooks): nothing runs again."""
    done = _run_python(
        """
        from pymc_wendy.studies.coverage import pool
        print(pool._unguarded_call())
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


# --- overflow in output error's sensitivity solves -------------------------------------------


def test_diverging_sensitivity_solve_is_a_failed_solve_not_a_warning():
    """pk_iv_doses with ke = -60: the concentration grows like exp(60 t) and overflows by
    t = 12 h. The sensitivity solve (operator path: a model with inputs) reports a diverged
    solve, which output error counts as a failed trial, and no numpy overflow warning."""
    from pymc_wendy.estimators import output_error as oe
    from pymc_wendy.model.simulate import SimulationError
    from pymc_wendy.problems import get_problem

    prob = get_problem("pk_iv_doses")
    data = prob.simulate(n_points=129, noise_ratio=0.1, seed=0)
    Z = data.U
    problem = oe._Problem(
        prob.model, data.t, Z, False, np.ones(Z.shape[1]), dict(oe.DEFAULT_SOLVER), prob.inputs
    )
    theta = np.array([-60.0, -700.0, -0.1])  # (ke, V, u0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        residual = problem.residual(theta)
        assert problem.n_failed == 1 and np.all(residual == oe._FAILED_RESIDUAL)
        y0 = np.array([-0.1, 0.0, 0.0, 1.0])  # the state, its sensitivities to (ke, V, u0)
        with pytest.raises(SimulationError, match=r"diverge \(overflow\) at t = "):
            problem._integrate(theta[:2], y0)
        # the truth solves as before
        assert np.abs(problem.residual(np.r_[prob.p_true, prob.u0])).max() < 10 * Z.std()
    assert problem.n_failed == 1


def test_coverage_whose_every_run_failed_exits_1_with_the_reason(tmp_path, capsys):
    """``pk_oral_doses`` leaves its gut unobserved, which a study of the latent model cannot
    fit: every run fails. Before, the all-NaN table exited 0 with the reason only in the
    store (issue 54, defect 10)."""
    argv = ["coverage", "--problem", "pk_oral_doses", "--methods", "wls", "--noise", "0.1",
            "--points", "65", "--datasets", "2", "--workers", "1",
            "--store", str(tmp_path / "s")]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("pymc-wendy coverage: error: 2 of 2 finished runs failed")
    assert "missing" in err  # the reason the store holds


@pytest.mark.parametrize(
    ("verdict", "passes"),
    [("agrees", True), ("skipped", True), ("differs", False), ("failed", False)],
)
def test_demo_fails_when_its_result_is_a_weak_posterior_the_check_did_not_pass(
    verdict, passes, capsys
):
    # Goodwin 2D from the prior's centre: NUTS mixed well around a spurious mode (1 of 5
    # truths covered), the check could not verify it ("failed"), and the demo exited 0
    import arviz as az
    import xarray as xr

    rng = np.random.default_rng(0)
    idata = az.from_dict(
        {"posterior": {"p": rng.standard_normal((4, 200, 2))},
         "sample_stats": {"diverging": np.zeros((4, 200), dtype=bool)}},
    )  # fmt: skip
    check = xr.Dataset(attrs={"verdict": verdict, "note": "", "time_s": 0.1})
    idata["weak_check"] = xr.DataTree(check)
    assert cli._print_sampling(idata, 4, 200, 300, 10.0) is passes
    assert ("does not pass" in capsys.readouterr().out) is not passes
