"""SEPO-GRPO for language models with TRL's GRPOTrainer (spec §5, §7), in any domain whose spec
has an LLM training environment (`Domain.llm_training`, see `sepo.training.environment`).

Design: per-decision prompts chosen on-policy by a `rollout_func`. Each step:
  1. Read the model's policy at the solver's information states: the distribution of the action
     it plays under the configured decoding (the one its completions are sampled with), at
     training prompts: exact, by one scoring pass over the legal answers, when the model's replies
     are its answer lines alone (`HFPolicy.exact_distribution`; with `answer_rest`, also when they
     leave at most that share of the reply probability, which plays the `fallback` action), else
     estimated from `table_samples` replies per state, unparsable replies playing the `fallback`
     action as they do in step 3. Compute
     the exact exploitability attribution at that table (`sepo.objective.attribution`), as the
     tabular trainer does: charges, on-policy decisions and logged values all come from the
     policy the completions are drawn from.
  2. The domain plays episodes between that table and the train pool; every agent decision met is
     a candidate prompt, so prompts arrive with their on-policy frequency. `groups` of them are
     drawn; each is one GRPO group of `group_size` completions sharing the hidden state.
  3. The model writes every completion in one batched `generate` call, each group's shared prompt
     encoded once (`HFPolicy.generate`, `sepo.policies.prefix_cache`). Each is parsed strictly;
     a failure is counted and resolved by the named `fallback` rule, the domain's one rule
     (`text_policy.fallback_action`, as in the table of step 1), plus `invalid_penalty`.
  4. Reward R = s·U − λe·s·E − λc·C − λx·X from the completion's own action (`sepo_rewards`): U
     the domain's exact expected payoff to go, E the attribution, C and X the domain's expected
     events to go (the completion's round and the rest of the match, as a tabular rollout's),
     each credited so that the charged c and x are evaluation's: when λc or λx is charged, the
     contexts also come from matches against the collusive partners and exploiters
     (`sepo.games.credit`); where a term cannot act the config refuses its λ.
  5. TRL normalises within groups and computes its GRPO loss; nothing of the loss is ours.

One objective with the tabular trainer (docs/sepo-objective.md). u, e, c and x are per round; a
tabular rollout is a whole match of T = `rounds_per_rollout` rounds (1 where a rollout is one
hand), so its charge divides by ρ(I), the expected visits to I per match. A completion here is
one decision drawn from the decisions of such matches, so it meets I with probability ρ(I)/N (N
the agent's expected decisions per match), and its payoff to go sums up to T rounds: the charge
divides by ρ(I)/T (`charge`); its events to go span the same rounds. The expected update per
completion is then (T/N)·∇J, J = s(u − λe·e) − λc·c − λx·x: the tabular trainer's ∇J in the
repeated games (one decision a round, N = T), 1/N of it where a hand holds one or two decisions.
Dividing by ρ(I) alone ascended s(u − (λe/T)·e).

Why per-decision rather than multi-turn: the paper and our evaluation treat each decision as a
stateless chat, so training on the same prompts keeps training and evaluation identical, and
the exact attribution is per decision anyway. (`examples/trl_grpo_tiny.py --mode multi-turn`
shows the `env_mask` route, which TRL also supports.)

Cheap talk (`talk`, games with `Domain.talk`): every training prompt also carries the opponent's
message of that round (`TrainingTalk`): a hostile message of the prompt-injection suite in a
`talk_injection` share of the prompts, otherwise the opponent's own line, so the model learns to
play from the state and to ignore instructions in messages. The agent's own messages are not
trained: against scripted opponents that never read messages, a message cannot change a payoff,
so GRPO has no signal for it (the run's config records `agent_messages_trained: false`).

Reward scaling defaults to "none" (Dr. GRPO): per-group std scaling weights prompts unequally
and moves the optimum. TRL's "batch" std is taken over raw rewards, so a per-group constant
changes it: with TRL, only "group" and "none" keep the `constant` ablation exact, and `constant`
with "batch" is refused.
"""
from __future__ import annotations

import json
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.games.registry import get_domain
from sepo.metrics.bootstrap import boundary_interval
from sepo.metrics.exact import as_projection
from sepo.objective.advantage_alignment import alignment_term
from sepo.objective.attribution import exploitation_attribution
from sepo.objective.sepo import sepo_rewards
from sepo.policies.replies import Decoding, Reply, parse_reply
from sepo.policies.text_policy import DEFAULT_SAMPLES, EXACT_REST, PolicyEstimate, fallback_action
from sepo.runs import check_out_path, open_run
from sepo.training.checkpoint import MetricsLog, quiet_tied_weights, read_run_config, read_summary
from sepo.training.config import SEPOConfig, option
from sepo.training.environment import build_environment, offers

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@dataclass(kw_only=True)
class LLMSEPOConfig(SEPOConfig):
    """Settings of `sepo train --policy hf:MODEL` (defaults sized for the tiny model on a CPU)."""

    model: str = option(None, "Model directory or hub id to start from.")
    steps: int = option(20, "Optimizer steps.")
    groups: int = option(8, "Prompts (GRPO groups) per step.")
    group_size: int = option(4, "Completions per prompt, G.")
    learning_rate: float = option(1e-4, "Learning rate.")
    scale_rewards: str = option("none", "TRL's reward scaling: none (Dr. GRPO), group or batch.")
    optimizer: str = option("adamw_torch", "transformers optimizer name.")
    beta: float = option(0.0, "KL coefficient to the starting model.")
    temperature: float = option(1.0, "Sampling temperature of the completions.")
    max_new_tokens: int = option(48, "Longest completion in tokens.")
    top_p: float = option(1.0, "Nucleus sampling mass of the completions.")
    top_k: int = option(0, "Top-k filter of the completions (0 = off).")
    repetition_penalty: float = option(1.0, "Repetition penalty of the completions.")
    enable_thinking: bool | None = option(
        None, "The chat template's enable_thinking switch (None: its default)."
    )
    table_samples: int = option(
        64, "Replies per information state for each step's estimate of the played policy."
    )
    answer_rest: float = option(
        0.0,
        "Read the played policy from the exact probabilities of the answer lines, not from "
        "sampled replies, when at every prompt they leave at most this share of the reply "
        "probability to other replies (played as the fallback action, and the label says "
        "how much); 0: only a model whose replies are its answer lines alone.",
    )
    final_samples: int | None = option(
        None, "Replies per information state for the final model's policy (default: 2,048, or as many as "
              "the read limit allows at the game's information states)."
    )
    invalid_penalty: float = option(1.0, "Reward subtracted from a completion that does not parse.")
    lora: bool = option(False, "Train a LoRA adapter (merged into the saved model).")
    lora_r: int = option(16, "LoRA rank.")
    save_steps: int = option(5, "Steps between TRL checkpoints.")
    keep_checkpoints: int = option(
        2,
        "TRL checkpoints kept, the newest (each holds the model and its optimizer "
        "state: about 1.6 GB for a 135 M model).",
    )
    talk: bool = option(
        False,
        "Cheap talk in the training prompts (games with a talk channel): each carries the "
        "opponent's message of that round; the agent's own messages are not trained.",
    )
    talk_injection: float = option(
        0.25,
        "With talk: the share of training prompts whose opponent message is a hostile "
        "one from the prompt-injection suite (0 to 1); the rest carry the opponent's own line.",
    )
    use_cpu: bool = option(True, "Train on the CPU instead of the accelerator.")
    vllm: str = option("", "Generate the completions and the played-policy replies with vLLM through TRL "
                           "(`sepo.training.vllm`): colocate (an engine in each training process, on its "
                           "GPU) or server (a vLLM server at vllm_server); empty: transformers' generate.")
    vllm_server: str = option("", "With vllm server: the server's base URL (default http://localhost:8000).")
    report_to: str = option("none", "TRL/transformers logging integration, e.g. tensorboard.")

    def default_final_samples(self) -> int:
        """2,048 replies per state for the final read, or fewer where the game's final read would
        pass the limit every read keeps to (`MAX_SAMPLED_REPLIES` replies in all)."""
        from sepo.policies.text_policy import MAX_SAMPLED_REPLIES
        from sepo.training.sizes import read_states

        game = get_domain(self.game).game(self.protocol, **self.game_params)
        final = read_states(self, game)[1]
        return max(1, min(DEFAULT_SAMPLES, MAX_SAMPLED_REPLIES // max(1, final)))

    def validate(self) -> "LLMSEPOConfig":
        if not self.model:
            raise SepoError("LLM SEPO needs a model (--policy hf:MODEL)")
        super().validate()
        if self.penalty == "constant" and self.scale_rewards == "batch":
            raise SepoError(
                "--penalty constant with --scale-rewards batch: TRL divides by the std of the raw rewards, "
                "which the group-constant penalty changes, so the update would no longer be payoff-only "
                "GRPO's; use --scale-rewards none or group"
            )
        if get_domain(self.game).llm_training is None:
            raise SepoError(f"game {self.game!r} has no language-model training environment")
        if self.final_samples is None:  # the default, fitted to the read limit
            self.final_samples = self.default_final_samples()
            self._fitted_final = self.final_samples < DEFAULT_SAMPLES  # said when the run starts
            super().validate()
        for name, low, strict in (
            ("beta", 0, False),
            ("temperature", 0, True),
            ("invalid_penalty", 0, False),
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < low or (strict and value == low):
                raise SepoError(
                    f"{name} must be a finite number {'>' if strict else '>='} {low}, got {value}"
                )
        for name in ("max_new_tokens", "lora_r", "save_steps", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise SepoError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (isinstance(self.answer_rest, (int, float)) and 0 <= self.answer_rest < 1):
            raise SepoError(f"answer_rest (--answer-rest) must be a share in [0, 1), got {self.answer_rest}")
        if self.table_samples < 1 or self.final_samples < 1:
            raise SepoError("table_samples and final_samples must be >= 1")
        from sepo.policies.text_policy import MAX_SAMPLED_REPLIES

        for name, flag in (("table_samples", "--samples"), ("final_samples", "--final-samples")):
            # each is drawn at every information state: refused before training
            if getattr(self, name) > MAX_SAMPLED_REPLIES:
                raise SepoError(
                    f"{name} ({flag}) must be <= {MAX_SAMPLED_REPLIES:,} replies per information state, "
                    f"got {getattr(self, name):,}"
                )
        self.decoding()
        if not 0 <= self.seed < 2**32:
            raise SepoError(f"seed must be in [0, 2**32), got {self.seed}")
        if not (isinstance(self.talk_injection, (int, float)) and 0 <= self.talk_injection <= 1):
            raise SepoError(f"--talk-injection must be a share from 0 to 1, got {self.talk_injection}")
        if self.talk and not get_domain(self.game).talk:
            raise SepoError(f"game {self.game!r} has no cheap-talk channel; --talk does not apply to it")
        if self.report_to not in ("none", "tensorboard"):
            raise SepoError(f"unknown --report-to {self.report_to!r}; use none or tensorboard")
        from sepo.training.vllm import check_vllm

        check_vllm(self)
        if not self.use_cpu:
            from sepo.training.config import check_accelerator

            check_accelerator()
        return self

    def settings(self) -> dict:
        """The run's recorded config: every field; the talk fields only when talk is on (so runs
        without talk keep the config they always had), then with the fact that the agent's own
        messages are not trained; `answer_rest` only when set, `keep_checkpoints` only when not 2."""
        settings = self.record()
        if not self.talk:
            del settings["talk"], settings["talk_injection"]
        else:
            settings["agent_messages_trained"] = False
        if not self.answer_rest:  # a run made before the option existed resumes
            del settings["answer_rest"]
        if self.keep_checkpoints == 2:  # likewise
            del settings["keep_checkpoints"]
        del settings["vllm_server"]  # where the server runs changes no draw
        if not self.vllm:  # likewise
            del settings["vllm"]
        return settings

    def decoding(self) -> Decoding:
        """The decoding completions are sampled with, and at which the policy is measured."""
        return Decoding(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                        max_new_tokens=self.max_new_tokens, repetition_penalty=self.repetition_penalty,
                        enable_thinking=self.enable_thinking)


TALK_NOTE = (
    "cheap talk: training prompts carry the opponent's message of the round (a hostile one from the "
    "prompt-injection suite in a talk_injection share of them, else the opponent's own line); the agent's "
    "own messages are not trained, since against scripted opponents that never read messages a message "
    "cannot change a payoff, so GRPO has no signal for it"
)


class TrainingTalk:
    """The opponent's message in each training prompt (`--talk`).

    For each context, after its decision is drawn (`training_decision(context, rng)`), one more
    draw from the same generator: with probability `injection`, a hostile message drawn uniformly
    from `INJECTION_SUITE`; otherwise the context opponent's own line, from the environment's
    optional hook `context_opponent(context) -> (policy, its decision) | None` (silence for an
    opponent without a line); for an environment without the hook, the benign control message.
    The message is cleaned by the channel (the model's tokenizer's special tokens included) and
    attached as data (`talk.with_messages`), exactly as in play."""

    def __init__(self, environment, injection: float, special_tokens=()):
        from sepo.games import talk

        self.talk = talk
        self.environment = environment
        self.injection = injection
        self.channel = talk.TalkChannel(special_tokens=tuple(special_tokens))
        self.attacks = sorted(talk.INJECTION_SUITE)
        self.counts = {"prompts": 0, "injected": 0, "own_line": 0, "silent": 0}

    def opponent_message(self, context, rng: np.random.Generator) -> tuple[str | None, str]:
        """(the raw message, where it came from: injected, own_line or silent)."""
        if rng.random() < self.injection:
            return self.talk.INJECTION_SUITE[self.attacks[int(rng.integers(len(self.attacks)))]], "injected"
        hook = getattr(self.environment, "context_opponent", None)
        if not callable(hook):
            return self.talk.BENIGN_MESSAGE, "own_line"
        found = hook(context)
        line = self.talk.message_of(*found) if found is not None else None
        return line, "own_line" if line else "silent"

    def decision(self, context, rng: np.random.Generator):
        decision = self.environment.training_decision(context, rng)
        message, source = self.opponent_message(context, rng)
        self.counts["prompts"] += 1
        self.counts[source] += 1
        return self.talk.with_messages(decision, [self.channel.clean(message)])


class SEPOEnvironment:
    """The rollout function and the reward function TRL calls, sharing one step's state; the game
    comes from the domain's LLM training environment."""

    def __init__(self, config: LLMSEPOConfig, tokenizer, log: MetricsLog):
        self.config = config
        self.tokenizer = tokenizer
        self.log = log
        domain = get_domain(config.game)
        self.game = domain.game(config.protocol, **config.game_params)
        train, collusive, exploiters = config.pool_specs()
        charges = config.charges
        self.domain_env = build_environment(
            domain.llm_training, self.game, train, collusive, exploiters, charges, "language-model training"
        )
        if config.method == "advantage-alignment" and not offers(self.domain_env, "joint_advantages"):
            raise SepoError(f"game {config.game!r} gives no per-round advantages of both players; "
                            "advantage-alignment trains in games whose environment does")
        self.talk = None
        if config.talk:
            from sepo.games.talk import special_tokens_of

            self.talk = TrainingTalk(self.domain_env, config.talk_injection, special_tokens_of(self))
        self.solver = self.domain_env.solver
        self.scale = self.game.payoff_scale
        self.canonical = self.solver.decisions()
        self.row_contexts = self._row_contexts()
        self.last_step_metrics: dict = {}
        self.accelerator = None

    def training_decision(self, context, rng: np.random.Generator):
        """The prompt a context is shown as: the domain's decision, with the opponent's message
        of the round under `--talk`."""
        if self.talk is not None:
            return self.talk.decision(context, rng)
        return self.domain_env.training_decision(context, rng)

    def _focus(self, rng: np.random.Generator, count: int | None) -> None:
        """An environment with too many information states to read every step (`focus`, see
        `sepo.training.environment`) names the ones a step needs; read the model at those."""
        focus = getattr(self.domain_env, "focus", None)
        if callable(focus) and focus(rng, count):
            self.solver = self.domain_env.solver
            self.canonical = self.solver.decisions()
            self.row_contexts = self._row_contexts()

    def _row_contexts(self) -> list[list]:
        """Training contexts at each information state (row of the solver's decisions), met by
        playing the legal-uniform table against the train pool: the hidden states at which the
        played policy is read (a row never met is read at its canonical decision)."""
        table = np.zeros((len(self.canonical), max(len(d.legal_actions) for d in self.canonical)))
        for i, d in enumerate(self.canonical):
            table[i, : len(d.legal_actions)] = 1 / len(d.legal_actions)
        contexts = self.domain_env.sample_contexts(table, 32 * len(self.canonical),
                                                   np.random.default_rng([self.config.seed, 0xC0E7]))
        rows: list[list] = [[] for _ in self.canonical]
        for context in contexts:
            rows[context.info_row].append(context)
        return rows

    def policy(self, model, samples: int | None = None, engine=None):
        """The model as the trainer reads it; with `engine` (TRL's vLLM engine) its sampled replies
        come from the engine (`sepo.training.vllm.VLLMPolicy`)."""
        from sepo.policies.hf import HFDecoding, HFPolicy

        c = self.config
        decoding = HFDecoding.of(c.decoding(), failure_rule="fallback", samples=samples or c.table_samples,
                                 seed=c.seed, exact_tolerance=max(EXACT_REST, c.answer_rest))
        if engine is not None:
            from sepo.training.vllm import VLLMPolicy

            return VLLMPolicy(model, self.game.text, mode="sample", decoding=decoding,
                              tokenizer=self.tokenizer, device=None, engine=engine)
        return HFPolicy(model, self.game.text, mode="sample", decoding=decoding, tokenizer=self.tokenizer,
                        device=None)

    def played_policy(self, policy, samples: int, rng: np.random.Generator) -> PolicyEstimate:
        """The policy the model plays in training: at each information state, the distribution of
        the action of `samples` replies at training prompts (drawn from that state's contexts),
        under the configured decoding, unparsable replies playing the fallback action."""
        prompts = []
        for decision, contexts in zip(self.canonical, self.row_contexts):
            if not contexts:
                prompts.append([decision] * samples)
                continue
            picks = rng.integers(len(contexts), size=samples)
            prompts.append([self.training_decision(contexts[k], rng) for k in picks])
        return policy.estimate(self.canonical, prompts=prompts)

    def table_metrics(self, table: np.ndarray) -> dict:
        """The solver's values at the model's table. A model reads the whole history it is shown,
        so where the solver's states keep fewer rounds the value is its projection's
        (`projection_memory` in the metrics), neither an upper nor a lower bound on its own."""
        result = self.solver.evaluate(table)
        memory = getattr(self.solver, "kept_memory", None)
        if memory is not None:
            result = as_projection(result, memory)
        return {result.value_name: result.value, "exact_value": result.value_name, **result.extra,
                **self.domain_env.exact_metrics(table)}

    def measure(self, model) -> dict:
        """Exact metrics of the model's played policy (`played_policy` with `final_samples`
        replies per state), with the interval of the solver's value when it is estimated."""
        c = self.config
        self._focus(np.random.default_rng([c.seed, 0xF0C5]), None)
        estimate = self.played_policy(self.policy(model, c.final_samples), c.final_samples,
                                      np.random.default_rng([c.seed, 0xF17A1]))
        table = estimate.table()
        metrics = self.table_metrics(table)
        name = self.solver.value_name
        if estimate.exact:
            low = high = metrics[name]
        else:
            values = np.array([self.solver.evaluate(t).value for t in estimate.resample(1000, c.seed)])
            low, high = boundary_interval(metrics[name], values)
        return {**metrics, f"{name}_ci": [low, high], "table": table.tolist(), "policy": estimate.label,
                "failure_rule": "fallback", "decoding": c.decoding().record()}

    def charge(self, table: np.ndarray) -> np.ndarray:
        """`[states, actions]`: the exploitability charge of one completion, the attribution of
        the gap at `table` divided by the probability that a drawn decision is at the state times
        the rounds its payoff to go can span, ρ(I)/T (module doc: one objective with the tabular
        trainer)."""
        per_decision = self.domain_env.training_reach(table) / self.domain_env.rounds_per_rollout
        return exploitation_attribution(table, self.solver.gradient(table), per_decision)

    def played_action(self, decision, completion) -> tuple[int, bool]:
        """(the action a completion plays, whether it parsed): its parsed action, else the
        domain's fallback action, the one the played-policy table gives that reply."""
        parsed = parse_reply(self.game.text, Reply(completion.text, completion.finished), decision)
        return (parsed.action, True) if parsed.ok else (fallback_action(self.game.text, decision), False)

    def completion_terms(
        self, table, charge, context, decision, action: int
    ) -> tuple[float, float, float, float]:
        """(U, E, C, X) of a completion that plays `action` at `context`: the domain's exact payoff
        to go and events, and the charge of its (state, action)."""
        utility, collusion, externality = self.domain_env.outcome(table, context, decision, action)
        return (
            utility,
            float(charge[context.info_row, decision.legal_actions.index(action)]),
            collusion,
            externality,
        )

    def rollout(self, prompts: list, trainer) -> dict:
        c = self.config
        step = trainer.state.global_step
        self._focus(np.random.default_rng([c.seed, step, 0xF0C5]), c.groups)
        engine = getattr(trainer, "vllm_generation", None) if c.vllm else None  # weights synced by TRL
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        policy = self.policy(unwrapped, engine=engine) if engine is not None else self.policy(unwrapped)
        estimate = self.played_policy(policy, c.table_samples, np.random.default_rng([c.seed, step, 0x7AB1E]))
        table = estimate.table()
        charge = self.charge(table)

        # Everything a group shares is keyed by (seed, step, prompt), never by position in this
        # process's slice: TRL may split one group across processes.
        group_keys = list(dict.fromkeys(prompts))
        candidates = self.domain_env.sample_contexts(
            table, 4 * c.groups + 8, np.random.default_rng([c.seed, step, 0x5E90])
        )
        chosen, decisions = {}, {}
        before = dict(self.talk.counts) if self.talk is not None else {}
        for key in group_keys:
            rng = np.random.default_rng([c.seed, step, zlib.crc32(key.encode())])
            chosen[key] = candidates[int(rng.integers(len(candidates)))]
            decisions[key] = self.training_decision(chosen[key], rng)

        prompt_ids = [policy.prompt_ids(decisions[p]) for p in prompts]
        seed = int(
            np.random.default_rng([c.seed, step, trainer.accelerator.process_index, 0x6E4]).integers(2**31)
        )
        completions = [group[0] for group in policy.generate(prompt_ids, 1, seed=seed)]  # the same decoding
        logprobs = policy.last_logprobs if engine is not None else None  # for TRL's importance sampling

        fields = {
            k: [] for k in ("utility", "exploit", "collusion", "externality", "invalid", "group", "alignment")
        }
        for prompt, completion in zip(prompts, completions):
            context, decision = chosen[prompt], decisions[prompt]
            action, ok = self.played_action(decision, completion)
            utility, exploit, collusion, externality = self.completion_terms(
                table, charge, context, decision, action
            )
            fields["utility"].append(utility)
            fields["exploit"].append(exploit)
            fields["collusion"].append(collusion)
            fields["externality"].append(externality)
            fields["invalid"].append(float(not ok))
            fields["group"].append(group_keys.index(prompt))
            fields["alignment"].append(self.alignment(table, context, action))
        self.last_step_metrics = {
            "step": step, **self.table_metrics(table),
            "invalid_rate": _global_mean(trainer.accelerator, fields["invalid"]), "table": table.tolist(),
            "policy": estimate.label,
            **({"answer_lines_rest": policy.exact_rest} if c.answer_rest else {}),
        }  # the policy this step's rollouts were drawn from (before its update)
        if self.talk is not None:  # this step's groups: how many prompts carried an injected message
            self.last_step_metrics.update(
                {f"talk_{k}": self.talk.counts[k] - before[k] for k in ("prompts", "injected")}
            )
        # TRL averages and logs its `_metrics` (to metrics.jsonl, the console and --report-to backends)
        for name in (self.solver.value_name, "utility_exact", "invalid_rate"):
            if name in self.last_step_metrics:
                trainer._metrics["train"][f"sepo/{name}"].append(self.last_step_metrics[name])
        self.accelerator = trainer.accelerator
        return {"prompt_ids": prompt_ids, "completion_ids": [list(x.completion_ids) for x in completions],
                "logprobs": logprobs, **fields}

    def alignment(self, table: np.ndarray, context, action: int) -> float:
        """Advantage Alignment's term of a completion that plays `action` at `context` (0 under
        `sepo`): β · Σ_{k<t} γ^{t−k} s·A^1_k · s·A^2_t with the agent's exact advantages of its past
        rounds' joint moves (credited) and the opponent's exact expected advantage of `action`, in
        units of the match's return, as the completion's payoff to go is (T times the tabular
        trainer's per-decision term, whose U is per round: the same expected update)."""
        c = self.config
        if c.method != "advantage-alignment":
            return 0.0
        past, other = self.domain_env.alignment_advantages(table, context, action)
        own = np.append(self.scale * np.asarray(past, dtype=float), 0.0)[None]
        opponent = np.zeros_like(own)
        opponent[0, -1] = self.scale * other
        return float(alignment_term(own, opponent, c.aa_beta, c.aa_gamma)[0, -1])

    def reward(
        self,
        prompts,
        completions,
        utility,
        exploit,
        collusion,
        externality,
        invalid,
        group,
        alignment=None,
        **kwargs,
    ) -> list[float]:
        """The SEPO reward of each completion (`sepo_rewards`), less the invalid penalty, plus the
        Advantage Alignment term under that method: TRL centres it within the group with the
        reward, which only subtracts the group's mean term, a baseline. `shuffled` permutes the
        charges within each group (of this process's completions) by a generator keyed by (seed,
        step, process)."""
        c = self.config
        groups = np.unique(np.asarray(group), return_inverse=True)[1]
        process = self.accelerator.process_index if self.accelerator is not None else 0
        shuffle = np.random.default_rng([c.seed, self.last_step_metrics.get("step", 0), process, 0x5F1E])
        rewards = sepo_rewards(
            utility, exploit, collusion, externality, groups, c.lambdas, self.scale, c.penalty, rng=shuffle
        )
        rewards = rewards - c.invalid_penalty * np.asarray(invalid, dtype=float)
        if alignment is not None:
            rewards = rewards + np.asarray(alignment, dtype=float)
        self.last_step_metrics["reward_mean"] = _global_mean(self.accelerator, rewards)
        return [float(r) for r in rewards]


def _global_mean(accelerator, values) -> float:
    """Mean over every process's values (a collective: all processes call it at the same point)."""
    import torch

    local = torch.as_tensor(np.asarray(values, dtype=np.float64), device=accelerator.device)
    return float(accelerator.gather(local).mean())


def run_llm_sepo(
    config: LLMSEPOConfig, out: str | Path, *, overwrite: bool = False, part_of: str | None = None,
    measure: bool = True,
) -> dict:
    """Train (resuming from the latest TRL checkpoint in `out/trainer`) and save `out/model`; a
    finished run is read, never trained further. Stages and steps are reported to `sepo.progress`.
    `measure`: read the saved model's played policy at `final_samples` replies per state into the
    summary (an experiment cell, which audits each checkpoint on its own episodes, leaves it out:
    thousands of replies at every checkpoint in the larger games)."""
    config.validate()  # bad settings are one line, before the training libraries load
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback

    from sepo import progress
    from sepo.policies.hf import load_hf_model
    from sepo.training.sft import (
        check_same_model,
        checkpoint_note,
        finished_checkpoint,
        library_warnings,
        quiet_library_progress,
        resume_point,
        run_files_callback,
        save_final_model,
    )
    from sepo.training.shared_prompt import trainer_class

    config.validate()
    out = check_out_path(out)
    quiet_library_progress()
    model_dir = Path(config.model).expanduser()
    settings = {
        "policy": "hf",
        **config.settings(),
        **({"model": str(model_dir.resolve())} if model_dir.is_dir() else {}),
    }
    args = _grpo_args(config, out)
    main_process = args.process_index == 0  # only process 0 writes run files; all of them read
    from sepo.policies.specs import check_model_source
    from sepo.runs import check_inputs_outside

    check_model_source(config.model)  # before the run folder is opened: --overwrite removes the old run first
    check_inputs_outside(
        out, {"the model of --policy": config.model} if model_dir.exists() else {}, overwrite=overwrite
    )
    # the learning rate is constant and every draw is keyed by (seed, step): a finished run may grow
    with open_run(
        out,
        "train",
        settings,
        overwrite=overwrite,
        writer=main_process,
        extendable=("steps",),
        part_of=part_of,
    ) as run:
        if run.finished:  # read, never rewritten
            summary = read_summary(run)
            run.finished_output("model")
            read_run_config(run)
            if summary.get("steps") != config.steps:
                raise SepoError(
                    f"{out}: the run is marked finished at {config.steps} steps but its model has "
                    f"{summary.get('steps')} (an extension resumed by an earlier sepo could end so); "
                    "train it again into a fresh folder"
                )
            return {**summary, "extended_from": None, "already_complete": True}
        check_same_model(run, out, config.model, "the model of --policy")
        progress.stage(f"loading the model {config.model}")
        model, tokenizer, _ = load_hf_model(config.model, None, device=str(args.device), dtype="float32")
        if getattr(config, "_fitted_final", False):
            progress.note(f"the final read samples {config.final_samples:,} replies per information state "
                          f"(not {DEFAULT_SAMPLES:,}: the most the read limit allows here; a wider "
                          "interval); --final-samples sets it")
        checkpointing = gradient_checkpointing(config, model)
        # transformers 5 renames the second
        for name in ("activation_checkpointing", "gradient_checkpointing"):
            if hasattr(args, name):
                setattr(args, name, checkpointing)
        run.write_json("config.json", {**settings, **({"talk_note": TALK_NOTE} if config.talk else {})})
        log = MetricsLog(run.path("metrics.jsonl"))
        run.path("trainer")
        resume_step = resume_point(run, out / "trainer", progress.stage)
        done_at = (
            finished_checkpoint(out / "trainer", config.steps) if run.resumed and not run.extended else None
        )
        kept = (
            log.truncate_after(resume_step if resume_step is not None else -1, one_per_step=True)
            if main_process
            else []
        )
        env = SEPOEnvironment(config, tokenizer, log)

        def sepo_reward(prompts, completions, **kwargs):
            return env.reward(prompts, completions, **kwargs)

        class _Log(TrainerCallback):
            """One line per step (logging_steps = 1). A second log at a step already written is
            TRL's end-of-training summary (run time, mean loss): not a step, so not a line."""

            last = kept[-1]["step"] if kept else -1

            def on_log(self, args, state, control, logs=None, **kwargs):
                if not state.is_world_process_zero or state.global_step <= self.last:
                    return
                record = {
                    **env.last_step_metrics,
                    **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))},
                }
                record["step"] = self.last = state.global_step
                log.append(record)

        prompts = [json.dumps({"group": i}) for i in range(config.steps * config.groups)]
        peft_config = None
        if config.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=config.lora_r,
                lora_alpha=2 * config.lora_r,
                lora_dropout=0.0,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                task_type="CAUSAL_LM",
            )
        with library_warnings(), progress.counting("training steps", config.steps) as advance:
            steps = _StepProgress(advance, resume_step or 0)
            # a line; the status keeps the current step
            files = run_files_callback(run, on_checkpoint=checkpoint_note)
            trainer = trainer_class()(
                model=model,
                reward_funcs=sepo_reward,
                args=args,
                train_dataset=Dataset.from_dict({"prompt": prompts}),
                processing_class=tokenizer,
                rollout_func=env.rollout,
                peft_config=peft_config,
                callbacks=[_Log(), files, steps.callback()],
            )
            trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; metrics.jsonl keeps them
            # killed after its last step, before the model was saved: nothing to train
            if done_at is not None:
                progress.stage(f"training had finished at {done_at.name}; loading it")
                with quiet_tied_weights(trainer.model):
                    trainer._load_from_checkpoint(str(done_at))
                trainer.state = type(trainer.state).load_from_json(str(done_at / "trainer_state.json"))
            else:
                progress.stage(
                    "training" + (f" from checkpoint-{resume_step}" if resume_step is not None else "")
                )
                with quiet_tied_weights(trainer.model):
                    trainer.train(resume_from_checkpoint=None if resume_step is None
                                  else str(out / "trainer" / f"checkpoint-{resume_step}"))
        # never a model of fewer (or more) steps labelled as this run's
        if trainer.state.global_step != config.steps:
            raise RuntimeError(
                f"training ended at step {trainer.state.global_step}, not at the run's {config.steps} steps; "
                f"the run in {out} is left unfinished"
            )
        accelerator = trainer.accelerator
        target = out / "model"
        if accelerator.is_main_process:
            progress.stage(f"saving the model to {target}")
            with run.staged("model") as tmp:
                save_final_model(trainer.model, tokenizer, tmp)
        accelerator.wait_for_everyone()
        final = {"measured": False}
        if measure:
            progress.stage("measuring the trained model's played policy")
            final = env.measure(accelerator.unwrap_model(trainer.model))
        summary = {
            "model": str(target),
            "steps": trainer.state.global_step,
            **{k: v for k, v in final.items() if k != "table"},
        }
        if accelerator.is_main_process:
            if measure:
                log.append({"step": trainer.state.global_step, "final": True, **final})
            run.write_json("summary.json", summary)
            run.complete()
        accelerator.wait_for_everyone()
    return {**summary, "extended_from": run.extended.get("steps", (None,))[0], "already_complete": False}


class _StepProgress:
    """Training steps to a `sepo.progress` counter (starting at a resumed run's checkpoint)."""

    def __init__(self, advance, start: int):
        self.advance, self.start = advance, start
        if start:
            advance(start)

    def callback(self):
        from transformers import TrainerCallback

        outer = self

        class Steps(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.is_world_process_zero:
                    outer.advance(1)

        return Steps()


def gradient_checkpointing(config: LLMSEPOConfig, model) -> bool:
    """TRL's default (on, which saves memory and recomputes the forward in the backward pass),
    except on a CPU where the loss can encode each group's prompt once: that path needs the KV
    cache checkpointing drops, its activations are those of the prompts alone, and compute is
    what a CPU is short of."""
    from sepo.training.shared_prompt import usable

    return not (config.use_cpu and usable(model))


def _grpo_args(config: LLMSEPOConfig, out: Path):
    from trl import GRPOConfig

    from sepo.training.sft import library_warnings
    from sepo.training.vllm import grpo_arguments

    with library_warnings():  # TRL's config itself reads a deprecated transformers field
        args = GRPOConfig(
            output_dir=str(out / "trainer"),
            max_steps=config.steps,
            per_device_train_batch_size=config.groups * config.group_size,
            num_generations=config.group_size,
            learning_rate=config.learning_rate,
            optim=config.optimizer,
            beta=config.beta,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            repetition_penalty=config.repetition_penalty,
            max_completion_length=config.max_new_tokens,
            scale_rewards=config.scale_rewards,
            use_cpu=config.use_cpu,
            bf16=False,
            logging_steps=1,
            save_strategy="steps",
            save_steps=config.save_steps,
            save_total_limit=config.keep_checkpoints,
            report_to=config.report_to,
            seed=config.seed,
            dataloader_num_workers=0,
            disable_tqdm=True,
            lr_scheduler_type="constant",
            shuffle_dataset=False,
            **grpo_arguments(config),
        )
    return args

