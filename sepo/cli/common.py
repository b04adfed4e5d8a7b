"""What every `sepo` command shares: consoles, one-line user errors, JSON output."""
from __future__ import annotations

import functools
import json
import sys

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape

from sepo.errors import SepoError

console = Console()
err_console = Console(stderr=True)


def user_errors(command):
    """A user's mistake (any `SepoError`) becomes one line on stderr and exit status 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except SepoError as error:
            err_console.print(f"[red]error:[/red] {escape(str(error))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=1, default=_jsonable) + "\n")
