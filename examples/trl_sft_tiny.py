"""Proof that TRL's SFTTrainer trains the tiny local model with assistant-only loss on CPU.

    .venv/bin/python examples/trl_sft_tiny.py [--model DIR] [--steps 2]

Builds the tiny model (if --model is not given), makes a small conversational dataset of Kuhn
decisions (system, user, assistant = "<reason>\\n<ACTION>"; a toy card-only strategy, not the
issue's expert mixtures), checks that the loss mask covers exactly the assistant replies, and
runs `--steps` optimizer steps. See docs/llm-notes.md for what each setting is for.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def kuhn_sft_rows(n: int, seed: int = 0) -> list[dict]:
    from sepo.games.kuhn.exact import canonical_decisions as kuhn_canonical_decisions
    from sepo.games.kuhn.rules import CARD_NAMES

    text = __import__("sepo.games.kuhn.text", fromlist=["KuhnText"]).KuhnText()
    decisions = list(kuhn_canonical_decisions().values())
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        d = decisions[int(rng.integers(len(decisions)))]
        card = d.observation["card"]
        action = 1 if card == 2 else 0  # toy: bet/call with K only
        reason = f"I hold {CARD_NAMES[card]}."
        rows.append(
            {
                "messages": [
                    {"role": "system", "content": text.system_prompt()},
                    {"role": "user", "content": text.user_prompt(d)},
                    {"role": "assistant", "content": f"{reason}\n{text.answer_text(d, action)}"},
                ]
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--lora", action="store_true", help="train a LoRA adapter (PEFT) instead of all weights"
    )
    args = parser.parse_args()

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from sepo.models.tiny import init_tiny_model

    work = Path(tempfile.mkdtemp(prefix="sepo-sft-"))
    model_dir = Path(args.model) if args.model else init_tiny_model(work / "tiny", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    dataset = Dataset.from_list(kuhn_sft_rows(64))

    config = SFTConfig(
        output_dir=str(work / "sft"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=1e-3,
        assistant_only_loss=True,  # needs {% generation %} markers in the chat template
        use_cpu=True,
        bf16=False,  # TRL defaults bf16=True; on CPU keep float32
        gradient_checkpointing=False,  # TRL defaults it to True; pointless for a tiny model
        max_length=512,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        seed=0,
    )
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
            task_type="CAUSAL_LM",
        )
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config
    )
    if args.lora:
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        print(f"LoRA: {trainable} trainable parameters")

    # the loss mask: exactly the assistant reply and its <|im_end|> (and the newline after it).
    # TRL 1.16 turns the template's assistant mask into a "labels" column (-100 = no loss) when it
    # prepares the dataset, so the collator only pads.
    row = trainer.train_dataset[0]
    masked = [t for t in row["labels"] if t != -100]
    print("masked tokens decode to:", repr(tokenizer.decode(masked)))
    assert tokenizer.decode(masked) == dataset[0]["messages"][-1]["content"] + "<|im_end|>\n"
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    trained = int((batch["labels"] != -100).sum())
    print(f"tokens in 2 examples: {int(batch['attention_mask'].sum())}, with loss: {trained}")

    start = time.perf_counter()
    result = trainer.train()
    elapsed = time.perf_counter() - start
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(
        f"SFT: {args.steps} steps x batch {args.batch} in {elapsed:.2f}s ({elapsed / args.steps:.2f}s/step); "
        f"losses {losses}"
    )
    print("train_loss", result.training_loss)
    if args.lora:  # the adapter directory loads as a policy (HFPolicy handles adapter_config.json)
        from sepo.games.kuhn.exact import KuhnSolver
        from sepo.games.kuhn.text import KuhnText
        from sepo.metrics.exact import action_table
        from sepo.policies.hf import HFPolicy

        trainer.save_model(work / "adapter")
        policy = HFPolicy(work / "adapter", KuhnText(), tokenizer=tokenizer, device="cpu")
        table = action_table(policy, KuhnSolver().decisions())
        print("adapter policy's action table rows sum to 1:", bool(abs(table.sum(1) - 1).max() < 1e-9))


if __name__ == "__main__":
    main()
