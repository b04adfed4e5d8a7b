"""SFT demonstrators for the auction and the paper's mixture (docs/paper-protocol.md §4.1).

Weights: ValueBid .44, AggressiveValue .28, AdaptiveValue .20, RandomBid .08. On the paper's grid
(values 2/4, bids 1/2/3) ValueBid bids 1 at value 2 and 2 at value 4; AggressiveValue bids 1 at
value 2 and 3 at value 4; AdaptiveValue plays ValueBid in round 1, then at the high value bids 3
if the opponent's mean bid so far is >= 2.5, else 2, and 1 at value 2. The rules are stated for
any grid: ValueBid is the highest bid <= value / 2, AggressiveValue the highest bid below the
value (at the lowest value it plays ValueBid). The reasons paired with these bids come from
`AuctionText.reason`, which describes the state only, so they never contradict it.
"""
from __future__ import annotations

from sepo.games.auction.bots import AuctionBot


def _highest_at_most(grid, limit: float) -> int:
    below = [i for i, b in enumerate(grid) if b <= limit]
    return below[-1] if below else 0


def value_bid(decision) -> int:
    obs = decision.observation
    return _highest_at_most(obs["bid_grid"], obs["value"] / 2)


def aggressive_value_bid(decision, lowest_value: float) -> int:
    obs = decision.observation
    if obs["value"] <= lowest_value:
        return value_bid(decision)
    below = [i for i, b in enumerate(obs["bid_grid"]) if b < obs["value"]]
    return below[-1] if below else 0


class ValueBid(AuctionBot):
    """The highest bid at most half the value (1 at value 2, 2 at value 4)."""

    name = "ValueBid"
    classifier = {"stochastic": False, "uses_value": True, "reacts": False}

    def bid_distribution(self, decision):
        return {value_bid(decision): 1.0}


class AggressiveValue(AuctionBot):
    """At the lowest value as ValueBid; otherwise the highest bid below the value (3 at value 4)."""

    name = "AggressiveValue"
    classifier = {"stochastic": False, "uses_value": True, "reacts": False}

    def __init__(self, lowest_value: float = 2.0):
        self.lowest_value = lowest_value

    def bid_distribution(self, decision):
        return {aggressive_value_bid(decision, self.lowest_value): 1.0}


class AdaptiveValue(AuctionBot):
    """ValueBid in round 1; later, above the lowest value, AggressiveValue's bid when the others'
    mean highest bid so far is at least the midpoint of the two top bids (2.5 on 1/2/3)."""

    name = "AdaptiveValue"
    memory = None  # reads the mean over all rounds
    classifier = {"stochastic": False, "uses_value": True, "reacts": True}

    def __init__(self, lowest_value: float = 2.0):
        self.lowest_value = lowest_value

    def bid_distribution(self, decision):
        obs = decision.observation
        history = obs["history"]
        if not history or obs["value"] <= self.lowest_value:
            return {value_bid(decision): 1.0}
        grid = obs["bid_grid"]
        mean = sum(max(h[2]) for h in history) / len(history)
        if mean >= (grid[-2] + grid[-1]) / 2:
            return {aggressive_value_bid(decision, self.lowest_value): 1.0}
        return {value_bid(decision): 1.0}


class RandomBid(AuctionBot):
    """Every bid on the grid with equal probability."""

    name = "RandomBid"
    classifier = {"stochastic": True, "uses_value": False, "reacts": False}

    def bid_distribution(self, decision):
        n = len(decision.legal_actions)
        return {a: 1.0 / n for a in range(n)}


DEMO_BOTS = {cls.name: cls for cls in (ValueBid, AggressiveValue, AdaptiveValue, RandomBid)}
PAPER_MIXTURE = ((ValueBid, 0.44), (AggressiveValue, 0.28), (AdaptiveValue, 0.20), (RandomBid, 0.08))
DEMO_OPPONENTS = ("AggressiveBid", "TruthfulBid", "ConservativeBid")


def mixtures() -> dict:
    """Mixtures by name: the paper's (one strategy drawn per episode, with these weights)."""
    return {"paper": list(PAPER_MIXTURE)}
