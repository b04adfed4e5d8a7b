"""An OpenSpiel game as text: the prompt shows the seat's information-state string and the legal
moves by OpenSpiel's names; the strict parser accepts exactly one of them.

The prompt depends on the information state alone (not on the play's number or the score), so a
language model's policy is a function of the solver's keys and its audit reads it exactly there.

Parsing rule (strict): drop anything up to a closing `</think>` (a reply still inside an open
`<think>` block is "truncated"); take the last non-empty line, without surrounding quotes,
backticks, asterisks and a final period. If it is a legal move's name (any case, spaces
collapsed) that move is played. Otherwise the legal names found in it as whole phrases (not
inside a longer word or number) decide: exactly one is an action, two or more are "ambiguous";
none, but the name of a move the game has and is not legal here, is "illegal"; else "no_action".
"""
from __future__ import annotations

import re

from sepo.games.base import Decision, ParseResult, TextView
from sepo.games.disguise import ACTION_WORDS, DisguiseTerms
from sepo.policies.replies import answer_line

_STRIP = " \t\"'`*_.:"


def _normal(text: str) -> str:
    return " ".join(text.split()).strip(_STRIP).casefold()


def _phrase(name: str) -> re.Pattern:
    return re.compile(r"(?<![\w])" + re.escape(_normal(name)) + r"(?![\w])")


class OpenSpielText(TextView):
    """Prompts for an OpenSpiel game (the same under both protocols: the paper has none)."""

    def __init__(self, game):
        self.game = game
        self._vocabulary: frozenset[str] | None = None
        self._move_names: tuple[str, ...] | None = None

    def system_prompt(self) -> str:
        pg = self.game.pyspiel_game
        kind = pg.get_type()
        return (
            f"You are playing {kind.long_name} (OpenSpiel's `{self.game.spec}`), a game for "
            f"{self.game.num_players} players, several times in a row; you take a different seat each time.\n"
            "Each turn you see your information state as OpenSpiel writes it and the moves that are legal "
            "now.\nYour goal is the highest total return over all plays (returns per play lie between "
            f"{pg.min_utility():g} and {pg.max_utility():g}).\n"
            "Think briefly if you wish, then end your response with one legal move, exactly as it is "
            "written, alone on the last line."
        )

    def user_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        return "\n".join([f"You are player {obs['seat']}.",
                          f"Your information state: {obs['information_state']}",
                          "",
                          "Legal moves: " + "; ".join(decision.action_names) + ".",
                          "What is your move?"])

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        line = answer_line(reply)
        if isinstance(line, ParseResult):
            return line
        line = _normal(line)
        for action, name in zip(decision.legal_actions, decision.action_names):
            if line == _normal(name):
                return ParseResult("ok", action, (name,))
        found = [name for name in decision.action_names if _phrase(name).search(line)]
        found = [
            name
            for name in found
            if not any(name != other and _normal(name) in _normal(other) for other in found)
        ]
        if len(found) == 1:
            return ParseResult("ok", decision.action_named(found[0]), tuple(found))
        if found:
            return ParseResult("ambiguous", names_found=tuple(found))
        if line in self.vocabulary_names():
            return ParseResult("illegal", names_found=(line,))
        return ParseResult("no_action")

    def move_names(self) -> tuple[str, ...]:
        """Every move name the game has for any seat, as OpenSpiel writes it (sorted)."""
        if self._move_names is None:
            pg = self.game.pyspiel_game
            state = pg.new_initial_state()
            names = set()
            for seat in range(pg.num_players()):
                for action in range(min(pg.num_distinct_actions(), 4096)):
                    try:
                        names.add(state.action_to_string(seat, action))
                    except Exception:  # some games name only the actions legal in a state
                        continue
            self._move_names = tuple(sorted(names))
        return self._move_names

    def vocabulary_names(self) -> frozenset[str]:
        """Every move name the game has for any seat (normalised): a reply naming one that is not
        legal is "illegal" rather than "no_action"."""
        if self._vocabulary is None:
            self._vocabulary = frozenset(_normal(name) for name in self.move_names())
        return self._vocabulary

    def disguise_terms(self) -> DisguiseTerms:
        """The game's names (OpenSpiel's long and short name) and the words its move names are made
        of (`Raise`, `Liar`, `Bid`), when there are few enough to rename one to one; numbers are
        never renamed, so a game whose moves are numbers keeps them and changes only its name."""
        kind = self.game.pyspiel_game.get_type()
        words = sorted(
            {w for name in self.move_names() for w in re.findall(r"[A-Za-z]{2,}", name)}, key=str.lower
        )
        if len({w.lower() for w in words}) != len(words) or len(words) > len(ACTION_WORDS):
            words = []
        names = (kind.long_name, kind.short_name, self.game.spec.split("(")[0].strip())
        return DisguiseTerms(
            game=tuple(dict.fromkeys(names)), actions=tuple(words), fixed={"OpenSpiel": "Gamebox"}
        )

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def vocabulary(self) -> str:
        return ""
