"""Split bargaining's rules: payoffs, breakdowns, information states and parameter checks."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games import load_game


def _play(game, demands):
    state = game.new_initial_state()
    for d0, d1 in demands:
        state.apply_actions((d0 - game.min_demand, d1 - game.min_demand))
    return state


def test_paper_rules_deal_and_breakdown():
    game = load_game("negotiation", "paper")
    assert (game.pie, game.min_demand, game.max_demand, game.rounds) == (10, 1, 9, 4)
    state = _play(game, [(6, 4), (7, 7), (5, 5), (1, 9)])
    assert state.is_terminal()
    assert [r.payoffs for r in state.rounds()] == [(6, 4), (0, 0), (5, 5), (1, 9)]
    assert [r.info["deal"] for r in state.rounds()] == [True, False, True, True]
    assert state.returns() == [12, 18]


def test_breakdown_cost_and_other_pies():
    game = load_game("negotiation", pie=20, min_demand=0, max_demand=20, rounds=2, breakdown_cost=1.5)
    state = _play(game, [(12, 9), (12, 8)])
    assert [r.payoffs for r in state.rounds()] == [(-1.5, -1.5), (12, 8)]
    assert game.num_demands == 21 and game.action_names[0] == "0"


def test_decisions_show_the_history_from_each_side():
    game = load_game("negotiation", memory="full")
    state = _play(game, [(6, 4), (8, 3)])
    mine, theirs = state.decision(0), state.decision(1)
    assert mine.info_key == "6-4,8-3" and theirs.info_key == "4-6,3-8"
    assert mine.observation["demands"] == ((6, 4), (8, 3)) and mine.observation["history"] == ((5, 3), (7, 2))
    assert mine.observation["my_score"] == 6 and mine.observation["opponent_score"] == 4
    assert mine.observation["deals"] == (True, False)
    assert load_game("negotiation").new_initial_state().decision(0).info_key == "start"
    short = _play(load_game("negotiation"), [(6, 4), (8, 3)])  # memory 1 by default
    assert short.decision(0).info_key == "8-3"


def test_info_keys_cover_every_history():
    game = load_game("negotiation", rounds=3, memory="full", pie=4, max_demand=3)
    keys = game.info_keys()
    assert len(keys) == 1 + 9 + 81 and len(set(keys)) == len(keys)
    assert len(load_game("negotiation").info_keys()) == 1 + 81


def test_scale_per_version():
    assert load_game("negotiation", "paper").payoff_scale == pytest.approx(0.6)
    assert load_game("negotiation", "paper", paper_version="code").payoff_scale == pytest.approx(1.0)
    assert load_game("negotiation").payoff_scale == pytest.approx(0.6)
    assert load_game("negotiation", pie=20, max_demand=19).payoff_scale == pytest.approx(0.3)


@pytest.mark.parametrize("params, message", [
    ({"max_demand": 11}, "does not fit the pie of 10"),
    ({"min_demand": 6}, "never allows a deal"),
    ({"min_demand": 5, "max_demand": 4}, "is empty"),
    ({"pie": 0}, "pie must be a whole number >= 1"),
    ({"rounds": 0}, "rounds must be a whole number >= 1"),
    ({"min_demand": -1}, "min_demand must be a whole number >= 0"),
    ({"breakdown_cost": -1.0}, "breakdown_cost must be a finite number >= 0"),
    ({"breakdown_cost": float("nan")}, "breakdown_cost must be a finite number >= 0"),
    ({"memory": -2}, "memory"),
])
def test_bad_parameters_are_refused(params, message):
    with pytest.raises(SepoError, match=message):
        load_game("negotiation", **params)


def test_paper_version_only_under_the_paper_protocol():
    with pytest.raises(SepoError, match="applies to --protocol paper only"):
        load_game("negotiation", paper_version="code")
    with pytest.raises(SepoError, match="unknown paper version"):
        load_game("negotiation", "paper", paper_version="final")
    with pytest.raises(SepoError, match="reads single digits 1-9"):
        load_game("negotiation", "paper", pie=20, max_demand=12)


def test_stage_payoffs_match_the_rules():
    game = load_game("negotiation", breakdown_cost=2.0)
    stage = game.stage_game()
    for a in range(game.num_demands):
        for o in range(game.num_demands):
            state = game.new_initial_state()
            state.apply_actions((a, o))
            assert (stage.agent[a, o], stage.opponent[a, o]) == state.rounds()[0].payoffs
    assert np.array_equal(stage.agent, stage.opponent.T)
