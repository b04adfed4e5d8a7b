"""Scripted Kuhn poker bots: the paper's opponents and demonstration strategies.

Each bot is a small class: a rule from (card, betting so far) to the probability of betting
(or calling, when facing a bet), plus classifiers in the manner of the Axelrod library. A bot
plays either seat. Because Kuhn bots depend only on the information state, each is also a
tabular policy (`.table`), so exact values against them are available.
"""
from __future__ import annotations

import abc

import numpy as np

from sepo.games.base import Decision
from sepo.games.kuhn.rules import INFO_STATES, facing_bet
from sepo.policies.base import Policy

J, Q, K = 0, 1, 2


class KuhnBot(Policy):
    """A Kuhn strategy given by `bet_probability(card, history)`: P(BET) when not facing a bet,
    P(CALL) when facing one."""

    name = "KuhnBot"
    classifier: dict = {}

    @abc.abstractmethod
    def bet_probability(self, card: int, history: str) -> float:
        """P(BET), or P(CALL) when `history` ends in a bet, holding `card`."""

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        obs = decision.observation
        bet = self.bet_probability(obs["card"], obs["history"])
        return {0: 1.0 - bet, 1: bet}

    @property
    def table(self) -> np.ndarray:
        """`[12, 2]` action probabilities in INFO_STATES order (the exact solver's input)."""
        bets = np.array([self.bet_probability(int(key[0]), key[1:]) for key in INFO_STATES])
        return np.stack([1.0 - bets, bets], axis=1)

    keys = INFO_STATES

    def __repr__(self) -> str:
        return self.name


class NashApprox(KuhnBot):
    """Opening or after a check: K bets, Q passes, J bluffs with probability alpha. Facing a bet:
    K calls, J folds, Q calls with probability 1/3 (the paper's approximate equilibrium bot)."""

    name = "NashApprox"
    classifier = {"stochastic": True, "bluffs": True, "tight": False}

    def __init__(self, alpha: float = 1.0 / 3.0):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"NashApprox alpha must be in [0, 1], got {alpha}")
        self.alpha = alpha
        self.name = "NashApprox" if abs(alpha - 1 / 3) < 1e-12 else f"NashApprox(alpha={alpha:g})"

    def bet_probability(self, card: int, history: str) -> float:
        if facing_bet(history):
            return {J: 0.0, Q: 1.0 / 3.0, K: 1.0}[card]
        return {J: self.alpha, Q: 0.0, K: 1.0}[card]


class TightPassive(KuhnBot):
    """Bets and calls only with K; otherwise passes or folds."""

    name = "TightPassive"
    classifier = {"stochastic": False, "bluffs": False, "tight": True}

    def bet_probability(self, card: int, history: str) -> float:
        return 1.0 if card == K else 0.0


class LooseAggressive(KuhnBot):
    """Bets and calls with Q or K; with J passes, and folds to a bet."""

    name = "LooseAggressive"
    classifier = {"stochastic": False, "bluffs": False, "tight": False}

    def bet_probability(self, card: int, history: str) -> float:
        return 1.0 if card in (Q, K) else 0.0


class MaxExploiter(KuhnBot):
    """Facing a bet calls only with K; otherwise J passes, Q and K bet. Never bluffs."""

    name = "MaxExploiter"
    classifier = {"stochastic": False, "bluffs": False, "tight": False}

    def bet_probability(self, card: int, history: str) -> float:
        if facing_bet(history):
            return 1.0 if card == K else 0.0
        return 0.0 if card == J else 1.0


class AlwaysPass(KuhnBot):
    """Always passes; folds to any bet."""

    name = "AlwaysPass"
    classifier = {"stochastic": False, "bluffs": False, "tight": True}

    def bet_probability(self, card: int, history: str) -> float:
        return 0.0


class AlwaysBet(KuhnBot):
    """Always bets; calls any bet."""

    name = "AlwaysBet"
    classifier = {"stochastic": False, "bluffs": True, "tight": False}

    def bet_probability(self, card: int, history: str) -> float:
        return 1.0


class PotControl(KuhnBot):
    """K bets, Q passes, J bluffs with probability 0.2; calls only with K (a paper SFT strategy)."""

    name = "PotControl"
    classifier = {"stochastic": True, "bluffs": True, "tight": True}

    def bet_probability(self, card: int, history: str) -> float:
        if facing_bet(history):
            return 1.0 if card == K else 0.0
        return {J: 0.2, Q: 0.0, K: 1.0}[card]


class RandomLegal(KuhnBot):
    """Each legal action with probability 1/2."""

    name = "RandomLegal"
    classifier = {"stochastic": True, "bluffs": True, "tight": False}

    def bet_probability(self, card: int, history: str) -> float:
        return 0.5


BOTS = {
    cls.name: cls
    for cls in (
        NashApprox,
        TightPassive,
        LooseAggressive,
        MaxExploiter,
        AlwaysPass,
        AlwaysBet,
        PotControl,
        RandomLegal,
    )
}


def bot_table() -> dict:
    return dict(BOTS)
