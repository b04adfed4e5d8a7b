"""The IPD end to end with the tiny local model (slow: 40 s to 2 min on the shared 2-core machine):
SFT on the reciprocal mixture, then two steps of `sepo train --game ipd --policy hf:MODEL`
(SEPO-GRPO), twice; the logged gap is the solver's at the logged table, and the same seed gives
the same metrics."""
import json

import numpy as np
import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.slow

ARGS = [
    "--game",
    "ipd",
    "--rounds",
    "3",
    "--memory",
    "1",
    "--steps",
    "2",
    "--groups",
    "2",
    "--group-size",
    "2",
    "--lambda-e",
    "5",
    "--lambda-x",
    "1.8",
    "--max-new-tokens",
    "16",
    "--samples",
    "4",
    "--final-samples",
    "8",
    "--seed",
    "3",
    "--quiet",
]


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model
    from sepo.training.sft import SFTRunConfig, run_sft
    from sepo.training.sft_data import generate_traces, write_sft_dataset

    root = tmp_path_factory.mktemp("ipd_llm")
    tiny = init_tiny_model(root / "tiny", seed=0, domains=["ipd"], episodes=20)
    write_sft_dataset(generate_traces("ipd", "reciprocal", 4, 0, rounds=3), root / "data", 0)
    return run_sft(
        SFTRunConfig(model=str(tiny), data=str(root / "data"), epochs=1, learning_rate=3e-3), root / "sft"
    ).model


def _metrics(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timing = ("runtime", "per_second", "time")
    return [{k: v for k, v in r.items() if not any(t in k for t in timing)} for r in records]


def test_two_steps_of_llm_sepo_from_the_cli_twice(sft_model, tmp_path):
    from typer.testing import CliRunner

    from sepo.cli.main import app
    from sepo.games import load_game
    from sepo.games.ipd.exact import IPDSolver

    runner = CliRunner()
    for name in ("a", "b"):
        result = runner.invoke(
            app,
            ["--threads", "1", "train", "--policy", f"hf:{sft_model}", "--out", str(tmp_path / name), *ARGS],
        )
        assert result.exit_code == 0, result.output
        assert "adversarial_gap" in result.output
    first, second = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    assert [r["step"] for r in first if "loss" in r] == [1, 2]
    assert first == second  # same seed, same metrics (the tables, charges' inputs, losses, rewards)
    solver = IPDSolver(load_game("ipd", rounds=3, memory=1))
    for record in first:
        assert record["adversarial_gap"] == pytest.approx(solver.evaluate(np.array(record["table"])).value)
        if "loss" in record:
            assert 0.0 <= record["invalid_rate"] <= 1.0 and np.isfinite(record["utility_exact"])
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["exact_value"] == "adversarial_gap" and summary["steps"] == 2


def test_advantage_alignment_adds_its_term_to_the_language_model_reward(sft_model, tmp_path, monkeypatch):
    """The same seed and model, payoff-only GRPO and Advantage Alignment: the first step's completions
    are the same, so the logged rewards differ by the term alone. The term is pinned to 0.5 here (its
    value is checked by enumeration in tests/training/test_advantage_alignment.py; the tiny model's
    replies do not parse, so its played policy is deterministic and the true term is 0): this checks
    that TRL hands each completion's term to the reward, which adds it."""
    from typer.testing import CliRunner

    from sepo.cli.main import app
    from sepo.training.grpo import SEPOEnvironment

    pinned = SEPOEnvironment.alignment
    monkeypatch.setattr(
        SEPOEnvironment,
        "alignment",
        lambda self, table, context, action: (
            pinned(self, table, context, action)
            + (0.5 if self.config.method == "advantage-alignment" else 0.0)
        ),
    )
    options = dict(zip(ARGS[:-1:2], ARGS[1:-1:2]))  # ARGS ends with the flag --quiet
    options = {**{k: v for k, v in options.items() if k not in ("--lambda-e", "--lambda-x")}, "--steps": "1"}
    base = [x for pair in options.items() for x in pair] + ["--quiet"]
    runs = {"none": ["--penalty", "none"], "aa": ["--method", "advantage-alignment", "--aa-beta", "5"]}
    for name, extra in runs.items():
        result = CliRunner().invoke(
            app,
            [
                "--threads",
                "1",
                "train",
                "--policy",
                f"hf:{sft_model}",
                "--out",
                str(tmp_path / name),
                *base,
                *extra,
            ],
        )
        assert result.exit_code == 0, result.output
    none, aa = (_metrics(tmp_path / name)[0] for name in runs)
    assert none["table"] == aa["table"]  # the same played policy before the first update
    assert aa["reward_mean"] == pytest.approx(none["reward_mean"] + 0.5, abs=1e-9)
    assert json.loads((tmp_path / "aa" / "config.json").read_text())["method"] == "advantage-alignment"
