"""The pricing market end to end with the tiny local model (slow): SFT data, SFT, two steps of
SEPO-GRPO, the exact gap of the trained model's table."""
import json

import numpy as np
import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.slow


def test_sft_then_sepo_grpo_then_exploit(tmp_path):
    from typer.testing import CliRunner

    from sepo.cli.main import app
    from sepo.games import load_game
    from sepo.games.pricing.exact import PricingSolver
    from sepo.models.tiny import init_tiny_model
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

    runner = CliRunner()
    tiny = init_tiny_model(tmp_path / "tiny", seed=0, domains=["pricing"], episodes=30)
    data = runner.invoke(
        app,
        [
            "data",
            "sft",
            "--game",
            "pricing",
            "--mixture",
            "mixed",
            "--episodes",
            "8",
            "--rounds",
            "3",
            "--prices",
            "5",
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
    params = {"rounds": 3, "prices": 5}
    config = LLMSEPOConfig(
        model=str(tmp_path / "sft" / "model"),
        game="pricing",
        game_params=params,
        steps=2,
        groups=2,
        group_size=4,
        seed=1,
        lambda_e=2.0,
        lambda_c=1.0,
        lambda_x=1.0,
        max_new_tokens=16,
        table_samples=8,
        final_samples=8,
    )
    summary = run_llm_sepo(config, tmp_path / "grpo")
    records = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    table = np.array(records[-1]["table"])
    assert summary["adversarial_gap"] == pytest.approx(
        PricingSolver(load_game("pricing", **params)).evaluate(table).value
    )
