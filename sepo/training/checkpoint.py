"""Atomic writes and resumable run directories: nothing half-written, nothing lost on a kill."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from sepo.errors import SepoError


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True))


def read_json(path: str | Path, what: str = "file"):
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SepoError(f"{what} not found: {path}") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SepoError(f"unreadable {what} {path}: {error}") from None


def check_same_run(path: str | Path, settings: dict, may_change: tuple[str, ...] = ("steps",)) -> None:
    """Refuse to resume a run directory whose saved config differs (other than `may_change`)."""
    path = Path(path)
    if not path.exists():
        return
    saved = read_json(path, "run config")
    changed = sorted(k for k in settings if k not in may_change and saved.get(k) != settings[k])
    if changed:
        raise SepoError(f"{path.parent} holds a run with a different config ({', '.join(changed)}); use a new --out")


class MetricsLog:
    """Per-step metrics as JSON lines. On resume, lines after the checkpoint step are dropped."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break  # a torn last line from a kill
            if record.get("step", -1) <= step:
                kept.append(line)
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def append(self, record: dict) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
