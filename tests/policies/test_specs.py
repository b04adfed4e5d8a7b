"""Agent specs: what a model source that is not a model folder is told."""
from __future__ import annotations

import pytest

from sepo.errors import SepoError
from sepo.policies.specs import check_model_source


def test_a_run_folder_given_as_a_model_names_its_model(tmp_path):
    """`--agent hf:RUN` (the run folder of `sepo sft` or `sepo train`, not its model/) is refused with
    a line naming RUN/model and run:RUN, not only "not a model folder" or an error inside transformers
    ("Unrecognized model ... model_type", from a train run's own config.json)."""
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "config.json").write_text('{"model_type": "qwen2"}')
    run = str(tmp_path / "run")
    for run_config in (None, '{"policy": "hf", "steps": 1}'):  # an sft run folder; a train run folder
        if run_config:
            (tmp_path / "run" / "config.json").write_text(run_config)
        with pytest.raises(
            SepoError,
            match=rf"is a run folder, not a model folder; its model is '{run}/model' \(or give "
            rf"the run as run:{run}\)",
        ):
            check_model_source(run)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SepoError) as info:
        check_model_source(str(tmp_path / "empty"))
    assert "run folder" not in str(info.value)
    check_model_source(f"{run}/model")


def test_eval_of_a_train_run_given_as_hf_names_its_model(tmp_path):
    """The same through `sepo eval --agent hf:RUN`, which loads the model without the source check:
    a train run does not fail inside transformers ("Unrecognized model ... model_type")."""
    from typer.testing import CliRunner

    from sepo.cli.main import app
    from tests.cli.cli_helpers import _error

    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "config.json").write_text('{"model_type": "qwen2"}')
    (tmp_path / "run" / "config.json").write_text('{"policy": "hf", "steps": 1}')
    result = CliRunner().invoke(
        app, ["eval", "--game", "kuhn", "--agent", f"hf:{tmp_path / 'run'}", "--episodes", "1"]
    )
    _error(result, "is a run folder, not a model folder", f"run:{tmp_path / 'run'}")


def test_a_bot_parameter_given_twice_is_refused():
    """`bot:NAME(k=1,k=2)` used to keep the last value silently."""
    from sepo.games import load_game
    from sepo.policies.specs import load_agent

    with pytest.raises(
        SepoError, match=r"bot spec 'NashApprox\(alpha=0.2,alpha=0.3\)': parameter 'alpha' is given twice"
    ):
        load_agent("bot:NashApprox(alpha=0.2,alpha=0.3)", load_game("kuhn"))


@pytest.mark.parametrize(
    "game, spec, says",
    [
        (
            "kuhn",
            "bot:NashApprox(foo=1)",
            "bot 'NashApprox': unknown parameter 'foo'; it takes alpha (default 0.333",
        ),
        ("kuhn", "bot:AlwaysBet(foo=1)", "bot 'AlwaysBet': unknown parameter 'foo'; it takes no parameters"),
        (
            "openspiel:kuhn_poker",
            "bot:CFR(foo=1)",
            "bot 'CFR': unknown parameter 'foo'; it takes iterations (default 100)",
        ),
    ],
)
def test_an_unknown_bot_parameter_names_the_bot_and_what_it_takes(game, spec, says):
    """The bot is built by a lambda in some domains: the error used to name `<lambda>()`."""
    from sepo.games import load_game
    from sepo.policies.specs import load_agent

    if game.startswith("openspiel:"):
        pytest.importorskip("pyspiel")
    with pytest.raises(SepoError) as refused:
        load_agent(spec, load_game(game))
    assert says in str(refused.value) and "lambda" not in str(refused.value)
