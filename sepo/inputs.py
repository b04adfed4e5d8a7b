"""Reading the files a user names: checked before they are parsed.

Every reader refuses, with one line naming the file: a missing path, a folder where a file is
expected, a device or pipe (`/dev/zero` would otherwise be read until memory runs out), a file
larger than the reader's cap, and bytes that are not UTF-8 text. YAML is read without aliases
(an alias bomb expands to billions of nodes the moment anything walks it).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sepo.errors import SepoError, brief

MAX_INPUT_BYTES = 64 << 20
"""The largest config, policy, pool, game, history or metrics file read (64 MiB)."""


def check_file(path: str | Path, what: str = "file") -> Path:
    """An existing regular file, or a one-line error saying what is there instead."""
    text = str(path)
    if not text.strip():
        raise SepoError(f"{what}: the path is empty")
    if "\x00" in text:
        raise SepoError(f"{what}: the path contains a NUL byte")
    path = Path(text)
    try:
        if path.is_dir():
            raise SepoError(f"{what} {brief(text, 300)} is a folder, not a file")
        if not path.exists():
            raise SepoError(f"{what} not found: {brief(text, 300)}")
        if not path.is_file():
            raise SepoError(f"{what} {brief(text, 300)} is not a regular file")
    except OSError as error:  # a name too long, a loop of links, ...
        raise SepoError(f"{what} {brief(text, 300)}: {error.strerror or error}") from None
    return path


def read_bytes(path: str | Path, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    path = check_file(path, what)
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise SepoError(f"cannot read {what} {brief(str(path), 300)}: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise SepoError(f"{what} {brief(str(path), 300)} is larger than {max_bytes >> 20} MiB")
    return data


def read_text(path: str | Path, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The file's text (UTF-8); binary content is refused."""
    data = read_bytes(path, what, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SepoError(
            f"{what} {brief(str(path), 300)} is not UTF-8 text (byte {error.start}); is it a binary file?"
        ) from None
    if "\x00" in text:
        raise SepoError(f"{what} {brief(str(path), 300)} contains NUL bytes; is it a binary file?")
    return text


MAX_DEPTH = 100
"""The deepest nesting of lists and mappings read from a YAML or JSON input (no sepo file needs
more than a few levels; thousands of `[` would otherwise end in Python's RecursionError)."""


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases, nested at most `MAX_DEPTH` levels, and
    refusing a key given twice in one mapping (YAML keeps the last silently)."""

    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not supported in sepo input files", event.start_mark
            )
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {brief(str(key), 60)!r} is given a second time (first at line "
                                    f"{first.start_mark.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str) -> Any:
    """YAML as Python data (see `_NoAliasLoader`); errors are `yaml.YAMLError`."""
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader subclass)


def problem_of(error: Exception) -> str:
    """A parse error in one short line: YAML's problem and line, or the error's first line."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        where = f" (line {error.problem_mark.line + 1})" if error.problem_mark is not None else ""
        return brief(error.problem + where, 200)
    lines = str(error).strip().splitlines()
    return brief(lines[0] if lines else type(error).__name__, 200)


def parse_json(text: str) -> Any:
    """JSON as Python data, refusing a key given twice in one object and nesting deeper than
    `MAX_DEPTH`; errors are `json.JSONDecodeError`."""
    depth = 0
    in_string = escaped = False
    for position, ch in enumerate(text):  # bracket depth outside strings, before the recursive parser sees it
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise json.JSONDecodeError(f"nested more than {MAX_DEPTH} levels deep", text, position)
        elif ch in "]}":
            depth -= 1
    return json.loads(text, object_pairs_hook=_unique_keys)


def _unique_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {brief(str(key), 60)!r} is given twice in one object")
        out[key] = value
    return out


def read_structured(path: str | Path, what: str = "file") -> Any:
    """A YAML or JSON file (JSON by a .json suffix, YAML otherwise) as Python data."""
    text = read_text(path, what)
    is_json = Path(path).suffix.lower() == ".json"
    try:
        return parse_json(text) if is_json else parse_yaml(text)
    except (ValueError, yaml.YAMLError) as error:
        raise SepoError(
            f"{what} {brief(str(path), 300)} is not valid {'JSON' if is_json else 'YAML'}: "
            f"{problem_of(error)}"
        ) from None
    except RecursionError:
        raise SepoError(f"{what} {brief(str(path), 300)} is nested too deeply") from None
