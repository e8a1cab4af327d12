"""A rich progress bar, or nothing: what long-running loops (coverage studies, tempering) show."""

from __future__ import annotations


class ProgressBar:
    """Description, bar, done/total, elapsed and remaining time, and a status column.

    ``status`` is a format string over ``fields`` (e.g. ``"{task.fields[failed]} not ok"``);
    with ``enabled=False`` every method does nothing.
    """

    def __init__(
        self, enabled: bool, description: str, total: int, status: str, completed: int = 0, **fields
    ):
        self._p = None
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn(status),
        )
        self._p.start()
        self._task = self._p.add_task(description, total=total, completed=completed, **fields)

    def update(self, **kwargs) -> None:
        """``advance=``, ``completed=`` and status fields, as for ``rich.progress.Progress``."""
        if self._p is not None:
            self._p.update(self._task, **kwargs)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
