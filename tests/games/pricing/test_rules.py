"""The pricing game: institutions, information states, text, parameters."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games import load_game
from sepo.games.pricing.text import strict_parse


def test_payoffs_are_profits_and_consumers_are_a_third_party():
    game = load_game("pricing")
    state = game.new_initial_state()
    state.apply_actions([3, 7])
    result = state.rounds()[0]
    prices = game.grid[[3, 7]]
    assert result.payoffs == pytest.approx(tuple(game.market.profits(prices)))
    assert result.third_party["consumers"] == pytest.approx(float(game.market.consumer_surplus(prices)))
    assert result.info["delta"] == pytest.approx(float(game.market.collusion_index(prices)))


def test_sanction_takes_the_expected_fine_above_the_threshold():
    game = load_game("pricing", sanction_threshold=1.7, fine=0.1, detection=0.4)
    fines = game.fines(np.array([[1.66, 1.74], [1.78, 1.82]]))
    assert fines == pytest.approx(np.array([[0.0, 0.04], [0.04, 0.04]]))


def test_leniency_reporter_pays_less_and_convicts_the_others():
    game = load_game("pricing", sanction_threshold=1.7, fine=0.1, detection=0.4, leniency=0.5)
    # both above the threshold, 1.78 the unique lowest: it reports (half of 0.04), the other is fined for
    # certain
    assert game.fines(np.array([1.78, 1.82])) == pytest.approx([0.02, 0.1])
    # no unique lowest: nobody reports
    assert game.fines(np.array([1.78, 1.78])) == pytest.approx([0.04, 0.04])
    # one firm above: no cartel period
    assert game.fines(np.array([1.66, 1.82])) == pytest.approx([0.0, 0.04])


def test_cap_removes_the_prices_above_it():
    game = load_game("pricing", cap=1.7)
    assert game.grid.max() <= 1.7 and game.k == int((load_game("pricing").grid <= 1.7).sum())
    assert game.benchmarks == load_game("pricing").benchmarks  # the yardstick does not move
    with pytest.raises(SepoError, match="below every grid price"):
        load_game("pricing", cap=1.0)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"firms": 1}, "firms"),
        ({"detection": 1.5}, "detection"),
        ({"grid": "1.5,1.4"}, "increasing"),
        ({"cost": "1,1,1"}, "one per firm"),
        ({"mu": -1.0}, "mu"),
        ({"leniency": 2.0}, "leniency"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, match):
    with pytest.raises(SepoError, match=match):
        load_game("pricing", **params)


def test_information_state_keeps_the_last_period_and_the_scores_are_the_seats():
    game = load_game("pricing", cost="1,1.2")
    state = game.new_initial_state()
    state.apply_actions([0, 14])
    state.apply_actions([5, 6])
    d0, d1 = state.decision(0), state.decision(1)
    assert d0.info_key == f"{game.action_names[5]}-{game.action_names[6]}"
    assert d1.observation["history"] == ((14, 0), (6, 5))
    payoffs = [r.payoffs for r in state.rounds()]
    assert d1.observation["my_score"] == pytest.approx(sum(p[1] for p in payoffs))
    assert d0.observation["rival_score"] == pytest.approx(sum(p[1] for p in payoffs))


def test_three_firms_play_and_have_no_exact_solver():
    from sepo.metrics.exact import NoExactSolver, exact_solver

    game = load_game("pricing", firms=3)
    state = game.new_initial_state()
    state.apply_actions([1, 2, 3])
    assert state.decision(1).observation["history"] == ((2, (1, 3)),)
    with pytest.raises(NoExactSolver, match="two firms"):
        exact_solver(game)


def test_strict_parser():
    names = ("1.43", "1.47", "1.51")
    assert strict_parse("I will match.\n1.47", names).action == 1
    assert strict_parse("Price: $1.51", names).action == 2
    assert strict_parse("1.5", names).status == "illegal"
    assert strict_parse("1.47 or 1.51", names).status == "ambiguous"
    assert strict_parse("1.47\nhold", names).status == "no_action"
    assert strict_parse("<think>1.43</think>\n1.470", names).action == 1


def test_prompts_state_the_institutions():
    game = load_game("pricing", sanction_threshold=1.7, fine=0.1, detection=0.4, leniency=0.5, cap=1.9)
    text = game.text.system_prompt()
    assert "price cap of 1.90" in text and "above 1.70" in text and "Leniency" in text
    assert "Allowed prices: 1.43" in text


@pytest.mark.parametrize(
    "params, match",
    [
        ({"fine": 0.1}, "--fine 0.1 does nothing without --sanction-threshold"),
        ({"leniency": 0.5}, "--leniency 0.5 does nothing without --sanction-threshold"),
        (
            {"detection": 0.5, "fine": 0.1},
            "--fine 0.1 and --detection 0.5 do nothing without --sanction-threshold",
        ),
        ({"sanction_threshold": 1.6, "leniency": 0.5}, "--leniency 0.5 does nothing at --fine 0"),
        ({"sanction_threshold": 1.6, "detection": 0.5}, "--detection 0.5 does nothing at --fine 0"),
        (
            {"sanction_threshold": 1.6},
            r"--sanction-threshold 1.6 does nothing at --fine 0 \(no fine to pay\); give --fine",
        ),
        ({"cap": 99}, "--cap 99 caps nothing: the grid's highest price is 1.97"),
        ({"cap": 1.97}, "--cap 1.97 caps nothing: the grid's highest price is 1.97"),
        (
            {"sanction_threshold": 99, "fine": 1},
            r"--sanction-threshold 99 sanctions nothing: no price is above it "
            r"\(the grid's highest price is 1.97\)",
        ),
        (
            {"sanction_threshold": 1.97, "fine": 1},
            "--sanction-threshold 1.97 sanctions nothing: no price is above it",
        ),
        (
            {"sanction_threshold": 1.72, "fine": 1, "cap": 1.7},
            r"--sanction-threshold 1.72 sanctions nothing: no price is above it "
            r"\(the grid's highest price is 1.70",
        ),
        ({"grid": "1.5,1.6", "prices": 5}, "--prices 5 does not apply with it"),
    ],
)
def test_a_setting_that_would_change_nothing_is_refused(params, match):
    """Each of these played the market without any institution (or the grid without --prices)."""
    with pytest.raises(SepoError, match=match):
        load_game("pricing", "rigorous", **params)


def test_the_settings_that_act_are_accepted_and_effective_params_drop_the_others():
    from sepo.games.pricing.rules import effective_params

    game = load_game("pricing", "rigorous", sanction_threshold=1.6, fine=0.1, detection=0.5, leniency=0.5)
    assert game.fines(np.array([[1.9, 1.5]]))[0, 0] == pytest.approx(0.05)
    assert load_game("pricing", "rigorous", grid="1.5,1.6").k == 2
    assert effective_params({"fine": 0.1, "rounds": 3}) == {"rounds": 3}
    # a threshold at fine 0 is a search grid's no-fine point: the market without a sanction
    assert effective_params({"sanction_threshold": 1.6, "fine": 0.0, "leniency": 0.5}) == {}
    assert effective_params({"sanction_threshold": 1.6, "rounds": 3}) == {"rounds": 3}
    # a cap or a threshold that no grid price reaches: the market without it
    assert effective_params({"cap": 99, "rounds": 3}) == {"rounds": 3}
    assert effective_params({"sanction_threshold": 99, "fine": 1.0}) == {}
    assert effective_params({"cap": 1.7, "sanction_threshold": 1.72, "fine": 1.0}) == {"cap": 1.7}
    kept = {"sanction_threshold": 1.6, "fine": 0.1, "leniency": 0.5, "cap": 1.9}
    assert effective_params(kept) == kept
    assert effective_params({"cap": "bogus"}) == {"cap": "bogus"}  # the game's own check says why


def test_game_key_reads_the_game_as_it_acts_on_the_grid():
    """Settings that offer the same prices and charge the same expected fines make one game."""
    from sepo.games.pricing.rules import game_key

    def same(a, b):
        return game_key({"prices": 5, **a}) == game_key({"prices": 5, **b})

    grid = load_game("pricing", prices=5).grid  # 1.43 1.56 1.70 1.83 1.97
    between = (grid[2] + grid[3]) / 2
    assert same({"sanction_threshold": 1.6}, {"sanction_threshold": 1.7})  # no fine: no sanction
    assert same({"cap": 50}, {"cap": 99}) and same({"cap": 99}, {})
    assert same({"sanction_threshold": grid[2], "fine": 0.1}, {"sanction_threshold": between, "fine": 0.1})
    # no leniency: half the detection of twice the fine is the same expected fine
    assert same({"sanction_threshold": 1.6, "fine": 0.2, "detection": 0.5},
                {"sanction_threshold": 1.6, "fine": 0.1})
    assert not same({"sanction_threshold": 1.6, "fine": 0.1}, {"sanction_threshold": 1.75, "fine": 0.1})
    assert not same({"cap": 1.9}, {"cap": 1.75}) and not same({"cap": 1.9}, {})
    assert not same({"sanction_threshold": 1.6, "fine": 0.1}, {"sanction_threshold": 1.6, "fine": 0.2})
    assert not same({"rounds": 3}, {"rounds": 4})
