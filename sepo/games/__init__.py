"""Game registry: every domain by name."""
from __future__ import annotations

from sepo.errors import SepoError
from sepo.games.base import Decision, Game, ParseResult, RoundResult, State, TextView
from sepo.games.kuhn import KuhnPoker

GAMES = {"kuhn": KuhnPoker}
PROTOCOLS = ("rigorous", "paper")


def load_game(name: str, protocol: str = "rigorous", **params) -> Game:
    """The game `name` set up for `protocol` ("rigorous" or the paper's "paper")."""
    if name not in GAMES:
        raise SepoError(f"unknown game {name!r}; known games: {', '.join(sorted(GAMES))}")
    check_protocol(protocol)
    return GAMES[name](text_style=protocol, **params)


def check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise SepoError(f"unknown protocol {protocol!r}; use one of: {', '.join(PROTOCOLS)}")
    return protocol


__all__ = ["Decision", "Game", "ParseResult", "RoundResult", "State", "TextView", "GAMES", "load_game", "check_protocol"]
