"""Progress of long work, shown by whoever runs it (the CLI) and reported by the loops that do it.

Library code reports without knowing where it goes:

    progress.stage("loading the model")            # a stage of a long command
    with progress.counting("replies", total) as advance:
        for chunk in chunks:
            ...
            advance(len(chunk))                     # counts, from which the ETA follows

The CLI installs a reporter for the command's duration (`sepo.cli.common.progress`): bars with
counts and ETA on a terminal; without one (a log file, a pipe, a batch job) a line on stderr for
each stage that lasts, and a status line with counts, elapsed time and ETA at least every
`LINE_SECONDS` while work goes on. Nothing is shown when no reporter is installed (library use,
`--quiet`). Quick stages print nothing, so a command that fails at once stays one line.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

LINE_SECONDS = 30.0
"""Without a terminal: the longest silence while work goes on."""
STAGE_SECONDS = 1.0
"""Without a terminal: a stage gets its line once it has lasted this long."""

_REPORTER: ContextVar["Reporter | None"] = ContextVar("sepo_progress_reporter", default=None)
_WAITING: list[str] = []
"""Notes kept for the command's reporter, given before it was installed (`note(..., keep=True)`)."""


class Reporter:
    """Shows nothing (the base of the reporters; `--quiet`)."""

    def __enter__(self):
        self._token = _REPORTER.set(self)
        waiting, _WAITING[:] = list(_WAITING), []
        for text in waiting:
            self.note(text)
        return self

    def __exit__(self, *exc):
        _REPORTER.reset(self._token)
        return False

    def stage(self, text: str) -> None:
        """A stage of the command begins."""

    def note(self, text: str) -> None:
        """A fact worth one line now (a choice made, a checkpoint written); not a stage."""

    def add_task(self, description: str, total: float | None = None, **kwargs) -> int:
        return 0

    def update(self, task: int, *, completed: float | None = None, total: float | None = None,
               advance: float | None = None, description: str | None = None, **kwargs) -> None:
        """Progress of a task."""

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def remove_task(self, task: int) -> None:
        """The task ended."""


def stage(text: str) -> None:
    """Report a stage of the running command (shown if a reporter is installed)."""
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter.stage(text)


def note(text: str, keep: bool = False) -> None:
    """Report a fact worth one line (shown if a reporter is installed); the stage stays as it was.
    With `keep`, a note given before the command installed its reporter waits for it (`forget`)."""
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter.note(text)
    elif keep:
        _WAITING.append(text)


def forget() -> None:
    """Drop the kept notes no reporter showed (the command ended, or library use)."""
    _WAITING.clear()


@contextmanager
def counting(description: str, total: float | None) -> Iterator[Callable[[float], None]]:
    """A counted task for the duration of the block; yields `advance(n=1)`."""
    reporter = _REPORTER.get()
    if reporter is None:
        yield lambda n=1: None
        return
    task = reporter.add_task(description, total=total)
    try:
        yield lambda n=1: reporter.advance(task, n)
    finally:
        reporter.remove_task(task)


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _count(value: float) -> str:
    """A count as a person reads it: "1,916,928", never "1.91693e+06"; a fraction stays one."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


class _Task:
    def __init__(self, description: str, total: float | None):
        self.description, self.total, self.completed = description, total, 0.0
        self.started = time.monotonic()
        self.base: tuple[float, float] | None = None
        """(count, time) of the first report: work done before it (a resumed run's) does not speed up the ETA."""


    def text(self) -> str:
        now = time.monotonic()
        elapsed = now - self.started
        if not self.total:
            return f"{self.description}: {_count(self.completed)} done, {_duration(elapsed)} elapsed"
        done, since = self.base or (0.0, self.started)
        rate = (self.completed - done) / max(now - since, 1e-9)
        eta = "time left not known yet" if rate <= 0 else f"about {_duration(max(0.0, self.total - self.completed) / rate)} left"
        return (f"{self.description}: {_count(self.completed)}/{_count(self.total)} "
                f"({100 * self.completed / self.total:.0f}%), {_duration(elapsed)} elapsed, {eta}")


class LineReporter(Reporter):
    """Lines on a stream without a terminal: each stage that lasts, then status lines with counts
    and ETA at least every `LINE_SECONDS` (a background thread keeps the pace while a library call runs)."""

    def __init__(self, stream=None, prefix: str = "sepo"):
        self.stream = stream
        self.prefix = prefix
        self.tasks: dict[int, _Task] = {}
        self._next = 0
        self._stage: str | None = None
        self._stage_since = 0.0
        self._stage_shown = True
        self._last_line = time.monotonic()
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self):
        self.stream = self.stream or sys.stderr
        super().__enter__()
        self._thread = threading.Thread(target=self._beat, name="sepo-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return super().__exit__(*exc)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(f"{self.prefix} [{_duration(time.monotonic() - self._started)}] {text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: progress is not worth failing for
        self._last_line = time.monotonic()

    def _status(self) -> str:
        parts = [self._stage] if self._stage else []
        parts += [task.text() for task in self.tasks.values()]
        return "; ".join(parts)

    def _beat(self) -> None:
        while not self._stop.wait(0.25):
            self.tick()

    def tick(self) -> None:
        """Print what is due (called by the background thread and on every report)."""
        with self._lock:
            now = time.monotonic()
            if not self._stage_shown and now - self._stage_since >= STAGE_SECONDS:
                self._stage_shown = True
                self._write(self._status())
            elif now - self._last_line >= LINE_SECONDS and (self.tasks or self._stage):
                self._write(self._status())

    def stage(self, text: str) -> None:
        with self._lock:
            self._stage, self._stage_since, self._stage_shown = text, time.monotonic(), False
        self.tick()

    def note(self, text: str) -> None:
        with self._lock:
            self._write(text)

    def add_task(self, description: str, total: float | None = None, **kwargs) -> int:
        with self._lock:
            self._next += 1
            self.tasks[self._next] = _Task(description, total)
            return self._next

    def update(self, task: int, *, completed=None, total=None, advance=None, description=None, **kwargs) -> None:
        with self._lock:
            entry = self.tasks.get(task)
            if entry is None:
                return
            if total is not None:
                entry.total = total
            if description is not None:
                entry.description = description
            if entry.base is None and advance is not None:
                entry.base = (entry.completed, entry.started)  # counted from the task's start
            if completed is not None:
                entry.completed = completed
                if entry.base is None:
                    entry.base = (completed, time.monotonic())  # a count given whole may include earlier work
            if advance is not None:
                entry.completed += advance
        self.tick()

    def remove_task(self, task: int) -> None:
        with self._lock:
            self.tasks.pop(task, None)


class RichReporter(Reporter):
    """Bars with counts, elapsed time and ETA on a terminal (rich), and a line per stage above them."""

    def __init__(self, console):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TimeRemainingColumn(), console=console, transient=True)

    def __enter__(self):
        super().__enter__()
        self.bars.__enter__()
        return self

    def __exit__(self, *exc):
        self.bars.__exit__(*exc)
        return super().__exit__(*exc)

    def stage(self, text: str) -> None:
        self.bars.console.print(text, style="dim", highlight=False, markup=False)  # a "[...]" in it is text

    def note(self, text: str) -> None:
        self.bars.console.print(text, style="dim", highlight=False, markup=False)

    def add_task(self, description: str, total: float | None = None, **kwargs) -> int:
        return self.bars.add_task(description, total=total, **kwargs)

    def update(self, task: int, **kwargs) -> None:
        self.bars.update(task, **kwargs)

    def advance(self, task: int, advance: float = 1) -> None:
        self.bars.advance(task, advance)

    def remove_task(self, task: int) -> None:
        self.bars.remove_task(task)
