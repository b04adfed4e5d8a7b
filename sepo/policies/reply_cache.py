"""A response cache on disk: one JSON line per answered request, appended atomically.

An interrupted audit resumes without asking again for what it already got, and a re-run reads the
same replies, so its numbers are reproduced exactly. Each record is written with one `os.write`
on a file opened with `O_APPEND`, so a record is either entirely in the file or (after a kill in
the middle of a write) a torn last line; loading drops a torn or unreadable line with a warning
and cuts a torn tail off the file, so the next append starts on a clean line.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from pathlib import Path

from sepo.errors import SepoError


def request_key(request: dict) -> str:
    """The cache key of a request: SHA-256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ReplyCache:
    """`key -> record` backed by an append-only JSON-lines file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SepoError(f"cannot create the reply cache folder {str(self.path.parent)!r}: {error.strerror}") from None
        self._records: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.dropped = 0
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good_end = 0
        for number, line in enumerate(data.splitlines(keepends=True), 1):
            end = good_end + len(line)
            torn = not line.endswith(b"\n")
            try:
                record = json.loads(line)
                key = record["key"]
            except (ValueError, KeyError, TypeError):
                record = None
            if record is None or torn:
                self.dropped += 1
                where = "a torn last line (an interrupted write)" if torn else f"line {number}, unreadable"
                warnings.warn(f"reply cache {self.path}: dropped {where}; that request will be asked again",
                              stacklevel=3)
                if torn:
                    break
            else:
                self._records[key] = record
            good_end = end
        if good_end < len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(good_end)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def get(self, key: str) -> dict | None:
        return self._records.get(key)

    def put(self, key: str, record: dict) -> None:
        """Store `record` under `key` and append it to the file (one write, O_APPEND)."""
        record = {"key": key, **record}
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, line)
                if written != len(line):  # a short write on a full disk: the torn line is dropped on load
                    raise SepoError(f"reply cache {self.path}: short write ({written} of {len(line)} bytes)")
            finally:
                os.close(fd)
            self._records[key] = record
