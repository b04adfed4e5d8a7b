"""The command line: JSON output, clean one-line errors for bad input, resumable training."""
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, list(args))


def test_eval_json_has_the_promised_keys():
    result = _run("eval", "--game", "kuhn", "--agent", "uniform", "--episodes", "10", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in (
        "exploitability",
        "nash_conv",
        "utility",
        "exploit_pool",
        "collusion",
        "externality",
        "safety",
        "nra",
        "nra_gtbench",
        "game_value",
    ):
        assert key in data
    assert data["exploitability"] == pytest.approx(11 / 24)


@pytest.mark.parametrize("agent, value", [("nash", 0.0), ("nash:0", 0.0), ("nash:0.1666666666666667", 0.0)])
def test_eval_nash_agents(agent, value):
    data = json.loads(_run("eval", "--agent", agent, "--episodes", "5", "--json").stdout)
    assert data["exploitability"] <= 1e-12


@pytest.mark.parametrize("args, message", [
    (["eval", "--game", "chess", "--agent", "nash"], "unknown game 'chess'"),
    (["eval", "--agent", "bot:Shark"], "unknown bot 'Shark'"),
    (["eval", "--agent", "wizard"], "unknown agent spec 'wizard'"),
    (["eval", "--agent", "nash:0.9"], "alpha"),
    (["eval", "--agent", "nash", "--protocol", "vibes"], "'vibes' is not one of"),
    (["eval", "--agent", "nash", "--lambda-e", "-1"], "lambda-e"),
    (["eval", "--agent", "tabular:/nonexistent.json"], "not found"),
    (["train", "--out", "OUT", "--lambda-e", "-0.5"], "lambda-e"),
    (["train", "--out", "OUT", "--penalty", "sometimes"], "penalty"),
    (["train", "--out", "OUT", "--policy", "lstm"], "--policy"),
    (["eval", "--agent", "run:/nonexistent"], "run directory not found"),
])
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    result = _run(*args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content, message", [
    ("{not json", "not readable JSON"),
    ('{"0": [0.5, 0.5]}', "missing information state"),
    ('{"9z": [1, 0]}', "unknown information state"),
])
def test_malformed_tabular_files(tmp_path, content, message):
    path = tmp_path / "policy.json"
    path.write_text(content)
    result = _run("eval", "--agent", f"tabular:{path}")
    assert result.exit_code == 2 and message in result.stderr


def test_non_normalised_tabular_file(tmp_path):
    from sepo.games.kuhn.exact import nash_policy
    from sepo.games.kuhn.rules import INFO_STATES
    from sepo.policies.tabular import TabularPolicy

    data = TabularPolicy(nash_policy(), INFO_STATES).to_json()
    data["1pb"] = [0.5, 0.7]
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(data))
    result = _run("eval", "--agent", f"tabular:{path}")
    assert result.exit_code == 2 and "'1pb' sum to 1.2" in result.stderr


def test_train_then_eval_the_run_and_frontier(tmp_path):
    out = tmp_path / "run"
    result = _run(
        "train",
        "--game",
        "kuhn",
        "--policy",
        "tabular",
        "--penalty",
        "per-rollout",
        "--lambda-e",
        "5",
        "--steps",
        "1000",
        "--seed",
        "0",
        "--out",
        str(out),
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert (out / "curves.png").exists() and (out / "policy.json").exists()
    data = json.loads(_run("eval", "--agent", f"run:{out}", "--episodes", "5", "--json").stdout)
    assert data["exploitability"] < 0.02
    tabular = json.loads(
        _run("eval", "--agent", f"tabular:{out / 'policy.json'}", "--episodes", "5", "--json").stdout
    )
    assert tabular["exploitability"] == pytest.approx(data["exploitability"])
    frontier = _run(
        "frontier", "--game", "kuhn", "--run", str(out), "--json", "--plot", str(tmp_path / "f.png")
    )
    assert frontier.exit_code == 0, frontier.output
    info = json.loads(frontier.stdout)
    assert info["utility_at_zero"] == pytest.approx(1 / 27)
    assert 0 <= info["runs"][0]["gap"] < 0.02
    assert (tmp_path / "f.png").exists()


def test_every_command_has_help():
    for command in ([], ["eval"], ["train"], ["frontier"], ["plot"], ["demo"], ["analyze"]):
        result = _run(*command, "--help")
        assert result.exit_code == 0 and "Usage" in result.output


def test_a_reproduced_paper_quirk_is_one_warning_line_not_a_python_traceback_line():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sepo.cli.main",
            "eval",
            "--game",
            "negotiation-gt",
            "--protocol",
            "paper",
            "--agent",
            "bot:FairNeg",
            "--episodes",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "warning: negotiation-gt: the opponent's private values are redrawn every round" in result.stderr
    assert "PaperRedrawWarning" not in result.stderr and "registry.py" not in result.stderr


def test_exploit_prints_a_lower_bound_search_without_json():
    """The negotiation-gt search plays the agent (no table): the human output has no policy-table row."""
    result = _run("exploit", "--game", "negotiation-gt", "--rounds", "1", "--agent", "bot:FairNeg")
    assert result.exit_code == 0, result.output
    assert "adversarial_gap" in result.stdout and "played by the search" in result.stdout


def _folder_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_finished_run_resumed_with_a_default_said_out_loud_is_left_byte_identical(tmp_path):
    out = tmp_path / "run"
    base = [
        "train",
        "--game",
        "negotiation",
        "--rounds",
        "2",
        "--steps",
        "2",
        "--groups",
        "2",
        "--group-size",
        "2",
        "--quiet",
        "--out",
        str(out),
    ]
    assert _run(*base).exit_code == 0
    before = _folder_bytes(out)
    again = _run(*base, "--pie", "10", "--breakdown-cost", "0")
    assert again.exit_code == 0 and "already complete" in again.stdout, again.output
    assert _folder_bytes(out) == before  # summary.json keeps the real training time; nothing is rewritten
    other = _run(*base, "--pie", "12", "--max-demand", "11")
    assert other.exit_code == 2 and "game_params.pie unset there, 12 here" in other.output
    assert _folder_bytes(out) == before


@pytest.mark.parametrize("args, message", [
    (["--redraw", ""], "--redraw is empty"),
    (["--items", " "], "--items is empty"),
    (["--rounds", "\uff15"], "--rounds \uff15: use ASCII characters"),
    (["--rounds", "100000"], "above the most sepo plays, 10,000"),
    (["--memory", "abc"], "--memory 'abc': expected an integer"),
])
def test_game_parameters_that_only_look_valid_are_refused(args, message):
    result = _run("eval", "--game", "negotiation-gt", "--agent", "bot:FairNeg", "--episodes", "1", *args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_exploit_names_the_domains_reason_when_the_projection_cannot_show_what_the_agent_reads():
    result = _run(
        "exploit", "--game", "auction", "--agent", "bot:AdaptiveBid", "--rounds", "2", "--memory", "0"
    )
    assert result.exit_code == 2
    assert (
        "raise the game's --memory" in result.stderr
        and "cannot give action probabilities" not in result.stderr
    )


def test_a_stopped_command_skips_the_interpreters_teardown(monkeypatch):
    """After a stop's last line the interpreter's teardown (garbage-collecting torch's modules)
    took 3 to 5 s with a model loaded; the command now ends with os._exit(130) there."""
    import typer.main

    from sepo.cli import common
    from sepo.cli.main import app

    ended = []

    def record(code):
        ended.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(common.os, "_exit", record)
    monkeypatch.setattr(common.SepoGroup, "_run", staticmethod(lambda call: 130))
    monkeypatch.setattr("sys.argv", ["sepo", "eval"])
    with pytest.raises(SystemExit):
        typer.main.get_command(app).main(prog_name="sepo")
    assert ended == [130]
    with pytest.raises(SystemExit) as done:  # a caller's invocation (CliRunner) gets its exit status back
        typer.main.get_command(app).main(["eval"], prog_name="sepo")
    assert done.value.code == 130 and ended == [130]
    monkeypatch.setattr(common.SepoGroup, "_run", staticmethod(lambda call: 2))
    with pytest.raises(SystemExit) as done:
        typer.main.get_command(app).main(prog_name="sepo")
    assert done.value.code == 2 and ended == [130]


@pytest.mark.parametrize("command, target", [("exploit", "sepo.metrics.exact.audit_agent"),
                                             ("eval", "sepo.evaluation.evaluate.evaluate")])
def test_json_keeps_stdout_for_the_object_and_progress_goes_to_stderr(monkeypatch, command, target):
    """`sepo exploit --json` (and `sepo eval --json`) keep stdout for the object and show progress on
    stderr, so a language model's long audit is not silent."""
    import importlib

    from sepo import progress

    module_name, name = target.rsplit(".", 1)
    module = importlib.import_module(module_name)
    real = getattr(module, name)

    def reporting(*args, **kwargs):
        progress.stage("solving the best response")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, reporting)
    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    args = [command, "--game", "kuhn", "--agent", "uniform", "--json"] + (
        ["--episodes", "2"] if command == "eval" else []
    )
    result = _run(*args)
    assert result.exit_code == 0, result.output
    assert "exploitability" in json.loads(result.stdout)
    assert "solving the best response" in result.stderr
    quiet = _run(*args, "--quiet")
    assert (
        quiet.exit_code == 0 and quiet.stderr == "" and json.loads(quiet.stdout) == json.loads(result.stdout)
    )


@pytest.mark.parametrize("command", ["sft", "train"])
def test_an_unfinished_language_model_run_says_so_as_an_agent(tmp_path, command):
    """`run:R` with R an `sepo sft` (or language-model `train`) run stopped before its model was saved
    says so, not "R holds no policy.json or checkpoint.json" (the files of a tabular run)."""
    from sepo.runs import open_run

    with open_run(tmp_path / "r", command, {"made": "by the test"}) as run:
        run.write_json("config.json", {"game": "kuhn"})
        run.path("trainer").mkdir()
    result = _run("eval", "--game", "kuhn", "--agent", f"run:{tmp_path / 'r'}", "--episodes", "1")
    assert result.exit_code == 2 and f"is an unfinished `sepo {command}` run" in result.stderr, result.output


@pytest.mark.parametrize("command", ["experiment run", "model init"])
def test_a_folder_of_another_command_given_as_run_says_what_it_is(tmp_path, command):
    """`run:` given an experiment's folder says what the folder is and where a cell's policy is,
    not only that it "holds no policy.json or checkpoint.json"."""
    from sepo.runs import open_run

    with open_run(tmp_path / "r", command, {"made": "by the test"}) as run:
        run.write_json("plan.json", {})
    result = _run("eval", "--game", "kuhn", "--agent", f"run:{tmp_path / 'r'}", "--episodes", "1")
    expected = (f"run:{tmp_path / 'r'}/cells/CELL/train" if command == "experiment run"
                else "holds the output of `sepo model init`; run: takes the folder of a tabular `sepo train`")
    assert result.exit_code == 2 and expected in " ".join(result.stderr.split()), result.output


def test_the_injection_pool_reports_progress_too(monkeypatch):
    """`sepo eval --pool injection` ran with no reporter installed, so a language model's replies
    (counted by the policy) showed nothing for as long as they took."""
    import sepo.evaluation.injection as injection
    from sepo import progress

    real = injection.injection_audit

    def reporting(*args, **kwargs):
        progress.stage("asking the injection suite")
        return real(*args, **kwargs)

    monkeypatch.setattr(injection, "injection_audit", reporting)
    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    result = _run(
        "eval",
        "--game",
        "negotiation",
        "--agent",
        "bot:Fair",
        "--pool",
        "injection",
        "--episodes",
        "1",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert "asking the injection suite" in result.stderr and "attacks" in json.loads(result.stdout)


def test_more_torch_threads_than_usable_cores_is_one_line(monkeypatch):
    """--threads above the cores this process may use is refused in one line: more threads than cores
    only slow torch down (and every other process on a shared machine)."""
    import os

    from tests.cli.cli_helpers import _error

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    command = ["exploit", "--game", "kuhn", "--agent", "uniform"]
    _error(
        _run("--threads", "3", *command),
        "--threads 3 is more torch threads than the 2 CPU cores",
        "--threads 2 or fewer",
    )
    assert _run("--threads", "2", *command).exit_code == 0


def test_samples_below_one_is_refused_by_its_flag():
    """`--samples 0` is refused naming the flag, not as "replies per state must be >= 1"."""
    from tests.cli.cli_helpers import _error

    for command in ("eval", "exploit"):
        _error(
            _run(command, "--game", "kuhn", "--agent", "uniform", "--samples", "0"),
            "--samples must be >= 1 (replies per information state), got 0",
        )


def test_plot_refuses_runs_of_two_games_and_labels_a_bound_as_a_bound(tmp_path):
    """Kuhn's exploitability and the three-item negotiation's trained gap (an upper bound, in
    points per round) are not one quantity on one axis."""
    from sepo.reports.plots import value_label

    kuhn, negotiation = tmp_path / "kuhn", tmp_path / "ngt"
    trained = _run("train", "--game", "kuhn", "--lambda-e", "1", "--steps", "2", "--out", str(kuhn))
    assert trained.exit_code == 0
    assert _run("train", "--game", "negotiation-gt", "--lambda-e", "1", "--steps", "2", "--items", "1,1,1",
                "--rounds", "2", "--memory", "0", "--out", str(negotiation)).exit_code == 0
    mixed = _run("plot", str(kuhn), str(negotiation), "--out", str(tmp_path / "p.png"))
    assert mixed.exit_code != 0 and "draws runs of one game" in mixed.output
    assert "kuhn (kuhn)" in mixed.output and "ngt (negotiation-gt)" in mixed.output
    assert not (tmp_path / "p.png").exists()
    records = [json.loads(line) for line in (negotiation / "metrics.jsonl").read_text().splitlines()]
    assert value_label("adversarial_gap", records) == "adversarial gap (an upper bound, not exact)"
    assert _run("plot", str(kuhn), "--out", str(tmp_path / "k.png")).exit_code == 0


def test_a_sepo_warning_met_in_several_places_is_one_line_per_command(capsys):
    """A game built in three places (a demo) warns once; the next command warns again."""
    from sepo.cli import main
    from sepo.games.negotiation_gt.rules import PaperRedrawWarning

    main._shown_warnings.clear()
    for lineno in (10, 20, 30):
        main._show_warning("values redrawn", PaperRedrawWarning, "rules.py", lineno)
    assert capsys.readouterr().err == "warning: values redrawn\n"
    result = _run("games")
    assert result.exit_code == 0
    main._show_warning("values redrawn", PaperRedrawWarning, "rules.py", 10)
    assert capsys.readouterr().err == "warning: values redrawn\n"
