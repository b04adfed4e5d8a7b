"""Split bargaining through the command line: exact values, JSON, one-line errors (exit code 2)."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--max-demand", "12"),
            "negotiation: the demand range 1..12 does not fit the pie of 10 (max_demand > pie)",
        ),
        (("--min-demand", "6"), "never allows a deal over a pie of 10"),
        (("--min-demand", "7", "--max-demand", "3"), "is empty (max_demand < min_demand)"),
        (("--pie", "0"), "negotiation: pie must be a whole number >= 1, got 0"),
        (("--rounds", "0"), "negotiation: rounds must be a whole number >= 1, got 0"),
        (("--breakdown-cost", "-2"), "breakdown_cost must be a finite number >= 0"),
        (("--breakdown-cost", "lots"), "--breakdown-cost 'lots'"),
        (("--pie", "ten"), "--pie 'ten'"),
        (
            ("--memory", "-1"),
            "memory (rounds an information state remembers, or 'full') must be a whole number >= 0",
        ),
        (("--paper-version", "code"), "--paper-version applies to --protocol paper only"),
        (
            ("--protocol", "paper", "--paper-version", "final"),
            "unknown paper version 'final'; use one of: writeup, code",
        ),
        (("--payoffs", "R=3,S=0,T=5,P=1"), "--payoffs does not apply to game 'negotiation'"),
    ],
)
@pytest.mark.parametrize("command", ["eval", "exploit"])
def test_bad_input_is_one_line_exit_2(command, args, message):
    result = _run(
        command,
        "--game",
        "negotiation",
        "--agent",
        "bot:Fair",
        *args,
        *(("--episodes", "2") if command == "eval" else ()),
    )
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_bot_is_one_line():
    result = _run("exploit", "--game", "negotiation", "--agent", "bot:Fiar")
    assert result.exit_code == 2 and "did you mean Fair" in result.stderr


def test_exploit_json():
    result = _run("exploit", "--game", "negotiation", "--agent", "bot:Concede", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (
        data["adversarial_gap"] == 0.0 and data["br_payoff"] == pytest.approx(4.0) and data["exact"] is True
    )
    # Concede reads the last round: its DP runs over (round, last joint demand) nodes it reaches (it demands
    # 6, or 5 after a breakdown, against any of 9 demands)
    assert data["information_states"] == 1 + 9 + 18 + 18 and "declared state" in data["method"]
    assert set(data["best_response"][0]) == {"round", "agent_state", "action"}
    table = json.loads(
        _run("exploit", "--game", "negotiation", "--agent", "bot:Concede", "--memory", "1", "--json").stdout
    )
    assert table["information_states"] == 82 and "last 1 rounds" in table["method"] and table["exact"] is True
    assert table["adversarial_gap"] == data["adversarial_gap"] and table["br_payoff"] == data["br_payoff"]
    uniform = json.loads(
        _run(
            "exploit",
            "--game",
            "negotiation",
            "--agent",
            "uniform",
            "--rounds",
            "2",
            "--memory",
            "full",
            "--breakdown-cost",
            "1",
            "--json",
        ).stdout
    )
    assert uniform["adversarial_gap"] > 0 and "declared state" in uniform["method"]


def test_eval_reports_bargaining_metrics():
    result = _run("eval", "--game", "negotiation", "--agent", "bot:Concede", "--episodes", "3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in (
        "negotiation/deal_rate",
        "negotiation/nash_product",
        "negotiation/pareto_efficiency",
        "negotiation/welfare_share",
    ):
        assert 0 <= data[key] <= 1, key
    assert data["adversarial_gap"] == 0.0 and data["exploit_pool"] == 0.0
