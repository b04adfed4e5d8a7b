"""Prompts and both parsers of the three-item negotiation."""
import warnings

import pytest

from sepo.games import load_game


def _decision(protocol="rigorous", history_rounds=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        game = load_game("negotiation-gt", protocol, items="2,3,4", values="4,3,3", opponent_values="1,1,8")
    state = game.new_initial_state()
    while state.is_chance_node():
        state.apply_action(0)
    for _ in range(history_rounds):
        state.apply_actions([game.rules.encode((1, 1, 1)), game.rules.encode((1, 2, 3))])
    return game, state.decision(0)


def test_paper_prompt_has_the_papers_lines():
    game, decision = _decision("paper", 1)
    prompt = game.text.user_prompt(decision)
    assert prompt.splitlines()[:4] == ["Round 2 of 4.", "Item pool: 2 Books, 3 Hats, 4 Balls",
                                       "Your private values: Books=4, Hats=3, Balls=3",
                                       "(Opponent has different private values — unknown to you)"]
    assert "Round 1: you demanded [1, 1, 1], opponent demanded [1, 2, 3] → DEAL" in prompt
    assert "Scores so far — you: 10.0, opponent: 27.0" in prompt
    assert prompt.endswith("What is your demand? [books, hats, balls]")
    assert "[books, hats, balls]" in game.text.system_prompt()


def test_rigorous_prompt_hides_the_opponents_score():
    game, decision = _decision("rigorous", 1)
    prompt = game.text.user_prompt(decision)
    assert "27" not in prompt and "your score 10" in prompt


@pytest.mark.parametrize("reply, demand", [
    ("I think [1, 2, 3] is fair.\nMaybe [2, 0, 1]", (2, 0, 1)),          # last bracketed triple
    ("Books: 1, Hats: 2, Balls: 3", (1, 2, 3)),                           # labelled
    ("2 books, 1 hat and 0 balls", (2, 1, 0)),                            # labelled, second form
    ("I want 1, 1, 1 then 2, 2, 2", (2, 2, 2)),                           # last x, y, z
    # [3, 2, 3] clamped                                # first three integers on the last line
    ("round 3: take 2 3 then 5", (2, 2, 3)),
    ("[9, 9, 9]", (2, 3, 4)),                                             # clamped into the pool
])
def test_paper_parser(reply, demand):
    game, decision = _decision("paper")
    parsed = game.text.parse(reply, decision)
    assert parsed.ok and game.rules.decode(parsed.action) == demand


def test_paper_parser_failure_is_counted_and_the_fallback_is_one_of_each():
    game, decision = _decision("paper")
    assert game.text.parse("I am not sure.", decision).status == "no_action"
    assert game.rules.decode(game.text.fallback_action(decision)) == (1, 1, 1)


@pytest.mark.parametrize("reply, status, demand", [
    ("Reasoning: [4, 4, 4] would be greedy.\n[1, 2, 3]", "ok", (1, 2, 3)),
    ("[1, 2, 3]\nthat is my answer", "no_action", None),
    ("[1, 2, 3] or [0, 0, 0]", "ambiguous", None),
    ("[3, 0, 0]", "illegal", None),
    ("1, 2, 3", "no_action", None),
    ("<think>[0, 0, 0]</think>\n[2, 3, 4]", "ok", (2, 3, 4)),
])
def test_strict_parser(reply, status, demand):
    game, decision = _decision()
    parsed = game.text.parse(reply, decision)
    assert parsed.status == status
    if demand:
        assert game.rules.decode(parsed.action) == demand


def test_reason_describes_the_state_without_a_demand():
    game, decision = _decision("rigorous", 1)
    reason = game.text.reason(decision)
    assert "[" not in reason and "worth 29 to me" in reason and "a deal" in reason


def test_the_fallback_rule_plays_the_papers_one_of_each():
    """A reply that does not parse is played as the domain's own fallback, [1, 1, 1] clamped into
    the pool, under the 'fallback' failure rule (the paper returns it directly), and counted."""
    from sepo.policies.replies import Decoding, Reply
    from sepo.policies.text_policy import TextPolicy

    game, decision = _decision("paper")

    class Confused:
        name, text, decoding = "confused", game.text, Decoding()

        def replies(self, decisions, n, seed):
            return [[Reply("I am not sure.", True)] * n for _ in decisions]

    policy = TextPolicy(Confused(), failure_rule="fallback", samples=4)
    estimate = policy.estimate([decision])
    played = {a: p for a, p in estimate.probabilities[0].items() if p > 0}
    assert played == {game.text.fallback_action(decision): pytest.approx(1.0)}
    assert game.rules.decode(next(iter(played))) == (1, 1, 1)
    assert policy.counts["estimate.no_action"] == 4
