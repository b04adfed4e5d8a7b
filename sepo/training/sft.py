"""Supervised warm start with TRL's SFTTrainer, loss on the assistant turns only.

Runs are directories: `trainer/` holds TRL's checkpoints (a killed run resumes from the latest),
`metrics.jsonl` the logged losses, and `model/` the final model with its tokenizer (a LoRA
adapter is merged into the base weights first), loadable as `hf:DIR/model` or `run:DIR`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from sepo.errors import SepoError
from sepo.training.checkpoint import MetricsLog, atomic_write_json


@dataclass
class SFTRunConfig:
    """Settings of `sepo sft` (defaults sized for the tiny local model on a CPU)."""

    model: str
    data: str
    epochs: float = 2.0
    max_steps: int = -1
    batch_size: int = 16
    learning_rate: float = 2e-3
    warmup_ratio: float = 0.05
    lora: bool = False
    lora_r: int = 32
    max_length: int = 512
    seed: int = 0
    save_steps: int = 200
    use_cpu: bool = True

    def validate(self) -> "SFTRunConfig":
        if not Path(self.data).exists():
            raise SepoError(f"SFT data directory not found: {self.data}")
        if self.batch_size < 1 or self.learning_rate <= 0 or (self.max_steps < 1 and self.epochs <= 0):
            raise SepoError("batch size, learning rate and epochs (or max steps) must be positive")
        return self


def _load_dataset(path: str):
    from datasets import load_from_disk

    try:
        data = load_from_disk(path)
    except (FileNotFoundError, ValueError) as error:
        raise SepoError(f"cannot read SFT data {path}: {error}") from None
    for split in ("train", "validation"):
        if split not in data or "messages" not in data[split].column_names:
            raise SepoError(f"SFT data {path} needs '{split}' with a 'messages' column (make it with `sepo data sft`)")
    return data["train"].select_columns(["messages"]), data["validation"].select_columns(["messages"])


def run_sft(config: SFTRunConfig, out: str | Path) -> Path:
    """Train and return the directory of the final model."""
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from sepo.policies.hf import load_hf_model

    config.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train, validation = _load_dataset(config.data)
    model, tokenizer, _ = load_hf_model(config.model, None, device="cpu" if config.use_cpu else None, dtype="float32")
    log = MetricsLog(out / "metrics.jsonl")

    class _Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                log.append({"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}})

    args = SFTConfig(
        output_dir=str(out / "trainer"),
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=config.warmup_ratio,  # transformers 5: a float below 1 is a fraction of the steps
        assistant_only_loss=True,
        use_cpu=config.use_cpu,
        bf16=False,
        gradient_checkpointing=False,
        max_length=config.max_length,
        logging_steps=10,
        eval_strategy="steps",
        eval_steps=config.save_steps,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=2,
        report_to="none",
        dataloader_num_workers=0,
        seed=config.seed,
        disable_tqdm=True,
    )
    main_process = args.process_index == 0  # only process 0 writes run files
    if main_process:
        atomic_write_json(out / "sft_config.json", asdict(config))
    peft_config = None
    if config.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora_r, lora_alpha=2 * config.lora_r, lora_dropout=0.05,
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=train, eval_dataset=validation,
                         processing_class=tokenizer, peft_config=peft_config, callbacks=[_Log()])
    resume = any((out / "trainer").glob("checkpoint-*"))
    if not resume and main_process:
        log.truncate_after(-1)
    trainer.train(resume_from_checkpoint=True if resume else None)
    if trainer.accelerator.is_main_process:
        save_final_model(trainer.model, tokenizer, out / "model")
    trainer.accelerator.wait_for_everyone()
    return out / "model"


def save_final_model(model, tokenizer, target: Path) -> Path:
    """Merge any LoRA adapter and save model + tokenizer atomically (written aside, then renamed)."""
    import shutil

    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.config.use_cache = True  # trainers switch the KV cache off; generation wants it back
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    return target
