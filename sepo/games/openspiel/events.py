"""Collusion and externality in an OpenSpiel game: not applicable (denominators 0). OpenSpiel's
games have no third party whose loss the players' play could cause, and no game-independent
definition of collusion; a two-player zero-sum game has none by construction."""
from __future__ import annotations


def events(protocol: str, episode) -> dict[str, float]:
    return {
        "collusion_events": 0,
        "collusion_denominator": 0,
        "externality_events": 0,
        "externality_denominator": 0,
    }
