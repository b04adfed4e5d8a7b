"""The IPD through the command line: exact values, JSON, and one-line errors (exit code 2) for bad input."""
import json

import numpy as np
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
    # one row per (round, GrimTrigger's state: triggered or not), shown by one history
    rows = data["best_response"]
    assert len(rows) == 1 + 7 * 2 and set(rows[0]) == {"round", "action", "agent_state"}


def test_eval_with_rounds_payoffs_and_memory():
    result = _run(
        "exploit",
        "--game",
        "ipd",
        "--agent",
        "bot:TFT",
        "--rounds",
        "12",
        "--payoffs",
        "R=4,S=0,T=6,P=1",
        "--memory",
        "1",
        "--json",
    )
    data = json.loads(result.stdout)
    assert data["adversarial_gap"] == pytest.approx(6 / 12)  # one temptation, then mutual defection
    assert "last 1 rounds" in data["method"]


def test_exploit_with_pruning_prints_the_bound(tmp_path):
    # a whole-history table declares no small state, so it is read on the tree and pruned there
    from sepo.games import load_game

    keys = load_game("ipd", rounds=6).info_keys()
    rng = np.random.default_rng(0)
    path = tmp_path / "policy.json"
    path.write_text(
        json.dumps({key: list(p) for key, p in zip(keys, rng.dirichlet([0.5, 0.5], size=len(keys)).tolist())})
    )
    result = _run(
        "exploit",
        "--game",
        "ipd",
        "--agent",
        f"tabular:{path}",
        "--rounds",
        "6",
        "--threshold",
        "0.01",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    exact = json.loads(
        _run("exploit", "--game", "ipd", "--agent", f"tabular:{path}", "--rounds", "6", "--json").stdout
    )
    assert (
        data["pruning_bound"] > 0
        and abs(data["adversarial_gap"] - exact["adversarial_gap"]) <= data["pruning_bound"]
    )
    assert data["states"] < exact["states"] and data["best_response"] and exact["exact"] and not data["exact"]
    # a bot with a small declared state needs no pruning: its DP is exact
    bot = json.loads(
        _run(
            "exploit",
            "--game",
            "ipd",
            "--agent",
            "bot:GenerousTFT",
            "--rounds",
            "6",
            "--threshold",
            "0.01",
            "--json",
        ).stdout
    )
    assert bot["exact"] and bot["pruning_bound"] == 0.0 and "not needed" in bot["method"]
    bad = _run("exploit", "--game", "ipd", "--agent", "bot:TFT", "--memory", "2", "--threshold", "0.01")
    assert bad.exit_code == 2 and "needs the full history tree" in bad.stderr


def test_exploit_is_exact_only_for_an_agent_within_the_memory():
    projected = json.loads(
        _run("exploit", "--game", "ipd", "--memory", "1", "--agent", "bot:AlternatingDefect", "--json").stdout
    )
    assert projected["adversarial_gap"] == pytest.approx(4.375) and projected["exact"] is False
    assert (
        projected["projection_memory"] == 1 and "neither an upper nor a lower bound" in projected["notes"][0]
    )
    printed = _run("exploit", "--game", "ipd", "--memory", "2", "--agent", "bot:AlternatingDefect")
    assert (
        printed.exit_code == 0
        and "memory-2 projection" in printed.stdout
        and "neither an upper nor a lower" in printed.stdout
    )
    truth = json.loads(_run("exploit", "--game", "ipd", "--agent", "bot:AlternatingDefect", "--json").stdout)
    assert truth["adversarial_gap"] == pytest.approx(2.5) and truth["exact"] is True
    tft = json.loads(_run("exploit", "--game", "ipd", "--memory", "1", "--agent", "bot:TFT", "--json").stdout)
    assert tft["exact"] is True and "projection_memory" not in tft


def test_long_matches_solve_and_an_oversized_tree_is_refused(tmp_path):
    result = _run("exploit", "--game", "ipd", "--agent", "bot:AlwaysCooperate", "--rounds", "12", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["adversarial_gap"] == pytest.approx(5.0)
    refused = _run(
        "exploit", "--game", "ipd", "--agent", f"tabular:{tmp_path / 'whole.json'}", "--rounds", "30"
    )
    assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "--memory M" in refused.stderr and "--threshold P" in refused.stderr


def test_a_run_is_audited_at_its_own_rounds_and_memory(tmp_path):
    out = tmp_path / "tipd"
    assert _run("train", "--game", "ipd", "--memory", "2", "--rounds", "4", "--steps", "2", "--groups", "4",
                "--out", str(out)).exit_code == 0
    values = []
    for extra in ([], ["--rounds", "4"], ["--memory", "2"]):
        result = _run("exploit", "--game", "ipd", "--agent", f"run:{out}", "--json", *extra)
        assert result.exit_code == 0, result.output
        found = json.loads(result.stdout)
        assert found["exact"] is True
        values.append(found["value"])
    assert values[0] == values[1] == values[2]
    for command in ("exploit", "eval"):
        refused = _run(command, "--game", "ipd", "--agent", f"run:{out}", "--rounds", "6")
        assert refused.exit_code == 2
        assert refused.output.strip() == f"error: run:{out} was trained with --rounds 4; got --rounds 6"
    # a smaller --memory asks sepo exploit for the run's projection, labelled as for a bot
    projected = _run("exploit", "--game", "ipd", "--agent", f"run:{out}", "--memory", "1", "--json")
    assert projected.exit_code == 0, projected.output
    found = json.loads(projected.stdout)
    assert (
        found["exact"] is False and found["exact_label"] == "projection" and found["projection_memory"] == 1
    )
    assert any("neither an upper nor a lower bound" in note for note in found["notes"])
    # a larger memory, or a game played at another memory
    for command, memory in (("exploit", "3"), ("eval", "1")):
        refused = _run(command, "--game", "ipd", "--agent", f"run:{out}", "--memory", memory)
        assert (
            refused.output.strip() == f"error: run:{out} was trained with --memory 2; got --memory {memory}"
        )
    table = _run(
        "exploit", "--game", "ipd", "--agent", f"tabular:{out / 'policy.json'}", "--rounds", "4", "--json"
    )
    assert table.exit_code == 0, table.output
    assert json.loads(table.stdout)["exact"] is True
    assert json.loads(table.stdout)["value"] == values[0]
