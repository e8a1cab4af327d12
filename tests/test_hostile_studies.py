"""Hostile input to coverage studies (issue 33, item 9): damaged stores and command lines, and
a study killed with ``kill -9``. Each must give a clear error or a warning, never a crash deep
inside or a silent wrong answer."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from pymc_wendy.cli import main
from pymc_wendy.studies import coverage as cov
from pymc_wendy.studies.coverage import pool as cov_pool

STUDY = {
    "methods": ["wls"],
    "noise_ratios": [0.1],
    "n_points": [65],
    "n_datasets": 2,
    "max_workers": 1,
    "progress": False,
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-run study's store, to be copied and damaged."""
    store = tmp_path_factory.mktemp("finished")
    cov.run_coverage("logistic", store=store, **STUDY)
    return store


@pytest.fixture
def store(finished, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(finished, copy)
    return copy


@pytest.fixture
def runs(monkeypatch):
    """The keys of the runs a study executes."""
    ran: list[str] = []
    real = cov_pool.run_task
    monkeypatch.setattr(cov_pool, "run_task", lambda t: (ran.append(t.key), real(t))[1])
    return ran


def _append(store: Path, line: bytes) -> None:
    with (store / "runs.jsonl").open("ab") as fh:
        fh.write(line + b"\n")


def test_undecodable_line_is_skipped_with_a_warning(store, runs, capsys):
    _append(store, b'{"key": "wls|0.1|65|0", "message": "\xff\xfe"}')
    with pytest.warns(RuntimeWarning, match="line 3: not UTF-8 text"):
        ds = cov.run_coverage("logistic", store=store, **STUDY)
    assert runs == [] and ds.attrs["n_done"] == 2  # the other lines are kept
    # the resumed study moved the line aside: it is kept, and reading the store is quiet
    assert (store / "runs.damaged.jsonl").read_bytes().startswith(b'{"key": "wls|0.1|65|0"')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["coverage", "--report", "--store", str(store)]) == 0
    assert capsys.readouterr().out.startswith("2 of 2 runs stored")
    # a store that is only read (never resumed) keeps its damaged line and warns each time
    _append(store, b"\xff")
    with pytest.warns(RuntimeWarning, match="line 3: not UTF-8"):
        assert main(["coverage", "--report", "--store", str(store)]) == 0


@pytest.mark.parametrize(
    "line",
    [
        b"null",
        b"3",
        b"[]",
        b'"wls|0.1|65|0"',
        b'{"key": "wls|0.1|65|0"}',  # fields missing
        b'{"a": 1}',
        # a run's fields with the wrong types, or estimates for another number of parameters
        b'{"key": "wls|0.1|65|1", "estimator": "wls", "noise_ratio": 0.1, "n_points": 65, '
        b'"dataset": true, "estimate": [1, 1], "intervals": {}, "success": true, "message": ""}',
        b'{"key": "wls|0.1|65|1", "estimator": "wls", "noise_ratio": 0.1, "n_points": 65, '
        b'"dataset": 1, "estimate": [1, 1, 1], "intervals": {}, "success": true, "message": ""}',
        b'{"key": "wls|0.1|65|1", "estimator": "wls", "noise_ratio": 0.1, "n_points": 65, '
        b'"dataset": 1, "estimate": [1, 1], "intervals": {"gls": [0, 2]}, "success": true, '
        b'"message": ""}',
    ],
)
def test_json_line_that_is_not_a_run_is_skipped(store, runs, line):
    _append(store, line)
    with pytest.warns(
        RuntimeWarning, match="line 3: .*(not a run record|no |wrong type|for 2|pairs)"
    ):
        ds = cov.run_coverage("logistic", store=store, **STUDY)
    assert runs == [] and ds.attrs["n_done"] == 2 and bool(ds["success"].all())
    assert (store / "runs.damaged.jsonl").read_bytes() == line + b"\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the line was moved aside: no warning again
        opened = cov.open_coverage(store)
    assert opened.attrs["n_done"] == 2


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b'{"problem": "logis', "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"problem": "logistic"}', "no p_true"),
    ],
)
def test_damaged_study_json_names_the_file(store, text, why):
    (store / "study.json").write_bytes(text)
    message = f"study.json' is damaged \\(.*{why}.*delete the store"
    with pytest.raises(ValueError, match=message):
        cov.run_coverage("logistic", store=store, **STUDY)
    with pytest.raises(ValueError, match=message):
        cov.open_coverage(store)


def test_runs_without_study_json_are_refused(store, runs):
    # the runs record their data seeds but not the problem, level or options that made them,
    # so the study cannot be rebuilt and checked: another seed must not reuse them
    (store / "study.json").unlink()
    with pytest.raises(ValueError, match="holds runs .* but no study.json"):
        cov.run_coverage("logistic", store=store, seed=5, **STUDY)
    assert runs == [] and not (store / "study.json").exists()
    with pytest.raises(FileNotFoundError, match="put its study.json back"):
        cov.open_coverage(store)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--noise", ""),
        ("--noise", "0.1,,0.2"),
        ("--noise", "-0.1"),
        ("--noise", "nan"),
        ("--points", "100.7"),
        ("--points", ""),
        ("--points", "0"),
        ("--methods", ""),
        ("--methods", "mle,bogus"),
        ("--datasets", "0"),
        ("--workers", "0"),
        ("--level", "1.5"),
        ("--seed", "-1"),
    ],
)
def test_command_line_lists_are_parsed_strictly(option, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["coverage", f"{option}={value}", "--datasets", "1"])
    assert exit_.value.code == 2
    assert f"argument {option}:" in capsys.readouterr().err


def test_fractional_counts_are_refused_by_run_coverage():
    with pytest.raises(ValueError, match="n_points must be a whole number; got 100.7"):
        cov.run_coverage("logistic", **{**STUDY, "n_points": [100.7]})
    with pytest.raises(ValueError, match="n_datasets must be a whole number"):
        cov.run_coverage("logistic", **{**STUDY, "n_datasets": 2.5})


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_workers_end_when_the_study_is_killed(tmp_path):
    store = tmp_path / "store"
    args = ["coverage", "--methods", "wls", "--noise", "0.1", "--points", "65",
            "--datasets", "2000", "--workers", "2", "--store", str(store)]  # fmt: skip
    study = subprocess.Popen(
        [sys.executable, "-m", "pymc_wendy.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 180  # imports in three processes on a busy machine
        runs = store / "runs.jsonl"
        while not (runs.exists() and runs.stat().st_size):  # the workers are working
            assert study.poll() is None and time.monotonic() < deadline, "the study did not run"
            time.sleep(0.1)
        kids = _children(study.pid)  # the two workers and multiprocessing's resource tracker
        assert len(kids) >= 2
        os.kill(study.pid, signal.SIGKILL)
        study.wait()
        deadline = time.monotonic() + 5
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [k for k in kids if _alive(k)], "processes outlived the killed study"
    finally:
        study.kill()
        for k in kids:
            if _alive(k):
                os.kill(k, signal.SIGKILL)


def test_command_line_study_errors_are_messages_not_tracebacks(finished, tmp_path, capsys):
    """A store that does not exist, or holds another study, ends the command with a one-line
    error naming the store (exit 1), not a traceback."""
    assert main(["coverage", "--report", "--store", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pymc-wendy coverage: error:") and "nowhere" in err
    assert "Traceback" not in err
    store = tmp_path / "copy"
    shutil.copytree(finished, store)
    argv = ["coverage", "--methods", "wls", "--noise", "0.1", "--points", "65", "--seed", "5"]
    assert main([*argv, "--store", str(store), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "different settings" in err and str(store) in err
