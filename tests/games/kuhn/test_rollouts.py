"""The vectorised Kuhn hand sampler agrees with the rules of sepo.games.kuhn.

(a)+(c): every sampled hand is replayed through KuhnState with the same uniforms (the k-th move
of a hand bets iff uniform k < P(bet)): the payoff, the agent's decision states, actions and
mask must match. (b): the empirical mean payoff converges to kuhn_exact's expectation.
"""
from __future__ import annotations

import numpy as np
import pytest

from sepo.games.kuhn import exact as ke
from sepo.games.kuhn.bots import BOTS
from sepo.games.kuhn.rollouts import play_hands
from sepo.games.kuhn.rules import DEALS, INFO_STATES, KuhnPoker, facing_bet, seat0_payoff


def policies(n, seed, concentration=0.6):
    return np.random.default_rng(seed).dirichlet([concentration, concentration], size=(n, 12))


OPPONENTS = np.stack(
    [BOTS[name]().table for name in ("NashApprox", "TightPassive", "LooseAggressive", "AlwaysBet")]
    + list(policies(2, seed=3))
)


def replay(agent, opponent, agent_seat, deal_index, uniforms):
    """One hand through the State API; returns the agent's payoff, decisions and the history."""
    state = KuhnPoker(hands=1).new_initial_state()
    state.apply_action(deal_index)
    decisions, history = [], ""
    while not state.is_terminal():
        player = state.current_player()  # one hand: player p sits in seat p
        decision = state.decision(player)
        row = INFO_STATES.index(decision.info_key)
        table = agent if player == agent_seat else opponent
        action = int(uniforms[len(history)] < table[row, 1])
        if player == agent_seat:
            decisions.append((row, action))
        state.apply_action(action)
        history += "pb"[action]
    payoff = state.returns()[agent_seat]
    cards = DEALS[deal_index]
    seat0 = seat0_payoff(history, *cards)
    assert payoff == (seat0 if agent_seat == 0 else -seat0)
    return payoff, decisions, history


def test_sampled_hands_follow_the_rules_hand_by_hand():
    rng = np.random.default_rng(0)
    n = 1500
    histories = set()
    for agent in list(policies(3, seed=1)) + [
        ke.nash_policy(0.2),
        BOTS["AlwaysBet"]().table,
        BOTS["AlwaysPass"]().table,
    ]:
        opponent_index = rng.integers(len(OPPONENTS), size=n)
        agent_seat = rng.integers(2, size=n)
        deal_index = rng.integers(6, size=n)
        uniforms = rng.random((n, 3))
        hands = play_hands(agent, OPPONENTS, opponent_index, agent_seat, deal_index, uniforms)
        assert hands.states.shape == hands.actions.shape == hands.mask.shape == (n, 2)
        assert hands.payoff.shape == (n,)
        assert hands.mask.dtype == bool
        for i in range(n):
            payoff, decisions, history = replay(
                agent, OPPONENTS[opponent_index[i]], agent_seat[i], deal_index[i], uniforms[i]
            )
            histories.add(history)
            # (a) the payoff is the rules' payoff
            assert hands.payoff[i] == payoff, (i, history)
            # (c) the agent's decisions, in order, are exactly the masked entries
            valid = np.flatnonzero(hands.mask[i])
            assert valid.tolist() == list(range(len(decisions))), (i, history)
            sampled = [(int(hands.states[i, k]), int(hands.actions[i, k])) for k in valid]
            assert sampled == decisions, (i, history)
            folds = sum(1 for row, action in decisions if facing_bet(INFO_STATES[row][1:]) and action == 0)
            assert hands.folds[i] == folds
    assert histories == {"pp", "bp", "bb", "pbp", "pbb"}


def test_agent_decision_counts_by_seat():
    """Seat 0 decides once or twice (twice only after pass-bet); seat 1 exactly once."""
    rng = np.random.default_rng(1)
    n = 20000
    agent = policies(1, seed=2)[0]
    seat = rng.integers(2, size=n)
    hands = play_hands(agent, OPPONENTS, rng.integers(len(OPPONENTS), size=n), seat, rng.integers(6, size=n),
                       rng.random((n, 3)))
    count = hands.mask.sum(1)
    assert np.all(count[seat == 1] == 1)
    assert set(np.unique(count[seat == 0])) == {1, 2}
    first = hands.states[:, 0]
    assert np.all(np.isin(first[seat == 0], ke.ROOT))
    assert np.all(np.isin(first[seat == 1], np.concatenate([ke.AFTER_PASS, ke.FACING_BET])))
    second = hands.states[hands.mask[:, 1], 1]
    assert np.all(np.isin(second, ke.PASS_BET))
    assert set(np.unique(hands.payoff)) <= {-2.0, -1.0, 1.0, 2.0}


CASES = {
    "uniform-seat": None,
    "seat-0": 0,
    "seat-1": 1,
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("opponent_name", ["NashApprox", "LooseAggressive"])
def test_mean_payoff_converges_to_the_exact_expectation(case, opponent_name):
    """(b) 200k hands: the mean is within 4 standard errors of kuhn_exact's expectation."""
    rng = np.random.default_rng([list(CASES).index(case), len(opponent_name)])
    n = 200_000
    agent = policies(1, seed=7)[0]
    opponent = BOTS[opponent_name]().table
    seat_value = CASES[case]
    seat = rng.integers(2, size=n) if seat_value is None else np.full(n, seat_value)
    hands = play_hands(
        agent, opponent[None], np.zeros(n, dtype=int), seat, rng.integers(6, size=n), rng.random((n, 3))
    )
    if seat_value is None:
        exact = ke.head_to_head(agent, opponent)
    elif seat_value == 0:
        exact = ke.expected_value(agent, opponent)
    else:
        exact = -ke.expected_value(opponent, agent)
    standard_error = hands.payoff.std() / np.sqrt(n)
    assert abs(hands.payoff.mean() - exact) < 4 * standard_error, (hands.payoff.mean(), exact, standard_error)


def test_mean_payoff_against_a_pool_mixture_converges():
    rng = np.random.default_rng(11)
    n = 200_000
    agent = policies(1, seed=8)[0]
    weights = np.array([0.5, 0.2, 0.2, 0.05, 0.05, 0.0])
    index = rng.choice(len(OPPONENTS), size=n, p=weights)
    hands = play_hands(
        agent, OPPONENTS, index, rng.integers(2, size=n), rng.integers(6, size=n), rng.random((n, 3))
    )
    exact = float(weights @ ke.head_to_head(agent, OPPONENTS))
    standard_error = hands.payoff.std() / np.sqrt(n)
    assert abs(hands.payoff.mean() - exact) < 4 * standard_error


def test_decision_state_frequencies_match_external_and_own_reach():
    """Visits to each agent information state per hand converge to own_reach · external_reach."""
    rng = np.random.default_rng(12)
    n = 200_000
    agent = policies(1, seed=9)[0]
    pool = OPPONENTS[:3]
    hands = play_hands(agent, pool, rng.integers(3, size=n), rng.integers(2, size=n), rng.integers(6, size=n),
                       rng.random((n, 3)))
    visits = np.zeros(12)
    for k in range(2):
        np.add.at(visits, hands.states[hands.mask[:, k], k], 1.0)
    frequency = visits / n
    expected = ke.own_reach(agent) * ke.external_reach(pool)
    standard_error = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(frequency - expected) < 4 * standard_error + 1e-12)
