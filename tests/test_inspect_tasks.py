"""sepo's Inspect tasks, offline: every domain is registered as `sepo/<domain>`, and a task run
against Inspect's mock model scores exactly the metrics `sepo eval`'s own audit gives for an agent
that writes the same replies (skipped where inspect_ai is not installed; the `dev` extra pulls it in)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai._util.registry import registry_lookup  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402

import sepo._registry  # noqa: E402,F401 (what the entry point imports)
from sepo.evaluation.evaluate import EvalConfig, evaluate  # noqa: E402
from sepo.games import domain_names, load_game  # noqa: E402
from sepo.inspect_tasks import SCORED  # noqa: E402
from sepo.policies.replies import Decoding, Reply  # noqa: E402
from sepo.policies.text_policy import TextPolicy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _answer(user_prompt: str) -> str:
    """The mock model's rule: bet or call whatever it holds, after a reasoning line."""
    word = "CALL" if "CALL" in user_prompt.rsplit("Legal actions:", 1)[-1] else "BET"
    return f"Thinking it over.\n{word}"


def _mock(input, tools, tool_choice, config):
    output = ModelOutput.from_content(model="mockllm/model", content=_answer(input[-1].text))
    output.usage = ModelUsage(input_tokens=50, output_tokens=4, total_tokens=54)  # no tokenizer download
    return output


class SameReplies:
    """A `ReplySource` that writes the mock model's replies, for sepo's own audit."""

    name, decoding = "same-replies", Decoding(temperature=0, max_new_tokens=48)

    def __init__(self, view):
        self.text = view

    def replies(self, decisions, n, seed):
        return [[Reply(_answer(self.text.user_prompt(d)), True)] * n for d in decisions]


def test_every_domain_is_a_registered_task():
    for name in domain_names():
        assert registry_lookup("task", f"sepo/{name}") is not None, name


def test_the_kuhn_task_scores_what_sepo_eval_measures(tmp_path):
    """The mock model's recorded request carries no temperature (it ignores decoding), so the task
    cannot claim greedy replies: it reads the sampled policy (2 replies per state) and labels the
    value an estimate, exactly as `sepo eval` does for a sampled agent writing the same replies."""
    args = {"episodes": 2, "seed": 3, "replicates": 50, "samples": 2, "game_params": {"hands": 2}}
    log = inspect_eval("sepo/kuhn", model=get_model("mockllm/model", custom_outputs=_mock), task_args=args,
                       log_dir=str(tmp_path), display="none")[0]
    assert log.status == "success", log.error
    score = log.samples[0].scores["sepo_metrics"]
    game = load_game("kuhn", "rigorous", hands=2)
    source = SameReplies(game.text)
    source.decoding = Decoding(temperature=1.0, max_new_tokens=48)
    expected = evaluate(game, TextPolicy(source, failure_rule="fallback", seed=3, samples=2),
                        EvalConfig(episodes=2, seed=3, replicates=50))
    assert set(score.value) == set(SCORED)
    for name in SCORED:
        want = expected["exploitability"] if name == "exact_value" else expected[name]
        assert score.value[name] == pytest.approx(want), name
    assert (
        score.answer
        == "exploitability (estimate; 95% interval [0.3333, 0.3333]) of the estimated (2 replies per state) "
           "policy"
    )
    assert score.metadata["decoding"]["sent"] == {
        "temperature": None,
        "top_p": None,
        "top_k": None,
        "repetition_penalty": None,
        "seed": None,
        "source": "request",
    }
    assert score.metadata["ci"]["utility"] == pytest.approx(expected["ci"]["utility"])
    assert {s.name for s in log.results.scores} == set(SCORED)
    assert log.stats.model_usage  # Inspect logged the model calls and their tokens


def test_a_named_pool_plays_that_pool_and_the_exact_best_response(tmp_path):
    """`-T pool=collusive`: the collusive bots only, plus the rigorous protocol's exact best
    response (as `sepo eval --pools` adds it), so utility has no train pool to read (NaN)."""
    args = {"episodes": 1, "replicates": 20, "pool": "collusive", "game_params": {"hands": 2}}
    log = inspect_eval("sepo/kuhn", model=get_model("mockllm/model", custom_outputs=_mock), task_args=args,
                       log_dir=str(tmp_path), display="none")[0]
    assert log.status == "success", log.error
    result = log.samples[0].scores["sepo_metrics"]
    played = {(row["pool"], row["opponent"]) for row in result.metadata["opponents"]}
    assert {pool for pool, _ in played} == {"collusive", "exploiter"} and (
        "exploiter",
        "BestResponse",
    ) in played
    assert math.isnan(result.value["utility"]) and not math.isnan(result.value["exact_value"])


def test_pyproject_declares_the_entry_point_and_an_optional_extra():
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is Python 3.11+")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["inspect_ai"] == {"sepo": "sepo._registry"}
    assert any(d.startswith("inspect-ai") for d in project["optional-dependencies"]["inspect"])
    assert not any(d.startswith("inspect") for d in project["dependencies"])


@pytest.mark.parametrize("option, value, words", [
    ("episodes", -1, "-T episodes must be in 1.."),
    ("episodes", "abc", "-T episodes must be a whole number, got 'abc'"),
    ("episodes", 1_000_000_000, "-T episodes must be in 1.."),
    ("pool", "bogus", "-T pool must be train, exploiter or collusive (or left out), got 'bogus'"),
    ("protocol", "bogus", "-T protocol must be rigorous or paper"),
    ("samples", 0, "-T samples must be in 1.."),
    ("temperature", "nan", "-T temperature must be a number"),
    ("temperature", float("nan"), "-T temperature must be a number"),
    ("max_tokens", 0, "-T max_tokens must be in 1.."),
    ("reprompts", 100, "-T reprompts must be in 1..10"),
    ("game_params", {"bogus": 1}, "takes no parameter 'bogus'"),
    ("failure_rule", "forced", "-T failure_rule=forced needs log-probabilities"),
    ("seed", -1, "-T seed must be in 0.."),
    ("replicates", 0, "-T replicates must be in 1.."),
    ("samples", True, "-T samples must be a whole number"),
])
def test_task_options_are_checked_when_the_task_is_built(option, value, words):
    """Every bad `-T` option is one message when the task is built (Inspect prints a
    PrerequisiteError as its message, without a traceback), never a failure inside the sample."""
    from inspect_ai._util.error import PrerequisiteError

    with pytest.raises(PrerequisiteError) as refused:
        registry_lookup("task", "sepo/kuhn")(**{option: value})
    message = str(refused.value.message)
    assert message.startswith("sepo/kuhn: ") and words in message and "\n" not in message


def test_a_bad_option_on_the_command_line_is_one_message_and_a_failed_exit(tmp_path):
    import shutil
    import subprocess

    inspect = shutil.which("inspect", path=str(Path(sys.executable).parent))
    if inspect is None:
        pytest.skip("the inspect command is not installed next to this Python")
    done = subprocess.run([inspect, "eval", "sepo/kuhn", "--model", "mockllm/model", "-T", "seed=-1",
                           "--log-dir", str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "COLUMNS": "200"})
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0
    assert lines == ["sepo/kuhn: -T seed must be in 0..9,223,372,036,854,775,807, got -1"]
    assert not list(tmp_path.iterdir())  # no log written


@pytest.mark.parametrize("domain, options, hint", [
    ("kuhn", {"game_params": {"hands": 100_000_000}}, "use -T game_params='{hands: "),
    ("kuhn", {"episodes": 1_000_000, "game_params": {"hands": 1000}}, "use -T episodes="),
    ("ipd", {"game_params": {"rounds": 10_000_000}}, "-T game_params='{rounds: 10000000}' is above"),
])
def test_a_refusal_names_the_task_options_not_the_command_line_ones(domain, options, hint):
    """A refusal's advice is in the `-T` form `inspect eval` takes (`--hands 10,971` is no option of
    the task); the number it gives is one YAML reads whole (no thousands separator)."""
    import re

    from inspect_ai._util.error import PrerequisiteError

    with pytest.raises(PrerequisiteError) as refused:
        registry_lookup("task", f"sepo/{domain}")(**options)
    message = str(refused.value.message)
    assert hint in message and " --" not in message, message
    advised = re.search(r"-T (?:game_params='\{\w+: (\S+)\}'|episodes=(\S+))", message)
    assert advised and max(advised.groups(), key=bool).isdigit(), message
