"""sepo's Inspect task against a real `sepo serve` (a `ChatServer` thread on the loopback address)
through Inspect's own OpenAI provider: the score says the policy was read exactly only when the
replies were greedy, as the server echoes the decoding each reply was generated with."""
from __future__ import annotations

import pytest

pytest.importorskip("inspect_ai")
pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from inspect_ai import eval as inspect_eval  # noqa: E402

import sepo._registry  # noqa: E402,F401 (what the entry point imports)
from tests.serving import chat, running_server  # noqa: E402,F401 (fixtures)

ARGS = {"episodes": 1, "replicates": 20, "max_tokens": 4, "samples": 2, "game_params": {"hands": 2}}


def _audit(server, tmp_path, **options) -> tuple[object, dict]:
    """`inspect eval sepo/kuhn --model openai/tiny --model-base-url URL -M responses_api=false`, in
    process."""
    log = inspect_eval(
        "sepo/kuhn",
        model="openai/tiny",
        model_base_url=server.url,
        model_args={"responses_api": False},
        task_args=ARGS,
        log_dir=str(tmp_path),
        display="none",
        **options,
    )[0]
    assert log.status == "success", log.error
    score = log.samples[0].scores["sepo_metrics"]
    return score, score.metadata


def test_the_openai_route_plays_greedily_and_says_so(chat, tmp_path, monkeypatch):
    """Inspect's OpenAI provider drops `temperature` for a model name it does not know (here
    "tiny"); the task sends it again where the provider keeps it, and the server's echo shows
    every reply was greedy, so "exact" is earned."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    with running_server(chat) as server:
        score, result = _audit(server, tmp_path)
        stats = server.stats.record()
    assert stats["answered"] > 1 and stats["default_temperature"] == 0
    assert result["decoding"]["sent"]["source"] == "server" and result["decoding"]["sent"]["temperature"] == 0
    calls = result["decoding"]["calls"]  # Inspect keeps the raw request of the first few calls only
    assert set(calls) <= {"temperature 0.0", "not recorded"} and calls["temperature 0.0"] >= 1
    assert sum(calls.values()) == stats["answered"]
    assert result["policy"]["read_exactly"] is True
    assert score.answer == "exploitability (exact) of the exact policy"


def test_a_dropped_temperature_is_read_as_the_sampled_policy_it_is(chat, tmp_path, monkeypatch):
    """Without the resend (a provider that drops temperature and passes nothing on), the server
    samples at its default 1.0 and says so; the task reads the policy from sampled replies and
    labels the value an estimate with its interval, even with Inspect's raw call log off."""
    import sepo.inspect_tasks

    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.setattr(sepo.inspect_tasks, "_openai_family", lambda model: False)
    with running_server(chat) as server:
        score, result = _audit(server, tmp_path, log_model_api=False)
        stats = server.stats.record()
    assert stats["default_temperature"] == stats["answered"] > 1
    assert result["decoding"]["sent"] == {
        **result["decoding"]["sent"],
        "temperature": 1.0,
        "source": "server",
    }
    assert (
        result["decoding"]["played"]["temperature"] == 1.0
        and result["decoding"]["requested"]["temperature"] == 0
    )
    assert result["policy"]["read_exactly"] is False and result["policy"]["replies_per_state"] == 2
    assert score.answer.startswith("exploitability (estimate; 95% interval [")
    assert any("temperature 0 was asked for" in note for note in result["notes"])
