"""examples/sepo_minimal.py is sepo's tabular trainer written out: same draws, same numbers."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer
from tests.examples.scripts import load_example


@pytest.fixture(scope="module")
def minimal():
    return load_example("sepo_minimal")


@pytest.mark.parametrize("lambda_e", [5.0, 0.0])
def test_the_minimal_example_follows_the_trainer_step_for_step(minimal, tmp_path, lambda_e):
    steps = 30
    config = TabularSEPOConfig(
        game="kuhn",
        penalty="per-rollout" if lambda_e else "none",
        lambda_e=lambda_e,
        seed=3,
        steps=steps,
        groups=32,
    )
    trainer = TabularSEPOTrainer(config, tmp_path / "run")
    expected = []
    trainer.train(on_step=lambda record: expected.append(trainer.logits.copy()))

    seen = []
    result = minimal.train(minimal.Args(lambda_e=lambda_e, steps=steps, groups=32, seed=3),
                           on_step=lambda step, logits: seen.append(logits.copy()))
    assert len(seen) == len(expected) == steps
    for step, (mine, theirs) in enumerate(zip(seen, expected)):
        np.testing.assert_allclose(mine, theirs, atol=1e-9, err_msg=f"step {step}")
    summary = trainer.exact_metrics(trainer.policy())
    assert result["exploitability"] == pytest.approx(summary["exploitability"], abs=1e-12)
    assert result["utility"] == pytest.approx(summary["utility"], abs=1e-12)


def test_the_minimal_example_moves_the_policy_off_uniform(minimal):
    """A real run changes the table: the comparison above is not between two untrained policies."""
    result = minimal.train(minimal.Args(steps=30, groups=32))
    assert np.abs(result["policy"] - 0.5).max() > 0.05


def test_the_minimal_example_prints_the_demos_kuhn_numbers(minimal, capsys, monkeypatch):
    """The defaults are the Kuhn training of `sepo demo --game kuhn` (1500 steps each, a few CPU seconds)."""
    monkeypatch.setattr("sys.argv", ["sepo_minimal.py"])
    minimal.main()
    lines = capsys.readouterr().out.splitlines()
    assert "exploitability 0.0003   utility vs train pool 0.0318" in lines[0]
    assert "exploitability 0.3396   utility vs train pool 0.1294" in lines[1]


def test_the_minimal_examples_options_are_its_args_with_their_docstrings(minimal, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["sepo_minimal.py", "--help"])
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps help at the terminal's width
    with pytest.raises(SystemExit) as done:
        minimal.main()
    text = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0
    assert "--lambda-e LAMBDA_E λe: weight of the exploitability charge (0 is payoff-only GRPO). " \
           "(default: 5.0)" in text
    assert "--steps STEPS Adam steps. (default: 1500)" in text
