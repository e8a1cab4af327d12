"""``benchmarks/peers.py --quick``: ours against numpyro + diffrax, one line per case.

Needs the ``peers`` extra (jax, numpyro, diffrax) and is skipped at once without it, as in the
default environment and in CI. With the extra it runs in the slow tier: ``--quick`` samples each
case once per sampler under a time budget, 1-3 minutes on two idle cores, but its budget for
our sampler ran out (150 s) in a default-tier run with cold compilation caches and the other
worker busy.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "peers.py"
CASES = ("fhn", "lv", "lorenz")


def _missing() -> list[str]:
    return [m for m in ("jax", "numpyro", "diffrax") if importlib.util.find_spec(m) is None]


@pytest.mark.slow
def test_quick_prints_one_ratio_per_case(tmp_path):
    missing = _missing()
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not installed: install the peers extra "
            "(pip install -e '.[peers]') to compare against numpyro + diffrax"
        )
    out = tmp_path / "peers.json"
    env = {**os.environ, "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", "")}
    if not env["NUMBA_CACHE_DIR"]:
        env.pop("NUMBA_CACHE_DIR")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = proc.stdout.split("== ESS/s, ours against numpyro+diffrax")[-1]
    for case in CASES:
        lines = [ln for ln in summary.splitlines() if ln.startswith(f"{case}:")]
        assert len(lines) == 1, f"{case}: expected one summary line in\n{summary}"
        # a measured ratio, or a bound when numpyro did not finish in its budget
        assert re.search(r"ESS/s ratio (ours/numpyro |> ?)?[0-9.]+", lines[0]), lines[0]
    assert out.exists()
