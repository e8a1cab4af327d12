"""Start-up time of the command line: ``pymc-wendy --help`` against ``python -c pass``.

Each command runs in a fresh subprocess (as a user's shell runs it) ``--repeats`` times; the
script prints the median and range of the wall times of each, and their difference: what the
command line itself costs on top of the interpreter, measured in the same run so that the load
of the machine affects both alike. The command line imports nothing heavy (pymc, pytensor,
numba, arviz) before parsing its arguments, so ``--help``, ``--version`` and argument errors
stay well under half a second.

Run:  python benchmarks/cli_startup.py [--repeats 5] [--args="--version"]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _wall_times(command: list[str], repeats: int) -> list[float]:
    """Wall time of ``command`` in a fresh process, ``repeats`` times. Its exit code must be 0
    (``--help``, ``--version``) or 2 (an argument error, also worth timing)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, cwd=ROOT, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 2):
            raise SystemExit(f"{shlex.join(command)} failed: {done.stderr.decode()[-500:]}")
    return times


def _line(label: str, times: list[float], width: int) -> str:
    return (
        f"{label:<{width}} median {statistics.median(times):6.3f} s  "
        f"(min {min(times):.3f}, max {max(times):.3f}, n = {len(times)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command")
    parser.add_argument("--args", default="--help", help="the command line's arguments")
    args = parser.parse_args(argv)
    # the entry point's own script when installed (what a user types), else the module
    script = Path(sys.executable).with_name("pymc-wendy")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "pymc_wendy.cli"]
    cli += shlex.split(args.args)
    reference = [sys.executable, "-c", "pass"]
    _wall_times(cli, 1)  # warm the file cache and write the bytecode once
    ref, ours = _wall_times(reference, args.repeats), _wall_times(cli, args.repeats)
    print(f"python {sys.version.split()[0]}; load {os.getloadavg()[0]:.2f} (1 min)")
    labels = ("python -c pass", f"pymc-wendy {args.args}")
    width = max(map(len, labels)) + 2
    print(_line(labels[0], ref, width))
    print(_line(labels[1], ours, width))
    extra = statistics.median(ours) - statistics.median(ref)
    print(f"the command line's own start-up: {extra:.3f} s over the interpreter's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
