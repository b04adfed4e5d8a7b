"""Exact expected updates of both SEPO trainers on a repeated simultaneous game, by enumeration.

Every match between an agent table and each rollout opponent (uniform), from each seat (uniform),
is expanded exactly through the game's own states: chance by its outcomes, the agent by its
table, the opponent by `action_probabilities`. No sampling, no model: the table stands in for the
language model's played policy.

- The language-model trainer draws one decision uniformly from the decisions of such matches, so
  a decision at a state reached with probability p in a match of T rounds is drawn with
  probability p/T. Its G completions sample actions from the table; with group centring the
  expected update is (1 − 1/G)·Σ_ctx P(ctx) Σ_a π(a|I) R(ctx, a) ∇θ log π(a|I), R from the
  trainer's own `completion_terms` and `sepo_rewards`. The factor (1 − 1/G) is common to both
  trainers and left out.
- The tabular trainer's rollout is a whole match: R = s·U − λe·s·E with U the credited mean
  payoff per round and E the sum of the trainer's charges; update Σ_match p R ∇θ log P(match).

∇θ log π(a|I) for softmax logits is e_a − π(·|I).
"""
from __future__ import annotations

import numpy as np

from sepo.games.base import CHANCE
from sepo.objective.sepo import Lambdas, sepo_rewards


def expand(game, table, row_of, opponents, seats, visit=None, leaf=None):
    """Walk every match: `visit(seat, opponent, state, history, p)` at each agent decision (before
    it), `leaf(seat, opponent, state, decisions, p)` at each end ((row, column) per decision)."""

    def walk(state, seat, o, history, decisions, p):
        if p == 0.0:
            return
        if state.is_terminal():
            if leaf is not None:
                leaf(seat, o, state, decisions, p)
            return
        if state.current_player() == CHANCE:
            for outcome, q in state.chance_outcomes():
                child = state.clone()
                child.apply_action(outcome)
                walk(child, seat, o, history, decisions, p * q)
            return
        mine, theirs = state.decision(seat), state.decision(1 - seat)
        row = row_of[mine.info_key]
        if visit is not None:
            visit(seat, o, state, history, p)
        replies = opponents[o].action_probabilities(theirs)
        for column, action in enumerate(mine.legal_actions):
            for other, q in replies.items():
                child = state.clone()
                child.apply_actions((action, other) if seat == 0 else (other, action))
                walk(child, seat, o, history + ((action, other),), decisions + [(row, column)], p * table[row, column] * q)

    for seat in seats:
        for o in range(len(opponents)):
            walk(game.new_initial_state(), seat, o, (), [], 1.0 / (len(seats) * len(opponents)))


def score(table, row, column):
    out = np.zeros_like(table)
    out[row, column] += 1.0
    out[row] -= table[row]
    return out


def llm_update(sepo_env, table, lambdas: Lambdas, context_of, opponents, seats=(0,)):
    """The language-model trainer's expected update per completion (module doc)."""
    domain_env = sepo_env.domain_env
    charge = sepo_env.charge(table)
    rounds = domain_env.rounds_per_rollout
    rng = np.random.default_rng(0)
    total = np.zeros_like(table)

    def visit(seat, o, state, history, p):
        context = context_of(seat, o, state, history)
        decision = domain_env.training_decision(context, rng)
        legal = decision.legal_actions
        terms = np.array([sepo_env.completion_terms(table, charge, context, decision, a) for a in legal])
        rewards = sepo_rewards(*terms.T, np.zeros(len(legal), dtype=int), lambdas, sepo_env.scale, "per-rollout")
        for column in range(len(legal)):
            total[:] += p / rounds * table[context.info_row, column] * rewards[column] * score(table, context.info_row, column)

    expand(sepo_env.game, table, row_of(domain_env), opponents, seats, visit=visit)
    return total


def tabular_update(env, game, table, lambdas: Lambdas, opponents, charge, seats=(0,)):
    """The tabular trainer's expected update per rollout (module doc); `charge` is the trainer's."""
    total = np.zeros_like(table)

    def leaf(seat, o, state, decisions, p):
        utility = env.weight[o] * np.mean([r.payoffs[seat] for r in state.rounds()])
        exploit = sum(charge[row, column] for row, column in decisions)
        reward = sepo_rewards([utility], [exploit], [0.0], [0.0], [0], lambdas, env.scale, "per-rollout")[0]
        total[:] += p * reward * sum(score(table, row, column) for row, column in decisions)

    expand(game, table, row_of(env), opponents, seats, leaf=leaf)
    return total


def row_of(env) -> dict:
    keys = getattr(env, "keys", None) or env.solver.keys
    return {key: i for i, key in enumerate(keys)}


def softmax(logits):
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def objective_gradient(objective, logits, h=1e-6):
    """Central finite differences of `objective(table)` in the softmax logits."""
    out = np.zeros_like(logits)
    for index in np.ndindex(*logits.shape):
        step = np.zeros_like(logits)
        step[index] = h
        out[index] = (objective(softmax(logits + step)) - objective(softmax(logits - step))) / (2 * h)
    return out
