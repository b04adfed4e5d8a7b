"""What every `sepo` command shares: consoles, one-line user errors, checked options, progress, JSON
output."""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import sys
import threading
import time
from enum import Enum

import numpy as np
import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from typer._click import exceptions as click  # typer 0.2x vendors click; these are its exceptions
from typer.core import TyperGroup

from sepo.errors import SepoError, brief, one_line

UNWRAPPED_WIDTH = 10_000
"""The width of a console that is not a terminal: a log or a pipe gets whole lines."""


class _Console(Console):
    """Wraps at the terminal's width on a terminal only: without one (a log, a pipe, a batch job),
    rich's default of 80 columns cut summary lines mid-phrase, and a reader (or grep) met half lines."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        # read COLUMNS now, not when the console was made: a width fixed at import would outlive it
        if not self.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(UNWRAPPED_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)

    def print(self, *objects, **kwargs) -> None:
        """As rich prints; without a terminal a table is at least as wide as its title, which
        rich would otherwise wrap to the table's width."""
        if not self.is_terminal:
            from rich.cells import cell_len
            from rich.table import Table

            for table in objects:
                if isinstance(table, Table) and table.title and table.min_width is None:
                    table.min_width = cell_len(str(table.title))
        super().print(*objects, **kwargs)


console = _Console(emoji=False)  # game names hold colons: `FAMILY:hearts: ...` is not the emoji :hearts:
err_console = _Console(stderr=True, emoji=False)

MAX_SEED = 2**32 - 1
"""Seeds reach torch and transformers, which take 32-bit seeds."""


def print_error(message: str) -> None:
    """One bounded line on stderr."""
    err_console.print(f"[red]error:[/red] {escape(one_line(message))}", highlight=False, soft_wrap=True)


def print_warning(message: str) -> None:
    """One line on stderr that the command went on after (what it left out, what it merged)."""
    err_console.print(f"warning: {escape(one_line(message))}", highlight=False, soft_wrap=True)


def user_errors(command):
    """A user's mistake (any `SepoError`) becomes one line on stderr and exit status 2; so does an
    operating-system refusal (a full disk, a permission) on a path the user named."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except SepoError as error:
            print_error(str(error))
            raise typer.Exit(2) from None
        except OSError as error:
            where = f": {brief(str(error.filename), 300)}" if error.filename else ""
            print_error(f"{error.strerror or type(error).__name__}{where}")
            raise typer.Exit(2) from None

    return wrapper


def choice_enum(name: str, values) -> type[Enum]:
    """An Enum of fixed choices, so typer checks them and lists them in --help."""
    return Enum(name, {value: value for value in values}, type=str)


def value_of(choice) -> str:
    return choice.value if isinstance(choice, Enum) else choice


def seed_option(help: str = "Seed of every random draw (>= 0).", default: int = 0):
    return typer.Option(default, "--seed", min=0, max=MAX_SEED, help=help)


def finite(value: float | None, option: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise SepoError(f"{option} must be a finite number, got {value}")
    return value


def at_least(value, minimum, option: str, *, strict: bool = False):
    """`value` >= minimum (> with `strict`), finite; None passes (an unset option)."""
    if value is None:
        return None
    finite(float(value), option)
    if value < minimum or (strict and value == minimum):
        raise SepoError(f"{option} must be {'>' if strict else '>='} {minimum:g}, got {brief(value)}")
    return value


def at_most(value, maximum, option: str):
    if value is not None and value > maximum:
        raise SepoError(f"{option} must be <= {maximum:g}, got {brief(value)}")
    return value


def progress(quiet: bool = False):
    """How a long command shows its progress (see `sepo.progress`): bars with counts and ETA on a
    terminal, lines on stderr without one (a stage that lasts, then counts and ETA at least every
    30 s), nothing when quiet. Used as `with progress(quiet) as bar:`; library loops report into it."""
    from sepo import progress as reporting

    if quiet:
        return reporting.Reporter()
    if not err_console.is_terminal:
        return reporting.LineReporter()
    return reporting.RichReporter(err_console)


def shows_progress(quiet_option: str):
    """Decorator: the command reports its long work (`sepo.progress`: a language model's replies,
    the stages) for its whole duration, unless its option `quiet_option` is set."""

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            with progress(bool(kwargs.get(quiet_option))):
                return command(*args, **kwargs)

        return wrapper

    return decorate


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def print_json(data) -> None:
    """One JSON object on stdout; NaN and infinity (not JSON) are written as null; credentials in
    URLs (an endpoint agent's `http://user:pw@host`) redacted."""
    from sepo.redact import redact_secrets
    from sepo.runs import json_safe

    plain = json.loads(json.dumps(data, default=_jsonable))
    sys.stdout.write(redact_secrets(json.dumps(json_safe(plain), indent=1, allow_nan=False)) + "\n")


def _literal_help(command) -> None:
    """Help texts are shown as written: rich would read "[row][column]" (a JSON shape in a help
    text) as markup tags and drop it. Escapes every option's and command's help, once."""
    if getattr(command, "_sepo_literal_help", False):
        return
    command._sepo_literal_help = True
    for attribute in ("help", "short_help"):
        if isinstance(getattr(command, attribute, None), str):
            setattr(command, attribute, escape(getattr(command, attribute)))
    for param in getattr(command, "params", ()):
        if isinstance(getattr(param, "help", None), str):
            param.help = escape(param.help)
    for child in getattr(command, "commands", {}).values():
        _literal_help(child)


def _interrupted() -> str:
    """The line a stopped command ends with: what it kept of the runs it was writing."""
    from sepo.runs import STOP_NOTES

    notes, STOP_NOTES[:] = list(STOP_NOTES), []
    return "interrupted" + "".join(f"; {note}" for note in notes)


def stop_now() -> None:
    """End a stopped command at once: its runs are already cleaned up and its last line printed,
    and the interpreter's own teardown (garbage-collecting torch's and transformers' modules)
    took 3 to 5 s after the line with a model loaded, past the 1 s a stop should take."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(130)


class SepoGroup(TyperGroup):
    """The `sepo` program's top-level group: a usage error is one line (exit 2), not a usage box;
    SIGTERM ends a command through its cleanup (temporary files removed), as Ctrl-C does."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        _literal_help(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        code = self._run(
            lambda: super(SepoGroup, self).main(args, prog_name, complete_var, standalone_mode=False, **extra)
        )
        if code == 130 and args is None:  # the command line's `sepo`, not a caller's (CliRunner passes args)
            stop_now()
        sys.exit(code)

    @staticmethod
    def _run(call) -> int:
        def _terminate(signum, frame):
            raise KeyboardInterrupt

        from sepo import progress as reporting

        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _terminate)
        started, cpu_started = time.monotonic(), reporting.cpu_seconds()
        reporting.took(0.0, 0.0)  # a command starts with nothing shown
        try:
            result = call()
        except click.NoArgsIsHelpError as error:
            console.print(error.ctx.get_help() if error.ctx else error.format_message())
            return 0
        except click.UsageError as error:
            hint = f" (see `{error.ctx.command_path} --help`)" if error.ctx else ""
            print_error(error.format_message() + hint)
            return 2
        except click.ClickException as error:
            print_error(error.format_message())
            return error.exit_code
        except (typer.Abort, KeyboardInterrupt):
            print_error(_interrupted())
            return 130
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        if result == 130:  # typer turns KeyboardInterrupt (Ctrl-C, or SIGTERM above) into exit 130 silently
            print_error(_interrupted())
        code = result if isinstance(result, int) else 0
        line = reporting.took(time.monotonic() - started, reporting.cpu_seconds() - cpu_started)
        if code == 0 and line:  # the last line of a long command: slow or stuck, the user can tell
            err_console.print(line, style="dim", highlight=False, markup=False)
        return code
