"""Kuhn poker episodes (sepo.games.kuhn) replayed hand by hand in OpenSpiel's kuhn_poker.

Every hand of a random episode is dealt and played in both engines: the acting seat, legal
actions, information-state strings and the hand's returns must agree, and the episode must
alternate seats (player 0 is seat 0 in hand 1, seat 1 in hand 2, ...).
"""
from __future__ import annotations

import numpy as np
import pyspiel
import pytest

from sepo.games.base import CHANCE, TERMINAL
from sepo.games.kuhn.rules import (
    BET,
    DEALS,
    INFO_STATES,
    PASS,
    KuhnPoker,
    action_names,
    is_hand_over,
    seat0_payoff,
    seat_to_act,
)

OS_GAME = pyspiel.load_game("kuhn_poker")


def play_random_episode(game: KuhnPoker, rng: np.random.Generator, bet_probability: float = 0.5):
    """Play one episode with random deals and actions, replaying each hand in OpenSpiel.

    Returns the sepo state and, per hand, (deal, history, player-0 seat, OpenSpiel returns)."""
    state = game.new_initial_state()
    hands = []
    player0_net = 0.0
    prior = []  # player 0's payoff in earlier hands
    for hand_index in range(game.hands):
        assert state.current_player() == CHANCE
        assert state.is_chance_node() and not state.is_terminal()
        outcomes = state.chance_outcomes()
        assert [o for o, _ in outcomes] == list(range(6))
        assert sum(p for _, p in outcomes) == pytest.approx(1.0)
        deal = int(rng.integers(6))
        state.apply_action(deal)
        cards = DEALS[deal]

        reference = OS_GAME.new_initial_state()
        reference.apply_action(cards[0])  # OpenSpiel deals player 0 (seat 0) first
        reference.apply_action(cards[1])

        history = ""
        while not reference.is_terminal():
            seat = reference.current_player()
            player = state.current_player()
            # alternating seats: in hand h (0-based) player p sits in seat (p + h) % 2
            assert player == (seat + hand_index) % 2
            assert state.seat_of(player) == seat
            assert state.player_in_seat(seat) == player
            assert state.acting_players() == [player]
            decision = state.decision(player)
            assert decision.info_key == reference.information_state_string(seat)
            assert decision.info_key in INFO_STATES
            assert list(decision.legal_actions) == reference.legal_actions() == [PASS, BET]
            assert decision.action_names == (("FOLD", "CALL") if history.endswith("b") else ("PASS", "BET"))
            assert decision.player == player
            obs = decision.observation
            assert obs["hand"] == hand_index + 1 and obs["hands"] == game.hands
            assert obs["card"] == cards[seat] and obs["seat"] == seat
            assert obs["history"] == history and obs["facing_bet"] == history.endswith("b")
            mine = [p if player == 0 else -p for p in prior]
            assert obs["prior_wins"] == sum(p > 0 for p in mine)
            assert obs["prior_losses"] == sum(p < 0 for p in mine)
            assert obs["prior_net"] == pytest.approx(sum(mine))
            assert len(state.rounds()) == hand_index

            action = BET if rng.random() < bet_probability else PASS
            state.apply_action(action)
            reference.apply_action(action)
            history += "pb"[action]

        os_returns = reference.returns()
        hands.append((deal, history, hand_index % 2, os_returns))
        result = state.rounds()[-1]
        player0_seat = hand_index % 2
        # the hand's payoffs are OpenSpiel's returns, mapped from seats to players
        assert result.payoffs[0] == os_returns[player0_seat]
        assert result.payoffs[1] == os_returns[1 - player0_seat]
        assert result.payoffs[0] + result.payoffs[1] == 0
        assert result.payoffs[player0_seat] == seat0_payoff(history, *cards)
        assert result.info["history"] == history and tuple(result.info["cards"]) == cards
        assert result.info["player0_seat"] == player0_seat
        prior.append(result.payoffs[0])
        player0_net += result.payoffs[0]
    assert state.is_terminal() and state.current_player() == TERMINAL
    assert state.acting_players() == []
    assert state.returns() == pytest.approx([player0_net, -player0_net])
    return state, hands


@pytest.mark.parametrize("hands", [1, 2, 6, 9])
def test_random_episodes_agree_with_openspiel_hand_by_hand(hands):
    rng = np.random.default_rng(hands)
    game = KuhnPoker(hands=hands)
    histories = set()
    for bet_probability in (0.5, 0.2, 0.8):
        for _ in range(60):
            state, played = play_random_episode(game, rng, bet_probability)
            assert len(state.rounds()) == hands
            histories.update(h for _, h, _, _ in played)
    assert histories == {"pp", "bp", "bb", "pbp", "pbb"}  # every terminal history was exercised


def test_every_deal_and_history_pays_as_openspiel():
    for deal, (c0, c1) in enumerate(DEALS):
        for history in ("pp", "bp", "bb", "pbp", "pbb"):
            reference = OS_GAME.new_initial_state()
            reference.apply_action(c0)
            reference.apply_action(c1)
            for move in history:
                reference.apply_action("pb".index(move))
            assert reference.is_terminal()
            assert seat0_payoff(history, c0, c1) == reference.returns()[0]
            game = KuhnPoker(hands=1)
            state = game.new_initial_state()
            state.apply_action(deal)
            for move in history:
                state.apply_action("pb".index(move))
            assert state.is_terminal()
            assert state.returns() == reference.returns()


def test_seats_alternate_and_the_first_mover_alternates():
    game = KuhnPoker(hands=6)
    state = game.new_initial_state()
    for hand_index in range(6):
        state.apply_action(0)
        first = state.current_player()
        assert first == hand_index % 2  # player 0 opens hands 1, 3, 5; player 1 opens 2, 4, 6
        assert state.seat_of(0) == hand_index % 2 and state.seat_of(1) == (hand_index + 1) % 2
        assert state.decision(first).observation["seat"] == 0
        state.apply_action(PASS)
        assert state.current_player() == 1 - first
        state.apply_action(PASS)
    assert [r.info["player0_seat"] for r in state.rounds()] == [0, 1, 0, 1, 0, 1]


def test_paper_episode_per_hand_chip_accounting_is_zero_sum():
    """Six hands, deal J/Q every time, both check: the seat-1 player wins (Q beats J) each hand,
    i.e. player 1 in hands 1, 3, 5 and player 0 in hands 2, 4, 6: net zero each."""
    state = KuhnPoker(hands=6).new_initial_state()
    j_q = DEALS.index((0, 1))
    for _ in range(6):
        state.apply_action(j_q)
        state.apply_action(PASS)
        state.apply_action(PASS)
    assert [r.payoffs for r in state.rounds()] == [(-1.0, 1.0), (1.0, -1.0)] * 3
    assert state.returns() == [0.0, 0.0]


def test_per_hand_payoffs_of_each_line():
    # (deal as seat cards, history) -> payoff of seat 0
    cases = {((2, 0), "bb"): 2, ((0, 2), "bb"): -2, ((0, 2), "bp"): 1, ((2, 0), "pbp"): -1,
             ((1, 0), "pp"): 1, ((0, 1), "pp"): -1, ((2, 1), "pbb"): 2, ((1, 2), "pbb"): -2}
    for (cards, history), expected in cases.items():
        assert seat0_payoff(history, *cards) == expected


def test_illegal_actions_raise():
    state = KuhnPoker(hands=2).new_initial_state()
    state.apply_action(3)
    for bad in (2, -1, 7):
        with pytest.raises(ValueError):
            state.apply_action(bad)
    assert state.decision(state.current_player()).observation["history"] == ""  # unchanged


def test_illegal_chance_outcomes_raise_value_error():
    for bad in (-1, 6):
        state = KuhnPoker(hands=1).new_initial_state()
        with pytest.raises(ValueError):
            state.apply_action(bad)


def test_acting_on_a_terminal_state_raises():
    state = KuhnPoker(hands=1).new_initial_state()
    for action in (0, PASS, PASS):
        state.apply_action(action)
    assert state.is_terminal()
    with pytest.raises(ValueError):
        state.apply_action(0)


def test_invalid_hand_count_raises():
    for bad in (0, -3):
        with pytest.raises(ValueError):
            KuhnPoker(hands=bad)
    with pytest.raises(ValueError):
        KuhnPoker(text_style="fancy")


def test_clone_is_independent():
    game = KuhnPoker(hands=3)
    state = game.new_initial_state()
    state.apply_action(1)
    state.apply_action(BET)
    state.apply_action(BET)  # hand 1 over
    state.apply_action(4)
    state.apply_action(PASS)
    copy = state.clone()
    assert copy.current_player() == state.current_player()
    assert copy.decision(copy.current_player()) == state.decision(state.current_player())
    assert copy.rounds() == state.rounds()

    copy.apply_action(BET)
    copy.apply_action(BET)
    assert len(copy.rounds()) == 2 and len(state.rounds()) == 1
    assert state.decision(state.current_player()).observation["history"] == "p"
    state.apply_action(PASS)
    assert state.rounds()[-1].info["history"] == "pp"
    assert copy.rounds()[-1].info["history"] == "pbb"
    assert copy.returns() != state.returns()

    # mutating the original's rounds list does not touch the clone and vice versa
    before = copy.rounds()
    state.rounds().clear()
    assert copy.rounds() == before


def test_helpers():
    assert [seat_to_act(h) for h in ("", "p", "b", "pb")] == [0, 1, 1, 0]
    assert all(is_hand_over(h) for h in ("pp", "bp", "bb", "pbp", "pbb"))
    assert not any(is_hand_over(h) for h in ("", "p", "b", "pb"))
    assert action_names("") == action_names("p") == ("PASS", "BET")
    assert action_names("b") == action_names("pb") == ("FOLD", "CALL")
    assert len(DEALS) == 6 and len(set(DEALS)) == 6 and all(a != b for a, b in DEALS)
    assert KuhnPoker().payoff_scale == 1.5 and KuhnPoker().zero_sum
