"""The CLI demo runs as documented (what the README's and the pages' blocks show is checked
in test_doc_blocks.py, on the one run of their blocks)."""

import pytest

from pymc_wendy.cli import main


def test_cli_demo_runs_and_reports(capsys, tmp_path):
    plot = tmp_path / "demo.png"
    args = ["demo", "--problem", "lotka_volterra", "--points", "129", "--draws", "300"]
    args += ["--tune", "300", "--chains", "2", "--output", str(plot)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "MAP" in out and "true values inside their 95 % credible intervals" in out
    assert "local test functions" in out and "check against the exact" in out
    assert plot.stat().st_size > 10_000


@pytest.mark.slow
def test_cli_demo_of_a_dosed_model_with_a_hidden_state(capsys, tmp_path):
    """Issue 54: ``pk_oral_doses`` observes C, not the gut, and the demo exited 1 ("every
    time point has a missing entry"). It fits the input-output equation from rest, checks
    and corrects through the latent model, and compares with the nearest flip-flop twin."""
    plot = tmp_path / "demo.png"
    args = ["demo", "--problem", "pk_oral_doses", "--points", "129", "--draws", "300"]
    args += ["--tune", "300", "--chains", "2", "--output", str(plot)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "up to 2 equivalent vectors" in out
    assert "3/3 true values inside their 95 % credible intervals" in out
    assert plot.stat().st_size > 10_000


@pytest.mark.slow
def test_cli_demo_of_goodwin_2d_finds_the_truth(capsys, tmp_path):
    """Under N(0, 10) priors (``p1 = 72`` 7 prior sds out) the demo's MAP was a spurious mode
    (``p1 = -61``), 1 of 5 truths was covered, the check could not verify the weak posterior,
    and the demo exited 0. Priors from the problem's box (log-normal: it is positive), and
    exit 1 for a weak posterior the check did not pass; measured 5/5 in 18 s."""
    assert main(["demo", "--problem", "goodwin_2d", "--output", str(tmp_path / "g.png")]) == 0
    out = capsys.readouterr().out
    assert "log-normal priors around the box's geometric centre" in out
    assert "5/5 true values inside their 95 % credible intervals" in out


@pytest.mark.slow
def test_cli_demo_of_a_nonlinear_model_with_hidden_states(capsys):
    """Issue 57: ``sir`` observes I only; the demo exited 1 ("nonlinear"). The likelihood
    eliminates S (and drops R), the check finds the weak posterior off, the exact stage
    corrects it on every row (the tail where I <= 0 too, which the weak form leaves out)."""
    from pymc_wendy.model.data import MissingDataWarning

    args = ["demo", "--problem", "sir", "--points", "121", "--draws", "300", "--chains", "2"]
    with pytest.warns(MissingDataWarning, match=r"outside the domain.*log\(I\)"):
        assert main([*args, "--tune", "300", "--output", ""]) == 0
    out = capsys.readouterr().out
    assert "2/2 true values inside their 95 % credible intervals" in out
