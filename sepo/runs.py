"""Run directories: the one rule for every command that writes. A command touches only what it wrote.

A folder output (`train`, `sft`, `data sft`, `model init`, `demo`, `report`, `experiment run`):

    config = validated_settings()                  # everything checked before the first byte
    with open_run(out, "train", config, overwrite=overwrite) as run:
        if run.finished:                           # a finished run re-run is read, never rewritten
            return run.result
        run.write_json("config.json", config)      # atomic; recorded in the manifest
        log = run.path("metrics.jsonl")            # a path the command fills itself (recorded)
        with run.staged("model") as tmp:           # a library writes into tmp; moved in place on success
            model.save_pretrained(tmp)
        run.adopt("trainer/checkpoint-10")         # a tree a library wrote in place: recorded file by file
        run.commit()                               # progress worth keeping exists (a checkpoint)
        run.complete({"steps": 10})                # the command finished; what a rerun reads back

One-file outputs (`plot --out X.png`, `frontier --plot`, `analyze dynamics --plot`) use
`output_file(path, command, config, overwrite)`; the file carries the same stamp as a manifest.

The rules (docs/runs.md says the same for users):
- a missing or empty folder is created fresh; its manifest `sepo-run.json` names the command,
  the effective config (every field that changes the result) and every file and folder the
  command wrote, inside its sub-folders too;
- a folder whose manifest names the same command and the same config is resumed; a finished
  run is only read; a run may grow only in the fields the command names as extendable
  (`extendable=`), and says so; a run whose config differs only in the fields that record what
  its output was built from (`derived=`: a report's experiment results) is stale and replaced,
  as with `overwrite`, and `run.stale` names those fields;
- anything else is refused with one line naming what differs: another command (which command
  owns the folder), another config (field by field, by path: `agents[2].spec`), files sepo did
  not write, a file where a folder should be, a folder another sepo process is writing;
- `overwrite=True` replaces only a run of the same command, and removes exactly the files its
  manifest lists, never anything else (a file of the user's inside a sepo sub-folder stays);
- a run folder is locked (`flock` on `.sepo-lock`) while a command writes it; the kernel drops
  the lock of a process that dies, so a stale lock never blocks;
- a fresh start that fails before `commit()` leaves nothing behind; a stop (Ctrl-C, SIGTERM) never
  removes work: a fresh run stopped before `commit()` keeps its folder and manifest as an
  unfinished run the same command resumes (as after a kill -9), and only a run that had written
  nothing yet is removed; `STOP_NOTES` says which; temporary files are removed
  on every exit path, and those of a killed run on the next open: only temporaries whose prefix
  the manifest recorded, never a user's file that merely looks like one;
- a run that is part of another command's output (the cells of an experiment, the training runs
  of a demo) names its owner (`part_of=`); no other command may write or replace it.
"""
from __future__ import annotations

import errno
import json
import math
import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Iterator

from sepo.errors import SepoError, brief

MANIFEST = "sepo-run.json"
TMP_PREFIX = ".sepo-tmp-"
LOCK = ".sepo-lock"
LAYOUT = 2
"""Manifest layout 2 lists every path a run wrote (inside its folders too); layout 1 (before) listed
only top-level names, each owned whole."""
STAMP_KEY = "sepo-run"
"""The PNG text chunk of a one-file output holding its command and config."""

_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK
DIR_MODE = 0o777 & ~_UMASK
"""Files are written with the mode `open()` would give them, not mkstemp's (or a library's) private 0600."""

_OPEN: dict[Path, str] = {}
"""Run folders this process has open for writing -> the temporary-file prefix their manifest records."""

STOP_NOTES: list[str] = []
"""What a stop (Ctrl-C, SIGTERM) left of the runs it interrupted, for the command's last line."""


def normalized(config: dict) -> dict:
    """The config as it is stored: plain JSON (tuples as lists, paths as text), finite numbers."""
    for key, value in config.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise SepoError(f"{key} must be a finite number, got {value}")
    return json.loads(json.dumps(config, sort_keys=True, default=str))


def check_out_path(out: str | Path, option: str = "--out") -> Path:
    """A usable output path: not empty, no NUL byte, not absurdly long."""
    text = str(out)
    if not text.strip():
        raise SepoError(f"{option} is empty: name a new folder or file")
    if os.path.normpath(text.strip()) == ".":
        raise SepoError(
            f"{option} names the current folder ('.', or empty, which typer reads as '.'): name a new folder "
            "or file inside it"
        )
    if "\x00" in text:
        raise SepoError(f"{option} contains a NUL byte")
    if len(text) > 4096 or any(len(part) > 255 for part in Path(text).parts):
        raise SepoError(f"{option} is too long: {brief(text)}")
    return Path(os.path.normpath(text))  # "a/b/.." is "a", as the user will read it


def check_inputs_outside(out: str | Path, inputs: dict[str, str | Path], *, overwrite: bool) -> None:
    """With `overwrite`, refuse an input (`{option: path}`) inside `out`, before anything is removed:
    replacing the run there would delete it first (a model trained on from the run's own `model/`)."""
    if not overwrite:
        return
    root = _absolute(Path(out))
    for option, path in inputs.items():
        where = _absolute(Path(path).expanduser())
        if where == root or root in where.parents:
            raise SepoError(
                f"{option} {brief(str(path))} is inside --out {brief(str(out))}, which --overwrite would "
                "remove first; copy it elsewhere, or use another --out"
            )


def _flat(value, prefix: str = "") -> dict:
    """Nested settings by path ({'game_params': {'pie': 10}} -> {'game_params.pie': 10}; a list of
    mappings by index: 'agents[2].spec'), so that a difference names the setting that differs."""
    if isinstance(value, dict) and (value or not prefix):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        out = {}
        for index, item in enumerate(value):
            out.update(_flat(item, f"{prefix}[{index}]"))
        return out
    return {prefix: value}


def describe_difference(saved: dict, config: dict, limit: int = 4, *, as_change: bool = False) -> str:
    """'steps 2000 there, 1000 here; agents[2].spec ...' for the fields that differ (`as_change`:
    'steps: 2000 → 1000', a change from `saved` to `config`)."""
    saved, config = _flat(saved), _flat(config)
    keys = sorted(set(saved) | set(config))
    changed = [k for k in keys if saved.get(k, _UNSET) != config.get(k, _UNSET)]
    template = "{k}: {a} → {b}" if as_change else "{k} {a} there, {b} here"
    parts = [
        template.format(k=k, a=brief(saved.get(k, "unset"), 40), b=brief(config.get(k, "unset"), 40))
        for k in changed[:limit]
    ]
    if len(changed) > limit:
        parts.append(f"and {len(changed) - limit} more")
    return "; ".join(parts)


_UNSET = object()


# --------------------------------------------------------------------------------- atomic writes

def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))


def temporary_prefix(path: str | Path) -> str:
    """The prefix of a temporary file next to `path`: the recorded prefix of the open run folder
    holding it (so a killed run's temporaries are found by its manifest), else the generic one."""
    parent = _absolute(Path(path).parent)
    for folder in (parent, *parent.parents):
        if folder in _OPEN:
            return _OPEN[folder]
    return TMP_PREFIX


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a torn one; the temporary file never stays."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{temporary_prefix(path)}{path.name}.")
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
    """`data` with every NaN or infinity as null and numpy scalars as Python numbers and booleans:
    files and `--json` output stay valid JSON."""
    if hasattr(data, "item") and type(data).__module__ == "numpy" and getattr(data, "ndim", None) == 0:
        data = data.item()
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
    """Remove a path sepo owns whole (a temporary, a legacy layout-1 entry)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _tree(folder: Path, prefix: str) -> list[str]:
    """Every path under `folder` as 'prefix/relative', parents before children."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        base = prefix if rel == "." else f"{prefix}/{PurePosixPath(Path(rel))}"
        out.extend(f"{base}/{name}" for name in sorted(dirnames + filenames))
        dirnames.sort()
    return out


def _fix_modes(path: Path) -> None:
    """The umask modes of new files (libraries such as safetensors write 0600 files)."""
    if path.is_symlink():
        return
    if path.is_dir():
        os.chmod(path, DIR_MODE)
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames:
                if not os.path.islink(os.path.join(dirpath, name)):
                    os.chmod(os.path.join(dirpath, name), DIR_MODE)
            for name in filenames:
                if not os.path.islink(os.path.join(dirpath, name)):
                    os.chmod(os.path.join(dirpath, name), FILE_MODE)
    elif path.is_file():
        os.chmod(path, FILE_MODE)


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _rmdir_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # it holds something sepo did not write: it stays


def _is_owned_run(folder: Path, owner: str) -> dict | None:
    """The manifest of `folder` if it is a run that is part of `owner`'s output."""
    if not folder.is_dir() or folder.is_symlink():
        return None
    try:
        manifest = read_manifest(folder)
    except SepoError:
        return None
    return manifest if manifest is not None and manifest.get("part_of") == owner else None


def _remove_entry(path: Path, owner: str) -> None:
    """Remove one path a run wrote: a file, or a folder emptied of what sepo wrote there (runs that
    are part of the same output are removed by their own manifests); anything else stays."""
    if path.is_dir() and not path.is_symlink():
        nested = _is_owned_run(path, owner)
        if nested is not None:
            _remove_run(path, nested, owner)
            return
        for child in sorted(path.iterdir()):
            nested = _is_owned_run(child, owner)
            if nested is not None:
                _remove_run(child, nested, owner)
        _rmdir_if_empty(path)
    elif os.path.lexists(path):
        path.unlink()


def _remove_run(root: Path, manifest: dict, owner: str, *, keep_lock: bool = False) -> None:
    """Remove exactly what a run's manifest lists (deepest first), its temporaries and its
    manifest; the folder itself too when nothing else is left in it."""
    legacy = manifest.get("layout", 1) < LAYOUT
    for name in sorted(manifest["files"], key=lambda n: (-n.count("/"), n)):
        if legacy:
            _remove(root / name)
        else:
            _remove_entry(root / name, owner)
    for child in sorted(root.iterdir()) if _real_dir(root) else []:
        nested = _is_owned_run(child, owner)
        if nested is not None:
            _remove_run(child, nested, owner)
    _remove_temporaries(root, manifest)
    _remove(root / MANIFEST)
    if not keep_lock:
        if os.path.lexists(root / LOCK):
            (root / LOCK).unlink()
        _rmdir_if_empty(root)


def remove_part(folder: str | Path, owner: str) -> bool:
    """Remove a run that is part of `owner`'s output (an experiment's cell), exactly what its
    manifest lists; False, touching nothing, where `folder` is not such a run."""
    folder = Path(folder)
    manifest = _is_owned_run(folder, owner)
    if manifest is None:
        return False
    _remove_run(folder, manifest, owner)
    return True


def _remove_temporaries(root: Path, manifest: dict) -> None:
    """The temporaries a killed run of this folder left: only names with a prefix its manifest recorded."""
    prefixes = tuple(f"{TMP_PREFIX}{token}-" for token in manifest.get("temporaries", []))
    if not prefixes:
        return
    folders = [root] + [
        root / name for name in manifest["files"] if (root / name).is_dir() and not (root / name).is_symlink()
    ]
    for folder in folders:
        for entry in folder.iterdir():
            if entry.name.startswith(prefixes):
                _remove(entry)


def _check_name(name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if (
        not name
        or rel.is_absolute()
        or any(part in ("", ".", "..") for part in rel.parts)
        or str(rel) != name
    ):
        raise ValueError(f"not a relative path inside a run folder: {name!r}")
    return rel


# ---------------------------------------------------------------------------------- run folders

class RunDir:
    """An open run folder. Every path a command writes goes through `path`, `write_*`, `staged` or `adopt`."""

    def __init__(self, root: Path, command: str, config: dict, files: list[str], *, fresh: bool,
                 complete: bool, writer: bool, extended: dict, part_of: str | None = None,
                 legacy: bool = False, result: dict | None = None):
        self.root, self.command, self.config = root, command, config
        self.files = list(files)
        self._owned = set(files)
        self.fresh = fresh
        self.was_complete = complete
        self.writer = writer
        self.extended = extended
        """Fields that grew on this resume: {name: (old value, new value)}."""
        self.stale: list[str] = []
        """The `derived` fields that differed from the replaced run's (empty unless it was replaced as
        stale)."""
        self.part_of = part_of
        self.result = result
        """What the command recorded when it finished (`complete(result)`); read back by a rerun."""
        self.committed = not fresh
        self._complete = complete
        self._legacy = legacy
        self._created: list[Path] = []
        self._made_lock = False
        self._token = secrets.token_hex(4)
        self.tmp_prefix = f"{TMP_PREFIX}{self._token}-"

    @property
    def resumed(self) -> bool:
        return not self.fresh

    @property
    def finished(self) -> bool:
        """The run was complete when opened (and is not being extended): it is read, never rewritten."""
        return self.was_complete and not self.extended

    def finished_output(self, name: str) -> Path:
        """`root/name` of a finished run, which a rerun reads back or names as its result: refused in
        one line where it, or a file the manifest lists under it, is gone (a damaged run), never a
        result that points at a file that is not there."""
        for rel in [name, *(n for n in self.files if n.startswith(f"{name}/"))]:
            if not os.path.lexists(self.root / rel):
                raise SepoError(
                    f"{self.root} is marked finished but its {rel} is missing: the run is damaged; "
                    "rerun with --overwrite to redo it"
                )
        return self.root / name

    def _check_writable(self) -> None:
        if self.writer and self.finished:
            raise RuntimeError(
                f"{self.root} holds a finished `sepo {self.command}` run; it is read, never rewritten"
            )

    # -- claiming paths ----------------------------------------------------------------------
    def owns(self, name: str) -> bool:
        return name in self._owned or (self._legacy and PurePosixPath(name).parts[0] in self._owned)

    def path(self, name: str) -> Path:
        """`root/name`, recorded as this run's (with the folders above it); refused if a file sepo did
        not write is there (a folder of the user's is written into, next to what it holds)."""
        rel = _check_name(name)
        if self.writer:
            added = False
            for depth in range(1, len(rel.parts) + 1):
                sub = "/".join(rel.parts[:depth])
                if self.owns(sub):
                    continue
                there = self.root / sub
                if os.path.lexists(there) and (there.is_symlink() or not there.is_dir()):
                    raise SepoError(f"{there} exists and was not written by this run; not touching it")
                self._record(sub)
                added = True
            if added:
                self._save()
        return self.root / name

    def _record(self, name: str) -> None:
        if name not in self._owned:
            self._owned.add(name)
            self.files.append(name)

    def _write(self, name: str, data: bytes) -> Path:
        self._check_writable()
        target = self.path(name)
        if self.writer:
            self._mkdirs(target.parent)
            atomic_write_bytes(target, data)
        return target

    def _mkdirs(self, folder: Path) -> None:
        if folder != self.root and not folder.is_dir():
            self._mkdirs(folder.parent)
            folder.mkdir()

    def write_bytes(self, name: str, data: bytes) -> Path:
        return self._write(name, data)

    def write_text(self, name: str, text: str) -> Path:
        return self._write(name, text.encode("utf-8"))

    def write_json(self, name: str, data) -> Path:
        return self._write(
            name, (json.dumps(json_safe(data), indent=1, sort_keys=True, allow_nan=False) + "\n").encode()
        )

    def repair(self, name: str, data: bytes) -> Path:
        """Rewrite a file this run wrote, found damaged, from what the run derives it from (a finished
        experiment's results table from its cells' results): allowed in a finished run, whose result
        it restores rather than changes."""
        target = self.root / _check_name(name)
        if not self.writer or not self.owns(name):
            raise RuntimeError(f"{target} was not written by this run; not repairing it")
        if os.path.lexists(target) and (target.is_symlink() or not target.is_file()):
            raise SepoError(
                f"{target} is not the file this run wrote (a folder or a link is there); not touching it"
            )
        self._save()  # records this session's temporary prefix, as a resume does
        atomic_write_bytes(target, data)
        return target

    def temporary(self, name: str) -> Path:
        """A temporary path in the run folder with the prefix its manifest records."""
        return self.root / f"{self.tmp_prefix}{name.replace('/', '_')}"

    @contextmanager
    def staged(self, name: str) -> Iterator[Path]:
        """A temporary folder a library fills; on success it takes the place of `name` (renamed in
        whole where `name` is new, else merged file by file: files sepo did not write stay)."""
        self._check_writable()
        self.path(name)  # checks the name and records it as this run's
        tmp = self.temporary(name)
        _remove(tmp)
        try:
            yield tmp
            if self.writer:
                self._install(tmp, name)
        finally:
            _remove(tmp)

    @contextmanager
    def staged_contents(self) -> Iterator[Path]:
        """A temporary folder whose entries are moved into the run folder itself on success
        (for libraries that write a whole folder, such as `save_pretrained` or `save_to_disk`)."""
        self._check_writable()
        tmp = self.temporary("contents")
        _remove(tmp)
        try:
            tmp.mkdir()
            yield tmp
            if self.writer:
                for entry in sorted(tmp.iterdir()):
                    self._install(entry, entry.name)
        finally:
            _remove(tmp)

    def _install(self, source: Path, name: str) -> None:
        """Move the library-written `source` to `root/name`, recording every path under it. Where
        `name` exists, the new tree is merged into it file by file: what this run wrote before and
        does not write now is removed, files sepo did not write stay (and are never written over)."""
        target = self.path(name)
        _fix_modes(source)
        new = _tree(source, name) if _real_dir(source) else []
        if not os.path.lexists(target):
            # a recorded folder may not exist yet (`path` records, it does not create)
            self._mkdirs(target.parent)
            os.replace(source, target)
        elif _real_dir(source) and _real_dir(target):
            theirs = [
                n
                for n in new
                if os.path.lexists(self.root / n)
                and not self.owns(n)
                and not (_real_dir(self.root / n) and _real_dir(source / PurePosixPath(n).relative_to(name)))
            ]
            if theirs:
                raise SepoError(
                    f"{self.root / theirs[0]} exists and was not written by this run; not touching it"
                )
            for rel in new:  # parents before children: a new folder moves whole, with what is under it
                src, dst = source / PurePosixPath(rel).relative_to(name), self.root / rel
                if not os.path.lexists(src):
                    continue  # moved with its folder
                if src.is_dir() and not src.is_symlink():
                    if os.path.lexists(dst) and not dst.is_dir():
                        dst.unlink()
                    if not os.path.lexists(dst):
                        os.replace(src, dst)
                    continue
                if dst.is_dir() and not dst.is_symlink():
                    self._remove_owned(rel)
                os.replace(src, dst)
            kept = set(new)
            # what the previous write had there and this one has not
            self._remove_owned(name, keep=kept | {name})
        else:
            if target.is_dir() and not target.is_symlink():
                self._remove_owned(name)
            if os.path.lexists(target):
                raise SepoError(f"{target} holds files that were not written by this run; not touching it")
            os.replace(source, target)
        self._claim_written(name)
        for rel in new:
            self._record(rel)
        self._save()

    def _remove_owned(self, name: str, keep: set[str] = frozenset()) -> None:
        """Remove what this run recorded at `name` and under it (deepest first), except `keep`."""
        doomed = [n for n in self.files if (n == name or n.startswith(f"{name}/")) and n not in keep]
        for rel in sorted(doomed, key=lambda n: (-n.count("/"), n)):
            if self._legacy and rel == name:
                _remove(self.root / rel)
            else:
                _remove_entry(self.root / rel, self.part_of or self.command)
            if not os.path.lexists(self.root / rel):
                self._owned.discard(rel)
        self.files = [n for n in self.files if n in self._owned]

    def adopt(self, name: str) -> None:
        """Record `name` and everything under it as this run's: a tree a library wrote in place (a
        trainer's checkpoint); recorded paths under the same top folder that are gone are dropped."""
        if not self.writer:
            return
        self._claim_written(name)
        target = self.root / name
        _fix_modes(target)
        for rel in _tree(target, name) if target.is_dir() and not target.is_symlink() else []:
            self._record(rel)
        top = PurePosixPath(name).parts[0]
        for rel in [n for n in self.files if n.startswith(f"{top}/") and not os.path.lexists(self.root / n)]:
            self._owned.discard(rel)
        self.files = [n for n in self.files if n in self._owned]
        self._save()

    def _claim_written(self, name: str) -> None:
        rel = _check_name(name)
        for depth in range(1, len(rel.parts) + 1):
            self._record("/".join(rel.parts[:depth]))

    # -- state ---------------------------------------------------------------------------------
    def commit(self) -> None:
        """Progress worth keeping exists: a failure from now on leaves the folder for a resume."""
        self.committed = True

    def complete(self, result: dict | None = None) -> None:
        """The command finished; `result` (small, JSON) is what a rerun reads back instead of redoing it."""
        self._check_writable()
        self.committed = True
        self._complete = True
        if result is not None:
            self.result = json_safe(json.loads(json.dumps(result, default=str)))
        self._save()

    def _save(self) -> None:
        if self.writer:
            manifest = {
                "command": self.command,
                "config": self.config,
                "files": sorted(self.files),
                "complete": self._complete,
                "sepo": _version(),
                "layout": 1 if self._legacy else LAYOUT,
                "lock": LOCK,
                "temporaries": [self._token],
            }
            if self.part_of is not None:
                manifest["part_of"] = self.part_of
            if self.result is not None:
                manifest["result"] = self.result
            atomic_write_json(self.root / MANIFEST, manifest)

    def _manifest(self) -> dict:
        return {"files": self.files, "layout": 1 if self._legacy else LAYOUT, "temporaries": [self._token]}

    def _rollback(self) -> None:
        """Undo a fresh start that failed before any progress: remove what it wrote."""
        if not self.writer:
            return
        _remove_run(self.root, self._manifest(), self.part_of or self.command, keep_lock=True)
        if self._made_lock and os.path.lexists(self.root / LOCK):
            (self.root / LOCK).unlink()
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
    except RecursionError:  # thousands of nested brackets: no manifest sepo writes
        raise SepoError(f"unreadable run manifest {path}: nested too deeply") from None

    def name_ok(name) -> bool:
        try:
            return (
                isinstance(name, str)
                and _check_name(name) is not None
                and not name.startswith((MANIFEST, LOCK))
            )
        except ValueError:
            return False

    if (
        not isinstance(data, dict)
        or not isinstance(data.get("command"), str)
        or not isinstance(data.get("config"), dict)
        or not isinstance(data.get("files"), list)
        or not all(name_ok(f) for f in data["files"])
        or not isinstance(data.get("layout", 1), int)
        or not isinstance(data.get("part_of", ""), str)
        or not isinstance(data.get("result", {}), dict)
        or not all(isinstance(t, str) and t.isalnum() for t in data.get("temporaries", []))
    ):
        raise SepoError(f"unreadable run manifest {path}: expected command, config and a list of file names")
    return data


def _owner_text(manifest: dict) -> str:
    return f"`sepo {brief(manifest['part_of'], 40)}`" if manifest.get("part_of") else "another sepo command"


def _check_resume(root: Path, manifest: dict, command: str, config: dict, extendable: tuple[str, ...],
                  part_of: str | None, overwrite: bool, amend=None) -> dict:
    """Refuse unless the manifest names the same command (and owner) and config; returns the grown fields.
    With `amend` (a check of the saved config that raises where the change cannot be accepted), a
    different config is accepted: the run goes on under the new one, marked `{"config": ...}`."""
    if manifest.get("part_of") and manifest.get("part_of") != part_of:
        raise SepoError(f"{root} is part of the output of {_owner_text(manifest)} in a folder above it "
                        f"(a `sepo {brief(manifest['command'], 40)}` run inside it); use another --out")
    if manifest["command"] != command:
        raise SepoError(
            f"{root} holds the output of `sepo {brief(manifest['command'], 40)}`, not `sepo {command}`; "
            f"use another --out (--overwrite replaces only a `sepo {command}` run)"
        )
    if overwrite:
        return {}
    saved = manifest["config"]
    if saved == config:
        return {}
    grown = {
        k
        for k in extendable
        if isinstance(saved.get(k), int) and isinstance(config.get(k), int) and config[k] > saved[k]
    }
    rest_saved = {k: v for k, v in saved.items() if k not in grown}
    rest_config = {k: v for k, v in config.items() if k not in grown}
    if grown and rest_saved == rest_config:
        return {k: (saved[k], config[k]) for k in sorted(grown)}
    if amend is not None:
        amend(saved)
        return {"config": (saved, config)}
    raise SepoError(
        f"{root} holds a `sepo {command}` run with a different config "
        f"({describe_difference(saved, config)}); use another --out (or --overwrite to replace it)"
    )


def _stale(manifest: dict, command: str, config: dict, derived: tuple[str, ...]) -> list[str]:
    """The `derived` fields in which a run of the same command differs from `config`, when it differs in
    nothing else (the rest of its identity is the same): such a run is stale output to replace."""
    saved = manifest["config"]
    if manifest["command"] != command or saved == config:
        return []
    changed = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
    return changed if all(k in derived for k in changed) else []


def _foreign(root: Path) -> list[str]:
    """What a folder without a manifest holds, besides an empty lock file of a start killed before its
    manifest."""
    names = sorted(p.name for p in root.iterdir())
    if (
        names == [LOCK]
        and (root / LOCK).is_file()
        and not (root / LOCK).is_symlink()
        and (root / LOCK).stat().st_size < 32
    ):
        return []
    return names


def _refuse_foreign(root: Path, names: list[str]) -> None:
    shown = ", ".join(brief(n, 40) for n in names[:3]) + (", ..." if len(names) > 3 else "")
    raise SepoError(f"{root} is not empty and holds no sepo run ({shown}); use a new --out "
                    "(--overwrite never removes files sepo did not write)")


def _lock(root: Path) -> int:
    """An exclusive lock on the run folder's lock file for as long as the command writes it."""
    import fcntl

    path = root / LOCK
    if path.is_symlink() or (os.path.lexists(path) and not path.is_file()):
        raise SepoError(f"{path} is not sepo's lock file; not touching it")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    except OSError as error:
        raise SepoError(f"cannot write in {root}: {error.strerror or error}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise SepoError(f"{root} is being written by another sepo process{who}; wait for it to finish, "
                            "or use another --out") from None
        raise SepoError(f"cannot lock {path}: {error.strerror or error}") from None
    pid = str(os.getpid()).encode()
    if os.pread(fd, 32, 0) != pid:  # who holds it, for the refusal above; unchanged when it already says so
        os.ftruncate(fd, 0)
        os.pwrite(fd, pid, 0)
    return fd


@contextmanager
def open_run(out: str | Path, command: str, config: dict, *, overwrite: bool = False,
             extendable: tuple[str, ...] = (), writer: bool = True, part_of: str | None = None,
             derived: tuple[str, ...] = (), amend=None) -> Iterator[RunDir]:
    """Create, resume or refuse the run folder `out` (see the module docstring); yields a `RunDir`.

    `derived` names the config fields that record what the output was built from: a run of the same
    command differing only in them is stale and replaced (`run.stale` lists them).

    `amend` (a callable given the saved config, which raises where a change cannot be accepted and
    otherwise makes the folder consistent with the new one, under the run's lock) lets a run go on
    under a changed config; `run.extended["config"]` is then (saved, new).

    `part_of` names the user command whose output this run is a part of (an experiment's cells);
    `writer=False` (the other processes of a distributed run) checks nothing and writes nothing."""
    root = check_out_path(out)
    config = normalized(config)
    if not writer:
        yield RunDir(
            root, command, config, [], fresh=False, complete=False, writer=False, extended={}, part_of=part_of
        )
        return
    if os.path.lexists(root) and not root.is_dir():
        raise SepoError(f"{root} exists and is not a folder; --out names a folder")
    created: list[Path] = []
    # checked before the lock file is made: a folder that is not a run is left exactly as it is
    if root.is_dir():
        if read_manifest(root) is None and _foreign(root) and part_of is None:
            _refuse_foreign(root, _foreign(root))
    else:
        missing = [p for p in [root, *root.parents] if not p.exists()]
        try:
            root.mkdir(parents=True)
        except OSError as error:
            raise SepoError(f"cannot create {root}: {error.strerror or error}") from None
        created = list(reversed(missing))
    made_lock = not os.path.lexists(root / LOCK)
    try:
        lock = _lock(root)
    except BaseException:
        for folder in reversed(created):
            _rmdir_if_empty(folder)
        raise
    try:
        with _locked_run(
            root, command, config, overwrite, extendable, part_of, created, made_lock, derived, amend
        ) as run:
            yield run
    finally:
        os.close(lock)


@contextmanager
def _locked_run(
    root: Path,
    command: str,
    config: dict,
    overwrite: bool,
    extendable: tuple[str, ...],
    part_of: str | None,
    created: list[Path],
    made_lock: bool,
    derived: tuple[str, ...] = (),
    amend=None,
) -> Iterator[RunDir]:
    def undo_created():
        if made_lock and os.path.lexists(root / LOCK):
            (root / LOCK).unlink()
        for folder in reversed(created):
            _rmdir_if_empty(folder)

    try:  # again under the lock: another process may have changed the folder meanwhile
        manifest = read_manifest(root)
        stale = []
        if manifest is not None:
            stale = _stale(manifest, command, config, derived)
            extended = _check_resume(
                root, manifest, command, config, extendable, part_of, overwrite or bool(stale), amend
            )
            if overwrite or stale:
                _remove_run(root, manifest, manifest.get("part_of") or command, keep_lock=True)
                manifest = None
        elif _foreign(root) and part_of is None:  # a part of another output lives where its owner put it
            _refuse_foreign(root, _foreign(root))
    except BaseException:
        undo_created()
        raise
    if manifest is None:
        run = RunDir(
            root, command, config, [], fresh=True, complete=False, writer=True, extended={}, part_of=part_of
        )
        run._created, run._made_lock, run.stale = created, made_lock, stale
        _OPEN[_absolute(root)] = run.tmp_prefix
        try:
            run._save()
        except OSError as error:
            run._rollback()
            _OPEN.pop(_absolute(root), None)
            raise SepoError(f"cannot write in {root}: {error.strerror or error}") from None
    else:
        if not os.access(root, os.W_OK):
            raise SepoError(f"cannot write in {root}: permission denied")
        legacy = manifest.get("layout", 1) < LAYOUT
        run = RunDir(
            root,
            command,
            config,
            manifest["files"],
            fresh=False,
            complete=bool(manifest.get("complete")) and not extended,
            writer=True,
            extended=extended,
            part_of=part_of or manifest.get("part_of"),
            legacy=legacy,
            result=manifest.get("result"),
        )
        _OPEN[_absolute(root)] = run.tmp_prefix
        _remove_temporaries(root, manifest)  # left by a killed run of ours
        if not run.finished:
            run._save()  # records this session's temporary prefix before any temporary is made
    try:
        yield run
    except KeyboardInterrupt:
        if run.fresh and not run.committed and run.writer:
            if run.files:  # work of this run exists: kept for a resume, as a kill -9 would have left it
                STOP_NOTES.append(
                    f"{root} kept as an unfinished `sepo {run.command}` run; the same command resumes it"
                )
            else:
                run._rollback()
                STOP_NOTES.append(f"{root} removed: the run had written nothing yet")
        raise
    except BaseException:
        if run.fresh and not run.committed:
            run._rollback()
        raise
    finally:
        _OPEN.pop(_absolute(root), None)
        for stale in root.glob(f"{run.tmp_prefix}*") if root.is_dir() else []:
            _remove(stale)


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


def _owner_of(path: Path) -> str:
    """Who wrote a file that carries no stamp of a one-file output: a run's (its folder's manifest
    lists it) or not sepo."""
    try:
        manifest = read_manifest(path.parent)
    except SepoError:
        manifest = None
    if manifest is not None and path.name in manifest["files"]:
        return (
            f"is part of the `sepo {brief(manifest['command'], 40)}` run in {path.parent} (name another file)"
        )
    return "was not written by sepo"


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
            raise SepoError(f"{path} exists and " + _owner_of(path) + "; not touching it")
        if (old.get("command"), old.get("config")) != (command, stamp["config"]) and not overwrite:
            what = ("another config (" + describe_difference(old.get("config") or {}, stamp["config"]) + ")"
                    if old.get("command") == command else f"`sepo {brief(old.get('command'), 40)}`")
            raise SepoError(
                f"{path} was written by {what}; use another {option} (or --overwrite to replace it)"
            )
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
    except BaseException as error:
        if os.path.lexists(tmp):
            tmp.unlink()
        for folder in missing:
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(error, OSError):  # a folder that takes no files (/proc), a full disk
            raise SepoError(f"{option} {path}: cannot write it there: {error.strerror or error}") from None
        raise
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()


def _version() -> str:
    from sepo import __version__

    return __version__
