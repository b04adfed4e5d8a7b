"""A two-player OpenSpiel game as a training environment for the exact tabular SEPO trainer.

A group shares its start state: the opponent (uniform over the train pool), the agent's seat and
the uniforms that draw chance's outcomes (common random numbers); its rollouts are single plays
sampled over the enumerated tree (`tree.py`), all rollouts advancing together. The events are not
applicable (`events.py`), so collusion and externality are zero; the training reach is the
agent's own reach times chance's and the pool's, both seats equally likely.
"""
from __future__ import annotations

import numpy as np

from sepo.games.openspiel.exact import OpenSpielSolver
from sepo.games.records import Rollouts
from sepo.metrics.exact import action_table

TERMINAL, CHANCE = -4, -1


def external_reach(solver: OpenSpielSolver, opponents: np.ndarray) -> np.ndarray:
    """`[R]`: probability that a play reaches each of the agent's rows over chance, a uniformly
    drawn seat and an opponent drawn uniformly from `opponents` `[K, R, W]`, the agent's own moves
    taken with probability 1."""
    tree = solver.tree
    ones = tree.legal.astype(float)
    reach = np.zeros(len(tree.keys))
    for opponent in opponents:
        for seat in range(2):
            tables = [ones, opponent] if seat == 0 else [opponent, ones]
            node_reach = tree.node_reach(tree.move_probabilities(tables))
            nodes = np.flatnonzero(tree.node_kind == seat)
            np.add.at(reach, tree.node_row[nodes], node_reach[nodes])
    return reach / (2 * len(opponents))


def sample_plays(tree, agent: np.ndarray, opponents: np.ndarray, opponent_of: np.ndarray, seat_of: np.ndarray,
                 chance_uniforms: np.ndarray, rng: np.random.Generator, record_nodes: bool = False):
    """Play one game per rollout, all at once. Returns (states, actions, mask, utility[, nodes]):
    the agent's rows and columns per decision, and its return; `nodes` the agent's decision nodes."""
    count = len(opponent_of)
    node = np.zeros(count, dtype=np.int64)
    steps = int(tree.node_depth.max()) + 1
    states = np.zeros((count, steps), dtype=np.int64)
    actions = np.zeros((count, steps), dtype=np.int64)
    nodes_met = np.zeros((count, steps), dtype=np.int64)
    mask = np.zeros((count, steps), dtype=bool)
    made = np.zeros(count, dtype=np.int64)
    for step in range(steps):
        kind = tree.node_kind[node]
        live = kind != TERMINAL
        if not live.any():
            break
        probs = np.zeros((count, tree.children.shape[1]))
        chance = kind == CHANCE
        probs[chance] = tree.chance_prob[node[chance]]
        mine = live & ~chance & (kind == seat_of)
        theirs = live & ~chance & ~mine
        width = tree.width
        probs[mine, :width] = agent[tree.node_row[node[mine]]]
        probs[theirs, :width] = opponents[opponent_of[theirs], tree.node_row[node[theirs]]]
        draw = np.where(chance, chance_uniforms[:, step], rng.random(count))
        cumulative = np.cumsum(probs, -1)
        pick = np.minimum((cumulative < (draw * cumulative[:, -1])[:, None]).sum(-1), probs.shape[1] - 1)
        index = np.flatnonzero(mine)
        states[index, made[index]] = tree.node_row[node[index]]
        actions[index, made[index]] = pick[index]
        nodes_met[index, made[index]] = node[index]
        mask[index, made[index]] = True
        made[index] += 1
        node = np.where(live, tree.children[node, pick], node)
    used = max(int(made.max()), 1)
    utility = tree.node_returns[node, seat_of]
    out = (states[:, :used], actions[:, :used], mask[:, :used], utility)
    return out + (nodes_met[:, :used],) if record_nodes else out


class OpenSpielTrainingEnvironment:
    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges=None):
        """`exploiter_specs`, `charges`: taken for the trainers' one signature; the events do not
        apply here, so a charged λc or λx is refused before an environment is built."""
        self.solver = OpenSpielSolver(game)
        self.tree = self.solver.tree
        self.keys = self.solver.keys
        self.legal = self.tree.legal
        self.scale = game.payoff_scale
        decisions = self.solver.decisions()
        self.opponents = np.stack([action_table(spec.build(game), decisions) for spec in train_specs])
        self.reach_external = external_reach(self.solver, self.opponents)

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.solver.own_reach(table) * self.reach_external

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        group_opponent = rng.integers(len(self.opponents), size=groups)
        group_seat = rng.integers(2, size=groups)
        steps = int(self.tree.node_depth.max()) + 1
        group_chance = rng.random((groups, steps))
        group_of = np.repeat(np.arange(groups), group_size)
        states, actions, mask, utility = sample_plays(
            self.tree,
            table,
            self.opponents,
            group_opponent[group_of],
            group_seat[group_of],
            group_chance[group_of],
            rng,
        )
        zeros = np.zeros(len(group_of))
        return Rollouts(states, actions, mask, group_of, utility, zeros, zeros.copy())

    def exact_metrics(self, table: np.ndarray) -> dict:
        utility = float(self.solver.head_to_head(table, self.opponents).mean())
        value = float(self.solver.values(table)[0])
        return {"utility": utility, self.solver.value_name: value}
