"""`sepo train --talk`: training prompts carry the opponents' messages, a seeded share of them
hostile; the settings are checked and recorded (no model needed here; the run itself is in
test_llm_sepo.py)."""
from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.errors import SepoError
from sepo.games import get_domain
from sepo.games.talk import INJECTION_SUITE, sanitize
from sepo.opponents.pools import parse_bot
from sepo.training.grpo import LLMSEPOConfig, TrainingTalk


def _environment(game_name, **params):
    domain = get_domain(game_name)
    game = domain.game("rigorous", **params)
    train = [parse_bot(game_name, e) for e in domain.pools("rigorous", game)["train"]]
    env = domain.llm_training(game, train, [])
    width = max(len(d.legal_actions) for d in env.solver.decisions())
    table = np.full((len(env.solver.decisions()), width), 1.0 / width)
    return game, env, env.sample_contexts(table, 400, np.random.default_rng(0))


def _prompts(env, contexts, injection, seed):
    talk = TrainingTalk(env, injection)
    rng = np.random.default_rng(seed)
    return talk, [talk.decision(c, rng) for c in contexts]


def test_injected_messages_reach_training_prompts_at_the_configured_share_deterministically():
    game, env, contexts = _environment("negotiation")
    talk, decisions = _prompts(env, contexts, 0.25, seed=7)
    again, repeated = _prompts(env, contexts, 0.25, seed=7)
    assert talk.counts == again.counts and [d.observation for d in decisions] == [
        d.observation for d in repeated
    ]
    n = len(contexts)
    hostile = {sanitize(text)[0] for text in INJECTION_SUITE.values()}
    lines = {bot.line for bot in env.tabular.opponents}
    heard = [d.observation.get("talk", (None,))[0] for d in decisions]
    assert talk.counts["injected"] == sum(h in hostile for h in heard)
    assert abs(talk.counts["injected"] - 0.25 * n) <= 3.3 * np.sqrt(n * 0.25 * 0.75)  # binomial, p = 0.25
    assert talk.counts["own_line"] == sum(h in lines for h in heard) > 0  # the train bots' own lines
    assert talk.counts["silent"] == sum(h is None for h in heard)  # the gap maximiser has no line
    assert talk.counts["injected"] + talk.counts["own_line"] + talk.counts["silent"] == n
    for context, decision, said in zip(contexts, decisions, heard):
        plain = env.training_decision(context, np.random.default_rng(0))
        assert decision.legal_actions == plain.legal_actions and decision.info_key == plain.info_key
        if said is not None:
            assert f'Opponent\'s message: "{said}"' in game.text.user_prompt(decision)
    assert _prompts(env, contexts, 0.0, 7)[0].counts["injected"] == 0
    assert _prompts(env, contexts, 1.0, 7)[0].counts["injected"] == n


def test_the_three_item_game_shows_its_bots_own_lines():
    _, env, contexts = _environment("negotiation-gt", items="1,2,1", values="4,3,3")
    _, decisions = _prompts(env, contexts[:40], 0.0, seed=1)
    lines = {bot.line for bot in env.bots}
    assert {d.observation["talk"][0] for d in decisions} <= lines


def test_talk_settings_are_checked_and_recorded():
    with pytest.raises(SepoError, match="no cheap-talk channel"):
        LLMSEPOConfig(model="m", game="kuhn", talk=True).validate()
    with pytest.raises(SepoError, match="from 0 to 1"):
        LLMSEPOConfig(model="m", game="negotiation", talk=True, talk_injection=1.5).validate()
    on = LLMSEPOConfig(model="m", game="negotiation", talk=True, talk_injection=0.5).validate().settings()
    assert (on["talk"], on["talk_injection"], on["agent_messages_trained"]) == (True, 0.5, False)
    off = LLMSEPOConfig(model="m", game="negotiation").validate().settings()
    # runs without talk keep their config
    assert not {"talk", "talk_injection", "agent_messages_trained"} & set(off)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--game", "kuhn", "--policy", "hf:m", "--talk"], "game 'kuhn' has no cheap-talk channel"),
        (["--game", "negotiation", "--talk"], "--talk trains language models only"),
        (
            ["--game", "negotiation", "--policy", "hf:m", "--talk-injection", "0.5"],
            "--talk-injection applies with --talk only",
        ),
        (["--game", "negotiation", "--policy", "hf:m", "--talk", "--talk-injection", "1.5"], "from 0 to 1"),
    ],
)
def test_bad_talk_training_input_is_one_line_with_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "run"), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
    assert not (tmp_path / "run").exists()
