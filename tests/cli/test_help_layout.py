"""Help screens sized to the command line: a game's own parameters for the game named, options in
panels, flags as flags, commands in workflow order, the training method named; `sepo games`."""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.games import domain_names, get_domain

OPTION_ROW = re.compile(r"^│ (?:[* ]  )?(--[a-z][a-z-]*)", re.MULTILINE)


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def _options(*args) -> list[str]:
    result = _run(*args, "--help")
    assert result.exit_code == 0, result.output
    return OPTION_ROW.findall(result.stdout)


@pytest.mark.parametrize("command", ["eval", "train"])
def test_eval_and_train_help_list_at_most_35_options(command):
    options = _options(command)
    assert "--help" in options and "--game" in options
    assert len(options) <= 35, options


def test_help_for_a_game_lists_its_own_parameters_typed_with_defaults_and_no_other_games():
    help_text = _run("eval", "--game", "ipd", "--help").stdout
    options = OPTION_ROW.findall(help_text)
    for param in get_domain("ipd").params:
        assert param.flag in options
    assert "--hands" not in options and "--bidders" not in options and "--pie" not in options
    rounds = next(line for line in help_text.splitlines() if re.match(r"^│ (?:[* ]  )?--rounds ", line))
    assert "<int>" in rounds and "[default: 8]" in rounds
    memory = next(line for line in help_text.splitlines() if re.match(r"^│ (?:[* ]  )?--memory ", line))
    assert "<int|full>" in memory
    assert "ipd's parameters" in help_text


def test_help_without_a_game_names_no_game_parameter_and_says_where_they_are():
    result = _run("eval", "--help")
    options = OPTION_ROW.findall(result.stdout)
    every = {param.flag for name in domain_names() for param in get_domain(name).params}
    assert not every & set(options)
    assert "sepo games NAME" in " ".join(result.stdout.replace("│", " ").split())


def test_help_for_a_game_that_does_not_load_says_why_instead_of_the_generic_screen():
    result = _run("eval", "--game", "kuhnn", "--help")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "--game kuhnn has no parameters to show: unknown game 'kuhnn'" in text
    assert "this help shows them with --game NAME" not in text


def test_a_game_parameter_still_parses_for_its_game_and_is_refused_for_another():
    result = _run("eval", "--game", "ipd", "--rounds", "2", "--agent", "bot:TFT", "--episodes", "1", "--json")
    assert result.exit_code == 0, result.output
    refused = _run("eval", "--game", "kuhn", "--rounds", "2", "--agent", "uniform", "--episodes", "1")
    assert refused.exit_code == 2 and "--rounds does not apply to game 'kuhn'" in refused.stderr


def test_help_shows_options_in_panels_and_flags_without_a_value_type():
    help_text = _run("eval", "--help").stdout
    for panel in ("Game", "Agent", "Audit", "Safety weights", "Decoding", "Output"):
        assert f"─ {panel} ─" in help_text, panel
    assert "<bool>" not in help_text and "<bool>" not in _run("train", "--help").stdout
    json_row = next(line for line in help_text.splitlines() if re.match(r"^│ (?:[* ]  )?--json ", line))
    assert "<" not in json_row.split("Print")[0]


def test_no_help_screen_shows_a_flag_as_taking_a_value():
    import typer

    def paths(group, path=()):
        yield path
        for name, command in getattr(group, "commands", {}).items():
            yield from paths(command, (*path, name))

    shown = {path: _run(*path, "--help").stdout for path in paths(typer.main.get_command(app))}
    assert len(shown) > 20 and not [path for path, text in shown.items() if "<bool>" in text]


def test_commands_are_listed_in_workflow_order_with_one_line_summaries():
    help_text = _run("--help").stdout
    listed = re.findall(r"^│ ([a-z]+) {2,}\S", help_text, re.MULTILINE)
    rows = [line for line in help_text.splitlines() if re.match(r"^│ [a-z]+ {2,}\S", line)]
    assert listed[:6] == ["demo", "games", "eval", "exploit", "frontier", "train"], listed
    assert {"serve", "report", "analyze", "experiment", "model", "data", "sft", "plot"} <= set(listed)
    panel = help_text[help_text.index("─ Commands "):].splitlines()[1:]
    lines = panel[:next(i for i, line in enumerate(panel) if line.startswith("╰"))]
    assert len(lines) == len(rows), "a command's summary wraps onto a second line"


def test_games_lists_every_game_and_one_games_parameters():
    listing = _run("games")
    assert listing.exit_code == 0, listing.output
    for name in domain_names():
        assert name in listing.stdout
    record = json.loads(_run("games", "ipd", "--json").stdout)
    rounds = next(p for p in record["parameters"] if p["option"] == "--rounds")
    assert rounds["type"] == "int" and rounds["default"] == "8"
    assert [p["option"] for p in record["parameters"]] == [p.flag for p in get_domain("ipd").params]
    unknown = _run("games", "no-such-game")
    assert unknown.exit_code == 2 and "unknown game" in unknown.stderr


def test_train_help_names_its_default_method_and_payoff_only_grpo():
    help_text = " ".join(_run("train", "--help").stdout.replace("│", " ").split())
    assert "SEPO (the default" in help_text and "grpo" in help_text and "payoff-only GRPO" in help_text
    assert "--aa-beta" not in _options("train")
    assert {"--aa-beta", "--aa-gamma"} <= set(_options("train", "--method", "advantage-alignment"))


TINY = ["--steps", "2", "--groups", "2", "--group-size", "2", "--quiet"]


def test_train_with_every_weight_zero_says_it_is_payoff_only_grpo(tmp_path):
    shown = [arg for arg in TINY if arg != "--quiet"]  # the line is the run's first progress line
    result = _run("train", "--out", tmp_path / "r", *shown)
    assert result.exit_code == 0, result.output
    first = result.stderr.splitlines()[0]
    assert "payoff-only GRPO" in first and "--method grpo" in first
    weighted = _run("train", "--out", tmp_path / "w", "--lambda-e", "1", *shown)
    assert weighted.exit_code == 0 and "payoff-only" not in weighted.stderr
    quiet = _run("train", "--out", tmp_path / "q", *TINY)
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_the_old_penalty_none_still_trains_payoff_only_grpo_with_a_deprecation_note(tmp_path):
    old = _run("train", "--out", tmp_path / "old", "--penalty", "none", *TINY)
    assert old.exit_code == 0, old.output
    notes = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert len(notes) == 1 and "--method grpo" in notes[0]
    new = _run("train", "--out", tmp_path / "new", "--method", "grpo", *TINY)
    assert new.exit_code == 0, new.output
    assert "deprecated" not in new.stderr and "payoff-only GRPO" not in new.stderr
    old_config = json.loads((tmp_path / "old" / "config.json").read_text())
    assert old_config == json.loads((tmp_path / "new" / "config.json").read_text())
    assert old_config["penalty"] == "none" and "method" not in old_config


def test_grpo_refuses_a_safety_weight_and_a_penalty(tmp_path):
    for extra, word in ((["--lambda-e", "1"], "--lambda-e"), (["--penalty", "constant"], "--penalty")):
        result = _run("train", "--out", tmp_path / "r", "--method", "grpo", *extra, *TINY)
        assert result.exit_code == 2 and word in result.stderr and "Traceback" not in result.output
        assert not (tmp_path / "r").exists()


def test_help_for_a_game_leaves_out_the_options_and_choices_it_refuses_and_says_so():
    """Kuhn refuses --talk, --pool injection, --lambda-c, --self-play and --method
    advantage-alignment; its help listed them all."""
    eval_help = _run("eval", "--game", "kuhn", "--help").stdout
    options = OPTION_ROW.findall(eval_help)
    assert not {"--talk", "--pool", "--lambda-c"} & set(options) and "--lambda-x" in options
    assert "Not shown, as kuhn refuses them:" in " ".join(eval_help.replace("│", " ").split())
    train_help = _run("train", "--game", "kuhn", "--help").stdout
    options = OPTION_ROW.findall(train_help)
    assert not {"--talk", "--talk-injection", "--self-play", "--lambda-c"} & set(options)
    method = next(line for line in train_help.splitlines() if re.match(r"^│ +--method ", line))
    assert "<sepo|grpo>" in method
    refused = _run("train", "--game", "kuhn", "--method", "advantage-alignment", "--steps", "1", "--out", "x")
    assert refused.exit_code == 2


def test_help_keeps_what_the_game_named_takes_on_this_command_line():
    """The same predicates as the refusals: ipd trains self-play and Advantage Alignment, the paper
    protocol measures Kuhn's collusion, and without --game nothing is left out."""
    ipd = _run("train", "--game", "ipd", "--help").stdout
    assert {"--self-play", "--lambda-c"} <= set(OPTION_ROW.findall(ipd)) and "advantage-alignment" in ipd
    paper = _run("eval", "--game", "kuhn", "--protocol", "paper", "--help").stdout
    assert "--lambda-c" in OPTION_ROW.findall(paper)
    generic = OPTION_ROW.findall(_run("train", "--help").stdout)
    assert {"--talk", "--self-play", "--lambda-c"} <= set(generic)
