"""The README's example and the CLI demo run as documented."""

import re
from pathlib import Path

import numpy as np

from pymc_wendy.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_recovers_lotka_volterra(capsys):
    code = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102
    res = namespace["res"]
    assert res.success
    np.testing.assert_allclose(res.x, [3, -1, -6, 1], rtol=0.1)


def test_cli_demo_runs_and_reports(capsys):
    assert main(["demo", "--problem", "lotka_volterra", "--points", "257"]) == 0
    out = capsys.readouterr().out
    assert "WENDy-MLE" in out and "intervals cover the truth" in out
