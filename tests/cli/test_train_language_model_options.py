"""Options of `sepo train` that only a language-model policy reads are refused for a tabular one."""
from tests.cli.cli_helpers import _error, _run


def test_final_samples_for_a_tabular_policy_is_refused_before_any_folder(tmp_path):
    """`--final-samples` sets the replies per state of a language model's final read; a tabular
    run accepted it and ignored it."""
    out = tmp_path / "run"
    result = _run("train", "--game", "kuhn", "--steps", "1", "--final-samples", "5", "--out", out)
    _error(result, "--final-samples applies to language models (--policy hf:MODEL) only")
    assert not out.exists()
