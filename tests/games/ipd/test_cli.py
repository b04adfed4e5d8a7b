"""The IPD through the command line: exact values, JSON, and one-line errors (exit code 2) for bad input."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("args, message", [
    (("--agent", "axelrod:Probr"), "unknown Axelrod strategy 'Probr'; near matches: Prober"),
    (("--agent", "bot:axelrod:TitForTatt"), "near matches: TitForTat"),
    (("--agent", "bot:TFT", "--payoffs", "[[3, 0], [5, 1]]"), "ipd payoff matrix must have shape 2x2x2"),
    (("--agent", "bot:TFT", "--payoffs", "R=3,S=0,T=5"), "ipd payoffs need exactly R, S, T and P"),
    (("--agent", "bot:TFT", "--rounds", "0"), "ipd: rounds must be a positive integer, got 0"),
    (("--agent", "bot:TFT", "--rounds", "-4"), "ipd: rounds must be a positive integer, got -4"),
    (("--agent", "bot:TFT", "--memory", "-1"), "ipd: memory must be a whole number of rounds >= 0"),
])
@pytest.mark.parametrize("command", ["eval", "exploit"])
def test_bad_input_is_one_line_exit_2(command, args, message):
    result = _run(command, "--game", "ipd", *args, *(("--episodes", "2") if command == "eval" else ()))
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_exploit_json_gives_the_gap_bound_and_opponent_table():
    result = _run("exploit", "--game", "ipd", "--agent", "bot:GrimTrigger", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["adversarial_gap"] == pytest.approx(0.625) and data["br_payoff"] == pytest.approx(3.25)
    assert data["pruning_bound"] == 0.0 and data["exact"] is True
    rows = data["best_response"]
    assert len(rows) == 21845 and {"round", "history", "action"} <= set(rows[0])


def test_eval_with_rounds_payoffs_and_memory():
    result = _run("exploit", "--game", "ipd", "--agent", "bot:TFT", "--rounds", "12", "--payoffs", "R=4,S=0,T=6,P=1",
                  "--memory", "1", "--json")
    data = json.loads(result.stdout)
    assert data["adversarial_gap"] == pytest.approx(6 / 12)  # one temptation, then mutual defection
    assert "last 1 rounds" in data["method"]


def test_exploit_with_pruning_prints_the_bound():
    result = _run("exploit", "--game", "ipd", "--agent", "bot:GenerousTFT", "--rounds", "6", "--threshold", "0.01", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    exact = json.loads(_run("exploit", "--game", "ipd", "--agent", "bot:GenerousTFT", "--rounds", "6", "--json").stdout)
    assert data["pruning_bound"] > 0 and abs(data["adversarial_gap"] - exact["adversarial_gap"]) <= data["pruning_bound"]
    assert data["states"] < exact["states"] and data["best_response"]
    bad = _run("exploit", "--game", "ipd", "--agent", "bot:TFT", "--memory", "2", "--threshold", "0.01")
    assert bad.exit_code == 2 and "needs the full history tree" in bad.stderr
