"""examples/llm_seeds.py: bad arguments are one line and exit 2; results are written atomically,
never over a foreign file; every run is read through run_llm_sepo's config check."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.examples.scripts import load_example


@pytest.fixture(scope="module")
def llm_seeds():
    return load_example("llm_seeds")


@pytest.fixture
def model(tmp_path):
    """A folder that passes the model-source check (nothing loads it: the checks come first)."""
    folder = tmp_path / "sft"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return str(folder)


def _no_work(*a, **k):
    raise AssertionError("trained before the arguments were checked")


@pytest.mark.parametrize("args, words", [
    (["--game", "chess"], ["unknown game 'chess'"]),
    (["--param", "hands=abc"], ["--hands 'abc'", "expected an integer"]),
    (["--param", "hands"], ["is not NAME=VALUE"]),
    (["--param", "pie=3"], ["does not apply to game 'kuhn'"]),
    (["--groups", "0"], ["groups must be >= 1"]),
    (["--group-size", "1"], ["group_size must be >= 2"]),
    (["--steps", "zero"], ["--steps", "invalid int value"]),
    (["--seeds", "0", "0"], ["--seeds repeats 0"]),
    (["--seeds", "-1"], ["seed must be in [0, 2**32)"]),
    (["--max-new-tokens", "0"], ["max_new_tokens must be >= 1"]),
    (["--methods", "magic"], ["invalid choice"]),
    (["--sft", "MISSING"], ["no such folder"]),
    (["--out", "FILE"], ["is a file; name a folder"]),
    (["--out", "FOREIGN"], ["was not written by this script"]),
])
def test_bad_arguments_are_one_line_and_exit_2_before_any_work(
    llm_seeds, monkeypatch, capsys, tmp_path, model, args, words
):
    """Bad arguments are one line with exit status 2 before any work: no Python or argparse traceback
    (int('abc'), the config's SepoError), no bare SystemExit with status 1, nothing deep in training."""
    (tmp_path / "file").write_text("mine\n")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "seeds.json").write_text('{"my": "notes"}')
    places = {
        "MISSING": str(tmp_path / "none"),
        "FILE": str(tmp_path / "file"),
        "FOREIGN": str(tmp_path / "foreign"),
    }
    args = [places.get(a, a) for a in args]
    base = {"--sft": model, "--out": str(tmp_path / "out")}
    for flag in list(base):
        if flag in args:
            del base[flag]
    monkeypatch.setattr(llm_seeds, "run_llm_sepo", _no_work)
    with pytest.raises(SystemExit) as info:
        llm_seeds.main([*(x for kv in base.items() for x in kv), *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    assert (tmp_path / "file").read_text() == "mine\n"
    assert (tmp_path / "foreign" / "seeds.json").read_text() == '{"my": "notes"}'


def test_results_are_written_atomically_and_finished_runs_go_through_the_config_check(
    llm_seeds, monkeypatch, tmp_path, model, capsys
):
    """seeds.json is written atomically and as valid JSON (a one-seed interval has no NaN), and a run
    folder holding a summary.json goes through the config check, so a rerun with other --steps does
    not report the old runs as the new ones."""
    out = tmp_path / "out"
    (out / "none_seed0").mkdir(parents=True)
    (out / "none_seed0" / "summary.json").write_text('{"stale": true}')
    called, written = [], []

    def fake_run(config, run_dir):
        called.append((config.steps, Path(run_dir).name))
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        (Path(run_dir) / "metrics.jsonl").write_text(json.dumps({"step": 1, "invalid_rate": 0.0}) + "\n")
        return {"exact_value": "exploitability", "exploitability": 0.1, "exploitability_ci": [0.05, 0.15],
                "policy": "estimated", "utility_exact": 0.0}

    class FakeEnv:
        def __init__(self, *a):
            pass

        def measure(self, model):
            return {"exact_value": "exploitability", "exploitability": 0.0, "exploitability_ci": [0.0, 0.0],
                    "policy": "estimated", "utility_exact": 0.0}

    import sepo.policies.hf
    import sepo.runs

    real_atomic = sepo.runs.atomic_write_json
    monkeypatch.setattr(llm_seeds, "run_llm_sepo", fake_run)
    monkeypatch.setattr(llm_seeds, "SEPOEnvironment", FakeEnv)
    monkeypatch.setattr(sepo.policies.hf, "load_hf_model", lambda *a, **k: (None, None, None))
    monkeypatch.setattr(
        sepo.runs, "atomic_write_json", lambda path, data: (written.append(path), real_atomic(path, data))
    )
    llm_seeds.main(["--sft", model, "--out", str(out), "--seeds", "0", "--methods", "none", "--steps", "7"])
    assert called == [(7, "none_seed0")]
    assert written == [out / "seeds.json"]
    # valid JSON: the one-seed interval is null, not NaN
    report = json.loads((out / "seeds.json").read_text())
    assert report["methods"]["none"]["exploitability"] == [0.1, None, None]
    assert report["methods"]["none"]["relative_change_in_exploitability"] is None  # SFT value 0: no ratio
    assert "no relative change" in capsys.readouterr().out
