"""SFT demonstrators for the three-item negotiation and the paper's mixture (docs/paper-protocol.md §4.1).

Weights: Proportional .35 (round(pool_i * v_i / total + 0.5)), Conservative .25
(int(0.8 * pool_i * v_i / total)), Adaptive .25 (int(1.2 * pool_i * v_i / total) in round 1; after
a deal it keeps its demand, after a breakdown it drops 1 of the lowest-valued item it still
demands), Defensive .15 (pool_i - int(mean of the other's demands of item i); Proportional in
round 1, before any demand is seen). Every demand is clamped into 0..pool_i. The paper drives them
against Fair, TFT, Concede, Greedy and Hardball. The reason paired with each demand is
`NegotiationText.reason`, which describes the state only, so it never contradicts it.
"""
from __future__ import annotations

from sepo.games.negotiation_gt.bots import NegotiationBot


def _clamp(demand, pool) -> tuple[int, ...]:
    return tuple(min(max(int(d), 0), p) for d, p in zip(demand, pool))


def _share(obs, factor: float) -> list[float]:
    return [factor * p * v / obs["total"] for p, v in zip(obs["pool"], obs["values"])]


class Proportional(NegotiationBot):
    name = "Proportional"
    classifier = {"stochastic": False, "uses_values": True, "reacts": False}

    def demand(self, obs):
        return _clamp((round(x + 0.5) for x in _share(obs, 1.0)), obs["pool"])


class Conservative(NegotiationBot):
    name = "Conservative"
    classifier = {"stochastic": False, "uses_values": True, "reacts": False}

    def demand(self, obs):
        return _clamp((int(x) for x in _share(obs, 0.8)), obs["pool"])


class Adaptive(NegotiationBot):
    name = "Adaptive"
    memory = None  # its demand depends on every earlier round
    classifier = {"stochastic": False, "uses_values": True, "reacts": True}

    def demand(self, obs):
        demand = list(_clamp((int(x) for x in _share(obs, 1.2)), obs["pool"]))
        for own, _, deal in obs["history"]:
            demand = list(own)
            if not deal:
                held = [i for i, d in enumerate(demand) if d > 0]
                if held:
                    lowest = min(held, key=lambda i: (obs["values"][i], i))
                    demand[lowest] -= 1
        return _clamp(demand, obs["pool"])


class Defensive(NegotiationBot):
    name = "Defensive"
    memory = None
    classifier = {"stochastic": False, "uses_values": True, "reacts": True}

    def demand(self, obs):
        history = obs["history"]
        if not history:
            return Proportional().demand(obs)
        means = [sum(h[1][i] for h in history) / len(history) for i in range(len(obs["pool"]))]
        return _clamp((p - int(m) for p, m in zip(obs["pool"], means)), obs["pool"])


DEMO_BOTS = {cls.name: cls for cls in (Proportional, Conservative, Adaptive, Defensive)}
PAPER_MIXTURE = ((Proportional, 0.35), (Conservative, 0.25), (Adaptive, 0.25), (Defensive, 0.15))
DEMO_OPPONENTS = ("FairNeg", "TFTNeg", "ConcedeNeg", "GreedyNeg", "HardballNeg")


def mixtures() -> dict:
    """The paper's mixture: one demonstrator drawn per episode with these weights."""
    return {"paper": list(PAPER_MIXTURE)}
