"""`sepo analyze`: every command runs on the shipped examples, prints JSON with --json, and
turns bad input into one line on stderr with exit status 2."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, ["analyze", *map(str, args)])


def _json(*args):
    result = _run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", ["game", "regret", "dynamics", "collusion", "markov", "population"])
def test_every_command_has_help(command):
    result = _run(command, "--help")
    assert result.exit_code == 0 and "Usage" in result.output


def test_game_json(examples):
    data = _json("game", examples / "chicken.yaml")
    assert len(data["nash"]["equilibria"]) == 3 and not data["nash"]["degenerate"]
    best = next(c for c in data["correlated"] if c["kind"] == "ce" and c["objective"] == "max-welfare")
    assert best["objective_value"] == pytest.approx(10.5) and best["max_violation"] <= 1e-9
    audited = _json("game", examples / "drafter_checker.yaml")["profile"]
    assert audited["nash_conv"] == pytest.approx(0.22) and audited["is_nash"] is False
    assert audited["best_responses"]["drafter"] == ["careful"]
    assert _json("game", examples / "rock_paper_scissors.yaml")["zero_sum"]["value"] == pytest.approx(
        0.0, abs=1e-12
    )


def test_game_text_report(examples):
    result = _run("game", examples / "three_reviewers.yaml")
    assert result.exit_code == 0 and "skim/skim/skim" in result.output


def test_regret_json_router(examples):
    data = _json("regret", examples / "router_history.csv")
    (router,) = data["players"]
    assert router["external_regret"] == 0 and router["swap_regret"] == 1 and router["swap_map"] == {"G": "S"}
    text = _run("regret", examples / "router_history.csv").output
    assert "G→S" in text


def test_dynamics_json_and_plot(examples, tmp_path):
    plot = tmp_path / "rps.png"
    data = _json("dynamics", examples / "rock_paper_scissors.yaml", "--rule", "replicator", "--plot", plot)
    assert data["cycle"]["detected"] and plot.read_bytes()[:4] == b"\x89PNG"
    fp = _json("dynamics", examples / "matching_pennies.yaml", "--rule", "fictitious")
    assert abs(fp["final_average_strategies"]["matcher"]["heads"] - 0.5) <= 0.01
    swap = _json(
        "dynamics", examples / "chicken.yaml", "--rule", "regret-matching", "--swap", "--iterations", "2000"
    )
    assert swap["swap"] and swap["ce_gap"] <= 0.01


def test_collusion_json(examples):
    naive = _json("collusion", examples / "publication_naive.yaml", "--seeds", "3")
    repaired = _json("collusion", examples / "publication_repaired.yaml", "--seeds", "3")
    assert naive["target_frequency"]["min"] >= 0.9 and naive["coalition"]["gain"] == pytest.approx(0.8)
    assert repaired["target_frequency"]["min"] >= 0.9 and repaired["coalition"]["gain"] == pytest.approx(
        -0.94875
    )


def test_markov_json(examples):
    data = _json("markov", examples / "markov_chapter.yaml")
    assert data["players"]["worker"]["value"] == pytest.approx(4.5)


def test_population_json(examples):
    data = _json("population", "--game", "kuhn", "--agents", "nash", "uniform", "bot:AlwaysBet")
    assert data["agents"] == ["nash", "uniform", "bot:AlwaysBet"]
    assert data["agents_report"]["nash"]["exploitability_in_population"] == pytest.approx(0.0, abs=1e-12)
    matrix = _json("population", "--matrix", examples / "population_matrix.yaml")
    assert matrix["diversity"]["effective_strategies"] == pytest.approx(3.0, abs=1e-4)
    assert "MONOCULTURE" not in _run("population", "--matrix", examples / "population_matrix.yaml").output


def _bad(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (("game", "SHAPE"), "payoffs[1]: has 3 entries; expected 2 (one per action of b)"),
        (("game", "NONNUM"), "payoffs[0][1][1]: expected a number, got text 'four'"),
        (("game", "PROB"), "profile.a: probabilities sum to 0.9; they must sum to 1"),
        (("game", "UNKNOWN"), "profile.a.z: unknown action 'z'; known: x, y"),
        (("game", "MISSING"), "missing.yaml: file: no such file"),
        (("regret", "HISTORY"), "row 3 column action: unknown action 'X'; known: G, S"),
        (("dynamics", "EXAMPLE", "--rule", "gradient"), "--rule: gradient: unknown rule"),
        (("dynamics", "EXAMPLE", "--rule", "fictitious", "--swap"), "--swap: fictitious"),
        (("collusion", "RULES"), "rewards.drafter[0].when.drafter: unknown action 'lie'"),
        (
            ("population", "--game", "kuhn", "--agents", "nash", "bot:Nope"),
            "--agents: bot:Nope: unknown bot 'Nope'",
        ),
        (("population",), "--agents: agents: missing"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_field(tmp_path, examples, args, message):
    files = {
        "SHAPE": _bad(
            tmp_path,
            "shape.yaml",
            "actions: {a: [x, y], b: [u, v]}\npayoffs:\n  - [[1, 2], [3, 4]]\n  - [[1, 2], [3, 4], [5, 6]]\n",
        ),
        "NONNUM": _bad(
            tmp_path,
            "nonnum.yaml",
            "actions: {a: [x, y], b: [u, v]}\npayoffs:\n  - [[1, 2], [3, four]]\n  - [[1, 2], [3, 4]]\n",
        ),
        "PROB": _bad(
            tmp_path,
            "prob.yaml",
            "actions: {a: [x, y], b: [u, v]}\npayoffs: {a: [[1, 2], [3, 4]], b: [[1, 2], [3, 4]]}\nprofile: "
            "{a: {x: 0.5, y: 0.4}, b: [0.5, 0.5]}\n",
        ),
        "UNKNOWN": _bad(
            tmp_path,
            "unknown.yaml",
            "actions: {a: [x, y], b: [u, v]}\npayoffs: {a: [[1, 2], [3, 4]], b: [[1, 2], [3, 4]]}\nprofile: "
            "{a: {x: 0.5, z: 0.5}, b: [0.5, 0.5]}\n",
        ),
        "MISSING": tmp_path / "missing.yaml",
        "HISTORY": _bad(tmp_path, "h.csv", "action,payoff_if_G,payoff_if_S\nG,0,1\nX,1,0\n"),
        "EXAMPLE": examples / "chicken.yaml",
        "RULES": _bad(
            tmp_path,
            "rules.yaml",
            (examples / "publication_naive.yaml").read_text().replace("{drafter: honest}", "{drafter: lie}"),
        ),
    }
    result = _run(*[files.get(a, a) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    path = files.get(args[1]) if len(args) > 1 else None
    if path is not None and args[0] in ("game", "regret", "collusion"):
        assert str(path) in result.stderr


def test_population_json_keeps_stdout_for_the_object_and_progress_goes_to_stderr(monkeypatch):
    """As `sepo eval/exploit --json`: `analyze population --json` (and `institution --json`)
    switched their progress off; it now goes to stderr, stdout holding the JSON object alone."""
    import sepo.analysis.population as population
    from sepo import progress

    real = population.build_meta_game

    def reporting(*args, progress=None, **kwargs):  # exact payoffs need no play, so say one pair was played
        progress(1, 1)
        return real(*args, progress=progress, **kwargs)

    monkeypatch.setattr(population, "build_meta_game", reporting)
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)
    result = _run("population", "--game", "kuhn", "--agents", "nash", "uniform", "--episodes", "2", "--json")
    assert result.exit_code == 0, result.output
    assert "playing pairs of agents" in result.stderr and json.loads(result.stdout)["agents"]


def test_population_takes_the_games_parameters_like_every_command():
    """`--rounds` reached every command but this one; it changes the sampled payoffs."""
    agents = ("--game", "ipd", "--agents", "bot:TFT", "bot:AlwaysDefect", "--episodes", "2")
    two = _json("population", *agents, "--rounds", "2")["payoffs"]["bot:TFT"]["bot:AlwaysDefect"]
    four = _json("population", *agents, "--rounds", "4")["payoffs"]["bot:TFT"]["bot:AlwaysDefect"]
    assert two == pytest.approx(0.5) and four == pytest.approx(0.75)
    refused = _run("population", "--game", "kuhn", "--rounds", "2", "--agents", "nash", "uniform")
    assert refused.exit_code == 2 and "--rounds does not apply to game 'kuhn'" in refused.stderr


def test_population_help_gives_the_episodes_it_accepts():
    result = runner.invoke(app, ["analyze", "population", "--help"], env={"COLUMNS": "200"})
    assert "[x>=2]" in result.stdout and "[x>=1]" not in result.stdout.split("--episodes")[1].split("\n")[0]
    assert _run("population", "--agents", "nash", "uniform", "--episodes", "1").exit_code == 2
