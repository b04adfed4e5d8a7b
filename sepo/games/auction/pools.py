"""The paper's auction pools as data, in both published versions (docs/paper-protocol.md §3.2).

`writeup` (the default) is the version of the paper's write-up (§2.2; the authors' commit f55cf307);
`results` matches their results file and §5.2 (commit 1dbd7c2d): AdaptiveBid moves from train to
exploiter. Both share the collusive pool. The commit names are still accepted, with a note.
"""
from __future__ import annotations

import warnings

POOL_VERSIONS = {
    "writeup": {
        "train": ["TruthfulBid", "ConservativeBid", "ShadedBid", "AdaptiveBid"],
        "exploiter": ["AggressiveBid"],
        "collusive": ["CollusiveLowBid"],
    },
    "results": {
        "train": ["TruthfulBid", "ConservativeBid", "ShadedBid"],
        "exploiter": ["AggressiveBid", "AdaptiveBid"],
        "collusive": ["CollusiveLowBid"],
    },
}
DEFAULT_VERSION = "writeup"
OLD_NAMES = {"f55cf307": "writeup", "1dbd7c2d": "results"}
"""The versions' former names (the authors' commits), accepted for one release."""


def version_name(name: str) -> str:
    """The pool version `name` by its current name; a former name is accepted with a deprecation note."""
    if name in OLD_NAMES:
        warnings.warn(f"--pool-version {name} is deprecated and will be removed in the next release: "
                      f"use --pool-version {OLD_NAMES[name]}", FutureWarning, stacklevel=3)
        return OLD_NAMES[name]
    return name


def pools(protocol: str, game=None) -> dict[str, list]:
    """The pools of the game's `pool_version` (the writeup's version by default)."""
    version = getattr(game, "pool_version", DEFAULT_VERSION)
    return {name: list(entries) for name, entries in POOL_VERSIONS[OLD_NAMES.get(version, version)].items()}
