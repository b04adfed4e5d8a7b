"""sepo.experiments.execute: what a results row claims."""
import pytest

from sepo.experiments.execute import metric_rows


def _result(audit_exact: bool) -> dict:
    """An audit's result as `sepo eval` gives it: bootstrap metrics with intervals, the audit's
    numbers without (its own label in `exact`), and the domain's behaviour table from the episodes."""
    return {"utility": 1.0, "adversarial_gap": 0.5, "br_payoff": 2.0, "exact": audit_exact,
            "exact_label": "exact" if audit_exact else "projection", "exact_value": "adversarial_gap",
            "game/cooperation_rate": 0.75, "ci": {"utility": [0.5, 1.5]}}


def test_a_row_is_exact_only_when_its_number_is():
    """A row of results.parquet has exact = True only when its number is exact: not an IPD gap of an
    agent's memory-1 projection (neither bound), behaviour rates counted on two episodes, or any
    number without an interval."""
    rows = {row["metric"]: row["exact"] for row in metric_rows(_result(audit_exact=False))}
    assert rows == {
        "utility": False,
        "adversarial_gap": False,
        "br_payoff": False,
        "game/cooperation_rate": False,
    }
    rows = {row["metric"]: row["exact"] for row in metric_rows(_result(audit_exact=True))}
    assert rows == {
        "utility": False,
        "adversarial_gap": True,
        "br_payoff": True,
        "game/cooperation_rate": False,
    }


def test_an_estimated_policys_audit_numbers_are_not_exact_even_without_an_interval():
    result = {
        **_result(audit_exact=True),
        "policy": {"read": "estimated (64 replies per state)", "read_exactly": False},
        "ci": {"utility": [0.5, 1.5], "adversarial_gap": [0.4, 0.6]},
    }
    assert not any(row["exact"] for row in metric_rows(result))  # br_payoff has no interval
    result["policy"] = {"read": "exact", "read_exactly": True}
    assert {row["metric"] for row in metric_rows(result) if row["exact"]} == {"br_payoff"}


def test_a_resumed_experiment_refuses_an_hf_agents_model_changed_since_it_started(tmp_path):
    """An experiment's config names an hf agent's model by its path only; a model replaced between a
    kill and the resume is refused, so one results table never mixes cells of the old and the new
    model."""
    import yaml

    from sepo.errors import SepoError
    from sepo.experiments.config import validate_config
    from sepo.experiments.execute import MODEL_STAMPS, prepare
    from sepo.runs import open_run
    from tests.experiments.conftest import tiny_config

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    text = tiny_config().replace("{name: tab, kind: tabular}", f"{{name: lm, kind: hf, model: {model}}}")
    config = validate_config(yaml.safe_load(text))
    settings = config.record()
    with open_run(tmp_path / "out", "experiment run", settings) as run:
        run.commit()
        prepare(config, run)
    assert (tmp_path / "out" / MODEL_STAMPS).is_file()
    with open_run(tmp_path / "out", "experiment run", settings) as run:  # unchanged: resumes
        prepare(config, run)
    (model / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(SepoError, match="the model of agent lm .* changed since this experiment started"):
        with open_run(tmp_path / "out", "experiment run", settings) as run:
            prepare(config, run)


LM_BASE_CONFIG = """
name: lm-base
domains: [{name: DOMAIN}]
agents: [{name: lm, kind: hf, model: tiny}]
stages: [base]
episodes: {validation: 1, test: 1}
replicates: 50
decoding: {temperature: 1.0, max_new_tokens: 8, samples: 4}
"""


def _prepared_experiment(text: str, out):
    """An experiment folder as the runner leaves it before its first cell: (config, plan)."""
    import yaml

    from sepo.experiments.cells import expand
    from sepo.experiments.config import validate_config
    from sepo.experiments.execute import prepare
    from sepo.runs import open_run

    config = validate_config(yaml.safe_load(text))
    with open_run(out, "experiment run", config.record()) as run:
        run.path("cells").mkdir(exist_ok=True)
        run.path("models")
        run.commit()
        prepare(config, run)
    return config, expand(config)


def test_a_language_model_audit_killed_half_way_resumes_from_its_kept_batches(tmp_path, monkeypatch):
    """A language-model cell keeps its audit's model calls in the cell's `reply-cache/`: killed in
    its test audit, the resumed cell reads the validation audit's batches instead of generating them
    again, and its numbers equal those of a cell that was never killed. (In one process: a batch
    is kept per torch thread count.)"""
    import json

    from sepo.experiments import execute
    from sepo.runs import read_manifest
    from tests.experiments.conftest import tiny_domain

    text = LM_BASE_CONFIG.replace("DOMAIN", tiny_domain())
    config, plan = _prepared_experiment(text, tmp_path / "clean")
    (cell,) = plan.cells
    clean = execute.run_cell(config, cell, tmp_path / "clean")["rows"]

    config, plan = _prepared_experiment(text, tmp_path / "killed")
    real_audit = execute.audit

    def killed_in_test(config, domain, game, policy, split, agent=None):
        if split == "test":
            raise KeyboardInterrupt
        return real_audit(config, domain, game, policy, split, agent)

    monkeypatch.setattr(execute, "audit", killed_in_test)
    with pytest.raises(KeyboardInterrupt):
        execute.run_cell(config, cell, tmp_path / "killed")
    monkeypatch.setattr(execute, "audit", real_audit)
    folder = tmp_path / "killed" / "cells" / cell.id
    kept = list((folder / "reply-cache").glob("*.jsonl"))
    assert len(kept) == 1 and kept[0].stat().st_size > 0
    # the cell's own file: removed with it
    assert f"reply-cache/{kept[0].name}" in read_manifest(folder)["files"]
    assert not (folder / "audits" / "final.json").exists()

    resumed = execute.run_cell(config, cell, tmp_path / "killed")["rows"]
    validation = json.loads((folder / "audits" / "final.json").read_text())["validation"]["agent_record"][
        "reply_cache"
    ]
    assert validation["batches_read"] > 0 and validation["batches_stored"] == 0
    def numbers(rows):
        return [
            repr((r["checkpoint"], r["split"], r["metric"], r["value"], r["low"], r["high"])) for r in rows
        ]

    assert numbers(resumed) == numbers(clean)


def test_a_final_samples_count_no_read_uses_cannot_stop_a_training_cell(tmp_path, monkeypatch):
    """Cells skip the trainer's final read, so a `training.llm.final_samples` past the read limit
    (accepted with a warning at plan time) is recorded within the limit and the cell trains."""
    import warnings

    from sepo.experiments import execute
    from sepo.policies.text_policy import MAX_SAMPLED_REPLIES

    text = (LM_BASE_CONFIG.replace("DOMAIN", "kuhn").replace("stages: [base]", "stages: [grpo]")
            + "training: {llm: {steps: 1, groups: 1, group_size: 2, final_samples: 100000}}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config, plan = _prepared_experiment(text, tmp_path / "run")
    started = []

    def trainer(train_config, out, **kwargs):
        train_config.validate()  # what run_llm_sepo does first
        started.append((train_config.final_samples, kwargs.get("measure")))
        raise KeyboardInterrupt

    monkeypatch.setattr("sepo.training.grpo.run_llm_sepo", trainer)
    with pytest.raises(KeyboardInterrupt):
        execute.run_cell(config, plan.cells[0], tmp_path / "run")
    ((final, measure),) = started
    assert measure is False and final * 12 <= MAX_SAMPLED_REPLIES  # Kuhn's final read: 12 states
