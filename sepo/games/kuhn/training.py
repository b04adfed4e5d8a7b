"""Kuhn poker as a training environment for the exact tabular SEPO trainer.

A group shares its start state: the opponent (uniform over the train pool), the agent's seat
and the deal; its rollouts are single hands played by the vectorised rules of `rollouts.py`.
Collusion, under `paper` only, is 1 per FOLD against a collusive partner (as the language-model
trainer charges it; under `rigorous` Kuhn has no collusion) and externality a 2-chip loss
(`events.py`); the training reach is the agent's own reach times the pool's and chance's.
"""
from __future__ import annotations

import numpy as np

from sepo.games.kuhn import exact as kuhn_exact
from sepo.games.kuhn.events import is_big_loss
from sepo.games.kuhn.rollouts import play_hands
from sepo.games.kuhn.rules import DEALS, INFO_STATES
from sepo.games.records import Rollouts


class KuhnTrainingEnvironment:
    keys = INFO_STATES
    legal = np.ones((len(INFO_STATES), 2), dtype=bool)

    def __init__(self, game, train_specs, collusive_specs):
        self.solver = kuhn_exact.KuhnSolver(game)
        self.scale = game.payoff_scale
        self.opponents = np.stack([spec.build(game).table for spec in train_specs])
        collusive = {spec.label for spec in collusive_specs}
        self.is_collusive = np.array([spec.label in collusive for spec in train_specs])
        self.reach_external = kuhn_exact.external_reach(self.opponents)
        self.charge_collusion = game.protocol == "paper"

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return kuhn_exact.own_reach(table) * self.reach_external

    def events(self, folds, payoff):
        """Per hand (its FOLD count, its payoff): the counts `events` gives a one-hand episode under
        the game's protocol: (collusion events, its FOLDs under `paper` only; externality events, a
        2-chip loss)."""
        return (np.asarray(folds, dtype=float) if self.charge_collusion else np.zeros(np.shape(folds)),
                is_big_loss(np.asarray(payoff)).astype(float))

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        group_opponent = rng.integers(len(self.opponents), size=groups)
        group_seat = rng.integers(2, size=groups)
        group_deal = rng.integers(len(DEALS), size=groups)
        group_of = np.repeat(np.arange(groups), group_size)
        hands = play_hands(table, self.opponents, group_opponent[group_of], group_seat[group_of], group_deal[group_of],
                           rng.random((len(group_of), 3)))
        folds, externality = self.events(hands.folds, hands.payoff)
        collusion = np.where(self.is_collusive[group_opponent[group_of]], folds, 0.0)
        return Rollouts(hands.states, hands.actions, hands.mask, group_of, hands.payoff, collusion, externality)

    def exact_metrics(self, table: np.ndarray) -> dict:
        utility = float(kuhn_exact.head_to_head(table, self.opponents).mean())
        nash_conv = float(kuhn_exact.nash_conv(table))
        return {"utility": utility, "exploitability": nash_conv / 2, "nash_conv": nash_conv}
