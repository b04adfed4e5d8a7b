"""The exact tabular SEPO trainer: it descends exploitability, the ablation is exact, runs resume."""
import json

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games.kuhn import exact as kuhn_exact
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer, load_run_policy


def _final_logits(tmp_path, name, **overrides):
    config = TabularSEPOConfig(**{"steps": 60, "groups": 32, "seed": 3, **overrides})
    trainer = TabularSEPOTrainer(config, tmp_path / name)
    trainer.train()
    return trainer.logits


def test_constant_penalty_gives_the_none_update_exactly(tmp_path):
    none = _final_logits(tmp_path, "none", penalty="none", lambda_e=0.0)
    constant = _final_logits(
        tmp_path, "constant", penalty="constant", lambda_e=5.0, lambda_c=1.0, lambda_x=2.0, protocol="paper"
    )
    per_rollout = _final_logits(
        tmp_path, "per", penalty="per-rollout", lambda_e=5.0, lambda_c=1.0, lambda_x=2.0, protocol="paper"
    )
    assert np.max(np.abs(constant - none)) <= 1e-9
    assert np.max(np.abs(per_rollout - none)) > 1e-2


@pytest.mark.parametrize("scaling", ["group", "none"])
def test_constant_equals_none_under_every_reward_scaling(tmp_path, scaling):
    none = _final_logits(tmp_path, "n", penalty="none", scale_rewards=scaling, steps=20)
    constant = _final_logits(tmp_path, "c", penalty="constant", lambda_e=3.0, scale_rewards=scaling, steps=20)
    assert np.max(np.abs(constant - none)) <= 1e-9


def test_shuffled_penalty_runs_reproducibly_and_is_neither_none_nor_per_rollout(tmp_path):
    none = _final_logits(tmp_path, "none", penalty="none", steps=20)
    shuffled = _final_logits(tmp_path, "shuffled", penalty="shuffled", lambda_e=5.0, steps=20)
    again = _final_logits(tmp_path, "again", penalty="shuffled", lambda_e=5.0, steps=20)
    per_rollout = _final_logits(tmp_path, "per", penalty="per-rollout", lambda_e=5.0, steps=20)
    assert np.array_equal(shuffled, again)
    assert np.abs(shuffled - none).max() > 1e-3 and np.abs(shuffled - per_rollout).max() > 1e-3


def test_sepo_descends_exploitability_and_payoff_only_grpo_does_not(tmp_path):
    sepo = TabularSEPOTrainer(
        TabularSEPOConfig(penalty="per-rollout", lambda_e=5.0, steps=600, seed=0), tmp_path / "sepo"
    ).train()
    grpo = TabularSEPOTrainer(TabularSEPOConfig(penalty="none", steps=600, seed=0), tmp_path / "none").train()
    assert sepo["exploitability"] <= 0.01
    assert grpo["exploitability"] >= 0.1
    assert grpo["utility"] > sepo["utility"]


def test_killed_run_resumes_to_the_same_result(tmp_path):
    config = TabularSEPOConfig(
        penalty="per-rollout", lambda_e=2.0, steps=50, groups=16, checkpoint_every=10, seed=1
    )
    TabularSEPOTrainer(config, tmp_path / "whole").train()
    # dies after step 23; checkpoint at 20
    TabularSEPOTrainer(config, tmp_path / "killed").train(stop_after=23)
    with open(tmp_path / "killed" / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 23, "torn')  # a half-written line from the kill
    resumed = TabularSEPOTrainer(config, tmp_path / "killed")
    resumed.train()
    whole = json.loads((tmp_path / "whole" / "policy.json").read_text())
    again = json.loads((tmp_path / "killed" / "policy.json").read_text())
    assert whole == again
    steps = [
        json.loads(line)["step"] for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == list(range(50))


def test_same_seed_same_numbers_other_seed_other_numbers(tmp_path):
    a = _final_logits(tmp_path, "a", penalty="per-rollout", lambda_e=1.0)
    b = _final_logits(tmp_path, "b", penalty="per-rollout", lambda_e=1.0)
    c = _final_logits(tmp_path, "c", penalty="per-rollout", lambda_e=1.0, seed=4)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)


def test_run_directory_holds_config_metrics_checkpoint_and_policy(tmp_path):
    TabularSEPOTrainer(TabularSEPOConfig(steps=5, groups=8), tmp_path / "run").train()
    for name in ("config.json", "metrics.jsonl", "checkpoint.json", "policy.json", "summary.json"):
        assert (tmp_path / "run" / name).exists(), name
    policy = load_run_policy(tmp_path / "run")
    assert kuhn_exact.as_policy(policy.table).shape == (12, 2)


def test_a_different_config_in_the_same_directory_is_refused(tmp_path):
    TabularSEPOTrainer(TabularSEPOConfig(steps=3, groups=8), tmp_path / "run").train()
    with pytest.raises(SepoError, match="different config"):
        TabularSEPOTrainer(TabularSEPOConfig(steps=3, groups=8, lambda_e=1.0), tmp_path / "run").train()


def test_unreadable_checkpoint_is_a_clear_error(tmp_path):
    TabularSEPOTrainer(TabularSEPOConfig(steps=3, groups=8), tmp_path / "run").train()
    (tmp_path / "run" / "checkpoint.json").write_text("{not json")
    with pytest.raises(SepoError, match="unreadable checkpoint"):
        TabularSEPOTrainer(TabularSEPOConfig(steps=3, groups=8), tmp_path / "run").train()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"lambda_e": -1.0}, "lambda-e"),
        ({"lambda_x": float("nan")}, "lambda-x"),
        ({"penalty": "sometimes"}, "penalty"),
        ({"group_size": 1}, "group_size"),
        ({"game": "chess"}, "kuhn"),
        ({"scale_rewards": "max"}, "scaling"),
    ],
)
def test_bad_settings_are_refused(overrides, message):
    with pytest.raises(SepoError, match=message):
        TabularSEPOConfig(**overrides).validate()


def test_kuhn_collusion_is_charged_under_paper_only(tmp_path):
    """Kuhn is two-player zero-sum: under `rigorous` collusion does not apply, so a λc is refused
    (it would change nothing); under `paper` the fold charge moves the policy."""
    with pytest.raises(SepoError, match="--lambda-c 2 cannot act"):
        _final_logits(tmp_path, "rigorous", lambda_e=1.0, lambda_c=2.0)
    paper_base = _final_logits(tmp_path, "paper_base", lambda_e=1.0, protocol="paper")
    paper = _final_logits(tmp_path, "paper", lambda_e=1.0, lambda_c=2.0, protocol="paper")
    assert np.max(np.abs(paper - paper_base)) > 1e-3


def test_checkpoint_holds_only_the_touched_rows_and_resumes_and_loads(tmp_path):
    """Untouched rows are zero and are not written (tic_tac_toe's 78 MB after two steps); the
    resume and the unfinished run's policy read the rows back into the whole table."""
    config = TabularSEPOConfig(
        game="openspiel:leduc_poker", steps=4, groups=2, group_size=2, checkpoint_every=2, seed=0
    )
    TabularSEPOTrainer(config, tmp_path / "whole").train()
    TabularSEPOTrainer(config, tmp_path / "part").train(stop_after=2)
    state = json.loads((tmp_path / "part" / "checkpoint.json").read_text())
    rows = TabularSEPOTrainer(config, tmp_path / "probe").legal.shape[0]
    assert state["step"] == 2 and 0 < len(state["rows"]) < rows // 4
    assert load_run_policy(tmp_path / "part").table.shape[0] == rows
    TabularSEPOTrainer(config, tmp_path / "part").train()
    assert json.loads((tmp_path / "whole" / "policy.json").read_text()) == json.loads(
        (tmp_path / "part" / "policy.json").read_text()
    )


def test_a_dense_checkpoint_still_resumes(tmp_path):
    config = TabularSEPOConfig(steps=4, groups=8, checkpoint_every=2, seed=0)
    TabularSEPOTrainer(config, tmp_path / "whole").train()
    trainer = TabularSEPOTrainer(config, tmp_path / "old")
    trainer.train(stop_after=2)
    path = tmp_path / "old" / "checkpoint.json"
    path.write_text(json.dumps({"step": 2, "logits": trainer.logits.tolist(), "adam": trainer.adam.state()}))
    TabularSEPOTrainer(config, tmp_path / "old").train()
    assert json.loads((tmp_path / "whole" / "policy.json").read_text()) == json.loads(
        (tmp_path / "old" / "policy.json").read_text()
    )


def test_a_stop_while_the_final_value_is_computed_keeps_the_finished_steps(tmp_path, monkeypatch):
    from sepo import runs

    metrics = TabularSEPOTrainer.exact_metrics

    def stopped(self, policy):
        if self.step == self.config.steps:
            raise KeyboardInterrupt
        return metrics(self, policy)

    monkeypatch.setattr(TabularSEPOTrainer, "exact_metrics", stopped)
    with pytest.raises(KeyboardInterrupt):
        TabularSEPOTrainer(TabularSEPOConfig(steps=2, groups=8), tmp_path / "run").train()
    assert json.loads((tmp_path / "run" / "checkpoint.json").read_text())["step"] == 2
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2
    runs.STOP_NOTES.clear()


def test_a_stop_between_checkpoints_checkpoints_the_logged_steps(tmp_path, monkeypatch):
    """Two steps of a run that checkpoints every 100 were lost when the stop came before the
    first checkpoint; the stop now writes the logged steps' state, and the resume continues it."""
    from sepo import runs

    config = TabularSEPOConfig(steps=4, groups=8, checkpoint_every=100, seed=2)
    TabularSEPOTrainer(config, tmp_path / "whole").train()
    metrics = TabularSEPOTrainer.exact_metrics

    def stopped(self, policy):
        if self.step == 2:  # inside the third step, after its update
            raise KeyboardInterrupt
        return metrics(self, policy)

    monkeypatch.setattr(TabularSEPOTrainer, "exact_metrics", stopped)
    with pytest.raises(KeyboardInterrupt):
        TabularSEPOTrainer(config, tmp_path / "run").train()
    assert json.loads((tmp_path / "run" / "checkpoint.json").read_text())["step"] == 2
    runs.STOP_NOTES.clear()
    monkeypatch.setattr(TabularSEPOTrainer, "exact_metrics", metrics)
    TabularSEPOTrainer(config, tmp_path / "run").train()
    assert json.loads((tmp_path / "whole" / "policy.json").read_text()) == json.loads(
        (tmp_path / "run" / "policy.json").read_text()
    )


@pytest.mark.parametrize("damage, words", [
    (lambda run: (run / "summary.json").unlink(), ["is marked finished but its summary.json is missing"]),
    (lambda run: (run / "summary.json").write_text('{"a": 1}'), ["unreadable run summary", "summary.json"]),
    (lambda run: (run / "summary.json").write_text('"str"'), ["unreadable run summary", "summary.json"]),
    (lambda run: (run / "policy.json").unlink(), ["is marked finished but its policy.json is missing"]),
], ids=["no-summary", "summary-without-steps", "summary-a-string", "no-policy"])
def test_a_finished_run_missing_or_with_a_damaged_output_is_one_line(tmp_path, damage, words):
    """A finished run without its summary.json (not taken for unfinished, then refused a write), with
    a summary of another shape (no KeyError in the `done:` line), or without its policy.json (not
    'already complete; policy at R/policy.json', a file that is not there) is refused in one line."""
    from tests.cli.cli_helpers import _error, _run

    command = ["train", "--steps", "3", "--groups", "8", "--quiet", "--out", tmp_path / "run"]
    assert _run(*command).exit_code == 0
    intact = _run(*command)
    assert intact.exit_code == 0 and "done: 3 steps (already complete)" in intact.stdout, intact.output
    damage(tmp_path / "run")
    before = {p: p.read_bytes() for p in sorted((tmp_path / "run").rglob("*")) if p.is_file()}
    _error(_run(*command), *words, "--overwrite")
    assert {p: p.read_bytes() for p in sorted((tmp_path / "run").rglob("*")) if p.is_file()} == before


def test_a_run_of_another_game_is_refused_with_advice_that_reads_as_english(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"game": "kuhn"}))
    with pytest.raises(SepoError) as refused:
        load_run_policy(tmp_path, "ipd")
    assert str(refused.value).endswith("give --game kuhn, or a run trained in ipd")
