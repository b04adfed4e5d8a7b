"""The repeated sealed-bid auction.

Rules of one round. Chance draws each bidder's private value independently from the value
distribution. Every bidder then submits, simultaneously and sealed, one bid from the bid grid.
The highest bid wins; a tie among the highest bids is settled by a fair draw (a chance node).
The winner pays the price: its own bid under the first-price rule, the highest losing bid (the
second-highest bid, which equals its own on a tie) under the second-price rule. The winner's
payoff is value - price (a loss is possible), or max(0, value - price) when `clip` is set (the
paper's accounting); losers get 0. The seller, a third party, receives the price as revenue.
After the round every bid and the winner are public; values and payoffs stay private.

An episode is `rounds` rounds with fresh values each round. The paper's version: 2 bidders,
values uniform in {2, 4}, bids LOW/MEDIUM/HIGH = 1/2/3, 6 rounds, first price, clipped.

Information states. A decision's key holds the round, the current value and the last `memory`
rounds as seen by the bidder (its value, its bid, the others' bids, won or lost). With memory
>= rounds - 1 the key is the whole history. Tabular policies and the exact solver are keyed by
it; prompts always show the whole history.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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

RULES = ("first", "second")
PAPER_BID_NAMES = ("LOW", "MEDIUM", "HIGH")


@dataclass(frozen=True)
class AuctionRules:
    """The parameters of the auction, validated on construction."""

    values: tuple[float, ...] = (2.0, 4.0)
    value_probs: tuple[float, ...] = (0.5, 0.5)
    bids: tuple[float, ...] = (1.0, 2.0, 3.0)
    rounds: int = 6
    bidders: int = 2
    rule: str = "first"
    clip: bool = False
    memory: int = 2

    def __post_init__(self):
        if not isinstance(self.rounds, (int, np.integer)) or isinstance(self.rounds, bool) or self.rounds < 1:
            raise SepoError(f"--rounds must be a positive integer, got {self.rounds!r}")
        if (
            not isinstance(self.bidders, (int, np.integer))
            or isinstance(self.bidders, bool)
            or self.bidders < 2
        ):
            raise SepoError(f"--bidders must be an integer >= 2, got {self.bidders!r}")
        if self.rule not in RULES:
            raise SepoError(f"--rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if not isinstance(self.memory, (int, np.integer)) or self.memory < 0:
            raise SepoError(f"--memory must be an integer >= 0, got {self.memory!r}")
        if len(self.bids) < 2:
            raise SepoError(f"--bids needs at least two bids, got {list(self.bids)}")
        if not all(np.isfinite(self.bids)) or any(b < 0 for b in self.bids):
            raise SepoError(f"--bids must be finite and non-negative, got {list(self.bids)}")
        if any(later <= earlier for earlier, later in zip(self.bids, self.bids[1:])):
            raise SepoError(f"--bids must be strictly increasing, got {list(self.bids)}")
        if not self.values or not all(np.isfinite(self.values)):
            raise SepoError(f"--values must be a non-empty list of finite numbers, got {list(self.values)}")
        if len(set(self.values)) != len(self.values):
            raise SepoError(f"--values must be distinct, got {list(self.values)}")
        if len(self.value_probs) != len(self.values):
            raise SepoError(
                f"--value-probs has {len(self.value_probs)} entries for {len(self.values)} values"
            )
        if (
            any(not np.isfinite(p) or p <= 0 for p in self.value_probs)
            or abs(sum(self.value_probs) - 1) > 1e-9
        ):
            raise SepoError(f"--value-probs must be positive and sum to 1, got {list(self.value_probs)}")

    @property
    def effective_memory(self) -> int:
        return min(self.memory, self.rounds - 1)

    def price(self, bids, winner: int) -> float:
        """What the winner pays: its bid (first price) or the highest other bid (second price)."""
        if self.rule == "first":
            return float(self.bids[bids[winner]])
        return float(max(self.bids[b] for i, b in enumerate(bids) if i != winner))

    def winner_payoff(self, value: float, price: float) -> float:
        surplus = value - price
        return max(0.0, surplus) if self.clip else surplus

    def highest(self, bids) -> list[int]:
        """The bidders tied at the highest bid."""
        top = max(bids)
        return [i for i, b in enumerate(bids) if b == top]


def parse_numbers(text, what: str) -> tuple[float, ...]:
    """'2,4' or a sequence of numbers as a tuple of floats (one-line error otherwise)."""
    if isinstance(text, str):
        parts = [p for p in text.replace(" ", "").split(",") if p]
    else:
        parts = list(text)
    try:
        return tuple(float(p) for p in parts)
    except (TypeError, ValueError):
        raise SepoError(f"--{what} must be comma-separated numbers, got {text!r}") from None


def window_key(round_index: int, value: float, history, memory: int) -> str:
    """The information-state key: round, value, and the last `memory` rounds of `history`
    (tuples (my value, my bid amount, other bid amounts, won))."""
    shown = history[len(history) - min(memory, len(history)):] if memory else ()
    parts = [f"r{round_index + 1}v{value:g}"]
    for my_value, my_bid, others, won in shown:
        parts.append(f"{my_value:g}:{my_bid:g}-{'.'.join(f'{o:g}' for o in others)}{'W' if won else 'L'}")
    return "|".join(parts)


class AuctionState(State):
    """An episode: per round, chance values (one node per bidder), sealed bids, a tie draw."""

    def __init__(self, game: "AuctionGame"):
        self._game = game
        self._values_now: list[int] = []
        self._bids_now: tuple[int, ...] | None = None
        self._rounds: list[RoundResult] = []

    @property
    def rules(self) -> AuctionRules:
        return self._game.rules

    def num_players(self) -> int:
        return self.rules.bidders

    def current_player(self) -> int:
        if len(self._rounds) >= self.rules.rounds:
            return TERMINAL
        if len(self._values_now) < self.rules.bidders or self._bids_now is not None:
            return CHANCE
        return SIMULTANEOUS

    def tie_pending(self) -> bool:
        """Whether the bids are in and a tie among the highest awaits the chance draw."""
        return self._bids_now is not None

    def chance_outcomes(self) -> list[tuple[int, float]]:
        if self._bids_now is not None:
            tied = self.rules.highest(self._bids_now)
            return [(player, 1.0 / len(tied)) for player in tied]
        return list(enumerate(self.rules.value_probs))

    def decision(self, player: int) -> Decision:
        rules = self.rules
        history = tuple(self._seen_by(player, result) for result in self._rounds)
        value = rules.values[self._values_now[player]]
        others = [p for p in range(rules.bidders) if p != player]
        return Decision(
            game=self._game.name,
            player=player,
            info_key=window_key(len(self._rounds), value, history, rules.effective_memory),
            legal_actions=tuple(range(len(rules.bids))),
            action_names=self._game.bid_names,
            observation={
                "round": len(self._rounds) + 1,
                "rounds": rules.rounds,
                "value": value,
                "bidders": rules.bidders,
                "bid_grid": rules.bids,
                "history": history,
                "first_round_shown": 1,
                "complete": True,
                "my_payoffs": tuple(r.payoffs[player] for r in self._rounds),
                "opponent_payoffs": tuple(sum(r.payoffs[o] for o in others) for r in self._rounds),
            },
        )

    def _seen_by(self, player: int, result: RoundResult):
        info = result.info
        bids = [self.rules.bids[b] for b in info["bids"]]
        others = tuple(b for i, b in enumerate(bids) if i != player)
        return (info["values"][player], bids[player], others, info["winner"] == player)

    def apply_action(self, action: int) -> None:
        if self.current_player() != CHANCE:
            raise ValueError(
                "auction: only chance outcomes go through apply_action; bids go through apply_actions"
            )
        if self._bids_now is not None:
            tied = self.rules.highest(self._bids_now)
            if action not in tied:
                raise ValueError(f"auction: tie winner {action!r} is not one of the tied bidders {tied}")
            self._finish_round(action)
            return
        if not 0 <= action < len(self.rules.values):
            raise ValueError(f"auction: value index {action!r} out of range 0..{len(self.rules.values) - 1}")
        self._values_now.append(int(action))

    def apply_actions(self, actions) -> None:
        if self.current_player() != SIMULTANEOUS:
            raise ValueError("auction: bids are applied only when every bidder must bid")
        actions = tuple(int(a) for a in actions)
        if len(actions) != self.rules.bidders or not all(0 <= a < len(self.rules.bids) for a in actions):
            raise ValueError(
                f"auction: need {self.rules.bidders} bid indices in 0..{len(self.rules.bids) - 1}, got "
                f"{actions}"
            )
        self._bids_now = actions
        tied = self.rules.highest(actions)
        if len(tied) == 1:
            self._finish_round(tied[0])

    def _finish_round(self, winner: int) -> None:
        rules = self.rules
        values = tuple(rules.values[i] for i in self._values_now)
        price = rules.price(self._bids_now, winner)
        payoffs = tuple(
            rules.winner_payoff(values[p], price) if p == winner else 0.0 for p in range(rules.bidders)
        )
        benchmark = self._game.benchmark_round(values)
        self._rounds.append(
            RoundResult(
                payoffs=payoffs,
                third_party={"seller": price},
                info={
                    "values": values,
                    "bids": self._bids_now,
                    "bid_amounts": tuple(rules.bids[b] for b in self._bids_now),
                    "winner": winner,
                    "price": price,
                    "tie": len(rules.highest(self._bids_now)) > 1,
                    **benchmark,
                },
            )
        )
        self._values_now = []
        self._bids_now = None

    def rounds(self) -> list[RoundResult]:
        return list(self._rounds)

    def clone(self) -> "AuctionState":
        copy = AuctionState(self._game)
        copy._values_now = list(self._values_now)
        copy._bids_now = self._bids_now
        copy._rounds = list(self._rounds)
        return copy


class AuctionGame(Game):
    """The repeated sealed-bid auction with a seller as third party."""

    name = "auction"
    third_parties = ("seller",)

    def __init__(self, rules: AuctionRules, protocol: str = "rigorous", pool_version: str = "writeup"):
        self.rules = rules
        self.protocol = protocol
        self.pool_version = pool_version
        self.num_players = rules.bidders
        self.max_payoff = max(rules.values) - min(rules.bids)
        if protocol == "paper" and len(rules.bids) != 3:
            raise SepoError(
                "--protocol paper names bids LOW/MEDIUM/HIGH and needs exactly 3 bids, got "
                f"{list(rules.bids)}"
            )
        from sepo.games.auction.text import AuctionText

        self._text = AuctionText(self, style=protocol)

    def episode_bytes(self) -> int:
        """Each decision's observation holds every bidder's bids so far: quadratic in the rounds
        (measured)."""
        return episode_record_bytes(self.rules.rounds, 6000, 130 * self.rules.bidders)

    def episode_size_hint(self, per_episode: int) -> str | None:
        longest = longest_within(per_episode, 6000, 130 * self.rules.bidders)
        return f"--rounds {longest} or fewer" if longest >= 1 else None

    @property
    def bid_names(self) -> tuple[str, ...]:
        if self.protocol == "paper":
            return PAPER_BID_NAMES
        return tuple(f"{b:g}" for b in self.rules.bids)

    def new_initial_state(self) -> AuctionState:
        return AuctionState(self)

    @property
    def text(self) -> TextView:
        return self._text

    @cached_property
    def benchmark(self):
        """The competitive benchmark (sepo.games.auction.equilibria.Benchmark), or None when the
        stage game's equilibria cannot be enumerated for these parameters."""
        from sepo.games.auction.equilibria import competitive_benchmark

        try:
            return competitive_benchmark(self.rules)
        except SepoError:
            return None

    def benchmark_round(self, values) -> dict:
        """Per-round benchmark fields for the round record: the benchmark's expected revenue given
        these values, and per bidder the lowest bid the benchmark uses at its value."""
        if self.protocol == "paper" or self.benchmark is None:
            return {}
        return {"benchmark_revenue": self.benchmark.revenue_given(values),
                "benchmark_floor": tuple(self.benchmark.floor_bid(v) for v in values)}


def make_game(protocol: str = "rigorous", rounds: int = 6, bidders: int = 2, rule: str = "first",
              values="2,4", value_probs=None, bids="1,2,3", memory: int = 2,
              pool_version: str = "writeup") -> AuctionGame:
    """The domain's game factory. The paper protocol clips the winner's payoff at 0."""
    from sepo.games.auction.pools import POOL_VERSIONS, version_name

    values = parse_numbers(values, "values")
    probs = (
        parse_numbers(value_probs, "value-probs")
        if value_probs not in (None, "")
        else tuple([1.0 / len(values)] * len(values))
    )
    pool_version = version_name(pool_version)
    if pool_version not in POOL_VERSIONS:
        raise SepoError(f"--pool-version must be one of {', '.join(POOL_VERSIONS)}, got {pool_version!r}")
    rules = AuctionRules(values=values, value_probs=probs, bids=parse_numbers(bids, "bids"), rounds=rounds,
                         bidders=bidders, rule=rule, clip=protocol == "paper", memory=memory)
    return AuctionGame(rules, protocol=protocol, pool_version=pool_version)
