"""Scripted split-bargaining players: the paper's opponents (docs/paper-protocol.md §3.3) and its SFT
demonstrators (§4.1).

A bot demands a share of the pie: with the paper's pie of 10 the shares below are its numbers
exactly (Fair 5, Balanced 6, Selfish 7, Hardball 8, Concede 6 or 5 after a breakdown); with
another pie a share is rounded half up and kept inside the demand range.

Each bot is a small class with a `name`, a `classifier` (Axelrod's keys: `memory_depth`, the
number of past rounds it needs besides the round index, and `stochastic`) and one rule,
`probabilities(own, other, spec)`, vectorised over many histories at once: `own` and `other`
are `[n, t]` arrays of past demands in points, `spec` the game's `DemandSpec`; it returns the
probability of each demand, `[n, K]`. The same rule serves play, fast batched rollouts, the
exact solver and the trainers.

Cheap talk (`--talk`): each bot says its `line` before every round (a pool entry may give another,
`{bot: Fair, message: "..."}`); the lines state only what the bot does, and no demand ever reads
a message.
"""
from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sepo.games.base import Decision
from sepo.games.talk import check_message
from sepo.policies.base import Policy


@dataclass(frozen=True)
class DemandSpec:
    """The pie and the demand range a bot plays in."""

    pie: int
    low: int
    high: int

    @classmethod
    def of(cls, source) -> "DemandSpec":
        """From a game or a decision's observation."""
        if isinstance(source, Mapping):
            return cls(int(source["pie"]), int(source["min_demand"]), int(source["max_demand"]))
        return cls(source.pie, source.min_demand, source.max_demand)

    @property
    def size(self) -> int:
        return self.high - self.low + 1

    def share(self, fraction: float) -> int:
        """`fraction` of the pie in whole points (half up), inside the range."""
        return self.clamp(math.floor(fraction * self.pie + 0.5))

    def clamp(self, demand):
        return (
            np.clip(demand, self.low, self.high)
            if isinstance(demand, np.ndarray)
            else min(self.high, max(self.low, int(demand)))
        )

    def one_hot(self, demands: np.ndarray) -> np.ndarray:
        out = np.zeros((len(demands), self.size))
        out[np.arange(len(demands)), np.asarray(demands, dtype=np.int64) - self.low] = 1.0
        return out


class NegotiationBot(Policy):
    """A split-bargaining strategy given by P(demand | own past demands, other's past demands)."""

    name = "NegotiationBot"
    classifier: dict = {}
    line: str | None = None

    def __init__(self, message: str | None = None):
        if message is not None:
            self.line = check_message(message)

    def message(self, decision: Decision) -> str | None:
        return self.line

    @abc.abstractmethod
    def probabilities(self, own: np.ndarray, other: np.ndarray, spec: DemandSpec) -> np.ndarray:
        """P(each demand low..high) for n histories (`own`, `other`: [n, t] past demands in points)."""

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        return self.batch_action_probabilities([decision])[0]

    def batch_action_probabilities(self, decisions: list[Decision]) -> list[dict[int, float]]:
        """One vectorised call per (demand range, round) among `decisions`."""
        out: list = [None] * len(decisions)
        groups: dict = {}
        for i, d in enumerate(decisions):
            groups.setdefault((DemandSpec.of(d.observation), len(d.observation["demands"])), []).append(i)
        for (spec, t), rows in groups.items():
            demands = np.array([decisions[i].observation["demands"] for i in rows], dtype=np.int64).reshape(
                len(rows), t, 2
            )
            probs = self.probabilities(demands[:, :, 0], demands[:, :, 1], spec)
            for i, p in zip(rows, probs.tolist()):
                out[i] = dict(enumerate(p))
        return out

    def __repr__(self) -> str:
        return self.name


class FixedShare(NegotiationBot):
    """Demands the same share of the pie every round."""

    share = 0.5
    classifier = {"memory_depth": 0, "stochastic": False}

    def probabilities(self, own, other, spec):
        return spec.one_hot(np.full(own.shape[0], spec.share(self.share)))


class Fair(FixedShare):
    """Demands half the pie (5 of 10)."""

    name, share = "Fair", 0.5
    line = "Let us split the points evenly."


class Balanced(FixedShare):
    """Demands 60% of the pie (6 of 10)."""

    name, share = "Balanced", 0.6
    line = "I would like a little more than half."


class Selfish(FixedShare):
    """Demands 70% of the pie (7 of 10)."""

    name, share = "Selfish", 0.7
    line = "I need most of the points."


class Hardball(FixedShare):
    """Demands 80% of the pie (8 of 10)."""

    name, share = "Hardball", 0.8
    line = "Take it or leave it: I am not moving."


def _broke_down(own: np.ndarray, other: np.ndarray, spec: DemandSpec) -> np.ndarray:
    """Whether the last round broke down (False before round 1)."""
    if own.shape[1] == 0:
        return np.zeros(own.shape[0], dtype=bool)
    return own[:, -1] + other[:, -1] > spec.pie


class Concede(NegotiationBot):
    """Demands 60% of the pie (6 of 10), and half (5) in the round after a breakdown."""

    name = "Concede"
    line = "I ask for a bit more than half, and I come down to half after a breakdown."
    classifier = {"memory_depth": 1, "stochastic": False}

    def probabilities(self, own, other, spec):
        return spec.one_hot(np.where(_broke_down(own, other, spec), spec.share(0.5), spec.share(0.6)))


# -- the paper's SFT demonstrators (§4.1), generalised by shares of the pie ---------------------------
class ReciprocalBalanced(NegotiationBot):
    """The paper's demonstrator "Balanced": 60% of the pie (6), or 30% (3) after the opponent
    demanded 70% (7) or more."""

    name = "ReciprocalBalanced"
    line = "I ask for a bit more than half, and I back off if you get greedy."
    classifier = {"memory_depth": 1, "stochastic": False}

    def probabilities(self, own, other, spec):
        if other.shape[1] == 0:
            return spec.one_hot(np.full(own.shape[0], spec.share(0.6)))
        greedy = other[:, -1] >= math.floor(0.7 * spec.pie + 0.5)
        return spec.one_hot(np.where(greedy, spec.share(0.3), spec.share(0.6)))


class ConcedeStep(NegotiationBot):
    """The paper's demonstrator "Concede": 60% of the pie (6); after a breakdown one point less than
    its own last demand, but not below 30% (3)."""

    name = "ConcedeStep"
    line = "I will come down a point after every breakdown."
    classifier = {"memory_depth": 1, "stochastic": False}

    def probabilities(self, own, other, spec):
        if own.shape[1] == 0:
            return spec.one_hot(np.full(own.shape[0], spec.share(0.6)))
        lowered = spec.clamp(np.maximum(spec.share(0.3), own[:, -1] - 1))
        return spec.one_hot(np.where(_broke_down(own, other, spec), lowered, spec.share(0.6)))


class Complement(NegotiationBot):
    """The paper's demonstrator "TFT": half the pie first, then what the opponent's last demand
    left (pie minus it), inside the range."""

    name = "Complement"
    line = "I leave you what you left me last round."
    classifier = {"memory_depth": 1, "stochastic": False}

    def probabilities(self, own, other, spec):
        if other.shape[1] == 0:
            return spec.one_hot(np.full(own.shape[0], spec.share(0.5)))
        return spec.one_hot(spec.clamp(spec.pie - other[:, -1]))


class RandomMiddle(NegotiationBot):
    """The paper's demonstrator "Random 3-7": uniform over 30%..70% of the pie, each round."""

    name = "RandomMiddle"
    line = "I will ask for something between a third and two thirds."
    classifier = {"memory_depth": 0, "stochastic": True}

    def probabilities(self, own, other, spec):
        support = np.arange(spec.share(0.3), spec.share(0.7) + 1)
        row = np.zeros(spec.size)
        row[support - spec.low] = 1.0 / len(support)
        return np.tile(row, (own.shape[0], 1))


class Uniform(NegotiationBot):
    """Every demand in the range with equal probability, each round."""

    name = "Uniform"
    classifier = {"memory_depth": 0, "stochastic": True}

    def probabilities(self, own, other, spec):
        return np.full((own.shape[0], spec.size), 1.0 / spec.size)


PAPER_BOTS = (Fair, Balanced, Selfish, Hardball, Concede)
DEMONSTRATORS = (ReciprocalBalanced, ConcedeStep, Complement, RandomMiddle)
BOTS = {cls.name: cls for cls in (*PAPER_BOTS, *DEMONSTRATORS, Uniform)}


def bot_table() -> dict:
    return dict(BOTS)
