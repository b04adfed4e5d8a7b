"""Kill and resume, bit-exact: `sepo sft` and `sepo data sft` end where an uninterrupted run ends."""
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from typer.testing import CliRunner  # noqa: E402

from sepo.cli.main import app  # noqa: E402
from sepo.errors import SepoError  # noqa: E402


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"HF_HUB_OFFLINE": "1"})


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model

    root = tmp_path_factory.mktemp("resume")
    tiny = init_tiny_model(root / "tiny", seed=0, episodes=20, num_hidden_layers=1)
    assert _run("data", "sft", "--out", root / "data", "--episodes", "4", "--seed", "3").exit_code == 0
    return tiny, root / "data"


def test_data_sft_killed_and_rerun_writes_the_same_bytes(inputs, tmp_path, monkeypatch):
    _, data = inputs
    import sepo.training.sft_data as sft_data

    real = sft_data.write_sft_dataset

    def killed(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt  # killed while the dataset was being written into place

    monkeypatch.setattr(sft_data, "write_sft_dataset", killed)
    assert _run("data", "sft", "--out", tmp_path / "data", "--episodes", "4", "--seed", "3").exit_code == 130
    assert not (tmp_path / "data").exists()  # nothing half-written is left behind
    monkeypatch.setattr(sft_data, "write_sft_dataset", real)
    assert _run("data", "sft", "--out", tmp_path / "data", "--episodes", "4", "--seed", "3").exit_code == 0
    # the same run: resumed
    again = _run("data", "sft", "--out", tmp_path / "data", "--episodes", "4", "--seed", "3")
    assert again.exit_code == 0
    ours, reference = _files(tmp_path / "data"), _files(data)
    arrow = [name for name in reference if name.endswith(".arrow")]
    assert arrow and all(ours[name] == reference[name] for name in arrow)


def test_sft_killed_after_a_checkpoint_resumes_to_the_same_weights(inputs, tmp_path):
    from safetensors.numpy import load_file

    from sepo.training.sft import SFTRunConfig, run_sft

    tiny, data = inputs
    config = SFTRunConfig(
        model=str(tiny), data=str(data), max_steps=6, batch_size=4, save_steps=2, learning_rate=3e-3
    )
    whole = run_sft(config, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run_sft(config, tmp_path / "killed", stop_after=3)  # killed after step 3; the checkpoint is at step 2
    assert (tmp_path / "killed" / "trainer" / "checkpoint-2").is_dir() and not (
        tmp_path / "killed" / "model"
    ).exists()
    resumed = run_sft(config, tmp_path / "killed")
    assert resumed.steps == whole.steps == 6
    a = load_file(str(whole.model / "model.safetensors"))
    b = load_file(str(resumed.model / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    logged = [
        [json.loads(line)["step"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        for run in ("whole", "killed")
    ]
    assert logged[0] == logged[1]  # nothing lost or logged twice across the kill
    with pytest.raises(SepoError, match="learning_rate 0.003 there, 0.01 here"):
        run_sft(SFTRunConfig(**{**config.__dict__, "learning_rate": 1e-2}), tmp_path / "killed")


def test_a_checkpoint_cut_off_while_saving_is_removed_and_the_run_resumes_from_the_one_before(
    inputs, tmp_path
):
    """A checkpoint folder left without its trainer state (a full disk stopped `torch.save` of the
    optimizer state) is removed, and the run resumes from the complete checkpoint before it."""
    from safetensors.numpy import load_file

    from sepo.training.sft import SFTRunConfig, run_sft

    tiny, data = inputs
    config = SFTRunConfig(
        model=str(tiny), data=str(data), max_steps=6, batch_size=4, save_steps=2, learning_rate=3e-3
    )
    whole = run_sft(config, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run_sft(config, tmp_path / "torn", stop_after=5)
    torn = tmp_path / "torn" / "trainer" / "checkpoint-4"
    (torn / "trainer_state.json").unlink()
    optimizer = (torn / "optimizer.pt").read_bytes()
    (torn / "optimizer.pt").write_bytes(optimizer[: len(optimizer) // 2])
    stages = []
    resumed = run_sft(config, tmp_path / "torn", on_stage=stages.append)
    assert "removed checkpoint-4: its save was cut off before it finished" in stages
    assert "training from checkpoint-2" in stages
    assert resumed.steps == 6
    a, b = (
        load_file(str(whole.model / "model.safetensors")),
        load_file(str(resumed.model / "model.safetensors")),
    )
    assert all((a[k] == b[k]).all() for k in a)


def test_sft_over_a_training_run_is_refused_and_its_metrics_kept(inputs, tmp_path):
    """`sft --out` over a `train` run must not truncate its metrics.jsonl: with a real model and real
    data (nothing else to refuse), the run folder is refused whole."""
    tiny, data = inputs
    run = tmp_path / "trained"
    assert _run("train", "--out", run, "--steps", "6", "--groups", "2", "--quiet").exit_code == 0
    before = _files(run)
    assert len((run / "metrics.jsonl").read_text().splitlines()) >= 6
    result = _run("sft", "--model", tiny, "--data", data, "--out", run, "--max-steps", "1")
    assert result.exit_code == 2, result.output
    assert "sepo train" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _files(run) == before


# ------------------------------------------------------------------ finished runs are read

def _stamp(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_sft_leaves_the_data_folder_untouched(inputs, tmp_path):
    """`sepo sft --data D` writes no datasets cache-*.arrow files into D/train/, a folder `sepo data
    sft` owns."""
    tiny, data = inputs
    before = _files(data)
    result = _run(
        "sft",
        "--model",
        tiny,
        "--data",
        data,
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--out",
        tmp_path / "x",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert _files(data) == before


@pytest.mark.parametrize("length", [["--max-steps", "2"], ["--epochs", "1"]], ids=["max-steps", "epochs"])
def test_a_finished_sft_run_rerun_is_read_never_trained_further(inputs, tmp_path, length):
    """Rerunning a finished `sepo sft --max-steps 2` reads it: the same step count, metrics.jsonl and
    model untouched; with --epochs a rerun appends no line and reports the run's own final loss."""
    tiny, data = inputs
    command = [
        "sft",
        "--model",
        tiny,
        "--data",
        data,
        *length,
        "--batch-size",
        "16",
        "--out",
        tmp_path / "x",
        "--quiet",
    ]
    first = _run(*command)
    assert first.exit_code == 0, first.output
    steps = first.stdout.split("done: ")[1].split(" SFT steps")[0]
    stamp = _stamp(tmp_path / "x")
    for _ in range(2):
        again = _run(*command)
        assert again.exit_code == 0, again.output
        assert f"done: {steps} SFT steps (already complete); final train loss" in again.stdout
        assert again.stdout.split("final train loss")[1] == first.stdout.split("final train loss")[1]
        assert _stamp(tmp_path / "x") == stamp


def test_sft_killed_after_its_last_step_saves_that_model_without_training_further(
    inputs, tmp_path, monkeypatch
):
    """An SFT run killed after its last step (`max_steps: 2`) resumes to save that model, without
    training a step past the end (no checkpoint-3)."""
    from safetensors.numpy import load_file

    import sepo.training.sft as sft

    tiny, data = inputs
    config = sft.SFTRunConfig(model=str(tiny), data=str(data), max_steps=2, batch_size=4, save_steps=1)
    whole = sft.run_sft(config, tmp_path / "whole")
    real = sft.save_final_model

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # killed while saving the final model, after the last checkpoint

    monkeypatch.setattr(sft, "save_final_model", killed)
    with pytest.raises(KeyboardInterrupt):
        sft.run_sft(config, tmp_path / "killed")
    monkeypatch.setattr(sft, "save_final_model", real)
    resumed = sft.run_sft(config, tmp_path / "killed")
    assert resumed.steps == 2 and sorted(
        p.name for p in (tmp_path / "killed" / "trainer").glob("checkpoint-*")
    ) == ["checkpoint-1", "checkpoint-2"]
    a, b = (
        load_file(str(whole.model / "model.safetensors")),
        load_file(str(resumed.model / "model.safetensors")),
    )
    assert all((a[k] == b[k]).all() for k in a)


def test_sft_overwrite_and_resume_keep_the_users_files_and_write_umask_modes(inputs, tmp_path):
    """A rerun keeps a file of the user's in S/model/, and model.safetensors gets the umask's mode
    (not 0600)."""
    from sepo.runs import FILE_MODE

    tiny, data = inputs
    command = [
        "sft",
        "--model",
        tiny,
        "--data",
        data,
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--out",
        tmp_path / "s",
        "--quiet",
    ]
    assert _run(*command).exit_code == 0
    (tmp_path / "s" / "model" / "notes.txt").write_text("mine")
    (tmp_path / "s" / "trainer" / "notes.txt").write_text("mine too")
    result = _run(*command, "--overwrite")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "s" / "model" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "s" / "trainer" / "notes.txt").read_text() == "mine too"
    assert all(p.stat().st_mode & 0o777 == FILE_MODE for p in (tmp_path / "s").rglob("*.safetensors"))


def test_sft_without_a_terminal_prints_its_stages_and_steps_with_an_eta(inputs, tmp_path, monkeypatch):
    """Without a terminal, a long SFT run prints its stages and steps with an ETA, not only library
    warnings."""
    from sepo import progress

    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    tiny, data = inputs
    result = _run(
        "sft",
        "--model",
        tiny,
        "--data",
        data,
        "--max-steps",
        "2",
        "--batch-size",
        "4",
        "--out",
        tmp_path / "s",
    )
    assert result.exit_code == 0, result.output
    assert (
        "loading the model" in result.stderr
        and "SFT steps: 2/2 (100%)" in result.stderr
        and "left" in result.stderr
    )
    assert "FutureWarning" not in result.stderr


def test_a_checkpoint_is_saved_once_enough_time_passed_so_a_stop_loses_little(inputs, tmp_path, monkeypatch):
    import sepo.training.sft as sft

    monkeypatch.setattr(sft, "CHECKPOINT_SECONDS", 0.0)
    tiny, data = inputs
    config = sft.SFTRunConfig(model=str(tiny), data=str(data), max_steps=3, batch_size=4)  # save_steps 200
    with pytest.raises(KeyboardInterrupt):
        sft.run_sft(config, tmp_path / "s", stop_after=2)
    # saved for time, not save_steps; the stop kept it
    assert (tmp_path / "s" / "trainer" / "checkpoint-1").is_dir()
    assert sft.run_sft(config, tmp_path / "s").steps == 3


def test_llm_training_and_its_audit_without_a_terminal_print_stages_and_counts(inputs, tmp_path, monkeypatch):
    """Without a terminal, `sepo train --policy hf:...` and `sepo eval --agent run:<LLM run>` print their
    stages and counts, not only library warnings."""
    from sepo import progress

    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    tiny, _ = inputs
    run = tmp_path / "run"
    trained = _run(
        "train",
        "--policy",
        f"hf:{tiny}",
        "--steps",
        "1",
        "--groups",
        "1",
        "--group-size",
        "2",
        "--max-new-tokens",
        "4",
        "--final-samples",
        "2",
        "--out",
        run,
    )
    assert trained.exit_code == 0, trained.output
    for line in (
        "loading the model",
        "training steps: 1/1 (100%)",
        "model replies:",
        "measuring the trained model's played policy",
    ):
        assert line in trained.stderr, (line, trained.stderr)
    assert "FutureWarning" not in trained.stderr and "left" in trained.stderr
    audited = _run(
        "eval", "--agent", f"run:{run}", "--episodes", "1", "--samples", "2", "--max-new-tokens", "4"
    )
    assert audited.exit_code == 0, audited.output
    assert "train pool: 1 episodes against" in audited.stderr and "model replies:" in audited.stderr


@pytest.mark.slow
def test_a_stop_before_the_first_checkpoint_keeps_the_run_for_a_resume(inputs, tmp_path):
    """A SIGTERM before the first checkpoint of a language-model training run does not remove the
    fresh folder: a stop never removes work; the folder and its manifest stay as an unfinished run,
    the last line says so, and the same command resumes it to the end."""
    import os
    import signal
    import subprocess
    import sys
    import time

    tiny, _ = inputs
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "sepo.cli.main",
        "--threads",
        "1",
        "train",
        "--policy",
        f"hf:{tiny}",
        "--steps",
        "3",
        "--groups",
        "1",
        "--group-size",
        "2",
        "--max-new-tokens",
        "4",
        "--final-samples",
        "2",
        "--out",
        str(out),
    ]
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        metrics = out / "metrics.jsonl"
        while (
            process.poll() is None
            and time.monotonic() < deadline
            and not (metrics.is_file() and metrics.read_text())
        ):
            time.sleep(0.1)  # one step logged: training under way, no checkpoint yet (every 5 steps)
        assert process.poll() is None and not list(out.glob("trainer/checkpoint-*")), process.communicate()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err[-2000:]
    assert (
        "kept as an unfinished `sepo train` run; the same command resumes it" in err.strip().splitlines()[-1]
    )
    manifest = json.loads((out / "sepo-run.json").read_text())
    assert manifest["command"] == "train" and not manifest["complete"] and "config.json" in manifest["files"]
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((out / "sepo-run.json").read_text())["complete"]


def test_a_stop_before_a_run_wrote_anything_removes_its_folder_and_says_so(tmp_path):
    from sepo.runs import STOP_NOTES, open_run

    STOP_NOTES.clear()
    with pytest.raises(KeyboardInterrupt):
        with open_run(tmp_path / "fresh", "train", {"steps": 1}):
            raise KeyboardInterrupt
    assert not (tmp_path / "fresh").exists() and STOP_NOTES == [
        f"{tmp_path / 'fresh'} removed: the run had written nothing yet"
    ]
    STOP_NOTES.clear()
    with pytest.raises(KeyboardInterrupt):
        with open_run(tmp_path / "started", "train", {"steps": 1}) as run:
            run.write_json("config.json", {"steps": 1})
            raise KeyboardInterrupt
    assert (tmp_path / "started" / "config.json").is_file() and "kept as an unfinished" in STOP_NOTES[0]
    STOP_NOTES.clear()
    with pytest.raises(ValueError):  # an error (not a stop) before any progress still leaves nothing behind
        with open_run(tmp_path / "failed", "train", {"steps": 1}) as run:
            run.write_json("config.json", {"steps": 1})
            raise ValueError
    assert not (tmp_path / "failed").exists() and not STOP_NOTES


def test_an_sft_run_refuses_to_resume_on_data_replaced_since_it_started(inputs, tmp_path):
    """The run's config names its --data folder only, so the files' sha256 are recorded at the start
    and checked on resume: a dataset replaced in place (`sepo data sft --overwrite` with other episodes)
    after a kill is refused, not trained on."""
    from sepo.training.sft import SFTRunConfig, run_sft

    tiny, _ = inputs
    data = tmp_path / "data"
    assert _run("data", "sft", "--out", data, "--episodes", "2", "--quiet").exit_code == 0
    config = SFTRunConfig(model=str(tiny), data=str(data), max_steps=3, batch_size=4, save_steps=1)
    with pytest.raises(KeyboardInterrupt):
        run_sft(config, tmp_path / "s", stop_after=1)
    # already complete: unchanged
    assert _run("data", "sft", "--out", data, "--episodes", "2", "--quiet").exit_code == 0
    assert _run("data", "sft", "--out", data, "--episodes", "3", "--overwrite", "--quiet").exit_code == 0
    with pytest.raises(SepoError, match="changed since this run started"):
        run_sft(config, tmp_path / "s")
    assert run_sft(config, tmp_path / "s", overwrite=True).steps == 3


def test_an_sft_run_refuses_to_resume_from_a_model_replaced_since_it_started(inputs, tmp_path):
    """The run's config names its --model folder only, so the model's files (size, modification time)
    are recorded at the start and checked on resume: a model replaced in place (`sepo sft --overwrite`
    of the run that made it, `sepo model init --overwrite`) after a kill is refused (a LoRA checkpoint,
    an adapter alone, would otherwise sit on other base weights)."""
    import shutil

    from sepo.training.sft import MODEL_IDENTITY, SFTRunConfig, run_sft

    tiny, data = inputs
    model = Path(shutil.copytree(tiny, tmp_path / "model"))
    config = SFTRunConfig(model=str(model), data=str(data), max_steps=2, batch_size=4, save_steps=1)
    with pytest.raises(KeyboardInterrupt):
        run_sft(config, tmp_path / "s", stop_after=1)
    assert json.loads((tmp_path / "s" / MODEL_IDENTITY).read_text())["files"]["config.json"][0] > 0
    weights = next(model.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes())  # rewritten in place (same size, a new modification time)
    with pytest.raises(
        SepoError, match=rf"--model .* changed since this run started \({weights.name} differs\)"
    ):
        run_sft(config, tmp_path / "s")
    assert run_sft(config, tmp_path / "s", overwrite=True).steps == 2
    # a finished run is read back, whatever the model now
    assert run_sft(config, tmp_path / "s").already_complete


# ------------------------ finished runs that lost an output; checkpoints whose weights do not read

HF_TRAIN = ["--game", "kuhn", "--groups", "2", "--group-size", "2", "--samples", "4", "--final-samples", "4",
            "--max-new-tokens", "8", "--quiet"]


@pytest.fixture(scope="module")
def hf_run(inputs, tmp_path_factory):
    """A finished 6-step language-model training run (checkpoints at steps 5 and 6) and its command."""
    from tests.cli.cli_helpers import _run as cli

    tiny, _ = inputs
    command = ["train", "--policy", f"hf:{tiny}", *HF_TRAIN]
    out = tmp_path_factory.mktemp("hf") / "run"
    trained = cli(*command, "--steps", "6", "--out", out)
    assert trained.exit_code == 0, trained.output
    assert sorted(p.name for p in (out / "trainer").glob("checkpoint-*")) == ["checkpoint-5", "checkpoint-6"]
    return command, out


def _copy(run: Path, to: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run, to))


def _unlink_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


@pytest.mark.parametrize("damage, words", [
    (lambda run: (run / "summary.json").unlink(), ["is marked finished but its summary.json is missing"]),
    (lambda run: (run / "summary.json").write_text("[1, 2, 3]"), ["unreadable run summary", "summary.json"]),
    (lambda run: _unlink_tree(run / "model"), ["is marked finished but its model is missing"]),
    (lambda run: (run / "model" / "model.safetensors").unlink(), ["its model/model.safetensors is missing"]),
], ids=["no-summary", "summary-a-list", "no-model", "no-weights"])
def test_a_finished_llm_run_missing_or_with_a_damaged_output_is_one_line(hf_run, tmp_path, damage, words):
    """A finished `train --policy hf:` run without its summary.json, with a summary of another shape,
    or without its model is refused in one line (no RuntimeError or AttributeError traceback, and
    no 'already complete; model at R/model' naming a folder that is not there)."""
    from tests.cli.cli_helpers import _error
    from tests.cli.cli_helpers import _run as cli

    command, finished = hf_run
    run = _copy(finished, tmp_path / "run")
    damage(run)
    before = _files(run)
    _error(cli(*command, "--steps", "6", "--out", run), *words, "--overwrite")
    assert _files(run) == before


def test_a_finished_llm_run_whose_interval_is_null_is_still_shown(hf_run, tmp_path):
    """A summary holds NaN as null (JSON has no NaN): the rerun's `done:` line shows nan, not a TypeError."""
    from tests.cli.cli_helpers import _run as cli

    command, finished = hf_run
    run = _copy(finished, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "exploitability_ci": [None, None]}))
    again = cli(*command, "--steps", "6", "--out", run)
    assert again.exit_code == 0, again.output
    assert "done: 6 steps (already complete); exploitability" in again.stdout and "[nan, nan]" in again.stdout


def test_a_checkpoint_whose_weights_do_not_read_is_removed_and_the_run_resumes_from_the_one_before(
    hf_run, tmp_path
):
    """A checkpoint with its trainer state but a model.safetensors cut short (an interrupted copy)
    counts as torn, like one without its trainer state: it is removed, with a warning (not a
    safetensors traceback), and the run resumes from the checkpoint before it, to the same weights."""
    from safetensors.numpy import load_file

    from tests.cli.cli_helpers import _run as cli

    command, finished = hf_run
    whole, damaged = _copy(finished, tmp_path / "whole"), _copy(finished, tmp_path / "damaged")
    assert cli(*command, "--steps", "8", "--out", whole).exit_code == 0
    weights = damaged / "trainer" / "checkpoint-6" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    resumed = cli(*command, "--steps", "8", "--out", damaged)
    assert resumed.exit_code == 0, resumed.output
    assert (
        f"warning: removed {damaged / 'trainer' / 'checkpoint-6'}: its model.safetensors does not read"
        in resumed.stderr
    )
    assert "the run resumes from checkpoint-5" in resumed.stderr
    a, b = (
        load_file(str(whole / "model" / "model.safetensors")),
        load_file(str(damaged / "model" / "model.safetensors")),
    )
    assert all((a[k] == b[k]).all() for k in a)


def test_a_damaged_checkpoint_with_none_before_it_is_one_line_naming_it(hf_run, tmp_path):
    import shutil

    from tests.cli.cli_helpers import _error
    from tests.cli.cli_helpers import _run as cli

    command, finished = hf_run
    run = _copy(finished, tmp_path / "run")
    shutil.rmtree(run / "trainer" / "checkpoint-5")
    (run / "trainer" / "checkpoint-6" / "model.safetensors").write_bytes(b"")
    _error(
        cli(*command, "--steps", "8", "--out", run),
        "checkpoint-6 is damaged",
        "model.safetensors does not read",
        "--overwrite",
    )
    # nothing removed: the user decides
    assert (run / "trainer" / "checkpoint-6" / "trainer_state.json").is_file()


def test_sft_resumes_from_the_checkpoint_before_one_whose_weights_do_not_read(inputs, tmp_path):
    from safetensors.numpy import load_file

    from sepo.training.sft import SFTRunConfig, run_sft

    tiny, data = inputs
    config = SFTRunConfig(
        model=str(tiny), data=str(data), max_steps=6, batch_size=4, save_steps=2, learning_rate=3e-3
    )
    whole = run_sft(config, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run_sft(config, tmp_path / "damaged", stop_after=5)
    weights = tmp_path / "damaged" / "trainer" / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    stages = []
    with pytest.warns(
        UserWarning, match=r"checkpoint-4: its model.safetensors does not read .*resumes from checkpoint-2"
    ):
        resumed = run_sft(config, tmp_path / "damaged", on_stage=stages.append)
    assert "training from checkpoint-2" in stages and resumed.steps == 6
    a, b = (
        load_file(str(whole.model / "model.safetensors")),
        load_file(str(resumed.model / "model.safetensors")),
    )
    assert all((a[k] == b[k]).all() for k in a)


def test_a_finished_sft_run_without_its_model_or_with_a_damaged_result_is_one_line(inputs, tmp_path):
    """A finished `sepo sft` run without its model is refused in one line, not reported 'already
    complete; model at R/model', a folder that is not there."""
    from tests.cli.cli_helpers import _error
    from tests.cli.cli_helpers import _run as cli

    tiny, data = inputs
    command = ["sft", "--model", tiny, "--data", data, "--max-steps", "2", "--batch-size", "4", "--quiet"]
    assert cli(*command, "--out", tmp_path / "run").exit_code == 0
    no_model = _copy(tmp_path / "run", tmp_path / "no_model")
    _unlink_tree(no_model / "model")
    _error(cli(*command, "--out", no_model), "is marked finished but its model is missing", "--overwrite")
    bad_result = _copy(tmp_path / "run", tmp_path / "bad_result")
    manifest = json.loads((bad_result / "sepo-run.json").read_text())
    (bad_result / "sepo-run.json").write_text(json.dumps({**manifest, "result": {"a": 1}}))
    _error(cli(*command, "--out", bad_result), "unreadable run manifest", "sepo-run.json", "--overwrite")
    again = cli(*command, "--out", tmp_path / "run")
    assert again.exit_code == 0 and "done: 2 SFT steps (already complete)" in again.stdout, again.output
