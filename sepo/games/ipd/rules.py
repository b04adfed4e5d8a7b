"""The iterated prisoner's dilemma.

Rules. Two players play `rounds` rounds (8 in the paper). Each round both choose COOPERATE or
DEFECT at the same time, then both see both choices. The stage payoffs, for (own, other):
mutual cooperation R each, mutual defection P each, a defector against a cooperator gets T
and the cooperator S. The paper uses R = 3, S = 0, T = 5, P = 1. A prisoner's dilemma needs
T > R > P > S (defection dominates, mutual defection is worse than mutual cooperation) and
2R > T + S (taking turns exploiting each other is worse than cooperating); other matrices are
accepted with a warning. An asymmetric matrix may be given as [[[u0, u1] for column] for row].

Actions are 0 = COOPERATE and 1 = DEFECT. A player's decision shows the history from its own
side: `observation["history"]` is a tuple of (own action, other action) per past round, and
the information-state key spells it as "CD,DD" (own letter first), "start" before round 1.
With `memory=n` the key keeps only the last n rounds: the information states of a player that
remembers n rounds (tabular memory-n policies and the exact solver's states); prompts always
show the whole history.
"""
from __future__ import annotations

import itertools
import json
import re
import warnings

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import (
    Decision,
    Game,
    RepeatedMatchState,
    RoundResult,
    TextView,
    episode_record_bytes,
    longest_within,
)

COOPERATE, DEFECT = 0, 1
ACTIONS = (COOPERATE, DEFECT)
ACTION_NAMES = ("COOPERATE", "DEFECT")
LETTERS = "CD"
PAPER_ROUNDS = 8
PAPER_PAYOFFS = {"R": 3.0, "S": 0.0, "T": 5.0, "P": 1.0}
START = "start"


def history_key(history) -> str:
    """The information-state key of a history of (own, other) pairs: "CD,DD", or "start"."""
    return ",".join(LETTERS[own] + LETTERS[other] for own, other in history) or START


def key_history(key: str) -> tuple[tuple[int, int], ...]:
    """Inverse of `history_key`."""
    if key == START:
        return ()
    return tuple((LETTERS.index(pair[0]), LETTERS.index(pair[1])) for pair in key.split(","))


class Payoffs:
    """The stage payoff matrix `matrix[row action, column action] = (row payoff, column payoff)`."""

    def __init__(self, matrix):
        matrix = np.asarray(matrix, dtype=float)
        if matrix.shape != (2, 2, 2):
            raise SepoError(
                "ipd payoff matrix must have shape 2x2x2 ([row action][column action] -> [row, column "
                f"payoff]), got {matrix.shape}"
            )
        if not np.all(np.isfinite(matrix)):
            raise SepoError("ipd payoffs must be finite numbers")
        self.matrix = matrix

    @classmethod
    def symmetric(cls, R: float, S: float, T: float, P: float) -> "Payoffs":
        return cls([[[R, R], [S, T]], [[T, S], [P, P]]])

    @classmethod
    def parse(cls, spec) -> "Payoffs":
        """From "R=3,S=0,T=5,P=1", "paper", a mapping with R, S, T, P, or a 2x2x2 matrix (JSON text or
        list)."""
        if isinstance(spec, Payoffs):
            return spec
        if spec is None or spec == "paper":
            return cls.symmetric(**PAPER_PAYOFFS)
        if isinstance(spec, str):
            text = spec.strip()
            if text.startswith("["):
                try:
                    spec = json.loads(text)
                except json.JSONDecodeError as error:
                    raise SepoError(
                        f"ipd payoffs {spec!r} are not a readable JSON matrix: {error.msg}"
                    ) from None
            else:
                pairs = [p for p in re.split(r"[,\s]+", text) if p]
                if not all("=" in p for p in pairs):
                    raise SepoError(f"ipd payoffs {spec!r}: write R=3,S=0,T=5,P=1 or a 2x2x2 JSON matrix")
                spec = {}
                for pair in pairs:
                    key, value = pair.split("=", 1)
                    try:
                        spec[key.strip().upper()] = float(value)
                    except ValueError:
                        raise SepoError(f"ipd payoffs {text!r}: {value!r} is not a number") from None
        if isinstance(spec, dict):
            keys = {k.upper() for k in spec}
            if keys != {"R", "S", "T", "P"}:
                raise SepoError(f"ipd payoffs need exactly R, S, T and P, got {sorted(spec)}")
            return cls.symmetric(**{k.upper(): float(v) for k, v in spec.items()})
        try:
            return cls(spec)
        except (TypeError, ValueError):
            raise SepoError(f"ipd payoff matrix must have shape 2x2x2, got {spec!r}") from None

    def of(self, player: int) -> np.ndarray:
        """`[own action, other action]` payoffs of `player` (0 = row, 1 = column)."""
        return self.matrix[:, :, 0] if player == 0 else self.matrix[:, :, 1].T

    def rstp(self, player: int = 0) -> dict[str, float]:
        m = self.of(player)
        return {"R": m[0, 0], "S": m[0, 1], "T": m[1, 0], "P": m[1, 1]}

    @property
    def is_symmetric(self) -> bool:
        return bool(np.array_equal(self.of(0), self.of(1)))

    def dilemma_problems(self) -> list[str]:
        """Why this is not a prisoner's dilemma (empty if it is one), per player."""
        problems = []
        for player in (0, 1):
            v = self.rstp(player)
            if not v["T"] > v["R"] > v["P"] > v["S"]:
                problems.append(
                    f"player {player}: T > R > P > S fails (T={v['T']:g}, R={v['R']:g}, P={v['P']:g}, "
                    f"S={v['S']:g})"
                )
            if not 2 * v["R"] > v["T"] + v["S"]:
                problems.append(f"player {player}: 2R > T + S fails")
        return problems

    def to_json(self):
        return self.rstp(0) if self.is_symmetric else self.matrix.tolist()

    def __eq__(self, other) -> bool:
        return isinstance(other, Payoffs) and np.array_equal(self.matrix, other.matrix)


class IPDState(RepeatedMatchState):
    """One match: the joint actions so far. Each player's view (its history, whole-history key
    and scores) is extended by the rounds played since it was last built, and a clone keeps it:
    rebuilt from scratch at every decision, a 10,000-round match cost time in the square of the
    rounds."""

    def __init__(self, game):
        super().__init__(game)
        # player -> (rounds, history, whole-history key, own score, other score)
        self._views: dict[int, tuple] = {}

    def clone(self) -> "IPDState":
        copy = super().clone()
        copy._views = dict(self._views)
        return copy

    def _view(self, player: int) -> tuple:
        done, history, key, own, other = self._views.get(player, (0, (), START, 0.0, 0.0))
        if done > len(self._history):
            done, history, key, own, other = 0, (), START, 0.0, 0.0
        if done < len(self._history):
            pairs = tuple((joint[player], joint[1 - player]) for joint in self._history[done:])
            added = history_key(pairs)
            history, key = history + pairs, added if key == START else key + "," + added
            own += sum(r.payoffs[player] for r in self._rounds[done:])
            other += sum(r.payoffs[1 - player] for r in self._rounds[done:])
            self._views[player] = (len(self._history), history, key, own, other)
        return history, key, own, other

    def decision(self, player: int) -> Decision:
        history, key, own, other = self._view(player)
        return Decision(
            game=self._game.name,
            player=player,
            info_key=key if self._game.memory is None else history_key(self._game.remembered(history)),
            legal_actions=ACTIONS,
            action_names=ACTION_NAMES,
            observation={
                "round": len(history) + 1,
                "rounds": self._game.rounds,
                "history": history,
                "my_score": own,
                "opponent_score": other,
                "payoffs": self._game.payoffs.rstp(player),
            },
        )

    def legal(self, action: int) -> bool:
        return action in ACTIONS

    def legal_description(self) -> str:
        return "legal actions are 0 (cooperate) and 1 (defect)"

    def play_round(self, a0: int, a1: int) -> RoundResult:
        m = self._game.payoffs.matrix[a0, a1]
        return RoundResult(payoffs=(float(m[0]), float(m[1])), info={"actions": (a0, a1)})


class IteratedPrisonersDilemma(Game):
    """`rounds` rounds of the prisoner's dilemma with payoff matrix `payoffs`."""

    name = "ipd"
    num_players = 2
    zero_sum = False

    def __init__(
        self, rounds: int = PAPER_ROUNDS, payoffs=None, protocol: str = "rigorous", memory: int | None = None
    ):
        if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
            raise SepoError(f"ipd: rounds must be a positive integer, got {rounds!r}")
        if memory is not None and (
            isinstance(memory, bool) or not isinstance(memory, (int, np.integer)) or memory < 0
        ):
            raise SepoError(f"ipd: memory must be a whole number of rounds >= 0, got {memory!r}")
        self.memory = None if memory is None or memory >= rounds else int(memory)
        if protocol not in ("rigorous", "paper"):
            raise SepoError(f"unknown protocol {protocol!r}; use one of: rigorous, paper")
        self.rounds = int(rounds)
        self.payoffs = Payoffs.parse(payoffs)
        self.protocol = protocol
        problems = self.payoffs.dilemma_problems()
        if problems:
            warnings.warn(
                f"ipd payoffs are not a prisoner's dilemma ({'; '.join(problems)}); playing them anyway",
                stacklevel=2,
            )
        from sepo.games.ipd.text import IPDText

        self._text = IPDText(self, style=protocol)

    @property
    def max_payoff(self) -> float:
        """The paper's scale: mutual cooperation (R = 3 in the paper, so s = 1); the largest
        absolute payoff if mutual cooperation pays nothing."""
        reward = min(self.payoffs.rstp(0)["R"], self.payoffs.rstp(1)["R"])
        return float(reward) if reward > 0 else float(np.abs(self.payoffs.matrix).max() or 1.0)

    def with_memory(self, memory: int | None) -> "IteratedPrisonersDilemma":
        """The same game with information states that keep `memory` rounds (None: the whole history)."""
        import copy

        other = copy.copy(self)
        other.memory = None if memory is None or memory >= self.rounds else int(memory)
        return other

    def episode_bytes(self) -> int:
        """Each decision's observation holds the history so far, its pairs shared with the
        previous decision's (8 bytes a round): quadratic in the rounds. Measured (tracemalloc, TFT
        against TFT): 2.2 MB an episode at 500 rounds, 7.1 MB at 1,000 (1,800 bytes a round and
        10.5 a round squared over two; the per-decision pairs were new tuples before: 9.1 and 35 MB)."""
        return episode_record_bytes(self.rounds, 6000, 16)

    def episode_size_hint(self, per_episode: int) -> str | None:
        longest = longest_within(per_episode, 6000, 16)
        return f"--rounds {longest} or fewer" if longest >= 1 else None

    def remembered(self, history):
        """The part of a history that the information state keeps (the last `memory` rounds)."""
        return history if self.memory is None else history[len(history) - min(len(history), self.memory):]

    @staticmethod
    def history_key(history) -> str:
        """The information-state key of a (remembered) history (the module's `history_key`)."""
        return history_key(history)

    def info_keys(self) -> list[str]:
        """Every information-state key, in round order then base-4 order (CC, CD, DC, DD)."""
        depth = self.rounds - 1 if self.memory is None else min(self.memory, self.rounds - 1)
        keys = [START]
        for length in range(1, depth + 1):
            keys += [
                history_key(h) for h in itertools.product(((0, 0), (0, 1), (1, 0), (1, 1)), repeat=length)
            ]
        return keys

    def new_initial_state(self) -> IPDState:
        return IPDState(self)

    @property
    def text(self) -> TextView:
        return self._text

    def stage_game(self, agent_player: int = 0):
        """The stage game from `agent_player`'s side, for the exact DP."""
        from sepo.metrics.repeated import StageGame

        return StageGame(self.payoffs.of(agent_player), self.payoffs.of(1 - agent_player).T)


def make_game(
    protocol: str = "rigorous", rounds: int = PAPER_ROUNDS, payoffs=None, memory: int | None = None
) -> IteratedPrisonersDilemma:
    """The domain's game factory (validates its parameters: SepoError on bad input)."""
    return IteratedPrisonersDilemma(rounds=rounds, payoffs=payoffs, protocol=protocol, memory=memory)
