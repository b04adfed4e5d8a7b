"""examples/format_rate.py: the exact bound honours the token limit; --exact needs sampling."""
from __future__ import annotations

import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from sepo.models.tiny import init_tiny_model  # noqa: E402
from tests.examples.scripts import load_example  # noqa: E402


@pytest.fixture(scope="module")
def format_rate():
    return load_example("format_rate")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=20))


def test_exact_bound_counts_answers_cut_off_by_the_token_limit(format_rate, tiny):
    """With one new token no answer line and its end fit: every reply is cut off, so the bound is
    100% (--max-new-tokens holds under --exact: the bound is not the 48-token one)."""
    cut = format_rate.measure_exact(tiny, "kuhn", max_new_tokens=1, temperature=1.0, seed=1)
    assert cut["max_new_tokens"] == 1 and cut["mean_rest"] == 1.0
    room = format_rate.measure_exact(tiny, "kuhn", max_new_tokens=48, temperature=1.0, seed=1)
    assert room["mean_rest"] < 1.0


def test_exact_at_temperature_zero_is_one_line(format_rate, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["format_rate.py", "--model", "unused", "--exact", "--temperature", "0"])
    with pytest.raises(SystemExit) as info:
        format_rate.main()
    assert info.value.code == 2 and "--exact" in capsys.readouterr().err


def test_json_results_are_replaced_whole_never_left_torn(format_rate, monkeypatch, tmp_path):
    """The file is rewritten after every game; a write that fails part-way (here the second
    game's result cannot be written) leaves the first game's complete file, not a torn one."""
    import json

    def fake_measure(model, name, states, replies, limit, temperature, seed):
        result = {"game": name, "states": 1, "states_met": 1, "replies": 1, "invalid": 0, "rate": 0.0,
                  "ci95": (0.0, 1.0), "kinds": {"ok": 1}, "mean_reply_tokens": 1.0, "seconds": 0.0}
        return {**result, "example": object()} if name == "ipd" else result

    out = tmp_path / "rates.json"
    monkeypatch.setattr(format_rate, "measure", fake_measure)
    monkeypatch.setattr(
        sys, "argv", ["format_rate.py", "--model", "unused", "--games", "kuhn", "ipd", "--json", str(out)]
    )
    with pytest.raises(TypeError):
        format_rate.main()
    assert [r["game"] for r in json.loads(out.read_text())["results"]] == ["kuhn"]


@pytest.mark.parametrize("args, words", [
    (["--games", "chess"], ["unknown game 'chess'"]),
    (["--max-new-tokens", "kuhn=abc"], ["kuhn must be a whole number"]),
    (["--max-new-tokens", "kuhm=96"], ["'kuhm'", "not among the games measured"]),
    (["--max-new-tokens", "kuhn=48,ipd"], ["'ipd' is not GAME=N"]),
    (["--max-new-tokens", "0"], ["must be >= 1"]),
    (["--states", "0"], ["--states must be >= 1"]),
    (["--replies", "0"], ["--replies must be >= 1"]),
    (["--threads", "0"], ["--threads must be >= 1"]),
    (["--temperature", "nan"], ["temperature must be a finite number"]),
    (["--states", "many"], ["--states", "invalid int value"]),
    (["--json", "FOLDER"], ["is a folder"]),
    (["--json", "FOREIGN"], ["was not written by this script"]),
])
def test_bad_arguments_are_one_line_and_exit_2_before_any_work(
    format_rate, monkeypatch, capsys, tmp_path, args, words
):
    """Bad arguments are one line with exit status 2 before any measuring: an unknown game, `kuhn=abc`,
    `--threads 0`, `--states 0`, a typo in `GAME=N` (not silently ignored), and a `--json` file that
    would replace someone else's."""
    (tmp_path / "foreign.json").write_text("my notes\n")
    args = [{"FOLDER": str(tmp_path), "FOREIGN": str(tmp_path / "foreign.json")}.get(a, a) for a in args]

    def no_work(*a, **k):
        raise AssertionError("measured before the arguments were checked")

    monkeypatch.setattr(format_rate, "measure", no_work)
    monkeypatch.setattr(format_rate, "measure_exact", no_work)
    monkeypatch.setattr(sys, "argv", ["format_rate.py", "--model", "unused", "--games", "kuhn", "ipd", *args])
    with pytest.raises(SystemExit) as info:
        format_rate.main()
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    assert (tmp_path / "foreign.json").read_text() == "my notes\n"


def test_a_missing_model_is_one_line(format_rate, monkeypatch, capsys, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(
        sys, "argv", ["format_rate.py", "--model", str(tmp_path / "none"), "--games", "kuhn", "--exact"]
    )
    with pytest.raises(SystemExit) as info:
        format_rate.main()
    err = capsys.readouterr().err
    assert (
        info.value.code == 2
        and len(err.strip().splitlines()) == 1
        and "cannot load Hugging Face model" in err
    )
