"""`sepo analyze institution` on the pricing market: trained agents per setting, exact measures, a
finished search read back, bad parameters one line."""
import json

from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()
ARGS = ["analyze", "institution", "--game", "pricing", "--vary", "fine=0,0.2", "--set", "sanction_threshold=1.6",
        "--set", "rounds=2", "--set", "prices=5", "--steps", "2", "--groups", "4", "--seeds", "2"]


def test_search_trains_per_setting_and_reads_back(tmp_path):
    first = runner.invoke(app, [*ARGS, "--out", str(tmp_path / "s"), "--json"])
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert [row["setting"] for row in report["settings"]] == [{"fine": 0.0}, {"fine": 0.2}]
    assert report["measured"] == "exact" and len(report["settings"][0]["per_seed"]) == 2
    assert report["chosen"] in [row["setting"] for row in report["settings"]]
    again = runner.invoke(app, [*ARGS, "--out", str(tmp_path / "s"), "--json"])
    assert json.loads(again.stdout) == report


def test_unknown_parameter_is_one_line(tmp_path):
    result = runner.invoke(app, ["analyze", "institution", "--game", "pricing", "--vary", "bogus=1", "--out", str(tmp_path / "s")])
    assert result.exit_code == 2 and "--bogus does not apply to game 'pricing'" in result.stderr


def test_one_seed_has_no_interval(tmp_path):
    """One seed has no spread: n/a in the table and null in JSON, never a zero-width interval."""
    args = [arg if arg != "2" or prev != "--seeds" else "1" for prev, arg in zip(["", *ARGS], ARGS)]
    table = runner.invoke(app, [*args, "--out", str(tmp_path / "s")])
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())  # the table wraps its title
    assert "t-intervals" not in text and text.count(" (n/a)") == 6 and "one seed: no interval" in text
    report = json.loads(runner.invoke(app, [*args, "--out", str(tmp_path / "s"), "--json"]).stdout)
    assert all(row["collusion"]["ci"] is None for row in report["settings"])
