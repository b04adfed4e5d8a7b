"""Split bargaining end to end with the tiny local model (slow): SFT data from the paper's mixture,
SFT, two steps of SEPO-GRPO, the exact gap of the trained model's table."""
import json

import numpy as np
import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.slow


def test_sft_then_sepo_grpo_then_exploit(tmp_path):
    from typer.testing import CliRunner

    from sepo.cli.main import app
    from sepo.games import load_game
    from sepo.games.negotiation.exact import NegotiationSolver
    from sepo.models.tiny import init_tiny_model
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

    runner = CliRunner()
    tiny = init_tiny_model(tmp_path / "tiny", seed=0, domains=["negotiation"], episodes=50)
    data = runner.invoke(
        app,
        [
            "data",
            "sft",
            "--game",
            "negotiation",
            "--mixture",
            "paper",
            "--episodes",
            "10",
            "--out",
            str(tmp_path / "data"),
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
            "1",
            "--lr",
            "3e-3",
        ],
    )
    assert sft.exit_code == 0, sft.output
    config = LLMSEPOConfig(
        model=str(tmp_path / "sft" / "model"),
        game="negotiation",
        steps=2,
        groups=2,
        group_size=4,
        seed=1,
        lambda_e=5.0,
    )
    summary = run_llm_sepo(config, tmp_path / "grpo")
    records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    table = np.array(records[-1]["table"])
    solver = NegotiationSolver(load_game("negotiation"))
    assert summary["adversarial_gap"] == pytest.approx(solver.evaluate(table).value)
