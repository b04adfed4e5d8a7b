"""Any OpenSpiel game under sepo's game API: rules, legal actions, chance and returns from pyspiel.

An episode is `rounds` plays of the OpenSpiel game in which the players rotate seats: player p
holds seat (p + k) mod n in play k, so with two players and an even number of plays each player
holds each seat equally often (the exact solver's exploitability averages the two seats the same
way). A game with simultaneous moves is played through OpenSpiel's turn-based conversion
(`pyspiel.convert_to_turn_based`): the players move one after the other, and a later mover's
information state does not show the earlier moves of the same turn, so the game is unchanged.

A decision's information key is OpenSpiel's information-state string of the acting seat (for
`kuhn_poker` the same keys as sepo's own Kuhn domain), its actions OpenSpiel's action ids, and
their names OpenSpiel's `action_to_string` (made unique where a game repeats one).
"""
from __future__ import annotations

import functools
import re

from sepo.errors import SepoError
from sepo.games.base import CHANCE, TERMINAL, Decision, Game, RoundResult, State, TextView

_NAME = re.compile(r"^[A-Za-z0-9_]+(\(.*\))?$")


@functools.lru_cache(maxsize=32)
def load(spec: str):
    """The pyspiel game for `spec` (`leduc_poker`, `goofspiel(num_cards=4)`), simultaneous moves
    converted to turns; a bad name or parameter is one line."""
    import pyspiel

    spec = spec.strip()
    if not _NAME.match(spec):
        raise SepoError(f"openspiel game {spec!r}: write NAME or NAME(key=value,...), e.g. leduc_poker or "
                        "goofspiel(num_cards=4)")
    try:
        game = pyspiel.load_game(spec)
    except (pyspiel.SpielError, RuntimeError, ValueError) as error:
        message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        known = ""
        name = spec.split("(")[0]
        if name not in {g.short_name for g in pyspiel.registered_games()}:
            import difflib

            close = difflib.get_close_matches(name, [g.short_name for g in pyspiel.registered_games()], n=3)
            known = f"; did you mean {', '.join(close)}?" if close else "; `python -c \"import pyspiel; print(pyspiel.registered_names())\"` lists them"
            message = f"OpenSpiel has no game {name!r}"
        raise SepoError(f"openspiel game {spec!r}: {message}{known}") from None
    kind = game.get_type()
    if not kind.provides_information_state_string:
        raise SepoError(f"openspiel game {spec!r} gives no information-state string, which sepo's decisions are keyed by")
    if kind.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        game = pyspiel.convert_to_turn_based(game)
    return game


def canonical(spec: str) -> str:
    """The game's own name for itself: `leduc_poker`, `goofspiel(num_cards=4)` (parameters as
    given, OpenSpiel's order; no empty parentheses)."""
    spec = spec.strip().replace(" ", "")
    load(spec)
    return spec[:-2] if spec.endswith("()") else spec


def unique_names(names: list[str]) -> tuple[str, ...]:
    """Action names with repeats told apart (`Bid`, `Bid#2`): the parser needs one name per action."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        name = " ".join(str(name).split()) or "action"
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return tuple(out)


def decision_of(game_name: str, pstate, seat: int, player: int, play: int, plays: int) -> Decision:
    """The structured view of `seat`'s decision at pyspiel state `pstate`."""
    legal = tuple(int(a) for a in pstate.legal_actions(seat))
    return Decision(
        game=game_name, player=player, info_key=pstate.information_state_string(seat), legal_actions=legal,
        action_names=unique_names([pstate.action_to_string(seat, a) for a in legal]),
        observation={"play": play + 1, "plays": plays, "seat": seat,
                     "information_state": pstate.information_state_string(seat)},
    )


class OpenSpielState(State):
    """An episode: `game.rounds` plays of the OpenSpiel game, seats rotating between plays."""

    def __init__(self, game: "OpenSpielGame"):
        self._game = game
        self._play = 0
        self._state = game.pyspiel_game.new_initial_state()
        self._rounds: list[RoundResult] = []

    def num_players(self) -> int:
        return self._game.num_players

    def seat_of(self, player: int) -> int:
        return (player + self._play) % self._game.num_players

    def player_in_seat(self, seat: int) -> int:
        return (seat - self._play) % self._game.num_players

    def current_player(self) -> int:
        if self._play >= self._game.rounds:
            return TERMINAL
        if self._state.is_chance_node():
            return CHANCE
        return self.player_in_seat(self._state.current_player())

    def chance_outcomes(self) -> list[tuple[int, float]]:
        return [(int(a), float(p)) for a, p in self._state.chance_outcomes()]

    def decision(self, player: int) -> Decision:
        return decision_of(self._game.name, self._state, self.seat_of(player), player, self._play, self._game.rounds)

    def apply_action(self, action: int) -> None:
        if self.is_terminal():
            raise ValueError(f"{self._game.name}: the episode is over; no action can be applied")
        legal = ([a for a, _ in self._state.chance_outcomes()] if self._state.is_chance_node()
                 else self._state.legal_actions())
        if action not in legal:
            raise ValueError(f"{self._game.name}: illegal action {action!r}; legal actions: {sorted(legal)}")
        self._state.apply_action(int(action))
        if self._state.is_terminal():
            returns = self._state.returns()
            payoffs = tuple(float(returns[self.seat_of(p)]) for p in range(self._game.num_players))
            self._rounds.append(RoundResult(payoffs=payoffs, info={"history": list(self._state.history()),
                                                                   "player0_seat": self.seat_of(0)}))
            self._play += 1
            self._state = self._game.pyspiel_game.new_initial_state()

    def rounds(self) -> list[RoundResult]:
        return list(self._rounds)

    def clone(self) -> "OpenSpielState":
        copy = OpenSpielState.__new__(OpenSpielState)
        copy._game, copy._play, copy._state, copy._rounds = self._game, self._play, self._state.clone(), list(self._rounds)
        return copy


class OpenSpielGame(Game):
    """An OpenSpiel game as a sepo game: `rounds` plays per episode, seats rotating."""

    def __init__(self, spec: str, rounds: int = 2, protocol: str = "rigorous"):
        import pyspiel

        self.spec = canonical(spec)
        self.name = f"openspiel:{self.spec}"
        self.pyspiel_game = load(self.spec)
        self.rounds = rounds
        self.protocol = protocol
        self.num_players = self.pyspiel_game.num_players()
        kind = self.pyspiel_game.get_type()
        self.zero_sum = kind.utility == pyspiel.GameType.Utility.ZERO_SUM
        self.max_payoff = max(abs(self.pyspiel_game.max_utility()), abs(self.pyspiel_game.min_utility())) or 1.0
        from sepo.games.openspiel.text import OpenSpielText

        self._text = OpenSpielText(self)

    def new_initial_state(self) -> OpenSpielState:
        return OpenSpielState(self)

    @property
    def text(self) -> TextView:
        return self._text


def make_game(spec: str, protocol: str = "rigorous", rounds: int = 2) -> OpenSpielGame:
    """The domain's game factory: `rounds` plays of OpenSpiel game `spec` per episode."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise SepoError(f"--rounds must be an integer >= 1, got {rounds!r}")
    return OpenSpielGame(spec, rounds=rounds, protocol=protocol)
