"""Games: the game API (`base`), the domain registry (`registry`), one package per domain.

Every built-in domain is registered here, one line each, and imported only when first used."""
from __future__ import annotations

from sepo.games.base import Decision, Game, ParseResult, RoundResult, State, TextView
from sepo.games.registry import (
    PROTOCOLS,
    Domain,
    Param,
    check_protocol,
    default_game,
    domain_names,
    domain_of,
    family_names,
    get_domain,
    register,
    register_family,
)

register("kuhn", "sepo.games.kuhn:DOMAIN")
register("auction", "sepo.games.auction:DOMAIN")
register("ipd", "sepo.games.ipd:DOMAIN")
register("negotiation", "sepo.games.negotiation:DOMAIN")
register("negotiation-gt", "sepo.games.negotiation_gt:DOMAIN")
register("pricing", "sepo.games.pricing:DOMAIN")
# openspiel:GAME[(params)], any OpenSpiel game
register_family("openspiel", "sepo.games.openspiel:domain_for")


def load_game(name: str, protocol: str = "rigorous", **params) -> Game:
    """The game `name` set up for `protocol` ("rigorous" or the paper's "paper")."""
    return get_domain(name).game(protocol, **params)


__all__ = [
    "Decision",
    "Domain",
    "Game",
    "Param",
    "ParseResult",
    "PROTOCOLS",
    "RoundResult",
    "State",
    "TextView",
    "check_protocol",
    "default_game",
    "domain_names",
    "domain_of",
    "family_names",
    "get_domain",
    "load_game",
    "register",
    "register_family",
]
