"""The three-item negotiation (the paper's "negotiation-GT", after GTBench).

Rules. Three item types lie on the table: books, hats and balls. At the start of an episode
chance draws the pool, uniformly 1..`pool_max` of each item (the paper: 1-4), and each player's
private values, one integer per item summing to `total` (the paper: 10). A value vector is drawn
as the paper does: multinomial(`total`, 1/3 each), then every 0 is raised to 1 and 1 is taken from
the largest value, so every item is worth at least 1. Both players see the pool and their own
values, never the other's.

Then `rounds` rounds (the paper: 4) of simultaneous demands: each player demands a number of each
item, 0..pool_i. If for every item the two demands fit into the pool (a_i + b_i <= pool_i) the
round is a deal and each player scores the sum of its demands weighted by its own values;
otherwise the round breaks down and both score 0. Items are not used up: every round is played
on the same pool. After a round both demands are public; values and scores stay private.

Values are drawn ONCE per episode. The authors' code redraws the opponent's values every round
although it says "per episode"; that version is available as `redraw_opponent_values` (on under
`--protocol paper`, with a warning).

A third party ("public") can be configured (`third_party=True`, rigorous only): items a deal leaves
unclaimed go to it, worth 1 point each; a deal that claims every item shuts it out.

Actions. A demand (d_books, d_hats, d_balls) is the action index d_books*B^2 + d_hats*B + d_balls
with B = pool_max + 1; the legal actions are the demands within the pool, named "[d1, d2, d3]".
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import (
    CHANCE,
    SIMULTANEOUS,
    TERMINAL,
    Decision,
    Game,
    RoundResult,
    State,
    TextView,
    episode_record_bytes,
    longest_within,
)

ITEMS = ("books", "hats", "balls")
PAPER_ROUNDS, PAPER_TOTAL, PAPER_POOL_MAX = 4, 10, 4
PUBLIC = "public"


class PaperRedrawWarning(UserWarning):
    """The paper's protocol redraws the opponent's values every round (a bug kept for reproduction)."""


def parse_triple(text, what: str, flag: str) -> tuple[int, ...] | None:
    """'4,3,3' (or a sequence) as a tuple of 3 integers; '' or None as None; one-line errors."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    parts = (
        [p for p in str(text).replace(" ", "").strip("[]()").split(",") if p]
        if isinstance(text, str)
        else list(text)
    )
    try:
        numbers = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        raise SepoError(
            f"{flag} must be {len(ITEMS)} comma-separated integers ({', '.join(ITEMS)}), got {text!r}"
        ) from None
    if len(numbers) != len(ITEMS):
        raise SepoError(
            f"{flag} must give one {what} per item ({', '.join(ITEMS)}): {len(ITEMS)} numbers, got "
            f"{len(numbers)} ({text!r})"
        )
    return numbers


@dataclass(frozen=True)
class NegotiationRules:
    """The parameters of the game, validated on construction."""

    rounds: int = PAPER_ROUNDS
    total: int = PAPER_TOTAL
    pool_max: int = PAPER_POOL_MAX
    pool: tuple[int, ...] | None = None
    values: tuple[int, ...] | None = None
    opponent_values: tuple[int, ...] | None = None
    redraw_opponent_values: bool = False
    third_party: bool = False
    memory: int | None = None

    def __post_init__(self):
        for name, value, low in (
            ("--rounds", self.rounds, 1),
            ("--total", self.total, len(ITEMS)),
            ("--pool-max", self.pool_max, 1),
        ):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
                raise SepoError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.memory is not None and (
            not isinstance(self.memory, (int, np.integer)) or isinstance(self.memory, bool) or self.memory < 0
        ):
            raise SepoError(
                f"--memory must be an integer >= 0 (or -1 for the whole history), got {self.memory!r}"
            )
        if self.pool is not None:
            if any(p < 1 or p > self.pool_max for p in self.pool):
                raise SepoError(
                    f"--items must hold 1..{self.pool_max} of each item (--pool-max), got {list(self.pool)}"
                )
        for flag, values in (("--values", self.values), ("--opponent-values", self.opponent_values)):
            if values is None:
                continue
            if any(v < 0 for v in values):
                raise SepoError(f"{flag} must be non-negative, got {list(values)}")
            if sum(values) != self.total:
                raise SepoError(
                    f"{flag} {list(values)} sum to {sum(values)}, not the stated total {self.total} (--total)"
                )

    @property
    def base(self) -> int:
        return self.pool_max + 1

    def encode(self, demand) -> int:
        d1, d2, d3 = (int(x) for x in demand)
        return (d1 * self.base + d2) * self.base + d3

    def decode(self, action: int) -> tuple[int, int, int]:
        rest, d3 = divmod(int(action), self.base)
        d1, d2 = divmod(rest, self.base)
        return d1, d2, d3

    def legal(self, pool) -> tuple[int, ...]:
        return _legal(self.pool_max, tuple(pool))

    def pools(self) -> list[tuple[tuple[int, ...], float]]:
        if self.pool is not None:
            return [(tuple(self.pool), 1.0)]
        each = list(itertools.product(range(1, self.pool_max + 1), repeat=len(ITEMS)))
        return [(p, 1.0 / len(each)) for p in each]

    def value_distribution(self, fixed=None) -> list[tuple[tuple[int, ...], float]]:
        return [(tuple(fixed), 1.0)] if fixed is not None else paper_value_distribution(self.total)

    def deal(self, pool, a, b) -> bool:
        return all(x + y <= p for x, y, p in zip(a, b, pool))


def name_of(demand) -> str:
    return "[" + ", ".join(str(int(d)) for d in demand) + "]"


@lru_cache(maxsize=None)
def _legal(pool_max: int, pool: tuple[int, ...]) -> tuple[int, ...]:
    base = pool_max + 1
    return tuple((a * base + b) * base + c for a, b, c in itertools.product(*(range(p + 1) for p in pool)))


@lru_cache(maxsize=None)
def _names(pool: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(name_of(d) for d in itertools.product(*(range(p + 1) for p in pool)))


@lru_cache(maxsize=None)
def _value_table(total: int) -> tuple[tuple[tuple[int, ...], float], ...]:
    from math import factorial

    found: dict[tuple[int, ...], float] = {}
    for x in range(total + 1):
        for y in range(total + 1 - x):
            z = total - x - y
            prob = factorial(total) / (factorial(x) * factorial(y) * factorial(z)) / 3 ** total
            key = fix_zero_values((x, y, z))
            found[key] = found.get(key, 0.0) + prob
    return tuple(sorted(found.items()))


def paper_value_distribution(total: int) -> list[tuple[tuple[int, ...], float]]:
    """The exact distribution of the paper's value draw: multinomial(total, 1/3 each), each 0
    raised to 1 and 1 taken from the (first) largest value."""
    return list(_value_table(int(total)))


def fix_zero_values(values) -> tuple[int, ...]:
    values = list(values)
    for i in range(len(values)):
        if values[i] == 0:
            values[i] = 1
            values[int(np.argmax(values))] -= 1
    return tuple(values)


def history_key(round_index: int, pool, values, history, memory: int | None = None) -> str:
    """The information-state key: round, pool, own values and the demand history (the whole of
    it, or with `memory` m only the last m rounds: the states of a tabular policy that reads
    that much; m = 0 gives one state per deal and round)."""
    if memory is not None:
        history = history[len(history) - min(memory, len(history)):]
    past = ",".join(f"{''.join(map(str, own))}-{''.join(map(str, other))}" for own, other, _ in history)
    shown = (past or "start") if memory is None else f"last{memory}:{past or '-'}"
    return f"r{round_index + 1}|p{''.join(map(str, pool))}|v{'.'.join(map(str, values))}|{shown}"


def make_decision(game: "NegotiationGame", player: int, pool, values, history, first_values=None,
                  my_payoffs=(), opponent_payoffs=None) -> Decision:
    """A player's decision: `history` holds (own demand, other's demand, deal) per past round."""
    rules = game.rules
    round_index = len(history)
    return Decision(
        game=game.name,
        player=player,
        info_key=history_key(round_index, pool, values, history, rules.memory),
        legal_actions=rules.legal(pool),
        action_names=_names(tuple(pool)),
        observation={
            "round": round_index + 1,
            "rounds": rules.rounds,
            "items": ITEMS,
            "pool": tuple(pool),
            "values": tuple(values),
            "first_values": tuple(first_values or values),
            "total": rules.total,
            "history": tuple(history),
            "my_payoffs": tuple(my_payoffs),
            "opponent_payoffs": None if opponent_payoffs is None else tuple(opponent_payoffs),
        },
    )


class NegotiationState(State):
    """An episode: chance draws the pool and the values, then `rounds` rounds of demands."""

    def __init__(self, game: "NegotiationGame"):
        self._game = game
        self.pool: tuple[int, ...] | None = None
        self.values: list[tuple[int, ...] | None] = [None, None]
        self.first_values: list[tuple[int, ...] | None] = [None, None]
        self._rounds: list[RoundResult] = []
        self._redraw_pending = False
        self.agent_seat = 0

    def seat_agent(self, player: int) -> None:
        """The agent's seat gets `--values` and keeps its values; the other seat gets
        `--opponent-values` and, in the paper's version, is the one redrawn every round."""
        self.agent_seat = int(player)

    @property
    def rules(self) -> NegotiationRules:
        return self._game.rules

    def num_players(self) -> int:
        return 2

    def _chance_stage(self) -> str | None:
        if self.pool is None:
            return "pool"
        for player in (0, 1):
            if self.values[player] is None:
                return f"values{player}"
        if self._redraw_pending:
            return f"values{1 - self.agent_seat}"
        return None

    def current_player(self) -> int:
        if len(self._rounds) >= self.rules.rounds:
            return TERMINAL
        return CHANCE if self._chance_stage() is not None else SIMULTANEOUS

    def _outcomes(self) -> list[tuple[tuple[int, ...], float]]:
        stage = self._chance_stage()
        if stage == "pool":
            return self.rules.pools()
        fixed = self.rules.values if stage == f"values{self.agent_seat}" else self.rules.opponent_values
        return self.rules.value_distribution(fixed)

    def chance_outcomes(self) -> list[tuple[int, float]]:
        return [(i, p) for i, (_, p) in enumerate(self._outcomes())]

    def apply_action(self, action: int) -> None:
        stage = self._chance_stage()
        if stage is None:
            raise ValueError("negotiation-gt: demands go through apply_actions")
        outcome = self._outcomes()[int(action)][0]
        if stage == "pool":
            self.pool = outcome
        else:
            player = int(stage[-1])
            self.values[player] = outcome
            if self.first_values[player] is None:
                self.first_values[player] = outcome
            self._redraw_pending = False

    def history_of(self, player: int) -> tuple:
        return tuple(
            (r.info["demands"][player], r.info["demands"][1 - player], r.info["deal"]) for r in self._rounds
        )

    def decision(self, player: int) -> Decision:
        show_opponent = self._game.protocol == "paper"
        return make_decision(
            self._game,
            player,
            self.pool,
            self.values[player],
            self.history_of(player),
            first_values=self.first_values[player],
            my_payoffs=tuple(r.payoffs[player] for r in self._rounds),
            opponent_payoffs=tuple(r.payoffs[1 - player] for r in self._rounds) if show_opponent else None,
        )

    def apply_actions(self, actions) -> None:
        if self.current_player() != SIMULTANEOUS:
            raise ValueError("negotiation-gt: demands are applied only when both players must demand")
        legal = self.rules.legal(self.pool)
        if len(actions) != 2 or any(int(a) not in legal for a in actions):
            raise ValueError(
                f"negotiation-gt: need 2 demands within the pool {list(self.pool)}, got {list(actions)}"
            )
        demands = tuple(self.rules.decode(a) for a in actions)
        deal = self.rules.deal(self.pool, *demands)
        values = tuple(self.values)
        payoffs = tuple(float(np.dot(d, v)) if deal else 0.0 for d, v in zip(demands, values))
        third = {}
        if self.rules.third_party:
            third[PUBLIC] = float(sum(p - x - y for p, x, y in zip(self.pool, *demands))) if deal else 0.0
        self._rounds.append(
            RoundResult(
                payoffs=payoffs,
                third_party=third,
                info={"demands": demands, "deal": deal, "pool": self.pool, "values": values},
            )
        )
        if self.rules.redraw_opponent_values and len(self._rounds) < self.rules.rounds:
            self._redraw_pending = True

    def rounds(self) -> list[RoundResult]:
        return list(self._rounds)

    def clone(self) -> "NegotiationState":
        copy = NegotiationState(self._game)
        copy.pool, copy.values, copy.first_values = self.pool, list(self.values), list(self.first_values)
        copy._rounds, copy._redraw_pending, copy.agent_seat = (
            list(self._rounds),
            self._redraw_pending,
            self.agent_seat,
        )
        return copy


class NegotiationGame(Game):
    """The three-item negotiation between two players."""

    name = "negotiation-gt"

    def __init__(self, rules: NegotiationRules, protocol: str = "rigorous"):
        self.rules = rules
        self.protocol = protocol
        self.third_parties = (PUBLIC,) if rules.third_party else ()
        # the paper's s = 3 / 10; the rigorous scale uses the true per-round maximum, pool_max * total
        self.max_payoff = float(PAPER_TOTAL if protocol == "paper" else rules.pool_max * rules.total)
        from sepo.games.negotiation_gt.text import NegotiationText

        self._text = NegotiationText(self, style=protocol)

    def episode_bytes(self) -> int:
        """About 6 kB per round's decision records (measured)."""
        return episode_record_bytes(self.rules.rounds, 8000, 20)

    def episode_size_hint(self, per_episode: int) -> str | None:
        longest = longest_within(per_episode, 8000, 20)
        return f"--rounds {longest} or fewer" if longest >= 1 else None

    def new_initial_state(self) -> NegotiationState:
        return NegotiationState(self)

    @property
    def text(self) -> TextView:
        return self._text


def make_game(
    protocol: str = "rigorous",
    rounds: int = PAPER_ROUNDS,
    total: int = PAPER_TOTAL,
    pool_max: int = PAPER_POOL_MAX,
    items=None,
    values=None,
    opponent_values=None,
    third_party: bool = False,
    redraw: str = "",
    memory: int = -1,
) -> NegotiationGame:
    """The domain's game factory. `--protocol paper` redraws the opponent's values every round
    (the authors' code), with a warning; `redraw` ("yes"/"no") overrides that in either protocol."""
    if redraw not in ("", "yes", "no"):
        raise SepoError(f"--redraw must be yes or no, got {redraw!r}")
    redraw_values = (protocol == "paper") if redraw == "" else redraw == "yes"
    if isinstance(third_party, str):
        if third_party not in ("none", PUBLIC):
            raise SepoError(f"--third-party must be none or public, got {third_party!r}")
        third_party = third_party == PUBLIC
    if third_party and protocol == "paper":
        raise SepoError(
            "--third-party public is a rigorous-protocol option; the paper's game has no third party"
        )
    rules = NegotiationRules(
        rounds=rounds,
        total=total,
        pool_max=pool_max,
        pool=parse_triple(items, "pool size", "--items"),
        values=parse_triple(values, "value", "--values"),
        opponent_values=parse_triple(opponent_values, "value", "--opponent-values"),
        redraw_opponent_values=redraw_values,
        third_party=bool(third_party),
        memory=None if memory == -1 else memory,
    )
    if redraw_values:
        warnings.warn(
            "negotiation-gt: the opponent's private values are redrawn every round under the paper protocol, "
            "as in the authors' code (its comment says per episode); the rigorous protocol fixes them per "
            "episode",
            PaperRedrawWarning,
            stacklevel=2,
        )
    return NegotiationGame(rules, protocol=protocol)
