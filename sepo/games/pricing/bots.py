"""Scripted pricing firms: competitive, monopoly, grim-trigger collusion, tit-for-tat, undercutting
and uniform random.

Every bot is a small finite-state machine over price actions (grid indices, prices increasing):
`machine(spec)` gives its price probabilities in each state `[S, K]` and the state after each
(own action, rival action) `[S, K, K]`, starting in state 0. The same machine serves play
(`action_probabilities` runs it along the decision's history), the vectorised training
environment (forward passes over (period, agent state, bot state)) and the exact solver (each
bot declares the small state its play depends on: `play_state` or a finite `memory_depth`).
With more than two firms a bot reacts to the lowest rival price.

Reference prices come from the firm's own benchmarks (`PriceSpec`): the competitive price is the
grid price nearest the one-shot Bertrand-Nash price, the collusive one the grid price nearest the
joint-monopoly price (under a cap, the highest price left if the cap is below it).
"""
from __future__ import annotations

import abc
import functools
from dataclasses import dataclass

import numpy as np

from sepo.games.base import Decision
from sepo.policies.base import Policy


@dataclass(frozen=True)
class PriceSpec:
    """What a bot needs to know of the market: the number of grid prices and the indices of the
    competitive and collusive prices."""

    k: int
    nash: int
    monopoly: int

    @classmethod
    def of(cls, grid, nash_price: float, monopoly_price: float) -> "PriceSpec":
        grid = np.asarray([float(p) for p in grid])
        return cls(
            len(grid), int(np.abs(grid - nash_price).argmin()), int(np.abs(grid - monopoly_price).argmin())
        )

    @classmethod
    def of_game(cls, game, seat: int) -> "PriceSpec":
        b = game.benchmarks
        return cls.of(game.grid, b["nash_prices"][seat], b["monopoly_prices"][seat])

    @classmethod
    def of_decision(cls, decision: Decision) -> "PriceSpec":
        obs = decision.observation
        b = obs["benchmarks"]
        return _spec(
            tuple(obs["grid"]), b["nash_prices"][decision.player], b["monopoly_prices"][decision.player]
        )


@functools.lru_cache(maxsize=256)
def _spec(grid: tuple, nash_price: float, monopoly_price: float) -> PriceSpec:
    return PriceSpec.of(grid, nash_price, monopoly_price)


@dataclass(frozen=True)
class Machine:
    """`probs[s]`: the price distribution in state s; `next[s, own, rival]`: the following state."""

    probs: np.ndarray
    next: np.ndarray

    @property
    def states(self) -> int:
        return len(self.probs)

    def state_after(self, history) -> int:
        """The state after an own-side history of (own action, rival action) pairs."""
        state = 0
        for own, rival in history:
            state = int(self.next[state, own, rival])
        return state


def _constant(k: int, probs: np.ndarray) -> Machine:
    return Machine(probs[None, :], np.zeros((1, k, k), dtype=np.int64))


def _one_hot(k: int, index) -> np.ndarray:
    return np.eye(k)[index]


class PricingBot(Policy):
    """A pricing strategy given as a finite-state machine (module doc)."""

    name = "PricingBot"
    classifier: dict = {}

    @abc.abstractmethod
    def machine(self, spec: PriceSpec) -> Machine:
        """The bot's state machine on a grid described by `spec`."""

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        spec = PriceSpec.of_decision(decision)
        machines = self.__dict__.setdefault("_machines", {})
        machine = machines.get(spec) or machines.setdefault(spec, self.machine(spec))
        history = [(own, rivals if isinstance(rivals, (int, np.integer)) else min(rivals))
                   for own, rivals in decision.observation["history"]]
        return dict(enumerate(machine.probs[machine.state_after(history)].tolist()))

    def __repr__(self) -> str:
        return self.name


class Competitive(PricingBot):
    """Always the competitive price (the grid price nearest the one-shot Bertrand-Nash price)."""

    name = "Competitive"
    classifier = {"memory_depth": 0, "stochastic": False}

    def machine(self, spec):
        return _constant(spec.k, _one_hot(spec.k, spec.nash))


class Monopoly(PricingBot):
    """Always the collusive price (the grid price nearest the joint-monopoly price), whatever the rival
    does."""

    name = "Monopoly"
    classifier = {"memory_depth": 0, "stochastic": False}

    def machine(self, spec):
        return _constant(spec.k, _one_hot(spec.k, spec.monopoly))


class GrimTrigger(PricingBot):
    """Grim-trigger collusion: the collusive price until a rival ever prices below it, then the
    competitive price for ever."""

    name = "GrimTrigger"
    classifier = {"memory_depth": float("inf"), "stochastic": False}

    @staticmethod
    def play_state(history) -> int | None:
        """The lowest rival price action so far: all its play depends on besides the period."""
        return min((rival for _, rival in history), default=None)

    @staticmethod
    def play_state_after(state: int | None, own: int, rival: int) -> int:
        """`play_state` one period on, from the state alone (the audit's DP then does not rescan
        the history, which made a 10,000-period audit quadratic in the periods)."""
        return rival if state is None else min(state, rival)

    def machine(self, spec):
        k = spec.k
        following = np.zeros((2, k, k), dtype=np.int64)
        following[0, :, : spec.monopoly] = 1  # a rival price below the collusive one triggers the punishment
        following[1] = 1
        return Machine(np.stack([_one_hot(k, spec.monopoly), _one_hot(k, spec.nash)]), following)


class TitForTat(PricingBot):
    """The collusive price first, then the rival's last price."""

    name = "TitForTat"
    classifier = {"memory_depth": 1, "stochastic": False}

    def machine(self, spec):
        k = spec.k
        # state 1 + j: the rival last charged j
        probs = np.concatenate([_one_hot(k, spec.monopoly)[None], np.eye(k)])
        following = np.broadcast_to(1 + np.arange(k)[None, None, :], (k + 1, k, k)).copy()
        return Machine(probs, following)


class Undercut(PricingBot):
    """The collusive price first, then one grid step below the rival's last price, never below the
    competitive price."""

    name = "Undercut"
    classifier = {"memory_depth": 1, "stochastic": False}

    def machine(self, spec):
        k = spec.k
        targets = np.maximum(np.arange(k) - 1, min(spec.nash, k - 1))
        probs = np.concatenate([_one_hot(k, spec.monopoly)[None], _one_hot(k, targets)])
        following = np.broadcast_to(1 + np.arange(k)[None, None, :], (k + 1, k, k)).copy()
        return Machine(probs, following)


class Uniform(PricingBot):
    """Every grid price with equal probability, each period."""

    name = "Uniform"
    classifier = {"memory_depth": 0, "stochastic": True}

    def machine(self, spec):
        return _constant(spec.k, np.full(spec.k, 1.0 / spec.k))


BOTS = {cls.name: cls for cls in (Competitive, Monopoly, GrimTrigger, TitForTat, Undercut, Uniform)}


def bot_table() -> dict:
    return dict(BOTS)
