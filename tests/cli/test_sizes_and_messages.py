"""Sizes and messages: a command too large for the machine is refused in one line naming the options
that would make it fit, before it allocates anything; odd inputs are one line; settings that would
do nothing are refused or warned about; messages say what is true."""
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.cli_helpers import _error, _run

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--steps", "3", "--groups", "2", "--quiet"]
MEMORY_CAP = 3 << 30
"""Address space of the subprocesses that reproduce memory blow-ups: on code without the size
checks they fail with MemoryError instead of taking the machine."""


def _capped(*args, timeout=120, **popen):
    """`sepo ARGS` in a subprocess limited to MEMORY_CAP bytes of address space."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "200",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "sepo.cli.main", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP)),
        **popen,
    )


@pytest.fixture(scope="module")
def auction_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "auction"
    assert _run("train", "--game", "auction", "--out", out, *TINY).exit_code == 0
    return out


# ------------------------------------------------------------------------------------- sizes

@pytest.mark.parametrize(
    "args, words",
    [
        (
            [
                "exploit",
                "--game",
                "negotiation",
                "--agent",
                "bot:Concede",
                "--pie",
                "10000",
                "--max-demand",
                "10000",
            ],
            ["joint demands", "--max-demand"],
        ),
        (
            ["eval", "--game", "ipd", "--agent", "bot:TFT", "--rounds", "10000"],
            ["episode records", "--rounds"],
        ),
        (
            [
                "train",
                "--game",
                "negotiation",
                "--pie",
                "10000",
                "--max-demand",
                "10000",
                "--out",
                "OUT",
                *TINY,
            ],
            ["joint demands"],
        ),
        (["eval", "--agent", "nash", "--episodes", "99999999999"], ["episode records", "--episodes"]),
        (["eval", "--agent", "nash", "--hands", "100000000", "--episodes", "1"], ["--hands"]),
        (["data", "sft", "--out", "OUT", "--episodes", "99999999999"], ["--episodes"]),
        (
            [
                "eval",
                "--game",
                "negotiation",
                "--agent",
                "uniform",
                "--pool",
                "injection",
                "--episodes",
                "99999999999",
            ],
            ["--episodes"],
        ),
        (
            ["train", "--game", "kuhn", "--out", "OUT", "--steps", "3", "--groups", "100000000"],
            ["rollouts", "--groups"],
        ),
        (
            ["train", "--game", "kuhn", "--out", "OUT", "--steps", "3", "--group-size", "100000000"],
            ["rollouts", "--group-size"],
        ),
        (
            [
                "train",
                "--game",
                "openspiel:kuhn_poker",
                "--out",
                "OUT",
                "--steps",
                "3",
                "--groups",
                "100000000",
            ],
            ["rollouts", "--groups"],
        ),
        (["train", "--game", "pricing", "--rounds", "10000", "--out", "OUT", *TINY], ["tree", "--rounds"]),
        (
            [
                "train",
                "--game",
                "pricing",
                "--rounds",
                "10000",
                "--method",
                "advantage-alignment",
                "--out",
                "OUT",
                *TINY,
            ],
            ["tree", "--rounds"],
        ),
        (
            ["train", "--game", "ipd", "--rounds", "50", "--memory", "1", "--out", "OUT", *TINY],
            ["whole history", "--rounds"],
        ),
        (
            [
                "train",
                "--game",
                "kuhn",
                "--policy",
                "hf:no-model",
                "--out",
                "OUT",
                "--steps",
                "3",
                "--groups",
                "100000000",
            ],
            ["prompts", "--groups"],
        ),
        (
            [
                "analyze",
                "institution",
                "--game",
                "pricing",
                "--vary",
                "rounds=3,10000",
                "--steps",
                "2",
                "--groups",
                "2",
                "--out",
                "OUT",
            ],
            ["rounds=10000", "--rounds"],
        ),
    ],
    ids=lambda v: (
        " ".join(v)[:70]
        if isinstance(v, list) and v and v[0] in ("exploit", "eval", "train", "data", "analyze")
        else ""
    ),
)
def test_a_command_too_large_for_the_machine_is_refused_before_it_allocates(tmp_path, args, words):
    process = _capped(*[tmp_path / "out" if a == "OUT" else a for a in args])
    out, err = process.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert process.returncode == 2 and len(lines) == 1, err[-2000:]
    assert "spare" in err and all(w in err for w in words), err
    assert not (tmp_path / "out").exists()


def test_the_fitting_options_offered_do_fit():
    from sepo.errors import SepoError
    from sepo.games import load_game
    from sepo.limits import check_episodes

    budget = 1 << 30
    problem = load_game("negotiation", "rigorous", pie=10000, max_demand=10000).exact_size(budget)
    demands = int(problem.split("at most ")[-1].split()[0].replace(",", ""))
    assert load_game("negotiation", "rigorous", pie=10000, max_demand=demands).exact_size(budget) is None
    assert (
        load_game("negotiation", "rigorous", pie=10000, max_demand=demands + 1).exact_size(budget) is not None
    )
    assert load_game("negotiation", "rigorous").exact_size(budget) is None  # the paper's game always fits
    game = load_game("ipd", "rigorous", rounds=10000)
    with pytest.raises(SepoError) as refused:
        check_episodes(game, 1000, 8, "it")
    rounds = int(str(refused.value).split("--rounds ")[1].split()[0].replace(",", ""))
    check_episodes(load_game("ipd", "rigorous", rounds=rounds), 1000, 8, "it")


def test_a_price_grid_too_fine_is_refused_at_once():
    """The count that fits is found in closed form (the search rebuilt the grid for every smaller
    count: a quadratic wait of minutes for 100,000 prices, and a MemoryError for 10^9)."""
    for prices in ("100000", "1000000000"):
        started = time.process_time()
        _error(
            _run("exploit", "--game", "pricing", "--agent", "bot:Competitive", "--prices", prices),
            "--prices 55 or fewer",
        )
        assert time.process_time() - started < 5


def test_the_price_grids_refusal_names_the_largest_count_that_is_distinct():
    import numpy as np

    from sepo.errors import SepoError
    from sepo.games.pricing.market import Market

    market = Market((2.0, 2.0), (1.0, 1.0))
    low, high = float(market.nash_prices.min()), float(market.monopoly_prices.max())

    def distinct(n):
        spread = high - low
        return len(np.unique(np.round(np.linspace(low - 0.1 * spread, high + 0.1 * spread, n), 2))) == n

    for points in range(2, 90):
        largest = max(n for n in range(2, points + 1) if distinct(n))
        if largest == points:
            assert len(market.grid(points)) == points
        else:
            with pytest.raises(SepoError, match=f"--prices {largest} or fewer"):
                market.grid(points)


def test_an_audit_too_large_for_an_exact_value_plays_and_says_why():
    process = _capped(
        "eval",
        "--game",
        "negotiation",
        "--agent",
        "uniform",
        "--pie",
        "10000",
        "--max-demand",
        "10000",
        "--episodes",
        "1",
        "--json",
    )
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-2000:]
    notes = " ".join(json.loads(out)["notes"])
    assert "no exact value" in notes and "joint demands" in notes and "BestResponse skipped" in notes


def test_sigterm_stops_a_long_command_at_once_with_one_line(tmp_path):
    process = _capped("train", "--out", tmp_path / "long", "--steps", "1000000", "--groups", "2", "--quiet")
    checkpoint = tmp_path / "long" / "checkpoint.json"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the first checkpoint marks training under way
    assert checkpoint.exists() and process.poll() is None, process.communicate()
    process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    out, err = process.communicate(timeout=30)
    assert time.monotonic() - started < 10  # generous for a loaded machine; it is one bytecode boundary away
    assert process.returncode == 130 and err.strip() == "error: interrupted", err[-2000:]


def test_too_long_a_reply_or_too_large_a_learning_rate_is_one_line(tmp_path):
    from types import SimpleNamespace

    from sepo.errors import SepoError
    from sepo.policies.hf import check_reply_length

    with pytest.raises(SepoError, match="context of 2,048 tokens"):
        check_reply_length(
            1_000_000_000,
            SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048)),
            "model 'tiny'",
        )
    check_reply_length(
        48, SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048)), "model 'tiny'"
    )
    _error(
        _run("eval", "--agent", "openai:m@http://127.0.0.1:9/v1", "--max-new-tokens", "1000000000"),
        "max_new_tokens",
    )
    _error(_run("train", "--out", tmp_path / "r", "--lr", "1e308", *TINY), "--lr", "at most 1")
    _error(_run("sft", "--model", "m", "--data", tmp_path, "--out", tmp_path / "s", "--lr", "1e308"), "--lr")
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


# ------------------------------------------------------------------ one line, not a traceback

def test_a_run_of_another_game_is_one_line(auction_run):
    _error(_run("frontier", "--game", "kuhn", "--run", auction_run), "'auction'", "not 'kuhn'")
    result = _run("frontier", "--game", "kuhn", "--run", auction_run)
    assert "give --game auction" not in result.stderr  # it would fail next: 'auction' has no exact frontier
    assert "game 'auction' has no exact frontier, so give a kuhn run" in result.stderr
    _error(_run("eval", "--agent", f"run:{auction_run}", "--episodes", "1"), "'auction'")


@pytest.mark.parametrize(
    "name, text",
    [
        ("nested.yaml", "[" * 3000),
        ("nested_train.yaml", "train: " + "[" * 3000),
        ("nested.json", "[" * 3000),
        ("deep.yaml", "train: " + "[" * 150 + "]" * 150),
    ],
)
def test_a_deeply_nested_input_file_is_one_line(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    _error(
        _run("eval", "--agent", "nash", "--episodes", "1", "--pools", tmp_path / name),
        "nested more than 100 levels",
    )
    _error(_run("analyze", "game", tmp_path / name), "nested more than 100 levels")


# ------------------------------------------------------------------------------------- reasons

def test_more_than_two_bidders_says_why_there_is_no_best_response():
    result = _run(
        "eval", "--game", "auction", "--agent", "uniform", "--bidders", "3", "--episodes", "2", "--json"
    )
    assert result.exit_code == 0, result.output
    notes = " ".join(json.loads(result.stdout)["notes"])
    assert "more than 2 bidders" in notes and "exposes no action distribution" not in notes
    _error(
        _run("exploit", "--game", "auction", "--agent", "uniform", "--bidders", "3"), "more than 2 bidders"
    )


# -------------------------------------------------------------------------------------- wording

def test_the_messages_say_what_is_true(tmp_path, auction_run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _error(_run("train", "--out", ".", *TINY), "current folder")
    _error(_run("plot", auction_run, "--out", auction_run / "curves.png"), "`sepo train` run")
    result = _run("eval", "--agent", "openai:x@notaurl", "--episodes", "1")
    _error(result, "'notaurl'", "not a URL")
    assert "api.openai.com" not in result.stderr
    help_text = _run("eval", "--game", "ipd", "--help").stdout
    assert "[row][column] -> [row payoff, column payoff]" in " ".join(help_text.replace("│", " ").split())


def test_a_search_value_is_labelled_exact_only_when_the_search_is():
    """FairNeg declares what it reads, so the search is exact and its value is the gap itself; a
    learned bound (OpenSpiel's, tests/games/openspiel/test_bound.py) keeps its `_lower_bound` name."""
    from sepo.games.negotiation_gt import exact  # noqa: F401 - the domain's search is importable
    result = _run("eval", "--game", "negotiation-gt", "--agent", "bot:FairNeg", "--episodes", "2")
    assert result.exit_code == 0, result.output
    assert "adversarial_gap_lower_bound" not in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("│ adversarial_gap "))
    assert row.rstrip(" │").split("│")[-1].strip() == "exact", row


# ---------------------------------------------------------------------- settings that do nothing

def test_a_key_given_twice_is_an_error(tmp_path):
    pools = tmp_path / "pools.yaml"
    pools.write_text("train: [NashApprox]\nexploiter: [MaxExploiter]\ntrain: [TightPassive]\n")
    _error(
        _run("eval", "--agent", "nash", "--episodes", "1", "--pools", pools),
        "'train'",
        "second time",
        "line 1",
    )
    game = tmp_path / "game.json"
    game.write_text('{"players": ["a", "b"], "players": ["c", "d"]}')
    _error(_run("analyze", "game", game), "'players'", "twice")


def test_seeds_given_as_strings_are_refused():
    import yaml

    from sepo.errors import SepoError
    from sepo.experiments.config import validate_config
    from tests.experiments.conftest import tiny_config

    data = yaml.safe_load(tiny_config())
    validate_config(data)
    with pytest.raises(SepoError, match="seeds"):
        validate_config({**data, "seeds": ["0", "1"]})


def test_settings_that_would_do_nothing_are_refused_or_warned(tmp_path):
    _error(
        _run("eval", "--agent", "nash", "--episodes", "1", "--samples", "4"),
        "--samples applies to text agents only",
    )
    _error(_run("exploit", "--agent", "nash", "--samples", "4", "--max-tokens-total", "9"),
           "--samples, --max-tokens-total apply to text agents only")
    _error(_run("exploit", "--agent", "nash", "--temperature", "0"), "--temperature")
    _error(_run("eval", "--agent", "nash", "--episodes", "1", "--lambda-c", "1"), "--lambda-c", "kuhn")
    _error(_run("train", "--out", tmp_path / "r", "--lambda-c", "1", *TINY), "--lambda-c")
    assert (
        _run("eval", "--agent", "nash", "--episodes", "1", "--lambda-c", "1", "--protocol", "paper").exit_code
        == 0
    )
    pools = tmp_path / "pools.yaml"
    pools.write_text('train: [{bot: Fair, message: "deal?"}]\n')
    result = _run("eval", "--game", "negotiation", "--agent", "uniform", "--episodes", "1", "--pools", pools)
    assert result.exit_code == 0 and "delivered only with --talk" in result.stderr, result.output
    quiet = _run(
        "eval", "--game", "negotiation", "--agent", "uniform", "--episodes", "1", "--pools", pools, "--talk"
    )
    assert quiet.exit_code == 0 and "--talk" not in quiet.stderr, quiet.output


# ----------------------------------------------------------------------------- no library noise

def test_data_sft_prints_no_library_progress_bar(tmp_path):
    result = _run("data", "sft", "--out", tmp_path / "d", "--episodes", "2")
    assert result.exit_code == 0, result.output
    assert "Saving the dataset" not in result.stderr + result.stdout, result.stderr


def test_an_experiment_cells_sft_dataset_prints_no_library_progress_bar(tmp_path, capfd):
    """The dataset an experiment's SFT cell writes prints no "Saving the dataset" bar among the
    experiment's progress lines: the bar is off for the library call cells make, as in `sepo data
    sft`."""
    import datasets

    from sepo.training.sft_data import generate_traces, write_sft_dataset

    traces = generate_traces("kuhn", "paper", 2, 0)
    datasets.enable_progress_bars()
    write_sft_dataset(traces, tmp_path / "d", 0)
    assert "Saving the dataset" not in capfd.readouterr().err
