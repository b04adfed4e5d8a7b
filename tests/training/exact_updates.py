"""Exact expected updates of both SEPO trainers on a repeated simultaneous game, and the expected
events of one round, by enumeration.

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

from dataclasses import dataclass

import numpy as np

from sepo.evaluation.play import DecisionRecord, EpisodeRecord
from sepo.games.base import CHANCE
from sepo.objective.sepo import Lambdas, sepo_rewards


@dataclass(frozen=True)
class Node:
    """An agent decision of the expansion, before it is played: the seat, the opponent's index,
    the state, the joint actions so far (agent first), the agent's decision records so far (as
    evaluation records them) and the probability of getting here."""

    seat: int
    opponent: int
    state: object
    history: tuple
    records: tuple
    p: float


def expand(game, table, row_of, opponents, seats, visit=None, leaf=None):
    """Walk every match: `visit(node)` at each agent decision, `leaf(node, decisions)` at each end
    ((row, column) per agent decision). `row_of` maps a decision's information key to the table's
    row, or is a function of the decision."""
    row = row_of if callable(row_of) else (lambda decision: row_of[decision.info_key])

    def walk(state, seat, o, history, records, decisions, p):
        if p == 0.0:
            return
        if state.is_terminal():
            if leaf is not None:
                leaf(Node(seat, o, state, history, records, p), decisions)
            return
        if state.current_player() == CHANCE:
            for outcome, q in state.chance_outcomes():
                child = state.clone()
                child.apply_action(outcome)
                walk(child, seat, o, history, records, decisions, p * q)
            return
        mine, theirs = state.decision(seat), state.decision(1 - seat)
        r = row(mine)
        if visit is not None:
            visit(Node(seat, o, state, history, records, p))
        replies = opponents[o].action_probabilities(theirs)
        for column, action in enumerate(mine.legal_actions):
            record = DecisionRecord(len(state.rounds()), mine.info_key, action, mine.name_of(action), mine.observation)
            for other, q in replies.items():
                child = state.clone()
                child.apply_actions((action, other) if seat == 0 else (other, action))
                walk(child, seat, o, history + ((action, other),), records + (record,), decisions + [(r, column)],
                     p * table[r, column] * q)

    for seat in seats:
        for o in range(len(opponents)):
            walk(game.new_initial_state(), seat, o, (), (), [], 1.0 / (len(seats) * len(opponents)))


def round_events(game, events, node: Node, opponent, action: int) -> np.ndarray:
    """The expected (collusion events, externality events) that evaluation's `events(protocol,
    episode)` adds for the round in which the agent plays `action` at `node` (over the opponent's
    reply and the round's chance, e.g. a tie coin), as counts."""

    def counted(rounds, records):
        episode = EpisodeRecord("", "", 0, node.seat, list(rounds), list(records))
        found = events(game.protocol, episode)
        return np.array([found["collusion_events"], found["externality_events"]], dtype=float)

    state, seat = node.state, node.seat
    decision = state.decision(seat)
    record = DecisionRecord(len(state.rounds()), decision.info_key, action, decision.name_of(action), decision.observation)
    before = counted(state.rounds(), node.records)
    total = np.zeros(2)
    for other, q in opponent.action_probabilities(state.decision(1 - seat)).items():
        child = state.clone()
        child.apply_actions((action, other) if seat == 0 else (other, action))
        for settled, r in _settled(child, len(state.rounds()) + 1):
            total += q * r * (counted(settled.rounds(), node.records + (record,)) - before)
    return total


def _settled(state, rounds: int):
    """The states once the round is recorded (chance expanded until then), with probabilities."""
    if len(state.rounds()) >= rounds or state.current_player() != CHANCE:
        yield state, 1.0
        return
    for outcome, q in state.chance_outcomes():
        child = state.clone()
        child.apply_action(outcome)
        for settled, r in _settled(child, rounds):
            yield settled, q * r


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

    def visit(node):
        context = context_of(node)
        decision = domain_env.training_decision(context, rng)
        legal = decision.legal_actions
        terms = np.array([sepo_env.completion_terms(table, charge, context, decision, a) for a in legal])
        rewards = sepo_rewards(*terms.T, np.zeros(len(legal), dtype=int), lambdas, sepo_env.scale, "per-rollout")
        for column in range(len(legal)):
            total[:] += node.p / rounds * table[context.info_row, column] * rewards[column] * score(table, context.info_row, column)

    expand(sepo_env.game, table, row_of(domain_env), opponents, seats, visit=visit)
    return total


def tabular_update(env, game, table, lambdas: Lambdas, opponents, charge, seats=(0,)):
    """The tabular trainer's expected update per rollout (module doc); `charge` is the trainer's."""
    total = np.zeros_like(table)

    def leaf(node, decisions):
        utility = env.weight[node.opponent] * np.mean([r.payoffs[node.seat] for r in node.state.rounds()])
        exploit = sum(charge[row, column] for row, column in decisions)
        reward = sepo_rewards([utility], [exploit], [0.0], [0.0], [0], lambdas, env.scale, "per-rollout")[0]
        total[:] += node.p * reward * sum(score(table, row, column) for row, column in decisions)

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
