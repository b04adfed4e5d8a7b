"""Auction rules: payoffs, prices, ties, the seller's revenue, validation."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games.auction.rules import make_game
from sepo.games.base import CHANCE, SIMULTANEOUS, TERMINAL


def play(game, values, bids, tie_winner=None):
    state = game.new_initial_state()
    for v in values:
        state.apply_action(v)
    assert state.current_player() == SIMULTANEOUS
    state.apply_actions(bids)
    if state.current_player() == CHANCE and tie_winner is not None:
        assert {p for p, _ in state.chance_outcomes()} == set(game.rules.highest(bids))
        state.apply_action(tie_winner)
    return state.rounds()[-1]


def test_first_price_winner_pays_own_bid_and_may_lose():
    game = make_game("rigorous", rule="first")
    result = play(game, (0, 1), (2, 1))  # values 2 and 4, bids 3 and 2: bidder 0 wins at 3
    assert result.payoffs == (-1.0, 0.0)
    assert result.third_party == {"seller": 3.0}


def test_second_price_winner_pays_the_other_bid():
    game = make_game("rigorous", rule="second")
    result = play(game, (1, 0), (2, 0))  # value 4 bids 3, other bids 1: pays 1
    assert result.payoffs == (3.0, 0.0)
    assert result.third_party == {"seller": 1.0}


def test_paper_clips_the_winners_loss_at_zero():
    game = make_game("paper")
    result = play(game, (0, 0), (2, 0))  # value 2 wins with bid 3
    assert result.payoffs == (0.0, 0.0)
    assert result.third_party == {"seller": 3.0}


def test_tie_goes_to_a_chance_node_among_the_tied():
    game = make_game("rigorous", bidders=3)
    result = play(game, (1, 1, 0), (1, 1, 0), tie_winner=1)
    assert result.payoffs == (0.0, 2.0, 0.0) and result.info["tie"]


def test_episode_ends_after_the_rounds():
    game = make_game("rigorous", rounds=2)
    state = game.new_initial_state()
    for _ in range(2):
        state.apply_action(0)
        state.apply_action(1)
        state.apply_actions((0, 2))
    assert state.current_player() == TERMINAL and len(state.rounds()) == 2


@pytest.mark.parametrize("rule", ["first", "second"])
@pytest.mark.parametrize("bidders", [2, 3])
def test_revenue_accounting_every_episode(rule, bidders):
    """Unclipped: seller revenue + bidders' payoffs = the winner's value, every round of every episode."""
    game = make_game(
        "rigorous",
        rule=rule,
        bidders=bidders,
        values="1,2.5,4",
        value_probs="0.2,0.5,0.3",
        bids="0.5,1,2,3.5",
    )
    rng = np.random.default_rng(7)
    for _ in range(200):
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.current_player() == CHANCE:
                outcomes = state.chance_outcomes()
                state.apply_action(outcomes[rng.choice(len(outcomes), p=[p for _, p in outcomes])][0])
            else:
                state.apply_actions(rng.integers(4, size=bidders))
        for result in state.rounds():
            allocated = result.info["values"][result.info["winner"]]
            assert sum(result.payoffs) + result.third_party["seller"] == pytest.approx(allocated)


@pytest.mark.parametrize("params, message", [
    ({"rounds": 0}, "--rounds must be a positive integer"),
    ({"rounds": -3}, "--rounds must be a positive integer"),
    ({"bidders": 1}, "--bidders must be an integer >= 2"),
    ({"bidders": 0}, "--bidders must be an integer >= 2"),
    ({"bids": "1,3,2"}, "--bids must be strictly increasing"),
    ({"bids": "1,1,2"}, "--bids must be strictly increasing"),
    ({"values": "2,x"}, "--values must be comma-separated numbers"),
    ({"values": "2,4", "value_probs": "0.5,0.6"}, "--value-probs must be positive and sum to 1"),
    ({"values": "2,4", "value_probs": "1"}, "--value-probs has 1 entries for 2 values"),
    ({"rule": "third"}, "--rule must be one of first, second"),
    ({"pool_version": "abc"}, "--pool-version must be one of"),
])
def test_bad_parameters_are_one_line_errors(params, message):
    with pytest.raises(SepoError, match=message) as error:
        make_game("rigorous", **params)
    assert "\n" not in str(error.value)


def test_paper_protocol_needs_three_bids():
    with pytest.raises(SepoError, match="exactly 3 bids"):
        make_game("paper", bids="1,2,3,4")


def test_info_key_keeps_the_last_memory_rounds():
    game = make_game("rigorous", memory=1)
    state = game.new_initial_state()
    for values, bids in (((0, 1), (0, 2)), ((1, 0), (2, 1))):
        for v in values:
            state.apply_action(v)
        state.apply_actions(bids)
    state.apply_action(1)
    state.apply_action(0)
    assert state.decision(0).info_key == "r3v4|4:3-2W"
    assert state.decision(1).info_key == "r3v2|2:2-3L"
    assert len(state.decision(0).observation["history"]) == 2
