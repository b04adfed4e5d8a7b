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

import contextlib
import functools
import os
import re
import sys

from sepo.errors import SepoError
from sepo.games.base import CHANCE, TERMINAL, Decision, Game, RoundResult, State, TextView

_NAME = re.compile(r"^[A-Za-z0-9_]+(\(.*\))?$")


_INT = re.compile(r"^[+-]?[0-9]+$")
_FLOAT = re.compile(r"^[+-]?([0-9]+\.[0-9]*|\.[0-9]+)$")
"""OpenSpiel reads a number as a double only with a decimal point (`1` is an integer, `1e2` a string)."""
_TYPE_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number with a decimal point",
    str: "a string",
}
INT_LIMIT = 2**31 - 1
"""OpenSpiel's integer parameters are C++ ints: a larger value fails inside pyspiel with only
`CHECK_TRUE(success)`."""


def split_parameters(text: str) -> list[tuple[str, str]]:
    """`key=value` pairs of a parameter list, split at the commas outside nested parentheses
    (a parameter may itself be a game: `game=goofspiel(num_cards=4)`)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (char == "(") - (char == ")")
        current += char
    parts.append(current)
    pairs = []
    for part in parts:
        if not part.strip():
            continue
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            raise SepoError(f"openspiel parameter {part.strip()!r}: write key=value")
        pairs.append((key.strip(), value.strip()))
    return pairs


def spec_text(kind) -> str:
    """The game's parameters with their defaults, as OpenSpiel declares them."""
    spec = kind.parameter_specification
    return ", ".join(f"{k}={v}" for k, v in sorted(spec.items())) or "none"


MAX_NESTING = 4
"""The most games nested in one another's `game=` parameter (`misere(game=kuhn_poker())`)."""
MAX_GAME_FILE_BYTES = 64 << 20
"""The largest file a game reads its rules from (`efg_game(filename=...)`): pyspiel reads it whole
and builds the tree from it; a 2,000,000-history game (the solver's limit) is well within this."""
FILES_REQUIRED = {"efg_game": ("filename", "a Gambit extensive-form (.efg) file"),
                  "nfg_game": ("filename", "a Gambit normal-form (.nfg) file")}
"""Games whose rules are a file and that have no default one (pyspiel fails with `map::at`)."""


def is_file_parameter(key: str) -> bool:
    """A string parameter naming a file the game reads (`filename`, `instances_file`, `boards_file`)."""
    return key == "filename" or key.endswith("_file")


def check_file(name: str, key: str, path: str) -> None:
    """One line unless `path` is a readable regular file of at most `MAX_GAME_FILE_BYTES`: pyspiel
    would block forever on a FIFO, read /dev/zero until memory runs out, and quote the lines of a
    file it cannot parse in its error."""
    import stat

    where = f"openspiel game {name!r}: {key}={path}"
    try:
        info = os.stat(path)
    except OSError as error:
        raise SepoError(f"{where}: {error.strerror or 'cannot be read'}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = (
            "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe, device or socket)"
        )
        raise SepoError(f"{where} is {kind}; give the path of a file")
    if info.st_size > MAX_GAME_FILE_BYTES:
        raise SepoError(
            f"{where} holds {info.st_size:,} bytes, more than the {MAX_GAME_FILE_BYTES:,} sepo reads as a "
            "game's rules"
        )
    if not os.access(path, os.R_OK):
        raise SepoError(f"{where}: permission denied")


@functools.lru_cache(maxsize=1)
def _kinds() -> dict:
    """OpenSpiel's registered game types by short name."""
    import pyspiel

    return {g.short_name: g for g in pyspiel.registered_games()}


def unsupported(kind, players: int | None = None) -> str | None:
    """Why sepo cannot play a game of OpenSpiel type `kind` (with `players` players, where known),
    or None: its players are a population (mean-field), it has one player, or chance is drawn
    inside OpenSpiel where neither sepo's seeds nor a game tree reach it."""
    import pyspiel

    if kind.dynamics == pyspiel.GameType.Dynamics.MEAN_FIELD:
        return (
            "is a mean-field game (one representative player against the distribution of a population), not "
            "a game between players; sepo plays an agent against opponents"
        )
    if (players if players is not None else kind.max_num_players) < 2:
        return "is a one-player game; sepo plays an agent against opponents (two or more players)"
    if kind.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        return (
            "draws its chance outcomes inside OpenSpiel (chance mode SAMPLED_STOCHASTIC), from a generator "
            "sepo's seeds do not control and that no game tree can list; sepo needs explicit chance outcomes"
        )
    return None


def check_spec(spec: str, depth: int = 0) -> None:
    """Everything about `spec` that can be checked before pyspiel reads it: the form, the game's
    name, its parameters (nested games and files included) and its type."""
    if depth > MAX_NESTING:
        raise SepoError(f"openspiel game {spec[:80]!r}: games nested more than {MAX_NESTING} deep")
    if not _NAME.match(spec):
        raise SepoError(f"openspiel game {spec!r}: write NAME or NAME(key=value,...), e.g. leduc_poker or "
                        "goofspiel(num_cards=4)")
    name = spec.split("(")[0]
    kinds = _kinds()
    if name not in kinds:
        import difflib

        close = difflib.get_close_matches(name, sorted(kinds), n=3)
        known = (f"; did you mean {', '.join(close)}?" if close
                 else "; `python -c \"import pyspiel; print(pyspiel.registered_names())\"` lists them")
        raise SepoError(f"openspiel game {spec!r}: OpenSpiel has no game {name!r}{known}")
    kind = kinds[name]
    given = dict(check_parameters(name, spec[len(name) + 1:-1], kind, depth) if "(" in spec else [])
    if name in FILES_REQUIRED:
        key, what = FILES_REQUIRED[name]
        if not given.get(key):
            raise SepoError(f"openspiel game {name!r} reads its rules from {what}: write {name}({key}=PATH)")
    # the rest of the type once it is loaded
    if kind.dynamics.name == "MEAN_FIELD" or kind.max_num_players < 2:
        raise SepoError(f"openspiel game {spec!r} {unsupported(kind)}")


def check_parameters(name: str, text: str, kind, depth: int = 0) -> list[tuple[str, str]]:
    """One line for what pyspiel would accept silently (a repeated key: the last one wins) or report
    only as C++ noise (an unknown key, a value of the wrong type or out of range, a file it would
    hang on or quote); nested games are checked the same way. The (key, value) pairs."""
    spec = kind.parameter_specification
    pairs = split_parameters(text)
    keys = [key for key, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise SepoError(
                f"openspiel game {name!r}: parameter {key!r} is given {keys.count(key)} times; give it once"
            )
    for key, value in pairs:
        if key not in spec:
            raise SepoError(
                f"openspiel game {name!r} has no parameter {key!r}; its parameters (defaults): "
                f"{spec_text(kind)}"
            )
        expected = type(spec[key])
        if expected is dict:
            if not value.endswith(")"):
                raise SepoError(
                    f"openspiel game {name!r}: parameter {key}={value} must be a game, written with "
                    f"parentheses: {key}={value.split('(')[0]}()"
                )
            check_spec(value, depth + 1)
            continue
        if expected not in _TYPE_NAMES:
            continue
        ok = {bool: value.lower() in ("true", "false"), int: bool(_INT.match(value)),
              float: bool(_FLOAT.match(value)), str: True}[expected]
        if not ok:
            raise SepoError(
                f"openspiel game {name!r}: parameter {key}={value} must be {_TYPE_NAMES[expected]} "
                f"(its default: {key}={spec[key]})"
            )
        if expected is int and abs(int(value)) > INT_LIMIT:
            raise SepoError(
                f"openspiel game {name!r}: parameter {key}={value} is out of range (OpenSpiel's integers "
                f"are at most {INT_LIMIT:,})"
            )
        if key == "players" and not kind.min_num_players <= int(value) <= kind.max_num_players:
            raise SepoError(
                f"openspiel game {name!r}: parameter players={value} is out of range; {name} is for "
                f"{kind.min_num_players} to {kind.max_num_players} players"
            )
        if expected is str and value and is_file_parameter(key):
            check_file(name, key, value)
    return pairs


def file_parameters(spec: str) -> list[str]:
    """The files `spec` (and the games nested in it) reads."""
    found = []
    name = spec.split("(")[0]
    if "(" in spec:
        for key, value in split_parameters(spec[len(name) + 1:-1]):
            if value.endswith(")") and "(" in value:
                found += file_parameters(value)
            elif value and is_file_parameter(key):
                found.append(value)
    return found


def refusal_text(spec: str, error: BaseException) -> str:
    """pyspiel's error in one line: the C++ file and line prefix dropped; for a game that reads a
    file, only the line number it stopped at (its message quotes the file's text)."""
    text = str(error).strip()
    if file_parameters(spec):
        line = re.search(r"line #?(\d+)", text)
        return (f"cannot read {' or '.join(file_parameters(spec))} as this game's rules"
                + (f" (it stopped at line {line.group(1)})" if line else ""))
    lines = [re.sub(r"^\S+\.cc:\d+ ", "", line).strip() for line in text.splitlines()]
    return "; ".join(line for line in lines if line) or type(error).__name__


@contextlib.contextmanager
def quiet_stderr():
    """File descriptor 2 sent to /dev/null: pyspiel's C++ layer prints its exception (for an
    unknown name, the list of every game, 120 lines) to stderr before raising it, and sepo's
    error is one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@functools.lru_cache(maxsize=32)
def load(spec: str):
    """The pyspiel game for `spec` (`leduc_poker`, `goofspiel(num_cards=4)`), simultaneous moves
    converted to turns; a bad name or parameter, a game type sepo cannot play (`unsupported`) or a
    game pyspiel refuses (when it is read or when its first state is made) is one line."""
    import pyspiel

    spec = spec.strip()
    check_spec(spec)
    name = spec.split("(")[0]
    defaults = f"its parameters (defaults): {spec_text(_kinds()[name])}"
    try:
        with quiet_stderr():
            game = pyspiel.load_game(spec)
            game.new_initial_state()  # some games check their parameters only here (clobber's board size)
    except MemoryError:
        raise SepoError(
            f"openspiel game {spec!r}: too large to load on this machine (pyspiel ran out of memory); "
            f"{defaults}"
        ) from None
    except (
        pyspiel.SpielError,
        RuntimeError,
        ValueError,
        IndexError,
        KeyError,
        OverflowError,
        TypeError,
    ) as error:
        raise SepoError(
            f"openspiel game {spec!r}: OpenSpiel refuses it ({refusal_text(spec, error)}); {defaults}"
        ) from None
    kind = game.get_type()
    why = unsupported(kind, game.num_players())
    if why is not None:
        raise SepoError(f"openspiel game {spec!r} {why}")
    if not kind.provides_information_state_string:
        raise SepoError(
            f"openspiel game {spec!r} gives no information-state string, which sepo's decisions are keyed by"
        )
    if kind.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        game = pyspiel.convert_to_turn_based(game)
    return game


def _canonical_value(value: str, default) -> str:
    """A parameter's value in one spelling: `True`, `3`, `0.5`; a nested game canonical itself."""
    if isinstance(default, dict):
        inner = _canonical_spec(value)
        return inner if inner.endswith(")") else inner + "()"
    if isinstance(default, bool):
        return "True" if value.lower() == "true" else "False"
    if isinstance(default, int):
        return str(int(value))
    if isinstance(default, float):
        import numpy as np

        return np.format_float_positional(float(value), trim="0")  # OpenSpiel reads no exponent
    return value


def _canonical_spec(spec: str) -> str:
    name = spec.split("(")[0]
    if "(" not in spec:
        return name
    defaults = _kinds()[name].parameter_specification
    kept = []
    for key, value in sorted(split_parameters(spec[len(name) + 1:-1])):
        text = _canonical_value(value, defaults[key])
        if isinstance(defaults[key], dict) or text != _canonical_value(str(defaults[key]), defaults[key]):
            kept.append(f"{key}={text}")
    return f"{name}({','.join(kept)})" if kept else name


def canonical(spec: str) -> str:
    """One name per game: `leduc_poker` for `leduc_poker()` and `leduc_poker(players=2)`;
    parameters sorted as OpenSpiel sorts them, those at their defaults dropped, values in one
    spelling (`imp_info=True`, `players=3`), nested games the same way."""
    spec = spec.strip().replace(" ", "")
    load(spec)
    return _canonical_spec(spec)


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
        return decision_of(
            self._game.name, self._state, self.seat_of(player), player, self._play, self._game.rounds
        )

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
        copy._game, copy._play, copy._state, copy._rounds = (
            self._game,
            self._play,
            self._state.clone(),
            list(self._rounds),
        )
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
        self.max_payoff = (
            max(abs(self.pyspiel_game.max_utility()), abs(self.pyspiel_game.min_utility())) or 1.0
        )
        from sepo.games.openspiel.text import OpenSpielText

        self._text = OpenSpielText(self)

    def new_initial_state(self) -> OpenSpielState:
        return OpenSpielState(self)

    def _record_sizes(self) -> tuple[int, int, int]:
        """(moves per play, bytes per decision, bytes per decision per move before it): a
        decision keeps its legal actions with their names (about 50 bytes an action) and the
        information-state string twice (a few bytes per earlier move). Measured (tracemalloc,
        uniform play): goofspiel(num_cards=40) about 2.6 kB a decision."""
        length = max(1, int(self.pyspiel_game.max_game_length()))
        return length, 600 + 50 * int(self.pyspiel_game.num_distinct_actions()), 8

    def episode_bytes(self) -> int:
        """`rounds` plays of at most OpenSpiel's `max_game_length` moves each."""
        from sepo.games.base import episode_record_bytes

        length, linear, quadratic = self._record_sizes()
        return self.rounds * episode_record_bytes(length, linear, quadratic)

    def episode_size_hint(self, per_episode: int) -> str | None:
        from sepo.games.base import episode_record_bytes

        length, linear, quadratic = self._record_sizes()
        plays = per_episode // max(1, episode_record_bytes(length, linear, quadratic))
        return f"--rounds {plays} or fewer" if plays >= 1 else None

    @property
    def text(self) -> TextView:
        return self._text


def make_game(spec: str, protocol: str = "rigorous", rounds: int = 2) -> OpenSpielGame:
    """The domain's game factory: `rounds` plays of OpenSpiel game `spec` per episode."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise SepoError(f"--rounds must be an integer >= 1, got {rounds!r}")
    return OpenSpielGame(spec, rounds=rounds, protocol=protocol)
