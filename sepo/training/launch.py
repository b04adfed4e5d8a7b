"""Entry point for `accelerate launch` (or torchrun): LLM SEPO-GRPO in any domain with an LLM training
environment.

`accelerate launch` needs a script or a module to start once per process; `sepo train` is a
console script, so this module is that entry. Every process builds the same `LLMSEPOConfig` and
calls `run_llm_sepo`; TRL's GRPOTrainer then shards the prompts across the processes.

Two CPU processes (the local proof; see docs/distributed.md):

    accelerate launch --config_file configs/accelerate/cpu_2proc.yaml \\
        -m sepo.training.launch --model MODEL_DIR --out runs/ddp --steps 3 --groups 2 --group-size 4

GPUs: add `--gpu` (the model is not forced onto the CPU) and use a GPU config from
configs/accelerate/. `--groups` is per process: each step trains on `processes x groups` groups.

Every process prints one line `sepo-launch: rank R of N finished ...` at the end, read from
accelerate's shared state (the trainer's), so a log shows how many ranks really ran.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from sepo.errors import SepoError


def build_parser() -> argparse.ArgumentParser:
    from sepo.training.grpo import LLMSEPOConfig

    defaults = {
        f.name: f.default
        for f in fields(LLMSEPOConfig)
        if f.name not in ("model", "train_pool", "collusive_pool")
    }
    p = argparse.ArgumentParser(prog="python -m sepo.training.launch", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", required=True, help="Model directory or Hub id (what `sepo train --policy hf:` takes)."
    )
    p.add_argument("--out", required=True, help="Run directory (resumed if it holds a checkpoint).")
    p.add_argument("--game", default=None, help="Domain (default: the first registered).")
    p.add_argument(
        "--penalty", default=defaults["penalty"], choices=["per-rollout", "shuffled", "constant", "none"]
    )
    p.add_argument("--lambda-e", type=float, default=defaults["lambda_e"])
    p.add_argument("--lambda-c", type=float, default=defaults["lambda_c"])
    p.add_argument("--lambda-x", type=float, default=defaults["lambda_x"])
    p.add_argument("--steps", type=int, default=defaults["steps"])
    p.add_argument("--groups", type=int, default=defaults["groups"], help="Groups per step and per process.")
    p.add_argument("--group-size", type=int, default=defaults["group_size"])
    p.add_argument("--lr", type=float, default=defaults["learning_rate"])
    p.add_argument("--beta", type=float, default=defaults["beta"])
    p.add_argument("--temperature", type=float, default=defaults["temperature"])
    p.add_argument("--max-new-tokens", type=int, default=defaults["max_new_tokens"])
    p.add_argument("--top-p", type=float, default=defaults["top_p"])
    p.add_argument("--top-k", type=int, default=defaults["top_k"])
    p.add_argument("--repetition-penalty", type=float, default=defaults["repetition_penalty"])
    p.add_argument("--samples", type=int, default=defaults["table_samples"],
                   help="Replies per information state for each step's policy.")
    p.add_argument(
        "--answer-rest",
        type=float,
        default=defaults["answer_rest"],
        help="Read each step's policy from the answer lines when they leave at most this share of replies.",
    )
    p.add_argument("--final-samples", type=int, default=defaults["final_samples"],
                   help="Replies per information state for the final model's measured policy.")
    p.add_argument("--protocol", default=defaults["protocol"], choices=["rigorous", "paper"])
    p.add_argument("--scale-rewards", default=defaults["scale_rewards"], choices=["group", "batch", "none"])
    p.add_argument("--invalid-penalty", type=float, default=defaults["invalid_penalty"])
    p.add_argument("--lora", action="store_true")
    p.add_argument("--lora-r", type=int, default=defaults["lora_r"])
    p.add_argument("--seed", type=int, default=defaults["seed"])
    p.add_argument("--save-steps", type=int, default=defaults["save_steps"])
    p.add_argument("--talk", action="store_true", help="Cheap talk in the training prompts (docs/talk.md).")
    p.add_argument("--talk-injection", type=float, default=defaults["talk_injection"],
                   help="With --talk: share of training prompts carrying a hostile message.")
    p.add_argument("--gpu", action="store_true", help="Use the accelerator (use_cpu=False).")
    p.add_argument("--report-to", default=defaults["report_to"])
    if "optimizer" in defaults:  # newer LLMSEPOConfig: the transformers `optim` name
        p.add_argument(
            "--optimizer",
            default=defaults["optimizer"],
            help="transformers optimizer name, e.g. adamw_torch, sgd.",
        )
    return p


def config_from_args(args: argparse.Namespace):
    from sepo.training.grpo import LLMSEPOConfig

    return LLMSEPOConfig(
        model=args.model,
        game=args.game,
        penalty=args.penalty,
        lambda_e=args.lambda_e,
        lambda_c=args.lambda_c,
        lambda_x=args.lambda_x,
        steps=args.steps,
        groups=args.groups,
        group_size=args.group_size,
        learning_rate=args.lr,
        beta=args.beta,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        scale_rewards=args.scale_rewards,
        invalid_penalty=args.invalid_penalty,
        lora=args.lora,
        lora_r=args.lora_r,
        seed=args.seed,
        save_steps=args.save_steps,
        use_cpu=not args.gpu,
        report_to=args.report_to,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        table_samples=args.samples,
        final_samples=args.final_samples,
        answer_rest=args.answer_rest,
        protocol=args.protocol,
        talk=args.talk,
        talk_injection=args.talk_injection,
        **({"optimizer": args.optimizer} if hasattr(args, "optimizer") else {}),
    ).validate()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        from sepo.training.grpo import run_llm_sepo

        summary = run_llm_sepo(config, args.out)
    except SepoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from accelerate import PartialState

    state = PartialState()  # the singleton the trainer's Accelerator initialised
    print(
        f"sepo-launch: rank {state.process_index} of {state.num_processes} finished "
        f"(backend {state.backend}, device {state.device}); summary {json.dumps(summary, sort_keys=True)}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
