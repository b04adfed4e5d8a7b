"""Errors a user can cause. The CLI prints their message on one line and exits with status 2."""
from __future__ import annotations

import reprlib

MAX_MESSAGE = 400
"""Longest error line printed; the rest of a huge message is cut and its length said."""


class SepoError(ValueError):
    """Bad input: an unknown name, a malformed file, an out-of-range parameter."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3


def brief(value, limit: int = 60) -> str:
    """A short, one-line repr of a value a user gave (a 1 MB key or a YAML alias bomb stays short)."""
    text = value if isinstance(value, str) else _REPR.repr(value)
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def one_line(message: str, limit: int = MAX_MESSAGE) -> str:
    """A message on one bounded line."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"
