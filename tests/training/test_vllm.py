"""`sepo train --vllm colocate|server`: the rollout's generation and its played-policy read go through
TRL's vLLM engine, whose log-probabilities go back to TRL; refused in one line without vLLM.

vLLM itself is not installed here (it needs a GPU): `StandInEngine` implements the interface of
TRL's `VLLMGeneration` that the trainer and sepo call (`generate`, `sync_weights`, and the server
mode's `vllm_client.get_server_info`), samples with the training model under the decoding TRL
gave it, and checks and records what sepo sends and what it gets back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")

from sepo.errors import SepoError  # noqa: E402
from sepo.training import vllm as vllm_module  # noqa: E402
from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment, run_llm_sepo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny", seed=0, domains=["kuhn"])


class StandInEngine:
    """TRL's `VLLMGeneration` as far as GRPOTrainer and sepo use it (see the module doc)."""

    made: list["StandInEngine"] = []

    def __init__(
        self,
        *,
        model,
        accelerator,
        processing_class,
        mode,
        temperature,
        top_p,
        top_k,
        repetition_penalty,
        max_completion_length,
        logprobs,
        server_base_url=None,
        **rest,
    ):
        self.model, self.tokenizer, self.mode = model, processing_class, mode
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.repetition_penalty, self.max_completion_length = repetition_penalty, max_completion_length
        self.logprobs, self.server_base_url = logprobs, server_base_url
        self.calls: list[dict] = []
        self.syncs = 0
        self.events: list[str] = []
        self.vllm_client = self  # server mode asks its client what log-probabilities it returns
        StandInEngine.made.append(self)

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def sync_weights(self):
        self.syncs += 1
        self.events.append("sync")

    def generate(self, prompts, images, num_generations, profiler=None):
        """Sample with the training model (its weights are the engine's after a sync) and return
        each sampled token's log-probability under the decoding: TRL's tuple of four."""
        import torch

        assert images is None and isinstance(num_generations, int) and num_generations >= 1
        assert all(isinstance(p, list) and p and all(type(t) is int for t in p) for p in prompts)
        assert len(prompts) % num_generations == 0
        for start in range(
            0, len(prompts), num_generations
        ):  # each prompt n times in a row (server mode's read)
            assert all(p == prompts[start] for p in prompts[start : start + num_generations])
        self.calls.append({"prompts": [list(p) for p in prompts], "n": num_generations})
        self.events.append("generate")
        model = self.model
        completions, logprobs = [], []
        was_training = model.training
        model.eval()
        try:
            generator = torch.Generator().manual_seed(len(self.calls))
            for prompt in prompts:
                ids = list(prompt)
                out, scores = [], []
                with torch.no_grad():
                    for _ in range(self.max_completion_length):
                        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
                        logp = torch.log_softmax(logits / self.temperature, dim=-1)
                        token = int(torch.multinomial(logp.exp(), 1, generator=generator))
                        out.append(token)
                        scores.append([float(logp[token])])
                        ids.append(token)
                        if token == self.tokenizer.eos_token_id:
                            break
                # one token past the end of turn, as an engine that stops on other tokens returns it
                completions.append(
                    out + ([self.tokenizer.pad_token_id] if out[-1] == self.tokenizer.eos_token_id else [])
                )
                logprobs.append(scores + ([[-0.5]] if len(completions[-1]) > len(out) else []))
        finally:
            model.train(was_training)
        return prompts, completions, logprobs, None


def _config(model, **changes):
    return LLMSEPOConfig(
        model=str(model),
        steps=2,
        groups=2,
        group_size=2,
        table_samples=2,
        final_samples=1,
        max_new_tokens=6,
        lambda_e=1.5,
        seed=0,
        save_steps=2,
        **changes,
    )


@pytest.fixture
def stand_in(monkeypatch):
    """The stand-in in TRL's place, vLLM taken as installed, and the CPU allowed."""
    import trl.trainer.grpo_trainer as grpo_trainer

    StandInEngine.made.clear()
    monkeypatch.setattr(grpo_trainer, "VLLMGeneration", StandInEngine)
    monkeypatch.setattr(vllm_module, "installed", lambda: True)
    monkeypatch.setattr(vllm_module, "needs_accelerator", lambda config: False)
    return StandInEngine


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_the_rollout_draws_its_replies_from_the_vllm_engine_and_returns_its_log_probabilities(
    tiny_model, tmp_path, stand_in, monkeypatch, mode
):
    """About 10 s per mode: two steps of the tiny model, every reply of each step's played-policy read
    and completions from the engine, after TRL synced its weights; sepo's own generation unused in
    the rollout; the engine's log-probabilities reach TRL's importance-sampling correction (the
    stand-in samples with the trained weights, so the correction's log-probability difference is 0)."""
    from sepo.policies.hf_sampling import Sampling

    own = []
    original = Sampling.generate
    in_rollout = []

    def counted(self, *args, **kwargs):
        if in_rollout:
            own.append(1)
        return original(self, *args, **kwargs)

    rollout = SEPOEnvironment.rollout

    def tracked(self, prompts, trainer):
        in_rollout.append(1)
        try:
            return rollout(self, prompts, trainer)
        finally:
            in_rollout.pop()

    monkeypatch.setattr(Sampling, "generate", counted)
    monkeypatch.setattr(SEPOEnvironment, "rollout", tracked)
    config = _config(
        tiny_model, vllm=mode, **({"vllm_server": "http://127.0.0.1:8011"} if mode == "server" else {})
    )
    summary = run_llm_sepo(config, tmp_path / "run")
    assert summary["steps"] == 2
    (engine,) = stand_in.made
    assert engine.mode == mode and (engine.server_base_url == "http://127.0.0.1:8011") == (mode == "server")
    assert (engine.temperature, engine.top_p, engine.max_completion_length) == (1.0, 1.0, 6)
    assert engine.logprobs == 0  # the sampled token's log-probability only
    assert own == []  # no reply of the rollout came from transformers' generate
    # each step: TRL syncs the weights, then the read (12 states x 2 replies) and the 4 completions
    assert engine.events[0] == "sync" and engine.syncs == 2
    reads = [c for c in engine.calls if len(c["prompts"]) != config.groups * config.group_size]
    writes = [c for c in engine.calls if len(c["prompts"]) == config.groups * config.group_size]
    assert len(writes) == 2 and all(c["n"] == 1 for c in writes)
    assert sum(len(c["prompts"]) for c in reads) == 2 * 12 * config.table_samples
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    for call in engine.calls:
        for prompt in call["prompts"]:
            text = tokenizer.decode(prompt)
            assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    for call in writes:  # a group's completions share their prompt
        prompts = call["prompts"]
        assert prompts[0] == prompts[1] and prompts[2] == prompts[3]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if not r.get("final")]
    assert len(steps) == 2
    for record in steps:
        assert record["sampling/sampling_logp_difference/mean"] < 1e-4
        assert record["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-3)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["vllm"] == mode and "vllm_server" not in saved


def test_a_completion_is_cut_after_its_end_of_turn_with_its_log_probabilities(tiny_model):
    """What comes back from the engine: tokens past the first end-of-turn token are dropped (sepo's own
    generation stops there), and the log-probabilities with them."""
    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.policies.hf import HFDecoding
    from sepo.training.vllm import VLLMPolicy

    game = load_game("kuhn")
    config = _config(tiny_model)

    class Fixed:
        temperature, top_p, top_k, repetition_penalty, max_completion_length = 1.0, 1.0, 0, 1.0, 6
        sent = None

        def generate(self, prompts, images, num_generations):
            Fixed.sent = (prompts, num_generations)
            eos = policy.tokenizer.eos_token_id
            rows = [[5, 6, eos, 7, 8], [5, 6, 7, 8, 9, 10]] * (len(prompts) // 2)
            return prompts, rows, [[[-0.1 * (i + 1)] for i in range(len(r))] for r in rows], None

    policy = VLLMPolicy(
        str(tiny_model),
        game.text,
        decoding=HFDecoding.of(config.decoding(), failure_rule="fallback"),
        engine=Fixed(),
        device="cpu",
    )
    first = next(iter(canonical_decisions(game.hands).values()))
    groups = policy.generate([policy.prompt_ids(first)], 2)
    assert Fixed.sent[1] == 2 and len(Fixed.sent[0]) == 2 and Fixed.sent[0][0] == Fixed.sent[0][1]
    done, cut_off = groups[0]
    assert done.completion_ids == (5, 6, policy.tokenizer.eos_token_id) and done.finished
    assert cut_off.completion_ids == (5, 6, 7, 8, 9, 10) and not cut_off.finished
    assert policy.last_logprobs == [
        pytest.approx([-0.1, -0.2, -0.3]),
        pytest.approx([-0.1 * (i + 1) for i in range(6)]),
    ]


def test_an_engine_that_samples_with_another_decoding_is_refused(tiny_model):
    from sepo.games import load_game
    from sepo.policies.hf import HFDecoding
    from sepo.training.vllm import VLLMPolicy

    class Hotter:
        temperature, top_p, top_k, repetition_penalty, max_completion_length = 2.0, 1.0, 0, 1.0, 6

    config = _config(tiny_model)
    with pytest.raises(SepoError, match="not the run's decoding"):
        VLLMPolicy(
            str(tiny_model),
            load_game("kuhn").text,
            decoding=HFDecoding.of(config.decoding(), failure_rule="fallback"),
            engine=Hotter(),
            device="cpu",
        )


def test_vllm_is_refused_in_one_line_where_it_is_not_installed_before_anything_is_written(
    tiny_model, tmp_path
):
    assert not vllm_module.installed()  # this machine: no vLLM
    with pytest.raises(SepoError, match="--vllm colocate generates with vLLM, which is not installed here"):
        run_llm_sepo(_config(tiny_model, vllm="colocate"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vllm": "remote"}, "unknown --vllm 'remote'; use colocate or server"),
        ({"vllm": "colocate", "use_cpu": True}, "--vllm colocate generates on a GPU: add --gpu"),
        (
            {"vllm": "colocate", "vllm_server": "http://h:1"},
            "--vllm-server names a vLLM server: use it with --vllm server",
        ),
        ({"vllm_server": "http://h:1"}, "--vllm-server names a vLLM server: use it with --vllm server"),
        ({"vllm": "server", "vllm_server": "h:8000"}, "is not a server's base URL"),
    ],
)
def test_a_vllm_setting_that_cannot_run_is_one_line(tiny_model, monkeypatch, changes, message):
    monkeypatch.setattr(vllm_module, "installed", lambda: True)
    config = _config(tiny_model, **changes)
    with pytest.raises(SepoError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        config.validate()
    assert "\n" not in str(error.value)


def test_a_run_without_vllm_keeps_the_config_it_always_recorded(tiny_model):
    settings = _config(tiny_model).settings()
    assert "vllm" not in settings and "vllm_server" not in settings


def test_sepo_train_vllm_without_vllm_is_one_line_and_tabular_refuses_it(tiny_model, tmp_path):
    from sepo.cli.main import app

    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "train",
            "--game",
            "kuhn",
            "--policy",
            f"hf:{tiny_model}",
            "--vllm",
            "colocate",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "hf"),
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "which is not installed here: pip install vllm" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "hf").exists()
    result = runner.invoke(
        app,
        [
            "train",
            "--game",
            "kuhn",
            "--policy",
            f"hf:{tiny_model}",
            "--vllm-server",
            "http://127.0.0.1:8000",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "hf"),
        ],
    )
    assert (
        result.exit_code == 2
        and "--vllm-server names a vLLM server: use it with --vllm server" in result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "hf").exists()
    result = runner.invoke(
        app, ["train", "--game", "kuhn", "--vllm", "server", "--out", str(tmp_path / "tab")]
    )
    assert result.exit_code == 2 and "--vllm generates a language model's replies" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "tab").exists()
