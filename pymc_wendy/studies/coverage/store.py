"""The resumable store of a coverage study: ``study.json`` and ``runs.jsonl`` in a directory.

``study.json`` holds the settings a resumed study must share (:func:`study_config`);
``runs.jsonl`` one finished run per line, appended and flushed as runs complete, so an
interrupted study loses at most the runs in flight (:class:`Store`). Records are plain JSON
(:func:`jsonable`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from pymc_wendy.problems.catalogue import Problem

__all__ = ["STORE_VERSION", "Store", "jsonable", "study_config"]

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
    ``study.json`` (the settings a resumed study must share)."""

    def __init__(self, path: str | os.PathLike, config: dict):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        cfg_file = self.path / "study.json"
        if cfg_file.exists():
            old = json.loads(cfg_file.read_text())
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            if diff:
                raise ValueError(
                    f"store {str(self.path)!r} holds a study with different settings ({diff}); "
                    "use another store directory, or the same settings to resume"
                )
        else:
            cfg_file.write_text(json.dumps(config, indent=1))
        self.runs_file = self.path / "runs.jsonl"
        self._checked_end = False

    def load(self) -> dict[str, dict]:
        return self.read(self.path)

    @staticmethod
    def read(path: Path) -> dict[str, dict]:
        """The finished runs in ``path``/runs.jsonl by key (the last record of a key wins)."""
        done: dict[str, dict] = {}
        runs_file = path / "runs.jsonl"
        if not runs_file.exists():
            return done
        with runs_file.open() as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by an interruption: that run is redone
                done[rec["key"]] = rec
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
