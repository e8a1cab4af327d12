"""Where the runs of a coverage study execute, and how their records are collected.

:func:`run_tasks` runs pending tasks in this process, in local process pools (one BLAS thread
per worker, fresh workers every :data:`_TASKS_PER_WORKER` runs, each ending when the study's
process ends, however it ends) or on a given executor (e.g. Dask's), storing each record as
soon as it arrives and counting finished and failed runs on a progress bar.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import threading

from pymc_wendy._progress import ProgressBar
from pymc_wendy.studies.coverage.runners import Task, run_task
from pymc_wendy.studies.coverage.store import Store

__all__ = ["run_tasks"]

#: runs per worker process before the local pool is replaced by a fresh one: numba never
#: frees compiled code, and a Bayesian run compiles its model's graph (about 20 MB each for
#: NUTS on the head-acceleration model), so long-lived workers of a large study would grow by
#: gigabytes
_TASKS_PER_WORKER = 100


def run_tasks(
    pending: list[Task],
    records: dict[str, dict],
    store: Store | None,
    *,
    executor: cf.Executor | None,
    max_workers: int | None,
    progress: bool,
    total: int,
    name: str,
) -> None:
    """Run ``pending`` and put each record into ``records`` (and ``store``) as it finishes.

    ``total`` runs make the study, of which ``total - len(pending)`` are already done; ``name``
    labels the progress bar. An interruption (``KeyboardInterrupt`` included) cancels what has
    not started and keeps what finished.
    """
    bar = _Progress(progress and bool(pending), total, total - len(pending), name)
    workers = min(max_workers or os.cpu_count() or 1, len(pending))
    try:
        if executor is not None:
            _execute(executor, pending, records, store, bar)
        elif workers <= 1:
            _execute(_Serial(), pending, records, store, bar)
        else:
            _in_local_pools(workers, pending, records, store, bar)
    finally:
        bar.close()


def _in_local_pools(workers: int, pending: list[Task], records, store, bar) -> None:
    # fresh processes every _TASKS_PER_WORKER runs each (see there); pools rather than
    # ProcessPoolExecutor(max_tasks_per_child=): that hung on Python 3.13.0 once the first
    # workers retired
    chunk = workers * _TASKS_PER_WORKER
    for start in range(0, len(pending), chunk):
        pool = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
        )
        try:
            _execute(pool, pending[start : start + chunk], records, store, bar)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


def _worker_init() -> None:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    os.environ["OMP_NUM_THREADS"] = "1"
    # A worker waits for tasks on a queue whose write end the other workers hold too, so it
    # would wait forever if the study were killed (kill -9, a crashed job): end with the parent.
    threading.Thread(target=_exit_with_parent, name="exit-with-parent", daemon=True).start()


def _exit_with_parent() -> None:
    """Wait for the process that started this worker to end, then end this worker."""
    parent = multiprocessing.parent_process()
    if parent is None:  # not a child of multiprocessing: nothing to watch
        return
    parent.join()  # returns when the parent's sentinel (a pipe or handle) closes: it has ended
    # end at once, as the parent did (no clean-up: nothing is left to report to); SIGKILL
    # cannot be caught, and Windows (no SIGKILL) terminates on any signal number
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


class _Serial(cf.Executor):
    """Runs each task when submitted, in this process (``max_workers=1``; easy to debug)."""

    def submit(self, fn, /, *args, **kwargs):
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller via the future
            future.set_exception(exc)
        return future


def _execute(executor, pending, records, store, bar) -> None:
    futures = {}
    try:
        if isinstance(executor, _Serial):  # submit lazily so progress shows while running
            for task in pending:
                _collect(executor.submit(run_task, task), records, store, bar)
            return
        futures = {executor.submit(run_task, t): t for t in pending}
        for fut in cf.as_completed(futures):
            _collect(fut, records, store, bar)
    except BaseException:  # KeyboardInterrupt included: stop the rest, keep what finished
        for fut in futures:
            fut.cancel()
        raise


def _collect(fut: cf.Future, records: dict, store: Store | None, bar) -> None:
    rec = fut.result()
    records[rec["key"]] = rec
    if store is not None:
        store.append(rec)
    bar.advance(rec)


class _Progress:
    """A progress bar (or nothing) counting finished runs and failures."""

    def __init__(self, enabled: bool, total: int, completed: int, name: str):
        self.failed = 0
        self._bar = ProgressBar(
            enabled,
            f"coverage {name}",
            total,
            "{task.fields[failed]} not ok",
            completed=completed,
            failed=0,
        )

    def advance(self, rec: dict) -> None:
        self.failed += not rec["success"]
        self._bar.update(advance=1, failed=self.failed)

    def close(self) -> None:
        self._bar.close()
