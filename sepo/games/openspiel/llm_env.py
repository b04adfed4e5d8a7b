"""A two-player OpenSpiel game as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent, drawn on-policy: plays are sampled over the
enumerated tree between the agent's current action table and pool opponents (`training.py`), and
every agent decision met becomes a group sharing the true history (the tree node), the seat and
the opponent. A completion's payoff to go is the exact expectation of the rest of the play after
its action, the agent following its table and the opponent its bot; the events are not
applicable (`events.py`), so their expectations to go are zero.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from sepo.games.base import Decision
from sepo.games.openspiel.exact import OpenSpielSolver
from sepo.games.openspiel.training import external_reach, sample_plays
from sepo.metrics.exact import action_table


@dataclass(frozen=True)
class DecisionContext:
    """One agent decision with the hidden state the environment knows: the tree node."""

    info_row: int
    node: int
    seat: int
    opponent_index: int


class OpenSpielLLMEnvironment:
    """OpenSpiel's side of language-model SEPO (`Domain.llm_training`)."""

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges=None):
        """`exploiter_specs`, `charges`: taken for the trainers' one signature; the events do not
        apply here, so a charged λc or λx is refused before an environment is built."""
        self.game = game
        self.solver = OpenSpielSolver(game)
        self.tree = self.solver.tree
        self.rounds_per_rollout = 1  # a rollout is one play; u is per play
        decisions = self.solver.decisions()
        self.opponents = np.stack([action_table(spec.build(game), decisions) for spec in train_specs])
        self.reach_external = external_reach(self.solver, self.opponents)
        self._values: dict = {}

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.solver.own_reach(table) * self.reach_external

    def sample_contexts(
        self, table: np.ndarray, count: int, rng: np.random.Generator
    ) -> list[DecisionContext]:
        opponent = rng.integers(len(self.opponents), size=count)
        seat = rng.integers(2, size=count)
        chance = rng.random((count, int(self.tree.node_depth.max()) + 1))
        states, _, mask, _, nodes = sample_plays(
            self.tree, table, self.opponents, opponent, seat, chance, rng, record_nodes=True
        )
        return [DecisionContext(int(states[n, k]), int(nodes[n, k]), int(seat[n]), int(opponent[n]))
                for n in range(count) for k in range(states.shape[1]) if mask[n, k]]

    def training_decision(self, context: DecisionContext, rng: np.random.Generator) -> Decision:
        """The prompt of a context: its information state's (the prompt shows nothing else)."""
        return self.tree.decisions[context.info_row]

    def node_values(self, table: np.ndarray, opponent_index: int, seat: int) -> np.ndarray:
        """The agent's expected return from every node, the agent in `seat` (cached per table)."""
        key = (
            hashlib.sha1(np.ascontiguousarray(table, dtype=float).tobytes()).hexdigest(),
            opponent_index,
            seat,
        )
        if key not in self._values:
            if len(self._values) > 64:
                self._values.clear()
            opponent = self.opponents[opponent_index]
            tables = [table, opponent] if seat == 0 else [opponent, table]
            self._values[key] = self.tree.node_values(self.tree.move_probabilities(tables), seat)
        return self._values[key]

    def outcome(
        self, table: np.ndarray, context: DecisionContext, decision: Decision, action: int
    ) -> tuple[float, float, float]:
        """(exact payoff to go of `action`, collusion 0, externality 0): the events do not apply."""
        values = self.node_values(np.asarray(table, dtype=float), context.opponent_index, context.seat)
        child = self.tree.children[context.node, decision.legal_actions.index(action)]
        return float(values[child]), 0.0, 0.0

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {"utility_exact": float(self.solver.head_to_head(table, self.opponents).mean())}
