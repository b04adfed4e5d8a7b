"""`sepo train --method advantage-alignment` and `--self-play`: a run, and one line for what does not
apply."""

import json

import pytest

from tests.cli.cli_helpers import _error, _run


def test_advantage_alignment_in_self_play_trains_and_records_its_settings(tmp_path):
    out = tmp_path / "aa"
    result = _run(
        "train",
        "--game",
        "ipd",
        "--rounds",
        "3",
        "--memory",
        "1",
        "--method",
        "advantage-alignment",
        "--aa-beta",
        "2",
        "--self-play",
        "--steps",
        "3",
        "--groups",
        "4",
        "--group-size",
        "2",
        "--out",
        out,
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert (config["method"], config["aa_beta"], config["aa_gamma"], config["self_play"]) == (
        "advantage-alignment",
        2.0,
        0.96,
        True,
    )


def test_a_sepo_run_records_no_new_fields(tmp_path):
    out = tmp_path / "sepo"
    assert (
        _run(
            "train",
            "--game",
            "ipd",
            "--rounds",
            "2",
            "--memory",
            "1",
            "--steps",
            "2",
            "--groups",
            "2",
            "--out",
            out,
            "--quiet",
        ).exit_code
        == 0
    )
    assert not {"method", "aa_beta", "aa_gamma", "self_play"} & set(
        json.loads((out / "config.json").read_text())
    )


@pytest.mark.parametrize("args, words", [
    (["--method", "advantage-alignment", "--lambda-e", "1"], ["do not apply"]),
    (["--aa-beta", "1"], ["--method advantage-alignment only"]),
    (["--method", "advantage-alignment", "--aa-gamma", "2"], ["--aa-gamma"]),
    (["--game", "kuhn", "--method", "advantage-alignment"], ["advantage-alignment trains in games"]),
    (["--game", "kuhn", "--self-play"], ["self-play"]),
    (["--method", "lola"], ["lola"]),
    (["--answer-rest", "0.05"], ["--answer-rest", "language models"]),
])
def test_what_does_not_apply_is_one_line(tmp_path, args, words):
    game = [] if "--game" in args else ["--game", "ipd", "--rounds", "2", "--memory", "1"]
    _error(_run("train", *game, *args, "--steps", "1", "--out", tmp_path / "x", "--quiet"), *words)


@pytest.mark.parametrize("args", [
    ["train", "--game", "kuhn", "--policy", "hf:MODEL", "--gpu"],
    ["sft", "--model", "MODEL", "--data", "DATA", "--gpu"],
    ["serve", "--model", "MODEL", "--gpu"],
])
def test_gpu_without_an_accelerator_is_one_line_before_anything_is_written(tmp_path, monkeypatch, args):
    """`sepo train --gpu` and `sepo sft --gpu` on a machine without an accelerator are refused in one
    line before anything is written, not trained on the CPU while the config says use_cpu false (nor,
    for `sepo serve --gpu`, failed deep in torch)."""
    import torch
    from typer.testing import CliRunner

    from sepo.cli.main import app

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    args = [{"MODEL": str(tmp_path / "model"), "DATA": str(tmp_path / "data")}.get(a, a) for a in args]
    out = ["--out", str(tmp_path / "run")] if args[0] != "serve" else []
    result = CliRunner().invoke(app, [*args, *out])
    assert result.exit_code == 2 and "torch sees no accelerator on this machine" in result.stderr, (
        result.output
    )
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
