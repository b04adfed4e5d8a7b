"""Regret of play histories: the chapter's router table, joint-action histories, CSV errors."""
import numpy as np
import pytest

from sepo.analysis.equilibria import correlation_gaps
from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.normal_form import NormalFormGame, load_game
from sepo.analysis.regret import empirical_joint, history_regret, load_history, player_regret


def test_router_table_external_regret_zero_swap_regret_one_with_g_to_s(examples):
    """Three rounds, actions G/S/R: received 2, best fixed action S also 2, so external regret 0;
    rewriting the recommendation G into S raises the total to 3: swap regret 1."""
    report = load_history(examples / "router_history.csv")
    (router,) = report.players
    assert router.rounds == 3
    assert router.received == 2
    assert router.best_fixed_action == "S" and router.best_fixed_total == 2
    assert router.external_regret == 0
    assert router.swap_regret == 1
    assert router.swap_map == {"G": "S"}
    assert report.cce_gap == 0 and report.ce_gap == pytest.approx(1 / 3)


def test_router_table_from_arrays():
    counterfactual = [[0, 1, 0], [0, 1, 0], [1, 0, 1]]
    result = player_regret("router", ("G", "S", "R"), [0, 1, 2], counterfactual)
    assert (result.external_regret, result.swap_regret, result.swap_map) == (0, 1, {"G": "S"})


def test_chapter_regret_arithmetic_eight_minus_six():
    """Best fixed action earns 8 over three rounds, the policy 6: regret 2; earning 7 cuts it to 1."""
    counterfactual = [[3, 2], [3, 2], [2, 2]]  # the fixed action a earns 3 + 3 + 2 = 8
    # played 2 + 2 + 2 = 6
    assert player_regret("p", ("a", "b"), [1, 1, 1], counterfactual).external_regret == 2
    # played 3 + 2 + 2 = 7
    assert player_regret("p", ("a", "b"), [0, 1, 1], counterfactual).external_regret == 1


def test_history_regret_equals_the_gaps_of_the_empirical_distribution():
    """Per round, max external regret is the empirical CCE gap and max swap regret the CE gap."""
    rng = np.random.default_rng(4)
    for _ in range(10):
        game = NormalFormGame.from_tensor(rng.normal(size=(3, 2, 3, 2)))
        history = np.stack([rng.integers(0, k, size=50) for k in game.shape], axis=1)
        report = history_regret(game, history)
        gaps = correlation_gaps(game, empirical_joint(game, history))
        assert report.ce_gap == pytest.approx(gaps.ce_gap, abs=1e-12)
        assert report.cce_gap == pytest.approx(gaps.cce_gap, abs=1e-12)
        for i, player in enumerate(report.players):
            assert player.swap_regret / 50 == pytest.approx(gaps.ce[i], abs=1e-12)
            assert player.swap_regret >= max(player.external_regret, 0.0) - 1e-12


def test_joint_action_history_needs_and_uses_the_game(examples):
    game = load_game(examples / "chicken.yaml")
    report = load_history(examples / "chicken_history.csv", game)
    assert [p.player for p in report.players] == ["a", "b"]
    assert report.players[0].rounds == 8
    with pytest.raises(AnalysisInputError, match="--game"):
        load_history(examples / "chicken_history.csv")


def test_several_players_in_one_counterfactual_table(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("player,action,payoff_if_x,payoff_if_y\nann,x,1,0\nbob,y,0,2\nann,y,0,1\nbob,y,5,0\n")
    report = load_history(path)
    ann, bob = report.players
    # external regret can be negative
    assert (ann.player, ann.external_regret, ann.swap_regret) == ("ann", -1, 0)
    assert (bob.player, bob.external_regret, bob.swap_regret, bob.swap_map) == ("bob", 3, 3, {"y": "x"})


BAD = {
    "unknown action": (
        "action,payoff_if_G,payoff_if_S\nG,0,1\nX,1,0\n",
        "row 3 column action",
        "unknown action 'X'",
    ),
    "non-numeric payoff": (
        "action,payoff_if_G,payoff_if_S\nG,0,1\nS,1,abc\n",
        "row 3 column payoff_if_S",
        "expected a number",
    ),
    "received disagrees": (
        "action,payoff_if_G,payoff_if_S,received\nG,0,1,1\n",
        "row 2 column received",
        "differs",
    ),
    "no action column": ("played,payoff_if_G\nG,0\n", "columns", "`action`"),
    "too many cells": ("action,payoff_if_G\nG,0,7\n", "row 2", "more cells"),
    "no rows": ("action,payoff_if_G\n", "rows", "no rounds"),
    "empty": ("", "header", "empty file"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_histories_name_the_file_row_and_column(tmp_path, case):
    body, field, words = BAD[case]
    path = tmp_path / "h.csv"
    path.write_text(body)
    with pytest.raises(AnalysisInputError) as caught:
        load_history(path)
    assert str(caught.value).startswith(f"{path}: {field}: ") and words in str(caught.value)


def test_unknown_action_in_a_joint_history(tmp_path, examples):
    path = tmp_path / "h.csv"
    path.write_text("a,b\ndare,swerve\n")
    with pytest.raises(
        AnalysisInputError, match=r"row 2 column b: unknown action 'swerve'; known: dare, yield"
    ):
        load_history(path, load_game(examples / "chicken.yaml"))
    path.write_text("a,c\ndare,dare\n")
    with pytest.raises(AnalysisInputError, match="missing a column for player 'b'"):
        load_history(path, load_game(examples / "chicken.yaml"))
