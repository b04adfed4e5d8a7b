"""sepo.runs, the one rule for every command that writes: it touches only what it wrote."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sepo.errors import SepoError
from sepo.runs import FILE_MODE, LOCK, MANIFEST, TMP_PREFIX, describe_difference, open_run, read_manifest

ROOT = Path(__file__).resolve().parents[1]


def _tree(root) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def _run_with_model(out, command="sft", config=None, files=("a.txt", "b.txt"), complete=True, **options):
    with open_run(out, command, config or {"x": 1}, **options) as run:
        with run.staged("model") as tmp:
            tmp.mkdir()
            for name in files:
                (tmp / name).write_text(f"{name} of this run")
        run.write_json("summary.json", {"ok": True})
        if complete:
            run.complete({"steps": 2})
        else:
            run.commit()
    return run


def test_overwrite_replaces_only_a_run_of_the_same_command(tmp_path):
    out = tmp_path / "run"
    _run_with_model(out)
    before = _tree(out)
    with pytest.raises(
        SepoError,
        match=r"holds the output of `sepo sft`, not `sepo train`.*--overwrite replaces only a `sepo train` "
              r"run",
    ):
        with open_run(out, "train", {"x": 1}, overwrite=True):
            pass
    assert _tree(out) == before


def test_a_different_config_names_the_field_by_its_path():
    saved = {
        "agents": [{"name": "a", "spec": None}, {"name": "b", "spec": "bot:TFT"}],
        "seeds": [0, 1],
        "training": {"steps": 2},
    }
    given = {
        "agents": [{"name": "a", "spec": None}, {"name": "b", "spec": "bot:GrimTrigger"}],
        "seeds": [0, 1],
        "training": {"steps": 2},
    }
    assert describe_difference(saved, given) == "agents[1].spec bot:TFT there, bot:GrimTrigger here"
    assert describe_difference({"seeds": [0, 1]}, {"seeds": [0]}) == "seeds [0, 1] there, [0] here"


def test_a_finished_run_is_read_and_refuses_writes(tmp_path):
    out = tmp_path / "run"
    _run_with_model(out)
    with open_run(out, "sft", {"x": 1}) as run:
        assert run.finished and run.result == {"steps": 2}
        with pytest.raises(RuntimeError, match="finished"):
            run.write_json("summary.json", {"ok": False})


def test_files_of_the_user_inside_a_run_folder_stay(tmp_path):
    out = tmp_path / "run"
    _run_with_model(out, complete=False)
    (out / "model" / "mine.txt").write_text("mine")
    _run_with_model(out, files=("a.txt",))  # resumed: model/ written again, now without b.txt
    assert sorted(p.name for p in (out / "model").iterdir()) == ["a.txt", "mine.txt"]
    assert "model/mine.txt" not in read_manifest(out)["files"]
    _run_with_model(out, overwrite=True)  # replaced: what the run wrote goes, the user's file stays
    assert (out / "model" / "mine.txt").read_text() == "mine"
    assert sorted(p.name for p in (out / "model").iterdir()) == ["a.txt", "b.txt", "mine.txt"]


def test_a_new_file_over_a_file_of_the_user_is_refused_and_nothing_moves(tmp_path):
    out = tmp_path / "run"
    _run_with_model(out, files=("a.txt",), complete=False)
    (out / "model" / "b.txt").write_text("mine")
    before = _tree(out)
    with pytest.raises(SepoError, match="b.txt exists and was not written by this run"):
        _run_with_model(out)
    after = _tree(out)
    assert json.loads(after.pop(MANIFEST))["files"] == json.loads(before.pop(MANIFEST))["files"]
    assert after == before


def test_the_runs_that_are_part_of_another_output_belong_to_it(tmp_path):
    out = tmp_path / "experiment"
    with open_run(out, "experiment run", {"x": 1}) as run:
        run.path("cells").mkdir()
        run.commit()
    _run_with_model(out / "cells" / "c1", command="experiment cell", part_of="experiment run")
    _run_with_model(out / "cells" / "c1" / "train", command="train", part_of="experiment run")
    (out / "cells" / "mine.txt").write_text("mine")
    before = _tree(out)
    for command in ("train", "sft"):
        for overwrite in (False, True):
            with pytest.raises(SepoError, match="is part of the output of `sepo experiment run`"):
                with open_run(out / "cells" / "c1" / "train", command, {"x": 1}, overwrite=overwrite):
                    pass
    assert _tree(out) == before
    with open_run(out, "experiment run", {"x": 1}, overwrite=True) as run:
        run.commit()
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        LOCK,
        "cells",
        "cells/mine.txt",
        MANIFEST,
    ]


def test_only_temporaries_the_manifest_recorded_are_removed(tmp_path):
    out = tmp_path / "run"
    run = _run_with_model(out, complete=False)
    (out / f"{TMP_PREFIX}mine.txt").write_text("mine")
    killed = out / f"{run.tmp_prefix}summary.json.x1y2"  # left by a kill -9 of that run
    killed.write_text("{")
    _run_with_model(out, complete=False)
    assert not killed.exists() and (out / f"{TMP_PREFIX}mine.txt").read_text() == "mine"
    _run_with_model(out, overwrite=True)
    assert (out / f"{TMP_PREFIX}mine.txt").read_text() == "mine"


def test_files_a_library_wrote_private_get_the_umask_mode(tmp_path):
    with open_run(tmp_path / "run", "sft", {}) as run:
        with run.staged("model") as tmp:
            tmp.mkdir()
            fd = os.open(tmp / "model.safetensors", os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
    assert (tmp_path / "run" / "model" / "model.safetensors").stat().st_mode & 0o777 == FILE_MODE


HOLD = """
import sys, time
from sepo.runs import open_run
with open_run(sys.argv[1], "train", {"x": 1}) as run:
    print("holding", flush=True)
    time.sleep(120)
"""


def test_a_second_writer_is_refused_and_a_dead_writers_lock_does_not_block(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(
            SepoError, match=f"is being written by another sepo process \\(pid {holder.pid}\\)"
        ):
            with open_run(out, "train", {"x": 1}):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with open_run(out, "train", {"x": 1}) as run:  # the kernel dropped the dead process's lock
        run.complete()
    assert json.loads((out / MANIFEST).read_text())["lock"] == LOCK


def test_json_files_take_numpy_scalars(tmp_path):
    """JSON files take numpy scalars: an audit's numpy boolean (`exact`) is written like a bool."""
    import numpy as np

    with open_run(tmp_path / "run", "sft", {}) as run:
        run.write_json("audit.json", {"exact": np.bool_(True), "gap": np.float64("nan"), "n": np.int64(3)})
    assert json.loads((tmp_path / "run" / "audit.json").read_text()) == {"exact": True, "gap": None, "n": 3}


def test_a_staged_folder_goes_into_a_recorded_folder_not_yet_made(tmp_path):
    """`run.path("models")` records the folder without making it; staging `models/tiny` then makes
    the folders above it (no "No such file or directory: .sepo-tmp-...-models_tiny")."""
    from sepo.runs import open_run

    with open_run(tmp_path / "e", "experiment run", {"x": 1}) as run:
        run.path("models")
        with run.staged("models/tiny") as tmp:
            tmp.mkdir()
            (tmp / "weights.bin").write_bytes(b"w")
        run.complete()
    assert (tmp_path / "e" / "models" / "tiny" / "weights.bin").read_bytes() == b"w"


def _finished_run(root: Path, command: str) -> Path:
    from sepo.runs import open_run

    with open_run(root, command, {"made": "by the test"}) as run:
        with run.staged("model") as tmp:
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / "config.json").write_text("{}")
        run.complete({})
    return root


@pytest.mark.parametrize("args", [
    ["sft", "--model", "MODEL", "--data", "MISSING", "--max-steps", "1"],
    ["sft", "--model", "TYPO/", "--data", "DATA", "--max-steps", "1"],
    ["sft", "--model", "OUT/model", "--data", "DATA", "--max-steps", "1"],
    ["train", "--game", "kuhn", "--policy", "hf:TYPO/", "--steps", "1"],
    ["train", "--game", "kuhn", "--policy", "hf:OUT/model", "--steps", "1"],
])
def test_overwrite_checks_its_inputs_before_it_removes_the_old_run(tmp_path, args):
    """`sepo sft/train --overwrite` checks --data and --model (also a model inside the run it is to
    remove) before it removes the old run, so a typo costs no run; `hf:NAME/` is one line, not
    huggingface_hub's traceback."""
    from typer.testing import CliRunner

    from sepo.cli.main import app

    command = "sft" if args[0] == "sft" else "train"
    out = _finished_run(tmp_path / "out", command)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dataset_dict.json").write_text('{"splits": ["train", "validation"]}')
    names = {"MODEL": str(out / "model"), "MISSING": str(tmp_path / "missing"), "TYPO/": f"{tmp_path}/typo/",
             "DATA": str(tmp_path / "data")}
    args = [names.get(a, a.replace("OUT", str(out)).replace("TYPO/", f"{tmp_path}/typo/")) for a in args]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--overwrite"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "Traceback" not in result.output
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
