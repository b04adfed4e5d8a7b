"""The GPU recipe as one prepared check: SEPO-GRPO in Kuhn on a 1-2B model, in bf16, part by part.

One command on a machine with one GPU (planned to finish in under 8 minutes on an H200):

    python benchmarks/gpu_check.py --wheels WHEELS --work /dev/shm/sepo-gpu --json gpu.json

What it builds: a randomly initialised causal LM from a real model's config, shipped as a small JSON
file (`--config`, default `benchmarks/models/qwen2.5-1.5b.json`: the config values of
Qwen/Qwen2.5-1.5B, 1.54 B parameters, its 151,936-token vocabulary and tied embeddings), with the
tiny model's tokenizer (trained locally on Kuhn's text: no weights or tokenizer can be downloaded
there), its vocabulary padded to the model's with tokens no text encodes to (`pad_vocabulary`), as a
real tokenizer knows its model's whole vocabulary. Random weights cost what trained ones cost; they
write no valid reply, so every reply runs to the token limit (the longest, costliest case) and plays
the fallback or forced action.

What it measures (GPU: the model in bf16; training as `sepo train --gpu` runs it, float32 master
weights under bf16 autocast through ACCELERATE_MIXED_PRECISION=bf16, which the check confirms):
1. generation: Kuhn prompts answered in one batched call (`--batch` prompts) and one prompt per call
   (`--single` of them), new tokens per second each, and the ratio;
2. the exact audit of the greedy policy (`sepo eval`'s `evaluate` on `--audit-episodes` episodes per
   opponent, the model read at every information state under greedy decoding, forced decoding on
   failures): seconds, and whether the audit's numbers are exact;
3. SEPO-GRPO steps in Kuhn (`run_llm_sepo`, `--groups` x `--group-size` completions, `--steps`
   steps), with LoRA and with full fine-tuning: seconds per step (the first, with its warm-up, apart)
   and each part's share of a step: policy reading (the played policy from `--table-samples` replies
   per information state), generation of the group's completions, scoring (attribution, exact
   metrics, outcomes, reward), loss forward, backward, optimizer, the rest (TRL's bookkeeping); and
   apart, TRL's one checkpoint save (model and optimizer state, at the last step) and the whole run
   (loading, training, merging LoRA, saving the model, measuring it once);
4. peak GPU memory of each part (`torch.cuda.max_memory_allocated`; on the CPU the process's peak
   resident memory, which only grows).

The GPU image lacks TRL, and `datasets` with its `dill` and `multiprocess`, which TRL needs (it has
torch, transformers, accelerate, peft and the rest sepo's Kuhn path imports). Carry them as wheels,
downloaded where pip reaches PyPI, for the GPU machine's Python (3.12 there):

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d WHEELS trl==1.16.0 datasets dill multiprocess

(one version of each; a `datasets` whose own requirements the image meets), and pass the folder with
`--wheels WHEELS`: every wheel in it is installed (no index, no dependencies) into `site/` of the
work folder, put first on the import path. The check starts only when every package it needs
imports, and otherwise names the missing ones in one line (exit status 2).

`--cpu`: the same script on the CPU with the tiny model's own config (float32; `--config` names
another), small sizes (2 steps, 4 replies per state, 8-token replies). It runs in the default test
suite (tests/test_gpu_check.py); its numbers mean nothing. Recorded GPU figures: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "benchmarks" / "models" / "qwen2.5-1.5b.json"
NEEDED = {
    "torch": "torch",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "peft": "peft",
    "trl": "trl",
    "datasets": "datasets",
    "dill": "dill",
    "multiprocess": "multiprocess",
    "tokenizers": "tokenizers",
    "numpy": "numpy",
    "scipy": "scipy",
    "yaml": "pyyaml",
    "regex": "regex",
    "pyarrow": "pyarrow",
}
"""Modules the check imports (sepo's Kuhn path and the trainer's), by the package that provides each."""
GPU = dict(
    steps=3,
    groups=4,
    group_size=4,
    table_samples=64,
    max_new_tokens=48,
    batch=64,
    single=8,
    audit_episodes=20,
)
CPU = dict(
    steps=2, groups=4, group_size=4, table_samples=4, max_new_tokens=8, batch=12, single=3, audit_episodes=2
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cpu", action="store_true", help="Run on the CPU with the tiny model's config (a test run)."
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="A model config JSON (default: the Qwen2.5-1.5B config; with --cpu: the tiny model's own).",
    )
    parser.add_argument(
        "--wheels", type=Path, help="A folder of wheels to install first (TRL and what the image lacks)."
    )
    parser.add_argument(
        "--work",
        type=Path,
        help="Work folder for the model and the runs (default: a temporary folder, "
        "removed at the end); /dev/shm keeps the checkpoints' writes off a slow disk.",
    )
    parser.add_argument("--json", type=Path, help="Also write the figures to this JSON file.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-full", action="store_true", help="Leave out the full fine-tuning run.")
    for name, value in GPU.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=None,
            help=f"(default {value} on the GPU, {CPU[name]} with --cpu)",
        )
    args = parser.parse_args(argv)
    for name in GPU:
        if getattr(args, name) is None:
            setattr(args, name, (CPU if args.cpu else GPU)[name])
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


# ---------------------------------------------------------------------------------- packages


def carry_wheels(folder: Path, work: Path) -> None:
    """Install every wheel in `folder` into `work/site` (no index, no dependencies), first on the path."""
    wheels = sorted(str(p) for p in folder.glob("*.whl"))
    if not wheels:
        sys.exit(f"gpu_check: --wheels {folder} holds no .whl file")
    site = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(site),
            *wheels,
        ],
        check=True,
    )
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    importlib.invalidate_caches()


def missing_packages() -> list[str]:
    return sorted({package for module, package in NEEDED.items() if importlib.util.find_spec(module) is None})


# ------------------------------------------------------------------------------------- timing


class Clock:
    """Seconds spent in wrapped callables by label, synchronising the GPU around each call; after
    every optimizer step, the step's wall time and its parts (`steps`)."""

    def __init__(self, sync):
        self.sync = sync
        self.seconds: dict[str, float] = defaultdict(float)
        self.running: dict[str, int] = defaultdict(int)
        self.steps: list[dict] = []
        self.step_start: float | None = None
        self.before: dict[str, float] = {}
        self.autocast: list[str] = []
        self.restore: list = []

    def wrap(
        self,
        owner,
        name: str,
        label: str | None = None,
        *,
        skip_inside: str | None = None,
        only_inside: str | None = None,
        on_enter=None,
        on_exit=None,
    ) -> None:
        function = getattr(owner, name)
        label = label or name
        clock = self

        @functools.wraps(function)
        def timed(*args, **kwargs):
            if skip_inside and clock.running[skip_inside] or only_inside and not clock.running[only_inside]:
                return function(*args, **kwargs)
            if on_enter:
                on_enter()
            clock.sync()
            clock.running[label] += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                clock.sync()
                clock.seconds[label] += time.perf_counter() - start
                clock.running[label] -= 1
                if on_exit:
                    on_exit()

        self.restore.append((owner, name, function))
        setattr(owner, name, timed)

    def unwrap(self) -> None:
        for owner, name, function in reversed(self.restore):
            setattr(owner, name, function)
        self.restore.clear()

    def begin_step(self) -> None:
        if self.step_start is None:
            self.step_start = time.perf_counter()
            self.before = dict(self.seconds)

    def end_step(self) -> None:
        if self.step_start is None:
            return
        parts = {k: v - self.before.get(k, 0.0) for k, v in self.seconds.items()}
        self.steps.append({"wall": time.perf_counter() - self.step_start, **parts})
        self.step_start = None


def peak_memory(device: str) -> tuple[float, str]:
    """(GiB, what it is) since the last reset."""
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30, "peak GPU memory allocated"
    return resource.getrusage(
        resource.RUSAGE_SELF
    ).ru_maxrss / 2**20, "peak resident memory of the process (never reset)"


def reset_memory(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# ------------------------------------------------------------------------------------- the model


def pad_vocabulary(folder: Path, size: int) -> None:
    """Grow the byte-level BPE tokenizer in `folder` to `size` tokens, as a real model's tokenizer
    knows its whole vocabulary: the new tokens are strings of three byte-level characters that no
    merge builds, so encoding never produces them and decoding one gives its three (random) bytes."""
    from tokenizers.pre_tokenizers import ByteLevel

    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    start = max([*vocab.values(), *(t["id"] for t in data["added_tokens"])]) + 1
    alphabet = sorted(ByteLevel.alphabet())
    taken, fresh, k = set(vocab), {}, 0
    while start + len(fresh) < size:
        word = alphabet[k % 256] + alphabet[(k // 256) % 256] + alphabet[(k // 65536) % 256]
        k += 1
        if word not in taken:
            fresh[word] = start + len(fresh)
    vocab.update(fresh)
    path.write_text(json.dumps(data, ensure_ascii=False))


def build_model(args, work: Path, device: str) -> tuple[Path, dict]:
    """The tokenizer of the tiny model (Kuhn's text) and a random model of `--config` (or, on the
    CPU without one, the tiny model itself), saved where every part loads it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from sepo.models.tiny import init_tiny_model

    tiny = init_tiny_model(work / "tiny", seed=args.seed, domains=["kuhn"], episodes=50)
    if args.config is None and args.cpu:
        model = AutoModelForCausalLM.from_pretrained(tiny)
        return tiny, {
            "config": "the tiny model's",
            "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": "float32",
            "vocab": model.config.vocab_size,
        }
    path = args.config or DEFAULT_CONFIG
    values = json.loads(path.read_text())
    model_type = values.pop("model_type")
    for key in ("architectures", "torch_dtype", "dtype", "transformers_version"):
        values.pop(key, None)
    out = work / "model"
    AutoTokenizer.from_pretrained(tiny).save_pretrained(out)
    trained = len(AutoTokenizer.from_pretrained(out))
    if values.get("vocab_size", 0) < trained:
        sys.exit(
            f"gpu_check: {path} has a vocabulary of {values.get('vocab_size')} tokens, "
            "fewer than the tokenizer's "
            f"{trained}"
        )
    pad_vocabulary(out, values["vocab_size"])
    tokenizer = AutoTokenizer.from_pretrained(out)
    values.update(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    config = AutoConfig.for_model(model_type, **values)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out)
    info = {
        "config": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
        "model_type": model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(dtype).removeprefix("torch."),
        "vocab": config.vocab_size,
        "tokenizer_trained": trained,
        "tokenizer_vocab": len(tokenizer),
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
    }
    del model
    return out, info


# ------------------------------------------------------------------------------------- the parts


def kuhn_states():
    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions

    game = load_game("kuhn")
    return game, list(canonical_decisions(game.hands).values())


def measure_generation(model_dir: Path, args, device: str, sync) -> dict:
    """New tokens per second of Kuhn replies: one batched call against one prompt per call."""
    from sepo.policies.hf import HFDecoding, HFPolicy

    game, states = kuhn_states()
    dtype = "float32" if device == "cpu" else "bfloat16"
    policy = HFPolicy(
        str(model_dir),
        game.text,
        decoding=HFDecoding(
            temperature=1.0, max_new_tokens=args.max_new_tokens, failure_rule="fallback", seed=args.seed
        ),
        device=device,
        dtype=dtype,
        batch_size=args.batch,
    )
    prompts = [policy.prompt_ids(states[i % len(states)]) for i in range(args.batch)]
    policy.generate(prompts[:2], 1, seed=1)  # warm-up (kernels, allocator)
    reset_memory(device)

    def run(batch: list, seed: int) -> tuple[float, int]:
        sync()
        start = time.perf_counter()
        groups = policy.generate(batch, 1, seed=seed)
        sync()
        return time.perf_counter() - start, sum(len(g[0].completion_ids) for g in groups)

    batched_s, batched_tokens = run(prompts, 2)
    memory, what = peak_memory(device)
    single = [run([p], 3 + k) for k, p in enumerate(prompts[: args.single])]
    single_s, single_tokens = sum(s for s, _ in single), sum(t for _, t in single)
    return {
        "batch": args.batch,
        "batched_seconds": batched_s,
        "batched_tokens": batched_tokens,
        "batched_tokens_per_s": batched_tokens / batched_s,
        "single_prompts": args.single,
        "single_seconds": single_s,
        "single_tokens": single_tokens,
        "single_tokens_per_s": single_tokens / single_s,
        "ratio": (batched_tokens / batched_s) / (single_tokens / single_s),
        "prompt_tokens": [len(p) for p in prompts[: len(states)]],
        "peak_gib": memory,
        "memory": what,
    }


def measure_audit(model_dir: Path, args, device: str, sync) -> dict:
    """`evaluate` of the greedy policy (forced decoding on failures): its exact numbers' cost."""
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.policies.hf import HFDecoding, HFPolicy

    game, _ = kuhn_states()
    dtype = "float32" if device == "cpu" else "bfloat16"
    policy = HFPolicy(
        str(model_dir),
        game.text,
        decoding=HFDecoding(
            temperature=0.0, max_new_tokens=args.max_new_tokens, failure_rule="forced", seed=args.seed
        ),
        device=device,
        dtype=dtype,
        batch_size=args.batch,
    )
    reset_memory(device)
    sync()
    start = time.perf_counter()
    result = evaluate(
        game,
        policy,
        EvalConfig(protocol="rigorous", episodes=args.audit_episodes, seed=args.seed, replicates=200),
    )
    sync()
    seconds = time.perf_counter() - start
    memory, what = peak_memory(device)
    del policy
    return {
        "seconds": seconds,
        "exact": result.get("exact") is True,
        "exact_value": result.get("exact_value"),
        "value": result.get(result.get("exact_value") or "exploitability"),
        "episodes_per_opponent": args.audit_episodes,
        "policy": (result.get("policy") or {}).get("label")
        if isinstance(result.get("policy"), dict)
        else result.get("policy"),
        "peak_gib": memory,
        "memory": what,
    }


PARTS = ("policy reading", "generation", "scoring", "loss forward", "backward", "optimizer", "rest")


def measure_grpo(model_dir: Path, args, device: str, sync, lora: bool, work: Path) -> dict:
    """`run_llm_sepo` for `--steps` steps, timed part by part (see the module docstring)."""
    import accelerate
    import accelerate.optimizer
    import torch
    import trl

    from sepo.policies.hf import HFPolicy
    from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment, run_llm_sepo

    clock = Clock(sync)

    def note_autocast():
        if not clock.autocast:
            on = torch.is_autocast_enabled(device)
            kind = torch.get_autocast_dtype(device) if on else None
            clock.autocast.append(f"{str(kind).removeprefix('torch.')} autocast" if on else "no autocast")

    clock.wrap(SEPOEnvironment, "rollout")
    clock.wrap(SEPOEnvironment, "played_policy", only_inside="rollout")
    clock.wrap(SEPOEnvironment, "reward")
    clock.wrap(HFPolicy, "generate", skip_inside="played_policy", only_inside="rollout")
    clock.wrap(trl.GRPOTrainer, "training_step", on_enter=clock.begin_step)
    clock.wrap(trl.GRPOTrainer, "compute_loss", on_enter=note_autocast)
    clock.wrap(accelerate.Accelerator, "backward")
    clock.wrap(accelerate.optimizer.AcceleratedOptimizer, "step", "optimizer", on_exit=clock.end_step)
    clock.wrap(trl.GRPOTrainer, "_save_checkpoint", "checkpoint save")
    config = LLMSEPOConfig(
        game="kuhn",
        model=str(model_dir),
        steps=args.steps,
        groups=args.groups,
        group_size=args.group_size,
        table_samples=args.table_samples,
        final_samples=1,
        max_new_tokens=args.max_new_tokens,
        penalty="per-rollout",
        lambda_e=1.5,
        learning_rate=1e-5,
        lora=lora,
        seed=args.seed,
        save_steps=args.steps,
        keep_checkpoints=1,
        use_cpu=device == "cpu",
    )
    out = work / f"grpo-{'lora' if lora else 'full'}"
    mixed = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if device == "cuda":
        os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
    reset_memory(device)
    started = time.perf_counter()
    try:
        run_llm_sepo(config, out)
    finally:
        clock.unwrap()
        if mixed is None:
            os.environ.pop("ACCELERATE_MIXED_PRECISION", None)
        else:
            os.environ["ACCELERATE_MIXED_PRECISION"] = mixed
    total = time.perf_counter() - started
    memory, what = peak_memory(device)
    steps = []
    for record in clock.steps:
        reading, generation = record.get("played_policy", 0.0), record.get("generate", 0.0)
        parts = {
            "policy reading": reading,
            "generation": generation,
            "scoring": record.get("rollout", 0.0) - reading - generation + record.get("reward", 0.0),
            "loss forward": record.get("compute_loss", 0.0),
            "backward": record.get("backward", 0.0),
            "optimizer": record.get("optimizer", 0.0),
        }
        parts["rest"] = record["wall"] - sum(parts.values())
        steps.append({"seconds": record["wall"], "parts": parts})
    later = steps[1:] or steps
    mean = {part: sum(s["parts"][part] for s in later) / len(later) for part in PARTS}
    step_seconds = sum(s["seconds"] for s in later) / len(later)
    shutil.rmtree(out, ignore_errors=True)
    return {
        "lora": lora,
        "steps": len(steps),
        "first_step_seconds": steps[0]["seconds"] if steps else None,
        "step_seconds": step_seconds,
        "steps_averaged": "steps 2 on" if len(steps) > 1 else "step 1",
        "parts_seconds": mean,
        "shares": {p: mean[p] / step_seconds for p in PARTS},
        "precision": clock.autocast[0] if clock.autocast else "unknown",
        "run_seconds": total,
        "checkpoint_seconds": clock.seconds.get("checkpoint save", 0.0),
        "completions_per_step": args.groups * args.group_size,
        "peak_gib": memory,
        "memory": what,
    }


# ------------------------------------------------------------------------------------- report


def report(results: dict) -> None:
    m = results["model"]
    size = f"{m['parameters'] / 1e9:.2f} B" if m["parameters"] >= 1e8 else f"{m['parameters'] / 1e6:.2f} M"
    print(
        f"\nmodel: {m['config']} config, random weights, {size} parameters, {m['dtype']}, "
        f"vocabulary {m['vocab']:,}; device {results['device']}"
    )
    g = results.get("generation")
    if g:
        print(f"\n1. generation, Kuhn replies of up to {results['settings']['max_new_tokens']} tokens")
        print(
            f"   batched ({g['batch']} prompts, one call): {g['batched_tokens']:,} tokens in "
            f"{g['batched_seconds']:.2f} s = "
            f"{g['batched_tokens_per_s']:,.0f} tokens/s"
        )
        print(
            f"   one prompt per call ({g['single_prompts']} calls):  {g['single_tokens']:,} tokens in "
            f"{g['single_seconds']:.2f} s = "
            f"{g['single_tokens_per_s']:,.0f} tokens/s"
        )
        print(f"   batched / one at a time: {g['ratio']:.1f}x; {g['memory']} {g['peak_gib']:.2f} GiB")
    a = results.get("audit")
    if a:
        print(
            f"\n2. exact audit of the greedy policy (evaluate, {a['episodes_per_opponent']} episodes "
            "per opponent): "
            f"{a['seconds']:.1f} s; exact: {a['exact']}; {a['exact_value']} {a['value']}; "
            f"{a['memory']} {a['peak_gib']:.2f} GiB"
        )
    for key in ("grpo_lora", "grpo_full"):
        r = results.get(key)
        if not r:
            continue
        print(
            f"\n3. SEPO-GRPO in Kuhn, {'LoRA' if r['lora'] else 'full fine-tuning'}, "
            f"{r['completions_per_step']} completions a step, {r['precision']}: first step "
            f"{r['first_step_seconds']:.2f} s, then {r['step_seconds']:.2f} s a step "
            f"({r['steps_averaged']}); the whole run {r['run_seconds']:.1f} s; {r['memory']} "
            f"{r['peak_gib']:.2f} GiB"
        )
        for part in PARTS:
            print(f"   {part:<16}{r['parts_seconds'][part]:>8.2f} s {100 * r['shares'][part]:>5.0f}%")
        print(f"   TRL's checkpoint save (once, after the last step): {r['checkpoint_seconds']:.2f} s")
    print(f"\ntotal {results['seconds']:.0f} s")


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="sepo-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.wheels is not None:
            carry_wheels(args.wheels, work)
        missing = missing_packages()
        if missing:
            print(
                f"gpu_check: missing Python packages: {', '.join(missing)}; download their wheels where pip "
                "reaches PyPI "
                "(the command is in this script's docstring) and pass the folder with --wheels",
                file=sys.stderr,
            )
            return 2
        sys.path.insert(0, str(ROOT))
        import torch

        device = "cpu" if args.cpu else "cuda"
        if device == "cuda" and not torch.cuda.is_available():
            print("gpu_check: no CUDA device is visible; use --cpu for the CPU run", file=sys.stderr)
            return 2
        if device == "cpu":
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        from sepo.progress import Reporter

        results = {
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "versions": {
                name: _version(name) for name in ("torch", "transformers", "trl", "peft", "accelerate")
            },
            "settings": {k: getattr(args, k) for k in GPU},
        }
        with Reporter():  # the parts print their own lines
            print("building the model ...", flush=True)
            model_dir, results["model"] = build_model(args, work, device)
            print("1. generation ...", flush=True)
            results["generation"] = measure_generation(model_dir, args, device, sync)
            print("2. exact audit of the greedy policy ...", flush=True)
            results["audit"] = measure_audit(model_dir, args, device, sync)
            print("3. SEPO-GRPO with LoRA ...", flush=True)
            results["grpo_lora"] = measure_grpo(model_dir, args, device, sync, True, work)
            if not args.skip_full:
                print("3. SEPO-GRPO, full fine-tuning ...", flush=True)
                results["grpo_full"] = measure_grpo(model_dir, args, device, sync, False, work)
        results["seconds"] = time.perf_counter() - started
        report(results)
        if args.json is not None:
            tmp = args.json.with_name(args.json.name + ".tmp")
            tmp.write_text(json.dumps(results, indent=2) + "\n")
            tmp.replace(args.json)
        return 0
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def _version(name: str) -> str:
    from importlib import metadata

    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(name)
    return "absent"


if __name__ == "__main__":
    sys.exit(main())
