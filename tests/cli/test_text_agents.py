"""Text agents on the command line: the decoding options reach `eval` and `exploit` in every
registered domain, and every output says how the agent's policy table was obtained (`exact` or
`estimated (n replies per state)`), apart from the solver's own exactness (pruning)."""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from sepo.cli.main import app  # noqa: E402
from sepo.games import domain_names  # noqa: E402
from sepo.models.tiny import init_tiny_model  # noqa: E402

SHORT = ["--max-new-tokens", "6"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=20)


def _run(*args):
    result = CliRunner().invoke(app, ["--threads", "1", *args])
    assert result.exit_code == 0, result.output + result.stderr
    return result


def test_exploit_labels_an_estimated_table_apart_from_the_solver(tiny):
    sampled = json.loads(_run("exploit", "--game", "kuhn", "--agent", f"hf:{tiny}", "--temperature", "1",
                              "--samples", "3", *SHORT, "--json").stdout)
    assert (
        sampled["policy"]["read"] == "estimated (3 replies per state)"
        and not sampled["policy"]["read_exactly"]
    )
    # Kuhn's solver is exact; the table is not, so the value is not called exact
    assert sampled["solver_exact"] is True and sampled["exact"] is False
    assert sampled["exact_label"] == "estimated"
    low, high = sampled["ci"]["exploitability"]
    assert low <= sampled["exploitability"] <= high
    assert (sampled["decoding"]["temperature"], sampled["decoding"]["max_new_tokens"]) == (1.0, 6)

    greedy = json.loads(
        _run(
            "exploit", "--game", "kuhn", "--agent", f"hf:{tiny}", "--temperature", "0", *SHORT, "--json"
        ).stdout
    )
    assert greedy["policy"]["read"] == "exact" and "ci" not in greedy
    assert greedy["exact"] is True and greedy["exact_label"] == "exact"
    evaluated = json.loads(_run("eval", "--game", "kuhn", "--agent", f"hf:{tiny}", "--samples", "3",
                                "--episodes", "1", *SHORT, "--json").stdout)
    labels = (evaluated["exact"], evaluated["solver_exact"], evaluated["exact_label"])
    assert labels == (False, True, "estimated")

    human = _run("exploit", "--game", "kuhn", "--agent", f"hf:{tiny}", "--samples", "3", *SHORT).stdout
    assert "estimated (3 replies per state)" in human and "policy table" in human
    title = " ".join(human.split())  # a sampled policy's table is not titled "exact values"
    assert "in kuhn: the solver's exact values for the estimated (3 replies per state) policy" in title
    assert "in kuhn: exact values" not in title
    bot = _run("exploit", "--game", "kuhn", "--agent", "bot:NashApprox").stdout
    # said once, in the table
    assert "│ policy table" in bot and "exact" in bot and "policy table: exact" not in bot


@pytest.mark.parametrize("game", [g for g in ("ipd", "auction") if g in domain_names()])
def test_decoding_options_reach_text_agents_in_every_domain(tiny, game):
    """A greedy hf agent in another domain: the exploit output says the table is exact and gives
    the solver's exactness on its own row; eval records the decoding it was given."""
    params = {"ipd": ["--rounds", "2"], "auction": ["--rounds", "1"]}[game]
    result = json.loads(_run("exploit", "--game", game, "--agent", f"hf:{tiny}", "--temperature", "0", *SHORT,
                             *params, "--json").stdout)
    assert result["policy"]["read"] == "exact" and result["decoding"]["temperature"] == 0
    human = _run(
        "exploit", "--game", game, "--agent", f"hf:{tiny}", "--temperature", "0", *SHORT, *params
    ).stdout
    assert "policy table" in human and "solver" in human
    audit = json.loads(
        _run(
            "eval",
            "--game",
            game,
            "--agent",
            f"hf:{tiny}",
            "--temperature",
            "0",
            "--top-p",
            "0.9",
            *SHORT,
            *params,
            "--episodes",
            "1",
            "--json",
        ).stdout
    )
    assert audit["decoding"]["top_p"] == 0.9 and audit["decoding"]["max_new_tokens"] == 6
    assert audit["policy"]["read"] == "exact"
    failures = sum(
        n for where in ("played", "policy") for kind, n in audit["reply_kinds"][where].items() if kind != "ok"
    )
    forced = audit["forced_decoding"]  # greedy: a failed reply met again is decided once
    assert (
        forced["computed"] + forced["reused"] == failures and forced["computed"] > 0 and forced["reused"] > 0
    )


def test_paper_protocol_puts_the_papers_decoding_on_record(tiny):
    audit = json.loads(
        _run(
            "eval",
            "--game",
            "kuhn",
            "--protocol",
            "paper",
            "--agent",
            f"hf:{tiny}",
            "--episodes",
            "1",
            "--samples",
            "2",
            "--max-new-tokens",
            "6",
            "--json",
        ).stdout
    )
    assert audit["decoding"] == {"temperature": 0.8, "top_p": 0.95, "top_k": 50, "max_new_tokens": 6,
                                 "repetition_penalty": 1.3, "enable_thinking": None}
    kinds = audit["reply_kinds"]  # every reply parsed is counted by kind, in play and in the policy read
    assert sum(kinds["policy"].values()) == audit["policy"]["replies"]
    assert sum(kinds["policy"].values()) - kinds["policy"].get("ok", 0) == audit["policy"]["invalid_replies"]
    played = sum(kinds["played"].values())
    assert played > 0 and audit["invalid_action_rate"] == pytest.approx(
        1 - kinds["played"].get("ok", 0) / played
    )


def test_bad_decoding_options_are_one_line_errors():
    runner = CliRunner()
    for args in (["--temperature", "-1"], ["--top-p", "0"], ["--samples", "0"], ["--failure-rule", "guess"],
                 ["--reprompts", "2"], ["--failure-rule", "reprompt", "--reprompts", "0"]):
        result = runner.invoke(app, ["exploit", "--game", "kuhn", "--agent", "uniform", *args])
        assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
    result = runner.invoke(app, ["train", "--out", "x", "--policy", "tabular", "--temperature", "0.5"])
    assert result.exit_code == 2 and "language models" in result.stderr


def test_reprompt_rule_through_eval_with_a_local_model(tiny):
    """`--failure-rule reprompt` with the tiny model (whose replies rarely parse): the audit says how
    many corrections were sent and what they recovered; greedy, its policy is still exact; the
    human output has the re-prompt line."""
    args = (
        "eval",
        "--game",
        "kuhn",
        "--agent",
        f"hf:{tiny}",
        "--temperature",
        "0",
        *SHORT,
        "--episodes",
        "1",
        "--failure-rule",
        "reprompt",
        "--reprompts",
        "1",
    )
    audit = json.loads(_run(*args, "--json").stdout)
    played = audit["reprompts"]["played"]
    assert audit["reprompts"]["max_reprompts"] == 1 and played["failed_replies"] > 0
    assert played["reprompts_sent"] == played["failed_replies"] == played["recovered"] + played["fell_back"]
    assert audit["policy"]["read"] == "exact"
    assert "re-prompts (at most 1 per failed reply)" in _run(*args).stdout


def test_eval_disguise_audits_the_plain_and_the_renamed_game(tiny):
    """`sepo eval --disguise SEED` with a greedy local model: the plain result, and beside it the
    renaming, both games' values and their differences; a bot agent is refused in one line."""
    args = ("eval", "--game", "ipd", "--rounds", "2", "--agent", f"hf:{tiny}", "--temperature", "0", *SHORT,
            "--episodes", "1", "--failure-rule", "fallback", "--disguise", "4")
    audit = json.loads(_run(*args, "--json").stdout)
    block = audit["disguise"]
    assert block["seed"] == 4 and set(block["names"]) == {"Prisoner's Dilemma", "COOPERATE", "DEFECT"}
    row = block["metrics"]["utility"]
    assert row["plain"] == audit["utility"] and row["disguised"] == block["disguised"]["utility"]
    assert row["difference"] == row["disguised"] - row["plain"]
    assert "adversarial_gap" in block["metrics"] and block["disguised"]["policy"]["read"] == "exact"
    assert "plain against disguised (seed 4" in _run(*args).stdout
    refused = CliRunner().invoke(app, ["eval", "--game", "ipd", "--agent", "bot:TFT", "--disguise", "1"])
    assert refused.exit_code == 2 and "text agents only" in refused.stderr


def test_a_language_model_agent_writes_messages_in_eval_with_talk(tiny):
    """`sepo eval --talk` with an hf: agent: the model writes one message reply per round and
    episode (batched), each counted in the output's talk block as a message, silence or a parse
    failure; the same seed gives the same counts."""
    args = (
        "eval",
        "--game",
        "negotiation",
        "--rounds",
        "2",
        "--talk",
        "--agent",
        f"hf:{tiny}",
        "--episodes",
        "1",
        "--temperature",
        "1",
        "--samples",
        "2",
        *SHORT,
        "--json",
    )
    first, second = (json.loads(_run(*args).stdout) for _ in range(2))
    talk, opponents = first["talk"], first["opponents"]
    assert talk["model_replies"] == 2 * len(opponents)  # one message reply per round of every episode
    sent = talk["model_replies"] - talk["parse_failures"] - talk["model_silent"]
    talking_bots = [o for o in opponents if o["opponent"] != "BestResponse"]  # every paper bot has a line
    assert talk["messages"] == 2 * len(talking_bots) + sent
    assert second["talk"] == talk


def test_a_sample_count_too_large_to_read_is_refused_before_any_episode(tiny, monkeypatch):
    """`sepo eval --agent hf:M --samples 100000` is refused before any pool is played (minutes to
    hours with a real model), also for a model that might answer with the action line alone (read
    exactly, no samples): the model is asked first (a short probe), only when the count would be
    refused."""
    import sepo.evaluation.evaluate as evaluate

    def no_play(*args, **kwargs):
        raise AssertionError("an episode was played before the refusal")

    monkeypatch.setattr(evaluate, "play_episodes", no_play)
    result = CliRunner().invoke(app, ["--threads", "1", "eval", "--game", "kuhn", "--agent", f"hf:{tiny}",
                                      "--samples", "100000", "--episodes", "1", *SHORT])
    assert result.exit_code == 2, result.output + result.stderr
    assert "more than 100,000" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_language_model_run_is_audited_in_its_own_game(tiny, tmp_path):
    """`sepo exploit --game ipd --agent run:R` with R a Kuhn language-model run is refused, as a tabular
    run is, not audited in the IPD without a word; `hf:R/model` plays the model anywhere."""
    import os

    run = tmp_path / "run"
    run.mkdir()
    os.symlink(tiny, run / "model")
    (run / "config.json").write_text(json.dumps({"game": "kuhn", "policy": "hf"}))
    other = CliRunner().invoke(
        app,
        ["exploit", "--game", "ipd", "--rounds", "2", "--agent", f"run:{run}", "--temperature", "0", *SHORT],
    )
    assert (
        other.exit_code == 2
        and "is a run of game 'kuhn', not 'ipd'" in other.stderr
        and f"hf:{run / 'model'}" in other.stderr
    )
    own = json.loads(
        _run(
            "exploit", "--game", "kuhn", "--agent", f"run:{run}", "--temperature", "0", *SHORT, "--json"
        ).stdout
    )
    assert own["policy"]["read"] == "exact"


def test_samples_under_greedy_decoding_is_refused_not_ignored(tiny):
    """`--temperature 0 --samples 5` is refused: greedy decoding reads one reply per prompt, so the
    --samples given would be silently unused."""
    result = CliRunner().invoke(
        app,
        [
            "exploit",
            "--game",
            "kuhn",
            "--agent",
            f"hf:{tiny}",
            "--temperature",
            "0",
            "--samples",
            "5",
            *SHORT,
        ],
    )
    assert result.exit_code == 2 and "--samples 5 applies to sampled replies" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_thinking_for_a_template_without_the_switch_is_refused_not_ignored(tiny):
    """`--thinking` (or `--no-thinking`) with a model whose chat template has no enable_thinking
    switch is refused, not run as if it were not given while the result records it as set."""
    for flag in ("--thinking", "--no-thinking"):
        result = CliRunner().invoke(
            app, ["exploit", "--game", "kuhn", "--agent", f"hf:{tiny}", "--temperature", "0", flag, *SHORT]
        )
        assert result.exit_code == 2 and f"{flag}: the chat template" in result.stderr, result.output


def test_eval_calls_an_audit_number_without_an_interval_exact_only_when_it_is(tiny):
    """`sepo eval` prints "exact" in the interval column only for exact numbers: not for the
    best-response payoff of a sampled policy, nor for a pricing lower bound (and its payoffs)."""
    from sepo.cli.audit import _no_interval_text

    human = " ".join(
        _run(
            "eval", "--game", "kuhn", "--agent", f"hf:{tiny}", "--episodes", "1", "--samples", "3", *SHORT
        ).stdout.split()
    )
    for name in ("br_payoff", "agent_payoff_vs_br"):
        assert re.search(rf"│ {name} │ \S+ │ point estimate \(sampled policy\) │", human), human
    bound = {
        "exact_value": "adversarial_gap",
        "exact_label": "lower bound",
        "policy": {"read": "exact", "read_exactly": True},
    }
    assert _no_interval_text("adversarial_gap", bound) == "lower bound"
    assert _no_interval_text("br_payoff", bound) == "of the lower bound audit"
    exact = {
        "exact_value": "exploitability",
        "exact_label": "exact",
        "policy": {"read": "exact", "read_exactly": True},
    }
    assert _no_interval_text("br_payoff", exact) == "exact" and _no_interval_text("welfare", bound) == "exact"
