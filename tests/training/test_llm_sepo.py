"""LLM SEPO on the tiny model: the constant-penalty ablation is exact, per-rollout is not, runs resume."""
import json

import numpy as np
import pytest

pytest.importorskip("trl")

from sepo.errors import SepoError  # noqa: E402
from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo  # noqa: E402


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model
    from sepo.training.sft import SFTRunConfig, run_sft
    from sepo.training.sft_data import generate_traces, write_sft_dataset

    root = tmp_path_factory.mktemp("llm")
    # the same model whatever other games are registered
    tiny = init_tiny_model(root / "tiny", seed=0, domains=["kuhn"])
    write_sft_dataset(generate_traces("kuhn", "paper", 20, 0), root / "data", 0)
    return run_sft(
        SFTRunConfig(model=str(tiny), data=str(root / "data"), epochs=1, learning_rate=3e-3), root / "sft"
    ).model


def _weights(run_dir):
    from safetensors.numpy import load_file

    return load_file(str(run_dir / "model" / "model.safetensors"))


def _train(model, out, **overrides):
    config = LLMSEPOConfig(
        model=str(model),
        **{
            "steps": 3,
            "groups": 2,
            "group_size": 4,
            "seed": 1,
            "lambda_e": 5.0,
            "lambda_x": 1.0,
            "table_samples": 8,
            "final_samples": 16,
            **overrides,
        },
    )
    return run_llm_sepo(config, out)


@pytest.mark.parametrize(
    "optimizer, tolerance", [("sgd", 1e-8), pytest.param("adamw_torch", 1e-5, marks=pytest.mark.slow)]
)
def test_constant_penalty_gives_the_same_weights_as_none_and_per_rollout_does_not(
    sft_model, tmp_path, optimizer, tolerance
):
    """TRL keeps rewards in float32, so a group constant cancels only up to rounding (~1e-7 of the
    reward); SGD passes that on linearly, Adam can magnify it where gradients nearly vanish."""
    for penalty in ("none", "constant", "per-rollout"):
        _train(sft_model, tmp_path / penalty, penalty=penalty, optimizer=optimizer,
               learning_rate=1e-2 if optimizer == "sgd" else 1e-3)
    none, constant, per = (_weights(tmp_path / name) for name in ("none", "constant", "per-rollout"))
    assert max(np.abs(none[k] - constant[k]).max() for k in none) <= tolerance
    assert max(np.abs(none[k] - per[k]).max() for k in none) > 20 * tolerance


def test_run_directory_metrics_and_exact_exploitability(sft_model, tmp_path):
    from sepo.games.kuhn import exact as kuhn_exact

    summary = _train(sft_model, tmp_path / "run", penalty="per-rollout", steps=2)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    final = records[-1]
    assert final["final"] and summary["exploitability"] == pytest.approx(
        float(kuhn_exact.exploitability(np.array(final["table"])))
    )
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    assert all(0.0 <= r["invalid_rate"] <= 1.0 for r in records if "loss" in r)
    # charges and logged exploitability come from the policy the completions are sampled from
    assert all(r["policy"] == "estimated (8 replies per state)" for r in records if "loss" in r)
    assert summary["policy"] == "estimated (16 replies per state)"
    low, high = summary["exploitability_ci"]
    assert low <= summary["exploitability"] <= high
    assert summary["decoding"]["temperature"] == 1.0 and summary["decoding"]["max_new_tokens"] == 48
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["temperature"] == 1.0 and config["table_samples"] == 8
    assert (tmp_path / "run" / "model" / "config.json").exists()


def _logged_steps(run):
    """(the steps of metrics.jsonl's per-step lines, in order; the steps of its `final` lines)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if not r.get("final")], [r["step"] for r in records if r.get("final")]


def test_killed_run_resumes_from_its_checkpoint(sft_model, tmp_path):
    """Each step is one line, in a run and in its extension: TRL's end-of-training summary was
    logged as a second line of the last step (steps 10 and 20 twice in a 10-step run extended to
    20), which also made `sepo plot` refuse the run."""
    from sepo.reports.plots import run_curves

    _train(sft_model, tmp_path / "run", penalty="per-rollout", steps=2, save_steps=2)
    assert (tmp_path / "run" / "trainer" / "checkpoint-2").exists()
    assert _logged_steps(tmp_path / "run") == ([1, 2], [2])
    summary = _train(sft_model, tmp_path / "run", penalty="per-rollout", steps=4, save_steps=2)
    assert summary["steps"] == 4
    assert _logged_steps(tmp_path / "run") == ([1, 2, 3, 4], [4])
    assert run_curves(tmp_path / "run")[1] == [1, 2, 3, 4]


def test_an_extension_killed_before_its_first_checkpoint_resumes_to_its_own_last_step(
    sft_model, tmp_path, monkeypatch
):
    """A 10-step run extended to 20 and killed at step 13 resumes from checkpoint-10, which recorded
    the 10-step run's end, and trains on to step 20: the resume does not take it for a finished run
    and save the step-10 model as the 20-step one."""
    import sepo.training.grpo as grpo

    for name in ("whole", "killed"):
        _train(sft_model, tmp_path / name, penalty="per-rollout", steps=2, save_steps=2)
    whole = _train(sft_model, tmp_path / "whole", penalty="per-rollout", steps=4, save_steps=2)
    real = grpo.SEPOEnvironment.reward

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt  # killed at the extension's first step, before it saved a checkpoint

    monkeypatch.setattr(grpo.SEPOEnvironment, "reward", killed)
    with pytest.raises(KeyboardInterrupt):
        _train(sft_model, tmp_path / "killed", penalty="per-rollout", steps=4, save_steps=2)
    monkeypatch.setattr(grpo.SEPOEnvironment, "reward", real)
    resumed = _train(sft_model, tmp_path / "killed", penalty="per-rollout", steps=4, save_steps=2)
    assert resumed["steps"] == whole["steps"] == 4
    assert json.loads((tmp_path / "killed" / "summary.json").read_text())["steps"] == 4
    assert _logged_steps(tmp_path / "killed") == ([1, 2, 3, 4], [4])
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "killed")
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # what the old resume left: finished, a model of the run it extended
    summary = tmp_path / "killed" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "steps": 2}))
    with pytest.raises(SepoError, match="marked finished at 4 steps but its model has 2"):
        _train(sft_model, tmp_path / "killed", penalty="per-rollout", steps=4, save_steps=2)


def test_keep_checkpoints_keeps_only_the_newest(sft_model, tmp_path):
    """An experiment cell keeps one trainer checkpoint (each holds the optimizer state: 1.6 GB for a
    135 M model); the setting is recorded, the default of 2 is not (older runs resume)."""
    _train(sft_model, tmp_path / "one", penalty="per-rollout", steps=2, save_steps=1, keep_checkpoints=1)
    assert sorted(p.name for p in (tmp_path / "one" / "trainer").glob("checkpoint-*")) == ["checkpoint-2"]
    assert json.loads((tmp_path / "one" / "config.json").read_text())["keep_checkpoints"] == 1
    assert "keep_checkpoints" not in LLMSEPOConfig(model="m").settings()
    with pytest.raises(Exception, match="keep_checkpoints"):
        LLMSEPOConfig(model="m", keep_checkpoints=0).validate()


def test_constant_penalty_with_batch_scaling_is_refused_and_other_scalings_are_not():
    """TRL's batch scaling divides by the std of the raw rewards, which a group-constant penalty
    changes: `constant` would no longer equal payoff-only GRPO."""
    with pytest.raises(SepoError, match="--penalty constant with --scale-rewards batch"):
        LLMSEPOConfig(model="m", penalty="constant", scale_rewards="batch").validate()
    for scaling in ("none", "group"):
        LLMSEPOConfig(model="m", penalty="constant", scale_rewards=scaling).validate()
    LLMSEPOConfig(model="m", penalty="per-rollout", scale_rewards="batch").validate()


def test_kuhn_collusion_is_charged_under_paper_only_and_greedy_training_is_refused():
    """A fold facing LooseAggressive's bet is a collusion event under `paper` only (charged as
    evaluation's rate over decisions: (1 − c)/D for a last decision that folds, c the rate, D the
    decisions per hand, as the tabular trainer charges it); GRPO needs sampled completions."""
    from sepo.errors import SepoError
    from sepo.games import get_domain
    from sepo.games.credit import Charges
    from sepo.opponents.pools import parse_bot

    domain = get_domain("kuhn")
    charged = {}
    for protocol in ("rigorous", "paper"):
        game = domain.game(protocol)
        pool = [parse_bot("kuhn", "LooseAggressive")]
        env = domain.llm_training(game, pool, pool, (), Charges(collusion=True))
        table = np.full((12, 2), 0.5)
        context = next(
            c for c in env.sample_contexts(table, 200, np.random.default_rng(0)) if c.history.endswith("b")
        )
        decision = env.training_decision(context, np.random.default_rng(1))
        rate, decisions = env.charges._rates(table)[:2]
        charged[protocol] = env.outcome(table, context, decision, 0)[1] / (
            env.charges.mixture.collusion[0] * (1 - rate) / decisions
        )
    assert charged == pytest.approx({"rigorous": 0.0, "paper": 1.0}, abs=1e-12)
    with pytest.raises(SepoError, match="temperature"):
        LLMSEPOConfig(model="m", temperature=0.0).validate()


def test_training_with_talk_runs_records_it_and_refuses_other_talk_settings_on_resume(sft_model, tmp_path):
    """`--talk` in split bargaining: one step runs; the run's config records the talk settings and
    that the agent's own messages are not trained; the step's prompts carry messages; resuming with
    other talk settings (or none) is refused like any other config change."""
    from sepo.errors import SepoError

    talk = {
        "game": "negotiation",
        "game_params": {"rounds": 2},
        "talk": True,
        "talk_injection": 0.5,
        "steps": 1,
        "groups": 2,
        "group_size": 2,
        "table_samples": 1,
        "final_samples": 1,
        "max_new_tokens": 8,
    }
    _train(sft_model, tmp_path / "run", **talk)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["talk"], config["talk_injection"], config["agent_messages_trained"]) == (True, 0.5, False)
    assert "not trained" in config["talk_note"]
    step = next(json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
                if "loss" in json.loads(line))
    assert step["talk_prompts"] == 2 and 0 <= step["talk_injected"] <= 2
    for other in ({"talk_injection": 0.25}, {"talk": False}):
        with pytest.raises(SepoError, match="talk"):
            _train(sft_model, tmp_path / "run", **{**talk, **other})
    before = {
        p.relative_to(tmp_path): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in (tmp_path / "run").rglob("*")
        if p.is_file()
    }
    again = _train(sft_model, tmp_path / "run", **talk)  # the same finished run: read, never rewritten
    assert again["already_complete"]
    after = {
        p.relative_to(tmp_path): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in (tmp_path / "run").rglob("*")
        if p.is_file()
    }
    assert after == before


def test_a_sample_count_too_large_to_draw_is_refused_before_anything_is_written(tmp_path):
    """`sepo train --policy hf:M --samples 100000000` is refused before the run folder is made or the
    model loaded (it would build 1.2 billion prompts for the first step's played policy), and so is
    --final-samples, before training rather than at its end."""
    from typer.testing import CliRunner

    from sepo.cli.main import app

    for flag in ("--samples", "--final-samples"):
        result = CliRunner().invoke(
            app,
            [
                "train",
                "--game",
                "kuhn",
                "--policy",
                f"hf:{tmp_path / 'no-model'}",
                flag,
                "100000000",
                "--out",
                str(tmp_path / "run"),
            ],
        )
        assert result.exit_code == 2 and f"({flag}) must be <= 100,000" in result.stderr, result.output
        assert not (tmp_path / "run").exists()


def _leaving(monkeypatch, share):
    """The tiny model's answer lines scaled to leave `share` of the replies at every prompt."""
    from sepo.policies.hf import HFPolicy

    read = HFPolicy.answer_probabilities

    def scaled(self, decisions):
        rows, _ = read(self, decisions)
        return [(1 - share) * row / row.sum() for row in rows], np.full(len(rows), share)

    monkeypatch.setattr(HFPolicy, "answer_probabilities", scaled)


def test_answer_rest_reads_each_step_from_the_answer_lines_and_says_how_much_they_left(
    sft_model, tmp_path, monkeypatch
):
    """With `answer_rest`, each step's policy (and the final one) is read by one scoring pass over
    the answer lines, not sampled, when they leave at most that share of the replies; the label
    carries the share, nothing claims exact, and the option is recorded only when set."""
    _leaving(monkeypatch, 0.03)
    summary = _train(sft_model, tmp_path / "run", penalty="per-rollout", steps=1, answer_rest=0.05)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy"] for r in records] == [
        "answer lines read exactly, up to 3.00% of replies at a prompt outside them"
    ] * 2
    assert [r["answer_lines_rest"] for r in records if "loss" in r] == [pytest.approx(0.03)]
    low, high = summary["exploitability_ci"]
    assert low == high == summary["exploitability"]  # no sampling interval; the label states the share
    saved = json.loads((tmp_path / "run" / "sepo-run.json").read_text())["config"]
    assert saved["answer_rest"] == 0.05
    # runs made before the option resume
    assert "answer_rest" not in LLMSEPOConfig(model=str(sft_model)).settings()
    # the answer_rest branch keeps to its own record: only a talk run has agent_messages_trained
    assert "agent_messages_trained" not in saved
    tighter = _train(sft_model, tmp_path / "tight", penalty="per-rollout", steps=1, answer_rest=0.02)
    # more than the allowed share left: sampled
    assert tighter["policy"] == "estimated (16 replies per state)"
    step = json.loads((tmp_path / "tight" / "metrics.jsonl").read_text().splitlines()[0])
    assert step["policy"] == "estimated (8 replies per state)" and step["answer_lines_rest"] == pytest.approx(
        0.03
    )


@pytest.mark.parametrize("value", [-0.1, 1.0, float("nan")])
def test_answer_rest_outside_zero_to_one_is_refused(value):
    from sepo.errors import SepoError

    with pytest.raises(SepoError, match="answer_rest"):
        LLMSEPOConfig(model="m", answer_rest=value).validate()


def test_without_the_final_measurement_no_reply_is_read_after_training(sft_model, tmp_path, monkeypatch):
    """An experiment cell audits each checkpoint itself: `measure=False` saves the model and reads no
    played policy after the last step (no `final` line, the summary says so), and its weights equal a
    measured run's."""
    from sepo.training import grpo

    reads = []
    original = grpo.SEPOEnvironment.measure
    monkeypatch.setattr(grpo.SEPOEnvironment, "measure",
                        lambda self, model: reads.append(1) or original(self, model))
    config = LLMSEPOConfig(model=str(sft_model), steps=1, groups=2, group_size=2, seed=1, lambda_e=5.0,
                           table_samples=4, final_samples=16)
    summary = run_llm_sepo(config, tmp_path / "quiet", measure=False)
    assert reads == [] and summary["measured"] is False and "exploitability" not in summary
    assert _logged_steps(tmp_path / "quiet") == ([1], [])
    run_llm_sepo(config, tmp_path / "measured")
    assert reads == [1]
    quiet, measured = _weights(tmp_path / "quiet"), _weights(tmp_path / "measured")
    assert all(np.array_equal(quiet[k], measured[k]) for k in quiet)
