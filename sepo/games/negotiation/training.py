"""Split bargaining as a training environment for the exact tabular SEPO trainer.

The agent is a table over the game's information states (the last `memory` rounds: 82 keys
with the default memory 1 and demands 1-9). A group shares its opponent, drawn uniformly from
the train pool plus one more entry, the exact gap maximiser of the current policy; a rollout is
one whole match (return from the start, per round). Why the maximiser: the attribution can only
train states that rollouts visit, and the paper's train bots only ever demand 5, 6 or 8, so the
states after any other opponent demand, where the maximiser takes its gains, would never be
trained. When λc or λx is charged, the collusive partners and exploiters that evaluation counts
them against join the draw (`sepo.games.credit`). As in the paper's per-pool credit, each
rollout's utility, collusion and externality are scaled by its opponent's credit for that term,
so the expected update is that of s·u − λe·s·e − λc·c − λx·x with u against the train pool, c (the
greedy-demand rate) against the collusive pool and x (the per-round externality) against the
train and exploiter pools, the maximiser among them under rigorous (`events.round_events` under
the game's protocol: the definitions evaluation uses). The training reach ρ(I) is the expected
number of visits to key I per rollout under that mixture, computed exactly by forward passes over (round, last
m rounds) states (m covers the agent's memory and every bot's), so the per-rollout charge (g − Σπg)/ρ
makes E[E_r ∇log P(r)] the exact gradient of the adversarial gap.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.credit import Charges, credited_rollouts, training_mixture
from sepo.games.negotiation.bots import DemandSpec, NegotiationBot
from sepo.games.negotiation.events import round_events
from sepo.games.negotiation.exact import NegotiationSolver, key_rows
from sepo.games.negotiation.rollouts import play_matches
from sepo.games.records import Rollouts, match_groups
from sepo.metrics.repeated import RepeatedResult, dense_histories


def forward_levels(game, stage, opponents: list[NegotiationBot]):
    """Per round of the (round, last m rounds) states, m the largest memory of the agent's keys and
    of the bots: the agent's key rows, each bot's demand probabilities [bots, n, K], and each state's
    child for every joint action [n, K²] (-1 after the last round)."""
    depths = [bot.classifier.get("memory_depth", np.inf) for bot in opponents]
    memory = (
        None
        if game.memory is None or max(depths, default=0) == np.inf
        else max(game.memory, *map(int, depths), 0)
    )
    if memory is not None and memory >= game.rounds:
        memory = None
    k, spec = game.num_demands, DemandSpec.of(game)
    histories = dense_histories(stage, game.rounds, memory)
    levels = []
    for t, h in enumerate(histories):
        own, other = h // k, h % k
        rows = key_rows(own, other, game.memory, k)
        bots = (
            np.stack([bot.probabilities(other + spec.low, own + spec.low, spec) for bot in opponents])
            if opponents
            else None
        )
        if t + 1 < game.rounds:
            children = (np.arange(len(h))[:, None] * k * k + np.arange(k * k)[None, :]) % len(
                histories[t + 1]
            )
        else:
            children = np.full((len(h), k * k), -1)
        levels.append((rows, bots, children))
    return levels


class NegotiationTrainingEnvironment:
    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game = game
        self.solver = NegotiationSolver(game)
        self.keys = self.solver.keys
        self.k = game.num_demands
        self.legal = np.ones((len(self.keys), self.k), dtype=bool)
        self.scale = game.payoff_scale
        self.mixture = training_mixture(train_specs, collusive_specs, exploiter_specs, charges=charges,
                                        best_response_counts=game.protocol == "rigorous")
        self.opponents = [_bot(spec, game) for spec in train_specs]
        self.extra = [_bot(spec, game) for spec in self.mixture.extra]
        self.stage = game.stage_payoffs()
        self._levels = forward_levels(game, self.solver.stage, self.opponents)
        self._maximiser_levels = forward_levels(game, self.solver.stage, [])
        self._extra_levels = forward_levels(game, self.solver.stage, self.extra) if self.extra else None
        if not self.opponents:  # the maximiser alone: its payoff is the utility
            self.mixture.utility = np.ones(1)
        # a rollout's utility credit: train bots, the maximiser, then the others
        self.weight = self.mixture.utility

    def solved(self, table: np.ndarray) -> RepeatedResult:
        """The exact solution at `table` (the solver keeps the latest one for the step's several uses)."""
        return self.solver.solve_table(table)

    def rollout_opponents(self, table: np.ndarray) -> list[NegotiationBot]:
        """The opponents a rollout is drawn from, uniformly: the train bots, the gap maximiser, then
        the opponents of charged terms."""
        return [*self.opponents, MaximiserBot(self.solved(table), self.game), *self.extra]

    def events(self, own: np.ndarray, other: np.ndarray):
        """Per round (demand indices): (collusion event, externality event) under the game's protocol."""
        low, game = self.game.min_demand, self.game
        return round_events(
            game.protocol, own + low, other + low, game.pie, game.breakdown_cost, game.paper_version
        )

    def _forward(self, table: np.ndarray, levels, opponents: list[np.ndarray]):
        """Expected visits per key and expected payoff per round against each opponent, given as
        its demand probabilities per level ([opponents, n, K] per round)."""
        visits = np.zeros((len(opponents[0]), len(self.keys)))
        payoff = np.zeros(len(opponents[0]))
        reach = np.ones((len(opponents[0]), 1))
        for t, ((rows, _, children), bots) in enumerate(zip(levels, opponents)):
            for o in range(len(reach)):
                np.add.at(visits[o], rows, reach[o])
            # [o, n, a, b]
            joint = reach[:, :, None, None] * table[rows][None, :, :, None] * bots[:, :, None, :]
            payoff += (joint * self.stage).sum((1, 2, 3))
            if t + 1 < self.game.rounds:
                size = len(levels[t + 1][0])
                flat = joint.reshape(len(reach), -1)
                reach = np.stack([np.bincount(children.reshape(-1), weights=f, minlength=size) for f in flat])
        return visits, payoff / self.game.rounds

    def _train_forward(self, table):
        return self._forward(table, self._levels, [bots for _, bots, _ in self._levels])

    def _maximiser_forward(self, table):
        choices = self.solved(table).gap_table.actions
        onehot = [np.eye(self.k)[choice][None] for choice in choices]
        return self._forward(table, self._maximiser_levels, onehot)

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        """ρ(I): expected visits per rollout, the opponent uniform over the rollout opponents."""
        table = np.asarray(table, dtype=float)
        parts = [self._train_forward(table)[0], self._maximiser_forward(table)[0]]
        if self._extra_levels is not None:
            parts.append(
                self._forward(table, self._extra_levels, [bots for _, bots, _ in self._extra_levels])[0]
            )
        return np.concatenate(parts).mean(0)

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        table = np.asarray(table, dtype=float)
        # index n: the gap maximiser
        group_of, opponent_of = match_groups(rng, groups, group_size, self.mixture.size)
        matches = play_matches(self.game, table, self.rollout_opponents(table), opponent_of,
                               rng.random((len(group_of), self.game.rounds, 2)))
        greedy, externality = self.events(matches.own, matches.other)
        return credited_rollouts(matches.rows, matches.own, group_of, opponent_of, self.mixture,
                                 matches.payoff[:, :, 0].mean(1), greedy.mean(1), externality.mean(1))

    def exact_metrics(self, table: np.ndarray) -> dict:
        table = np.asarray(table, dtype=float)
        result = self.solver.evaluate(table)
        return {"utility": float(self._train_forward(table)[1].mean()), result.value_name: result.value,
                "br_payoff": result.br_payoff}


def _bot(spec, game) -> NegotiationBot:
    bot = spec.build(game)
    if not isinstance(bot, NegotiationBot):
        raise SepoError(
            f"the tabular split-bargaining trainer plays the domain's bots only; {spec.label!r} is not one"
        )
    return bot


class MaximiserBot(NegotiationBot):
    """The gap maximiser's table as a vectorised bot for `play_matches`: its demand at each
    (round, last m rounds) state of the solver."""

    name = "BestResponse"
    classifier = {"memory_depth": None, "stochastic": False}

    def __init__(self, solved: RepeatedResult, game):
        self.actions, self.memory, self.k = solved.gap_table.actions, game.memory, game.num_demands

    def probabilities(self, own, other, spec):
        t = own.shape[1]
        agent, mine = other - spec.low, own - spec.low  # the table is keyed from the agent's side
        length = t if self.memory is None else min(t, self.memory)
        index = key_rows(agent, mine, self.memory, self.k) - sum(
            (self.k * self.k) ** past for past in range(length)
        )
        return np.eye(self.k)[self.actions[t][index]]
