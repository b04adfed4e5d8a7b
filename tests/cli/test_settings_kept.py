"""Settings are never silently replaced: zero is not the default, a resume with other settings is
refused with the config kept, a failed start leaves nothing, and numbers are written as numbers."""
import json
import re

import pytest

from tests.cli.cli_helpers import EXAMPLES, TINY, _copy, _error, _run, _tree

# ----------------------------------------------------------------------------------- settings kept

@pytest.mark.parametrize(
    "option, value", [("--lr", "0"), ("--groups", "0"), ("--group-size", "0"), ("--group-size", "1")]
)
def test_zero_is_not_replaced_by_the_default(tmp_path, option, value):
    _error(_run("train", "--out", tmp_path / "r", "--steps", "3", option, value), option)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("steps", ["3", "12"])
def test_resuming_with_other_steps_is_refused_and_the_config_kept(finished_run, tmp_path, steps):
    run = _copy(finished_run, tmp_path)
    before = _tree(run)
    _error(
        _run("train", "--out", run, "--steps", steps, "--groups", "2", "--quiet"),
        f"steps 6 there, {steps} here",
    )
    assert _tree(run) == before


def test_a_finished_run_resumed_says_so_with_its_own_step_count(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    result = _run("train", "--out", run, "--steps", "6", "--groups", "2", "--quiet")
    assert result.exit_code == 0 and "done: 6 steps (already complete)" in result.stdout


def test_sft_resumed_with_other_settings_is_refused(tmp_path):
    from sepo.runs import open_run
    from sepo.training.sft import SFTRunConfig

    data = tmp_path / "data"
    config = SFTRunConfig(model="/nonexistent", data=str(data))
    with open_run(tmp_path / "sft", "sft", config.settings()) as run:
        run.commit()
    for option, value, field in (("--lr", "0.5", "learning_rate"), ("--batch-size", "3", "batch_size")):
        other = SFTRunConfig(
            model="/nonexistent", data=str(data), **{field: float(value) if option == "--lr" else int(value)}
        )
        with pytest.raises(Exception, match=f"{field} .* there"):
            with open_run(tmp_path / "sft", "sft", other.settings()):
                pass
    other = SFTRunConfig(model="/nonexistent", data=str(tmp_path / "other"))
    with pytest.raises(Exception, match="data .* there"):
        with open_run(tmp_path / "sft", "sft", other.settings()):
            pass


@pytest.mark.parametrize(
    "bad", [["--policy", "lstm"], ["--lr", "inf"], ["--lr", "nan"], ["--policy", "hf:/nonexistent/model"]]
)
def test_a_failed_start_leaves_nothing_so_the_corrected_command_runs(tmp_path, bad):
    out = tmp_path / "r"
    _error(_run("train", "--out", out, *TINY, *bad))
    assert not out.exists()
    result = _run("train", "--out", out, *TINY)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "option, value", [("--eta", "nan"), ("--eta", "inf"), ("--dt", "nan"), ("--dt", "1e6")]
)
def test_dynamics_refuses_non_finite_and_huge_steps(option, value):
    rule = "hedge" if option == "--eta" else "replicator"
    _error(
        _run(
            "analyze",
            "dynamics",
            EXAMPLES / "rock_paper_scissors.yaml",
            "--rule",
            rule,
            option,
            value,
            "--json",
        ),
        option,
    )


def test_json_output_never_holds_bare_nan(tmp_path):
    result = _run("eval", "--agent", "bot:MaxExploiter", "--episodes", "2", "--json")
    assert result.exit_code == 0
    assert not re.search(r"\bNaN\b|\bInfinity\b", result.stdout)
    json.loads(result.stdout)


def test_a_metrics_file_cut_mid_line_is_an_error_on_resume_and_in_plot(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:2] + [lines[2][:10]] + lines[3:]) + "\n")
    (run / "checkpoint.json").write_text(json.dumps({**json.loads((run / "checkpoint.json").read_text())}))
    _error(_run("plot", run, "--out", tmp_path / "p.png"), "line 3")
    assert not (tmp_path / "p.png").exists()
    _error(_run("train", "--out", run, "--steps", "6", "--groups", "2", "--quiet"), "line 3")
    del lines[2:4]  # a hole: steps 2-3 missing
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    _error(_run("plot", run, "--out", tmp_path / "p.png"), "steps 2-3 are missing")


def test_a_pool_file_under_the_rigorous_protocol_keeps_the_exact_best_responder(tmp_path):
    pools = tmp_path / "pools.yaml"
    pools.write_text("train: [NashApprox]\nexploiter: [MaxExploiter]\n")
    result = _run("eval", "--agent", "bot:MaxExploiter", "--pools", pools, "--episodes", "2", "--json")
    data = json.loads(result.stdout)
    assert "BestResponse" in {o["opponent"] if isinstance(o, dict) else o for o in data["opponents"]} or \
        any("BestResponse" in note for note in data["notes"])
    assert data["exploit_pool"] > 0.2  # the exact best response to MaxExploiter wins 0.25 a hand
