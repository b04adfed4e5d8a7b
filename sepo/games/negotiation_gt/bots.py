"""Scripted negotiators: the paper's five opponents (docs/paper-protocol.md §3.4).

Each bot is a deterministic rule from what it sees (pool, round, its values, the demand history)
to a demand per item. `memory` is how many past rounds the rule reads (the lower-bound search is
exact for agents that read at most that many); `classifier` describes the bot in the manner of
the Axelrod library; `line` is what it says when cheap talk is on.
"""
from __future__ import annotations

import abc

from sepo.games.base import Decision
from sepo.games.talk import check_message
from sepo.policies.base import Policy


class NegotiationBot(Policy):
    """A negotiator given by `demand(observation)`; optionally with a configured message."""

    name = "NegotiationBot"
    memory = 0
    reads = ("own", "other")
    classifier: dict = {}
    line: str | None = None

    def __init__(self, message: str | None = None):
        if message is not None:
            self.line = check_message(message)

    @abc.abstractmethod
    def demand(self, obs) -> tuple[int, ...]:
        """The demand per item (within the pool)."""

    def demand_distribution(self, decision: Decision) -> dict[tuple[int, ...], float]:
        """Sparse: demand -> probability (the lower-bound search reads this)."""
        return {tuple(self.demand(decision.observation)): 1.0}

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        probs = {a: 0.0 for a in decision.legal_actions}
        for demand, p in self.demand_distribution(decision).items():
            probs[decision.action_named("[" + ", ".join(map(str, demand)) + "]")] += p
        return probs

    def message(self, decision: Decision) -> str | None:
        return self.line

    def __repr__(self) -> str:
        return self.name


class FairNeg(NegotiationBot):
    """Half of every item, rounded down: floor(pool_i / 2)."""

    name = "FairNeg"
    classifier = {"stochastic": False, "uses_values": False, "reacts": False}
    line = "Let us split every item evenly."

    def demand(self, obs):
        return tuple(p // 2 for p in obs["pool"])


class TFTNeg(NegotiationBot):
    """Round 1: int(2/3 of each item); then leaves exactly what the other demanded last round:
    pool_i minus the other's last demand."""

    name = "TFTNeg"
    memory = 1
    reads = ("other",)  # only the other's last demand
    classifier = {"stochastic": False, "uses_values": False, "reacts": True}
    line = "I will leave you exactly what you left me."

    def demand(self, obs):
        if not obs["history"]:
            return tuple(int(2 * p / 3) for p in obs["pool"])
        other = obs["history"][-1][1]
        return tuple(p - o for p, o in zip(obs["pool"], other))


class ConcedeNeg(NegotiationBot):
    """pool_i - min(round index, 2): the whole pool in round 1 (no deal unless the other demands
    nothing), one less of each item in round 2, two less from round 3 on (never below 0)."""

    name = "ConcedeNeg"
    classifier = {"stochastic": False, "uses_values": False, "reacts": False}
    line = "I start high, but I will come down."

    def demand(self, obs):
        step = min(obs["round"] - 1, 2)
        return tuple(max(0, p - step) for p in obs["pool"])


class HardballNeg(NegotiationBot):
    """One less than the pool of every item: pool_i - 1."""

    name = "HardballNeg"
    classifier = {"stochastic": False, "uses_values": False, "reacts": False}
    line = "Take it or leave it: one of each item is all you get."

    def demand(self, obs):
        return tuple(p - 1 for p in obs["pool"])


class GreedyNeg(NegotiationBot):
    """min(pool_i, int(pool_i * v_i / total) + 1) with its own values v as drawn at the start of
    the episode (the paper's bot keeps those even when the game redraws them)."""

    name = "GreedyNeg"
    classifier = {"stochastic": False, "uses_values": True, "reacts": False}
    line = "I know what these items are worth to me."

    def demand(self, obs):
        total = obs["total"]
        return tuple(min(p, int(p * v / total) + 1) for p, v in zip(obs["pool"], obs["first_values"]))


PAPER_BOTS = (FairNeg, TFTNeg, ConcedeNeg, HardballNeg, GreedyNeg)
BOTS = {cls.name: cls for cls in PAPER_BOTS}


def bot_table() -> dict:
    from sepo.games.negotiation_gt.demos import DEMO_BOTS

    return {**BOTS, **DEMO_BOTS}
