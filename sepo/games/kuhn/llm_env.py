"""Kuhn poker as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent, drawn on-policy: hands are played between the
agent's current action table and pool opponents, and every agent decision met becomes a group
(G completions of the same prompt, sharing the true hidden state: both cards, the seat, the
opponent). A completion's payoff to go is the exact expectation of the rest of the hand given
its action (the continuation follows the agent's table and the opponent's bot), a variance-free
stand-in for sampling the rest of the hand.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.games.kuhn.rules import INFO_STATES, is_hand_over, seat0_payoff, seat_to_act
from sepo.games.kuhn.exact import AFTER_PASS, FACING_BET, PASS_BET, ROOT
from sepo.games.kuhn.rollouts import play_hands

_HISTORY_OF_ROW = {int(r): "" for r in ROOT} | {int(r): "p" for r in AFTER_PASS} | {int(r): "b" for r in FACING_BET} | {int(r): "pb" for r in PASS_BET}


@dataclass(frozen=True)
class DecisionContext:
    """One agent decision with the hidden state the environment knows."""

    info_row: int
    seat: int
    agent_card: int
    opponent_card: int
    opponent_index: int

    @property
    def info_key(self) -> str:
        return INFO_STATES[self.info_row]

    @property
    def history(self) -> str:
        return _HISTORY_OF_ROW[self.info_row]


def sample_decisions(agent: np.ndarray, opponents: np.ndarray, hands: int, rng: np.random.Generator) -> list[DecisionContext]:
    """Play `hands` hands (opponent, seat, deal uniform) and return every agent decision met, so
    decisions arrive with their on-policy visitation frequency."""
    from sepo.games.kuhn.rules import DEALS

    opponent = rng.integers(len(opponents), size=hands)
    seat = rng.integers(2, size=hands)
    deal = rng.integers(6, size=hands)
    played = play_hands(agent, opponents, opponent, seat, deal, rng.random((hands, 3)))
    contexts = []
    for n in range(hands):
        cards = DEALS[deal[n]]
        for k in range(played.states.shape[1]):
            if played.mask[n, k]:
                contexts.append(DecisionContext(int(played.states[n, k]), int(seat[n]), cards[seat[n]], cards[1 - seat[n]], int(opponent[n])))
    return contexts


def action_outcomes(agent: np.ndarray, opponent: np.ndarray, context: DecisionContext, action: int) -> tuple[float, float]:
    """(expected payoff to the agent, probability the agent loses 2 chips) for the rest of the
    hand after taking `action` at `context`."""
    cards = (context.agent_card, context.opponent_card) if context.seat == 0 else (context.opponent_card, context.agent_card)
    return _continue(agent, opponent, context.seat, cards, context.history + "pb"[action])


def _continue(agent, opponent, seat, cards, history) -> tuple[float, float]:
    if is_hand_over(history):
        payoff = seat0_payoff(history, *cards) * (1 if seat == 0 else -1)
        return float(payoff), float(payoff <= -2)
    actor_is_agent = seat_to_act(history) == seat
    table = agent if actor_is_agent else opponent
    card = cards[seat_to_act(history)]
    probs = table[INFO_STATES.index(f"{card}{history}")]
    value = loss = 0.0
    for action in (0, 1):
        if probs[action] > 0:
            v, l = _continue(agent, opponent, seat, cards, history + "pb"[action])
            value += probs[action] * v
            loss += probs[action] * l
    return value, loss
