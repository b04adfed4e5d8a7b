"""Vectorised split-bargaining matches: many episodes at once, one numpy step per round.

An agent is a table over the game's information-state keys (`game.info_keys()`) or a bot; bots
give the probability of every demand for a whole batch of histories
(`NegotiationBot.probabilities`). Used by the tabular training environment and the benchmark:
the same rules as `rules.py`, checked against the generic play loop in tests.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.games.negotiation.bots import DemandSpec
from sepo.games.negotiation.exact import key_rows


@dataclass
class Matches:
    """`own[n, T]`, `other[n, T]`: both sides' actions (demand indices); `payoff[n, T, 2]` (agent,
    opponent); `rows[n, T]`: the agent's information-state row at each round."""

    own: np.ndarray
    other: np.ndarray
    payoff: np.ndarray
    rows: np.ndarray


def sample(probs: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """One action per row of `probs` by inverse CDF on `uniforms`."""
    cumulative = np.cumsum(probs, axis=1)
    return np.minimum((uniforms[:, None] * cumulative[:, -1:] >= cumulative).sum(1), probs.shape[1] - 1)


def play_matches(game, agent, opponents, opponent_of: np.ndarray, uniforms: np.ndarray) -> Matches:
    """Play `len(opponent_of)` matches: the agent (a table `[keys, K]` or a bot) in seat 0 against
    `opponents[opponent_of[i]]` in seat 1; `uniforms[n, T, 2]` are the draws (agent, opponent)."""
    n, rounds, k = len(opponent_of), game.rounds, game.num_demands
    spec = DemandSpec.of(game)
    own = np.zeros((n, rounds), dtype=np.int64)
    other = np.zeros((n, rounds), dtype=np.int64)
    rows = np.zeros((n, rounds), dtype=np.int64)
    for t in range(rounds):
        past_own, past_other = own[:, :t], other[:, :t]
        rows[:, t] = key_rows(past_own, past_other, game.memory, k)
        if isinstance(agent, np.ndarray):
            p_agent = agent[rows[:, t]]
        else:
            p_agent = agent.probabilities(past_own + spec.low, past_other + spec.low, spec)
        p_opponent = np.empty((n, k))
        for index, bot in enumerate(opponents):
            mine = opponent_of == index
            if mine.any():
                p_opponent[mine] = bot.probabilities(
                    past_other[mine] + spec.low, past_own[mine] + spec.low, spec
                )
        own[:, t] = sample(p_agent, uniforms[:, t, 0])
        other[:, t] = sample(p_opponent, uniforms[:, t, 1])
    stage = game.stage_payoffs()
    payoff = np.stack([stage[own, other], stage[other, own]], axis=-1)
    return Matches(own, other, payoff, rows)
