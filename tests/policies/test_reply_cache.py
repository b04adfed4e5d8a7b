"""The reply cache file: shared by processes without losing records, and refusing what is not a
cache (a FIFO, a device, a folder, a line too long or nested too deep, an index too large)."""
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from sepo.errors import SepoError
from sepo.policies import reply_cache
from sepo.policies.reply_cache import ReplyCache


def _records(path) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return len(ReplyCache(path))


def test_a_reader_opening_the_cache_while_another_process_appends_loses_nothing(tmp_path):
    """A second process opening the file while another appends must never cut what that one is
    writing (a reader that took a half-written line as torn and truncated it kept 288 of 300)."""
    path = tmp_path / "shared.jsonl"
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from sepo.policies.reply_cache import ReplyCache
        cache = ReplyCache({str(path)!r})
        for i in range(300):
            cache.put(str(i), {{"reply": "x" * 200_000}})
        """)])
    opened = 0
    while writer.poll() is None:
        _records(path)
        opened += 1
    assert writer.returncode == 0 and opened > 0
    assert _records(path) == 300
    assert len(path.read_bytes().splitlines()) == 300


def test_a_reader_waits_for_a_write_in_progress_instead_of_cutting_it(tmp_path):
    """A writer holds the file's exclusive lock while its line is half written: a process opening
    the cache then waits for the line instead of cutting it as torn."""
    import threading
    import time

    path = tmp_path / "c.jsonl"
    ReplyCache(path).put("0", {"reply": 0})
    line = (json.dumps({"key": "1", "reply": "y" * 1000}) + "\n").encode()
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    opened = []
    try:
        fcntl.flock(writer, fcntl.LOCK_EX)
        os.write(writer, line[:500])
        reader = threading.Thread(target=lambda: opened.append(len(ReplyCache(path))))
        reader.start()
        time.sleep(0.5)
        os.write(writer, line[500:])
    finally:
        fcntl.flock(writer, fcntl.LOCK_UN)
        os.close(writer)
    reader.join(10)
    assert opened == [2] and _records(path) == 2


def test_a_torn_tail_is_not_cut_while_another_process_holds_the_lock_but_by_the_next_append(tmp_path):
    path = tmp_path / "c.jsonl"
    cache = ReplyCache(path)
    for i in range(3):
        cache.put(str(i), {"reply": i})
    torn = path.read_bytes()[:-7]
    path.write_bytes(torn)
    other = os.open(path, os.O_RDONLY)  # another process's lock (flock locks are per open file)
    try:
        fcntl.flock(other, fcntl.LOCK_SH)
        with pytest.warns(UserWarning, match="torn last line"):
            reopened = ReplyCache(path)
        assert path.read_bytes() == torn and len(reopened) == 2
    finally:
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
    with pytest.warns(UserWarning, match="cut before this append"):
        reopened.put("3", {"reply": 3})
    assert _records(path) == 3 and path.read_bytes().endswith(b"\n")
    assert reopened.get("3") == {"key": "3", "reply": 3} and reopened.get("0") == {"key": "0", "reply": 0}


@pytest.mark.parametrize("make, kind", [
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: os.symlink("/dev/zero", p), "a character device"),
    (lambda p: p.mkdir(), "a folder"),
])
def test_a_cache_path_that_is_not_a_regular_file_is_refused_in_one_line(tmp_path, make, kind):
    """Before: a FIFO hung the audit, a link to /dev/zero read until memory ran out."""
    path = tmp_path / "c.jsonl"
    make(path)
    with pytest.raises(SepoError, match=f"is not a regular file \\({kind}\\)") as refused:
        ReplyCache(path)
    assert "\n" not in str(refused.value)


def test_lines_nested_too_deep_or_too_long_are_dropped_and_the_rest_read(tmp_path, monkeypatch):
    monkeypatch.setattr(reply_cache, "MAX_LINE_BYTES", 4096)
    path = tmp_path / "c.jsonl"
    good = [json.dumps({"key": str(i), "reply": i}) for i in range(3)]
    deep = "[" * 2000 + "]" * 2000  # deeper than the parser recurses
    long = json.dumps({"key": "long", "reply": "x" * 20_000})
    path.write_text("\n".join([good[0], deep, good[1], long, good[2], '["not", "a record"]']) + "\n")
    with pytest.warns(UserWarning) as caught:
        cache = ReplyCache(path)
    assert len(cache) == 3 and cache.get("2") == {"key": "2", "reply": 2} and "long" not in cache
    assert len(caught) == 1 and cache.dropped == 3
    said = str(caught[0].message)
    assert "skipped 3 of 6 lines" in said and "nested deeper than" in said and "(line 2)" in said
    assert "longer than" in said and "(line 4)" in said and "not a record (line 6)" in said


def test_lines_nested_too_deep_are_skipped_with_one_warning_that_counts_them(tmp_path):
    """A record nested a few hundred levels deep parsed when the cache was opened but not when it
    was read deeper in the audit's call stack: it was skipped then without a word. Now a fixed
    depth decides, and one warning says how many lines were skipped and why."""
    path = tmp_path / "c.jsonl"
    nested = ['{"key": "deep%d", "reply": %s}' % (i, "[" * depth + "]" * depth)
              for i, depth in enumerate((900, 600, 5000))]
    path.write_text("\n".join([json.dumps({"key": "a", "reply": 1}), *nested]) + "\n")
    with pytest.warns(UserWarning) as caught:
        cache = ReplyCache(path)
    assert [str(w.message).count("skipped") for w in caught] == [1]
    said = str(caught[0].message)
    assert "skipped 3 of 4 lines" in said and "3 nested deeper than" in said and "(lines 2, 3, 4)" in said
    assert len(cache) == 1 and cache.dropped == 3 and "deep0" not in cache
    assert cache.get("a") == {"key": "a", "reply": 1}


def test_an_audit_summary_counts_the_cache_lines_skipped():
    from sepo.cli.text_options import usage_line

    usage = dict.fromkeys(("requests", "retries", "cache_hits", "prompt_tokens", "completion_tokens",
                           "cached_prompt_tokens", "cached_completion_tokens"), 0)
    assert "skipped" not in usage_line({"usage": usage, "cache_lines_skipped": 0})
    assert "2 cache lines skipped" in usage_line({"usage": usage, "cache_lines_skipped": 2})


def test_a_cache_whose_index_would_not_fit_is_refused_in_one_line(tmp_path, monkeypatch):
    import sepo.limits

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"key": str(i)}) + "\n" for i in range(100)))
    monkeypatch.setattr(sepo.limits, "memory_budget", lambda: 10 * reply_cache.INDEX_ENTRY_BYTES)
    with pytest.raises(SepoError, match="holds more than 10 records") as refused:
        ReplyCache(path)
    assert "\n" not in str(refused.value)


def test_records_are_read_from_the_file_not_kept_in_memory(tmp_path):
    path = tmp_path / "c.jsonl"
    ReplyCache(path).put("a", {"reply": "x" * 100_000})
    cache = ReplyCache(path)
    assert cache.get("a")["reply"] == "x" * 100_000
    # an offset and a length, no record
    assert all(isinstance(where, tuple) for where in cache._index.values())
    # replaced on disk: the indexed line is not that record now
    path.write_text(json.dumps({"key": "b"}) + "\n")
    with pytest.warns(UserWarning, match="changed on disk"):
        assert cache.get("a") is None
