"""OpenSpiel games sepo cannot play, files it must not hang on or quote, and one name per game."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("pyspiel")

from sepo.errors import SepoError  # noqa: E402
from sepo.games import get_domain  # noqa: E402
from tests.cli.cli_helpers import _error, _run  # noqa: E402


@pytest.mark.parametrize("name, words", [
    ("openspiel:nfg_game", ["Gambit normal-form (.nfg) file", "nfg_game(filename=PATH)"]),
    ("openspiel:efg_game", ["Gambit extensive-form (.efg) file", "efg_game(filename=PATH)"]),
    ("openspiel:mfg_crowd_modelling", ["mean-field game"]),
    ("openspiel:blackjack", ["one-player game"]),
    ("openspiel:tarok", ["SAMPLED_STOCHASTIC", "seeds do not control"]),
    ("openspiel:clobber(rows=100,columns=100)", ["OpenSpiel refuses it", "rows_ <= 99"]),
    ("openspiel:misere(game=kuhn_poker)", ["must be a game, written with parentheses", "game=kuhn_poker()"]),
    ("openspiel:misere(game=nfg_game())", ["nfg_game(filename=PATH)"]),
    ("openspiel:bargaining(discount=1)", ["discount=1 must be a number with a decimal point"]),
])
def test_games_sepo_cannot_play_are_refused_by_type_in_one_line(name, words):
    """Each was a traceback (IndexError, SpielError, numpy's `high <= 0`) from exploit, eval or plan."""
    _error(_run("exploit", "--game", name, "--agent", "uniform"), *words)
    _error(_run("eval", "--game", name, "--agent", "uniform", "--episodes", "2"), *words)


def _refusal_within(name: str, seconds: float) -> str:
    """The one-line refusal of `get_domain(name)`, from a separate process that must answer within
    `seconds` (pyspiel's open of a FIFO blocks forever, holding the interpreter)."""
    import subprocess
    import sys

    code = ("import sys\nfrom sepo.errors import SepoError\nfrom sepo.games import get_domain\n"
            "try:\n    get_domain(sys.argv[1])\nexcept SepoError as error:\n    print(error)\n")
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, name],
            capture_output=True,
            text=True,
            timeout=seconds,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: no answer within {seconds} s")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    return lines[0]


@pytest.mark.parametrize("wrap", ["efg_game(filename={})", "misere(game=efg_game(filename={}))"])
def test_a_rules_file_that_is_a_pipe_is_refused_without_reading_it(tmp_path, wrap):
    fifo = tmp_path / "rules.efg"
    os.mkfifo(fifo)
    message = _refusal_within("openspiel:" + wrap.format(fifo), 20)
    assert "not a regular file" in message


def test_a_rules_file_that_is_not_a_game_is_refused_without_quoting_it(tmp_path):
    secret = tmp_path / "notes.txt"
    secret.write_text("daemon:zq7:1:1\nadmin:zq8-PASSWORD:0:0\n")
    message = _refusal_within(f"openspiel:efg_game(filename={secret})", 20)
    assert "zq7" not in message and "zq8" not in message and "daemon" not in message
    assert "cannot read" in message and "stopped at line" in message
    for path, words in ((tmp_path, "is a directory"), (tmp_path / "missing.efg", "No such file"),
                        ("/dev/zero", "not a regular file")):
        assert words in _refusal_within(f"openspiel:efg_game(filename={path})", 20)


def test_a_game_has_one_name_however_it_is_spelled():
    assert get_domain("openspiel:leduc_poker(players=2)").name == "openspiel:leduc_poker"
    assert get_domain("openspiel:leduc_poker(players=+2)").name == "openspiel:leduc_poker"
    assert (get_domain("openspiel:goofspiel(num_cards=4,imp_info=true)").name
            == get_domain("openspiel:goofspiel(imp_info=True,num_cards=4,players=2)").name
            == "openspiel:goofspiel(imp_info=True,num_cards=4)")
    assert (
        get_domain("openspiel:misere(game=kuhn_poker(players=2))").name
        == "openspiel:misere(game=kuhn_poker())"
    )
    assert get_domain("openspiel:kuhn_poker(players=3)").name == "openspiel:kuhn_poker(players=3)"


def test_an_experiment_lists_a_game_once_however_it_is_spelled():
    import yaml

    from sepo.experiments.config import validate_config
    from tests.experiments.conftest import tiny_config

    data = yaml.safe_load(tiny_config("openspiel:kuhn_poker"))
    data["domains"][0]["sft_mixture"] = "cfr"
    data["domains"].append({**data["domains"][0], "name": "openspiel:kuhn_poker()"})
    with pytest.raises(SepoError, match="openspiel:kuhn_poker is listed twice"):
        validate_config(data, "c.yaml")
    data["domains"] = data["domains"][:1]
    data["domains"][0]["name"] = "openspiel:kuhn_poker(players=2)"
    assert validate_config(data, "c.yaml").domains[0].name == "openspiel:kuhn_poker"


def test_a_run_is_audited_under_any_spelling_of_its_game(tmp_path):
    """A run records its game under the one name; `run:` under `kuhn_poker(players=2)` or
    `kuhn_poker()` is the same game (it was refused as another)."""
    import json

    from sepo.games import load_game
    from sepo.metrics.exact import solver_for, uniform_table
    from sepo.policies.tabular import TabularPolicy

    solver = solver_for(load_game("openspiel:kuhn_poker"))
    out = tmp_path / "run"
    out.mkdir()
    TabularPolicy(uniform_table(solver.decisions()), solver.keys).save(out / "policy.json")
    (out / "config.json").write_text(json.dumps({"game": "openspiel:kuhn_poker"}))
    for spelling in ("openspiel:kuhn_poker(players=2)", "openspiel:kuhn_poker()"):
        result = _run("exploit", "--game", spelling, "--agent", f"run:{out}", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["game"] == "openspiel:kuhn_poker"


def test_an_experiment_plan_names_why_a_game_cannot_be_played(tmp_path):
    import yaml

    from tests.experiments.conftest import tiny_config

    data = yaml.safe_load(tiny_config("openspiel:nfg_game"))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(data))
    _error(_run("experiment", "plan", config), "domains[0].name", "nfg_game(filename=PATH)")
