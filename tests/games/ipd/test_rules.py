"""IPD rules, payoff matrices, information states and the two text protocols."""
import pytest

from sepo.errors import SepoError
from sepo.games import load_game
from sepo.games.ipd.rules import (
    COOPERATE,
    DEFECT,
    IteratedPrisonersDilemma,
    Payoffs,
    history_key,
    key_history,
)
from sepo.games.ipd.text import ipd_reason, paper_parse, strict_parse

C, D = COOPERATE, DEFECT


def play(game, joint):
    state = game.new_initial_state()
    for actions in joint:
        state.apply_actions(actions)
    return state


@pytest.mark.parametrize(
    "actions, payoffs", [((C, C), (3, 3)), ((D, C), (5, 0)), ((C, D), (0, 5)), ((D, D), (1, 1))]
)
def test_paper_stage_payoffs(actions, payoffs):
    state = play(load_game("ipd", "paper"), [actions])
    assert state.rounds()[0].payoffs == payoffs


def test_a_match_lasts_its_rounds_and_returns_sum_the_rounds():
    game = IteratedPrisonersDilemma(rounds=3)
    state = play(game, [(C, C), (D, C), (D, D)])
    assert state.is_terminal() and state.returns() == [9.0, 4.0]
    with pytest.raises(ValueError, match="over"):
        state.apply_actions((C, C))
    with pytest.raises(ValueError, match="at once"):
        game.new_initial_state().apply_action(C)


def test_each_side_sees_its_own_moves_first_and_clones_are_independent():
    game = IteratedPrisonersDilemma()
    state = play(game, [(C, D), (D, D)])
    mine, theirs = state.decision(0), state.decision(1)
    assert mine.info_key == "CD,DD" and theirs.info_key == "DC,DD"
    assert mine.observation["history"] == ((C, D), (D, D)) and mine.observation["my_score"] == 1.0
    assert theirs.observation["my_score"] == 6.0 and mine.observation["round"] == 3
    copy = state.clone()
    copy.apply_actions((C, C))
    assert len(state.rounds()) == 2 and len(copy.rounds()) == 3
    assert key_history("CD,DD") == ((C, D), (D, D)) and history_key(()) == "start"


def test_memory_keeps_the_last_rounds_in_the_information_state():
    game = IteratedPrisonersDilemma(memory=2)
    state = play(game, [(C, D), (D, D), (C, C)])
    assert state.decision(0).info_key == "DD,CC"
    assert len(game.info_keys()) == 1 + 4 + 16
    assert len(IteratedPrisonersDilemma(rounds=8).info_keys()) == sum(4**t for t in range(8))


def test_payoff_matrices_parse_and_bad_ones_are_refused():
    paper = Payoffs.parse("R=3,S=0,T=5,P=1")
    assert paper == Payoffs.parse(None) == Payoffs.parse("[[[3,3],[0,5]],[[5,0],[1,1]]]")
    assert paper.dilemma_problems() == []
    with pytest.raises(SepoError, match="shape 2x2x2"):
        Payoffs.parse("[[3, 0], [5, 1]]")
    with pytest.raises(SepoError, match="R, S, T and P"):
        Payoffs.parse("R=3,S=0,T=5")
    with pytest.raises(SepoError, match="not a number"):
        Payoffs.parse("R=3,S=0,T=five,P=1")
    with pytest.warns(UserWarning, match="not a prisoner's dilemma"):
        IteratedPrisonersDilemma(payoffs="R=3,S=0,T=7,P=1")  # 2R > T + S fails: alternating beats cooperating
    asymmetric = IteratedPrisonersDilemma(payoffs="[[[3,2],[0,3.5]],[[5,0],[1,0.5]]]")
    state = play(asymmetric, [(D, C)])
    assert state.rounds()[0].payoffs == (5.0, 0.0)
    assert "opponent gets" in asymmetric.text.system_prompt()


@pytest.mark.parametrize("rounds", [0, -3, 2.5, True])
def test_rounds_must_be_positive_integers(rounds):
    with pytest.raises(SepoError, match="rounds must be a positive integer"):
        load_game("ipd", rounds=rounds)


def test_paper_prompts():
    game = load_game("ipd", "paper")
    system = game.text.system_prompt()
    assert "COOPERATE or DEFECT" in system and "you get 5 points and the opponent gets 0 points" in system
    assert system.endswith("Respond only in English.")
    first = game.text.user_prompt(game.new_initial_state().decision(0))
    assert first == "Round 1 of 8.\nThis is the first round. No history yet.\n\nWhat is your action?"
    later = game.text.user_prompt(play(game, [(C, D), (D, D)]).decision(0)).splitlines()
    assert later[0] == "Round 3 of 8."
    assert later[1].startswith("Your past actions:") and later[1].endswith("COOPERATE, DEFECT")
    assert later[2].startswith("Opponent's past actions:") and later[2].endswith("DEFECT, DEFECT")
    assert later[1].index("COOPERATE") == later[2].index("DEFECT")  # the labels are padded to one column
    assert later[3] == "Scores so far — you: 1, opponent: 6"


def test_strict_parser_reads_the_last_line_only():
    assert strict_parse("The opponent may DEFECT.\nCOOPERATE").action == C
    assert strict_parse("I think so\ndefect").action == D
    assert strict_parse("COOPERATE or DEFECT").status == "ambiguous"
    assert strict_parse("COOPERATE\nI am done").status == "no_action"
    assert strict_parse("COOPERATING").status == "no_action"
    assert strict_parse("<think>DEFECT</think>\nCOOPERATE").action == C


def test_paper_parser_priorities():
    assert paper_parse("I will not DEFECT, I COOPERATE").action == C  # COOPERATE outranks DEFECT
    assert paper_parse("DEFECT\nthat is my move").action == D  # last line fails, whole text matches
    assert paper_parse("TESTIFY").action == D and paper_parse("stay SILENT").action == C
    assert paper_parse("Cooperating again").action == C and paper_parse("defecting now").action == D
    assert paper_parse("d").action == D and paper_parse("C.").action == C
    assert paper_parse("no idea").status == "no_action"


def test_reasons_describe_the_state_and_never_parse_as_a_move():
    game = load_game("ipd", "paper")
    for joint in ([], [(C, D)], [(D, C), (C, C), (D, D)] + [(C, C)] * 4):
        decision = play(game, joint).decision(0)
        reason = ipd_reason(decision)
        assert strict_parse(reason).status == "no_action" and paper_parse(reason).status == "no_action"
        for action in (C, D):
            reply = game.text.canonical_reply(decision, action)
            assert paper_parse(reply).action == action and strict_parse(reply).action == action
    assert "Round 8 of 8, the last round" in ipd_reason(play(game, [(C, C)] * 7).decision(0))
    assert "betrayed me in 1 of 1 rounds" in ipd_reason(play(game, [(C, D)]).decision(0))
