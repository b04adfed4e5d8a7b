"""Regret of a play history: external regret, swap regret with its maximising swap map, and the
empirical CE / CCE gaps of the history.

For one player with played actions a_t and counterfactual payoffs u_t(b) (what action b would
have earned in round t, the others' play held fixed):

    received        = sum_t u_t(a_t)
    external regret = max_b sum_t u_t(b) - received                 (best fixed action)
    swap regret     = sum_a max_b sum_{t: a_t = a} u_t(b) - received  (best rewrite a -> phi(a))

The swap map phi keys on the action that was played (the recommendation), not on anything else
about the round. Divided by the number of rounds, max over players of the external regret is
the CCE gap of the empirical joint distribution of play, and max of the swap regret its CE gap.

Two CSV layouts are read:
- counterfactual table: columns `action` (or `recommendation`), `payoff_if_<ACTION>` for every
  action, optional `received`, optional `player` (several players in one file), optional `round`;
- joint-action history: one column per player of a normal-form game, each cell an action name;
  counterfactual payoffs then come from the game.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.normal_form import NormalFormGame
from sepo.errors import SepoError
from sepo.inputs import read_text

_PAYOFF_PREFIX = "payoff_if_"


@dataclass(frozen=True, eq=False)
class PlayerRegret:
    """Regret of one player's history."""

    player: str
    actions: tuple[str, ...]
    rounds: int
    received: float
    best_fixed_action: str
    best_fixed_total: float
    external_regret: float
    swap_regret: float
    swap_map: dict[str, str]

    def to_dict(self) -> dict:
        return {"player": self.player, "rounds": self.rounds, "received": self.received,
                "best_fixed_action": self.best_fixed_action, "best_fixed_total": self.best_fixed_total,
                "external_regret": self.external_regret, "swap_regret": self.swap_regret,
                "swap_map": self.swap_map,
                "external_regret_per_round": self.external_regret / self.rounds,
                "swap_regret_per_round": self.swap_regret / self.rounds}


@dataclass(frozen=True, eq=False)
class RegretReport:
    """Every player's regret and the empirical CE / CCE gaps (payoff per round)."""

    players: list[PlayerRegret]

    @property
    def cce_gap(self) -> float:
        return max(max(0.0, p.external_regret) / p.rounds for p in self.players)

    @property
    def ce_gap(self) -> float:
        return max(p.swap_regret / p.rounds for p in self.players)

    def to_dict(self) -> dict:
        return {
            "players": [p.to_dict() for p in self.players],
            "ce_gap": self.ce_gap,
            "cce_gap": self.cce_gap,
        }


def player_regret(player: str, actions, played, counterfactual) -> PlayerRegret:
    """Regret from played action indices `[T]` and counterfactual payoffs `[T, |actions|]`."""
    played = np.asarray(played, dtype=int)
    counterfactual = np.asarray(counterfactual, dtype=float)
    rounds, size = counterfactual.shape
    received_per_round = counterfactual[np.arange(rounds), played]
    received = float(received_per_round.sum())
    fixed_totals = counterfactual.sum(axis=0)
    best_fixed = int(fixed_totals.argmax())
    by_recommendation = np.zeros((size, size))  # [a, b]: total of b over rounds where a was played
    np.add.at(by_recommendation, played, counterfactual)
    obeyed = np.diag(by_recommendation)
    rewrite = np.where(
        by_recommendation.max(axis=1) > obeyed, by_recommendation.argmax(axis=1), np.arange(size)
    )
    swap_gain = float((by_recommendation[np.arange(size), rewrite] - obeyed).sum())
    swap_map = {actions[a]: actions[int(rewrite[a])] for a in sorted(set(played.tolist())) if rewrite[a] != a}
    return PlayerRegret(
        player,
        tuple(actions),
        rounds,
        received,
        actions[best_fixed],
        float(fixed_totals[best_fixed]),
        float(fixed_totals[best_fixed]) - received,
        swap_gain,
        swap_map,
    )


def history_regret(game: NormalFormGame, joint_actions) -> RegretReport:
    """Regret of every player over a history of joint action indices `[T, n]` of `game`."""
    joint_actions = np.asarray(joint_actions, dtype=int)
    reports = []
    for i, player in enumerate(game.players):
        index = [joint_actions[:, j] for j in range(game.num_players)]
        counterfactual = np.stack(
            [
                game.payoffs[(i, *index[:i], np.full(len(joint_actions), b), *index[i + 1 :])]
                for b in range(game.shape[i])
            ],
            axis=1,
        )
        reports.append(player_regret(player, game.actions[i], joint_actions[:, i], counterfactual))
    return RegretReport(reports)


def empirical_joint(game: NormalFormGame, joint_actions) -> np.ndarray:
    """The empirical distribution over joint actions of a history."""
    counts = np.zeros(game.shape)
    np.add.at(counts, tuple(np.asarray(joint_actions, dtype=int).T), 1.0)
    return counts / counts.sum()


def load_history(path: str | Path, game: NormalFormGame | None = None) -> RegretReport:
    """Read a history CSV (either layout, see the module docstring) and compute its regret."""
    source = str(path)
    rows, columns = _read_csv(path)
    if any(c.startswith(_PAYOFF_PREFIX) for c in columns):
        return _counterfactual_history(rows, columns, source)
    if game is None:
        raise AnalysisInputError(
            source,
            "columns",
            f"no {_PAYOFF_PREFIX}<ACTION> columns, so this is a joint-action history; pass the game it was "
            "played in (--game FILE)",
        )
    missing = [p for p in game.players if p not in columns]
    if missing:
        raise AnalysisInputError(
            source,
            "columns",
            f"missing a column for player {missing[0]!r} of game {game.source} (columns: "
            f"{', '.join(columns)})",
        )
    joint = [
        [
            _action(game.actions[i], row[p], source, f"row {line} column {p}")
            for i, p in enumerate(game.players)
        ]
        for line, row in rows
    ]
    return history_regret(game, joint)


def _counterfactual_history(rows, columns, source: str) -> RegretReport:
    action_column = (
        "action" if "action" in columns else "recommendation" if "recommendation" in columns else None
    )
    if action_column is None:
        raise AnalysisInputError(
            source,
            "columns",
            "a counterfactual table needs an `action` (or `recommendation`) column with the action played",
        )
    actions = tuple(c[len(_PAYOFF_PREFIX):] for c in columns if c.startswith(_PAYOFF_PREFIX))
    by_player: dict[str, tuple[list[int], list[list[float]]]] = {}
    for line, row in rows:
        player = row.get("player") or "player"
        played, payoffs = by_player.setdefault(player, ([], []))
        choice = _action(actions, row[action_column], source, f"row {line} column {action_column}")
        values = [
            _number(row[_PAYOFF_PREFIX + a], source, f"row {line} column {_PAYOFF_PREFIX}{a}")
            for a in actions
        ]
        if row.get("received") not in (None, ""):
            received = _number(row["received"], source, f"row {line} column received")
            if abs(received - values[choice]) > 1e-9 * max(1.0, abs(received)):
                raise AnalysisInputError(
                    source,
                    f"row {line} column received",
                    f"{received:g} differs from {_PAYOFF_PREFIX}{actions[choice]} = {values[choice]:g}, the "
                    "payoff of the action played",
                )
        played.append(choice)
        payoffs.append(values)
    return RegretReport(
        [player_regret(p, actions, played, payoffs) for p, (played, payoffs) in by_player.items()]
    )


def _read_csv(path: str | Path) -> tuple[list[tuple[int, dict[str, str]]], list[str]]:
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise AnalysisInputError(str(path), "file", "no such file")
    try:
        text = read_text(path, "history file")
    except SepoError as error:
        raise AnalysisInputError(str(path), "file", str(error)) from None
    try:
        with io.StringIO(text, newline="") as handle:
            reader = csv.DictReader(handle, skipinitialspace=True)
            columns = [c.strip() for c in (reader.fieldnames or [])]
            rows = []
            for line, row in enumerate(reader, start=2):
                if None in row:
                    raise AnalysisInputError(
                        str(path),
                        f"row {line}",
                        f"has more cells than the {len(columns)} columns of the header",
                    )
                rows.append((line, {k.strip(): (v.strip() if v is not None else "") for k, v in row.items()}))
    except csv.Error as error:  # e.g. a cell over the csv module's field size limit
        raise AnalysisInputError(str(path), "file", f"not readable CSV: {error}") from None
    if not columns:
        raise AnalysisInputError(str(path), "header", "empty file: expected a header row")
    if not rows:
        raise AnalysisInputError(str(path), "rows", "no rounds after the header")
    return rows, columns


def _action(actions, name: str, source: str, field: str) -> int:
    if name not in actions:
        raise AnalysisInputError(source, field, f"unknown action {name!r}; known: {', '.join(actions)}")
    return list(actions).index(name)


def _number(text: str, source: str, field: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise AnalysisInputError(source, field, f"expected a number, got {text!r}") from None
    if not np.isfinite(value):
        raise AnalysisInputError(source, field, f"expected a finite number, got {text!r}")
    return value
