"""The pools of an OpenSpiel game, as data: the paper has none, so these are sepo's. Train
against the uniform policy and a short CFR run's average (a weak and a reasonable opponent;
games of more than two players, where the CFR bots do not apply, against the uniform policy
alone); the exploiter pool is the exact best response the rigorous protocol adds; no collusive
partner (the events are not defined generically, `events.py`)."""
from __future__ import annotations

POOLS = {
    "train": ["Uniform", "CFR(iterations=20)"],
    "exploiter": [],
    "collusive": [],
}


def pools(protocol: str, game=None) -> dict[str, list]:
    out = {name: list(entries) for name, entries in POOLS.items()}
    if game is not None and game.num_players != 2:
        out["train"] = ["Uniform"]
    return out
