"""A repeated pricing market (Calvano et al. 2020; Fish et al. 2024 for LLM agents), with
institutions against collusion.

Rules. `firms` firms (2 by default) sell differentiated products for `rounds` periods. Each
period every firm sets a price from the same grid at the same time (`prices` points, Calvano et
al.'s: from a bit below the one-shot Nash price to a bit above the joint-monopoly price, rounded to
cents; or an explicit `grid`), then all prices are public. Demand is logit (`market.py`; Calvano
et al.'s baseline by default: qualities 2, outside good 0, μ = 0.25, costs 1), and a firm's
payoff in a period is its profit minus any expected sanction.

Institutions (game parameters, all off by default):
- `cap`: a price cap; grid prices above it are not offered.
- `sanction_threshold`, `fine`, `detection`: a firm pricing above the threshold is detected with
  probability `detection` and pays `fine`; firms are risk neutral and never observe detection, so
  the period's payoff carries the expected fine, detection·fine (the exact DP and play agree).
- `leniency` ℓ in [0, 1]: a stylised leniency programme. In a period where two or more firms price
  above the threshold (a cartel period), the one with the strictly lowest price among them is
  deemed the leniency applicant: it reports, paying (1 − ℓ)·detection·fine, and its report convicts
  the others with certainty (each pays the whole fine). Without a unique lowest price nobody
  reports. ℓ = 0 turns the programme off.
A setting that would act on no price is refused, not ignored: a cap at or above every grid price, a
threshold no offered price exceeds, a threshold without a fine, a fine without a threshold, ... (an
institution search's "off" point is the market without it: `effective_params`).
The benchmarks (Nash and monopoly profits and consumer surplus) are those of the market without
institutions, so the collusion index reads every institution against the same yardstick.

Actions are indices 0..K−1 into the grid, prices increasing. A firm's decision shows the history
from its own side: with two firms `observation["history"]` is a tuple of (own action, rival
action) per past period (the shape sepo's repeated-game solver reads), with more firms (own action,
tuple of the rivals' actions); `observation["prices"]` is the same in prices. The information-state
key spells the prices own first, "1.70-1.66" per period ("1.70-1.66/1.62" with three firms), "start"
before the first period; it keeps the last `memory` periods (1 by default, "full" for the whole
history): the states of tabular memory-m strategies and of the exact solver. Prompts always show
the whole history.

`--protocol paper`: the paper has no pricing game; both protocols play these rules.
"""
from __future__ import annotations

import copy
import itertools
import json
import math

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import (
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
from sepo.games.pricing.market import CALVANO, Market

DEFAULT_ROUNDS = 10
DEFAULT_MEMORY = 1
DEFAULT_POINTS = 15
START = "start"
CONSUMERS = "consumers"
MAX_JOINT_CELLS = 50_000_000
"""The most (period, joint price) pairs an exact solve may visit (as in split bargaining)."""
MAX_FIRMS = 50
"""The most firms a market may have: the benchmarks' Nash solve (scipy's root finder, an n x n
Jacobian) stopped converging at 80 firms (it did at 70), and play grows as firms² x periods² (a
decision shows every rival's price of every period: 50 firms, 2 episodes of 10 periods took 6 s
on a loaded machine, 300 firms one episode 28 s). Exact values and training take 2."""


def _number(value, what: str, low: float | None = None, high: float | None = None) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SepoError(f"pricing: {what} must be a number, got {value!r}") from None
    if (
        not math.isfinite(number)
        or (low is not None and number < low)
        or (high is not None and number > high)
    ):
        span = (
            f" in [{low:g}, {high:g}]"
            if low is not None and high is not None
            else (f" >= {low:g}" if low is not None else "")
        )
        raise SepoError(f"pricing: {what} must be a finite number{span}, got {value!r}")
    return number


def _whole(value, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SepoError(f"pricing: {what} must be a whole number >= {low}, got {value!r}")
    return int(value)


def _per_firm(value, firms: int, what: str) -> tuple[float, ...]:
    """One number for every firm, or a comma-separated list of `firms` numbers."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [part for part in str(value).replace(" ", "").split(",") if part]
    numbers = [_number(item, what) for item in items]
    if len(numbers) == 1:
        numbers *= firms
    if len(numbers) != firms:
        raise SepoError(f"pricing: {what} needs one number or {firms} (one per firm), got {len(numbers)}")
    return tuple(numbers)


def _grid(text) -> np.ndarray:
    items = (
        text if isinstance(text, (list, tuple)) else [p for p in str(text).replace(" ", "").split(",") if p]
    )
    prices = np.array([_number(p, "every grid price", 0.0) for p in items])
    if len(prices) < 2 or np.any(np.diff(prices) <= 0):
        raise SepoError(f"pricing: --grid needs at least two increasing prices, got {text!r}")
    return prices


INSTITUTIONS = ("cap", "sanction_threshold", "fine", "detection", "leniency")
MAX_KEY_JOINT_PRICES = 1_000_000
"""The most joint prices whose fines `game_key` tabulates (beyond, it keys on the settings)."""


def inert_institutions(sanction_threshold=None, fine: float = 0.0, detection: float = 1.0,
                       leniency: float = 0.0) -> list[str]:
    """The institution settings that would change nothing, each with why: a fine, a detection
    probability or leniency without a threshold to sanction above, and a threshold, detection or
    leniency without a fine to pay, detect or cut. A setting is a promise: these are refused, not
    ignored (a search's no-fine point is the market without them: `effective_params`)."""
    settings = (("fine", fine, 0.0), ("detection", detection, 1.0), ("leniency", leniency, 0.0))
    if sanction_threshold is None:
        given, why = settings, "without --sanction-threshold (only a price above it is sanctioned)"
        fix = "give --sanction-threshold P"
    elif fine == 0.0:
        given, why = settings[1:], "at --fine 0 (no fine to detect or to cut)"
        fix = "give --fine F above 0"
        if all(value == off for _, value, off in given):
            return [f"--sanction-threshold {sanction_threshold:g} does nothing at --fine 0 (no fine to pay); "
                    "give --fine F above 0 too, or leave it out"]
    else:
        return []
    named = [f"--{name} {value:g}" for name, value, off in given if value != off]
    if not named:
        return []
    one = len(named) == 1
    return [
        f"{' and '.join(named)} {'does' if one else 'do'} nothing {why}; {fix}, or leave "
        f"{'it' if one else 'them'} out"
    ]


def unreached_institutions(full: np.ndarray, cap: float | None, threshold: float | None) -> list[str]:
    """A cap or a threshold that no price of the grid `full` reaches, each with why: a cap at or above
    the highest price caps nothing, a threshold at or above the highest price offered sanctions
    nothing (only a price above it is)."""
    problems = []
    if cap is not None and cap >= full[-1] - 1e-9:
        problems.append(f"--cap {cap:g} caps nothing: the grid's highest price is {full[-1]:.2f}; give a "
                        "lower cap, or leave it out")
    offered = full if cap is None else full[full <= cap + 1e-9]
    if threshold is not None and len(offered) and threshold >= offered[-1] - 1e-12:
        problems.append(
            f"--sanction-threshold {threshold:g} sanctions nothing: no price is above it (the grid's highest "
            f"price is {offered[-1]:.2f}{' under the cap' if len(offered) < len(full) else ''}); give a "
            "lower threshold, or leave it out"
        )
    return problems


def _unreached(params: dict) -> tuple[bool, bool]:
    """Whether the cap and the threshold of `params` act on no price of its grid (False where the
    market's own parameters are refused: building the game says why)."""
    try:
        base = PricingMarket(**{k: v for k, v in params.items() if k not in INSTITUTIONS})
        cap = None if params.get("cap") is None else _number(params["cap"], "cap", 0.0)
        threshold = params.get("sanction_threshold")
        threshold = None if threshold is None else _number(threshold, "sanction_threshold", 0.0)
    except (SepoError, TypeError):
        return False, False
    problems = unreached_institutions(base.grid, cap, threshold)
    return (any(p.startswith("--cap") for p in problems),
            any(p.startswith("--sanction-threshold") for p in problems))


def effective_params(params: dict) -> dict:
    """`params` without the institution settings that change nothing (`inert_institutions`,
    `unreached_institutions`): the parameters of the market they make (a search over settings
    trains each market once; its no-fine point is the market without a sanction)."""
    out = dict(params)
    no_cap, no_threshold = _unreached(out)
    if no_cap:
        out.pop("cap", None)
    if no_threshold:
        out.pop("sanction_threshold", None)
    if out.get("sanction_threshold") is None or not out.get("fine", 0.0):
        for name in ("sanction_threshold", "fine", "detection", "leniency"):
            out.pop(name, None)
    for name, off in (("detection", 1.0), ("leniency", 0.0)):
        if out.get(name, off) == off:
            out.pop(name, None)
    return out


def game_key(params: dict) -> str:
    """The game that `params` make, as its agents play it: the market's parameters without the
    institutions, the prices offered and every firm's expected sanction at every joint price. Settings
    with one key make one game (e.g. two thresholds between the same grid prices)."""
    out = effective_params(params)
    rest = {k: v for k, v in out.items() if k not in INSTITUTIONS}
    try:
        game = PricingMarket(**out)
    except (SepoError, TypeError):
        game = None
    if game is None or game.k ** game.num_players > MAX_KEY_JOINT_PRICES:
        return json.dumps(out, sort_keys=True, default=str)
    joint = np.array(list(itertools.product(game.grid, repeat=game.num_players)))
    fines = np.round(game.fines(joint), 12) + 0.0
    return json.dumps({**rest, "offered": list(game.action_names), "fines": fines.tolist()},
                      sort_keys=True, default=str)


class PricingState(State):
    """One market: the joint price actions (one index per firm) so far."""

    def __init__(self, game: "PricingMarket"):
        self._game = game
        self._history: list[tuple[int, ...]] = []
        self._rounds: list[RoundResult] = []

    def num_players(self) -> int:
        return self._game.num_players

    def current_player(self) -> int:
        return TERMINAL if len(self._history) >= self._game.rounds else SIMULTANEOUS

    def decision(self, player: int) -> Decision:
        return self._game.decision_after(self._game.own_view(self._history, player), player)

    def apply_action(self, action: int) -> None:
        raise ValueError(
            "pricing: all firms set their prices at once; use apply_actions([price of firm 0, ...])"
        )

    def apply_actions(self, actions) -> None:
        if self.is_terminal():
            raise ValueError("pricing: the market is over; no price can be applied")
        joint = tuple(int(a) for a in actions)
        if len(joint) != self._game.num_players or not all(0 <= a < self._game.k for a in joint):
            raise ValueError(
                f"pricing: illegal prices {actions!r}; give one action 0..{self._game.k - 1} per firm "
                f"({self._game.num_players} firms)"
            )
        self._rounds.append(self._game.round_result(joint))
        self._history.append(joint)

    def rounds(self) -> list[RoundResult]:
        return list(self._rounds)

    def history(self) -> list[tuple[int, ...]]:
        return list(self._history)

    def clone(self) -> "PricingState":
        other = PricingState(self._game)
        other._history, other._rounds = list(self._history), list(self._rounds)
        return other


class PricingMarket(Game):
    """`rounds` periods of simultaneous pricing on a grid, logit demand, optional institutions."""

    name = "pricing"
    zero_sum = False
    third_parties = (CONSUMERS,)

    def __init__(self, firms: int = 2, prices: int | None = None, grid=None, rounds: int = DEFAULT_ROUNDS,
                 memory=DEFAULT_MEMORY, quality=CALVANO["quality"], outside: float = CALVANO["outside"],
                 mu: float = CALVANO["mu"], cost=CALVANO["cost"], cap: float | None = None,
                 sanction_threshold: float | None = None, fine: float = 0.0, detection: float = 1.0,
                 leniency: float = 0.0, protocol: str = "rigorous"):
        if protocol not in ("rigorous", "paper"):
            raise SepoError(f"unknown protocol {protocol!r}; use one of: rigorous, paper")
        self.protocol = protocol
        self.num_players = _whole(firms, "firms", 2)
        if self.num_players > MAX_FIRMS:
            raise SepoError(
                f"pricing: --firms must be at most {MAX_FIRMS}, got {self.num_players:,} (the Nash benchmark "
                f"stops converging near 80 firms and play grows as firms squared; exact values and training "
                f"take 2)"
            )
        self.rounds = _whole(rounds, "rounds", 1)
        self.market = Market(
            _per_firm(quality, self.num_players, "quality"),
            _per_firm(cost, self.num_players, "cost"),
            _number(outside, "outside"),
            _number(mu, "mu"),
        )
        if grid is not None and prices is not None:
            raise SepoError(
                f"pricing: --grid gives the prices itself; --prices {prices} does not apply with it "
                "(leave one out)"
            )
        full = _grid(grid) if grid is not None else self.market.grid(
            _whole(DEFAULT_POINTS if prices is None else prices, "prices (grid points)", 2))
        self.cap = None if cap is None else _number(cap, "cap", 0.0)
        self.grid = full if self.cap is None else full[full <= self.cap + 1e-9]
        if len(self.grid) == 0:
            raise SepoError(f"pricing: the cap {self.cap:g} is below every grid price (lowest {full[0]:g})")
        self.k = len(self.grid)
        self.action_names = tuple(f"{p:.2f}" for p in self.grid)
        if len(set(self.action_names)) != self.k:
            raise SepoError(
                "pricing: grid prices must differ at two decimals (what a firm reads is what it charges)"
            )
        self.threshold = (
            None if sanction_threshold is None else _number(sanction_threshold, "sanction_threshold", 0.0)
        )
        self.fine = _number(fine, "fine", 0.0)
        self.detection = _number(detection, "detection", 0.0, 1.0)
        self.leniency = _number(leniency, "leniency", 0.0, 1.0)
        inert = inert_institutions(self.threshold, self.fine, self.detection, self.leniency) or (
            unreached_institutions(full, self.cap, self.threshold)
        )
        if inert:
            raise SepoError(f"pricing: {inert[0]}")
        if memory == "full":
            memory = None
        if memory is not None:
            memory = _whole(memory, "memory (periods an information state remembers, or 'full')", 0)
        self.memory = None if memory is None or memory >= self.rounds else memory
        self.benchmarks = self.market.benchmarks
        from sepo.games.pricing.text import PricingText

        self._text = PricingText(self)

    # -- the rules ---------------------------------------------------------------------------------
    def fines(self, prices) -> np.ndarray:
        """The expected sanction of every firm at prices `[..., n]` (module doc)."""
        prices = np.asarray(prices, dtype=float)
        if self.threshold is None or self.fine == 0.0:
            return np.zeros_like(prices)
        above = prices > self.threshold + 1e-12
        expected = self.detection * self.fine * above
        if self.leniency == 0.0:
            return expected
        cartel = above.sum(-1, keepdims=True) >= 2
        lowest = np.where(above, prices, np.inf).min(-1, keepdims=True)
        is_lowest = above & (prices == lowest)
        reported = cartel & (is_lowest.sum(-1, keepdims=True) == 1)
        applicant = is_lowest & reported
        return np.where(
            applicant, (1.0 - self.leniency) * expected, np.where(above & reported, self.fine, expected)
        )

    def payoffs(self, prices) -> np.ndarray:
        """Every firm's profit minus its expected sanction at prices `[..., n]`."""
        return self.market.profits(prices) - self.fines(prices)

    def round_result(self, joint: tuple[int, ...]) -> RoundResult:
        """The period's result (memoised: a decision's observation recomputes its history's scores)."""
        joint = tuple(int(a) for a in joint)
        cache = self.__dict__.setdefault("_results", {})
        if joint not in cache:
            cache[joint] = self._round_result(joint)
        return cache[joint]

    def _round_result(self, joint: tuple[int, ...]) -> RoundResult:
        prices = self.grid[list(joint)]
        gross = self.market.profits(prices)
        fines = self.fines(prices)
        return RoundResult(
            payoffs=tuple(float(v) for v in gross - fines),
            third_party={CONSUMERS: float(self.market.consumer_surplus(prices))},
            info={
                "actions": joint,
                "prices": tuple(float(p) for p in prices),
                "profits": tuple(float(v) for v in gross),
                "fines": tuple(float(v) for v in fines),
                "delta": float(self.market.collusion_index(prices)),
                "surplus_loss": float(self.market.surplus_loss(prices)),
            },
        )

    def joint_prices(self) -> np.ndarray:
        """`[K, K, 2]`: the prices (agent's, rival's) of every joint action of two firms."""
        a, o = np.meshgrid(self.grid, self.grid, indexing="ij")
        return np.stack([a, o], axis=-1)

    def stage_matrices(self, agent_player: int = 0) -> dict[str, np.ndarray]:
        """Two firms, the agent in `agent_player`: `[agent action, rival action]` matrices of the
        agent's payoff, the rival's, the collusion index Δ and the consumers' surplus loss."""
        if self.num_players != 2:
            raise SepoError("pricing: stage matrices are for two firms")
        joint = self.joint_prices()
        seated = joint if agent_player == 0 else joint[..., ::-1]
        payoff = self.payoffs(seated)
        if agent_player == 1:
            payoff = payoff[..., ::-1]
        return {"agent": payoff[..., 0], "rival": payoff[..., 1], "delta": self.market.collusion_index(joint),
                "surplus_loss": self.market.surplus_loss(joint)}

    def stage_game(self, agent_player: int = 0):
        """The stage game from the agent's side, for the exact DP (two firms)."""
        from sepo.metrics.repeated import StageGame

        m = self.stage_matrices(agent_player)
        return StageGame(m["agent"], m["rival"])

    @property
    def max_payoff(self) -> float:
        """The payoff scale's reference: the mean profit per firm at the joint-monopoly prices."""
        return float(self.benchmarks["monopoly_profit"])

    # -- information states --------------------------------------------------------------------------
    def own_view(self, history, player: int) -> tuple:
        """A joint-action history from `player`'s side: (own, rival) pairs for two firms, (own,
        rivals) for more."""
        if self.num_players == 2:
            return tuple((joint[player], joint[1 - player]) for joint in history)
        return tuple(
            (joint[player], tuple(a for i, a in enumerate(joint) if i != player)) for joint in history
        )

    def _price_text(self, pair) -> str:
        own, rivals = pair
        rivals = (rivals,) if isinstance(rivals, (int, np.integer)) else rivals
        return f"{self.action_names[own]}-" + "/".join(self.action_names[r] for r in rivals)

    def remembered(self, history):
        return history if self.memory is None else history[len(history) - min(len(history), self.memory):]

    def history_key(self, history) -> str:
        """The key of an own-side history: "1.70-1.66,1.74-1.70" (own first), or "start"."""
        return ",".join(self._price_text(pair) for pair in history) or START

    def info_keys(self) -> list[str]:
        """Every information-state key of two firms: round order, then base-K² order of the joint actions."""
        depth = self.rounds - 1 if self.memory is None else min(self.memory, self.rounds - 1)
        joint = list(itertools.product(range(self.k), repeat=2))
        keys = [START]
        for length in range(1, depth + 1):
            keys += [self.history_key(h) for h in itertools.product(joint, repeat=length)]
        return keys

    def with_memory(self, memory: int | None) -> "PricingMarket":
        """The same game with information states that keep `memory` periods (None: the whole history)."""
        other = copy.copy(self)
        other.memory = None if memory is None or memory >= self.rounds else int(memory)
        return other

    def decision_after(self, history: tuple, player: int = 0) -> Decision:
        """The decision of `player` after an own-side `history`, without playing it out."""
        scores = [self.round_result(self._joint(pair, player)).payoffs for pair in history]
        prices = tuple(
            (self.grid[own], tuple(self.grid[r] for r in ((rivals,) if self.num_players == 2 else rivals)))
            for own, rivals in history
        )
        return Decision(
            game=self.name,
            player=player,
            info_key=self.history_key(self.remembered(history)),
            legal_actions=tuple(range(self.k)),
            action_names=self.action_names,
            observation={
                "round": len(history) + 1,
                "rounds": self.rounds,
                "history": tuple(history),
                "prices": tuple((float(own), tuple(float(r) for r in rivals)) for own, rivals in prices),
                "my_profits": tuple(s[player] for s in scores),
                "my_score": sum(s[player] for s in scores),
                "rival_score": sum(sum(s) - s[player] for s in scores),
                "player": player,
                "firms": self.num_players,
                "grid": self.action_names,
                "cost": self.market.cost[player],
                "benchmarks": self.benchmarks,
                "institutions": self.institutions(),
            },
        )

    def _joint(self, pair, player: int) -> tuple[int, ...]:
        """`player`'s own-side (own, rival(s)) pair as the joint action in seat order."""
        own, rivals = pair
        others = [rivals] if self.num_players == 2 else list(rivals)
        return tuple(others[:player] + [own] + others[player:])

    def institutions(self) -> dict:
        return {
            "cap": self.cap,
            "sanction_threshold": self.threshold,
            "fine": self.fine,
            "detection": self.detection,
            "leniency": self.leniency,
        }

    def new_initial_state(self) -> PricingState:
        return PricingState(self)

    @property
    def text(self) -> TextView:
        return self._text

    # -- sizes ---------------------------------------------------------------------------------------
    def episode_bytes(self) -> int:
        """Each decision's observation holds the history so far, twice (actions and prices): quadratic
        in the rounds. Measured (tracemalloc, one episode): two firms 0.42 MB at 50 periods and 4.9 MB at
        200, three firms 0.54 and 6.7 MB; about 2,900 B a period plus 110·n B per period squared / 2."""
        return episode_record_bytes(self.rounds, 4000, 110 * self.num_players)

    def episode_size_hint(self, per_episode: int) -> str | None:
        longest = longest_within(per_episode, 4000, 110 * self.num_players)
        return f"--rounds {longest} or fewer" if longest >= 1 else None

    def exact_size(self, budget: int) -> str | None:
        """Two firms: every exact path visits all K² joint prices of a period once per period; refused
        when that exceeds `budget` or `MAX_JOINT_CELLS`. More firms: no exact best response."""
        from sepo.limits import size_text

        if self.num_players != 2:
            return (
                f"the exact best response is for two firms (the rivals of {self.num_players} firms would "
                f"move {self.k}^{self.num_players - 1} joint prices a period as one adversary); play --firms "
                "2 for exact values"
            )
        joint = self.k ** 2
        cells = self.rounds * joint
        need = 16 * joint + 8 * cells
        if need <= budget and cells <= MAX_JOINT_CELLS:
            return None
        return (
            f"the exact pricing solve visits {joint:,} joint prices a period over {self.rounds} periods, "
            f"{size_text(need)} and {cells:,} steps at the least, more than this machine can do "
            f"({size_text(budget)} to spare, at most {MAX_JOINT_CELLS:,} steps); use fewer --prices or "
            "--rounds"
        )


def make_game(
    protocol: str = "rigorous",
    firms: int = 2,
    prices: int | None = None,
    grid=None,
    rounds: int = DEFAULT_ROUNDS,
    memory=DEFAULT_MEMORY,
    quality=CALVANO["quality"],
    outside: float = CALVANO["outside"],
    mu: float = CALVANO["mu"],
    cost=CALVANO["cost"],
    cap=None,
    sanction_threshold=None,
    fine: float = 0.0,
    detection: float = 1.0,
    leniency: float = 0.0,
) -> PricingMarket:
    """The domain's game factory (validates its parameters: SepoError on bad input)."""
    return PricingMarket(
        firms=firms,
        prices=prices,
        grid=grid,
        rounds=rounds,
        memory=memory,
        quality=quality,
        outside=outside,
        mu=mu,
        cost=cost,
        cap=cap,
        sanction_threshold=sanction_threshold,
        fine=fine,
        detection=detection,
        leniency=leniency,
        protocol=protocol,
    )
