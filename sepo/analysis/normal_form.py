"""Normal-form games with n players and named actions; mixed profiles and their incentives.

A game is a payoff tensor `payoffs[i, a_1, ..., a_n]`: player i's payoff when each player j
plays action a_j. A mixed profile is one probability vector per player. Everything a Nash
check needs follows from one operation, `deviation_payoffs`: player i's expected payoff for
each of its pure actions while the others keep their mixed strategies.

    u_i(sigma)        = deviation_payoffs(sigma, i) . sigma_i
    gain_i(sigma)     = max_a deviation_payoffs(sigma, i)[a] - u_i(sigma)      (>= 0)
    NashConv(sigma)   = sum_i gain_i(sigma)                  (0 exactly at a Nash equilibrium)

File format (YAML or JSON):

    players: [drafter, checker]
    actions: {drafter: [careful, rushed], checker: [inspect, skim]}
    payoffs:            # one cell per joint action, each cell lists every player's payoff
      - [[2, 1], [2, 0]]
      - [[0, 1], [4, -2]]
    profile:            # optional: a mixed profile to audit
      drafter: {careful: 0.7, rushed: 0.3}
      checker: [0.5, 0.5]

`payoffs` may instead map each player to its own tensor of shape (|A_1|, ..., |A_n|).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.io import (
    as_name_list,
    distribution,
    numeric_tensor,
    read_data,
    require_key,
    require_mapping,
)

Profile = tuple[np.ndarray, ...]


@dataclass(frozen=True, eq=False)
class NormalFormGame:
    """An n-player normal-form game: player names, action names, payoff tensor `[n, |A_1|, ..., |A_n|]`."""

    players: tuple[str, ...]
    actions: tuple[tuple[str, ...], ...]
    payoffs: np.ndarray
    name: str = "game"
    source: str = "<memory>"
    profile: Profile | None = field(default=None, compare=False)

    def __post_init__(self):
        payoffs = np.asarray(self.payoffs, dtype=float)
        expected = (len(self.players),) + tuple(len(a) for a in self.actions)
        if len(self.actions) != len(self.players):
            raise AnalysisInputError(
                self.source, "actions", f"{len(self.actions)} action lists for {len(self.players)} players"
            )
        if payoffs.shape != expected:
            raise AnalysisInputError(
                self.source,
                "payoffs",
                f"tensor has shape {payoffs.shape}; expected {expected} (players, then actions of each "
                "player)",
            )
        if not np.all(np.isfinite(payoffs)):
            raise AnalysisInputError(self.source, "payoffs", "contains a non-finite number")
        object.__setattr__(self, "payoffs", payoffs)

    @classmethod
    def from_bimatrix(
        cls, row, column, *, players=("row", "column"), actions=None, name="game"
    ) -> "NormalFormGame":
        """Two-player game from the row player's matrix A and the column player's matrix B."""
        row, column = np.asarray(row, dtype=float), np.asarray(column, dtype=float)
        if actions is None:
            actions = (
                tuple(f"r{i}" for i in range(row.shape[0])),
                tuple(f"c{j}" for j in range(row.shape[1])),
            )
        return cls(tuple(players), tuple(tuple(a) for a in actions), np.stack([row, column]), name=name)

    @classmethod
    def from_tensor(cls, payoffs, *, players=None, actions=None, name="game") -> "NormalFormGame":
        """Game from a tensor `[n, |A_1|, ..., |A_n|]`, with default names p1.. and a0...."""
        payoffs = np.asarray(payoffs, dtype=float)
        n = payoffs.shape[0]
        players = tuple(players) if players is not None else tuple(f"p{i + 1}" for i in range(n))
        if actions is None:
            actions = tuple(tuple(f"a{k}" for k in range(size)) for size in payoffs.shape[1:])
        return cls(players, tuple(tuple(a) for a in actions), payoffs, name=name)

    @property
    def num_players(self) -> int:
        return len(self.players)

    @property
    def shape(self) -> tuple[int, ...]:
        """Number of actions of each player."""
        return self.payoffs.shape[1:]

    def player_index(self, player: str | int) -> int:
        if isinstance(player, int):
            return player
        if player not in self.players:
            raise AnalysisInputError(
                self.source, "player", f"unknown player {player!r}; known: {', '.join(self.players)}"
            )
        return self.players.index(player)

    def action_index(self, player: int, action: str) -> int:
        if action not in self.actions[player]:
            raise AnalysisInputError(
                self.source,
                f"actions.{self.players[player]}",
                f"unknown action {action!r}; known: {', '.join(self.actions[player])}",
            )
        return self.actions[player].index(action)

    def uniform_profile(self) -> Profile:
        return tuple(np.full(size, 1.0 / size) for size in self.shape)

    def pure_profile(self, joint: Sequence[int]) -> Profile:
        return tuple(np.eye(size)[a] for size, a in zip(self.shape, joint))

    def deviation_payoffs(self, profile: Profile, player: int) -> np.ndarray:
        """Player's expected payoff for each of its pure actions, the others playing `profile`."""
        if self.num_players == 2:
            return self.payoffs[0] @ profile[1] if player == 0 else profile[0] @ self.payoffs[1]
        tensor = self.payoffs[player]
        for other in reversed(range(self.num_players)):
            if other != player:
                tensor = np.tensordot(tensor, profile[other], axes=([other], [0]))
        return tensor

    def expected_payoffs(self, profile: Profile) -> np.ndarray:
        """u_i(sigma) for every player i."""
        return np.array([self.deviation_payoffs(profile, i) @ profile[i] for i in range(self.num_players)])

    def joint_expected_payoffs(self, joint: np.ndarray) -> np.ndarray:
        """Each player's expected payoff under a distribution over joint actions (shape `shape`)."""
        return np.tensordot(self.payoffs, joint, axes=self.num_players)

    def best_responses(self, profile: Profile, player: int, tol: float = 1e-9) -> list[int]:
        """Every pure action within `tol` of the best deviation payoff."""
        values = self.deviation_payoffs(profile, player)
        return [int(a) for a in np.flatnonzero(values >= values.max() - tol)]

    def deviation_gains(self, profile: Profile) -> np.ndarray:
        """gain_i = max_a u_i(a, sigma_-i) - u_i(sigma) for every player (each >= 0)."""
        gains = []
        for i in range(self.num_players):
            values = self.deviation_payoffs(profile, i)
            gains.append(max(0.0, float(values.max() - values @ profile[i])))
        return np.array(gains)

    def nash_conv(self, profile: Profile) -> float:
        """E(sigma) = sum of every player's best unilateral gain; zero iff sigma is Nash."""
        return float(self.deviation_gains(profile).sum())

    def is_nash(self, profile: Profile, tol: float = 1e-9) -> bool:
        """No player gains more than `tol` by a unilateral deviation."""
        return bool(np.all(self.deviation_gains(profile) <= tol))

    def pure_nash_equilibria(self, tol: float = 1e-12) -> list[tuple[int, ...]]:
        """Every joint pure action from which no player gains by switching its own action."""
        equilibria = []
        for joint in itertools.product(*(range(size) for size in self.shape)):
            if all(
                self.payoffs[(i, *joint[:i], slice(None), *joint[i + 1 :])].max()
                <= self.payoffs[(i, *joint)] + tol
                for i in range(self.num_players)
            ):
                equilibria.append(joint)
        return equilibria

    def is_symmetric(self, tol: float = 1e-12) -> bool:
        """Two players with the same number of actions and B = A^T (a role-free game)."""
        if self.num_players != 2 or self.shape[0] != self.shape[1]:
            return False
        return bool(np.allclose(self.payoffs[1], self.payoffs[0].T, rtol=0.0, atol=tol))

    def welfare(self) -> np.ndarray:
        """Sum of all players' payoffs for each joint action."""
        return self.payoffs.sum(axis=0)

    def constant_sum(self, tol: float = 1e-12) -> float | None:
        """The constant c if payoffs sum to c in every cell (zero-sum when c = 0), else None."""
        welfare = self.welfare()
        if np.ptp(welfare) <= tol * max(1.0, float(np.abs(self.payoffs).max())):
            return float(welfare.flat[0])
        return None

    def profile_from_data(self, data: Any, field: str = "profile") -> Profile:
        """Parse a mixed profile: a mapping player -> distribution, or a list of distributions."""
        if isinstance(data, Mapping):
            unknown = [p for p in data if str(p) not in self.players]
            if unknown:
                raise AnalysisInputError(
                    self.source, f"{field}.{unknown[0]}", f"unknown player; known: {', '.join(self.players)}"
                )
            missing = [p for p in self.players if p not in data]
            if missing:
                raise AnalysisInputError(
                    self.source,
                    f"{field}.{missing[0]}",
                    "missing: a profile needs a strategy for every player",
                )
            items = [data[p] for p in self.players]
        elif isinstance(data, Sequence) and not isinstance(data, str) and len(data) == self.num_players:
            items = list(data)
        else:
            raise AnalysisInputError(
                self.source, field, f"expected a strategy for each of {', '.join(self.players)}"
            )
        return tuple(
            distribution(item, self.actions[i], self.source, f"{field}.{self.players[i]}")
            for i, item in enumerate(items)
        )

    def describe_profile(self, profile: Profile) -> dict[str, dict[str, float]]:
        return {
            p: {a: float(x) for a, x in zip(self.actions[i], profile[i])} for i, p in enumerate(self.players)
        }


def load_game(path: str | Path) -> NormalFormGame:
    """Read a normal-form game (and an optional profile to audit) from YAML or JSON."""
    return game_from_data(read_data(path), str(path))


def game_from_data(data: Any, source: str = "<memory>") -> NormalFormGame:
    data = require_mapping(data, source, "top level")
    actions_data = require_key(data, "actions", source)
    if "players" in data:
        players = as_name_list(data["players"], source, "players", min_length=2)
    elif isinstance(actions_data, Mapping):
        players = as_name_list(list(actions_data), source, "actions", min_length=2)
    else:
        raise AnalysisInputError(
            source, "players", "missing (or give actions as a mapping player -> action names)"
        )
    if isinstance(actions_data, Mapping):
        actions = _per_player(
            actions_data, players, source, "actions", lambda v, f: as_name_list(v, source, f)
        )
    elif isinstance(actions_data, Sequence) and not isinstance(actions_data, str):
        if len(actions_data) != len(players):
            raise AnalysisInputError(
                source, "actions", f"{len(actions_data)} action lists for {len(players)} players"
            )
        actions = [as_name_list(a, source, f"actions[{i}]") for i, a in enumerate(actions_data)]
    else:
        raise AnalysisInputError(source, "actions", "expected a mapping player -> action names")
    axes = [(len(a), f"one per action of {p}") for p, a in zip(players, actions)]
    payoff_data = require_key(data, "payoffs", source)
    if isinstance(payoff_data, Mapping):
        payoffs = np.stack(
            _per_player(
                payoff_data, players, source, "payoffs", lambda v, f: numeric_tensor(v, axes, source, f)
            )
        )
    else:
        cells = numeric_tensor(
            payoff_data, axes + [(len(players), "one payoff per player")], source, "payoffs"
        )
        payoffs = np.moveaxis(cells, -1, 0)
    name = str(data.get("name", Path(source).stem if source != "<memory>" else "game"))
    game = NormalFormGame(players, tuple(actions), payoffs, name=name, source=source)
    if data.get("profile") is not None:
        object.__setattr__(game, "profile", game.profile_from_data(data["profile"]))
    return game


def _per_player(data: Mapping, players, source, field, parse) -> list:
    """`parse(data[p], "field.p")` for every player, in order; unknown or missing players are errors."""
    unknown = [p for p in data if str(p) not in players]
    if unknown:
        raise AnalysisInputError(
            source, f"{field}.{unknown[0]}", f"unknown player; players are {', '.join(players)}"
        )
    missing = [p for p in players if p not in data]
    if missing:
        raise AnalysisInputError(source, f"{field}.{missing[0]}", "missing")
    return [parse(data[p], f"{field}.{p}") for p in players]
