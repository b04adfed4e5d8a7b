"""Split bargaining's opponent pools as data (docs/paper-protocol.md §3.3).

The paper's two versions disagree:
- "code" (the authors' reachable code, 73ffeed4): train = Selfish, Fair, Balanced; exploiter =
  Selfish (its exploit score pooled over exploiter episodes, which with one exploiter is the
  per-opponent score); collusive = Selfish.
- "writeup" (the version the write-up and results describe): train = Fair, Balanced, Concede,
  Hardball; exploiter = Selfish, Hardball (averaged per opponent); collusive = Fair.
`--protocol paper` uses the writeup's unless `--paper-version code`; the rigorous protocol uses
the writeup's and adds the exact best response to the exploiter pool.
"""
from __future__ import annotations

PAPER_POOLS = {
    "writeup": {
        "train": ["Fair", "Balanced", "Concede", "Hardball"],
        "exploiter": ["Selfish", "Hardball"],
        "collusive": ["Fair"],
    },
    "code": {"train": ["Selfish", "Fair", "Balanced"], "exploiter": ["Selfish"], "collusive": ["Selfish"]},
}


def pools(protocol: str, game=None) -> dict[str, list]:
    version = getattr(game, "paper_version", None) or "writeup"
    return {name: list(entries) for name, entries in PAPER_POOLS[version].items()}
