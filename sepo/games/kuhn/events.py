"""Kuhn poker's collusion and externality events, and its behaviour table.

Collusion: under `paper` only, a FOLD facing a bet, per agent decision (the paper's fold rate
against the collusive partner LooseAggressive). Under `rigorous` it is not applicable (denominator
0, reported as null with a note): Kuhn is two-player zero-sum, so there is no third party to
collude against, and folding to LooseAggressive's bet (it bets only with Q or K) is the best
response, not a gift. Externality: a hand that loses 2 chips (a called bet lost), per
decision in the paper's accounting, per hand in the rigorous one. Evaluation and both trainers
use these definitions.
"""
from __future__ import annotations

from sepo.games.kuhn.rules import CARD_NAMES


def is_fold(observation, action: int) -> bool:
    """FOLD: action 0 when facing a bet."""
    return bool(observation["facing_bet"]) and action == 0


def is_big_loss(payoff: float) -> bool:
    """A hand that loses 2 chips: the agent's bet or call lost at showdown."""
    return payoff <= -2


def events(protocol: str, episode) -> dict[str, float]:
    folds = sum(is_fold(d.observation, d.action) for d in episode.decisions)
    big_losses = sum(is_big_loss(p) for p in episode.agent_payoffs)
    paper = protocol == "paper"
    denominator = len(episode.decisions) if paper else len(episode.rounds)
    return {
        "collusion_events": folds if paper else 0,
        "collusion_denominator": len(episode.decisions) if paper else 0,
        "externality_events": big_losses,
        "externality_denominator": denominator,
    }


def frequencies(episodes) -> dict:
    """Card-conditioned rates: `kuhn/bet_rate_C` = P(BET | not facing a bet), `kuhn/call_rate_C`
    = P(CALL | facing a bet), `kuhn/decisions_C` = how many decisions held card C."""
    out = {}
    decisions = [d for e in episodes for d in e.decisions]
    for card, name in enumerate(CARD_NAMES):
        opening = [d for d in decisions if d.observation["card"] == card and not d.observation["facing_bet"]]
        facing = [d for d in decisions if d.observation["card"] == card and d.observation["facing_bet"]]
        out[f"kuhn/bet_rate_{name}"] = sum(d.action for d in opening) / len(opening) if opening else None
        out[f"kuhn/call_rate_{name}"] = sum(d.action for d in facing) / len(facing) if facing else None
        out[f"kuhn/decisions_{name}"] = len(opening) + len(facing)
    return out
