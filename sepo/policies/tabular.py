"""Tabular policies: one distribution (or one row of logits) per information state.

Keys are the domain's information-state keys (its exact solver's `decisions()`, when it has
one); columns follow each decision's legal actions in order. The JSON form maps keys to action
probabilities. Files are validated on load: every key known and present, probabilities
non-negative and summing to one.

`save` writes the compact form (`COMPACT_FORMAT`): the same mapping, wrapped with the table's
width, where a row is an integer k for the uniform distribution over its first k columns or the
list of its probabilities up to the last non-zero one (the rest 0). A large game's untrained
rows are uniform, so its file shrinks several times; every key stays in the file, in row order,
so a file reads without the game and back into the same table, bit for bit. Plain mappings
(the older format, and hand-written files) still load.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.limits import count_text, memory_budget, size_text
from sepo.policies.base import Policy

_SUM_TOLERANCE = 1e-6
_ROUNDING = 1e-12
"""A row summing to 1 within this is kept as written (a saved table reads back bit for bit);
one further off, within `_SUM_TOLERANCE`, is renormalised."""
COMPACT_FORMAT = "sepo-tabular/2"


class TabularPolicy(Policy):
    """Action probabilities per information state, stored as an array `[states, actions]`."""

    def __init__(self, table, keys, name: str = "tabular"):
        self.keys = tuple(keys)
        self.table = np.asarray(table, dtype=float)
        self.name = name
        self._row = {key: index for index, key in enumerate(self.keys)}

    @classmethod
    def from_logits(cls, logits, keys, name: str = "tabular") -> "TabularPolicy":
        return cls(softmax(np.asarray(logits, dtype=float)), keys, name)

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        row = self._row.get(decision.info_key)
        if row is None:
            raise SepoError(f"{self.name}: no entry for information state {decision.info_key!r}")
        return {
            action: float(self.table[row, column]) for column, action in enumerate(decision.legal_actions)
        }

    def check_decisions(self, decisions, source: str) -> "TabularPolicy":
        """Check the table against a game's information states and cut it to their widest legal
        action set: a row read at a decision with n legal actions keeps its probability on its
        first n columns (the rest is never read: a solver and play would see a distribution that
        does not sum to 1), and the table has at least n columns."""
        if not decisions:
            return self
        legal = np.fromiter((len(d.legal_actions) for d in decisions), dtype=np.int64, count=len(decisions))
        rows = np.fromiter(
            (self._row.get(d.info_key, -1) for d in decisions), dtype=np.int64, count=len(decisions)
        )
        read = rows >= 0  # a missing state is refused with its own message when the policy is read there
        columns = self.table.shape[1]
        narrow = np.flatnonzero(read & (legal > columns))
        if narrow.size:
            first = decisions[narrow[0]]
            raise SepoError(
                f"{source}: key {first.info_key!r} has {legal[narrow[0]]} legal actions; the table has "
                f"{columns} columns"
            )
        beyond = np.zeros(len(decisions))
        beyond[read] = np.where(np.arange(columns) >= legal[read, None], self.table[rows[read]], 0.0).sum(1)
        over = np.flatnonzero(beyond > _SUM_TOLERANCE)
        if over.size:
            first = decisions[over[0]]
            raise SepoError(
                f"{source}: key {first.info_key!r} puts probability {beyond[over[0]]:.6g} on columns beyond "
                f"its {legal[over[0]]} legal actions"
            )
        for index in np.flatnonzero(beyond):  # rounding-sized leftovers: dropped, the row renormalised
            row = rows[index]
            self.table[row, legal[index]:] = 0.0
            self.table[row] /= self.table[row].sum()
        width = int(legal.max())
        if columns > width:
            self.table = np.ascontiguousarray(self.table[:, :width])
        return self

    def to_json(self) -> dict[str, list[float]]:
        return {key: [float(p) for p in self.table[i]] for i, key in enumerate(self.keys)}

    def compact_text(self) -> str:
        """The compact JSON form (module docstring), one information state a line."""
        rows = ",\n".join(
            f"{json.dumps(key)}: {json.dumps(compact_row(row))}" for key, row in zip(self.keys, self.table)
        )
        head = json.dumps({"format": COMPACT_FORMAT, "actions": int(self.table.shape[1])})[:-1]
        return f'{head}, "policy": {{\n{rows}\n}}}}\n'

    def save(self, path: str | Path) -> None:
        from sepo.training.checkpoint import atomic_write_text

        atomic_write_text(path, self.compact_text())

    @classmethod
    def load(cls, path: str | Path, keys=None, num_actions: int | None = None) -> "TabularPolicy":
        """A policy from JSON; `keys` (the domain's information states) are checked when given,
        else the file's own keys are used in file order. `num_actions` is the row length of a
        plain mapping; a compact file's rows have its declared "actions"."""
        path = Path(path)
        data, width = read_policy_file(path)
        num_actions = width or num_actions  # a declared width; `check_decisions` fits it to a game
        if keys is None:
            if not isinstance(data, dict) or not data:
                raise SepoError(
                    f"{path}: expected a non-empty JSON object mapping information states to probabilities"
                )
            keys = tuple(data)
        if num_actions is None:
            first = data.get(keys[0]) if isinstance(data, dict) else None
            num_actions = len(first) if isinstance(first, (list, tuple)) else 2
        table = table_from_mapping(data, keys, source=str(path), num_actions=num_actions)
        return cls(table, keys, name=f"tabular:{path.name}")


def read_policy_file(path: Path) -> tuple[object, int | None]:
    """A tabular policy file's mapping of information states to rows, in file order (a compact
    file's expanded), and its width when the file declares one."""
    from sepo.inputs import parse_json, read_text

    text = read_text(path, "tabular policy file")
    try:
        data = parse_json(text)
    except (ValueError, RecursionError) as error:
        raise SepoError(f"tabular policy {path} is not readable JSON: {error}") from None
    compact = isinstance(data, dict) and (("format" in data and not isinstance(data["format"], list))
                                          or isinstance(data.get("policy"), dict))  # a plain row is a list
    if compact:
        return expand_compact(data, str(path))
    return data, None


def table_from_mapping(data, keys, source: str = "policy", num_actions: int = 2) -> np.ndarray:
    """Validate a {key: [p0, p1, ...]} mapping and return it as an array in `keys` order."""
    if not isinstance(data, dict):
        raise SepoError(f"{source}: expected a JSON object mapping information states to probabilities")
    unknown = sorted(set(data) - set(keys))
    if unknown:
        raise SepoError(f"{source}: unknown information state key(s) {unknown}; expected keys {list(keys)}")
    missing = [key for key in keys if key not in data]
    if missing:
        raise SepoError(f"{source}: missing information state key(s) {missing}")
    rows = []
    for key in keys:
        row = data[key]
        if not isinstance(row, (list, tuple)) or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) for p in row
        ):
            raise SepoError(f"{source}: key {key!r} must map to a list of numbers, got {row!r}")
        try:
            row = np.asarray(row, dtype=float)
        except OverflowError:
            raise SepoError(f"{source}: key {key!r} has a number too large for a probability") from None
        if row.shape != (num_actions,):
            raise SepoError(f"{source}: key {key!r} has {row.size} probabilities, expected {num_actions}")
        if not np.all(np.isfinite(row)) or np.any(row < 0):
            raise SepoError(f"{source}: key {key!r} has a negative or non-finite probability {row.tolist()}")
        if abs(row.sum() - 1.0) > _SUM_TOLERANCE:
            raise SepoError(f"{source}: probabilities for key {key!r} sum to {row.sum():.6g}, not 1")
        rows.append(row if abs(row.sum() - 1.0) <= _ROUNDING else row / row.sum())
    return np.stack(rows)


def compact_row(row: np.ndarray) -> int | list[float]:
    """A row of the compact form: k for the uniform distribution over the first k columns, else
    the probabilities up to the last non-zero one."""
    nonzero = np.flatnonzero(row)
    length = int(nonzero[-1]) + 1 if nonzero.size else len(row)
    if nonzero.size == length and np.all(row[:length] == 1.0 / length):
        return length
    return [float(p) for p in row[:length]]


def expand_compact(data: dict, source: str) -> tuple[dict, int]:
    """The plain mapping (rows padded to the width) and the width of a compact-form file; the rows
    are then checked like any mapping's."""
    if data.get("format") != COMPACT_FORMAT:
        raise SepoError(
            f"{source}: unknown tabular policy format {data.get('format')!r}; expected {COMPACT_FORMAT!r} "
            "or a plain mapping of information states to probabilities"
        )
    width, mapping = data.get("actions"), data.get("policy")
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
        raise SepoError(f"{source}: 'actions' must be a positive integer (the table's width), got {width!r}")
    if not isinstance(mapping, dict) or not mapping:
        raise SepoError(
            f"{source}: 'policy' must be a non-empty JSON object mapping information states to rows"
        )
    size = len(mapping) * width * np.dtype(float).itemsize
    if size > memory_budget():  # a few bytes of 'actions' would otherwise pad every row to any width
        raise SepoError(
            f"{source}: 'actions' {count_text(width)} over {len(mapping):,} states is a table of "
            f"about {size_text(size)}, more than this machine's memory budget of {size_text(memory_budget())}"
        )
    expanded = {}
    for key, row in mapping.items():
        if isinstance(row, int) and not isinstance(row, bool):
            if not 1 <= row <= width:
                raise SepoError(
                    f"{source}: key {key!r}: a uniform row over {row} columns; the table has {width}"
                )
            row = [1.0 / row] * row
        if isinstance(row, list) and len(row) > width:
            raise SepoError(
                f"{source}: key {key!r} has {len(row)} probabilities, more than the header's \"actions\" "
                f"{width}; make the header the table's width"
            )
        if isinstance(row, list) and len(row) < width:
            row = row + [0.0] * (width - len(row))
        expanded[key] = row
    return expanded, width


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(-1, keepdims=True)
