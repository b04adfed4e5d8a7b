"""Reading analysis inputs: YAML/JSON files, numbers, names, nested payoff lists, distributions.

Every check raises `AnalysisInputError` naming the file and the exact field (e.g.
`payoffs[1][0][1]`), because these files are written by hand and the first mistake in them is
usually a typo, not a modelling error.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

from sepo.analysis.errors import AnalysisInputError
from sepo.errors import SepoError
from sepo.inputs import parse_json, parse_yaml, problem_of, read_text

SUM_TOLERANCE = 1e-6
"""How far a hand-written probability vector may be from summing to one (it is then renormalised)."""


def read_data(path: str | Path) -> Any:
    """Parse a YAML or JSON file (chosen by suffix; YAML otherwise)."""
    path = Path(path)
    source = str(path)
    if not path.exists() and not path.is_symlink():
        raise AnalysisInputError(str(path), "file", "no such file")
    try:
        text = read_text(path, "input file")
    except SepoError as error:
        raise AnalysisInputError(source, "file", str(error)) from None
    try:
        if path.suffix.lower() == ".json":
            return parse_json(text)
        return parse_yaml(text)
    except RecursionError:
        raise AnalysisInputError(source, "file", "nested too deeply") from None
    except (ValueError, yaml.YAMLError) as error:
        raise AnalysisInputError(
            source,
            "file",
            f"not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}: {problem_of(error)}",
        ) from None


def require_mapping(value: Any, source: str, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise AnalysisInputError(source, field, f"expected a mapping, got {_kind(value)}")
    return value


def require_key(data: Mapping[str, Any], key: str, source: str, prefix: str = "") -> Any:
    if key not in data:
        raise AnalysisInputError(source, prefix + key, "missing")
    return data[key]


def as_number(value: Any, source: str, field: str) -> float:
    """A finite real number; booleans and numeric-looking strings are rejected, not coerced."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AnalysisInputError(source, field, f"expected a number, got {_kind(value)} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise AnalysisInputError(source, field, f"expected a finite number, got {value!r}")
    return number


def as_probability(value: Any, source: str, field: str) -> float:
    number = as_number(value, source, field)
    if not 0.0 <= number <= 1.0:
        raise AnalysisInputError(source, field, f"a probability must lie in [0, 1], got {number}")
    return number


def as_name_list(value: Any, source: str, field: str, *, min_length: int = 1) -> tuple[str, ...]:
    """A list of distinct non-empty names."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise AnalysisInputError(source, field, f"expected a list of names, got {_kind(value)}")
    names = []
    for index, name in enumerate(value):
        if not isinstance(name, (str, int)) or isinstance(name, bool) or str(name).strip() == "":
            raise AnalysisInputError(source, f"{field}[{index}]", f"expected a name, got {name!r}")
        names.append(str(name))
    if len(names) < min_length:
        raise AnalysisInputError(source, field, f"needs at least {min_length} name(s), got {len(names)}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AnalysisInputError(source, field, f"duplicate name(s) {', '.join(duplicates)}")
    return tuple(names)


def numeric_tensor(value: Any, dims: Sequence[tuple[int, str]], source: str, field: str) -> np.ndarray:
    """A nested list of numbers with exactly the given dimensions.

    `dims` lists (length, what that axis is) from the outermost axis in, so a wrong length is
    reported as e.g. "payoffs[1] has 3 entries; expected 2 (one per action of checker)"."""
    if not dims:
        return np.asarray(as_number(value, source, field))
    length, meaning = dims[0]
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise AnalysisInputError(
            source, field, f"expected a list of {length} ({meaning}), got {_kind(value)} {value!r}"
        )
    if len(value) != length:
        raise AnalysisInputError(source, field, f"has {len(value)} entries; expected {length} ({meaning})")
    return np.stack([numeric_tensor(item, dims[1:], source, f"{field}[{i}]") for i, item in enumerate(value)])


def distribution(value: Any, names: Sequence[str], source: str, field: str) -> np.ndarray:
    """A probability vector over `names`, given as a list or as a mapping name -> probability
    (missing names get zero). It must be non-negative and sum to one within `SUM_TOLERANCE`."""
    if isinstance(value, Mapping):
        vector = np.zeros(len(names))
        for name, probability in value.items():
            if str(name) not in names:
                raise AnalysisInputError(
                    source, f"{field}.{name}", f"unknown action {name!r}; known: {', '.join(names)}"
                )
            vector[list(names).index(str(name))] = as_probability(probability, source, f"{field}.{name}")
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != len(names):
            raise AnalysisInputError(
                source,
                field,
                f"has {len(value)} probabilities; expected {len(names)} (one per action: {', '.join(names)})",
            )
        vector = np.array([as_probability(p, source, f"{field}[{i}]") for i, p in enumerate(value)])
    else:
        raise AnalysisInputError(
            source,
            field,
            f"expected probabilities (a list or a mapping action -> probability), got {_kind(value)}",
        )
    total = float(vector.sum())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise AnalysisInputError(source, field, f"probabilities sum to {total:.10g}; they must sum to 1")
    return vector / total


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, Sequence):
        return "a list"
    return type(value).__name__


def joint_action(value: Any, players, actions, source: str, field: str) -> tuple[int, ...]:
    """A joint action given as {player: action} or [action, ...] (one per player) as indices."""
    if isinstance(value, Mapping):
        missing = [p for p in players if p not in value]
        if missing:
            raise AnalysisInputError(source, f"{field}.{missing[0]}", "missing")
        stray = [p for p in value if p not in players]
        if stray:
            raise AnalysisInputError(
                source, f"{field}.{stray[0]}", f"unknown player; players are {', '.join(players)}"
            )
        names = [value[p] for p in players]
    elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) == len(players):
        names = list(value)
    else:
        raise AnalysisInputError(source, field, f"expected one action per player ({', '.join(players)})")
    joint = []
    for i, name in enumerate(names):
        if str(name) not in actions[i]:
            raise AnalysisInputError(
                source, f"{field}.{players[i]}", f"unknown action {name!r}; known: {', '.join(actions[i])}"
            )
        joint.append(list(actions[i]).index(str(name)))
    return tuple(joint)
