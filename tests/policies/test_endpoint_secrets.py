"""Credentials in an endpoint URL (`http://user:pw@host/v1`) reach the server and nothing else:
not the agent's name, its record, the reply cache, an error line, or `sepo eval`'s output."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from sepo.cli.main import app  # noqa: E402
from sepo.errors import SepoError  # noqa: E402
from sepo.games.kuhn.text import KuhnText  # noqa: E402
from sepo.policies.endpoint import EndpointAgent, parse_endpoint_spec  # noqa: E402
from sepo.policies.replies import Decoding  # noqa: E402
from sepo.redact import redact_secrets  # noqa: E402
from tests.serving import chat, decisions, server  # noqa: E402,F401 (fixtures)

SECRET = "s3cretPW"


def _with_credentials(url: str) -> str:
    return url.replace("http://", f"http://alice:{SECRET}@")


@pytest.mark.parametrize("text, shown", [
    ("openai:m@http://alice:pw@host:8/v1", "openai:m@http://***@host:8/v1"),
    ("https://TOKEN@host/v1?api_key=abc&x=1", "https://***@host/v1?api_key=***&x=1"),
    ("http://host/v1", "http://host/v1"),
])
def test_redact_secrets(text, shown):
    assert redact_secrets(text) == shown


def test_the_agent_name_record_and_cache_hold_no_credentials(server, decisions, tmp_path):
    agent = EndpointAgent(
        "tiny",
        _with_credentials(server.url),
        KuhnText(),
        Decoding(temperature=0, max_new_tokens=4),
        cache_dir=tmp_path,
        failure_rule="fallback",
    )
    agent.replies(decisions[:3], 1, seed=0)
    assert agent.usage["requests"] == 3  # the credentials reached the server's URL: it answered
    written = agent.name + json.dumps(agent.record()) + agent.cache.path.read_text()
    assert SECRET not in written and "alice" not in written and "http://***@127.0.0.1" in agent.name


def test_error_lines_hold_no_credentials(tmp_path):
    agent = EndpointAgent(
        "tiny",
        f"http://alice:{SECRET}@127.0.0.1:9/v1",
        KuhnText(),
        Decoding(temperature=0),
        cache_dir=tmp_path,
        max_retries=0,
        timeout=5,
        failure_rule="fallback",
    )
    with pytest.raises(SepoError) as failed:
        agent.chat_replies([[{"role": "user", "content": "hi"}]], 1, seed=0)
    assert "request failed" in str(failed.value) and SECRET not in str(failed.value)
    with pytest.raises(SepoError) as refused:
        parse_endpoint_spec(f"tiny@http://alice:{SECRET}@")
    assert SECRET not in str(refused.value)


def test_sepo_eval_output_holds_no_credentials(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SEPO_CACHE_DIR", str(tmp_path))
    for name in ("SEPO_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    args = [
        "eval",
        "--agent",
        f"openai:tiny@{_with_credentials(server.url)}",
        "--episodes",
        "1",
        "--temperature",
        "0",
        "--max-new-tokens",
        "4",
        "--failure-rule",
        "fallback",
    ]
    for extra in (["--json"], []):
        result = CliRunner().invoke(app, args + extra)
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output and "***@127.0.0.1" in result.output
