"""The Kuhn text view: the user prompt carries every field of the paper's prompt, and the strict
parser reads only the last non-empty line after any `</think>`, whole words, any case."""
from __future__ import annotations

import pytest

from sepo.games.kuhn.rules import BET, DEALS, PASS, KuhnPoker
from sepo.games.kuhn.text import KuhnText

STYLES = ("rigorous", "paper")


def decision_after(finished_hands, deal, history, hands=6, style="rigorous"):
    """The decision of the player to act after playing `finished_hands` [(deal cards, history)]
    and then dealing `deal` and playing `history` in the current hand."""
    game = KuhnPoker(hands=hands, text_style=style)
    state = game.new_initial_state()
    for cards, moves in finished_hands:
        state.apply_action(DEALS.index(cards))
        for move in moves:
            state.apply_action("pb".index(move))
    state.apply_action(DEALS.index(deal))
    for move in history:
        state.apply_action("pb".index(move))
    return game, state.decision(state.current_player())


OPENING = decision_after([], (2, 0), "")[1]          # seat 0, K, first to act: PASS or BET
AFTER_PASS = decision_after([], (2, 0), "p")[1]      # seat 1, J, after a pass: PASS or BET
FACING = decision_after([], (2, 0), "b")[1]          # seat 1, J, facing a bet: CALL or FOLD
LATE = decision_after([], (2, 0), "pb")[1]           # seat 0, K, pass-bet: CALL or FOLD


# ------------------------------------------------------------------------------- parser

def parse(reply, decision=OPENING):
    return KuhnText().parse(reply, decision)


@pytest.mark.parametrize(
    "reply,decision,action",
    [
        ("BET", OPENING, BET),
        ("PASS", OPENING, PASS),
        ("I hold the king.\nBET", OPENING, BET),
        ("bet", OPENING, BET),
        ("Bet.", OPENING, BET),
        ("  I will **BET**  \n\n  \n", OPENING, BET),
        ("Final answer: pass", AFTER_PASS, PASS),
        ("CALL", FACING, BET),
        ("fold", FACING, PASS),
        ("I think they are bluffing.\nCall", LATE, BET),
        ("FOLD FOLD", FACING, PASS),  # the same word twice is one action
    ],
)
def test_ok_replies(reply, decision, action):
    result = parse(reply, decision)
    assert result.status == "ok" and result.ok
    assert result.action == action


@pytest.mark.parametrize("reply", ["I think so", "", "   \n\n", "BETTER luck next time", "PASSING",
                                   "callous", "Bets are off", "re-bet?".replace("-", ""), "my_bet"])
def test_no_action(reply):
    result = parse(reply)
    assert result.status == "no_action" and not result.ok
    assert result.action is None


def test_ambiguous_last_line():
    result = parse("CALL or FOLD", FACING)
    assert result.status == "ambiguous" and result.action is None
    assert set(result.names_found) == {"CALL", "FOLD"}
    assert parse("PASS, then BET if raised", OPENING).status == "ambiguous"
    assert parse("bet... no, pass", OPENING).status == "ambiguous"


def test_illegal_word_is_counted_not_coerced():
    result = parse("CALL", OPENING)  # nobody has bet
    assert result.status == "illegal" and result.action is None and result.names_found == ("CALL",)
    assert parse("FOLD", AFTER_PASS).status == "illegal"
    assert parse("BET", FACING).status == "illegal"
    assert parse("check", OPENING).status == "no_action"  # CHECK/RAISE are not action words


@pytest.mark.parametrize(
    "reply,decision,status,action",
    [
        ("I could BET here, or PASS.\nHmm, not sure.", OPENING, "no_action", None),
        ("FOLD is tempting\nCALL", FACING, "ok", BET),
        ("BET\nthinking more...", OPENING, "no_action", None),
        ("They will CALL a bet with K.\nPASS", OPENING, "ok", PASS),
        ("If I PASS they may BET.\n\nI'll go with: bet\n", AFTER_PASS, "ok", BET),
    ],
)
def test_reasoning_on_earlier_lines_never_becomes_an_action(reply, decision, status, action):
    result = parse(reply, decision)
    assert (result.status, result.action) == (status, action)


def test_think_block_is_stripped():
    assert parse("<think>I should FOLD</think>\nCALL", FACING).action == BET
    assert parse("<think>reasoning\nBET</think>", OPENING).status == "no_action"
    assert parse("<think>a</think> x <think>BET</think>\nPASS", OPENING).action == PASS
    assert parse("<think>\nPASS\n</think>\n\nBET\n", OPENING).action == BET


def test_answer_text_parses_back_to_the_action():
    text = KuhnText()
    for decision in (OPENING, AFTER_PASS, FACING, LATE):
        for action in decision.legal_actions:
            assert text.parse(text.answer_text(decision, action), decision).action == action


# ------------------------------------------------------------------------------ prompts

@pytest.mark.parametrize("style", STYLES)
def test_first_hand_prompt_fields(style):
    game, decision = decision_after([], (2, 0), "", hands=6, style=style)
    prompt = game.text.user_prompt(decision)
    lines = prompt.splitlines()
    assert lines[0] == "Hand 1 of 6."
    assert lines[1] == "Your card: K"
    assert "You are first to act this hand. No bets yet." in lines
    assert not any(line.startswith("Score across") for line in lines)  # no prior hands yet
    assert "Legal actions: PASS or BET." in lines
    assert lines[-1] == "What is your action?"
    assert "" in lines  # the blank line before the legal actions


@pytest.mark.parametrize("style", STYLES)
def test_later_hand_prompt_has_history_and_prior_score(style):
    # hand 1: player 0 (seat 0, K) bets, player 1 (J) calls: player 0 wins 2.
    # hand 2: player 1 (seat 0, Q) passes, player 0 (seat 1, J) bets, player 1 calls: player 0
    #         loses 2. Hand 3: player 0 is seat 0 again, holds J, has passed and faces a bet.
    finished = [((2, 0), "bb"), ((1, 0), "pbb")]
    game, decision = decision_after(finished, (0, 1), "pb", hands=6, style=style)
    assert decision.player == 0 and decision.observation["seat"] == 0
    prompt = game.text.user_prompt(decision)
    lines = prompt.splitlines()
    assert lines[0] == "Hand 3 of 6."
    assert lines[1] == "Your card: J"
    betting = [line for line in lines if line.startswith("Betting so far this hand: ")]
    assert len(betting) == 1
    if style == "paper":
        assert betting[0] == "Betting so far this hand: PASS, BET"
    else:
        assert betting[0] == "Betting so far this hand: you PASS, opponent BET"
    assert "Score across 2 prior hands: 1W/1L, net +0 chips" in lines
    assert "Legal actions: CALL or FOLD." in lines or "Legal actions: FOLD or CALL." in lines
    assert lines[-2].startswith("Legal actions:") and lines[-3] == ""
    assert lines[-1] == "What is your action?"
    assert "No bets yet" not in prompt


@pytest.mark.parametrize("style", STYLES)
def test_prior_score_line_from_hand_two_with_signed_net(style):
    # hand 1: seat 0 (player 0, J) passes, seat 1 (player 1, K) passes -> player 0 loses 1
    game, decision = decision_after([((0, 2), "pp")], (1, 2), "", hands=4, style=style)
    assert decision.player == 1  # player 1 opens hand 2
    lines = game.text.user_prompt(decision).splitlines()
    assert lines[0] == "Hand 2 of 4."
    assert lines[1] == "Your card: Q"
    assert "Score across 1 prior hands: 1W/0L, net +1 chips" in lines
    game, decision = decision_after([((0, 2), "pp")], (1, 2), "p", hands=4, style=style)
    assert decision.player == 0
    lines = game.text.user_prompt(decision).splitlines()
    assert "Score across 1 prior hands: 0W/1L, net -1 chips" in lines
    assert "Your card: K" in lines
    assert any(line.startswith("Betting so far this hand: ") and line.endswith("PASS") for line in lines)


@pytest.mark.parametrize("style", STYLES)
def test_facing_a_bet_prompt_names_call_and_fold(style):
    game, decision = decision_after([], (2, 0), "b", hands=6, style=style)
    lines = game.text.user_prompt(decision).splitlines()
    expected = "Betting so far this hand: " + ("BET" if style == "paper" else "opponent BET")
    assert expected in lines
    legal = [line for line in lines if line.startswith("Legal actions:")]
    assert len(legal) == 1 and "CALL" in legal[0] and "FOLD" in legal[0] and "BET." not in legal[0]


def test_paper_style_lists_call_before_fold_as_the_paper_does():
    game, decision = decision_after([], (2, 0), "b", hands=6, style="paper")
    assert "Legal actions: CALL or FOLD." in game.text.user_prompt(decision).splitlines()


def test_system_prompt_states_the_rules_and_the_last_line_rule():
    system = KuhnText().system_prompt()
    for word in ("Kuhn", "J", "Q", "K", "PASS", "BET", "CALL", "FOLD", "last line"):
        assert word in system
    with pytest.raises(ValueError):
        KuhnText(style="other")
