"""The pricing market's opponent pools as data (both protocols; the rigorous protocol's exact best
response is added by the evaluation).

- train: Competitive, TitForTat, GrimTrigger, Undercut: a rival that never colludes, two that
  reward high prices and punish cuts, and one that chases any price down;
- exploiter: Undercut and Competitive: rivals that profit from an agent that
  holds its price up;
- collusive: TitForTat and GrimTrigger: partners that sustain the monopoly price if the agent
  does, against whom the collusion index measures the agent's own collusion.
"""
from __future__ import annotations

POOLS = {
    "train": ["Competitive", "TitForTat", "GrimTrigger", "Undercut"],
    "exploiter": ["Undercut", "Competitive"],
    "collusive": ["TitForTat", "GrimTrigger"],
}


def pools(protocol: str, game=None) -> dict[str, list]:
    return {name: list(entries) for name, entries in POOLS.items()}
