"""`openai:MODEL@URL` agents against the tiny model served on the loopback address: same replies
as the local model, a cache that resumes and survives a torn write, retries through 500s and
stalls, bounded concurrency, usage on record, and an API key that never leaves memory."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from sepo.errors import SepoError  # noqa: E402
from sepo.games.kuhn.text import KuhnText  # noqa: E402
from sepo.policies.endpoint import EndpointAgent, parse_endpoint_spec  # noqa: E402
from sepo.policies.hf import HFDecoding, HFPolicy  # noqa: E402
from sepo.policies.replies import Decoding  # noqa: E402
from tests.serving import chat, decisions, running_server, server  # noqa: E402,F401 (fixtures)

GREEDY = Decoding(temperature=0, max_new_tokens=24)
SAMPLED = Decoding(temperature=1.0, max_new_tokens=24)


def _agent(server, tmp_path, decoding=SAMPLED, **kwargs):
    return EndpointAgent("tiny", server.url, KuhnText(), decoding, cache_dir=tmp_path / "cache", **kwargs)


def _answered(server) -> int:
    return server.stats.record()["answered"]


@pytest.mark.parametrize("arg, model, url", [
    ("tiny@http://127.0.0.1:8000/v1", "tiny", "http://127.0.0.1:8000/v1"),
    ("org/model@v2@https://api.example.com/v1", "org/model@v2", "https://api.example.com/v1"),
    ("gpt-4o-mini", "gpt-4o-mini", None),
])
def test_spec_parsing(arg, model, url):
    assert parse_endpoint_spec(arg) == (model, url)


@pytest.mark.parametrize("arg", ["", "@http://127.0.0.1:8000/v1", "m@ftp://host/v1", "m@http:///v1", "m@"])
def test_bad_specs_are_one_line_errors(arg):
    with pytest.raises(SepoError, match="openai:"):
        parse_endpoint_spec(arg)


def test_a_remote_endpoint_needs_a_key(monkeypatch, tmp_path):
    for name in ("SEPO_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SepoError, match="no API key; set SEPO_API_KEY or OPENAI_API_KEY"):
        EndpointAgent("m", "https://api.example.com/v1", KuhnText(), cache_dir=tmp_path)


def test_greedy_replies_equal_the_local_model(chat, server, decisions, tmp_path):
    agent = _agent(server, tmp_path, GREEDY)
    local = HFPolicy(chat.model, KuhnText(), mode="sample", tokenizer=chat.tokenizer, decoding=GREEDY)
    expected = local.generate([local.prompt_ids(d) for d in decisions], 1, greedy=True)
    got = agent.replies(decisions, 1, seed=3)
    assert [g[0].text for g in got] == [e[0].text for e in expected]
    assert [g[0].finished for g in got] == [e[0].finished for e in expected]
    assert [g[0].completion_tokens for g in got] == [len(e[0].completion_ids) for e in expected]


def test_cache_resumes_and_reproduces_without_asking_again(server, decisions, tmp_path):
    first = _agent(server, tmp_path)
    before = _answered(server)
    replies = first.replies(decisions, 2, seed=5)
    assert _answered(server) - before == len(decisions)
    assert first.record()["usage"]["requests"] == len(decisions)
    again = _agent(server, tmp_path)  # a new process would see the same file
    assert again.replies(decisions, 2, seed=5) == replies
    assert _answered(server) - before == len(decisions)
    usage = again.record()["usage"]
    assert {
        k: usage[k] for k in ("requests", "cache_hits", "retries", "prompt_tokens", "completion_tokens")
    } == {
        "requests": 0,
        "cache_hits": len(decisions),
        "retries": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
    }
    first_usage = first.record()["usage"]  # what the cached replies cost when they were asked
    assert (usage["cached_prompt_tokens"], usage["cached_completion_tokens"]) == (
        first_usage["prompt_tokens"], first_usage["completion_tokens"])
    other_seed = again.replies(decisions[:3], 2, seed=6)
    assert other_seed != replies[:3] and _answered(server) - before == len(decisions) + 3


def test_torn_cache_tail_is_dropped_with_a_warning_and_asked_again(server, decisions, tmp_path):
    agent = _agent(server, tmp_path)
    replies = agent.replies(decisions[:4], 1, seed=9)
    path = agent.cache.path
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # a kill in the middle of the last append
    before = _answered(server)
    with pytest.warns(UserWarning, match="torn last line"):
        resumed = _agent(server, tmp_path)
    assert len(resumed.cache) == 3 and path.read_bytes().endswith(b"\n")
    assert resumed.replies(decisions[:4], 1, seed=9) == replies
    assert _answered(server) - before == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(_agent(server, tmp_path).cache) == 4


def test_greedy_requests_share_a_key_whatever_the_seed(server, decisions, tmp_path):
    agent = _agent(server, tmp_path, GREEDY)
    agent.replies(decisions[:2] * 3, 1, seed=1)
    agent.replies(decisions[:2], 1, seed=2)
    assert agent.record()["usage"]["requests"] == 2


def test_retries_through_injected_500s(chat, decisions, tmp_path):
    with running_server(chat, fail_every=5) as server:
        agent = _agent(server, tmp_path)
        assert len(agent.replies(decisions, 1, seed=0)) == len(decisions)
        stats = server.stats.record()
        assert stats["failed"] >= 2 and stats["answered"] == len(decisions)
        assert agent.record()["usage"]["retries"] == stats["failed"]


def test_retries_through_stalls(chat, decisions, tmp_path):
    with running_server(chat, stall_every=4, stall_seconds=3.0) as server:
        agent = _agent(server, tmp_path, timeout=1.5, concurrency=3)
        assert len(agent.replies(decisions, 1, seed=0)) == len(decisions)
        assert server.stats.record()["stalled"] >= 2 and agent.record()["usage"]["retries"] >= 2


def test_concurrency_is_bounded(chat, decisions, tmp_path):
    with running_server(chat) as server:
        _agent(server, tmp_path, concurrency=3).replies(decisions, 4, seed=0)
        assert 1 < server.stats.record()["max_in_flight"] <= 3


def test_failure_after_retries_is_one_line_without_the_key(chat, decisions, tmp_path, monkeypatch):
    secret = "sk-test-DO-NOT-LEAK-1234567890"
    monkeypatch.setenv("SEPO_API_KEY", secret)
    with running_server(chat, fail_every=1) as server:
        agent = _agent(server, tmp_path, max_retries=1)
        with pytest.raises(SepoError) as error:
            agent.replies(decisions[:2], 1, seed=0)
    message = str(error.value)
    assert "InternalServerError 500" in message and "re-run to resume" in message and "\n" not in message
    assert secret not in message and secret not in repr(agent.record())


def test_key_is_sent_but_never_written(server, decisions, tmp_path, monkeypatch):
    secret = "sk-test-DO-NOT-LEAK-0987654321"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    agent = _agent(server, tmp_path)
    assert agent.client.api_key == secret
    agent.replies(decisions[:2], 1, seed=0)
    assert secret not in agent.cache.path.read_text() and secret not in repr(agent.record())


def test_truncated_replies_are_parse_failures(server, decisions, tmp_path):
    agent = _agent(server, tmp_path, Decoding(temperature=3.0, max_new_tokens=3))
    choices = agent.act(decisions, np.random.default_rng(0))
    # the seed `act` drew: its replies come from the cache
    seed = int(np.random.default_rng(0).integers(2**63 - 1))
    finished = [group[0].finished for group in agent.replies(decisions, 1, seed=seed)]
    assert agent.record()["usage"]["cache_hits"] == len(decisions)
    assert finished.count(False) > 0
    for choice, done in zip(choices, finished):
        assert (choice.parse_status == "truncated") == (not done)
        assert choice.rule is not None or choice.parse_status == "ok"
    assert agent.counts["act.truncated"] == finished.count(False)


def test_evaluation_records_decoding_and_usage(server, tmp_path):
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.games import load_game

    agent = _agent(server, tmp_path, GREEDY)
    result = evaluate(load_game("kuhn", "rigorous"), agent, EvalConfig(episodes=1, replicates=50))
    record = result["agent_record"]
    assert record["decoding"] == GREEDY.record()
    assert record["usage"]["requests"] > 0 and record["usage"]["prompt_tokens"] > 0


def test_an_interrupted_audit_resumes_asking_only_for_what_is_missing(server, tmp_path, monkeypatch):
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.games import load_game
    from sepo.opponents.pools import parse_bot

    pools = {"train": [parse_bot("kuhn", "NashApprox")], "collusive": [parse_bot("kuhn", "LooseAggressive")]}
    game, decoding = load_game("kuhn", "rigorous"), Decoding(max_new_tokens=8)
    config = EvalConfig(episodes=2, replicates=50, pools=pools)
    full_agent = EndpointAgent(
        "tiny", server.url, KuhnText(), decoding, samples=4, cache_dir=tmp_path / "full"
    )
    full = evaluate(game, full_agent, config)
    asked = full_agent.record()["usage"]["requests"]

    killed = EndpointAgent("tiny", server.url, KuhnText(), decoding, samples=4, cache_dir=tmp_path / "killed")
    ask, calls = killed._ask, []

    def ask_then_die(item):
        if len(calls) == asked // 2:
            raise KeyboardInterrupt  # the audit is killed here
        calls.append(item)
        return ask(item)

    monkeypatch.setattr(killed, "_ask", ask_then_die)
    with pytest.raises(KeyboardInterrupt):
        evaluate(game, killed, config)
    resumed_agent = EndpointAgent(
        "tiny", server.url, KuhnText(), decoding, samples=4, cache_dir=tmp_path / "killed"
    )
    kept = len(resumed_agent.cache)
    assert kept == asked // 2
    before = _answered(server)
    resumed = evaluate(game, resumed_agent, config)
    assert _answered(server) - before == resumed_agent.record()["usage"]["requests"] == asked - kept
    assert _metrics(resumed) == _metrics(full)


def test_a_token_budget_stops_the_audit_cleanly_and_a_rerun_resumes(server, tmp_path):
    """`max_tokens_total`: once the tokens sent reach it the audit stops in one line, having sent
    at most `concurrency` requests past it; the replies it got are cached, and a re-run without a
    budget asks only for the rest and prints the uninterrupted audit's numbers."""
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.games import load_game
    from sepo.opponents.pools import parse_bot
    from sepo.policies.endpoint import TokenBudgetReached

    pools = {"train": [parse_bot("kuhn", "NashApprox")], "collusive": [parse_bot("kuhn", "LooseAggressive")]}
    game, decoding = load_game("kuhn", "rigorous"), Decoding(max_new_tokens=8)
    config = EvalConfig(episodes=2, replicates=50, pools=pools)
    full_agent = EndpointAgent(
        "tiny",
        server.url,
        KuhnText(),
        decoding,
        samples=4,
        cache_dir=tmp_path / "full",
        failure_rule="fallback",
    )
    full = evaluate(game, full_agent, config)
    spent = full_agent.record()["usage"]
    budget = (spent["prompt_tokens"] + spent["completion_tokens"]) // 3

    limited = EndpointAgent(
        "tiny",
        server.url,
        KuhnText(),
        decoding,
        samples=4,
        cache_dir=tmp_path / "limited",
        failure_rule="fallback",
        max_tokens_total=budget,
        concurrency=2,
    )
    with pytest.raises(
        TokenBudgetReached, match="token budget of .* reached .* re-run the same command to resume"
    ):
        evaluate(game, limited, config)
    usage = limited.record()["usage"]
    sent = usage["prompt_tokens"] + usage["completion_tokens"]
    largest_request = max(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]
                          for r in full_agent.cache.records())
    assert budget <= sent <= budget + 2 * largest_request and 0 < usage["requests"] < spent["requests"]

    resumed_agent = EndpointAgent(
        "tiny",
        server.url,
        KuhnText(),
        decoding,
        samples=4,
        cache_dir=tmp_path / "limited",
        failure_rule="fallback",
    )
    assert len(resumed_agent.cache) == usage["requests"]
    resumed = evaluate(game, resumed_agent, config)
    assert resumed_agent.record()["usage"]["requests"] == spent["requests"] - usage["requests"]
    assert _metrics(resumed) == _metrics(full)


def test_reprompt_through_the_endpoint_is_cached_and_counted(server, decisions, tmp_path):
    """The tiny model's greedy replies rarely parse: each failure gets correction turns as chat
    requests, counted; a second agent on the same cache asks nothing and plays the same."""
    agent = _agent(server, tmp_path, GREEDY, failure_rule="reprompt", reprompts=1)
    first = agent.estimate(decisions)
    assert first.exact and agent.counts["estimate.reprompt.sent"] > 0
    again = _agent(server, tmp_path, GREEDY, failure_rule="reprompt", reprompts=1)
    np.testing.assert_array_equal(again.estimate(decisions).table(), first.table())
    assert again.record()["usage"]["requests"] == 0


def _metrics(result: dict) -> str:
    """The result without the agent's usage record, as text (NaN intervals compare equal)."""
    return json.dumps({k: v for k, v in result.items() if k != "agent_record"}, sort_keys=True, default=str)


def test_greedy_audit_equals_the_local_hf_agent(chat, server, tmp_path):
    """The acceptance check in-process: same model, seed and decoding (temperature 0) behind
    `sepo serve` and loaded locally give the same result file, exploitability included, with the
    default failure rule (forced decoding: `sepo serve` picks the forced action from the model's
    whole next-token distribution, as the local rule does, though the API returns at most 20
    alternatives)."""
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.games import load_game
    from sepo.opponents.pools import parse_bot

    pools = {"train": [parse_bot("kuhn", "NashApprox")], "exploiter": [parse_bot("kuhn", "BestResponse")],
             "collusive": [parse_bot("kuhn", "LooseAggressive")]}
    game, config = load_game("kuhn", "rigorous"), EvalConfig(episodes=2, replicates=200, seed=4, pools=pools)
    greedy = Decoding(temperature=0, max_new_tokens=8)
    local = HFPolicy(chat.model, KuhnText(), tokenizer=chat.tokenizer,
                     decoding=HFDecoding.of(greedy, failure_rule="forced"))
    remote = _agent(server, tmp_path, greedy, failure_rule="forced")
    here, there = evaluate(game, local, config), evaluate(game, remote, config)
    assert there["policy"]["read"] == "exact" and there["exploitability"] is not None
    assert any(row["opponent"] == "BestResponse" for row in there["opponents"])
    assert remote.counts["act.rule.forced"] > 0 and remote.counts["forced.unmatched"] == 0
    assert there["forced_decoding"].pop("read_from") == "whole distribution (sepo serve)"
    assert there["forced_decoding"].pop("unmatched") == 0
    assert _metrics(there) == _metrics(here)


def test_forced_decoding_through_the_api_matches_the_local_rule(chat, server, decisions, tmp_path):
    local = HFPolicy(chat.model, KuhnText(), tokenizer=chat.tokenizer, decoding=GREEDY)
    replies = ["I am not sure.", "Let me think", "", "BET or PASS?"] * 3
    whole = _agent(server, tmp_path, GREEDY)
    assert whole.serves_forced_choice()
    assert whole.forced_actions(decisions, replies) == local.forced_actions(decisions, replies)
    assert whole.counts["forced.unmatched"] == 0 and whole.counts["forced.whole_distribution"] == len(
        decisions
    )
    few = _agent(server, tmp_path, GREEDY, forced_top_logprobs=2)
    few._serves_forced = False  # as any other OpenAI-compatible server: the 2 likeliest tokens only
    played, exact = few.forced_actions(decisions, replies), local.forced_actions(decisions, replies)
    differ = [i for i, (a, b) in enumerate(zip(played, exact)) if a != b]
    assert all(played[i] == decisions[i].legal_actions[0] for i in differ)  # unmatched: the fallback action
    assert few.counts["forced.unmatched"] >= len(differ) > 0
    record = few.forced_record()
    assert (
        record["read_from"] == "the 2 likeliest tokens"
        and record["unmatched"] == few.counts["forced.unmatched"]
    )
    assert "the two routes can differ" in record["note"]


@pytest.mark.parametrize("candidates, expected", [
    ([["B", -0.1], [" BET", -2.0], ["PASS", -1.0]], 0),    # whole words first: PASS (-1.0) beats BET (-2.0)
    ([["B", -0.1], ["P", -0.5]], 1),                        # no whole word: prefixes, B is likelier
    ([["hello", -0.1]], None),                              # nothing legal among the alternatives
    ([["PASS", -1.0], ["BET", -1.0]], 0),                   # a tie goes to the first legal action
])
def test_forced_choice_rule(decisions, candidates, expected):
    from sepo.policies.endpoint import _forced_choice

    d = decisions[0]  # PASS or BET
    assert _forced_choice(d, ["PASS", "BET"], candidates) == (
        None if expected is None else d.legal_actions[expected]
    )


def test_message_requests_go_through_the_endpoint_and_its_cache_apart_from_actions(chat, server, tmp_path):
    """Cheap talk: an `openai:` agent writes its message through the same endpoint and cache; the
    key holds the message chat, so message and action requests never collide; greedy messages
    equal the local model's; a re-run reads them from the cache."""
    from sepo.games import load_game
    from sepo.games.talk import MESSAGE_INSTRUCTION, message_chat

    game = load_game("negotiation")
    decisions = [game.decision_after(((a, 4),), 0) for a in range(3)]
    agent = EndpointAgent(
        "tiny", server.url, game.text, GREEDY, cache_dir=tmp_path / "cache", failure_rule="fallback"
    )
    before = _answered(server)
    written = agent.write_messages(decisions)
    agent.replies(decisions, 1, seed=0)
    assert _answered(server) - before == 2 * len(decisions)  # message and action requests: distinct keys
    records = [json.loads(line) for line in agent.cache.path.read_text().splitlines()]
    asked = [r["request"]["messages"][-1]["content"] for r in records]
    assert sum(MESSAGE_INSTRUCTION.split(" (")[0] in text for text in asked) == len(decisions)
    local = HFPolicy(chat.model, game.text, mode="sample", tokenizer=chat.tokenizer, decoding=GREEDY)
    expected = local.generate([local.render(message_chat(game.text, d)) for d in decisions], 1, greedy=True)
    assert [w.reply for w in written] == [e[0].text for e in expected]
    again = EndpointAgent(
        "tiny", server.url, game.text, GREEDY, cache_dir=tmp_path / "cache", failure_rule="fallback"
    )
    before = _answered(server)
    assert again.write_messages(decisions) == written and _answered(server) == before
    assert again.record()["usage"]["cache_hits"] == len(decisions)
