"""Proof that TRL's GRPOTrainer trains the tiny local model on CPU, in both ways TRL allows.

    .venv/bin/python examples/trl_grpo_tiny.py --mode multi-turn  [--steps 2] [--beta 0.0]
    .venv/bin/python examples/trl_grpo_tiny.py --mode per-decision [--steps 2]

multi-turn: a `rollout_func` plays whole (one-hand) Kuhn episodes against a toy always-bet
opponent, all episodes of the batch advancing together (one batched `generate` per turn, through
`HFPolicy.generate`). Each sample is ONE token sequence: the first decision's chat is the prompt;
the completion is reply 1, then the environment's tokens (the next user turn and assistant header,
`env_mask` = 0: no loss), then reply 2, ... The hand's payoff goes to the reward function as an
extra field. A parse failure is resolved by the "fallback" rule and counted.

per-decision: no rollout_func; each dataset row is one decision's stateless chat; TRL generates
`num_generations` replies per prompt itself; the reward function parses them (toy reward: +1 for a
valid reply that bets/calls with K or passes/folds otherwise, -1 for an invalid reply).

Neither is a SEPO run (toy rewards); they pin down the TRL mechanics. See docs/llm-notes.md.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is flagged experimental

import numpy as np

COUNTS: Counter = Counter()


def toy_opponent(decision) -> int:
    return 1  # always BET, CALL a bet


def make_rollout_func(tokenizer, max_new_tokens: int):
    """A rollout_func: prompts are JSON episode specs ({"seed": s}); returns one multi-turn sequence
    per prompt (duplicates included: TRL has already repeated each prompt num_generations times)."""
    from sepo.games.kuhn.rules import KuhnPoker
    from sepo.games.kuhn.text import KuhnText
    from sepo.policies.hf import HFDecoding, HFPolicy

    text = KuhnText()

    def rollout_func(prompts: list, trainer) -> dict:
        if os.environ.get("SEPO_DEBUG_ROLLOUT"):
            with open(os.environ["SEPO_DEBUG_ROLLOUT"] + f".{trainer.accelerator.process_index}", "a") as log:
                log.write(f"step {trainer.state.global_step} prompts {prompts}\n")
        model = trainer.accelerator.unwrap_model(trainer.model)
        decoding = HFDecoding(failure_rule="fallback", temperature=trainer.args.temperature,
                              max_new_tokens=max_new_tokens)
        policy = HFPolicy(model, text, mode="sample", tokenizer=tokenizer, decoding=decoding)
        game = KuhnPoker(hands=1)
        states = []
        for prompt in prompts:
            spec = json.loads(prompt)
            rng = np.random.default_rng(spec["seed"])
            state = game.new_initial_state()
            state.apply_action(int(rng.integers(6)))  # the deal: shared by the group (same seed)
            states.append(state)
        messages = [None] * len(prompts)  # the running chat of each episode
        prompt_ids = [None] * len(prompts)
        completion_ids = [[] for _ in prompts]
        env_mask = [[] for _ in prompts]
        invalid = [0] * len(prompts)
        last_reply = [None] * len(prompts)
        while True:
            # the opponent (player 1) moves wherever it is to act
            for s in states:
                while not s.is_terminal() and s.current_player() == 1:
                    s.apply_action(toy_opponent(s.decision(1)))
            pending = [i for i, s in enumerate(states) if not s.is_terminal()]
            if not pending:
                break
            contexts = []
            for i in pending:
                d = states[i].decision(0)
                user = {"role": "user", "content": text.user_prompt(d)}
                if messages[i] is None:  # first decision: the prompt
                    messages[i] = [{"role": "system", "content": text.system_prompt()}, user]
                    prompt_ids[i] = policy.render(messages[i])
                else:  # later decision: the environment's tokens, masked out of the loss
                    env_ids = policy.turn_ids(messages[i], last_reply[i], [user])
                    messages[i] = messages[i] + [{"role": "assistant", "content": last_reply[i].text}, user]
                    completion_ids[i] += env_ids
                    env_mask[i] += [0] * len(env_ids)
                contexts.append(prompt_ids[i] + completion_ids[i])
            # the copies of a prompt must sample differently, and a group's copies can sit on
            # different processes (per-device batch < num_generations): key the seed by process too
            seed = int(
                np.random.default_rng(
                    [trainer.state.global_step, trainer.accelerator.process_index, len(contexts)]
                ).integers(2**31)
            )
            replies = policy.generate(contexts, 1, seed=seed)  # ONE batched call for every pending decision
            for i, group in zip(pending, replies):
                reply = group[0]
                d = states[i].decision(0)
                completion_ids[i] += list(reply.completion_ids)
                env_mask[i] += [1] * len(reply.completion_ids)
                last_reply[i] = reply
                result = text.parse(reply.text, d)
                COUNTS[f"parse.{result.status}"] += 1
                if not result.ok:
                    invalid[i] += 1
                action = result.action if result.ok else d.legal_actions[0]  # the "fallback" rule
                states[i].apply_action(action)
        COUNTS["env_tokens_made"] += sum(m.count(0) for m in env_mask)
        COUNTS["model_tokens_made"] += sum(m.count(1) for m in env_mask)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,  # allowed: only used for vLLM importance-sampling correction
            "env_mask": env_mask,
            "payoff": [s.returns()[0] for s in states],  # extra fields go to the reward functions
            "invalid": invalid,
        }

    return rollout_func


def payoff_reward(prompts, completions, payoff, invalid, **kwargs):
    COUNTS["reward_calls"] += 1
    COUNTS["reward_rows"] += len(payoff)
    return [float(p) - float(n) for p, n in zip(payoff, invalid)]


def card_reward(prompts, completions, card, facing_bet, **kwargs):
    import re

    rewards = []
    for completion, c in zip(completions, card):
        reply = completion[0]["content"] if isinstance(completion, list) else completion
        lines = [x for x in reply.splitlines() if x.strip()]
        words = set(re.findall(r"\b(PASS|BET|CALL|FOLD)\b", lines[-1].upper())) if lines else set()
        if len(words) != 1:
            rewards.append(-1.0)
            continue
        strong = {"BET", "CALL"} & words
        rewards.append(1.0 if bool(strong) == (c == 2) else 0.0)
    return rewards


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--mode", choices=("multi-turn", "per-decision"), default="multi-turn")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2, help="prompts per step")
    parser.add_argument("--max-new-tokens", type=int, default=12)
    args = parser.parse_args()

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from sepo.games.kuhn.exact import canonical_decisions as kuhn_canonical_decisions
    from sepo.models.tiny import init_tiny_model

    work = Path(tempfile.mkdtemp(prefix="sepo-grpo-"))
    model_dir = Path(args.model) if args.model else init_tiny_model(work / "tiny", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    before = {k: v.clone() for k, v in model.state_dict().items()}

    config = GRPOConfig(
        output_dir=str(work / "grpo"),
        max_steps=args.steps,
        per_device_train_batch_size=args.groups * args.generations,  # one generation batch per step
        num_generations=args.generations,
        max_completion_length=args.max_new_tokens * 3 + 64,
        temperature=1.0,
        learning_rate=1e-4,
        beta=args.beta,
        loss_type="dapo",  # the default; see docs/llm-notes.md for the others
        scale_rewards="group",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    class MaskCheckingTrainer(GRPOTrainer):
        """Counts the tokens that reach the loss: env_mask arrives as inputs["tool_mask"]."""

        def _compute_loss(self, model, inputs):
            real = inputs["completion_mask"].bool()
            if "tool_mask" in inputs:
                COUNTS["env_tokens_masked"] += int((real & (inputs["tool_mask"] == 0)).sum())
                real = real & (inputs["tool_mask"] == 1)
            COUNTS["loss_tokens"] += int(real.sum())
            return super()._compute_loss(model, inputs)

    if args.mode == "multi-turn":
        dataset = Dataset.from_list([{"prompt": json.dumps({"seed": s})} for s in range(64)])
        trainer = MaskCheckingTrainer(
            model=model, reward_funcs=payoff_reward, args=config, train_dataset=dataset,
            processing_class=tokenizer, rollout_func=make_rollout_func(tokenizer, args.max_new_tokens),
        )
    else:
        from sepo.games.kuhn.text import KuhnText

        text = KuhnText()
        rows = [
            {
                "prompt": [
                    {"role": "system", "content": text.system_prompt()},
                    {"role": "user", "content": text.user_prompt(d)},
                ],
                "card": d.observation["card"],
                "facing_bet": d.observation["facing_bet"],
            }
            for d in kuhn_canonical_decisions().values()
        ]
        config.max_completion_length = args.max_new_tokens
        trainer = MaskCheckingTrainer(
            model=model, reward_funcs=card_reward, args=config, train_dataset=Dataset.from_list(rows * 4),
            processing_class=tokenizer,
        )
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    changed = sum(
        int(not torch_equal(before[k], v)) for k, v in trainer.model.state_dict().items() if k in before
    )
    logs = [{k: round(v, 4) for k, v in h.items() if isinstance(v, float) and k in (
        "loss", "reward", "reward_std", "completions/mean_length", "frac_reward_zero_std", "grad_norm")}
        for h in trainer.state.log_history if "reward" in h]
    print(f"GRPO {args.mode}: {args.steps} steps x {args.groups} groups x {args.generations} generations "
          f"in {elapsed:.1f}s ({elapsed / args.steps:.1f}s/step); tensors changed: {changed}/{len(before)}")
    for row in logs:
        print("  ", row)
    print("  counts:", dict(COUNTS))
    if args.mode == "multi-turn":  # every environment token was kept out of the loss, every model token in it
        assert COUNTS["env_tokens_masked"] == COUNTS["env_tokens_made"]
        assert COUNTS["loss_tokens"] == COUNTS["model_tokens_made"]


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


if __name__ == "__main__":
    main()
