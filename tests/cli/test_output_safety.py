"""A command touches only what it wrote: data it did not write survives it, --overwrite replaces
only a run of the same command, a finished run is read and never rewritten, and a folder being
written is not written by a second command."""
import json
import os
from pathlib import Path

import pytest

from tests.cli.cli_helpers import TINY, _copy, _error, _run, _tree

# --------------------------------------------------------------------- data a command did not write

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
    # still resumes
    assert _run("train", "--out", run, "--steps", "6", "--groups", "2", "--quiet").exit_code == 0


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
    """Every check runs before --overwrite removes anything: `data sft --overwrite` with a bad game
    parameter keeps its dataset."""
    out = tmp_path / "out"
    assert (
        _run(
            *command[: 2 if command[0] == "data" else 1],
            "--out",
            out,
            *(["--episodes", "1"] if command[0] == "data" else TINY),
            "--game",
            "auction",
        ).exit_code
        == 0
    )
    before = _tree(out)
    _error(_run(*command, "--out", out, "--overwrite"), "--values")
    assert _tree(out) == before


# ---------------------------------------------------------------------- a command touches only its own

def _made_by(out, command, config=None, files=("data.txt",), part_of=None):
    """A finished run folder of another command, with a file in a sub-folder."""
    from sepo.runs import open_run

    with open_run(out, command, config or {"made": "by " + command}, part_of=part_of) as run:
        run.write_text("sub/" + files[0], "its own work\n")
        if command == "demo":
            run.write_json(
                "demo_summary.json", {"game": None, "audits": [], "trainings": [], "out": str(out)}
            )
        run.complete()
    return out


def _made_experiment(out):
    """A finished experiment folder of no cells: what `sepo report` reads (a plan and a results table)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.experiments.runner import COLUMNS
    from sepo.runs import open_run

    schema = pa.schema(
        [(name, getattr(pa, kind)() if kind != "string" else pa.string()) for name, kind in COLUMNS]
    )
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([], schema=schema), buffer)
    with open_run(out, "experiment run", {"made": "by experiment run"}) as run:
        run.write_json("plan.json", {"config_hash": None, "cells": [], "skipped": []})
        run.write_bytes("results.parquet", buffer.getvalue())
        run.complete()
    return out


def _experiment_config(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "domains: [{name: kuhn}]\nagents: [{name: u, kind: fixed, spec: uniform}]\nstages: [base]\n"
        "episodes: {validation: 1, test: 1}\nreplicates: 50\n"
    )
    return config


OTHER_COMMANDS = {
    "train": lambda h, out: [
        "train",
        "--game",
        "kuhn",
        "--steps",
        "3",
        "--groups",
        "2",
        "--quiet",
        "--out",
        out,
    ],
    "data sft": lambda h, out: ["data", "sft", "--episodes", "1", "--quiet", "--out", out],
    "model init": lambda h, out: ["model", "init", "--out", out],
    "experiment run": lambda h, out: ["experiment", "run", _experiment_config(h), "--quiet", "--out", out],
    "report": lambda h, out: ["report", _made_experiment(h / "experiment"), "--out", out],
    "demo": lambda h, out: ["demo", "--steps", "2", "--out", out],
}


@pytest.mark.parametrize("owner", ["sft", "data sft", "experiment run"])
@pytest.mark.parametrize("command", sorted(OTHER_COMMANDS))
def test_overwrite_never_replaces_another_commands_output(tmp_path, owner, command):
    """`sepo train --out <an SFT run, a dataset, an experiment> --overwrite` replaces none of them (nor
    do data sft, model init, experiment run, report and demo)."""
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
        _error(
            _run(*OTHER_COMMANDS["train"](tmp_path, inner), *extra),
            "part of the output of `sepo experiment run`",
        )
    assert _tree(experiment) == before


@pytest.mark.parametrize("command", ["train", "data sft", "model init"])
def test_a_finished_run_rerun_is_read_never_rewritten(tmp_path, command):
    out = tmp_path / "out"
    assert _run(*OTHER_COMMANDS[command](tmp_path, out)).exit_code == 0
    stamp = {
        str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()
    }
    again = _run(*OTHER_COMMANDS[command](tmp_path, out))
    assert again.exit_code == 0 and "already complete" in again.stdout, again.output
    assert {
        str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()
    } == stamp


@pytest.mark.parametrize("command", sorted(OTHER_COMMANDS))
def test_a_file_that_looks_like_a_temporary_is_the_users(tmp_path, command):
    """`.sepo-tmp-mine.txt` inside --out, not recorded as a temporary, survives the next run."""
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
    assert (out / ".sepo-tmp-mine.txt").read_text() == "mine" and (
        out / "sub" / ".sepo-tmp-mine.txt"
    ).read_text() == "mine too"
    if command in ("train", "model init"):
        assert _run(*args, "--overwrite").exit_code == 0
        assert (out / ".sepo-tmp-mine.txt").read_text() == "mine"


def test_model_files_get_the_umask_mode(tmp_path):
    """model.safetensors gets the umask's mode (not 0600), as docs/runs.md promises."""
    from sepo.runs import DIR_MODE, FILE_MODE

    assert _run("model", "init", "--out", tmp_path / "m").exit_code == 0
    modes = {str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777 for p in (tmp_path / "m").rglob("*")}
    assert modes["m/model.safetensors"] == FILE_MODE
    assert all(
        mode == (DIR_MODE if (tmp_path / name).is_dir() else FILE_MODE) for name, mode in modes.items()
    ), modes


def test_a_second_train_into_the_same_folder_is_refused_while_the_first_writes(tmp_path):
    """A second `sepo train --out cc` started while the first writes is refused (no interleaved
    metrics.jsonl)."""
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
        _error(
            _run("train", "--out", out, *TINY), "is being written by another sepo process", str(holder.pid)
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    result = _run("train", "--out", out, *TINY, "--overwrite")  # the dead holder's lock does not block
    assert result.exit_code == 0, result.output
