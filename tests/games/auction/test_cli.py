"""The auction through the CLI: bad input is one line with exit code 2; exploit prints the exact values."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("args, message", [
    (["--rounds", "0"], "--rounds must be a positive integer"),
    (["--rounds", "-2"], "--rounds must be a positive integer"),
    (["--bidders", "0"], "--bidders must be an integer >= 2"),
    (["--bidders", "1"], "--bidders must be an integer >= 2"),
    (["--bids", "1,3,2"], "--bids must be strictly increasing"),
    (["--bids", "2,2,3"], "--bids must be strictly increasing"),
])
@pytest.mark.parametrize("command", ["eval", "exploit"])
def test_bad_auction_parameters_exit_2_with_one_line(command, args, message):
    result = runner.invoke(app, [command, "--game", "auction", "--agent", "uniform", *args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0]


def test_exploit_json_has_the_gap_and_the_opponent_table():
    result = runner.invoke(
        app, ["exploit", "--game", "auction", "--agent", "bot:ConservativeBid", "--memory", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["adversarial_gap"] == pytest.approx(1.0) and out["br_payoff"] == pytest.approx(1.25)
    assert out["exact"] and out["pruning_bound"] == 0
    # at value 2 the gap-maximiser bids 2 (gap 0, not a losing tie)
    assert out["best_response"]["rounds"][0]["start"] == [2.0, 2.0]


def test_a_run_is_audited_at_its_own_rounds(tmp_path):
    out = tmp_path / "tauc"
    assert runner.invoke(app, ["train", "--game", "auction", "--rounds", "4", "--steps", "2", "--groups", "4",
                               "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["exploit", "--game", "auction", "--agent", f"run:{out}", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["exact"] is True
    refused = runner.invoke(app, ["exploit", "--game", "auction", "--agent", f"run:{out}", "--rounds", "6"])
    assert refused.exit_code == 2
    assert refused.output.strip() == f"error: run:{out} was trained with --rounds 4; got --rounds 6"
