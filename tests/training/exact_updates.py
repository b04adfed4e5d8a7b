"""Exact expected updates of both SEPO trainers on a repeated simultaneous game, and the expected
payoff and events to go of one action, by enumeration.

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
- The tabular trainer's rollout is a whole match: R = s·U − λe·s·E − λc·C − λx·X with U the
  credited mean payoff per round, E the sum of the trainer's charges and C, X the credited rates
  per round of evaluation's `events(protocol, episode)` (collusion against a collusive partner
  only); update Σ_match p R ∇θ log P(match).

∇θ log π(a|I) for softmax logits is e_a − π(·|I).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.games.base import CHANCE
from sepo.games.records import DecisionRecord, EpisodeRecord
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
            record = DecisionRecord(
                len(state.rounds()), mine.info_key, action, mine.name_of(action), mine.observation
            )
            for other, q in replies.items():
                child = state.clone()
                child.apply_actions((action, other) if seat == 0 else (other, action))
                walk(
                    child,
                    seat,
                    o,
                    history + ((action, other),),
                    records + (record,),
                    decisions + [(r, column)],
                    p * table[r, column] * q,
                )

    for seat in seats:
        for o in range(len(opponents)):
            walk(game.new_initial_state(), seat, o, (), (), [], 1.0 / (len(seats) * len(opponents)))


def to_go(game, events, node: Node, opponent, table, row_of, action: int) -> np.ndarray:
    """The expected (payoff, collusion events, externality events) from `node`'s round to the end
    of its match when the agent plays `action` there and its table afterwards, `opponent` its
    `action_probabilities`: the agent's payoffs summed, and the counts evaluation's `events(protocol,
    episode)` adds over those rounds."""
    row = row_of if callable(row_of) else (lambda decision: row_of[decision.info_key])
    seat = node.seat

    def counted(state, records):
        found = events(game.protocol, EpisodeRecord("", "", 0, seat, list(state.rounds()), list(records)))
        return np.array(
            [
                sum(r.payoffs[seat] for r in state.rounds()),
                found["collusion_events"],
                found["externality_events"],
            ],
            dtype=float,
        )

    before = counted(node.state, node.records)
    total = np.zeros(3)

    def walk(state, records, p, forced):
        if p == 0.0:
            return
        if state.is_terminal():
            total[:] += p * (counted(state, records) - before)
            return
        if state.current_player() == CHANCE:
            for outcome, q in state.chance_outcomes():
                child = state.clone()
                child.apply_action(outcome)
                walk(child, records, p * q, None)
            return
        mine, theirs = state.decision(seat), state.decision(1 - seat)
        moves = {forced: 1.0} if forced is not None else dict(zip(mine.legal_actions, table[row(mine)]))
        replies = opponent.action_probabilities(theirs)
        for move, p_move in moves.items():
            record = DecisionRecord(
                len(state.rounds()), mine.info_key, move, mine.name_of(move), mine.observation
            )
            for other, q in replies.items():
                child = state.clone()
                child.apply_actions((move, other) if seat == 0 else (other, move))
                walk(child, records + (record,), p * p_move * q, None)

    walk(node.state, node.records, 1.0, action)
    return total


def score(table, row, column):
    out = np.zeros_like(table)
    out[row, column] += 1.0
    out[row] -= table[row]
    return out


def llm_update(sepo_env, table, lambdas: Lambdas, context_of, opponents, seats=(0,), row=None):
    """The language-model trainer's expected update per completion (module doc); `row`: the table
    row of a decision (default: by its information key among the environment's keys)."""
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
        rewards = sepo_rewards(
            *terms.T, np.zeros(len(legal), dtype=int), lambdas, sepo_env.scale, "per-rollout"
        )
        for column in range(len(legal)):
            total[:] += (
                node.p
                / rounds
                * table[context.info_row, column]
                * rewards[column]
                * score(table, context.info_row, column)
            )

    expand(
        sepo_env.game, table, row if row is not None else row_of(domain_env), opponents, seats, visit=visit
    )
    return total


def uncredited_rates(game, events, node: Node) -> np.ndarray:
    """A finished match's (collusion, externality) per round, as evaluation's `events` counts them
    (a rate with denominator 0 is 0)."""
    found = events(
        game.protocol, EpisodeRecord("", "", 0, node.seat, list(node.state.rounds()), list(node.records))
    )
    return np.array(
        [
            found[f"{name}_events"] / found[f"{name}_denominator"] if found[f"{name}_denominator"] else 0.0
            for name in ("collusion", "externality")
        ]
    )


def match_rates(env, game, events, node: Node) -> np.ndarray:
    """A finished match's credited (collusion, externality) per round: evaluation's rates scaled by
    the rollout opponent's credits for them (`env.mixture`, `sepo.games.credit`)."""
    return np.array([env.mixture.collusion[node.opponent], env.mixture.externality[node.opponent]]) \
        * uncredited_rates(game, events, node)


def pool_rates(game, events, table, row, opponents, seats=(0,)):
    """`rates(t)`: evaluation's (c, x) of any table `t` against each of `opponents` (their matches
    expanded at `table`, each opponent's own moves held fixed), `[opponents, 2]`: the expected rates
    per round, uncredited. Evaluation's c is their mean over the collusive pool, x over the train
    and exploiter pools."""
    leaves = []

    def leaf(node, decisions):
        rows, columns = (np.array(x, dtype=int) for x in zip(*decisions))
        leaves.append((node.p / np.prod(table[rows, columns]) * len(opponents), node.opponent, rows, columns,
                       uncredited_rates(game, events, node)))

    expand(game, table, row, opponents, seats, leaf=leaf)
    weight = np.array([w for w, *_ in leaves])
    owner = np.array([o for _, o, *_ in leaves])
    rows, columns = np.array([r for _, _, r, _, _ in leaves]), np.array([c for *_, c, _ in leaves])
    rates = np.array([x for *_, x in leaves])

    def of(t):
        probability = weight * np.prod(np.asarray(t)[rows, columns], axis=1)
        out = np.zeros((len(opponents), 2))
        np.add.at(out, owner, probability[:, None] * rates)
        return out

    return of


def expected_rates(env, game, events, table, opponents, seats=(0,)):
    """`rates(t)`: the expected credited (c, x) per round of any table `t` against `opponents`, i.e.
    against the train pool. The matches are expanded once at `table`; each leaf keeps its rates,
    the probability of everything but the agent's moves, and those moves, so a table's rates are
    a sum over leaves (fast enough for finite differences)."""
    leaves = []

    def leaf(node, decisions):
        rows, columns = (np.array(x, dtype=int) for x in zip(*decisions))
        leaves.append(
            (node.p / np.prod(table[rows, columns]), rows, columns, match_rates(env, game, events, node))
        )

    expand(game, table, row_of(env), opponents, seats, leaf=leaf)
    weight = np.array([w for w, _, _, _ in leaves])
    rows, columns = np.array([r for _, r, _, _ in leaves]), np.array([c for _, _, c, _ in leaves])
    rates = np.array([x for _, _, _, x in leaves])
    return lambda t: (weight * np.prod(np.asarray(t)[rows, columns], axis=1)) @ rates
def tabular_update(env, game, table, lambdas: Lambdas, opponents, charge, seats=(0,), events=None, row=None):
    """The tabular trainer's expected update per rollout (module doc); `charge` is the trainer's,
    `events` evaluation's (None: no collusion or externality term)."""
    total = np.zeros_like(table)

    def leaf(node, decisions):
        utility = env.mixture.utility[node.opponent] * np.mean(
            [r.payoffs[node.seat] for r in node.state.rounds()]
        )
        exploit = sum(charge[row, column] for row, column in decisions)
        collusion, externality = match_rates(env, game, events, node) if events is not None else (0.0, 0.0)
        reward = sepo_rewards(
            [utility], [exploit], [collusion], [externality], [0], lambdas, env.scale, "per-rollout"
        )[0]
        total[:] += node.p * reward * sum(score(table, r, c) for r, c in decisions)

    expand(game, table, row if row is not None else row_of(env), opponents, seats, leaf=leaf)
    return total


def row_of(env) -> dict:
    keys = getattr(env, "keys", None) or env.solver.keys
    return {key: i for i, key in enumerate(keys)}


def softmax(logits):
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def objective_gradient(objective, logits, h=1e-6):
    """Central finite differences of `objective(table)` in the softmax logits (an array-valued
    objective gives one gradient per entry, on the leading axis)."""
    out = None
    for index in np.ndindex(*logits.shape):
        step = np.zeros_like(logits)
        step[index] = h
        difference = (
            np.asarray(objective(softmax(logits + step))) - np.asarray(objective(softmax(logits - step)))
        ) / (2 * h)
        if out is None:
            out = np.zeros(difference.shape + logits.shape)
        out[(..., *index)] = difference
    return out
