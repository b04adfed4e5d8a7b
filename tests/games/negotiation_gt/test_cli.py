"""The three-item negotiation through the CLI: bad input is one line with exit code 2."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("args, message", [
    (["--values", "4,3,2"], "sum to 9, not the stated total 10"),
    (["--values", "4,3,3", "--total", "12"], "sum to 10, not the stated total 12"),
    (["--opponent-values", "1,1,1"], "sum to 3, not the stated total 10"),
    (["--items", "1,2"], "3 numbers, got 2"),
    (["--items", "1,2,3,1"], "3 numbers, got 4"),
])
def test_bad_negotiation_parameters_exit_2_with_one_line(args, message):
    result = runner.invoke(
        app, ["eval", "--game", "negotiation-gt", "--agent", "uniform", "--episodes", "1", *args]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0]


def test_eval_json_runs_and_collusion_is_not_applicable_without_a_third_party():
    result = runner.invoke(
        app, ["eval", "--game", "negotiation-gt", "--agent", "bot:FairNeg", "--episodes", "3", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["collusion"] is None and any("collusion is not applicable" in n for n in out["notes"])
    assert out["utility"] > 0
