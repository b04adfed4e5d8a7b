"""Options of `sepo train` that only a language-model policy reads are refused for a tabular one."""
import pytest

from tests.cli.cli_helpers import TINY, _error, _run


def test_final_samples_for_a_tabular_policy_is_refused_before_any_folder(tmp_path):
    """`--final-samples` sets the replies per state of a language model's final read; a tabular
    run accepted it and ignored it."""
    out = tmp_path / "run"
    result = _run("train", "--game", "kuhn", "--steps", "1", "--final-samples", "5", "--out", out)
    _error(result, "--final-samples applies to language models (--policy hf:MODEL) only")
    assert not out.exists()


@pytest.mark.parametrize(
    "option", [["--beta", "0.5"], ["--lora"], ["--gpu"], ["--report-to", "tensorboard"]]
)
def test_every_language_model_option_for_a_tabular_policy_is_refused_before_any_folder(tmp_path, option):
    """--beta, --lora, --gpu and --report-to set the language-model trainer; a tabular run took them
    and wrote the same policy as without them."""
    out = tmp_path / "run"
    result = _run("train", "--game", "kuhn", "--lambda-e", "1", *TINY, *option, "--out", out)
    _error(result, f"{option[0]} applies to language models (--policy hf:MODEL) only")
    assert not out.exists()


def test_language_model_options_at_their_defaults_leave_a_tabular_run_alone(tmp_path):
    """`--beta 0 --report-to none` change nothing, so a tabular run takes them."""
    result = _run("train", "--game", "kuhn", "--lambda-e", "1", *TINY, "--beta", "0", "--report-to", "none",
                  "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "policy.json").exists()


def test_vllm_server_for_a_tabular_policy_names_the_option_given_and_is_listed_in_help(tmp_path):
    result = _run("train", "--game", "kuhn", "--vllm-server", "http://h:1", "--out", tmp_path / "run")
    _error(result, "--vllm-server names the vLLM server", "--policy hf:MODEL")
    assert "--vllm " not in result.stderr
    assert "--vllm-server" in _run("train", "--vllm", "server", "--help").stdout
    plain = " ".join(_run("train", "--help").stdout.replace("│", " ").split())
    assert "sepo train --vllm server --help" in plain
