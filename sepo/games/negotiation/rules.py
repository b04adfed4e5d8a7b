"""Split bargaining (the paper's "Negotiation v1"), repeated.

Rules. Two players bargain over a pie of `pie` points (10 in the paper) for `rounds` rounds (4).
Each round both demand a whole number of points between `min_demand` and `max_demand` (1 and 9)
at the same time. If the two demands add up to at most the pie, it is a deal and each gets its
own demand (anything left over is lost to both). Otherwise the round breaks down and both get
minus `breakdown_cost` (0 in the paper). Then both demands are public.

Actions are indices 0 .. K-1 into the demand range: action i demands `min_demand + i` points.
A player's decision shows the history from its own side: `observation["history"]` is a tuple
of (own action, other action) per past round, `observation["demands"]` the same in points; the
information-state key spells the demands, own first, as "5-5,7-3" ("start" before round 1).
The key keeps only the last `memory` rounds (1 by default; "full" keeps the whole history): the
information states of tabular memory-n policies and of the exact solver; prompts always show
the whole history.

Paper versions (`paper_version`, only under `--protocol paper`): "writeup" (default; the
version the paper's write-up and results describe) or "code" (the authors' reachable code).
They differ in pools, collusion/externality accounting and the payoff scale (see `events.py`,
`pools.py` and docs/negotiation.md); the rules of play are the same.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import (
    Decision,
    Game,
    RepeatedMatchState,
    RoundResult,
    TextView,
    episode_record_bytes,
    longest_within,
)

PAPER = {"pie": 10, "min_demand": 1, "max_demand": 9, "rounds": 4}
PAPER_VERSIONS = ("writeup", "code")
DEFAULT_MEMORY = 1
"""Information states keep the last round by default: exact for every paper bot and memory-1
table, and 82 states instead of the whole tree's 538,084 at 4 rounds (`memory="full"`)."""
START = "start"
MAX_JOINT_CELLS = 50_000_000
"""The most (round, joint demand) pairs an exact solve may visit: reading a bot's declared states
loops over them in Python (about a minute at this size)."""


def _whole(value, what: str, low: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or (low is not None and value < low)
    ):
        bound = "" if low is None else f" >= {low}"
        raise SepoError(f"negotiation: {what} must be a whole number{bound}, got {value!r}")
    return int(value)


class NegotiationState(RepeatedMatchState):
    """One match: the joint demands (as action indices) so far."""

    words = "demand"

    def decision(self, player: int) -> Decision:
        return self._game.decision_after(
            tuple((joint[player], joint[1 - player]) for joint in self._history), player
        )

    def legal(self, action: int) -> bool:
        return 0 <= action < self._game.num_demands

    def legal_description(self) -> str:
        return (f"legal actions are 0..{self._game.num_demands - 1} "
                f"(demands {self._game.min_demand}..{self._game.max_demand})")

    def play_round(self, a0: int, a1: int) -> RoundResult:
        d0, d1 = self._game.demand(a0), self._game.demand(a1)
        u0, u1 = self._game.payoffs(d0, d1)
        return RoundResult(
            payoffs=(u0, u1),
            info={"actions": (a0, a1), "demands": (d0, d1), "deal": d0 + d1 <= self._game.pie},
        )


class SplitBargaining(Game):
    """`rounds` rounds of simultaneous demands over a pie of `pie` points."""

    name = "negotiation"
    num_players = 2
    zero_sum = False

    def __init__(
        self,
        pie: int = PAPER["pie"],
        min_demand: int = PAPER["min_demand"],
        max_demand: int = PAPER["max_demand"],
        rounds: int = PAPER["rounds"],
        breakdown_cost: float = 0.0,
        memory: int | str | None = DEFAULT_MEMORY,
        protocol: str = "rigorous",
        paper_version: str | None = None,
    ):
        if protocol not in ("rigorous", "paper"):
            raise SepoError(f"unknown protocol {protocol!r}; use one of: rigorous, paper")
        self.pie = _whole(pie, "pie", 1)
        self.min_demand = _whole(min_demand, "min_demand", 0)
        self.max_demand = _whole(max_demand, "max_demand", 0)
        self.rounds = _whole(rounds, "rounds", 1)
        if self.max_demand < self.min_demand:
            raise SepoError(
                f"negotiation: the demand range {self.min_demand}..{self.max_demand} is empty (max_demand < "
                "min_demand)"
            )
        if self.max_demand > self.pie:
            raise SepoError(
                f"negotiation: the demand range {self.min_demand}..{self.max_demand} does not fit the pie of "
                f"{self.pie} (max_demand > pie)"
            )
        if 2 * self.min_demand > self.pie:
            raise SepoError(
                f"negotiation: the demand range {self.min_demand}..{self.max_demand} never allows a deal "
                f"over a pie of {self.pie} (2 x min_demand > pie)"
            )
        try:
            cost = float(breakdown_cost)
        except (TypeError, ValueError):
            raise SepoError(f"negotiation: breakdown_cost must be a number, got {breakdown_cost!r}") from None
        if not math.isfinite(cost) or cost < 0:
            raise SepoError(
                f"negotiation: breakdown_cost must be a finite number >= 0 (the loss each side takes on a "
                f"breakdown), got {breakdown_cost!r}"
            )
        self.breakdown_cost = cost
        if memory == "full":
            memory = None
        if memory is not None:
            memory = _whole(memory, "memory (rounds an information state remembers, or 'full')", 0)
        self.memory = None if memory is None or memory >= self.rounds else memory
        if paper_version is not None and paper_version not in PAPER_VERSIONS:
            raise SepoError(
                f"negotiation: unknown paper version {paper_version!r}; use one of: "
                f"{', '.join(PAPER_VERSIONS)}"
            )
        if paper_version is not None and protocol != "paper":
            raise SepoError("negotiation: --paper-version applies to --protocol paper only")
        if protocol == "paper" and (self.min_demand < 1 or self.max_demand > 9):
            raise SepoError(
                "negotiation: --protocol paper reads single digits 1-9 (the paper's parser); the demand "
                f"range {self.min_demand}..{self.max_demand} does not fit it"
            )
        self.protocol = protocol
        self.paper_version = (paper_version or "writeup") if protocol == "paper" else None
        self.num_demands = self.max_demand - self.min_demand + 1
        self.action_names = tuple(str(self.demand(a)) for a in range(self.num_demands))
        from sepo.games.negotiation.text import NegotiationText

        self._text = NegotiationText(self, style=protocol)

    # -- the rules ---------------------------------------------------------------------------------
    def demand(self, action: int) -> int:
        return self.min_demand + int(action)

    def payoffs(self, own: int, other: int) -> tuple[float, float]:
        """(own, other) points of one round with demands `own` and `other`."""
        if own + other <= self.pie:
            return float(own), float(other)
        return -self.breakdown_cost, -self.breakdown_cost

    def stage_payoffs(self) -> np.ndarray:
        """`[own action, other action]` -> own points (the game is symmetric)."""
        d = self.min_demand + np.arange(self.num_demands)
        deal = d[:, None] + d[None, :] <= self.pie
        return np.where(deal, d[:, None].astype(float), -self.breakdown_cost)

    def stage_game(self, agent_player: int = 0):
        """The stage game from the agent's side, for the exact DP."""
        from sepo.metrics.repeated import StageGame

        own = self.stage_payoffs()
        return StageGame(own, own.T)

    @property
    def max_payoff(self) -> float:
        """The payoff scale's reference: the writeup's 5 (s = 0.6) by default and in the rigorous
        protocol the equal split pie/2; the reachable code's 3 (s = 1, its default never overridden)."""
        return 3.0 if self.paper_version == "code" else self.pie / 2.0

    # -- sizes ---------------------------------------------------------------------------------------
    def episode_bytes(self) -> int:
        """Each decision's observation holds the history so far, twice (actions and demands): quadratic in the
        rounds."""
        return episode_record_bytes(self.rounds, 6000, 200)

    def episode_size_hint(self, per_episode: int) -> str | None:
        longest = longest_within(per_episode, 6000, 200)
        return f"--rounds {longest} or fewer" if longest >= 1 else None

    def exact_size(self, budget: int) -> str | None:
        """Every exact path (the DP over histories or over a bot's declared states) visits all K²
        joint demands of a round at least once per round, as numpy rows and, reading a bot, as a
        Python loop: refused before the solve when that alone exceeds the memory `budget` or
        `MAX_JOINT_CELLS` (hours of Python)."""
        from sepo.limits import size_text

        joint = self.num_demands ** 2
        cells = self.rounds * joint
        need = 16 * joint + 8 * cells  # the stage payoffs, and each round's children
        if need <= budget and cells <= MAX_JOINT_CELLS:
            return None
        fits = min(
            int(math.isqrt(max(1, min(budget // (16 + 8 * self.rounds), MAX_JOINT_CELLS // self.rounds)))),
            self.num_demands,
        )
        return (
            f"the exact split-bargaining solve visits {joint:,} joint demands a round ({self.num_demands:,} "
            f"demands a side) over {self.rounds} rounds, {size_text(need)} and {cells:,} steps at the least, "
            f"more than this machine can do ({size_text(budget)} to spare, at most {MAX_JOINT_CELLS:,} "
            f"steps); use a demand range of at most {fits:,} demands (--min-demand, --max-demand)"
        )

    # -- information states --------------------------------------------------------------------------
    def with_memory(self, memory: int | None) -> "SplitBargaining":
        """The same game with information states that keep `memory` rounds (None: the whole history)."""
        import copy

        other = copy.copy(self)
        other.memory = None if memory is None or memory >= self.rounds else int(memory)
        return other

    def remembered(self, history):
        return history if self.memory is None else history[len(history) - min(len(history), self.memory):]

    def history_key(self, history) -> str:
        """The key of a history of (own action, other action) pairs: "5-5,7-3" (demands), or "start"."""
        return ",".join(f"{self.demand(own)}-{self.demand(other)}" for own, other in history) or START

    def info_keys(self) -> list[str]:
        """Every information-state key: round order, then base-K² order of the joint actions."""
        depth = self.rounds - 1 if self.memory is None else min(self.memory, self.rounds - 1)
        joint = list(itertools.product(range(self.num_demands), repeat=2))
        keys = [START]
        for length in range(1, depth + 1):
            keys += [self.history_key(h) for h in itertools.product(joint, repeat=length)]
        return keys

    def decision_after(self, history: tuple[tuple[int, int], ...], player: int = 0) -> Decision:
        """The decision of `player` after `history` ((own, other) actions), without playing it out."""
        demands = tuple((self.demand(own), self.demand(other)) for own, other in history)
        scores = [self.payoffs(own, other) for own, other in demands]
        return Decision(
            game=self.name,
            player=player,
            info_key=self.history_key(self.remembered(history)),
            legal_actions=tuple(range(self.num_demands)),
            action_names=self.action_names,
            observation={
                "round": len(history) + 1,
                "rounds": self.rounds,
                "history": history,
                "demands": demands,
                "deals": tuple(own + other <= self.pie for own, other in demands),
                "my_score": sum(s[0] for s in scores),
                "opponent_score": sum(s[1] for s in scores),
                "pie": self.pie,
                "min_demand": self.min_demand,
                "max_demand": self.max_demand,
                "breakdown_cost": self.breakdown_cost,
                "paper_version": self.paper_version,
            },
        )

    def new_initial_state(self) -> NegotiationState:
        return NegotiationState(self)

    @property
    def text(self) -> TextView:
        return self._text


def make_game(
    protocol: str = "rigorous",
    pie: int = PAPER["pie"],
    min_demand: int = PAPER["min_demand"],
    max_demand: int = PAPER["max_demand"],
    rounds: int = PAPER["rounds"],
    breakdown_cost: float = 0.0,
    memory: int | str | None = DEFAULT_MEMORY,
    paper_version: str | None = None,
) -> SplitBargaining:
    """The domain's game factory (validates its parameters: SepoError on bad input)."""
    return SplitBargaining(
        pie=pie,
        min_demand=min_demand,
        max_demand=max_demand,
        rounds=rounds,
        breakdown_cost=breakdown_cost,
        memory=memory,
        protocol=protocol,
        paper_version=paper_version,
    )
