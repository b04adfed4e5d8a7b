"""Auction prompts and both parsers (the strict one and the paper's substring rule)."""
import pytest

from sepo.errors import SepoError
from sepo.games.auction.rules import make_game
from sepo.games.auction.text import paper_parse


def decision_after_one_round(protocol):
    game = make_game(protocol)
    state = game.new_initial_state()
    state.apply_action(0)
    state.apply_action(1)
    state.apply_actions((0, 2))  # agent value 2 bids LOW, opponent value 4 bids HIGH and wins (payoff 1)
    state.apply_action(1)
    state.apply_action(0)
    return game, state.decision(0)


def test_paper_prompt_fields():
    game, decision = decision_after_one_round("paper")
    prompt = game.text.user_prompt(decision)
    assert prompt.splitlines()[0] == "Round 2 of 6."
    assert "Your item value this round: 4 points." in prompt
    assert "Your past bids: LOW" in prompt and "Opponent's past bids: HIGH" in prompt
    assert "Your past values: 2" in prompt
    assert "Scores so far — you: 0.0, opponent: 1.0" in prompt
    assert prompt.endswith("What is your bid?")
    assert "LOW, MEDIUM, or HIGH" in game.text.system_prompt()


@pytest.mark.parametrize("reply, action", [
    ("I will bid HIGH", 2),
    ("Medium seems right\nLOW", 0),
    ("Let me stay below the opponent\nfinal answer", 0),  # 'below' contains 'low'
    ("I follow my plan", 0),
    ("highest value, so\nbid", 2),
    ("My bid is 2", 1),
    ("3 or 1? I pick 1", 0),
])
def test_paper_parser_quirks(reply, action):
    assert paper_parse(reply).action == action


def test_paper_parser_no_match():
    assert paper_parse("I pass").status == "no_action"


@pytest.mark.parametrize("reply, status, action", [
    ("thinking about 3\n2", "ok", 1),
    ("Bid: 3", "ok", 2),
    ("<think>1</think>\n1", "ok", 0),
    ("I bid", "no_action", None),
    ("2 or 3", "ambiguous", None),
    ("5", "illegal", None),
])
def test_strict_parser(reply, status, action):
    game, decision = decision_after_one_round("rigorous")
    result = game.text.parse(reply, decision)
    assert result.status == status and result.action == action


def test_rigorous_prompt_shows_own_history_not_opponent_score():
    game, decision = decision_after_one_round("rigorous")
    prompt = game.text.user_prompt(decision)
    assert "round 1: your value 2, your bid 1, other bids 3; you lost, your payoff 0" in prompt
    assert "Legal bids: 1, 2, 3." in prompt


def test_reason_never_names_the_bid():
    game, decision = decision_after_one_round("rigorous")
    reason = game.text.reason(decision)
    assert reason and "\n" not in reason
    for action in decision.legal_actions:
        reply = game.text.canonical_reply(decision, action)
        assert game.text.parse(reply, decision).action == action


def test_truncated_solver_decision_refuses_a_prompt():
    from sepo.games.auction.exact import AuctionSolver

    game = make_game("rigorous", memory=1, rounds=3)
    late = [d for d in AuctionSolver(game).decisions() if d.observation["round"] == 3][0]
    with pytest.raises(SepoError, match="--memory 2"):
        game.text.user_prompt(late)
