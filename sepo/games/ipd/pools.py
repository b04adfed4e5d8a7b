"""The IPD's opponent pools as data: the paper's final version (f55cf307, docs/paper-protocol.md §3.1),
the same under both protocols; the rigorous protocol's exact best response is added by the
evaluation. Axelrod strategies join any pool as `axelrod:NAME` entries."""
from __future__ import annotations

PAPER_POOLS = {
    "train": ["TFT", "GenerousTFT", "Mixed(p=0.5)", "GrimTrigger"],
    "exploiter": ["AlwaysDefect", "AlternatingDefect"],
    "collusive": ["AlwaysCooperate"],
}


def pools(protocol: str, game=None) -> dict[str, list]:
    return {name: list(entries) for name, entries in PAPER_POOLS.items()}
