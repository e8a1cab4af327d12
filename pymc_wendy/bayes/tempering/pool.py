"""Running the populations block by block, in this process or spread over forked worker
processes (which inherit the compiled model), and how many workers to use."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import traceback
import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pymc_wendy.bayes.tempering.ladder import Ladder
    from pymc_wendy.bayes.tempering.population import Population


def worker_count(cores: int | None, chains: int) -> int:
    """Worker processes for the populations: forked (they inherit the compiled functions), so
    only where fork is safe and cheap, Linux, and not from a daemonic process."""
    if cores is not None and int(cores) < 1:
        raise ValueError(f"cores must be at least 1; got {cores}")
    if not sys.platform.startswith("linux") or "fork" not in mp.get_all_start_methods():
        return 1
    if mp.current_process().daemon:  # e.g. inside a multiprocessing.Pool: no children allowed
        return 1
    return min(int(cores or os.cpu_count() or 1), chains)


_FORKED: tuple | None = None  # what forked workers inherit: (target, ladder, populations)


def _worker(conn, indices: list[int]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    target, lad, populations = _FORKED
    mine = [populations[i] for i in indices]
    try:
        while True:
            cmd = conn.recv()
            if cmd[0] == "run":
                lad.s = np.asarray(cmd[3])
                conn.send(("ok", [pop.run(cmd[1], cmd[2], target, lad) for pop in mine]))
            elif cmd[0] == "result":
                conn.send(("ok", [pop.result() for pop in mine]))
            else:
                return
    except BaseException:  # noqa: BLE001 - the parent re-raises it with the traceback
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


class Runner:
    """Runs the populations block by block, in this process or in forked workers."""

    def __init__(self, target, lad: Ladder, populations: list[Population], workers: int):
        global _FORKED
        self.target, self.lad, self.populations = target, lad, populations
        self.workers: list = []
        if workers < 2:
            return
        ctx = mp.get_context("fork")
        _FORKED = (target, lad, populations)
        try:
            for indices in np.array_split(np.arange(len(populations)), workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, indices.tolist()), daemon=True)
                with warnings.catch_warnings():
                    # Python warns about forking a multi-threaded process; the only other
                    # threads are idle BLAS pools (which have fork handlers), as with the
                    # fork pm.sample does on Linux. The progress bar starts after this.
                    warnings.filterwarnings("ignore", "This process .* is multi-threaded")
                    proc.start()
                child.close()
                self.workers.append((proc, parent))
        finally:
            _FORKED = None

    @staticmethod
    def _receive(conn):
        status, payload = conn.recv()
        if status == "error":
            raise RuntimeError(f"a sample_sft worker process failed:\n{payload}")
        return payload

    def _all(self, message) -> list:
        for _, conn in self.workers:
            conn.send(message)
        return [out for _, conn in self.workers for out in self._receive(conn)]

    def run(self, begin: int, stop: int, s: np.ndarray):
        if self.workers:
            outs = self._all(("run", begin, stop, s))
        else:
            outs = [pop.run(begin, stop, self.target, self.lad) for pop in self.populations]
        acc, att = sum(o[2] for o in outs), sum(o[3] for o in outs)
        rate = acc / att if att else np.nan
        return sum(o[0] for o in outs), sum(o[1] for o in outs), rate

    def results(self) -> list[dict]:
        if self.workers:
            return self._all(("result",))
        return [pop.result() for pop in self.populations]

    def close(self) -> None:
        for proc, conn in self.workers:
            try:
                conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
            conn.close()
        self.workers = []
