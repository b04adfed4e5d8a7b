"""Vectorised IPD matches: many episodes at once, one numpy step per round.

An agent is a table over the game's information-state keys (`game.info_keys()`); bots give
P(COOPERATE) for a whole batch of histories (`IPDBot.cooperate_probability`). Used by the tabular
training environment, the exact training reach, and the benchmark against `axelrod.Match`
(`benchmarks/bench_ipd.py`): the same rules as `rules.py`, checked against it in tests.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.metrics.joint_history import joint_key_rows


def key_rows(own: np.ndarray, other: np.ndarray, memory: int | None) -> np.ndarray:
    """Row of each history's information-state key in `game.info_keys()` order: "start", then
    every remembered history of length 1, 2, ... in base-4 order (CC, CD, DC, DD)."""
    return joint_key_rows(own, other, memory, 2)


@dataclass
class Matches:
    """`own[n, T]`, `other[n, T]`: both sides' moves; `payoff[n, T, 2]` (agent, opponent); `rows[n, T]`:
    the agent's information-state row at each round."""

    own: np.ndarray
    other: np.ndarray
    payoff: np.ndarray
    rows: np.ndarray


def play_matches(agent, opponents, opponent_of: np.ndarray, rounds: int, matrix: np.ndarray,
                 uniforms: np.ndarray, memory: int | None = None) -> Matches:
    """Play `len(opponent_of)` matches: the agent (a table `[keys, 2]`, or a bot) in seat 0 against
    `opponents[opponent_of[i]]` in seat 1; `uniforms[n, T, 2]` are the draws (agent, opponent)."""
    n = len(opponent_of)
    own = np.zeros((n, rounds), dtype=np.int64)
    other = np.zeros((n, rounds), dtype=np.int64)
    rows = np.zeros((n, rounds), dtype=np.int64)
    for t in range(rounds):
        past_own, past_other = own[:, :t], other[:, :t]
        rows[:, t] = key_rows(past_own, past_other, memory)
        if isinstance(agent, np.ndarray):
            p_agent = agent[rows[:, t], 0]
        else:
            p_agent = agent.cooperate_probability(past_own, past_other)
        p_opponent = np.empty(n)
        for index, bot in enumerate(opponents):
            mine = opponent_of == index
            if mine.any():
                p_opponent[mine] = bot.cooperate_probability(past_other[mine], past_own[mine])
        own[:, t] = (uniforms[:, t, 0] >= p_agent).astype(np.int64)
        other[:, t] = (uniforms[:, t, 1] >= p_opponent).astype(np.int64)
    payoff = matrix[own, other]  # [n, T, 2]
    return Matches(own, other, payoff, rows)
