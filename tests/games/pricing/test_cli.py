"""The pricing market through the command line: benchmarks in `sepo eval --json`, exact values,
one-line errors (exit code 2)."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, list(args))


def test_eval_reports_the_benchmarks_and_the_exact_gap():
    result = _run(
        "eval",
        "--game",
        "pricing",
        "--agent",
        "bot:GrimTrigger",
        "--episodes",
        "2",
        "--rounds",
        "3",
        "--json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["pricing/nash_price"] == pytest.approx(1.4729, abs=1e-4)
    assert out["pricing/monopoly_price"] == pytest.approx(1.9250, abs=1e-4)
    assert out["exact_label"] == "exact" and out["adversarial_gap"] > 0
    # GrimTrigger partners: Δ ≈ 1
    assert out["collusion"] == pytest.approx(out["pricing/collusive/delta"], abs=0.02)


def test_train_then_exploit_a_tabular_run(tmp_path):
    train = _run(
        "train",
        "--game",
        "pricing",
        "--policy",
        "tabular",
        "--rounds",
        "2",
        "--prices",
        "5",
        "--steps",
        "3",
        "--groups",
        "4",
        "--lambda-c",
        "1",
        "--out",
        str(tmp_path / "run"),
    )
    assert train.exit_code == 0, train.output
    exploit = _run(
        "exploit",
        "--game",
        "pricing",
        "--rounds",
        "2",
        "--prices",
        "5",
        "--agent",
        f"run:{tmp_path / 'run'}",
        "--json",
    )
    assert exploit.exit_code == 0, exploit.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert json.loads(exploit.stdout)["value"] == pytest.approx(summary["adversarial_gap"])


@pytest.mark.parametrize("args, message", [
    (("--firms", "1"), "pricing: firms must be a whole number >= 2, got 1"),
    (("--detection", "2"), "pricing: detection must be a finite number in [0, 1]"),
    (("--cap", "0.5"), "below every grid price"),
    (("--sanction-threshold", "1.6"), "--sanction-threshold 1.6 does nothing at --fine 0"),
    (("--cap", "99"), "--cap 99 caps nothing: the grid's highest price is 1.97"),
    (("--sanction-threshold", "99", "--fine", "1"), "no price is above it (the grid's highest price is 1.97"),
    (("--grid", "1.7,1.6"), "at least two increasing prices"),
    (("--mu", "cheap"), "--mu 'cheap'"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = _run("exploit", "--game", "pricing", "--agent", "bot:Competitive", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [
    ("eval", "--agent", "uniform", "--episodes", "2"),
    ("train", "--policy", "tabular", "--steps", "1", "--out"),
])
def test_an_institution_that_acts_on_no_price_is_refused_before_anything_is_written(tmp_path, command):
    """A threshold without a fine, or a cap above every price, played the market without them."""
    out = () if command[0] == "eval" else (str(tmp_path / "out"),)
    for args, words in ((("--sanction-threshold", "1.6"), "give --fine"), (("--cap", "99"), "caps nothing")):
        result = _run(*command, *out, "--game", "pricing", *args)
        assert result.exit_code == 2, result.output
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message, absent", [
    (("--firms", "100000"), "pricing: --firms must be at most 50, got 100,000", None),
    (("--cost", "10"), "give an explicit --grid, or a lower --cost", "fewer --prices"),
    (("--prices", "200"), "use --prices 55 or fewer", None),
])
def test_sizes_that_cannot_work_are_refused_with_what_would(args, message, absent):
    """Too many firms is refused before the O(n²) Nash solve; a grid that cannot be spaced names what would
    help."""
    result = _run("eval", "--game", "pricing", "--agent", "uniform", "--episodes", "2", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert absent is None or absent not in result.stderr


def test_memory_that_does_not_fit_a_bot_says_why_it_does_not_apply():
    """A bot that declares its state is solved exactly without --memory: say so, not "give --memory M"."""
    result = _run("exploit", "--game", "pricing", "--agent", "bot:TitForTat", "--memory", "5")
    assert result.exit_code == 2, result.output
    assert "--memory 5 does not apply to TitForTat: it declares it reads 1 round" in result.stderr
    assert "give --memory M" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
