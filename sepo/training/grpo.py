"""SEPO-GRPO for language models on Kuhn poker, with TRL's GRPOTrainer (spec §5, §7).

Design: per-decision prompts chosen on-policy by a `rollout_func`. Each step:
  1. Read the model's action table at the 12 information states (its probability of each legal
     action's canonical reply, one batched forward pass) and compute the exact exploitability
     attribution at that table (`sepo.objective.attribution`), as the tabular trainer does.
  2. Play hands between that table and the train pool; every agent decision met is a candidate
     prompt, so prompts arrive with their on-policy frequency. `groups` of them are drawn; each is
     one GRPO group of `group_size` completions sharing the hidden state (cards, seat, opponent).
  3. The model writes every completion in one batched `generate` call. Each is parsed strictly;
     a failure is counted and resolved by the named `fallback` rule (plus `invalid_penalty`).
  4. Reward R = s·U − λe·s·E − λc·C − λx·X from the completion's own action: U is the exact
     expected payoff to go (rest of the hand under the table and the opponent bot), E the
     attribution, C a fold against a collusive partner, X the chance of losing 2 chips.
  5. TRL normalises within groups and computes its GRPO loss; nothing of the loss is ours.

Why per-decision rather than multi-turn: the paper and our evaluation treat each decision as a
stateless chat, so training on the same prompts keeps training and evaluation identical, and
the exact attribution is per decision anyway. (`examples/trl_grpo_tiny.py --mode multi-turn`
shows the `env_mask` route, which TRL also supports.)

Reward scaling defaults to "none" (Dr. GRPO): per-group std scaling weights prompts unequally
and moves the optimum. TRL's "batch" std is taken over raw rewards, so a per-group constant
changes it: with TRL, only "group" and "none" keep the `constant` ablation exact.
"""
from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.games.kuhn.rules import INFO_STATES, KuhnPoker, action_names
from sepo.games.kuhn import exact as kuhn_exact
from sepo.objective.attribution import exploitation_attribution
from sepo.objective.sepo import Lambdas, check_penalty_mode, group_mean
from sepo.games.kuhn.pools import PAPER_POOLS
from sepo.opponents.pools import parse_bot
from sepo.training.checkpoint import MetricsLog, atomic_write_json, check_same_run
from sepo.games.kuhn.llm_env import DecisionContext, action_outcomes, sample_decisions

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@dataclass
class LLMSEPOConfig:
    """Settings of `sepo train --policy hf:MODEL` (defaults sized for the tiny model on a CPU)."""

    model: str
    penalty: str = "per-rollout"
    lambda_e: float = 0.0
    lambda_c: float = 0.0
    lambda_x: float = 0.0
    steps: int = 20
    groups: int = 8
    group_size: int = 4
    learning_rate: float = 1e-4
    optimizer: str = "adamw_torch"
    beta: float = 0.0
    temperature: float = 1.0
    max_new_tokens: int = 48
    scale_rewards: str = "none"
    invalid_penalty: float = 1.0
    lora: bool = False
    lora_r: int = 16
    seed: int = 0
    save_steps: int = 5
    use_cpu: bool = True
    report_to: str = "none"
    train_pool: list = field(default_factory=lambda: list(PAPER_POOLS["train"]))
    collusive_pool: list = field(default_factory=lambda: list(PAPER_POOLS["collusive"]))

    def validate(self) -> "LLMSEPOConfig":
        check_penalty_mode(self.penalty)
        Lambdas(self.lambda_e, self.lambda_c, self.lambda_x)
        if self.group_size < 2:
            raise SepoError("group_size must be >= 2: GRPO compares completions within a group")
        if self.steps < 1 or self.groups < 1:
            raise SepoError("steps and groups must be >= 1")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise SepoError(f"unknown reward scaling {self.scale_rewards!r}; use group, batch or none")
        return self


def reply_table(policy, decisions: list[Decision]) -> np.ndarray:
    """`[len(decisions), 2]`: P(action) ∝ P(canonical reply of the action, then end of turn)."""
    eos = [policy.tokenizer.eos_token_id] if policy.tokenizer.eos_token_id is not None else []
    prompts, continuations = [], []
    for decision in decisions:
        prompt = policy.prompt_ids(decision)
        for action in decision.legal_actions:
            prompts.append(prompt)
            continuations.append(policy._ids(policy.defuse(policy.text.canonical_reply(decision, action))) + eos)
    scores = np.array([lp.sum() for lp in policy.sequence_logprobs(prompts, continuations)]).reshape(len(decisions), -1)
    scores -= scores.max(1, keepdims=True)
    probs = np.exp(scores)
    return probs / probs.sum(1, keepdims=True)


def training_decision(context: DecisionContext, rng: np.random.Generator, hands: int = 6) -> Decision:
    """The prompt for a sampled decision: a random hand number and a random record of earlier
    hands, so the model learns to play the same whatever the score line says."""
    hand = int(rng.integers(1, hands + 1))
    earlier = rng.choice([1, -1, 2, -2], size=hand - 1)
    return Decision(
        game="kuhn", player=0, info_key=context.info_key, legal_actions=(0, 1), action_names=action_names(context.history),
        observation={"hand": hand, "hands": hands, "card": context.agent_card, "seat": context.seat,
                     "history": context.history, "facing_bet": context.history.endswith("b"),
                     "prior_wins": int((earlier > 0).sum()), "prior_losses": int((earlier < 0).sum()),
                     "prior_net": int(earlier.sum())},
    )


class KuhnSEPOEnvironment:
    """The rollout function and the reward function TRL calls, sharing one step's state."""

    def __init__(self, config: LLMSEPOConfig, tokenizer, log: MetricsLog):
        from sepo.games.kuhn.exact import canonical_decisions as kuhn_canonical_decisions

        self.config = config
        self.tokenizer = tokenizer
        self.log = log
        self.game = KuhnPoker(hands=6)
        self.scale = self.game.payoff_scale
        train = [parse_bot("kuhn", e) for e in config.train_pool]
        collusive = {parse_bot("kuhn", e).label for e in config.collusive_pool}
        self.opponents = np.stack([spec.build().table for spec in train])
        self.is_collusive = np.array([spec.label in collusive for spec in train])
        self.reach_external = kuhn_exact.external_reach(self.opponents)
        canonical = kuhn_canonical_decisions(6)
        self.canonical = [canonical[key] for key in INFO_STATES]
        self.last_step_metrics: dict = {}

    def policy(self, model):
        from sepo.policies.hf import HFPolicy

        return HFPolicy(model, self.game.text, mode="sample", tokenizer=self.tokenizer, failure_rule="fallback",
                        temperature=self.config.temperature, max_new_tokens=self.config.max_new_tokens, device=None)

    def measure(self, model) -> dict:
        """Exact metrics of the model's current action table (reply-scored at the 12 states)."""
        table = reply_table(self.policy(model), self.canonical)
        e = float(kuhn_exact.exploitability(table))
        return {"exploitability": e, "nash_conv": 2 * e, "table": table.tolist(),
                "utility_exact": float(kuhn_exact.head_to_head(table, self.opponents).mean())}

    def rollout(self, prompts: list, trainer) -> dict:
        c = self.config
        step = trainer.state.global_step
        policy = self.policy(trainer.accelerator.unwrap_model(trainer.model))
        table = reply_table(policy, self.canonical)
        gradient = kuhn_exact.exploitability_gradient(table)
        charge = exploitation_attribution(table, gradient, kuhn_exact.own_reach(table) * self.reach_external)

        # Everything a group shares is keyed by (seed, step, prompt), never by position in this
        # process's slice: TRL may split one group across processes.
        group_keys = list(dict.fromkeys(prompts))
        candidates = sample_decisions(table, self.opponents, 4 * c.groups + 8, np.random.default_rng([c.seed, step, 0x5E90]))
        chosen, decisions = {}, {}
        for key in group_keys:
            rng = np.random.default_rng([c.seed, step, zlib.crc32(key.encode())])
            chosen[key] = candidates[int(rng.integers(len(candidates)))]
            decisions[key] = training_decision(chosen[key], rng)

        prompt_ids = [policy.prompt_ids(decisions[p]) for p in prompts]
        seed = int(np.random.default_rng([c.seed, step, trainer.accelerator.process_index, 0x6E4]).integers(2**31))
        completions = [group[0] for group in policy.generate(prompt_ids, 1, seed=seed)]

        fields = {k: [] for k in ("utility", "exploit", "collusion", "externality", "invalid", "group")}
        for prompt, completion in zip(prompts, completions):
            context, decision = chosen[prompt], decisions[prompt]
            parsed = self.game.text.parse(completion.text, decision)
            action = parsed.action if parsed.ok else decision.legal_actions[0]  # the "fallback" rule
            opponent = self.opponents[context.opponent_index]
            value, big_loss = action_outcomes(table, opponent, context, action)
            fields["utility"].append(value)
            fields["exploit"].append(float(charge[context.info_row, action]))
            folded = decision.observation["facing_bet"] and action == 0
            fields["collusion"].append(float(folded and self.is_collusive[context.opponent_index]))
            fields["externality"].append(big_loss)
            fields["invalid"].append(float(not parsed.ok))
            fields["group"].append(group_keys.index(prompt))
        e = float(kuhn_exact.exploitability(table))
        self.last_step_metrics = {
            "step": step, "exploitability": e, "nash_conv": 2 * e,
            "utility_exact": float(kuhn_exact.head_to_head(table, self.opponents).mean()),
            "invalid_rate": _global_mean(trainer.accelerator, fields["invalid"]), "table": table.tolist(),
        }  # the table this step's rollouts were drawn from (before its update)
        # TRL averages and logs its `_metrics` (to metrics.jsonl, the console and --report-to backends)
        for name in ("exploitability", "utility_exact", "invalid_rate"):
            trainer._metrics["train"][f"sepo/{name}"].append(self.last_step_metrics[name])
        self.accelerator = trainer.accelerator
        return {"prompt_ids": prompt_ids, "completion_ids": [list(x.completion_ids) for x in completions],
                "logprobs": None, **fields}

    def reward(self, prompts, completions, utility, exploit, collusion, externality, invalid, group, **kwargs) -> list[float]:
        c = self.config
        lam = Lambdas(c.lambda_e, c.lambda_c, c.lambda_x)
        utility, exploit, collusion, externality, invalid = map(np.asarray, (utility, exploit, collusion, externality, invalid))
        groups = np.unique(np.asarray(group), return_inverse=True)[1]
        penalty = lam.e * self.scale * exploit + lam.c * collusion + lam.x * externality
        if c.penalty == "none":
            penalty = np.zeros_like(penalty)
        elif c.penalty == "constant":
            penalty = group_mean(penalty, groups)[groups]
        rewards = self.scale * utility - penalty - c.invalid_penalty * invalid
        self.last_step_metrics["reward_mean"] = _global_mean(self.accelerator, rewards)
        return [float(r) for r in rewards]


def _global_mean(accelerator, values) -> float:
    """Mean over every process's values (a collective: all processes call it at the same point)."""
    import torch

    local = torch.as_tensor(np.asarray(values, dtype=np.float64), device=accelerator.device)
    return float(accelerator.gather(local).mean())


def run_llm_sepo(config: LLMSEPOConfig, out: str | Path) -> dict:
    """Train (resuming from the latest TRL checkpoint in `out/trainer`) and save `out/model`."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from sepo.policies.hf import load_hf_model
    from sepo.training.sft import save_final_model

    config.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    args = _grpo_args(config, out)
    main_process = args.process_index == 0  # only process 0 writes run files; all of them read
    saved = out / "config.json"
    settings = {"policy": "hf", **asdict(config)}
    check_same_run(saved, settings)
    if main_process:
        atomic_write_json(saved, settings)
    model, tokenizer, _ = load_hf_model(config.model, None, device=str(args.device), dtype="float32")
    log = MetricsLog(out / "metrics.jsonl")
    env = KuhnSEPOEnvironment(config, tokenizer, log)

    def sepo_reward(prompts, completions, **kwargs):
        return env.reward(prompts, completions, **kwargs)

    class _Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero:
                return
            record = {**env.last_step_metrics, **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}}
            record["step"] = state.global_step
            log.append(record)

    prompts = [json.dumps({"group": i}) for i in range(config.steps * config.groups)]
    peft_config = None
    if config.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora_r, lora_alpha=2 * config.lora_r, lora_dropout=0.0,
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=sepo_reward, args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                          processing_class=tokenizer, rollout_func=env.rollout, peft_config=peft_config, callbacks=[_Log()])
    resume = any((out / "trainer").glob("checkpoint-*"))
    if not resume and main_process:
        log.truncate_after(-1)
    trainer.train(resume_from_checkpoint=True if resume else None)
    accelerator = trainer.accelerator
    target = out / "model"
    if accelerator.is_main_process:
        save_final_model(trainer.model, tokenizer, target)
    accelerator.wait_for_everyone()
    final = env.measure(accelerator.unwrap_model(trainer.model))
    summary = {"model": str(target), "steps": trainer.state.global_step, **{k: v for k, v in final.items() if k != "table"}}
    if accelerator.is_main_process:
        log.append({"step": trainer.state.global_step, "final": True, **final})
        atomic_write_json(out / "summary.json", summary)
    accelerator.wait_for_everyone()
    return summary


def _grpo_args(config: LLMSEPOConfig, out: Path):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out / "trainer"), max_steps=config.steps, per_device_train_batch_size=config.groups * config.group_size,
        num_generations=config.group_size, learning_rate=config.learning_rate, optim=config.optimizer, beta=config.beta,
        temperature=config.temperature, max_completion_length=config.max_new_tokens, scale_rewards=config.scale_rewards,
        use_cpu=config.use_cpu, bf16=False, gradient_checkpointing=False, logging_steps=1, save_strategy="steps",
        save_steps=config.save_steps, save_total_limit=2, report_to=config.report_to, seed=config.seed,
        dataloader_num_workers=0, disable_tqdm=True, lr_scheduler_type="constant", shuffle_dataset=False,
    )

