"""The game API every sepo domain implements.

A small, OpenSpiel-shaped interface: a `Game` makes `State`s; a state is a chance node, a node
where one player (or, for simultaneous moves, several) must act, or terminal. Every decision has
two views: a structured one (`Decision`: information-state key, legal actions, observation fields)
for scripted and tabular policies, and a text one (`TextView`: prompts and a strict parser) for
language models. Repeated games are one state that runs several rounds; each finished round is
recorded as a `RoundResult` with the payoff of every player and of any third party.

Why not OpenSpiel's own API: its Python games cannot carry text views, third-party payoffs or the
paper's episode protocols; sepo still checks its exact results against OpenSpiel where it overlaps.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

CHANCE = -1
SIMULTANEOUS = -2
TERMINAL = -4


@dataclass(frozen=True)
class Decision:
    """What a policy sees at one decision: the structured view of an information state."""

    game: str
    player: int
    info_key: str
    legal_actions: tuple[int, ...]
    action_names: tuple[str, ...]
    observation: Mapping[str, Any] = field(default_factory=dict)

    def name_of(self, action: int) -> str:
        return self.action_names[self.legal_actions.index(action)]

    def action_named(self, name: str) -> int:
        return self.legal_actions[self.action_names.index(name)]


@dataclass(frozen=True)
class RoundResult:
    """One finished round of an episode: payoff per player and per third party."""

    payoffs: tuple[float, ...]
    third_party: Mapping[str, float] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)


class State(abc.ABC):
    """A node of the game: chance, decision (one or several players), or terminal."""

    @abc.abstractmethod
    def current_player(self) -> int:
        """A player index, `CHANCE`, `SIMULTANEOUS` or `TERMINAL`."""

    def is_terminal(self) -> bool:
        return self.current_player() == TERMINAL

    def is_chance_node(self) -> bool:
        return self.current_player() == CHANCE

    def acting_players(self) -> list[int]:
        """Players who must act now (several at a simultaneous node)."""
        player = self.current_player()
        if player >= 0:
            return [player]
        if player == SIMULTANEOUS:
            return list(range(self.num_players()))
        return []

    @abc.abstractmethod
    def num_players(self) -> int: ...

    def chance_outcomes(self) -> list[tuple[int, float]]:
        """(outcome, probability) pairs at a chance node."""
        raise NotImplementedError(f"{type(self).__name__} has no chance nodes")

    @abc.abstractmethod
    def decision(self, player: int) -> Decision:
        """The structured view of `player`'s current decision."""

    @abc.abstractmethod
    def apply_action(self, action: int) -> None:
        """Apply a chance outcome or the single acting player's action."""

    def apply_actions(self, actions: Sequence[int]) -> None:
        """Apply one action per player at a simultaneous node."""
        raise NotImplementedError(f"{type(self).__name__} has no simultaneous moves")

    @abc.abstractmethod
    def rounds(self) -> list[RoundResult]:
        """The rounds finished so far, in order."""

    def returns(self) -> list[float]:
        """Total payoff of each player over the finished rounds."""
        totals = [0.0] * self.num_players()
        for result in self.rounds():
            for player, payoff in enumerate(result.payoffs):
                totals[player] += payoff
        return totals

    @abc.abstractmethod
    def clone(self) -> "State": ...

    def seat_agent(self, player: int) -> None:
        """Told before play which seat the audited agent holds; a game whose chance treats the
        agent and its opponent differently (whose values it fixes or redraws) reads it."""


class RepeatedMatchState(State):
    """A two-player match of `game.rounds` rounds of simultaneous moves, the joint actions kept
    oldest first. A subclass is the stage game: `decision(player)` and `play_round(a0, a1)`."""

    words = "action"
    """What one move is called in the game's errors ("demand", ...)."""

    def __init__(self, game: "Game"):
        self._game = game
        self._history: list[tuple[int, int]] = []
        self._rounds: list[RoundResult] = []

    @abc.abstractmethod
    def play_round(self, a0: int, a1: int) -> RoundResult:
        """The result of one round in which player 0 plays `a0` and player 1 `a1` (checked legal)."""

    @abc.abstractmethod
    def legal(self, action: int) -> bool: ...

    def num_players(self) -> int:
        return 2

    def current_player(self) -> int:
        return TERMINAL if len(self._history) >= self._game.rounds else SIMULTANEOUS

    def apply_action(self, action: int) -> None:
        raise ValueError(f"{self._game.name}: both players move at once; "
                         f"use apply_actions([{self.words} of player 0, {self.words} of player 1])")

    def apply_actions(self, actions) -> None:
        if self.is_terminal():
            raise ValueError(f"{self._game.name}: the match is over; no {self.words} can be applied")
        a0, a1 = (int(a) for a in actions)
        if not (self.legal(a0) and self.legal(a1)):
            raise ValueError(f"{self._game.name}: illegal actions {actions!r}; {self.legal_description()}")
        result = self.play_round(a0, a1)
        self._history.append((a0, a1))
        self._rounds.append(result)

    def legal_description(self) -> str:
        return "see the game's legal actions"

    def rounds(self) -> list[RoundResult]:
        return list(self._rounds)

    def history(self) -> list[tuple[int, int]]:
        return list(self._history)

    def clone(self) -> "RepeatedMatchState":
        copy = type(self)(self._game)
        copy._history = list(self._history)
        copy._rounds = list(self._rounds)
        return copy


class TextView(abc.ABC):
    """The language interface of a game: what an LLM reads and how its reply is parsed."""

    @abc.abstractmethod
    def system_prompt(self) -> str: ...

    @abc.abstractmethod
    def user_prompt(self, decision: Decision) -> str: ...

    @abc.abstractmethod
    def parse(self, reply: str, decision: Decision) -> "ParseResult": ...

    @abc.abstractmethod
    def answer_text(self, decision: Decision, action: int) -> str:
        """The canonical final line that names `action` (used to score actions and in SFT data)."""

    def reason(self, decision: Decision) -> str:
        """A short expert reason that describes the state only (never the chosen action), or ""."""
        return ""

    def vocabulary(self) -> str:
        """Phrases (one per line) a tokenizer for this domain should know beyond its prompts, or ""."""
        return ""

    def disguise_terms(self):
        """The words that name this game, its actions and its other telling names in its prompts
        (a `sepo.games.disguise.DisguiseTerms`), so that `disguised(seed)` can play the same rules
        under new names; None: this view cannot be disguised."""
        return None

    def disguised(self, seed: int) -> "TextView":
        """This view under new names drawn from `seed` (`sepo.games.disguise.DisguisedView`)."""
        from sepo.games.disguise import DisguisedView

        return DisguisedView(self, seed)

    def canonical_reply(self, decision: Decision, action: int) -> str:
        """A whole expert reply: the state's reason, then the answer line that plays `action`.
        SFT data is made of these. Because the reason does not depend on the action, scoring
        the answer line after it reads off an SFT-trained model's action distribution."""
        reason = self.reason(decision)
        return (
            f"{reason}\n{self.answer_text(decision, action)}"
            if reason
            else self.answer_text(decision, action)
        )


@dataclass(frozen=True)
class ParseResult:
    """The outcome of strictly parsing a model reply.

    `status` is one of: "ok"; "no_action" (names no action); "ambiguous" (names two or more);
    "illegal" (names one action that is not legal here); "truncated" (the reply stopped at the
    token limit or inside an unclosed reasoning block; see `sepo.policies.replies.parse_reply`).
    Only "ok" carries an action.
    """

    status: str
    action: int | None = None
    names_found: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Game(abc.ABC):
    """A domain: rules, sizes, and both interfaces."""

    name: str
    num_players: int = 2
    max_payoff: float = 1.0
    zero_sum: bool = False
    third_parties: tuple[str, ...] = ()

    @abc.abstractmethod
    def new_initial_state(self) -> State: ...

    @property
    @abc.abstractmethod
    def text(self) -> TextView: ...

    @property
    def payoff_scale(self) -> float:
        """s = 3 / max_payoff, the paper's normalisation of utilities to a largest payoff of 3."""
        return 3.0 / self.max_payoff

    # -- sizes, checked before a command starts (sepo.limits) -------------------------------------
    def episode_bytes(self) -> int:
        """A rough size of one played episode's record (every agent decision keeps its
        observation): play loops check that a batch fits the machine before they start. Domains
        whose episodes grow with a length parameter override it."""
        return 64 << 10

    def episode_size_hint(self, per_episode: int) -> str | None:
        """The length option that would bring one episode's record within `per_episode` bytes
        (e.g. "--rounds 400 or fewer"), or None."""
        return None

    def exact_size(self, budget: int) -> str | None:
        """None when the domain's exact solver fits in `budget` bytes for this game (or the
        domain does not estimate it); else one line: what it would hold and the options that
        would make it fit. Computed from the parameters, before anything is built."""
        return None


def episode_record_bytes(length: int, linear: int, quadratic: int = 0) -> int:
    """`linear`·L + `quadratic`·L(L+1)/2 bytes for an episode of length L: the decisions' records,
    and for games whose observations carry the whole history so far, that history once per decision."""
    return linear * length + quadratic * length * (length + 1) // 2


def longest_within(budget: int, linear: int, quadratic: int = 0) -> int:
    """The longest episode length L with `episode_record_bytes(L, ...)` <= budget (0 if none)."""
    low, high = 0, 1
    while episode_record_bytes(high, linear, quadratic) <= budget:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (
            (middle, high) if episode_record_bytes(middle, linear, quadratic) <= budget else (low, middle)
        )
    return low
