"""`sepo analyze institution` on the pricing market: trained agents per setting, exact measures, a
finished search read back, bad parameters one line."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()
ARGS = [
    "analyze",
    "institution",
    "--game",
    "pricing",
    "--vary",
    "fine=0,0.2",
    "--set",
    "sanction_threshold=1.6",
    "--set",
    "rounds=2",
    "--set",
    "prices=5",
    "--steps",
    "2",
    "--groups",
    "4",
    "--seeds",
    "2",
]


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
    result = runner.invoke(
        app,
        ["analyze", "institution", "--game", "pricing", "--vary", "bogus=1", "--out", str(tmp_path / "s")],
    )
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


def _cells(out) -> int:
    return len([p for p in (out / "cells").iterdir() if p.is_dir()])


def test_a_setting_that_changes_nothing_is_trained_once_and_marked(tmp_path):
    """fine 0 with leniency 0.5 is fine 0 without it: trained once, not reported as two settings."""
    args = [*ARGS[:4], "--vary", "fine=0,0.2", "--vary", "leniency=0,0.5", *ARGS[6:]]
    result = runner.invoke(app, [*args, "--seeds", "1", "--out", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = report["settings"]
    assert rows[1]["setting"] == {"fine": 0.0, "leniency": 0.5} and rows[1]["same_as"] == 0
    assert rows[1]["per_seed"] == rows[0]["per_seed"] and "same_as" not in rows[3]
    assert any("trained once" in note for note in report["notes"])
    assert _cells(tmp_path / "s") == 3


def test_settings_that_sanction_the_same_prices_are_trained_once(tmp_path):
    """Thresholds 1.6 and 1.65 both sanction the grid's 1.70 and above (grid 1.43 1.56 1.70 1.83 1.97):
    one game; 1.75 spares 1.70, another."""
    args = [*ARGS[:4], "--vary", "sanction_threshold=1.6,1.65,1.75", "--set", "fine=0.2", *ARGS[8:]]
    result = runner.invoke(app, [*args, "--seeds", "1", "--out", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["settings"]
    assert rows[1]["same_as"] == 0 and rows[1]["per_seed"] == rows[0]["per_seed"] and "same_as" not in rows[2]
    assert _cells(tmp_path / "s") == 2


@pytest.mark.parametrize("vary, words", [
    # no threshold: every fine is no sanction
    (["--vary", "fine=0,0.1"], ["same game", "--sanction-threshold"]),
    (["--vary", "fine=0.1", "--vary", "fine=0.2"], ["--vary fine is given twice"]),
    (["--vary", "fine=0,0", "--set", "sanction_threshold=1.6"], ["lists 0.0 twice"]),
    # no fine: no threshold sanctions anything
    (["--vary", "sanction_threshold=1.6,1.7"], ["same game", "does nothing at --fine 0", "give --fine"]),
    # no grid price (highest 1.97) is above either cap
    (["--vary", "cap=50,99"], ["same game", "--cap 99 caps nothing", "highest price is 1.97"]),
    # both thresholds sanction the same prices (1.70 and above)
    (["--vary", "sanction_threshold=1.6,1.65", "--set", "fine=0.2"], ["same game", "no action and no"]),
])
def test_a_search_with_nothing_to_choose_is_refused_before_its_folder(tmp_path, vary, words):
    result = runner.invoke(
        app,
        [
            "analyze",
            "institution",
            "--game",
            "pricing",
            *vary,
            "--set",
            "rounds=2",
            "--set",
            "prices=5",
            "--steps",
            "2",
            "--groups",
            "4",
            "--out",
            str(tmp_path / "s"),
        ],
    )
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert all(word in result.stderr for word in words), result.stderr
    assert not (tmp_path / "s").exists()


def test_overwrite_replaces_a_search_as_the_refusal_says(tmp_path):
    out = str(tmp_path / "s")
    assert runner.invoke(app, [*ARGS, "--seeds", "1", "--out", out]).exit_code == 0
    other = [a if a != "fine=0,0.2" else "fine=0,0.3" for a in ARGS]
    refused = runner.invoke(app, [*other, "--seeds", "1", "--out", out])
    assert refused.exit_code == 2 and "--overwrite" in refused.stderr
    replaced = runner.invoke(app, [*other, "--seeds", "1", "--out", out, "--overwrite", "--json"])
    assert replaced.exit_code == 0, replaced.output
    assert [row["setting"] for row in json.loads(replaced.stdout)["settings"]] == [
        {"fine": 0.0},
        {"fine": 0.3},
    ]


def test_a_varied_setting_that_changes_nothing_says_so_beside_its_row(tmp_path):
    """A cap above every grid price caps nothing: the search trains that setting as the game
    without a cap, and its report says so rather than labelling the row as a cap."""
    args = [*ARGS[:4], "--vary", "cap=99,1.5", *ARGS[8:]]
    result = runner.invoke(app, [*args, "--seeds", "1", "--out", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["notes"]
    assert any(note.startswith("cap=99.0: cap=99.0 changes nothing in this game") for note in notes), notes
