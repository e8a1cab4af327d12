"""Where the runs of a coverage study execute, and how their records are collected.

:func:`run_tasks` runs pending tasks in this process, in local process pools (one BLAS thread
per worker, fresh workers every :data:`_TASKS_PER_WORKER` runs, each ending when the study's
process ends, however it ends) or on a given executor (e.g. Dask's), storing each record as
soon as it arrives and counting finished and failed runs on a progress bar.

Local workers are started with "spawn", which runs the main script again in every worker
(multiprocessing's rule: a script starting processes needs an ``if __name__ == "__main__":``
guard). Without the guard every worker would run the study's call again and die, and the
study would end in ``BrokenProcessPool``; :func:`run_tasks` sees that coming and says so
instead (:func:`_unguarded_call`).
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import inspect
import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path

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
    workers = min(max_workers or os.cpu_count() or 1, len(pending))
    if executor is None and workers > 1:
        _check_main_guard()
    bar = _Progress(progress and bool(pending), total, total - len(pending), name)
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


def _check_main_guard() -> None:
    """Refuse to start local workers that would run the study's call again (module doc)."""
    where = _unguarded_call()
    if where is None:
        return
    path, line = where
    raise RuntimeError(
        f"run_coverage's worker processes start by running the main script {path} again "
        f"(multiprocessing's 'spawn'), and its line {line} is not under "
        "'if __name__ == \"__main__\":', so every worker would start this study again and "
        "die (BrokenProcessPool). Put the script's top-level code under that guard, or pass "
        "max_workers=1 to run the study in this process."
    )


def _unguarded_call() -> tuple[str, int] | None:
    """``(script, line)`` if this call comes from the main script's top-level code outside an
    ``if __name__ == "__main__":`` block, code a "spawn" worker runs again; None otherwise.

    Follows what :mod:`multiprocessing.spawn` runs again in a worker: the main module, by
    name (``python -m pkg.mod``) or by path (``python script.py``), but not a package's
    ``__main__`` module, nor a main module without a file (the interactive interpreter,
    ``python -c``, a notebook). None as well when the script cannot be read back.
    """
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None
    path = getattr(main, "__file__", None)
    if path is None or Path(path).stem == "ipython":
        return None
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
                break
            frame = frame.f_back
        if frame is None:  # not called while the main module runs (a thread, atexit)
            return None
        path, line = frame.f_code.co_filename, frame.f_lineno
    finally:
        del frame  # a frame refers to its callers: no cycle through this one
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    return None if _under_main_guard(tree, line) else (path, line)


def _under_main_guard(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` of the module ``tree`` is in the body of an ``if`` testing
    ``__name__ == "__main__"`` (either way round, or as part of the test)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _tests_main(node.test):
            if node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
                return True
    return False


def _tests_main(test: ast.expr) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq | ast.Is):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Name) and o.id == "__name__" for o in operands) and any(
                isinstance(o, ast.Constant) and o.value == "__main__" for o in operands
            ):
                return True
    return False


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
