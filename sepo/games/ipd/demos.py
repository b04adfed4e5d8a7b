"""The IPD's SFT demonstrators and mixtures (docs/paper-protocol.md §4.1).

`paper`: the paper's mixture, one strategy per episode: AlwaysCooperate 5%, AlwaysDefect 27%,
TFT 33%, GenerousTFT 5%, GrimTrigger 22%, uniform Random 8%, played against AlwaysCooperate,
AlwaysDefect, TFT, GenerousTFT and GrimTrigger (the domain's `demo_opponents`). Unlike the
paper's canned strings, each reply's reason is written from the state (round, the opponent's
record, the score: `text.ipd_reason`), so it never contradicts it.
`reciprocal`: TFT 60%, GrimTrigger 25%, GenerousTFT 15%: only strategies that cannot be
exploited by more than one round's temptation, a safer warm start.
"""
from __future__ import annotations

from sepo.games.ipd.bots import BOTS

MIXTURES = {
    "paper": [(BOTS["AlwaysCooperate"], 0.05), (BOTS["AlwaysDefect"], 0.27), (BOTS["TFT"], 0.33),
              (BOTS["GenerousTFT"], 0.05), (BOTS["GrimTrigger"], 0.22), (BOTS["Random"], 0.08)],
    "reciprocal": [(BOTS["TFT"], 0.60), (BOTS["GrimTrigger"], 0.25), (BOTS["GenerousTFT"], 0.15)],
}
DEMO_OPPONENTS = ("AlwaysCooperate", "AlwaysDefect", "TFT", "GenerousTFT", "GrimTrigger")


def mixtures() -> dict:
    return dict(MIXTURES)
