"""Run directories: the one rule for every command that writes. A command touches only what it wrote.

A folder output (`train`, `sft`, `data sft`, `model init`, `demo`, ...):

    config = validated_settings()                        # everything checked before the first byte
    with open_run(out, "train", config, overwrite=overwrite) as run:
        run.write_json("config.json", config)            # atomic; recorded in the manifest
        log = run.path("metrics.jsonl")                  # a path the command fills itself (recorded)
        with run.staged("model") as tmp:                 # a library writes into tmp; renamed on success
            model.save_pretrained(tmp)
        run.commit()                                     # progress worth keeping exists (a checkpoint)
        run.complete()                                   # the command finished

One-file outputs (`plot --out X.png`, `frontier --plot`, `analyze dynamics --plot`) use
`output_file(path, command, config, overwrite)`; the file carries the same stamp as a manifest.

The rules (docs/runs.md says the same for users):
- a missing or empty folder is created fresh; its manifest `sepo-run.json` names the command,
  the effective config (every field that changes the result) and every file the command wrote;
- a folder whose manifest names the same command and the same config is resumed; a run may
  grow only in the fields the command names as extendable (`extendable=`), and says so;
- anything else is refused with one line naming what differs: another command, another config
  (field by field), files sepo did not write, a file where a folder should be;
- `overwrite=True` first removes exactly the files the manifest lists, never anything else;
- a fresh start that fails before `commit()` leaves nothing behind; temporary files are removed
  on every exit path (and stale ones of a killed run on the next open).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sepo.errors import SepoError, brief

MANIFEST = "sepo-run.json"
TMP_PREFIX = ".sepo-tmp-"
STAMP_KEY = "sepo-run"
"""The PNG text chunk of a one-file output holding its command and config."""

_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK
"""Files are written with the mode `open()` would give them, not mkstemp's private 0600."""


def normalized(config: dict) -> dict:
    """The config as it is stored: plain JSON (tuples as lists, paths as text), finite numbers."""
    for key, value in config.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise SepoError(f"{key} must be a finite number, got {value}")
    return json.loads(json.dumps(config, sort_keys=True, default=str))


def check_out_path(out: str | Path, option: str = "--out") -> Path:
    """A usable output path: not empty, no NUL byte, not absurdly long."""
    text = str(out)
    if not text.strip() or text.strip() == ".":
        raise SepoError(f"{option} is empty: name a new folder or file")
    if "\x00" in text:
        raise SepoError(f"{option} contains a NUL byte")
    if len(text) > 4096 or any(len(part) > 255 for part in Path(text).parts):
        raise SepoError(f"{option} is too long: {brief(text)}")
    return Path(os.path.normpath(text))  # "a/b/.." is "a", as the user will read it


def _flat(config: dict, prefix: str = "") -> dict:
    """Nested settings as dotted keys ({'game_params': {'pie': 10}} -> {'game_params.pie': 10}), so
    that a difference names the setting that differs."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def describe_difference(saved: dict, config: dict, limit: int = 4) -> str:
    """'steps 2000 there, 1000 here; seed ...' for the fields that differ."""
    saved, config = _flat(saved), _flat(config)
    keys = sorted(set(saved) | set(config))
    changed = [k for k in keys if saved.get(k) != config.get(k)]
    parts = [f"{k} {brief(saved.get(k, 'unset'), 40)} there, {brief(config.get(k, 'unset'), 40)} here" for k in changed[:limit]]
    if len(changed) > limit:
        parts.append(f"and {len(changed) - limit} more")
    return "; ".join(parts)


# --------------------------------------------------------------------------------- atomic writes

def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a torn one; the temporary file never stays."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{TMP_PREFIX}{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def json_safe(data):
    """`data` with every NaN or infinity as null: files and `--json` output stay valid JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(value) for value in data]
    return data


def atomic_write_json(path: str | Path, data) -> None:
    atomic_write_text(path, json.dumps(json_safe(data), indent=1, sort_keys=True, allow_nan=False) + "\n")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


# ---------------------------------------------------------------------------------- run folders

class RunDir:
    """An open run folder. Every path a command writes goes through `path`, `write_*` or `staged`."""

    def __init__(self, root: Path, command: str, config: dict, files: list[str], *, fresh: bool,
                 complete: bool, writer: bool, extended: dict):
        self.root, self.command, self.config = root, command, config
        self.files = list(files)
        self.fresh = fresh
        self.was_complete = complete
        self.writer = writer
        self.extended = extended
        """Fields that grew on this resume: {name: (before, now)}."""
        self.committed = not fresh
        self._complete = complete
        self._created: list[Path] = []

    @property
    def resumed(self) -> bool:
        return not self.fresh

    # -- claiming paths ----------------------------------------------------------------------
    def path(self, name: str) -> Path:
        """`root/name`, recorded as this run's; refused if something sepo did not write is there."""
        target = self.root / name
        top = Path(name).parts[0]
        if self.writer and top not in self.files:
            if os.path.lexists(self.root / top):
                raise SepoError(f"{self.root / top} exists and was not written by this run; not touching it")
            self.files.append(top)
            self._save()
        return target

    def write_text(self, name: str, text: str) -> Path:
        target = self.path(name)
        if self.writer:
            atomic_write_text(target, text)
        return target

    def write_json(self, name: str, data) -> Path:
        target = self.path(name)
        if self.writer:
            atomic_write_json(target, data)
        return target

    @contextmanager
    def staged(self, name: str) -> Iterator[Path]:
        """A temporary folder a library fills; on success it replaces `name` in one rename."""
        target = self.path(name)
        tmp = self.root / f"{TMP_PREFIX}{name}.{os.getpid()}"
        _remove(tmp)
        try:
            yield tmp
            if self.writer:
                if os.path.lexists(target):
                    _remove(target)
                os.replace(tmp, target)
        finally:
            _remove(tmp)

    @contextmanager
    def staged_contents(self) -> Iterator[Path]:
        """A temporary folder whose entries are moved into the run folder itself on success
        (for libraries that write a whole folder, such as `save_pretrained` or `save_to_disk`)."""
        tmp = self.root / f"{TMP_PREFIX}contents.{os.getpid()}"
        _remove(tmp)
        try:
            tmp.mkdir()
            yield tmp
            if self.writer:
                for entry in sorted(tmp.iterdir()):
                    target = self.path(entry.name)
                    if os.path.lexists(target):
                        _remove(target)
                    os.replace(entry, target)
        finally:
            _remove(tmp)

    # -- state ---------------------------------------------------------------------------------
    def commit(self) -> None:
        """Progress worth keeping exists: a failure from now on leaves the folder for a resume."""
        self.committed = True

    def complete(self) -> None:
        self.committed = True
        self._complete = True
        self._save()

    def _save(self) -> None:
        if self.writer:
            atomic_write_json(self.root / MANIFEST, {"command": self.command, "config": self.config,
                                                      "files": sorted(self.files), "complete": self._complete,
                                                      "sepo": _version()})

    def _rollback(self) -> None:
        """Undo a fresh start that failed before any progress: remove what it wrote."""
        if not self.writer:
            return
        for name in self.files:
            _remove(self.root / name)
        _remove(self.root / MANIFEST)
        for folder in reversed(self._created):
            try:
                folder.rmdir()
            except OSError:
                break


def read_manifest(root: str | Path) -> dict | None:
    """The manifest of a run folder, or None if it has none."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    from sepo.inputs import read_text

    try:
        data = json.loads(read_text(path, "run manifest", max_bytes=16 << 20))
    except json.JSONDecodeError as error:
        raise SepoError(f"unreadable run manifest {path}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("command"), str) or not isinstance(data.get("config"), dict) \
            or not isinstance(data.get("files"), list) or not all(isinstance(f, str) and f and "/" not in f and f not in (".", "..")
                                                                  for f in data["files"]):
        raise SepoError(f"unreadable run manifest {path}: expected command, config and a list of file names")
    return data


def _check_resume(root: Path, manifest: dict, command: str, config: dict, extendable: tuple[str, ...]) -> dict:
    """Refuse unless the manifest names the same command and config; returns the grown fields."""
    if manifest["command"] != command:
        raise SepoError(f"{root} holds the output of `sepo {brief(manifest['command'], 40)}`, not `sepo {command}`; "
                        "use another --out (or --overwrite to replace it)")
    saved = manifest["config"]
    if saved == config:
        return {}
    grown = {k for k in extendable if isinstance(saved.get(k), int) and isinstance(config.get(k), int) and config[k] > saved[k]}
    rest_saved = {k: v for k, v in saved.items() if k not in grown}
    rest_config = {k: v for k, v in config.items() if k not in grown}
    if grown and rest_saved == rest_config:
        return {k: (saved[k], config[k]) for k in sorted(grown)}
    raise SepoError(f"{root} holds a `sepo {command}` run with a different config ({describe_difference(saved, config)}); "
                    "use another --out (or --overwrite to replace it)")


@contextmanager
def open_run(out: str | Path, command: str, config: dict, *, overwrite: bool = False,
             extendable: tuple[str, ...] = (), writer: bool = True) -> Iterator[RunDir]:
    """Create, resume or refuse the run folder `out` (see the module docstring); yields a `RunDir`.

    `writer=False` (the other processes of a distributed run) checks nothing and writes nothing."""
    root = check_out_path(out)
    config = normalized(config)
    if not writer:
        yield RunDir(root, command, config, [], fresh=False, complete=False, writer=False, extended={})
        return
    if os.path.lexists(root) and not root.is_dir():
        raise SepoError(f"{root} exists and is not a folder; --out names a folder")
    manifest = read_manifest(root) if root.is_dir() else None
    created: list[Path] = []
    replaced = manifest is not None and overwrite
    if replaced:
        for name in manifest["files"]:
            _remove(root / name)
        _remove(root / MANIFEST)
        manifest = None
    if manifest is None:
        if root.is_dir():
            foreign = [] if replaced else sorted(p.name for p in root.iterdir() if not p.name.startswith(TMP_PREFIX))
            if foreign:
                shown = ", ".join(brief(n, 40) for n in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                raise SepoError(f"{root} is not empty and holds no sepo run ({shown}); use a new --out "
                                "(--overwrite never removes files sepo did not write)")
        else:
            missing = [p for p in [root, *root.parents] if not p.exists()]
            try:
                root.mkdir(parents=True)
            except OSError as error:
                raise SepoError(f"cannot create {root}: {error.strerror or error}") from None
            created = list(reversed(missing))
        run = RunDir(root, command, config, [], fresh=True, complete=False, writer=True, extended={})
        run._created = created
        try:
            run._save()
        except OSError as error:
            run._rollback()
            raise SepoError(f"cannot write in {root}: {error.strerror or error}") from None
    else:
        extended = _check_resume(root, manifest, command, config, extendable)
        run = RunDir(root, command, config, manifest["files"], fresh=False,
                     complete=bool(manifest.get("complete")) and not extended, writer=True, extended=extended)
        if not os.access(root, os.W_OK):
            raise SepoError(f"cannot write in {root}: permission denied")
        if extended:
            run._save()
    for stale in root.glob(f"{TMP_PREFIX}*"):
        _remove(stale)  # left by a killed run of ours
    try:
        yield run
    except BaseException:
        if run.fresh and not run.committed:
            run._rollback()
        raise


# ------------------------------------------------------------------------------ one-file outputs

def _png_stamp(path: Path) -> dict | None:
    """The sepo stamp of a PNG file, or None if it has none (or is not a PNG)."""
    try:
        from PIL import Image

        with Image.open(path) as image:
            image.load()
            text = dict(getattr(image, "text", {}) or {})
    except Exception:  # any unreadable or foreign file: it has no stamp  # noqa: BLE001
        return None
    try:
        stamp = json.loads(text.get(STAMP_KEY, ""))
    except json.JSONDecodeError:
        return None
    return stamp if isinstance(stamp, dict) and isinstance(stamp.get("command"), str) else None


def check_output_file(out: str | Path, command: str, config: dict, *, overwrite: bool = False,
                      option: str = "--out", suffix: str = ".png") -> tuple[Path, dict]:
    """Refuse an output file the command may not write (see `output_file`); returns (path, stamp)."""
    path = check_out_path(out, option)
    if path.suffix.lower() != suffix:
        raise SepoError(f"{option} must name a {suffix} file, got {brief(str(path))}")
    stamp = {"command": command, "config": normalized(config)}
    if path.is_dir():
        raise SepoError(f"{option} {path} is a folder; name a {suffix} file")
    if os.path.lexists(path):
        old = _png_stamp(path) if path.is_file() else None
        if old is None:
            raise SepoError(f"{path} exists and was not written by sepo; not touching it")
        if (old.get("command"), old.get("config")) != (command, stamp["config"]) and not overwrite:
            what = ("another config (" + describe_difference(old.get("config") or {}, stamp["config"]) + ")"
                    if old.get("command") == command else f"`sepo {brief(old.get('command'), 40)}`")
            raise SepoError(f"{path} was written by {what}; use another {option} (or --overwrite to replace it)")
    return path, stamp


@contextmanager
def output_file(out: str | Path, command: str, config: dict, *, overwrite: bool = False,
                option: str = "--out", suffix: str = ".png") -> Iterator[tuple[Path, dict]]:
    """One output file. Yields (temporary path, stamp to embed); on success the temporary file
    replaces `out`. An existing `out` is replaced only if sepo wrote it: by the same command and
    config, or by any sepo command with `overwrite`; anything else is refused."""
    path, stamp = check_output_file(out, command, config, overwrite=overwrite, option=option, suffix=suffix)
    missing = [p for p in path.parents if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SepoError(f"cannot create {path.parent}: {error.strerror or error}") from None
    if not os.access(path.parent, os.W_OK):
        raise SepoError(f"cannot write in {path.parent}: permission denied")
    tmp = path.with_name(f"{TMP_PREFIX}{path.stem}.{os.getpid()}{suffix}")
    try:
        yield tmp, stamp
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            tmp.unlink()
        for folder in missing:
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()


def _version() -> str:
    from sepo import __version__

    return __version__
