"""LLM SEPO-GRPO under `accelerate launch` with two CPU processes: a two-process CPU run completes
a few training steps.

One launch (about 15-25 s on a 2-core machine) with the shipped configs/accelerate/cpu_2proc.yaml
on a freshly built tiny model; every rank prints a `sepo-launch: rank R of N finished` line from
accelerate's state, so the test sees how many processes really trained.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("accelerate")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "accelerate" / "cpu_2proc.yaml"
STEPS = 2


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model

    root = tmp_path_factory.mktemp("ddp")
    model = init_tiny_model(root / "tiny", seed=0)
    out = root / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIG),
               "-m", "sepo.training.launch", "--model", str(model), "--out", str(out),
               "--steps", str(STEPS), "--groups", "2", "--group-size", "4", "--max-new-tokens", "24",
               "--samples", "4", "--final-samples", "8"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    return result, out


NOISE = ("Warning", "warn(", "Writing model shards", "Loading weights", "{'")


def _tail(log: str) -> str:
    """The launcher's output without the per-step and warning noise, for a failure message."""
    return "\n".join(line for line in log.splitlines() if not any(n in line for n in NOISE))[-3000:]


def test_two_processes_complete_training_steps(launched):
    result, out = launched
    log = result.stdout + result.stderr
    assert result.returncode == 0, _tail(log)
    ranks = re.findall(r"sepo-launch: rank (\d+) of (\d+) finished \(backend (\w+)", log)
    assert sorted(ranks) == [("0", "2", "gloo"), ("1", "2", "gloo")], _tail(log)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == STEPS and 0.0 <= summary["exploitability"] <= 1.0
    assert (out / "model" / "config.json").exists() and (out / "model" / "model.safetensors").exists()
    assert (out / "trainer" / f"checkpoint-{STEPS}").is_dir()


def test_metrics_are_written_once_per_step(launched):
    result, out = launched
    assert result.returncode == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r["step"] for r in records if "loss" in r]
    assert trained == list(range(1, STEPS + 1))
    assert sum(1 for r in records if r.get("final")) == 1
