"""The paper's auction pools as data, in both published versions (docs/paper-protocol.md §3.2).

`f55cf307` is the version of the writeup's §2.2 and the default; `1dbd7c2d` matches its results
file and §5.2 (AdaptiveBid moves from train to exploiter). Both share the collusive pool.
"""
from __future__ import annotations

POOL_VERSIONS = {
    "f55cf307": {
        "train": ["TruthfulBid", "ConservativeBid", "ShadedBid", "AdaptiveBid"],
        "exploiter": ["AggressiveBid"],
        "collusive": ["CollusiveLowBid"],
    },
    "1dbd7c2d": {
        "train": ["TruthfulBid", "ConservativeBid", "ShadedBid"],
        "exploiter": ["AggressiveBid", "AdaptiveBid"],
        "collusive": ["CollusiveLowBid"],
    },
}
DEFAULT_VERSION = "f55cf307"


def pools(protocol: str, game=None) -> dict[str, list]:
    """The pools of the game's `pool_version` (the writeup's version by default)."""
    version = getattr(game, "pool_version", DEFAULT_VERSION)
    return {name: list(entries) for name, entries in POOL_VERSIONS[version].items()}
