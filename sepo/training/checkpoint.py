"""Atomic writes and resumable run directories: nothing half-written, nothing lost on a kill."""
from __future__ import annotations

import ast
import contextlib
import json
import logging
from pathlib import Path

from sepo import runs
from sepo.errors import SepoError
from sepo.inputs import read_text


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    runs.atomic_write_text(path, text)


def atomic_write_json(path: str | Path, data) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    runs.atomic_write_json(path, data)


def read_json(path: str | Path, what: str = "file"):
    path = Path(path)
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise SepoError(f"unreadable {what} {path}: {error}") from None


def is_number(value) -> bool:
    """A JSON number (not a boolean, which Python counts as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_summary(run: runs.RunDir, numbers: tuple[str, ...] = ()) -> dict:
    """The `summary.json` a finished run wrote, as a rerun reads it back: a JSON object with a whole
    `steps` and the `numbers` the rerun prints (null where the run measured NaN, which JSON cannot
    hold); else one line naming the file (a damaged run), not a traceback in the line that prints it."""
    path = run.finished_output("summary.json")
    summary = read_json(path, "run summary")
    wanted = ("steps", *numbers)
    if (
        not isinstance(summary, dict)
        or not isinstance(summary.get("steps"), int)
        or not all(key in summary and (summary[key] is None or is_number(summary[key])) for key in numbers)
    ):
        raise SepoError(
            f"unreadable run summary {path}: expected a JSON object holding {', '.join(wanted)} as numbers; "
            "the run is damaged: rerun with --overwrite to redo it"
        )
    return summary


def read_run_config(run: runs.RunDir) -> dict:
    """The `config.json` a finished run wrote, as a rerun checks it: a JSON object, else one line
    naming the file (a damaged run). `run:DIR` refuses the same file, so a rerun must not call the
    run complete."""
    path = run.finished_output("config.json")
    damaged = "the run is damaged: rerun with --overwrite to redo it"
    try:
        config = read_json(path, "run config")
    except SepoError as error:
        raise SepoError(f"{error}; {damaged}") from None
    if not isinstance(config, dict):
        raise SepoError(f"unreadable run config {path}: expected a JSON object; {damaged}")
    return config


def check_same_run(path: str | Path, settings: dict, may_change: tuple[str, ...] = ("steps",)) -> None:
    """Refuse to resume a run directory whose saved config differs (other than `may_change`)."""
    path = Path(path)
    if not path.exists():
        return
    saved = read_json(path, "run config")
    changed = sorted(k for k in settings if k not in may_change and saved.get(k) != settings[k])
    if changed:
        raise SepoError(
            f"{path.parent} holds a run with a different config ({', '.join(changed)}); use a new --out"
        )


class MetricsLog:
    """Per-step metrics as JSON lines, appended as the run goes.

    A kill can tear the last line only; a damaged line anywhere else is an error naming it,
    never a silent hole in the history."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _records(self) -> list[dict]:
        if not self.path.exists():
            return []
        lines = read_text(self.path, "metrics file").splitlines()
        records = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):
                    break  # a torn last line from a kill
                raise SepoError(
                    f"{self.path} line {number} is damaged (not JSON); the run's history has a hole"
                ) from None
            if (
                not isinstance(record, dict)
                or isinstance(record.get("step"), bool)
                or not isinstance(record.get("step"), int)
            ):
                raise SepoError(f"{self.path} line {number}: expected a JSON object with an integer 'step'")
            if records and record["step"] < records[-1]["step"]:
                raise SepoError(
                    f"{self.path} line {number}: step {record['step']} after step {records[-1]['step']}"
                )
            records.append(record)
        return records

    def truncate_after(self, step: int, one_per_step: bool = False) -> list[dict]:
        """Keep the records up to `step` (drop what a killed run logged after its checkpoint, and the
        `final` summary record of a finished run that is being extended); with `one_per_step`, only
        the first record of each step (a log written before the trainer logged each step once)."""
        if not self.path.exists():
            return []
        kept = [r for r in self._records() if r["step"] <= step and not r.get("final")]
        if one_per_step:
            kept = [r for i, r in enumerate(kept) if i == 0 or r["step"] != kept[i - 1]["step"]]
        atomic_write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
        return kept

    def append(self, record: dict) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()

    def read(self) -> list[dict]:
        return self._records()


_MISSING_KEYS = "There were missing keys in the checkpoint model loaded: "


def tied_keys(model) -> set[str]:
    """The weights of `model` tied to another (a language model's lm_head to its embeddings, when
    the config ties them): checkpoints do not store them, and loading re-ties them."""
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    if not getattr(getattr(base, "config", None), "tie_word_embeddings", False):
        return set()
    tied = getattr(base, "_tied_weights_keys", None) or ()
    return set(tied.keys() if isinstance(tied, dict) else tied)


class _TiedKeysFilter(logging.Filter):
    """Drops transformers' resume warning when every missing key is a tied weight; any other
    missing key is still warned."""

    def __init__(self, tied: set[str]):
        super().__init__()
        self.tied = tied

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_MISSING_KEYS):
            return True
        try:
            missing = set(ast.literal_eval(message[len(_MISSING_KEYS):].rstrip(".")))
        except (ValueError, SyntaxError):
            return True
        return not (missing and missing <= self.tied)


@contextlib.contextmanager
def quiet_tied_weights(model):
    """While a trainer resumes `model` from a checkpoint: no "missing keys ['lm_head.weight']"
    warning for weights that are tied, hence never saved, and restored by the tie."""
    tied = tied_keys(model)
    if not tied:
        yield
        return
    logger = logging.getLogger("transformers.trainer")
    keep = _TiedKeysFilter(tied)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)
