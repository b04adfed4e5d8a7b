"""A response cache on disk: one JSON line per answered request, appended atomically.

An interrupted audit resumes without asking again for what it already got, and a re-run reads the
same replies, so its numbers are reproduced exactly. Several processes may share one file (the
default `openai:` cache is shared by every audit of a model):

- Each record is written with one `os.write` on a file opened with `O_APPEND`, under an exclusive
  `flock`; loading reads under a shared one, so a reader never sees another process's write half
  done. A kill in the middle of a write leaves a torn last line: loading ignores it (with a
  warning), and it is cut off only under the exclusive lock (by the loader when no other process
  holds the file's lock, else by the next append), so what another process is writing is never cut.
- The file is read line by line and only an index (key -> where its line is) is kept in memory;
  a record is read from the file when asked for. A path that is not a regular file (a FIFO, a
  device, a folder), a line longer than `MAX_LINE_BYTES`, a line nested deeper than `MAX_DEPTH`
  and an index larger than the memory budget are refused or skipped, never read whole. Skipped
  lines are counted (`dropped`) and said in one warning when the cache is opened.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

from sepo.errors import SepoError

MAX_LINE_BYTES = 64 * 2**20
"""The longest record line read or written (a batch of 256 replies of 4,096 tokens is ~8 MB)."""
INDEX_ENTRY_BYTES = 320
"""Memory of one record's index entry (its key string, offset and length, the dict slot)."""
MAX_DEPTH = 64
"""The deepest nesting of a record line that is read (a record is about 10 levels deep). A fixed
bound, so that a line is read or skipped the same wherever it is parsed (the parser's own limit
depends on how deep the call stack already is)."""
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_OPEN_FLAGS = os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # a FIFO opens without waiting for a writer


def request_key(request: dict) -> str:
    """The cache key of a request: SHA-256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


@contextmanager
def _locked(fd: int, how: int):
    fcntl.flock(fd, how)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _depth(line: bytes) -> int:
    """How deep the JSON `line` nests arrays and objects (brackets inside strings not counted)."""
    import numpy as np

    if line.count(b"[") + line.count(b"{") <= MAX_DEPTH:  # cannot be deeper: no scan
        return 0
    codes = np.frombuffer(_STRING.sub(b'""', line), dtype=np.uint8)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


def _read(line: bytes) -> tuple[dict | None, str]:
    """The record of one line, or None and why not: nested deeper than `MAX_DEPTH`, not JSON, or
    not a JSON object with a string `key`."""
    if _depth(line) > MAX_DEPTH:
        return None, f"nested deeper than {MAX_DEPTH} levels"
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None, "not JSON"
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        return None, "not a record"
    return record, ""


def _parse(line: bytes) -> dict | None:
    return _read(line)[0]


def _skipped_text(skipped: dict[str, list[int]]) -> str:
    """'2 nested deeper than 64 levels (lines 3, 9), 1 not JSON (line 5)'."""
    parts = []
    for why, numbers in skipped.items():
        shown = ", ".join(map(str, numbers[:5])) + (", ..." if len(numbers) > 5 else "")
        parts.append(f"{len(numbers):,} {why} (line{'s' if len(numbers) > 1 else ''} {shown})")
    return ", ".join(parts)


class ReplyCache:
    """`key -> record` backed by an append-only JSON-lines file (see the module doc)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SepoError(
                f"cannot create the reply cache folder {str(self.path.parent)!r}: {error.strerror}"
            ) from None
        self._index: dict[str, tuple[int, int]] = {}  # key -> (offset, length) of its line
        self._reader = None  # the file, open for reading records
        self._lock = threading.Lock()
        self.dropped = 0
        self._load()

    # -- opening ------------------------------------------------------------------------------------
    def _open(self, flags: int, mode: int = 0o644) -> int | None:
        """A descriptor of the cache file (None when it does not exist and `flags` do not create
        it), refused in one line unless it is a regular file."""
        try:
            fd = os.open(self.path, flags | _OPEN_FLAGS, mode)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader; a folder
                raise SepoError(
                    f"reply cache {self.path} is not a regular file "
                    f"({'a FIFO' if error.errno == errno.ENXIO else 'a folder'}); remove it or use another "
                    "cache folder"
                ) from None
            raise SepoError(f"cannot open the reply cache {self.path}: {error.strerror}") from None
        mode_of = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode_of):
            os.close(fd)
            raise SepoError(f"reply cache {self.path} is not a regular file ({_kind(mode_of)}); "
                            "remove it or use another cache folder")
        return fd

    def _drop(self, what: str) -> None:
        self.dropped += 1
        warnings.warn(
            f"reply cache {self.path}: dropped {what}; that request will be asked again", stacklevel=4
        )

    # -- loading ------------------------------------------------------------------------------------
    def _load(self) -> None:
        from sepo.limits import memory_budget, size_text

        fd = self._open(os.O_RDONLY)
        if fd is None:
            return
        self._reader = reader = os.fdopen(fd, "rb", buffering=1 << 20)
        most = max(memory_budget() // INDEX_ENTRY_BYTES, 1)
        torn_at = None
        skipped: dict[str, list[int]] = {}
        with _locked(fd, fcntl.LOCK_SH):
            offset, number = 0, 0
            while True:
                line = reader.readline(MAX_LINE_BYTES + 1)
                if not line:
                    break
                number += 1
                start, offset = offset, offset + len(line)
                if len(line) > MAX_LINE_BYTES:  # skip the rest of it, a chunk at a time
                    while not line.endswith(b"\n"):
                        line = reader.readline(1 << 20)
                        if not line:
                            break
                        offset += len(line)
                    skipped.setdefault(f"longer than {size_text(MAX_LINE_BYTES)}", []).append(number)
                    continue
                if not line.endswith(b"\n"):
                    torn_at = start
                    self._drop("a torn last line (an interrupted write)")
                    break
                record, why = _read(line)
                if record is None:
                    skipped.setdefault(why, []).append(number)
                    continue
                self._index[record["key"]] = (start, len(line))
                if len(self._index) > most:
                    self._index.clear()
                    raise SepoError(
                        f"reply cache {self.path} holds more than {most:,} records; indexing them would take "
                        f"more memory than this machine can spare ({size_text(memory_budget())}); remove it "
                        "or use another cache folder"
                    )
            size = offset
        if skipped:
            count = sum(map(len, skipped.values()))
            self.dropped += count
            warnings.warn(
                f"reply cache {self.path}: skipped {count:,} of {number:,} lines ({_skipped_text(skipped)}); "
                "their requests will be asked again", stacklevel=3
            )
        if torn_at is not None:
            self._cut_torn_tail(torn_at, size)

    def _cut_torn_tail(self, good_end: int, size: int) -> None:
        """Cut a torn tail seen while loading, only if no other process holds the file's lock (a
        writer would hold it) and the file is as it was seen; else the next append cuts it."""
        fd = self._open(os.O_RDWR)
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        try:
            if os.fstat(fd).st_size == size and b"\n" not in os.pread(fd, size - good_end, good_end):
                os.ftruncate(fd, good_end)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- reading and writing ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def get(self, key: str) -> dict | None:
        """The record stored under `key`, read from the file (None if absent, or if its line is no
        longer that record: the file was replaced or edited since)."""
        where = self._index.get(key)
        if where is None or self._reader is None:
            return None
        try:
            record = _parse(os.pread(self._reader.fileno(), where[1], where[0]))
        except OSError:
            return None
        if record is None or record["key"] != key:  # the file was replaced or edited since it was read
            self._index.pop(key, None)
            self._drop("a record changed on disk since the cache was opened")
            return None
        return record

    def records(self):
        """Every stored record (read from the file, one at a time)."""
        for key in list(self._index):
            record = self.get(key)
            if record is not None:
                yield record

    def put(self, key: str, record: dict) -> None:
        """Store `record` under `key`: one append, under the file's exclusive lock, after cutting a
        torn tail an interrupted writer left (no other writer can be in the middle of one then)."""
        record = {"key": key, **record}
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode()
        if len(line) > MAX_LINE_BYTES:  # it would be dropped when read: not kept
            return
        with self._lock:
            fd = self._open(os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                with _locked(fd, fcntl.LOCK_EX):
                    offset = self._clean_end(fd)
                    written = os.write(fd, line)
                    # a short write on a full disk: the torn line is cut by the next append
                    if written != len(line):
                        raise SepoError(
                            f"reply cache {self.path}: short write ({written} of {len(line)} bytes)"
                        )
            finally:
                os.close(fd)
            self._index[key] = (offset, len(line))
            if self._reader is None:
                fd = self._open(os.O_RDONLY)
                self._reader = os.fdopen(fd, "rb", buffering=0) if fd is not None else None

    def _clean_end(self, fd: int) -> int:
        """The file's size once a torn last line (no final newline) is cut off; the caller holds
        the exclusive lock."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        end = size
        while end > 0:
            start = max(0, end - (1 << 20))
            found = os.pread(fd, end - start, start).rfind(b"\n")
            if found >= 0:
                end = start + found + 1
                break
            end = start
        os.ftruncate(fd, end)
        self._drop("a torn last line (an interrupted write), cut before this append")
        return end
