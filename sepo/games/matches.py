"""Language-model training environments of repeated simultaneous matches: what they share.

In a repeated match each agent decision is the joint history so far (the agent's and the
opponent's actions) against one opponent; its row in the solver's table is the information
state the agent's memory keeps of that history. `match_contexts` turns a batch of played
matches into such decisions. `action_values` is the exact expected sum to go of a per-round
quantity (the payoff, or an event count) for every action at every history, by backward
induction over a level-by-level tree (the agent playing its table, each opponent its action
probabilities): a completion's payoff and events to go are then lookups instead of a sampled
continuation.
"""
from __future__ import annotations

import numpy as np

from sepo.games.records import MatchContext


def match_contexts(
    rows: np.ndarray, own: np.ndarray, other: np.ndarray, opponent_of: np.ndarray
) -> list[MatchContext]:
    """Every decision of `len(opponent_of)` played matches (`rows`, `own`, `other`: [matches, rounds])."""
    matches, rounds = own.shape
    return [
        MatchContext(
            int(rows[m, t]), tuple(zip(own[m, :t].tolist(), other[m, :t].tolist())), int(opponent_of[m])
        )
        for m in range(matches)
        for t in range(rounds)
    ]


def action_values(table: np.ndarray, levels, stage: np.ndarray) -> list[np.ndarray]:
    """Per round t, `values[t][o, i, a]`: the expected sum over rounds t.. of `stage` when the agent
    plays `a` at history i of round t against opponent o and its table afterwards.

    `levels[t] = (rows, probs, children)`: the table row of each history of round t `[n]`, each
    opponent's action probabilities there `[opponents, n, B]`, and each history's child for
    the joint action a·B + b `[n, A·B]` (unused after the last round); `stage[a, b]` is the
    round's quantity (the agent's payoff, an event) after the joint action (a, b)."""
    n_actions, n_other = stage.shape
    values: list[np.ndarray] = [None] * len(levels)
    following = None
    for t in reversed(range(len(levels))):
        rows, probs, children = levels[t]
        payoff = np.broadcast_to(stage, (*probs.shape[:2], n_actions, n_other))
        if following is not None:
            payoff = payoff + following[:, children].reshape(*probs.shape[:2], n_actions, n_other)
        values[t] = (payoff * probs[:, :, None, :]).sum(-1)
        following = (values[t] * table[rows][None]).sum(-1)
    return values
