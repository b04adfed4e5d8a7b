"""The OpenSpiel family: names, rules through pyspiel, the text view and its strict parser."""
from __future__ import annotations

import pytest

pytest.importorskip("pyspiel")

from sepo.errors import SepoError  # noqa: E402
from sepo.games import get_domain, load_game  # noqa: E402
from sepo.games.openspiel.rules import unique_names  # noqa: E402


def test_a_game_by_name_is_a_domain_named_canonically():
    domain = get_domain("openspiel:leduc_poker()")
    assert domain.name == "openspiel:leduc_poker" and domain is get_domain("openspiel:leduc_poker")
    assert get_domain("openspiel:goofspiel( num_cards=4 )").name == "openspiel:goofspiel(num_cards=4)"
    assert domain.zero_sum and domain.chance and domain.solver is not None


@pytest.mark.parametrize("name, words", [("openspiel:leduc_pokr", ["no game 'leduc_pokr'", "leduc_poker"]),
                                         ("openspiel:leduc_poker(players=x)", ["openspiel game"]),
                                         ("openspiel:a b;c", ["write NAME"]),
                                         ("nogame", ["or openspiel:GAME"])])
def test_bad_names_are_one_line(name, words):
    with pytest.raises(SepoError) as error:
        get_domain(name)
    assert "\n" not in str(error.value)
    for word in words:
        assert word in str(error.value)


def test_seats_rotate_and_returns_follow_seats():
    game = load_game("openspiel:kuhn_poker", rounds=2)
    state = game.new_initial_state()
    for deal in (0, 1):  # J to seat 0, Q to seat 1
        state.apply_action(deal)
    assert state.current_player() == 0 and state.decision(0).observation["seat"] == 0
    state.apply_action(1)  # bet
    state.apply_action(1)  # call: seat 1 (Q) wins 2
    assert state.rounds()[0].payoffs == (-2.0, 2.0)
    for deal in (0, 1):
        state.apply_action(deal)
    # player 1 opens the second play
    assert state.current_player() == 1 and state.decision(1).observation["seat"] == 0
    state.apply_action(1)
    state.apply_action(0)  # player 0 folds from seat 1
    assert state.rounds()[1].payoffs == (-1.0, 1.0) and state.is_terminal() and state.returns() == [-3.0, 3.0]


def test_prompt_lists_the_legal_moves_and_the_parser_takes_exactly_one():
    game = load_game("openspiel:leduc_poker")
    state = game.new_initial_state()
    state.apply_action(0)
    state.apply_action(3)
    decision = state.decision(0)
    assert decision.action_names == ("Call", "Raise")
    prompt = game.text.user_prompt(decision)
    assert "Legal moves: Call; Raise." in prompt and decision.info_key in prompt
    parse = game.text.parse
    assert parse("I think so.\nRaise", decision).action == 2
    assert parse("**call**", decision).action == 1
    assert parse("I will Raise.", decision).action == 2
    assert parse("Call or Raise", decision).status == "ambiguous"
    assert parse("Fold", decision).status == "illegal"
    assert parse("Raise\nhmm", decision).status == "no_action"
    assert parse("<think>Raise", decision).status == "truncated"


def test_repeated_action_names_are_told_apart():
    assert unique_names(["Bid", "Bid", " Pass  x"]) == ("Bid", "Bid#2", "Pass x")


def test_cli_audits_and_evaluates_a_game_by_name():
    import json

    from tests.cli.cli_helpers import _run

    result = _run("exploit", "--game", "openspiel:leduc_poker", "--agent", "uniform", "--json")
    assert result.exit_code == 0, result.output
    audit = json.loads(result.stdout)
    assert audit["exploitability"] == pytest.approx(2.373611111111111, abs=1e-12) and audit["exact"] is True
    assert "sequence-form" in audit["method"]
    result = _run(
        "eval",
        "--game",
        "openspiel:kuhn_poker",
        "--agent",
        "bot:CFR(iterations=30)",
        "--episodes",
        "4",
        "--json",
    )
    assert result.exit_code == 0, result.output


def test_sft_demonstrations_come_from_cfr_and_uniform(tmp_path):
    from tests.cli.cli_helpers import _run

    result = _run(
        "data",
        "sft",
        "--game",
        "openspiel:kuhn_poker",
        "--mixture",
        "cfr",
        "--episodes",
        "3",
        "--out",
        tmp_path / "d",
    )
    assert result.exit_code == 0, result.output
    assert "examples" in result.stdout


def test_a_three_player_game_plays_without_an_exact_solver():
    """Three-player Kuhn: no exact best response, a lower bound instead (`test_bound.py`); `eval`
    plays the uniform train pool (the CFR bots are for two players) and the bound's profile."""
    import json

    from tests.cli.cli_helpers import _run

    name = "openspiel:kuhn_poker(players=3)"
    assert get_domain(name).solver is None and get_domain(name).training is None
    assert get_domain(name).lower_bound is not None
    result = _run("eval", "--game", name, "--agent", "uniform", "--episodes", "3", "--rounds", "3", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "exploitability" not in report and report["exploit_pool"] is not None
    assert report["exact_label"] == "lower bound" and "adversarial_gap_lower_bound" in report


def test_a_game_too_large_to_walk_plays_against_the_uniform_pool_and_refuses_cfr():
    """Bargaining (about 1e17 histories): the train pool holds no CFR bot (pyspiel's CFR would walk
    the whole tree for hours), and asking for one is one line."""
    from tests.cli.cli_helpers import _error, _run

    game = load_game("openspiel:bargaining")
    assert get_domain("openspiel:bargaining").pools("rigorous", game)["train"] == ["Uniform"]
    result = _run("eval", "--game", "openspiel:bargaining", "--agent", "uniform", "--episodes", "2")
    assert result.exit_code == 0, result.output
    _error(_run("eval", "--game", "openspiel:bargaining", "--agent", "bot:CFR", "--episodes", "1"),
           "estimated from random paths", "pyspiel's CFR")


@pytest.mark.parametrize(
    "name, words",
    [
        ("openspiel:leduc_poker(players=abc,players=2)", ["'players' is given 2 times"]),
        ("openspiel:leduc_poker(players=abc)", ["players=abc must be an integer"]),
        ("openspiel:goofspiel(imp_info=yes)", ["imp_info=yes must be true or false"]),
        ("openspiel:leduc_poker(players=1)", ["players=1 is out of range", "2 to 10 players"]),
        ("openspiel:leduc_poker(players=99999999999999999999)", ["out of range", "2,147,483,647"]),
        ("openspiel:leduc_poker(foo=1)", ["no parameter 'foo'", "players=2"]),
        (
            "openspiel:liars_dice(bidding_rule=2)",
            ["OpenSpiel refuses it", "Expected type: kString", "dice_sides=6"],
        ),
        ("openspiel:nonexistent", ["no game 'nonexistent'"]),
    ],
)
def test_bad_parameters_are_one_line_without_pyspiels_stderr(name, words, capfd):
    """pyspiel takes a repeated key (the last wins) and a word for an integer silently, and prints
    its C++ exception (for an unknown name, every game's name) to stderr before raising it."""
    with pytest.raises(SepoError) as error:
        get_domain(name)
    assert "\n" not in str(error.value)
    for word in words:
        assert word in str(error.value)
    assert capfd.readouterr().err == ""
