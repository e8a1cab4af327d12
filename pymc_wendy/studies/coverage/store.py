"""The resumable store of a coverage study: ``study.json`` and ``runs.jsonl`` in a directory.

``study.json`` holds the settings a resumed study must share (:func:`study_config`);
``runs.jsonl`` one finished run per line, appended and flushed as runs complete, so an
interrupted study loses at most the runs in flight (:class:`Store`). Records are plain JSON
(:func:`jsonable`). A line that is not a run record (cut short by a crash, not UTF-8, or not
an object with a run's fields) is skipped with a warning and its run redone; a damaged
``study.json``, or runs without one, is an error naming the file.
"""

from __future__ import annotations

import json
import os
import warnings
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from pymc_wendy.problems.catalogue import Problem

__all__ = ["STORE_VERSION", "Store", "jsonable", "read_config", "study_config"]

#: the layout of ``study.json`` and of the run records
STORE_VERSION = 1


def jsonable(obj):
    """``obj`` with numpy scalars as Python numbers, tuples as lists and NaN as None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None  # JSON has no NaN; read back as NaN
    return obj


class Store:
    """``runs.jsonl`` (one finished run per line, appended and flushed as runs complete) and
    ``study.json`` (the settings a resumed study must share).

    Raises ``ValueError`` when ``study.json`` differs from ``config`` or is damaged
    (:func:`read_config`), and when ``runs.jsonl`` holds runs but ``study.json`` is missing:
    the runs record their data sets' seeds but not the problem, truth, level or options that
    made them, so nothing could check that they belong to this study.
    """

    def __init__(self, path: str | os.PathLike, config: dict):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        cfg_file = self.path / "study.json"
        self.runs_file = self.path / "runs.jsonl"
        if cfg_file.exists():
            old = read_config(self.path)
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            if diff:
                raise ValueError(
                    f"store {str(self.path)!r} holds a study with different settings ({diff}); "
                    "use another store directory, or the same settings to resume"
                )
        elif self.runs_file.exists() and self.runs_file.stat().st_size:
            raise ValueError(
                f"store {str(self.path)!r} holds runs ({self.runs_file.name}) but no study.json "
                "recording the settings that made them, so they cannot be checked against this "
                "study: put study.json back, or use another store directory (or move "
                f"{self.runs_file.name} away) to start afresh"
            )
        else:
            _write_atomically(cfg_file, json.dumps(config, indent=1))
        self._n_params = len(config.get("p_true", ())) or None
        self._checked_end = False

    def load(self) -> dict[str, dict]:
        """The finished runs, as :meth:`read` gives them, for a study about to resume.

        Damaged lines are moved out of ``runs.jsonl`` into ``runs.damaged.jsonl`` (appended,
        so nothing is lost) with one warning: the resumed study redoes their runs, and later
        reads of the store do not warn about them again.
        """
        done, good, bad = _scan(self.runs_file, self._n_params)
        if bad:
            damaged = self.path / "runs.damaged.jsonl"
            with damaged.open("ab") as fh:
                fh.writelines(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw in bad)
            text = b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for raw in good)
            _write_atomically(self.runs_file, text.decode("utf-8"))
            self._checked_end = True  # the rewritten file ends with a complete line
            _warn_skipped(self.runs_file, bad, f"they are moved to {damaged.name} and ")
        return done

    @staticmethod
    def read(path: Path, n_params: int | None = None) -> dict[str, dict]:
        """The finished runs in ``path``/runs.jsonl by key (the last record of a key wins).

        Lines that are not run records (cut short by an interruption, not UTF-8, not JSON, or
        JSON without a run's fields or, given ``n_params``, with estimates of another length)
        are skipped with one warning naming them: their runs count as not done.
        """
        runs_file = Path(path) / "runs.jsonl"
        done, _, bad = _scan(runs_file, n_params)
        if bad:
            _warn_skipped(runs_file, bad, "")
        return done

    def append(self, record: dict) -> None:
        if not self._checked_end:  # after a crash mid-line, start a new line
            self._checked_end = True
            if self.runs_file.exists() and self.runs_file.stat().st_size:
                with self.runs_file.open("rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        with self.runs_file.open("a") as out:
                            out.write("\n")
        with self.runs_file.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _scan(runs_file: Path, n_params: int | None) -> tuple[dict, list[bytes], list]:
    """The run records of ``runs_file`` by key, its good lines, and its damaged lines as
    ``(what is wrong, the line)`` pairs, the problem prefixed with the line number."""
    done: dict[str, dict] = {}
    good: list[bytes] = []
    bad: list[tuple[str, bytes]] = []
    if not runs_file.exists():
        return done, good, bad
    with runs_file.open("rb") as fh:  # bytes: one undecodable line must not stop the rest
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            rec, problem = _parse_run(raw, n_params)
            if problem:
                bad.append((f"line {lineno}: {problem}", raw))
            else:
                done[rec["key"]] = rec
                good.append(raw)
    return done, good, bad


def _warn_skipped(runs_file: Path, bad: list, moved: str) -> None:
    shown = "; ".join(problem for problem, _ in bad[:5]) + ("; ..." if len(bad) > 5 else "")
    warnings.warn(
        f"{runs_file}: skipped {len(bad)} line(s) that are not run records ({shown}); "
        f"{moved}those runs count as not done and a resumed study redoes them",
        RuntimeWarning,
        stacklevel=3,
    )


def study_config(
    prob: Problem, seed: int, level: float, fit_options, sample_options, experiments=None
) -> dict:
    """The settings ``study.json`` records: a study resumes only with the same ones."""
    config = jsonable(
        {
            "version": STORE_VERSION,
            "problem": prob.name,
            "p_true": prob.p_true.tolist(),
            "u0": prob.u0.tolist(),
            "t_span": list(prob.t_span),
            "noise": prob.noise,
            "seed": int(seed),
            "level": float(level),
            "fit_options": repr(sorted(dict(fit_options).items())),
            "sample_options": repr(sorted(dict(sample_options).items())),
        }
    )
    if experiments is not None:  # absent from single-experiment stores, which stay valid
        config["experiments"] = json.dumps(jsonable(list(experiments)))
    return config


def read_config(path: str | os.PathLike) -> dict:
    """The settings in ``path``/study.json, or a ``ValueError`` naming the file if it is damaged
    (not UTF-8, not JSON, not an object, or without the settings every study records)."""
    cfg_file = Path(path) / "study.json"
    try:
        config = json.loads(cfg_file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except json.JSONDecodeError as exc:
        problem = f"not JSON: {exc}"
    else:
        problem = _config_problem(config)
    if problem:
        raise ValueError(
            f"{str(cfg_file)!r} is damaged ({problem}): fix the file (from a backup, or with the "
            "settings the study ran with), or delete the store directory to start afresh"
        )
    return config


#: the settings every ``study.json`` records, as the types they must have
_CONFIG_FIELDS = {"problem": str, "p_true": list, "u0": list, "t_span": list, "level": Real}

#: the fields every run record has, as the types they must have
_RUN_FIELDS = {
    "key": str, "estimator": str, "noise_ratio": Real, "n_points": Integral, "dataset": Integral,
    "estimate": list, "intervals": dict, "success": bool, "message": str, "wall_time": Real,
}  # fmt: skip


def _config_problem(config) -> str:
    """What is wrong with a parsed ``study.json`` ('' if nothing)."""
    if not isinstance(config, dict):
        return f"{_excerpt(config)} is not a JSON object"
    return _fields_problem(config, _CONFIG_FIELDS)


def _parse_run(raw: bytes, n_params: int | None) -> tuple[dict | None, str]:
    """One line of ``runs.jsonl`` as a run record, or None and what is wrong with it."""
    try:
        rec = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError:
        return None, "cut short or not JSON"
    if not isinstance(rec, dict):
        return None, f"{_excerpt(rec)} is not a run record"
    problem = _fields_problem(rec, _RUN_FIELDS)
    if not problem and n_params is not None:
        problem = _shape_problem(rec, n_params)
    return (None, problem) if problem else (rec, "")


def _shape_problem(rec: dict, n_params: int) -> str:
    """Whether a run's estimate and intervals fit a study of ``n_params`` parameters."""
    if len(rec["estimate"]) != n_params:
        return f"{len(rec['estimate'])} estimates for {n_params} parameters"
    for kind, ci in rec["intervals"].items():
        bounds = ci if isinstance(ci, list) else []
        if ci is not None and (
            len(bounds) != n_params or not all(isinstance(b, list) and len(b) == 2 for b in bounds)
        ):
            return f"its {kind} interval is not {n_params} (lower, upper) pairs"
    return ""


def _excerpt(obj) -> str:
    """The start of ``obj`` as JSON, for a message."""
    text = json.dumps(obj)
    return text if len(text) <= 30 else text[:27] + "..."


def _fields_problem(obj: dict, fields: dict) -> str:
    """Which of ``fields`` ``obj`` lacks or holds with another type ('' if none)."""
    missing = [k for k in fields if k not in obj]
    if missing:
        return f"no {', '.join(missing)}"
    # bool is an Integral: a flag is not a count
    wrong = [
        k for k, kind in fields.items()
        if not isinstance(obj[k], kind) or (kind is not bool and isinstance(obj[k], bool))
    ]  # fmt: skip
    return f"{', '.join(wrong)} of the wrong type" if wrong else ""


def _write_atomically(file: Path, text: str) -> None:
    """Write ``text`` to ``file`` so that a crash leaves either no file or the whole file."""
    tmp = file.with_name(file.name + ".tmp")
    with tmp.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, file)
