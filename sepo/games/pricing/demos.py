"""The pricing market's SFT demonstrators and mixtures (the paper has none for this game).

`mixed`: Competitive 30%, TitForTat 30%, GrimTrigger 20%, Undercut 10%, Uniform 10%, one strategy
per episode, played against the domain's `demo_opponents`: a warm start that knows the price list
and the answer format and has seen both competitive and collusive play.
`competitive`: Competitive 70%, Undercut 30%: demonstrations that never hold prices up.
Each reply's reason is written from the state (`text.pricing_reason`), so it never contradicts it.
"""
from __future__ import annotations

from sepo.games.pricing.bots import BOTS

MIXTURES = {
    "mixed": [
        (BOTS["Competitive"], 0.3),
        (BOTS["TitForTat"], 0.3),
        (BOTS["GrimTrigger"], 0.2),
        (BOTS["Undercut"], 0.1),
        (BOTS["Uniform"], 0.1),
    ],
    "competitive": [(BOTS["Competitive"], 0.7), (BOTS["Undercut"], 0.3)],
}


def mixtures() -> dict:
    return dict(MIXTURES)
