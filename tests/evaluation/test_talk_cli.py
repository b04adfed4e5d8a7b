"""Cheap talk through `sepo eval`: --talk, --pool injection, and bad input as one line with exit 2."""
import json

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.games.talk import INJECTION_SUITE

runner = CliRunner()


def _one_line_exit_2(result, message):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output


def test_injection_pool_reports_an_ignoring_bot_as_not_flagged():
    result = runner.invoke(
        app,
        [
            "eval",
            "--game",
            "negotiation-gt",
            "--agent",
            "bot:HardballNeg",
            "--pool",
            "injection",
            "--episodes",
            "1",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (
        out["flagged"] is False and out["channel"]["cut"] == 4 and len(out["attacks"]) == len(INJECTION_SUITE)
    )


def test_talk_eval_counts_the_messages():
    result = runner.invoke(
        app, ["eval", "--game", "negotiation-gt", "--agent", "uniform", "--talk", "--episodes", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["talk"]["messages"] > 0


def test_bad_talk_input_is_one_line_with_exit_2(tmp_path):
    _one_line_exit_2(
        runner.invoke(app, ["eval", "--game", "negotiation-gt", "--agent", "uniform", "--pool", "nope"]),
        "unknown --pool 'nope'",
    )
    _one_line_exit_2(
        runner.invoke(app, ["eval", "--game", "ipd", "--agent", "uniform", "--talk", "--episodes", "1"]),
        "has no cheap-talk channel",
    )
    pools = tmp_path / "pools.yaml"
    pools.write_text("train:\n  - {bot: FairNeg, message: '" + "a" * 300 + "'}\n")
    _one_line_exit_2(
        runner.invoke(
            app, ["eval", "--game", "negotiation-gt", "--agent", "uniform", "--talk", "--pools", str(pools)]
        ),
        "the talk limit is 280",
    )


@pytest.mark.slow
def test_an_sft_model_writes_messages_the_opponent_reads(tmp_path):
    """End to end with the tiny model: `data sft --talk` (message turns answered with the
    demonstrators' lines), SFT, then the greedy model plays with talk on: its messages reach the
    opponent's observation, and `sepo eval --talk` counts them."""
    from sepo.evaluation.play import play_episodes
    from sepo.games import load_game
    from sepo.games.talk import TalkChannel, special_tokens_of
    from sepo.models.tiny import init_tiny_model
    from sepo.policies.hf import HFDecoding, HFPolicy
    from tests.games.test_talk import Recorder

    tiny = init_tiny_model(tmp_path / "tiny", seed=0, domains=["negotiation"], episodes=20)
    data = runner.invoke(
        app,
        [
            "data",
            "sft",
            "--game",
            "negotiation",
            "--rounds",
            "2",
            "--talk",
            "--episodes",
            "20",
            "--out",
            str(tmp_path / "data"),
            "--quiet",
        ],
    )
    assert data.exit_code == 0, data.output
    sft = runner.invoke(
        app,
        [
            "sft",
            "--model",
            str(tiny),
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "sft"),
            "--epochs",
            "8",
            "--lr",
            "3e-3",
            "--quiet",
        ],
    )
    assert sft.exit_code == 0, sft.output
    game = load_game("negotiation", rounds=2)
    decoding = HFDecoding(temperature=0, max_new_tokens=96, failure_rule="fallback")
    model = HFPolicy(tmp_path / "sft" / "model", game.text, decoding=decoding)
    listener = Recorder()
    play_episodes(
        game,
        model,
        [listener] * 4,
        [0, 1, 2, 3],
        agent_seed=0,
        talk=TalkChannel(special_tokens=special_tokens_of(model)),
    )
    heard = [d.observation["talk"][0] for d in listener.seen if d.observation.get("talk")]
    assert heard, model.counts
    result = runner.invoke(app, ["eval", "--game", "negotiation", "--rounds", "2", "--talk", "--agent",
                                 f"hf:{tmp_path / 'sft' / 'model'}", "--episodes", "1", "--temperature", "0",
                                 "--max-new-tokens", "96", "--json"])
    assert result.exit_code == 0, result.output
    talk = json.loads(result.stdout)["talk"]
    assert talk["model_replies"] - talk["parse_failures"] - talk["model_silent"] > 0
