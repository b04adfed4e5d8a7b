"""The CLI says what it does: its version, help for every choice and option, and usage errors in one
line."""

import pytest

from sepo.cli.main import app
from tests.cli.cli_helpers import _error, _run

# -------------------------------------------------------------------------------- help and usage

def test_version():
    from sepo import __version__

    result = _run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"sepo {__version__}"


@pytest.mark.parametrize(
    "command, listed",
    [
        (
            ["train"],
            [
                "per-rollout",
                "constant",
                "--lambda-e",
                "--lambda-c",
                "--lambda-x",
                "--steps",
                "--seed",
                "tensorboard",
            ],
        ),
        (["eval"], ["rigorous", "paper", "--lambda-e", "--seed", "--episodes"]),
        (["data", "sft"], ["rigorous", "paper", "--seed", "--episodes", "--overwrite"]),
        (["model", "init"], ["qwen2", "llama", "--seed", "--overwrite"]),
    ],
)
def test_choices_and_options_are_documented_in_help(command, listed):
    result = _run(*command, "--help")
    assert result.exit_code == 0
    for word in listed:
        assert word in result.stdout, word


def test_every_option_of_every_command_has_help():
    import typer

    def leaves(group, path=()):
        for name, command in getattr(group, "commands", {}).items():
            yield from (
                leaves(command, (*path, name)) if hasattr(command, "commands") else [((*path, name), command)]
            )

    missing = [
        f"{' '.join(path)} {param.opts[0]}"
        for path, command in leaves(typer.main.get_command(app))
        for param in command.params
        if param.param_type_name == "option" and not getattr(param, "help", None)
    ]
    assert not missing, missing


def test_a_missing_model_is_one_line_without_hub_retries(tmp_path):
    result = _run("eval", "--agent", "hf:someone/no-such-model-xyz", "--episodes", "1")
    _error(result, "no-such-model-xyz")


def test_usage_errors_are_one_line():
    _error(_run("train", "--penalty", "sometimes", "--out", "x"), "sometimes")
    _error(_run("eval", "--agent", "nash", "--episodes", "x"), "--episodes")
