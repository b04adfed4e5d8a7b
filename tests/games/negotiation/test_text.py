"""Split bargaining's prompts and parsers (strict under rigorous, the paper's under paper)."""
import pytest

from sepo.games import load_game


def _decision(game, demands=()):
    state = game.new_initial_state()
    for d0, d1 in demands:
        state.apply_actions((d0 - game.min_demand, d1 - game.min_demand))
    return state.decision(0)


def test_paper_prompts():
    game = load_game("negotiation", "paper")
    system = game.text.system_prompt()
    assert "6 and 4 are a deal" in system and "7 and 7 break down" in system
    assert system.splitlines()[-2].endswith("on the last line as a single number (1-9).")
    assert "Respond only in English." in system
    first = game.text.user_prompt(_decision(game))
    assert first.startswith("Round 1 of 4.") and first.endswith("How many points do you demand (1-9)?")
    later = game.text.user_prompt(_decision(game, [(6, 4), (7, 7)]))
    assert "Round history: you=6, opp=4 → DEAL | you=7, opp=7 → BREAKDOWN" in later
    assert "Scores so far — you: 6, opponent: 4" in later and later.startswith("Round 3 of 4.")


@pytest.mark.parametrize("reply, demand", [
    ("5", 5), ("I demand 6", 6), ("The opponent asked for 7.\nI ask for 4, but fair is 5", 5),
    ("Demand: 3.", 3), ("my answer is 10 or 1", 1), ("**8**", 8),
])
def test_paper_parser_takes_the_last_standalone_digit(reply, demand):
    game = load_game("negotiation", "paper")
    result = game.text.parse(reply, _decision(game))
    assert result.ok and game.demand(result.action) == demand


def test_paper_parser_failures_are_counted_as_no_action():
    game = load_game("negotiation", "paper")
    for reply in ("", "I demand ten", "0", "12 and 10"):
        assert game.text.parse(reply, _decision(game)).status == "no_action"


@pytest.mark.parametrize("reply, status, demand", [
    ("5", "ok", 5), ("Reasoning: they asked 7.\nDemand: 4", "ok", 4), ("<think>maybe 9</think>\n6", "ok", 6),
    ("I want 5\nfive", "no_action", None), ("5 or 6", "ambiguous", None), ("10", "illegal", None),
    ("0", "illegal", None), ("5.5", "illegal", None), ("6\n\n", "ok", 6), ("I ask 5, yes 5", "ok", 5),
])
def test_strict_parser(reply, status, demand):
    game = load_game("negotiation")
    result = game.text.parse(reply, _decision(game))
    assert result.status == status
    if demand is not None:
        assert game.demand(result.action) == demand


def test_rigorous_prompt_states_the_game():
    game = load_game("negotiation", pie=20, min_demand=2, max_demand=18, rounds=3, breakdown_cost=1)
    system = game.text.system_prompt()
    assert "split 20 points" in system and "from 2 to 18" in system and "both lose 1 point" in system
    assert game.text.parse("17", _decision(game)).action == 15


def test_reasons_describe_the_state_only():
    game = load_game("negotiation", memory="full")
    decision = _decision(game, [(7, 7), (5, 4)])
    reason = game.text.reason(decision)
    assert "Round 3 of 4" in reason and "I asked for 5 and the opponent for 4, a deal" in reason
    assert "1 of 2 rounds were deals" in reason and "5 to 4" in reason
    for action in decision.legal_actions:
        reply = game.text.canonical_reply(decision, action)
        assert game.text.parse(reply, decision).action == action
