"""`sepo eval --max-tokens-total N` with an `openai:` agent (the tiny model served in a thread on
the loopback address): the audit stops in one line once the budget is spent, and the same
command without it resumes from the cache; the table output says what the audit spent."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from sepo.cli.main import app  # noqa: E402
from tests.serving import chat, server  # noqa: E402,F401 (fixtures)


def _eval(server, cache, *extra):
    return CliRunner().invoke(app, ["--threads", "1", "eval", "--game", "kuhn", "--hands", "2", "--agent",
                                    f"openai:tiny@{server.url}", "--episodes", "1", "--temperature", "0",
                                    "--max-new-tokens", "6", "--failure-rule", "fallback", *extra],
                              env={"SEPO_CACHE_DIR": str(cache), "COLUMNS": "200"})


def test_the_budget_stops_the_audit_and_the_same_command_resumes(server, tmp_path):
    # progress would add lines under load
    stopped = _eval(server, tmp_path, "--max-tokens-total", "300", "--json", "--quiet")
    assert stopped.exit_code == 2 and len(stopped.stderr.strip().splitlines()) == 1, stopped.output
    assert (
        "token budget of 300 reached" in stopped.stderr
        and "re-run the same command to resume" in stopped.stderr
    )
    done = _eval(server, tmp_path, "--json")
    assert done.exit_code == 0, done.output
    usage = json.loads(done.stdout)["agent_record"]["usage"]
    assert (
        usage["cache_hits"] > 0 and usage["cached_prompt_tokens"] >= 300 - usage["cached_completion_tokens"]
    )
    table = _eval(server, tmp_path)
    assert table.exit_code == 0 and "tokens: 0 prompt + 0 completion sent in 0 requests" in table.stdout


def test_the_budget_applies_to_endpoint_agents_only(tmp_path):
    runner = CliRunner()
    for agent, says in (("bot:NashApprox", "text agents only"), (f"hf:{tmp_path}", "openai: agents only")):
        result = runner.invoke(app, ["eval", "--game", "kuhn", "--agent", agent, "--max-tokens-total", "10"])
        assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
        assert says in result.stderr
