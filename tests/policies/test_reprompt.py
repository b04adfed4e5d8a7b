"""The `reprompt` failure rule in every domain: a reply that does not parse gets one short
correction turn and the model answers again (at most k times, counted); the action played and
the policy read are the final answer's; still failing, the fallback action plays, counted."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games import domain_names, get_domain
from sepo.policies.replies import Decoding, Reply
from sepo.policies.text_policy import TextAgentOptions, TextPolicy, correction_message, fallback_action

GREEDY = Decoding(temperature=0)


def first_decisions(game, count: int = 3, seed: int = 0):
    """Decisions of player 0 met in random play (up to `count` distinct prompts, from at most 50 playouts)."""
    rng = np.random.default_rng(seed)
    found = {}
    for _ in range(50):
        if len(found) >= count:
            break
        state = game.new_initial_state()
        while not state.is_terminal() and len(found) < count:
            if state.is_chance_node():
                outcomes = state.chance_outcomes()
                state.apply_action(outcomes[rng.integers(len(outcomes))][0])
                continue
            decisions = [state.decision(p) for p in state.acting_players()]
            if decisions[0].player == 0:
                found.setdefault(game.text.user_prompt(decisions[0]), decisions[0])
            actions = [d.legal_actions[rng.integers(len(d.legal_actions))] for d in decisions]
            if len(decisions) > 1:
                state.apply_actions(actions)
            else:
                state.apply_action(actions[0])
    return list(found.values())


class CorrectedAgent:
    """A `ReplySource` whose first reply never names an action; after `fails` correction turns it
    answers the last legal action (whose text the view writes). It reads the decision back from
    the user prompt of the chat, as a model would."""

    def __init__(self, view, decisions, fails: int = 0, decoding=GREEDY):
        self.name, self.text, self.decoding = "corrected", view, decoding
        self.fails = fails
        self.by_prompt = {view.user_prompt(d): d for d in decisions}
        self.chats: list[list[dict]] = []

    def replies(self, decisions, n, seed):
        return [[Reply("Let me think about this.", True)] * n for _ in decisions]

    def chat_replies(self, chats, n, seed):
        out = []
        for chat in chats:
            self.chats.append(chat)
            d = self.by_prompt[chat[1]["content"]]
            corrections = sum(m["role"] == "user" for m in chat) - 1
            text = (
                "still thinking"
                if corrections <= self.fails
                else self.text.answer_text(d, d.legal_actions[-1])
            )
            out.append([Reply(text, True)] * n)
        return out


@pytest.fixture(params=domain_names())
def game(request):
    return get_domain(request.param).game("rigorous")


def test_a_corrected_reply_is_the_action_played_and_the_policy_read(game):
    decisions = first_decisions(game)
    source = CorrectedAgent(game.text, decisions, fails=1)
    agent = TextPolicy(source, failure_rule="reprompt", reprompts=2)
    choices = agent.act(decisions, np.random.default_rng(0))
    assert [c.action for c in choices] == [d.legal_actions[-1] for d in decisions]
    # the first reply failed
    assert all(c.parse_status == "no_action" and c.rule == "reprompt" for c in choices)
    assert agent.counts["act.reprompt.sent"] == 2 * len(decisions) and agent.counts[
        "act.reprompt.recovered"
    ] == len(decisions)
    estimate = agent.estimate(decisions)
    assert estimate.exact and estimate.label == "exact"  # greedy: one deterministic chain per prompt
    for d, row in zip(decisions, estimate.table()):
        assert row[len(d.legal_actions) - 1] == 1.0
    record = agent.reprompt_record()
    assert record["played"] == {"failed_replies": len(decisions), "reprompts_sent": 2 * len(decisions),
                                "recovered": len(decisions), "fell_back": 0}
    assert record["policy"]["recovered"] == len(decisions)


def test_the_correction_names_the_problem_and_the_legal_answers(game):
    d = first_decisions(game, 1)[0]
    message = correction_message(game.text, d, "ambiguous")
    assert "more than one action" in message and len(message) < 300
    if len(d.legal_actions) <= 8:
        assert all(game.text.answer_text(d, a) in message for a in d.legal_actions)


def test_after_k_failed_corrections_the_fallback_plays_and_is_counted(game):
    decisions = first_decisions(game)
    source = CorrectedAgent(game.text, decisions, fails=5)
    agent = TextPolicy(source, failure_rule="reprompt", reprompts=3)
    choices = agent.act(decisions, np.random.default_rng(0))
    assert [c.action for c in choices] == [fallback_action(game.text, d) for d in decisions]
    assert agent.counts["act.reprompt.sent"] == 3 * len(decisions)
    assert (
        agent.counts["act.reprompt.exhausted"] == len(decisions)
        and agent.counts["act.reprompt.recovered"] == 0
    )
    longest = max(source.chats, key=len)
    assert len(longest) == 2 + 2 * 3  # system, user, then (reply, correction) three times


def test_a_sampled_agent_under_reprompt_is_estimated_not_exact():
    game = get_domain("ipd").game("rigorous")
    decisions = first_decisions(game, 2)
    agent = TextPolicy(
        CorrectedAgent(game.text, decisions, decoding=Decoding()), failure_rule="reprompt", samples=16
    )
    estimate = agent.estimate(decisions)
    assert not estimate.exact and estimate.label == "estimated (16 replies per state)"


def test_reprompt_needs_a_source_that_answers_a_chat_and_k_in_range():
    class NoChat:
        name, decoding = "plain", GREEDY

    with pytest.raises(SepoError, match="cannot answer a correction turn"):
        TextPolicy(NoChat(), failure_rule="reprompt")
    for k in (0, 11):
        with pytest.raises(SepoError, match="re-prompts per failed reply"):
            TextAgentOptions(failure_rule="reprompt", reprompts=k)


def test_evaluation_reports_the_reprompts_and_keeps_the_strict_invalid_rate():
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.opponents.pools import parse_bot

    game = get_domain("ipd").game("rigorous", rounds=2)
    decisions = first_decisions(game, 5, seed=1)  # every prompt of a 2-round match
    agent = TextPolicy(CorrectedAgent(game.text, decisions), failure_rule="reprompt", reprompts=1)
    pools = {"train": [parse_bot("ipd", "TFT")], "exploiter": [], "collusive": []}
    result = evaluate(game, agent, EvalConfig(episodes=2, replicates=50, pools=pools))
    assert result["invalid_action_rate"] == 1.0  # every first reply failed: counted, never hidden
    # two episodes of two rounds against TFT and against the BestResponse the rigorous audit adds
    played = 2 * 2 * 2
    assert (
        result["reprompts"]["played"]["recovered"]
        == result["reprompts"]["played"]["failed_replies"]
        == played
    )
    assert result["opponents"][0]["agent_per_round"] == pytest.approx(
        game.payoffs.matrix[1, 0][0] / 2 + game.payoffs.matrix[1, 1][0] / 2
    )
