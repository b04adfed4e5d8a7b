"""SFT demonstrations: the reply format and what the dataset's manifest records."""
import json

from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.games.registry import domain_names, get_domain
from sepo.training.sft_data import generate_traces


def test_answer_only_replies_are_the_answer_line_alone_in_every_domain():
    for name in domain_names():
        demos = get_domain(name).demos
        if demos is None:
            continue
        mixture = next(iter(demos()))
        full = generate_traces(name, mixture, 1, seed=3)
        short = generate_traces(name, mixture, 1, seed=3, answer_only=True)
        full_replies = [ex["messages"][-1]["content"] for episode in full for ex in episode]
        short_replies = [ex["messages"][-1]["content"] for episode in short for ex in episode]
        assert len(full_replies) == len(short_replies) > 0
        for a, b in zip(full_replies, short_replies):
            assert "\n" not in b and a.endswith(b), (name, a, b)
        assert any(a != b for a, b in zip(full_replies, short_replies)), name  # every domain writes reasons


def test_answer_only_is_recorded_and_a_rerun_without_it_is_refused(tmp_path):
    runner = CliRunner()
    out = tmp_path / "data"
    args = ["data", "sft", "--game", "kuhn", "--episodes", "2", "--out", str(out), "--quiet"]
    result = runner.invoke(app, [*args, "--answer-only"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "sepo-run.json").read_text())["config"]["answer_only"] is True
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "answer_only" in again.output.replace("-", "_")
