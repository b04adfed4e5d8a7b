"""The one exception bad analysis input raises: it names the file and the field at fault.

The CLI prints it on one line and exits with status 2, so a user sees at once which entry of
which file to fix instead of a numpy traceback three calls away from the cause.
"""
from __future__ import annotations

from sepo.errors import SepoError


class AnalysisInputError(SepoError):
    """Malformed analysis input: wrong shape, unknown name, non-number, bad probabilities."""

    def __init__(self, source: str, field: str, problem: str):
        self.source = source
        self.field = field
        self.problem = problem
        super().__init__(f"{source}: {field}: {problem}")
