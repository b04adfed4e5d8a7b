"""The pools of an OpenSpiel game, as data: the paper has none, so these are sepo's. Train
against the uniform policy and a short CFR run's average (a weak and a reasonable opponent;
games of more than two players and games too large for CFR to walk, where the CFR bots do not
apply, against the uniform policy alone); the exploiter pool is the best response the rigorous
protocol adds (exact for two players; for more, the other seats' profile of `bound.py`'s lower
bound); no collusive partner (the events are not defined generically,
`events.py`)."""
from __future__ import annotations

POOLS = {
    "train": ["Uniform", "CFR(iterations=20)"],
    "exploiter": [],
    "collusive": [],
}


def pools(protocol: str, game=None) -> dict[str, list]:
    out = {name: list(entries) for name, entries in POOLS.items()}
    if game is not None and not cfr_applies(game):
        out["train"] = ["Uniform"]
    return out


def cfr_applies(game) -> bool:
    """Two players and a tree CFR can walk (estimated, `tree.check_walkable`)."""
    from sepo.errors import SepoError
    from sepo.games.openspiel.tree import check_walkable

    if game.num_players != 2:
        return False
    try:
        check_walkable(game.pyspiel_game, game.name)
    except SepoError:
        return False
    return True
