"""Vectorised sampling of Kuhn hands between a tabular agent and tabular opponents.

The exact trainer plays tens of thousands of hands a second this way; the rules are those of
`sepo.games.kuhn.rules` (a test checks the two agree hand by hand).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.games.kuhn.exact import AFTER_PASS, FACING_BET, PASS_BET, ROOT
from sepo.games.kuhn.rules import DEALS

_DEALS = np.array(DEALS)


@dataclass
class KuhnHands:
    """A batch of played hands from the agent's point of view.

    `states[n, k]` / `actions[n, k]` are the agent's k-th decision (row in INFO_STATES, action id),
    valid where `mask[n, k]`; `payoff[n]` is the agent's net chips."""

    states: np.ndarray
    actions: np.ndarray
    mask: np.ndarray
    payoff: np.ndarray

    @property
    def folds(self) -> np.ndarray:
        """Number of FOLD decisions by the agent (action 0 while facing a bet)."""
        facing = np.isin(self.states, np.concatenate([FACING_BET, PASS_BET]))
        return (self.mask & facing & (self.actions == 0)).sum(1)


def play_hands(
    agent: np.ndarray, opponents: np.ndarray, opponent_index, agent_seat, deal_index, uniforms
) -> KuhnHands:
    """Play one hand per row. `agent` [12,2]; `opponents` [K,12,2]; per row: the opponent index,
    the agent's seat, the deal index (into DEALS), and three uniforms in [0,1) for the moves."""
    n = len(agent_seat)
    tables = np.stack([np.broadcast_to(agent, opponents[opponent_index].shape), opponents[opponent_index]])
    rows = np.arange(n)
    seat0_table = np.where((agent_seat == 0)[:, None, None], tables[0], tables[1])
    seat1_table = np.where((agent_seat == 0)[:, None, None], tables[1], tables[0])
    card0, card1 = _DEALS[deal_index, 0], _DEALS[deal_index, 1]

    opens = uniforms[:, 0] < seat0_table[rows, ROOT[card0], 1]
    second_state = np.where(opens, FACING_BET[card1], AFTER_PASS[card1])
    second = uniforms[:, 1] < seat1_table[rows, second_state, 1]
    third_needed = ~opens & second
    third = third_needed & (uniforms[:, 2] < seat0_table[rows, PASS_BET[card0], 1])

    win = np.where(card0 > card1, 1.0, -1.0)
    seat0_payoff = np.select(
        [opens & ~second, opens & second, ~opens & ~second, third_needed & ~third],
        [np.ones(n), 2 * win, win, -np.ones(n)],
        default=2 * win,
    )

    agent_first = agent_seat == 0
    states = np.stack([np.where(agent_first, ROOT[card0], second_state), PASS_BET[card0]], axis=1)
    actions = np.stack([np.where(agent_first, opens, second), third], axis=1).astype(int)
    mask = np.stack([np.ones(n, bool), agent_first & third_needed], axis=1)
    payoff = np.where(agent_first, seat0_payoff, -seat0_payoff)
    return KuhnHands(states, actions, mask, payoff)
