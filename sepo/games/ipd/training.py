"""The IPD as a training environment for the exact tabular SEPO trainer.

The agent is a table over the game's information states (`--memory n`: the last n rounds, e.g.
21 keys for memory 2). The train pool holds the domain's bots and any Axelrod strategy whose
action distribution can be read exactly (`axelrod_bots.ExactAxelrodBot`; others are refused).
A group shares its opponent, drawn uniformly from the train pool; a
rollout is one whole match (return from the start, per round). Collusion is the DEFECT rate
against a train opponent that is also a collusive partner, externality the per-round welfare
shortfall (`events.py`). The training reach ρ(I) is the expected number of visits to key I per
training match, computed exactly over the joint-history tree against every train opponent, so
the per-rollout charge (g − Σπg)/ρ makes E[E_r ∇log P(r)] the exact gradient of the gap.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.ipd.axelrod_bots import AxelrodPlayer, ExactAxelrodBot
from sepo.games.ipd.bots import IPDBot
from sepo.games.ipd.events import reference_reward, round_externality
from sepo.games.ipd.exact import IPDSolver
from sepo.games.ipd.rollouts import key_rows, play_matches
from sepo.metrics.repeated import dense_histories
from sepo.training.environment import Rollouts


def vectorised(spec, game) -> IPDBot:
    """The train-pool entry `spec` as a vectorised bot (an Axelrod strategy read exactly by replay)."""
    bot = spec.build(game)
    if isinstance(bot, AxelrodPlayer):
        return ExactAxelrodBot(bot, game)
    if not isinstance(bot, IPDBot):
        raise SepoError(f"the IPD trainers play the domain's bots and Axelrod strategies only; {spec.label!r} is neither")
    return bot


class IPDTrainingEnvironment:
    def __init__(self, game, train_specs, collusive_specs):
        self.game = game
        self.solver = IPDSolver(game)
        self.keys = self.solver.keys
        self.legal = np.ones((len(self.keys), 2), dtype=bool)
        self.scale = game.payoff_scale
        self.opponents = [vectorised(spec, game) for spec in train_specs]
        collusive = {spec.label for spec in collusive_specs}
        self.is_collusive = np.array([spec.label in collusive for spec in train_specs])
        self.reward = reference_reward(game)
        self._levels = self._tree()

    def _tree(self):
        """Per round: the full histories (own, other), the agent's key rows, each opponent's P(C)."""
        levels = []
        for history in dense_histories(self.solver.stage, self.game.rounds, None):
            own, other = history // 2, history % 2
            rows = key_rows(own, other, self.game.memory)
            coop = np.stack([bot.cooperate_probability(other, own) for bot in self.opponents])  # [opponents, n]
            levels.append((rows, coop))
        return levels

    def _forward(self, table: np.ndarray):
        """Expected visits per key and expected payoff per round, averaged over the train pool."""
        visits = np.zeros(len(self.keys))
        payoff = np.zeros(len(self.opponents))
        reach = np.ones((len(self.opponents), 1))
        matrix = self.game.payoffs.matrix[:, :, 0]
        for rows, coop in self._levels:
            np.add.at(visits, rows, reach.mean(0))
            agent = table[rows]  # [n, 2]
            opponent = np.stack([coop, 1.0 - coop], axis=-1)  # [opponents, n, 2]
            joint = reach[:, :, None, None] * agent[None, :, :, None] * opponent[:, :, None, :]  # [o, n, a, b]
            payoff += (joint * matrix).sum((1, 2, 3))
            reach = joint.reshape(len(self.opponents), -1)
        return visits, payoff / self.game.rounds

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self._forward(np.asarray(table, dtype=float))[0]

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        group_opponent = rng.integers(len(self.opponents), size=groups)
        group_of = np.repeat(np.arange(groups), group_size)
        opponent_of = group_opponent[group_of]
        matches = play_matches(np.asarray(table, dtype=float), self.opponents, opponent_of, self.game.rounds,
                               self.game.payoffs.matrix, rng.random((len(group_of), self.game.rounds, 2)), self.game.memory)
        mine, theirs = matches.payoff[:, :, 0], matches.payoff[:, :, 1]
        externality = round_externality(mine, theirs, self.reward).mean(1)
        collusion = np.where(self.is_collusive[opponent_of], matches.own.mean(1), 0.0)
        return Rollouts(matches.rows, matches.own, np.ones_like(matches.own, dtype=bool), group_of, mine.mean(1),
                        collusion, externality)

    def exact_metrics(self, table: np.ndarray) -> dict:
        table = np.asarray(table, dtype=float)
        result = self.solver.evaluate(table)
        return {"utility": float(self._forward(table)[1].mean()), result.value_name: result.value,
                "br_payoff": result.br_payoff}
