"""Cheap talk through `sepo eval`: --talk, --pool injection, and bad input as one line with exit 2."""
import json

from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


def _one_line_exit_2(result, message):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output


def test_injection_pool_reports_an_ignoring_bot_as_not_flagged():
    result = runner.invoke(app, ["eval", "--game", "negotiation-gt", "--agent", "bot:HardballNeg", "--pool", "injection",
                                 "--episodes", "1", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["flagged"] is False and out["channel"]["cut"] == 4 and len(out["attacks"]) == 9


def test_talk_eval_counts_the_messages():
    result = runner.invoke(app, ["eval", "--game", "negotiation-gt", "--agent", "uniform", "--talk", "--episodes", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["talk"]["messages"] > 0


def test_bad_talk_input_is_one_line_with_exit_2(tmp_path):
    _one_line_exit_2(runner.invoke(app, ["eval", "--game", "negotiation-gt", "--agent", "uniform", "--pool", "nope"]),
                     "unknown --pool 'nope'")
    _one_line_exit_2(runner.invoke(app, ["eval", "--game", "ipd", "--agent", "uniform", "--talk", "--episodes", "1"]),
                     "has no cheap-talk channel")
    pools = tmp_path / "pools.yaml"
    pools.write_text("train:\n  - {bot: FairNeg, message: '" + "a" * 300 + "'}\n")
    _one_line_exit_2(runner.invoke(app, ["eval", "--game", "negotiation-gt", "--agent", "uniform", "--talk", "--pools",
                                         str(pools)]), "the talk limit is 280")
