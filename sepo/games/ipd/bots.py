"""Scripted IPD players: the paper's opponents (docs/paper-protocol.md §3.1) and demonstrators.

Each bot is a small class with a `name`, a `classifier` (Axelrod's keys: `memory_depth`, the
number of past joint moves its play reads, and `stochastic`), where the whole history would be
needed a small `play_state(history)` its play depends on besides the round (the exact solver's
states), and one rule,
`cooperate_probability(own, other)`, vectorised over many histories at once: `own` and `other`
are `[n, t]` arrays of past moves (0 = COOPERATE, 1 = DEFECT) at round index t. The same rule
serves play (`action_probabilities`), fast batched rollouts and the exact DP.
"""
from __future__ import annotations

import abc

import numpy as np

from sepo.games.base import Decision
from sepo.policies.base import Policy


class IPDBot(Policy):
    """An IPD strategy given by P(COOPERATE | own past moves, other's past moves)."""

    name = "IPDBot"
    classifier: dict = {}

    @abc.abstractmethod
    def cooperate_probability(self, own: np.ndarray, other: np.ndarray) -> np.ndarray:
        """P(COOPERATE) for each of n histories (`own`, `other`: [n, t] arrays of past moves)."""

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        history = decision.observation["history"]
        depth = self.classifier.get("memory_depth")
        if isinstance(depth, int) and not isinstance(depth, bool) and depth < len(history):
            # all it reads: one round of a long match costs no more than the first
            history = history[len(history) - depth:]
        moves = np.array(history, dtype=np.int64).reshape(len(history), 2)
        own, other = moves[None, :, 0], moves[None, :, 1]
        p = float(self.cooperate_probability(own, other)[0])
        return {0: p, 1: 1.0 - p}

    def __repr__(self) -> str:
        return self.name


def _rounds(own: np.ndarray) -> np.ndarray:
    return np.ones(own.shape[0])


class AlwaysCooperate(IPDBot):
    """Always cooperates."""

    name = "AlwaysCooperate"
    classifier = {"memory_depth": 0, "stochastic": False}

    def cooperate_probability(self, own, other):
        return _rounds(own)


class AlwaysDefect(IPDBot):
    """Always defects."""

    name = "AlwaysDefect"
    classifier = {"memory_depth": 0, "stochastic": False}

    def cooperate_probability(self, own, other):
        return 0.0 * _rounds(own)


class TFT(IPDBot):
    """Tit-for-tat: cooperates first, then copies the other's last move."""

    name = "TFT"
    classifier = {"memory_depth": 1, "stochastic": False}

    def cooperate_probability(self, own, other):
        return _rounds(own) if other.shape[1] == 0 else (other[:, -1] == 0).astype(float)


class GenerousTFT(IPDBot):
    """Cooperates first; then cooperates after the other's cooperation, and after a defection
    with probability `p` (0.25 in the paper)."""

    name = "GenerousTFT"
    classifier = {"memory_depth": 1, "stochastic": True}

    def __init__(self, p: float = 0.25):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"GenerousTFT p must be in [0, 1], got {p}")
        self.p = float(p)
        self.name = "GenerousTFT" if p == 0.25 else f"GenerousTFT(p={p:g})"

    def cooperate_probability(self, own, other):
        return _rounds(own) if other.shape[1] == 0 else np.where(other[:, -1] == 0, 1.0, self.p)


class GrimTrigger(IPDBot):
    """Cooperates until the other defects once, then defects forever."""

    name = "GrimTrigger"
    classifier = {"memory_depth": float("inf"), "stochastic": False}

    @staticmethod
    def play_state(history) -> bool:
        """Whether the other has defected yet: all the play depends on."""
        return any(other == 1 for _, other in history)

    @staticmethod
    def play_state_after(state: bool, own: int, other: int) -> bool:
        """The state after one more round (`play_state` without re-reading the history)."""
        return state or other == 1

    def cooperate_probability(self, own, other):
        return (other == 0).all(axis=1).astype(float)


class Mixed(IPDBot):
    """Cooperates with probability `p` each round, independently of the history."""

    name = "Mixed"
    classifier = {"memory_depth": 0, "stochastic": True}

    def __init__(self, p: float = 0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Mixed p must be in [0, 1], got {p}")
        self.p = float(p)
        self.name = f"Mixed(p={p:g})"

    def cooperate_probability(self, own, other):
        return self.p * _rounds(own)


class AlternatingDefect(IPDBot):
    """Defects at round indices 0, 2, 4, ... and cooperates at 1, 3, 5, ..., whatever happens."""

    name = "AlternatingDefect"
    classifier = {"memory_depth": float("inf"), "stochastic": False}  # it reads the round, not a few moves

    @staticmethod
    def play_state(history) -> tuple:
        """Nothing besides the round."""
        return ()

    @staticmethod
    def play_state_after(state: tuple, own: int, other: int) -> tuple:
        return ()

    def cooperate_probability(self, own, other):
        return float(own.shape[1] % 2 == 1) * _rounds(own)


class RandomPlay(IPDBot):
    """Each move with probability 1/2 (the paper's uniform-random demonstrator)."""

    name = "Random"
    classifier = {"memory_depth": 0, "stochastic": True}

    def cooperate_probability(self, own, other):
        return 0.5 * _rounds(own)


BOTS = {
    cls.name: cls
    for cls in (
        AlwaysCooperate,
        AlwaysDefect,
        TFT,
        GenerousTFT,
        GrimTrigger,
        Mixed,
        AlternatingDefect,
        RandomPlay,
    )
}


def bot_table() -> dict:
    return dict(BOTS)


def make_bot(name: str, params: dict, game=None):
    """Bots outside `BOTS`: `axelrod:NAME` (any strategy of the Axelrod library, imported now)."""
    from sepo.errors import SepoError
    from sepo.games.registry import unknown_name

    if name.startswith("axelrod:"):
        from sepo.games.ipd.axelrod_bots import AxelrodPlayer

        return AxelrodPlayer(name.split(":", 1)[1], **params)
    raise SepoError(unknown_name("bot", name, [*BOTS, "axelrod:NAME"], " for ipd"))


def axelrod_agent(arg: str, game=None):
    """The agent spec `axelrod:NAME` or `axelrod:NAME(k=v, ...)`."""
    from sepo.opponents.pools import parse_bot

    spec = parse_bot("ipd", f"axelrod:{arg}")
    return spec.build(game)
