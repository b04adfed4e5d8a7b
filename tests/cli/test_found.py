"""Issue 7's findings, one test each: data a command did not write survives it, settings are never
silently replaced, bad input is one line with exit status 2, and the CLI says what it does."""
import json
import os
import re
from pathlib import Path

import pytest

from sepo.cli.main import app
from tests.cli.cli_helpers import _error, _run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "analysis"
TINY = ["--steps", "3", "--groups", "2", "--quiet"]


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "finished"
    assert _run("train", "--out", out, "--steps", "6", "--groups", "2", "--quiet").exit_code == 0
    return out


def _copy(run, tmp_path, name="run"):
    import shutil

    return Path(shutil.copytree(run, tmp_path / name))


# ----------------------------------------------------------------------------------- data destroyed

def test_data_sft_refuses_a_training_run_and_a_parent_folder(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    before = _tree(run)
    _error(_run("data", "sft", "--out", run, "--episodes", "1"), "sepo train")
    (run / "inner").mkdir()
    _error(_run("data", "sft", "--out", f"{run}/inner/..", "--episodes", "1"))
    (run / "inner").rmdir()
    assert _tree(run) == before


def test_model_init_refuses_a_training_run(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    before = _tree(run)
    _error(_run("model", "init", "--out", run), "sepo train")
    assert _tree(run) == before
    assert _run("train", "--out", run, "--steps", "6", "--groups", "2", "--quiet").exit_code == 0  # still resumes


def test_sft_refuses_a_training_run_before_loading_anything(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    before = _tree(run)
    _error(_run("sft", "--model", "/nonexistent/model", "--data", run, "--out", run))
    assert _tree(run) == before


def test_train_refuses_a_folder_it_did_not_make(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("metrics.jsonl", "policy.json", "summary.json", "curves.png"):
        (folder / name).write_text(f"my own {name}\n")
    before = _tree(folder)
    for extra in ([], ["--overwrite"]):
        _error(_run("train", "--out", folder, *TINY, *extra), "holds no sepo run")
    assert _tree(folder) == before


@pytest.mark.parametrize("out", ["", "."])
def test_an_empty_out_is_refused(tmp_path, out, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _error(_run("train", "--out", out, *TINY), "--out names the current folder")
    assert os.listdir(tmp_path) == []


def test_overwrite_replaces_only_what_the_run_wrote(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    (run / "notes.txt").write_text("mine")
    result = _run("train", "--out", run, "--steps", "4", "--groups", "2", "--quiet", "--overwrite")
    assert result.exit_code == 0, result.output
    assert (run / "notes.txt").read_text() == "mine"
    assert json.loads((run / "config.json").read_text())["steps"] == 4


@pytest.mark.parametrize("command", [
    ["data", "sft", "--episodes", "1", "--game", "auction", "--values", "--"],
    ["train", *TINY, "--game", "auction", "--values", "--"],
])
def test_overwrite_with_a_bad_game_parameter_removes_nothing(tmp_path, command):
    """Found by the long fuzz run: `data sft --overwrite` removed its dataset before the game's own
    parameter checks failed. Every check runs before --overwrite removes anything."""
    out = tmp_path / "out"
    assert _run(*command[:2 if command[0] == "data" else 1], "--out", out, *(["--episodes", "1"] if command[0] == "data" else TINY),
                "--game", "auction").exit_code == 0
    before = _tree(out)
    _error(_run(*command, "--out", out, "--overwrite"), "--values")
    assert _tree(out) == before


# ---------------------------------------------------------------------------------- silently wrong

@pytest.mark.parametrize("option, value", [("--lr", "0"), ("--groups", "0"), ("--group-size", "0"), ("--group-size", "1")])
def test_zero_is_not_replaced_by_the_default(tmp_path, option, value):
    _error(_run("train", "--out", tmp_path / "r", "--steps", "3", option, value), option)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("steps", ["3", "12"])
def test_resuming_with_other_steps_is_refused_and_the_config_kept(finished_run, tmp_path, steps):
    run = _copy(finished_run, tmp_path)
    before = _tree(run)
    _error(_run("train", "--out", run, "--steps", steps, "--groups", "2", "--quiet"), f"steps 6 there, {steps} here")
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
        other = SFTRunConfig(model="/nonexistent", data=str(data), **{field: float(value) if option == "--lr" else int(value)})
        with pytest.raises(Exception, match=f"{field} .* there"):
            with open_run(tmp_path / "sft", "sft", other.settings()):
                pass
    other = SFTRunConfig(model="/nonexistent", data=str(tmp_path / "other"))
    with pytest.raises(Exception, match="data .* there"):
        with open_run(tmp_path / "sft", "sft", other.settings()):
            pass


@pytest.mark.parametrize("bad", [["--policy", "lstm"], ["--lr", "inf"], ["--lr", "nan"], ["--policy", "hf:/nonexistent/model"]])
def test_a_failed_start_leaves_nothing_so_the_corrected_command_runs(tmp_path, bad):
    out = tmp_path / "r"
    _error(_run("train", "--out", out, *TINY, *bad))
    assert not out.exists()
    result = _run("train", "--out", out, *TINY)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("option, value", [("--eta", "nan"), ("--eta", "inf"), ("--dt", "nan"), ("--dt", "1e6")])
def test_dynamics_refuses_non_finite_and_huge_steps(option, value):
    rule = "hedge" if option == "--eta" else "replicator"
    _error(_run("analyze", "dynamics", EXAMPLES / "rock_paper_scissors.yaml", "--rule", rule, option, value, "--json"), option)


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


# --------------------------------------------------------------------- tracebacks instead of errors

SEED_COMMANDS = [
    ["eval", "--agent", "nash", "--episodes", "1"],
    ["train", "--out", "OUT", *TINY],
    ["data", "sft", "--out", "OUT", "--episodes", "1"],
    ["model", "init", "--out", "OUT"],
    ["sft", "--model", "M", "--data", "D", "--out", "OUT"],
    ["analyze", "dynamics", str(EXAMPLES / "chicken.yaml"), "--rule", "fictitious"],
    ["analyze", "population", "--agents", "nash", "uniform", "--episodes", "1"],
]


@pytest.mark.parametrize("command", SEED_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_negative_seed_is_one_line(tmp_path, command):
    _error(_run(*[str(tmp_path / "out") if a == "OUT" else a for a in command], "--seed", "-1"), "--seed")
    assert not (tmp_path / "out").exists()


@pytest.fixture
def hostile(tmp_path):
    (tmp_path / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" * 50)
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00\x00" * 50)
    (tmp_path / "binary.csv").write_bytes(b"\x00\x01,\xff\n" * 50)
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "bomb.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + "train: [*i]\n")
    (tmp_path / "bigkey.json").write_text(json.dumps({"k" * (1 << 20): [0.5, 0.5]}))
    return tmp_path


@pytest.mark.parametrize("make_args", [
    lambda h: ["eval", "--agent", f"tabular:{h / 'binary.json'}"],
    lambda h: ["eval", "--agent", f"tabular:{h / 'folder.json'}"],
    lambda h: ["eval", "--agent", "tabular:/dev/zero"],
    lambda h: ["eval", "--agent", f"tabular:{h / 'bigkey.json'}"],
    lambda h: ["eval", "--agent", "nash", "--pools", h / "binary.yaml"],
    lambda h: ["eval", "--agent", "nash", "--pools", h / "bomb.yaml"],
    lambda h: ["eval", "--agent", "nash", "--pools", h / "folder.json"],
    lambda h: ["analyze", "game", h / "binary.yaml"],
    lambda h: ["analyze", "game", h / "bomb.yaml"],
    lambda h: ["analyze", "game", h / "folder.json"],
    lambda h: ["analyze", "regret", h / "binary.csv"],
    lambda h: ["analyze", "regret", "/dev/zero"],
    lambda h: ["plot", h / "binary.json", "--out", h / "p.png"],
    lambda h: ["eval", "--agent", f"run:{h / 'binary.json'}"],
    lambda h: ["train", "--out", h / "binary.json", *TINY],
    lambda h: ["plot", h, "--out", h / "folder.json"],
    lambda h: ["train", "--out", h / "binary.json" / "x", *TINY],
    lambda h: ["frontier", "--lambdas", "nan"],
    lambda h: ["frontier", "--lambdas", "1," + "9" * 400],
    lambda h: ["train", "--out", h / "r", *TINY, "--beta", "nan"],
    lambda h: ["train", "--out", h / "r", *TINY, "--report-to", "bogus"],
    lambda h: ["sft", "--model", "m", "--data", h, "--out", h / "r", "--epochs", "nan"],
    lambda h: ["eval", "--agent", "bot:NashApprox(alpha=" + "9" * 100000 + ")"],
], ids=lambda f: " ".join(str(a) for a in f(Path("H")))[:60])
def test_hostile_inputs_are_one_bounded_line(hostile, make_args):
    before = _tree(hostile)
    _error(_run(*make_args(hostile)))
    assert _tree(hostile) == before


def test_best_response_in_a_train_pool_is_one_line(tmp_path):
    pools = tmp_path / "pools.yaml"
    pools.write_text("train: [BestResponse]\n")
    _error(_run("frontier", "--pools", pools), "train pool")
    _error(_run("eval", "--agent", "nash", "--episodes", "1", "--pools", pools), "train pool")


def test_a_checkpoint_with_a_negative_step_is_one_line(finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    state = json.loads((run / "checkpoint.json").read_text())
    (run / "checkpoint.json").write_text(json.dumps({**state, "step": -3}))
    _error(_run("train", "--out", run, "--steps", "6", "--groups", "2", "--quiet"), "step -3")


def test_an_unwritable_output_folder_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root ignores permission bits; sysfs refuses new files even to root
        locked = Path("/sys/kernel")
        if not locked.is_dir():
            pytest.skip("running as root without /sys: no folder is unwritable")
    _error(_run("train", "--out", locked / "r", *TINY), "cannot create")
    _error(_run("plot", tmp_path, "--out", locked / "p.png"))


# ------------------------------------------------------------------------------------- usability

def test_version():
    from sepo import __version__

    result = _run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"sepo {__version__}"


@pytest.mark.parametrize("command, listed", [
    (["train"], ["per-rollout", "constant", "--lambda-e", "--lambda-c", "--lambda-x", "--steps", "--seed", "tensorboard"]),
    (["eval"], ["rigorous", "paper", "--lambda-e", "--seed", "--episodes"]),
    (["data", "sft"], ["rigorous", "paper", "--seed", "--episodes", "--overwrite"]),
    (["model", "init"], ["qwen2", "llama", "--seed", "--overwrite"]),
])
def test_choices_and_options_are_documented_in_help(command, listed):
    result = _run(*command, "--help")
    assert result.exit_code == 0
    for word in listed:
        assert word in result.stdout, word


def test_every_option_of_every_command_has_help():
    import typer

    def leaves(group, path=()):
        for name, command in getattr(group, "commands", {}).items():
            yield from leaves(command, (*path, name)) if hasattr(command, "commands") else [((*path, name), command)]

    missing = [f"{' '.join(path)} {param.opts[0]}" for path, command in leaves(typer.main.get_command(app))
               for param in command.params if param.param_type_name == "option" and not getattr(param, "help", None)]
    assert not missing, missing


def test_a_missing_model_is_one_line_without_hub_retries(tmp_path):
    result = _run("eval", "--agent", "hf:someone/no-such-model-xyz", "--episodes", "1")
    _error(result, "no-such-model-xyz")


def test_usage_errors_are_one_line():
    _error(_run("train", "--penalty", "sometimes", "--out", "x"), "sometimes")
    _error(_run("eval", "--agent", "nash", "--episodes", "x"), "--episodes")


# ------------------------------------------------------------ issue 17: a command touches only its own

def _made_by(out, command, config=None, files=("data.txt",), part_of=None):
    """A finished run folder of another command, with a file in a sub-folder."""
    from sepo.runs import open_run

    with open_run(out, command, config or {"made": "by " + command}, part_of=part_of) as run:
        run.write_text("sub/" + files[0], "its own work\n")
        if command == "demo":
            run.write_json("demo_summary.json", {"game": None, "audits": [], "trainings": [], "out": str(out)})
        run.complete()
    return out


def _made_experiment(out):
    """A finished experiment folder of no cells: what `sepo report` reads (a plan and a results table)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.experiments.runner import COLUMNS
    from sepo.runs import open_run

    schema = pa.schema([(name, getattr(pa, kind)() if kind != "string" else pa.string()) for name, kind in COLUMNS])
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([], schema=schema), buffer)
    with open_run(out, "experiment run", {"made": "by experiment run"}) as run:
        run.write_json("plan.json", {"config_hash": None, "cells": [], "skipped": []})
        run.write_bytes("results.parquet", buffer.getvalue())
        run.complete()
    return out


def _experiment_config(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text("domains: [{name: kuhn}]\nagents: [{name: u, kind: fixed, spec: uniform}]\nstages: [base]\n"
                      "episodes: {validation: 1, test: 1}\nreplicates: 50\n")
    return config


OTHER_COMMANDS = {
    "train": lambda h, out: ["train", "--game", "kuhn", "--steps", "3", "--groups", "2", "--quiet", "--out", out],
    "data sft": lambda h, out: ["data", "sft", "--episodes", "1", "--quiet", "--out", out],
    "model init": lambda h, out: ["model", "init", "--out", out],
    "experiment run": lambda h, out: ["experiment", "run", _experiment_config(h), "--quiet", "--out", out],
    "report": lambda h, out: ["report", _made_experiment(h / "experiment"), "--out", out],
    "demo": lambda h, out: ["demo", "--steps", "2", "--out", out],
}


@pytest.mark.parametrize("owner", ["sft", "data sft", "experiment run"])
@pytest.mark.parametrize("command", sorted(OTHER_COMMANDS))
def test_overwrite_never_replaces_another_commands_output(tmp_path, owner, command):
    """Found: `sepo train --out <an SFT run, a dataset, an experiment> --overwrite` deleted it all
    (and so did data sft, model init, experiment run, report and demo)."""
    if owner == command:
        pytest.skip("a run of the same command is what --overwrite replaces")
    out = _made_by(tmp_path / "theirs", owner)
    before = _tree(out)
    result = _run(*OTHER_COMMANDS[command](tmp_path, out), "--overwrite")
    _error(result, f"holds the output of `sepo {owner}`", f"--overwrite replaces only a `sepo {command}` run")
    assert _tree(out) == before


def test_a_run_inside_another_commands_output_is_refused(tmp_path):
    experiment = _made_by(tmp_path / "experiment", "experiment run")
    inner = _made_by(experiment / "cells" / "c1", "train", part_of="experiment run")
    before = _tree(experiment)
    for extra in ([], ["--overwrite"]):
        _error(_run(*OTHER_COMMANDS["train"](tmp_path, inner), *extra), "part of the output of `sepo experiment run`")
    assert _tree(experiment) == before


@pytest.mark.parametrize("command", ["train", "data sft", "model init"])
def test_a_finished_run_rerun_is_read_never_rewritten(tmp_path, command):
    out = tmp_path / "out"
    assert _run(*OTHER_COMMANDS[command](tmp_path, out)).exit_code == 0
    stamp = {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}
    again = _run(*OTHER_COMMANDS[command](tmp_path, out))
    assert again.exit_code == 0 and "already complete" in again.stdout, again.output
    assert {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()} == stamp


@pytest.mark.parametrize("command", sorted(OTHER_COMMANDS))
def test_a_file_that_looks_like_a_temporary_is_the_users(tmp_path, command):
    """Found: `.sepo-tmp-mine.txt` inside --out was deleted as a stale temporary on the next run."""
    out = tmp_path / "out"
    if command in ("demo", "experiment run", "report"):  # made directly: what is tested is the next open
        from sepo.demo import demo_config
        from sepo.reports.experiment import experiment_state, report_config

        args = OTHER_COMMANDS[command](tmp_path, out)
        experiment = tmp_path / "experiment"
        config = {"demo": demo_config(None, 2)}.get(command)
        if command == "report":
            config = report_config(experiment, experiment_state(experiment))
        if command == "experiment run":
            from sepo.experiments.config import load_config

            config = load_config(_experiment_config(tmp_path))[0].record()
        _made_by(out, command, config)
    else:
        args = OTHER_COMMANDS[command](tmp_path, out)
        assert _run(*args).exit_code == 0
    (out / ".sepo-tmp-mine.txt").write_text("mine")
    (out / "sub").mkdir(exist_ok=True)
    (out / "sub" / ".sepo-tmp-mine.txt").write_text("mine too")
    result = _run(*args)
    assert result.exit_code == 0, result.output
    assert (out / ".sepo-tmp-mine.txt").read_text() == "mine" and (out / "sub" / ".sepo-tmp-mine.txt").read_text() == "mine too"
    if command in ("train", "model init"):
        assert _run(*args, "--overwrite").exit_code == 0
        assert (out / ".sepo-tmp-mine.txt").read_text() == "mine"


def test_model_files_get_the_umask_mode(tmp_path):
    """Found: model.safetensors was written 0600 although docs/runs.md promises umask modes."""
    from sepo.runs import DIR_MODE, FILE_MODE

    assert _run("model", "init", "--out", tmp_path / "m").exit_code == 0
    modes = {str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777 for p in (tmp_path / "m").rglob("*")}
    assert modes["m/model.safetensors"] == FILE_MODE
    assert all(mode == (DIR_MODE if (tmp_path / name).is_dir() else FILE_MODE) for name, mode in modes.items()), modes


def test_a_second_train_into_the_same_folder_is_refused_while_the_first_writes(tmp_path):
    """Found: two `sepo train --out cc` a second apart both wrote (interleaved metrics.jsonl)."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "cc"
    hold = ("import sys, time\nfrom sepo.runs import open_run\nwith open_run(sys.argv[1], 'train', {}):\n"
            "    print('holding', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        assert holder.stdout.readline().strip() == "holding"
        _error(_run("train", "--out", out, *TINY), "is being written by another sepo process", str(holder.pid))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    result = _run("train", "--out", out, *TINY, "--overwrite")  # the dead holder's lock does not block
    assert result.exit_code == 0, result.output
