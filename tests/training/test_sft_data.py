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


def test_without_mixture_each_game_uses_its_own_default_and_a_missing_named_one_is_one_line(tmp_path):
    """`sepo data sft` without --mixture uses the game's own default (the first mixture its domain
    lists) and records it, so a game without the paper's mixture works too; naming a mixture the game
    lacks is refused in one line."""
    runner = CliRunner()
    for name in domain_names():
        domain = get_domain(name)
        if domain.demos is not None:
            assert domain.default_mixture() == next(iter(domain.demos()))
            if "paper" in domain.demos():
                assert domain.default_mixture() == "paper", name
    lacking = next(name for name in domain_names()
                   if get_domain(name).demos is not None and "paper" not in get_domain(name).demos())
    default = get_domain(lacking).default_mixture()
    out = tmp_path / "data"
    args = ["data", "sft", "--game", lacking, "--episodes", "1", "--out", str(out), "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"of the {default} mixture" in result.stdout
    assert json.loads((out / "sepo-run.json").read_text())["config"]["mixture"] == default
    assert runner.invoke(app, [*args, "--mixture", default]).exit_code == 0  # the same run: already complete
    named = runner.invoke(app, ["data", "sft", "--game", lacking, "--mixture", "paper", "--episodes", "1",
                                "--out", str(tmp_path / "other"), "--quiet"])
    assert named.exit_code == 2 and len(named.stderr.strip().splitlines()) == 1
    assert "unknown --mixture paper" in named.stderr and default in named.stderr
    assert not (tmp_path / "other").exists()


def test_answer_only_examples_list_their_decisions_legal_replies_in_every_domain():
    """The legal-reply term of `sepo sft --legal-weight` reads them: one answer line per legal action,
    the demonstrated reply among them; replies with reasons have no such list."""
    for name in domain_names():
        demos = get_domain(name).demos
        if demos is None:
            continue
        mixture = next(iter(demos()))
        examples = [
            ex for episode in generate_traces(name, mixture, 1, seed=3, answer_only=True) for ex in episode
        ]
        for ex in examples:
            legal = ex["legal_replies"]
            assert len(legal) == len(set(legal)) >= 1, (name, legal)
            assert ex["messages"][-1]["content"] in legal, name
        assert any(len(ex["legal_replies"]) > 1 for ex in examples), name
        assert all(
            "legal_replies" not in ex
            for episode in generate_traces(name, mixture, 1, seed=3)
            for ex in episode
        )
