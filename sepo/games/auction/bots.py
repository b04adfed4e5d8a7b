"""Scripted auction bidders: the paper's opponents (docs/paper-protocol.md §3.2).

A bot is a rule from what a bidder sees (its value, the bids so far) to a distribution over the
bid grid, given as grid indices so it works on any grid: on the paper's grid index 0/1/2 is
LOW/MEDIUM/HIGH = 1/2/3. `memory` is how many past rounds the rule reads (the exact solver needs
only that many); `classifier` describes the bot in the manner of the Axelrod library.
"""
from __future__ import annotations

import abc

from sepo.games.base import Decision
from sepo.policies.base import Policy


class AuctionBot(Policy):
    """A bidder given by `bid_distribution(decision)` over grid indices."""

    name = "AuctionBot"
    memory = 0
    classifier: dict = {}

    @abc.abstractmethod
    def bid_distribution(self, decision: Decision) -> dict[int, float]:
        """Probability of each bid index (absent indices have probability 0)."""

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        obs = decision.observation
        shown = len(obs["history"])
        if not obs.get("complete", True) and (self.memory is None or self.memory > shown):
            from sepo.games.auction.text import WholeHistoryNeeded

            raise WholeHistoryNeeded(
                f"{self.name} reads "
                f"{'the whole history' if self.memory is None else f'{self.memory} rounds'} but this "
                f"decision shows {shown}; raise the game's --memory"
            )
        probs = self.bid_distribution(decision)
        return {a: float(probs.get(a, 0.0)) for a in decision.legal_actions}

    def __repr__(self) -> str:
        return self.name


class TruthfulBid(AuctionBot):
    """LOW or MEDIUM with probability 1/2 each, whatever its value (the paper's bot, despite its name)."""

    name = "TruthfulBid"
    classifier = {"stochastic": True, "uses_value": False, "reacts": False}

    def bid_distribution(self, decision):
        return {0: 0.5, 1: 0.5}


class AggressiveBid(AuctionBot):
    """Always the highest bid."""

    name = "AggressiveBid"
    classifier = {"stochastic": False, "uses_value": False, "reacts": False}

    def bid_distribution(self, decision):
        return {len(decision.legal_actions) - 1: 1.0}


class LowBid(AuctionBot):
    """Always the lowest bid."""

    name = "LowBid"
    classifier = {"stochastic": False, "uses_value": False, "reacts": False}

    def bid_distribution(self, decision):
        return {0: 1.0}


class ConservativeBid(LowBid):
    """Always LOW (identical to ShadedBid and CollusiveLowBid in the paper's code)."""

    name = "ConservativeBid"


class ShadedBid(LowBid):
    """Always LOW (identical to ConservativeBid and CollusiveLowBid in the paper's code)."""

    name = "ShadedBid"


class CollusiveLowBid(LowBid):
    """Always LOW: the collusive partner, inviting both to keep prices down."""

    name = "CollusiveLowBid"


class AdaptiveBid(AuctionBot):
    """MEDIUM in round 1, then one step above the highest other bid of the last round, capped
    at the top of the grid (the paper's min(3, last + 1))."""

    name = "AdaptiveBid"
    memory = 1
    classifier = {"stochastic": False, "uses_value": False, "reacts": True}

    def bid_distribution(self, decision):
        obs = decision.observation
        top = len(decision.legal_actions) - 1
        if not obs["history"]:
            return {min(1, top): 1.0}
        last_other = max(obs["history"][-1][2])
        index = _grid_index(decision, last_other)
        return {min(top, index + 1): 1.0}


def _grid_index(decision: Decision, amount: float) -> int:
    """The grid index of a bid amount (the observation stores amounts, actions are indices)."""
    return list(decision.observation["bid_grid"]).index(amount)


PAPER_BOTS = (TruthfulBid, AggressiveBid, ConservativeBid, ShadedBid, CollusiveLowBid, AdaptiveBid)
BOTS = {cls.name: cls for cls in (*PAPER_BOTS, LowBid)}


def bot_table() -> dict:
    from sepo.games.auction.demos import DEMO_BOTS

    return {**BOTS, **DEMO_BOTS}
