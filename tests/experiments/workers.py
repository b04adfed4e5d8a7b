"""Work for the runner's pool processes in tests: importable by a spawned worker, and light
(a spawned worker imports this module before it runs the task)."""
from __future__ import annotations

import time
from pathlib import Path


def mark_and_sleep(mark: str, seconds: float) -> None:
    """A cell stand-in that says when it is under way (the file `mark` appears), then runs long."""
    Path(mark).touch()
    time.sleep(seconds)
