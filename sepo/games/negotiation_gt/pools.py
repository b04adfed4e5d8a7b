"""The paper's pools for the three-item negotiation, as data (docs/paper-protocol.md §3.4)."""
from __future__ import annotations

PAPER_POOLS = {
    "train": ["FairNeg", "TFTNeg", "ConcedeNeg"],
    "exploiter": ["GreedyNeg", "HardballNeg"],
    "collusive": ["FairNeg"],
}


def pools(protocol: str, game=None) -> dict[str, list]:
    return {name: list(entries) for name, entries in PAPER_POOLS.items()}
