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
        raise SepoError(f"{what} {brief(str(path), 300)} is not UTF-8 text (byte {error.start}); is it a binary file?") from None
    if "\x00" in text:
        raise SepoError(f"{what} {brief(str(path), 300)} contains NUL bytes; is it a binary file?")
    return text


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without anchors and aliases."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not supported in sepo input files",
                                              event.start_mark)
        return super().compose_node(parent, index)


def parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader subclass)


def read_structured(path: str | Path, what: str = "file") -> Any:
    """A YAML or JSON file (JSON by a .json suffix, YAML otherwise) as Python data."""
    text = read_text(path, what)
    is_json = Path(path).suffix.lower() == ".json"
    try:
        return json.loads(text) if is_json else parse_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SepoError(f"{what} {brief(str(path), 300)} is not valid {'JSON' if is_json else 'YAML'}: {brief(first, 160)}") from None
    except RecursionError:
        raise SepoError(f"{what} {brief(str(path), 300)} is nested too deeply") from None
