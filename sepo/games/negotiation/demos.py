"""Split bargaining's SFT demonstrators and mixtures (docs/paper-protocol.md §4.1).

`paper`: the paper's mixture for Negotiation v1, one strategy per episode: Fair 32%, the
demonstrator "Balanced" 27% (`ReciprocalBalanced`: 6, or 3 after the opponent demanded 7 or
more), "Concede" 18% (`ConcedeStep`: 6; after a breakdown its last demand minus 1, not below 3),
"TFT" 15% (`Complement`: 5, then 10 minus the opponent's last demand) and "Random 3-7" 8%
(`RandomMiddle`), played against Selfish, Fair and Balanced (the domain's `demo_opponents`).
Each reply's reason is written from the state (the round, the last demands and outcome, the
deals so far, the score: `text.negotiation_reason`), so it never contradicts it.
`fair`: Fair 60%, Complement 40%: demonstrations that never demand more than half the pie first
and never break down against a fair partner, a safer warm start.
"""
from __future__ import annotations

from sepo.games.negotiation.bots import BOTS

MIXTURES = {
    "paper": [(BOTS["Fair"], 0.32), (BOTS["ReciprocalBalanced"], 0.27), (BOTS["ConcedeStep"], 0.18),
              (BOTS["Complement"], 0.15), (BOTS["RandomMiddle"], 0.08)],
    "fair": [(BOTS["Fair"], 0.60), (BOTS["Complement"], 0.40)],
}


def mixtures() -> dict:
    return dict(MIXTURES)
