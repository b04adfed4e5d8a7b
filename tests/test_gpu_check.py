"""benchmarks/gpu_check.py, the GPU recipe's prepared check: its CPU run end to end, the model config
it ships, a model built from a config file, carried wheels, and the refusal when a package is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from argparse import Namespace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_check_runs_on_the_cpu_and_reports_every_part(tmp_path):
    """About 20 s: the tiny model's config, 2 GRPO steps with LoRA and full fine-tuning."""
    figures = tmp_path / "cpu.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--json", str(figures)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(figures.read_text())
    assert results["device"] == "cpu" and results["model"]["config"] == "the tiny model's"
    g = results["generation"]
    assert g["batched_tokens"] > 0 and g["single_tokens"] > 0 and g["ratio"] > 0 and g["batch"] == 12
    assert results["audit"]["exact"] is True and results["audit"]["exact_value"] == "exploitability"
    assert 0 <= results["audit"]["value"] <= 3
    for key, lora in (("grpo_lora", True), ("grpo_full", False)):
        r = results[key]
        assert r["lora"] is lora and r["steps"] == 2 and r["completions_per_step"] == 16
        assert r["precision"] == "no autocast"  # float32 on the CPU
        assert sum(r["shares"].values()) == pytest.approx(1.0)
        assert all(
            r["parts_seconds"][part] > 0
            for part in ("policy reading", "generation", "loss forward", "backward")
        )
        assert r["peak_gib"] > 0 and r["checkpoint_seconds"] > 0
    for line in (
        "1. generation",
        "2. exact audit of the greedy policy",
        "SEPO-GRPO in Kuhn, LoRA",
        "SEPO-GRPO in Kuhn, full fine-tuning",
        "policy reading",
        "batched / one at a time",
    ):
        assert line in done.stdout


def test_the_shipped_model_config_is_qwen2_5_1_5b_sized(gpu_check):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    values = json.loads(gpu_check.DEFAULT_CONFIG.read_text())
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # Qwen2.5-1.5B's 1.54 B, embeddings tied
    assert sum(p.numel() for p in model.parameters()) == 1_543_714_304
    assert config.num_hidden_layers == 28 and config.num_key_value_heads == 2 and config.vocab_size == 151_936


def test_a_model_config_file_builds_a_random_model_that_writes_replies_with_the_tiny_tokenizer(
    gpu_check, tmp_path
):
    """The path the GPU run takes, at a small size: a config JSON whose vocabulary is larger than the
    trained tokenizer's, which is padded to it without changing how any text encodes."""
    from transformers import AutoTokenizer

    from sepo.policies.hf import HFDecoding, HFPolicy

    config = tmp_path / "small-llama.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 4096,
                "tie_word_embeddings": False,
                "max_position_embeddings": 1024,
            }
        )
    )
    args = Namespace(cpu=True, config=config, seed=0)
    model_dir, info = gpu_check.build_model(args, tmp_path / "work", "cpu")
    assert (
        info["vocab"] == info["tokenizer_vocab"] == 4096 > info["tokenizer_trained"]
        and info["model_type"] == "llama"
    )
    trained, padded = (
        AutoTokenizer.from_pretrained(tmp_path / "work" / "tiny"),
        AutoTokenizer.from_pretrained(model_dir),
    )
    text = "You hold the K. Legal actions: bet, check\nAnswer: bet"
    assert padded(text)["input_ids"] == trained(text)["input_ids"]
    assert len(padded.decode([4095])) >= 1  # a padded token decodes to its bytes
    game, states = gpu_check.kuhn_states()
    policy = HFPolicy(
        str(model_dir),
        game.text,
        decoding=HFDecoding(max_new_tokens=6, failure_rule="fallback"),
        device="cpu",
    )
    completions = policy.generate([policy.prompt_ids(s) for s in states[:3]], 1, seed=0)
    assert [len(g[0].completion_ids) for g in completions] == [6, 6, 6]  # random weights: to the limit
    assert all(isinstance(g[0].text, str) for g in completions)


def _wheel(folder: Path, name: str) -> Path:
    """A minimal pure-Python wheel holding the module `name`."""
    path = folder / f"{name}-0.1-py3-none-any.whl"
    info = f"{name}-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}/__init__.py", "CARRIED = True\n")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        whl.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{info}/RECORD", "")
    return path


def test_carried_wheels_are_installed_first_on_the_import_path(gpu_check, tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "sepo_carried_demo")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    gpu_check.carry_wheels(wheels, tmp_path / "work")
    assert sys.path[0] == str(tmp_path / "work" / "site")
    spec = importlib.util.find_spec("sepo_carried_demo")
    assert spec is not None and str(tmp_path / "work" / "site") in spec.origin


def test_a_missing_package_is_one_line_naming_it_and_the_wheels_option_before_any_work(
    gpu_check, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(gpu_check.NEEDED, "sepo_no_such_module", "trl")
    work = tmp_path / "work"
    assert gpu_check.main(["--cpu", "--work", str(work)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing Python packages: trl" in err and "--wheels" in err
    assert list(work.iterdir()) == []
