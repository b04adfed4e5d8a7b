"""A training run's sizes are checked from its settings before anything is built or written: the
history tree, a step's rollouts, a language model's prompts and the replies it reads at each step
and at the end; the settings a refusal offers do fit."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.errors import SepoError


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"HF_HUB_OFFLINE": "1", "COLUMNS": "200"})


def _one_line(result, *words):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_tree_states_is_the_sum_over_rounds_in_closed_form():
    from sepo.metrics.repeated import SATURATED, StageGame, tree_states

    def summed(stage, rounds, memory=None, threshold=0.0):
        n_a, n_o = stage.shape
        total = 0
        for t in range(rounds):
            count = (n_a * n_o) ** (t if memory is None else min(t, memory))
            if threshold > 0:
                count = min(count, int(n_o**t / threshold) + 1)
            total += count
        return total

    for shape in [(2, 2), (15, 15), (1, 1), (3, 1), (1, 3)]:
        stage = StageGame(np.zeros(shape), np.zeros(shape))
        for rounds in (1, 2, 3, 8, 40):
            for memory in (None, 0, 1, 2, 5):
                assert tree_states(stage, rounds, memory) == min(summed(stage, rounds, memory), SATURATED)
            for threshold in (0.5, 0.01):
                assert tree_states(stage, rounds, None, threshold) == min(
                    summed(stage, rounds, None, threshold), SATURATED
                )
    started = time.process_time()
    two = StageGame(np.zeros((2, 2)), np.zeros((2, 2)))
    assert tree_states(StageGame(np.zeros((15, 15)), np.zeros((15, 15))), 10**9, 1) == 1 + 225 * (10**9 - 1)
    assert tree_states(two, 10**9) == SATURATED and tree_states(two, 10**9, None, 0.01) == SATURATED
    assert time.process_time() - started < 1


def _config(**settings):
    from sepo.training.tabular import TabularSEPOConfig

    return TabularSEPOConfig(steps=2, **settings)


def test_the_rounds_and_groups_a_refusal_offers_fit(monkeypatch):
    import sepo.limits
    import sepo.metrics.repeated
    import sepo.training.sizes as sizes

    budget = 200 << 20
    for module in (sepo.limits, sepo.metrics.repeated, sizes):
        monkeypatch.setattr(module, "memory_budget", lambda: budget)
    with pytest.raises(SepoError) as refused:
        _config(game="pricing", game_params={"rounds": 10000}, groups=2).validate()
    rounds = int(re.search(r"--rounds (\d+) or fewer", str(refused.value)).group(1))
    sizes._CHECKED.clear()
    _config(game="pricing", game_params={"rounds": rounds}, groups=2).validate()
    with pytest.raises(SepoError, match="tree"):
        _config(game="pricing", game_params={"rounds": rounds + 1}, groups=2).validate()
    with pytest.raises(SepoError) as refused:
        _config(game="kuhn", groups=10**8).validate()
    groups = int(re.search(r"--groups (\d+) or fewer", str(refused.value)).group(1))
    _config(game="kuhn", groups=groups).validate()
    with pytest.raises(SepoError, match="rollouts"):
        _config(game="kuhn", groups=groups + 1).validate()


@pytest.mark.parametrize(
    "samples, words",
    [
        (
            ["--samples", "1", "--final-samples", "2048"],
            ["at the end of the run", "936 information states", "1,916,928", "--final-samples 106 or fewer"],
        ),
        (["--samples", "100000"], ["at every step", "93,600,000", "--samples 106 or fewer"]),
    ],
)
def test_a_language_models_reads_are_sized_before_training(tmp_path, samples, words):
    """Leduc's 936 information states at a typed 2,048 final replies each are refused before
    training (about 25 minutes of replies on the tiny model); a step's reads likewise."""
    args = [
        "train",
        "--game",
        "openspiel:leduc_poker",
        "--policy",
        f"hf:{tmp_path / 'no-model'}",
        "--steps",
        "1",
        "--groups",
        "1",
        "--group-size",
        "2",
        "--out",
        tmp_path / "run",
    ]
    _one_line(_run(*args, *(samples or ["--samples", "1"])), "100,000", *words)
    assert not (tmp_path / "run").exists()
    result = _run(*args, "--samples", "100", "--final-samples", "100")
    assert (
        "information states" not in result.stderr and "no such folder" in result.stderr
    )  # the plan fits: the model is next


def test_an_experiment_too_large_is_refused_before_its_folder_and_its_fix_runs(tmp_path):
    from tests.experiments.conftest import tiny_config

    big = tmp_path / "big.yaml"
    big.write_text(
        tiny_config(
            **{"tabular: {steps: 8, groups: 8}": "tabular: {steps: 8, groups: 100000, group_size: 1024}"}
        )
    )
    _one_line(_run("experiment", "plan", big), "training.tabular.groups", "rollouts", "or fewer")
    _one_line(_run("experiment", "run", big, "--out", tmp_path / "out", "--quiet"), "training.tabular.groups")
    assert not (tmp_path / "out").exists()
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(
        tiny_config(
            **{
                "stages: [base, sft, grpo, sepo, constant]": "stages: [grpo]",
                "seeds: [0, 1]": "seeds: [0]",
                "checkpoints: [4]": "checkpoints: []",
            }
        )
    )
    result = _run("experiment", "run", fixed, "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "saved, words",
    [
        ([], ["no training checkpoint was saved yet"]),
        ([2, 4], ["checkpoint at step 4 saved", "resumes the training from step 4 of 6"]),
        ([5, 6], ["all 6 steps are trained and saved", "checkpoint at step 6", "without training again"]),
    ],
)
def test_a_stopped_language_model_run_says_what_it_kept_and_how_to_go_on(tmp_path, monkeypatch, saved, words):
    """A stop in the final read printed only "error: interrupted"."""
    import sepo.training.grpo

    out = tmp_path / "run"

    def stopped(config, folder, **kwargs):
        for step in saved:
            (folder / "trainer" / f"checkpoint-{step}").mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(sepo.training.grpo, "run_llm_sepo", stopped)
    result = _run(
        "train",
        "--game",
        "kuhn",
        "--policy",
        "hf:model",
        "--steps",
        "6",
        "--groups",
        "1",
        "--quiet",
        "--out",
        out,
    )
    assert result.exit_code == 130, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: interrupted; ") and all(word in line for word in words), line


def test_the_default_final_read_is_fitted_to_the_read_limit():
    """Not typed, --final-samples is 2,048 where that fits (Kuhn's 12 states) and as many as fit
    otherwise (Leduc's 936 states: 106, so 99,216 replies), never a refusal of a default."""
    from sepo.training.grpo import LLMSEPOConfig

    def final(game):
        return LLMSEPOConfig(game=game, model="m", steps=1, groups=1, group_size=2).default_final_samples()

    assert final("kuhn") == 2048 and final("openspiel:leduc_poker") == 106
