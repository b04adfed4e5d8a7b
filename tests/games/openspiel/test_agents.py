"""Agents in OpenSpiel games through the generic paths: tabular SEPO trains in Leduc to a low
exact exploitability, and the tiny language model plays, is audited and trains."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspiel")

from tests.cli.cli_helpers import _run  # noqa: E402


@pytest.mark.slow
def test_tabular_sepo_from_uniform_reaches_leduc_exploitability_005(tmp_path):
    """1000 steps of 512 groups: about 18 s of CPU (70 s wall on the loaded 2-core machine);
    exploitability 2.374 (uniform) -> 0.032 (docs/openspiel.md)."""
    out = tmp_path / "run"
    result = _run(
        "train",
        "--game",
        "openspiel:leduc_poker",
        "--out",
        out,
        "--lambda-e",
        "100",
        "--groups",
        "512",
        "--lr",
        "0.1",
        "--steps",
        "1000",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exploitability"] <= 0.05
    audit = json.loads(
        _run("exploit", "--game", "openspiel:leduc_poker", "--agent", f"run:{out}", "--json").stdout
    )
    assert audit["exact"] is True and audit["exploitability"] == pytest.approx(
        summary["exploitability"], abs=1e-12
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("transformers")
    from sepo.models.tiny import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=20)


@pytest.mark.slow
def test_tiny_model_plays_leduc_and_is_audited_exactly(tiny):
    """936 prompts read greedily (about 40 s of CPU), then two episodes per pool opponent."""
    result = _run("eval", "--game", "openspiel:leduc_poker", "--agent", f"hf:{tiny}", "--temperature", "0",
                  "--max-new-tokens", "6", "--episodes", "2", "--json")
    assert result.exit_code == 0, result.output
    audit = json.loads(result.stdout)
    assert audit["policy"]["read"] == "exact" and audit["exact_label"] == "exact"
    assert 0.0 <= audit["exploitability"] <= 13.0 and audit["br_payoff"] == pytest.approx(
        audit["exploitability"]
    )


@pytest.mark.slow
def test_tiny_model_trains_with_language_model_sepo_in_an_openspiel_game(tiny, tmp_path):
    pytest.importorskip("trl")
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

    config = LLMSEPOConfig(
        model=str(tiny),
        game="openspiel:kuhn_poker",
        steps=1,
        groups=2,
        group_size=4,
        seed=1,
        lambda_e=5.0,
        table_samples=2,
        final_samples=2,
        max_new_tokens=6,
    )
    summary = run_llm_sepo(config, tmp_path / "run")
    assert summary["steps"] == 1 and 0.0 <= summary["exploitability"] <= 2.0


@pytest.mark.slow
def test_an_endpoint_agent_is_audited_as_the_local_model(tiny, tmp_path, monkeypatch):
    """`openai:MODEL@URL` through sepo's own chat server: the same exact audit as `hf:`, with the
    fallback rule (the endpoint's forced decoding sees the API's 20 alternatives)."""
    from sepo.models.serve import ChatModel
    from tests.serving import running_server

    monkeypatch.setenv("SEPO_CACHE_DIR", str(tmp_path / "cache"))
    args = ["exploit", "--game", "openspiel:kuhn_poker", "--temperature", "0", "--max-new-tokens", "6",
            "--failure-rule", "fallback", "--json"]
    with running_server(ChatModel(tiny, name="tiny", device="cpu")) as server:
        remote = _run(*args, "--agent", f"openai:tiny@{server.url}")
    local = _run(*args, "--agent", f"hf:{tiny}")
    assert remote.exit_code == 0 and local.exit_code == 0, remote.output + local.output
    remote, local = json.loads(remote.stdout), json.loads(local.stdout)
    assert remote["policy"]["read"] == local["policy"]["read"] == "exact"
    assert remote["exploitability"] == pytest.approx(local["exploitability"], abs=1e-12)
