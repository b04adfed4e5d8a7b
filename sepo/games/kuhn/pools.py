"""Kuhn poker's opponent pools as data (the paper's, docs/paper-protocol.md §3.5): the same under both
protocols; the rigorous protocol's exact best response is added by the evaluation."""
from __future__ import annotations

PAPER_POOLS = {
    "train": ["NashApprox", "TightPassive", "LooseAggressive"],
    "exploiter": ["MaxExploiter"],
    "collusive": ["LooseAggressive"],
}


def pools(protocol: str, game=None) -> dict[str, list]:
    return {name: list(entries) for name, entries in PAPER_POOLS.items()}
