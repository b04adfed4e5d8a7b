"""Progress of long work, shown by whoever runs it (the CLI) and reported by the loops that do it.

Library code reports without knowing where it goes:

    progress.stage("loading the model")            # a stage of a long command
    with progress.counting("replies", total) as advance:
        for chunk in chunks:
            ...
            advance(len(chunk))                     # counts, from which the ETA follows

    with progress.whole("model replies"):          # many calls, one count: "12/40 asked so far"
        ...

The CLI installs a reporter for the command's duration (`sepo.cli.common.progress`): bars with
counts and ETA on a terminal; without one (a log file, a pipe, a batch job) a line on stderr for
each stage that lasts, and a status line with counts, elapsed time and ETA at least every
`LINE_SECONDS` while work goes on. Each line starts with the command's wall time and CPU time
(this process and the children it waited for): CPU time that grows while counts stand still is
slow work, CPU time that stands still too is a stuck one. Nothing is shown when no reporter is
installed (library use, `--quiet`). Quick stages and notes print nothing, so a command that
fails at once stays one line.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

LINE_SECONDS = 30.0
"""Without a terminal: the longest silence while work goes on."""
STAGE_SECONDS = 1.0
"""Without a terminal: a stage gets its line once it has lasted this long."""
SUMMARY_SECONDS = 10.0
"""A command that showed progress and lasted this long ends with its wall and CPU time (`took`)."""

_REPORTER: ContextVar["Reporter | None"] = ContextVar("sepo_progress_reporter", default=None)
_SHOWN: list[bool] = [False]
"""Whether the running command showed progress (a reporter other than the silent one was installed)."""
_WAITING: list[str] = []
"""Notes kept for the command's reporter, given before it was installed (`note(..., keep=True)`)."""
_WHOLE: ContextVar["_Whole | None"] = ContextVar("sepo_progress_whole", default=None)
"""The innermost `whole` block."""


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of the child processes it waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


class Reporter:
    """Shows nothing (the base of the reporters; `--quiet`)."""

    def __enter__(self):
        self._token = _REPORTER.set(self)
        _SHOWN[0] = _SHOWN[0] or type(self) is not Reporter
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
        """A counted task; `growing=True`: its total grows as work is asked for (`update(grow=n)`)."""
        return 0

    def update(self, task: int, *, completed: float | None = None, total: float | None = None,
               advance: float | None = None, description: str | None = None, **kwargs) -> None:
        """Progress of a task (`grow=n`: n more to do)."""

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def remove_task(self, task: int) -> None:
        """The task ended."""


def took(wall: float, cpu: float) -> str | None:
    """The line a command ends with when it showed progress and lasted `SUMMARY_SECONDS`: its
    wall time and CPU time (this process's threads and the child processes it waited for). CPU
    time near wall time times the threads is a machine at work for it; far below, a busy machine
    or a wait. Resets what it read, for the next command."""
    shown, _SHOWN[0] = _SHOWN[0], False
    if not shown or wall < SUMMARY_SECONDS:
        return None
    return f"took {_duration(wall)} wall time, {_duration(cpu)} CPU time (sepo and the processes it ran)"


def shown() -> bool:
    """Whether progress is shown (a visible reporter is installed): compute what only a line needs then."""
    reporter = _REPORTER.get()
    return reporter is not None and type(reporter) is not Reporter


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


class _Advance:
    """What `counting` yields: `advance(n=1)` counts work done; `advance.set_total(n)` corrects the
    amount to do (work that turned out not to be needed)."""

    def __init__(self, reporter: Reporter | None = None, task: int = 0, total: float | None = None,
                 growing: bool = False):
        self.reporter, self.task, self.asked, self.growing = reporter, task, total, growing

    def __call__(self, n: float = 1) -> None:
        if self.reporter is not None:
            self.reporter.advance(self.task, n)

    def set_total(self, total: float) -> None:
        if self.reporter is None:
            return
        if self.growing:
            self.reporter.update(self.task, grow=total - (self.asked or 0))
        else:
            self.reporter.update(self.task, total=total)
        self.asked = total


@contextmanager
def counting(description: str, total: float | None) -> Iterator[_Advance]:
    """A counted task for the duration of the block; yields `advance(n=1)` (`_Advance`). Inside a
    `whole` block naming `description`, the count joins the block's one counter instead."""
    reporter = _REPORTER.get()
    if reporter is None:
        yield _Advance()
        return
    block = _WHOLE.get()
    if block is not None and description in block.joined:
        holder = block.joined[description]
        if holder[0] is None:
            holder[0] = reporter.add_task(description, total=0, growing=True)
        task = holder[0]
        reporter.update(task, grow=total or 0)
        yield _Advance(reporter, task, total or 0, growing=True)
        return
    task = reporter.add_task(description, total=total)
    try:
        yield _Advance(reporter, task, total)
    finally:
        reporter.remove_task(task)


class _Whole:
    """A `whole` block: every joined description (this block's and its outer blocks') with a
    holder of its task, shared with the block that owns it, and the counters this block ends."""

    def __init__(self, joined: dict[str, list]):
        self.joined, self.tasks = joined, []


@contextmanager
def whole(*descriptions: str) -> Iterator[None]:
    """Counters of these descriptions opened in the block add up into one counter each, shown
    from their first count to the block's end: an audit's model replies over its many batched
    calls read "12/40 asked so far" rather than a count that restarts at every call. A block
    inside another joins what the outer one joins too. `counter` adds counters that last as long."""
    reporter = _REPORTER.get()
    if reporter is None:
        yield
        return
    outer = _WHOLE.get()
    joined = dict(outer.joined) if outer is not None else {}
    mine = {d: [None] for d in descriptions if d not in joined}
    block = _Whole({**joined, **mine})
    token = _WHOLE.set(block)
    try:
        yield
    finally:
        _WHOLE.reset(token)
        for task in [holder[0] for holder in mine.values()] + block.tasks:
            if task is not None:
                reporter.remove_task(task)


def counter(description: str, total: float | None) -> _Advance:
    """A counter that lasts to the end of the enclosing `whole` block, set up where its total
    becomes known (an audit's episodes); counts nothing outside one."""
    reporter, block = _REPORTER.get(), _WHOLE.get()
    if reporter is None or block is None:
        return _Advance()
    task = reporter.add_task(description, total=total)
    block.tasks.append(task)
    return _Advance(reporter, task, total)


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
    def __init__(self, description: str, total: float | None, growing: bool = False):
        self.description, self.total, self.completed = description, total, 0.0
        self.growing = growing
        self.started = time.monotonic()
        self.base: tuple[float, float] | None = None
        """(count, time) of the first report: work done before it (a resumed run's) does not speed the ETA."""

    def text(self) -> str:
        now = time.monotonic()
        elapsed = now - self.started
        if not self.total:
            return f"{self.description}: {_count(self.completed)} done, {_duration(elapsed)} elapsed"
        done, since = self.base or (0.0, self.started)
        rate = (self.completed - done) / max(now - since, 1e-9)
        left = max(0.0, self.total - self.completed)
        if self.growing:  # the whole amount is not known: what is asked so far, and the time it needs
            eta = "time left not known yet" if rate <= 0 else f"about {_duration(left / rate)} left for these"
            return (f"{self.description}: {_count(self.completed)}/{_count(self.total)} asked so far, "
                    f"{_duration(elapsed)} elapsed, {eta}")
        eta = "time left not known yet" if rate <= 0 else f"about {_duration(left / rate)} left"
        return (f"{self.description}: {_count(self.completed)}/{_count(self.total)} "
                f"({100 * self.completed / self.total:.0f}%), {_duration(elapsed)} elapsed, {eta}")


class LineReporter(Reporter):
    """Lines on a stream without a terminal: each stage that lasts, then status lines with counts
    and ETA at least every `LINE_SECONDS` (a background thread keeps the pace while a library call
    runs). A line starts with the command's wall and CPU time. A stage is printed once: while it
    goes on without counts, the lines that keep the pace say only that work goes on."""

    def __init__(self, stream=None, prefix: str = "sepo"):
        self.stream = stream
        self.prefix = prefix
        self.tasks: dict[int, _Task] = {}
        self._next = 0
        self._stage: str | None = None
        self._stage_since = 0.0
        self._stage_shown = True
        self._notes: list[str] = []
        self._last_line = time.monotonic()
        self._last_text: str | None = None
        self._started = time.monotonic()
        self._cpu_started = cpu_seconds()
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
        return super().__exit__(*exc)  # notes not yet shown are dropped, as a quick stage is

    def _write(self, text: str) -> None:
        now = time.monotonic()
        cpu = cpu_seconds() - self._cpu_started
        try:
            clock = f"{_duration(now - self._started)}, CPU {_duration(cpu)}"
            self.stream.write(f"{self.prefix} [{clock}] {text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: progress is not worth failing for
        self._last_line = now

    def _flush_notes(self) -> None:
        notes, self._notes = self._notes, []
        for text in notes:
            self._write(text)

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
            if self._notes and now - self._started >= STAGE_SECONDS:
                self._flush_notes()
            if not self._stage_shown and now - self._stage_since >= STAGE_SECONDS:
                self._stage_shown = True
                self._show_status()
            elif now - self._last_line >= LINE_SECONDS and (self.tasks or self._stage):
                self._show_status()

    def _show_status(self) -> None:
        """The status; a stage already printed, and nothing counted, is not printed again."""
        text = self._status()
        if self.tasks or text != self._last_text:
            self._flush_notes()  # notes first: they were given before
            self._write(text)
            self._last_text = text
        else:
            since = _duration(time.monotonic() - self._stage_since)
            self._write(f"still at work on the last stage ({since} in it)")

    def stage(self, text: str) -> None:
        with self._lock:
            self._stage, self._stage_since, self._stage_shown = text, time.monotonic(), False
        self.tick()

    def note(self, text: str) -> None:
        """Printed once the command has lasted `STAGE_SECONDS`, as a stage is: a command that ends
        (or fails) at once stays quiet (or one line)."""
        with self._lock:
            self._notes.append(text)
        self.tick()

    def add_task(self, description: str, total: float | None = None, growing: bool = False, **kwargs) -> int:
        with self._lock:
            self._next += 1
            self.tasks[self._next] = _Task(description, total, growing)
            return self._next

    def update(self, task: int, *, completed=None, total=None, advance=None, description=None, grow=None,
               **kwargs) -> None:
        with self._lock:
            entry = self.tasks.get(task)
            if entry is None:
                return
            if total is not None:
                entry.total = total
            if grow:
                entry.total = (entry.total or 0) + grow
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
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )

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

    def add_task(self, description: str, total: float | None = None, growing: bool = False, **kwargs) -> int:
        return self.bars.add_task(description + (" (asked so far)" if growing else ""), total=total, **kwargs)

    def update(self, task: int, grow: float | None = None, **kwargs) -> None:
        if grow:
            known = next((t for t in self.bars.tasks if t.id == task), None)
            if known is not None:
                kwargs["total"] = (known.total or 0) + grow
        self.bars.update(task, **kwargs)

    def advance(self, task: int, advance: float = 1) -> None:
        self.bars.advance(task, advance)

    def remove_task(self, task: int) -> None:
        self.bars.remove_task(task)
