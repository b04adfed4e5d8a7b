"""Bad input is one line with exit status 2, no traceback, and nothing written: negative seeds,
binary, recursive and oversized files, values no option accepts."""
import json
import os
from pathlib import Path

import pytest

from tests.cli.cli_helpers import EXAMPLES, TINY, _copy, _error, _run, _tree

# ------------------------------------------------------------------------ one line, not a traceback

SEED_COMMANDS = [
    ["eval", "--agent", "nash", "--episodes", "1"],
    ["train", "--out", "OUT", *TINY],
    ["data", "sft", "--out", "OUT", "--episodes", "1"],
    ["model", "init", "--out", "OUT"],
    ["sft", "--model", "M", "--data", "D", "--out", "OUT"],
    ["analyze", "dynamics", str(EXAMPLES / "chicken.yaml"), "--rule", "fictitious"],
    ["analyze", "population", "--agents", "nash", "uniform", "--episodes", "2"],
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
    (tmp_path / "bomb.yaml").write_text(
        "a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
        + "train: [*i]\n"
    )
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


def test_a_finished_run_whose_config_is_corrupt_is_refused_naming_the_file(finished_run, tmp_path):
    """A rerun of a finished run read its summary and called it complete over a config.json that
    `run:DIR` refuses; it names the file instead."""
    run = _copy(finished_run, tmp_path)
    (run / "config.json").write_text("{bad")
    result = _run("train", "--out", run, "--steps", "6", "--groups", "2", "--quiet")
    _error(result, f"unreadable run config {run / 'config.json'}", "--overwrite")
    assert "already complete" not in result.output
