"""Hugging Face causal LMs as sepo policies: batched scoring, batched sampling, named failure rules.

`HFPolicy` turns any chat model (a local directory, a Hub id, a PEFT adapter directory, or an
already loaded model) into a `Policy`. One decision is one stateless chat, as in the paper:
`[system: text.system_prompt(), user: text.user_prompt(decision)]`, rendered with the tokenizer's
chat template and `add_generation_prompt=True`.

Two ways to get an action distribution:

- **score** (default): for each legal action `a`, the log-probability that the assistant reply is
  `text.answer_text(decision, a)`, after a reply prefix (`score_prefix`): by default ("greedy")
  the model's own greedy reply minus its last line, i.e. its reasoning, so a model trained to
  write "reason\nACTION" is scored where it names its action (for a model that answers with the
  action alone the prefix is empty); `None` scores the answer as the whole reply; a function of
  the decision gives a fixed prefix (e.g. the SFT data's state-only reason). The
  distribution is the softmax of these scores over the legal actions. `score_normalization="sum"`
  (default) sums the answer's token log-probabilities, so the result is exactly the model's
  conditional distribution over the legal answers, P(a) ∝ P(answer_a | prompt): the right input
  for exact exploitability. `"mean"` divides by the answer's token count (length-normalised), which
  only differs when answers have different token lengths (never for Kuhn, whose four action words
  are one token each in the tiny tokenizer and in most real ones). The end-of-turn token is not
  scored: the answer is the first line of the reply. Every pending decision and every legal action
  is scored in one batched forward pass (left padding, attention mask, explicit position ids);
  when every answer is a single token, one pass over the prompts alone reads all of them.
- **sample**: `num_samples` completions per decision from `generate` (temperature, top_p, top_k,
  max_new_tokens), each parsed strictly with `text.parse`; the distribution is the frequency of
  the valid parses. If none of the samples parses, the failure rule decides (a point mass on the
  forced or fallback action, or uniform for "random-legal"), and it is counted.

`act(decisions, rng)` plays one action per decision with one batched model call: in score mode a
draw from the scored distribution; in sample mode one sampled completion per decision, parsed.
A completion that names no action, two actions or an illegal one is never turned into an action
silently: the named `failure_rule` supplies the action, the `Choice` records the parse status and
the rule, and `counts` tallies both:

- "forced": the paper's forced decoding (paper-protocol §1), batched: the reply is appended as an
  assistant turn, then a user turn "State your final action (PASS/BET):" listing the *legal*
  actions only; one forward pass; the next-token logits are masked to the first token of each
  legal action name (tokenised with and without a leading space); argmax. If two legal names share
  a first token, the full answer texts are scored in that context instead.
- "fallback": a fixed action, `fallback_action(decision)` if given, else the first legal action
  (for Kuhn: PASS when nobody bet, FOLD facing a bet; the paper's fallback is PASS).
- "random-legal": a uniformly random legal action, drawn from the `rng` passed to `act`.

Opponent text is data, never instructions: the legal set always comes from the `Decision`; the
parser only accepts legal action names; and any special-token string (e.g. `<|im_end|>`) inside
prompt or reply text is defused (a zero-width space after its first character) before templating,
so text cannot open or close chat turns.
"""
from __future__ import annotations

import contextlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, TextView
from sepo.policies.base import Choice, Policy, _sample_index

MODES = ("score", "sample")
FAILURE_RULES = ("forced", "fallback", "random-legal")
FORCED_QUESTION = "State your final action ({names}):"
"""The user turn of forced decoding; `names` = the legal action names joined by '/'."""
_ZWSP = "\u200b"


@dataclass(frozen=True)
class Completion:
    """One generated reply: token ids (completion includes the end-of-turn token if generated)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    text: str
    finished: bool


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()


def load_hf_model(
    model_or_path: Any,
    tokenizer: Any = None,
    *,
    device: str | None = None,
    dtype: Any = "auto",
    trust_remote_code: bool = False,
):
    """Load (model, tokenizer) from a local directory, a Hub id or a PEFT adapter directory, or take
    an already loaded model. Raises `SepoError` with one line naming the path when that fails, and
    when the tokenizer has no chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer_source = None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = str(model_or_path)
        local = Path(path).expanduser()
        # a Hub id is "name" or "owner/name"; anything else that does not exist is a missing directory
        looks_local = local.exists() or path.startswith((".", "/", "~")) or path.count("/") > 1 or os.sep != "/" and os.sep in path
        if looks_local and not local.is_dir():
            raise SepoError(f"cannot load Hugging Face model {path!r}: no such directory")
        source = tokenizer_source = str(local) if local.is_dir() else path
        try:
            if local.is_dir() and (local / "adapter_config.json").exists():
                from peft import AutoPeftModelForCausalLM

                model = AutoPeftModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=trust_remote_code)
                if tokenizer is None:
                    tok_source = source if (local / "tokenizer_config.json").exists() else model.peft_config[
                        "default"
                    ].base_model_name_or_path
                    tokenizer = AutoTokenizer.from_pretrained(tok_source, trust_remote_code=trust_remote_code)
            else:
                model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=trust_remote_code)
        except Exception as error:  # noqa: BLE001 - any loading failure becomes one clear line
            where = "local directory" if local.is_dir() else "not a local directory, and the Hub download failed"
            raise SepoError(f"cannot load Hugging Face model {path!r} ({where}): {_one_line(error)}") from None
        name = path
        model.eval()
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        model = model_or_path
        name = getattr(getattr(model, "config", None), "_name_or_path", None) or type(model).__name__
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        source = str(tokenizer) if tokenizer is not None else (tokenizer_source or name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        except Exception as error:  # noqa: BLE001
            raise SepoError(f"cannot load the tokenizer of {source!r}: {_one_line(error)}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise SepoError(
            f"the tokenizer of {name!r} has no chat template; sepo renders every decision as a chat "
            "(use an instruct/chat model, or set tokenizer.chat_template)"
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device is not None and getattr(model, "hf_device_map", None) is None:
        model = model.to(device)
    return model, tokenizer, name


class HFPolicy(Policy):
    """A causal LM with a chat template as a policy over a game's text view (see module doc)."""

    def __init__(
        self,
        model_or_path: Any,
        game_text: TextView,
        mode: str = "score",
        *,
        tokenizer: Any = None,
        failure_rule: str = "forced",
        fallback_action: Callable[[Decision], int] | None = None,
        num_samples: int = 8,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        repetition_penalty: float = 1.0,
        max_new_tokens: int = 64,
        score_normalization: str = "sum",
        score_prefix: Callable[[Decision], str] | str | None = "greedy",
        batch_size: int = 64,
        device: str | None = None,
        dtype: Any = "auto",
        seed: int = 0,
        name: str | None = None,
        generation_kwargs: dict | None = None,
        trust_remote_code: bool = False,
    ):
        if mode not in MODES:
            raise SepoError(f"HFPolicy: mode must be one of {', '.join(MODES)}; got {mode!r}")
        if failure_rule not in FAILURE_RULES:
            raise SepoError(f"HFPolicy: failure_rule must be one of {', '.join(FAILURE_RULES)}; got {failure_rule!r}")
        if score_normalization not in ("sum", "mean"):
            raise SepoError(f"HFPolicy: score_normalization must be 'sum' or 'mean'; got {score_normalization!r}")
        if not (isinstance(score_prefix, str) and score_prefix == "greedy" or score_prefix is None or callable(score_prefix)):
            raise SepoError("HFPolicy: score_prefix must be None, 'greedy' or a function of the decision")
        if num_samples < 1 or max_new_tokens < 1 or batch_size < 1:
            raise SepoError("HFPolicy: num_samples, max_new_tokens and batch_size must be >= 1")
        if temperature < 0 or not 0 < top_p <= 1:
            raise SepoError("HFPolicy: temperature must be >= 0 (0 = greedy) and top_p in (0, 1]")
        self.model, self.tokenizer, model_name = load_hf_model(
            model_or_path, tokenizer, device=device, dtype=dtype, trust_remote_code=trust_remote_code
        )
        self.text = game_text
        self.mode = mode
        self.failure_rule = failure_rule
        self.fallback_action = fallback_action
        self.num_samples = num_samples
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.repetition_penalty = repetition_penalty
        self.max_new_tokens = max_new_tokens
        self.score_normalization = score_normalization
        self.score_prefix = score_prefix
        self.batch_size = batch_size
        self.generation_kwargs = dict(generation_kwargs or {})
        self.name = name or f"hf:{model_name}"
        self.counts: Counter = Counter()
        self._seed = seed
        self._calls = 0
        self._prompt_cache: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._special = sorted(
            {t for t in self.tokenizer.all_special_tokens if t}
            | {t.content for t in self.tokenizer.added_tokens_decoder.values() if t.special and t.content},
            key=len,
            reverse=True,
        )
        eos = self.model.generation_config.eos_token_id if getattr(self.model, "generation_config", None) else None
        eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        self.eos_token_ids = eos

    # ------------------------------------------------------------------ prompts

    @property
    def device(self):
        return next(self.model.parameters()).device

    def defuse(self, content: str) -> str:
        """Make special-token strings inside `content` plain text (they cannot open or close turns)."""
        for token in self._special:
            if token in content:
                self.counts["defused_special_tokens"] += content.count(token)
                content = content.replace(token, token[0] + _ZWSP + token[1:])
        return content

    def messages(self, decision: Decision) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.defuse(self.text.system_prompt())},
            {"role": "user", "content": self.defuse(self.text.user_prompt(decision))},
        ]

    def render(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of `messages` with the chat template and a generation prompt."""
        key = tuple(f"{m['role']}\x00{m['content']}" for m in messages)
        cached = self._prompt_cache.get(key)
        if cached is None:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            cached = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._prompt_cache) > 4096:
                self._prompt_cache.clear()
            self._prompt_cache[key] = cached
        return list(cached)

    def prompt_ids(self, decision: Decision) -> list[int]:
        return self.render(self.messages(decision))

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    # ------------------------------------------------------------------ model calls

    def _rng_context(self, seed: int):
        import torch

        devices = [self.device.index or 0] if self.device.type == "cuda" else []

        @contextlib.contextmanager
        def ctx():
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                yield

        return ctx()

    @contextlib.contextmanager
    def _inference(self):
        """No gradients and eval mode (no dropout) for the call; the model's mode is restored, so a
        model shared with a trainer is left as the trainer set it."""
        import torch

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            if was_training:
                self.model.train()

    def _forward(self, sequences: list[list[int]], keep: int):
        """Log-softmax of the last `keep` positions of each left-padded sequence: [B, keep, V]."""
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), pad, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        ids, mask, positions = ids.to(self.device), mask.to(self.device), positions.to(self.device)
        with self._inference():
            try:
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
            except TypeError:  # a model without `logits_to_keep`
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            return torch.log_softmax(logits[:, -keep:, :].float(), dim=-1)

    def sequence_logprobs(self, prompts: list[list[int]], continuations: list[list[int]]) -> list[np.ndarray]:
        """Per-token log-probabilities of each continuation given its prompt (batched, chunked)."""
        out: list[np.ndarray] = [np.zeros(0)] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(continuations[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            longest = max(len(continuations[i]) for i in chunk)
            logp = self._forward([prompts[i] + continuations[i] for i in chunk], longest + 1)
            for row, i in enumerate(chunk):
                cont = continuations[i]
                if not cont:
                    out[i] = np.zeros(0)
                    continue
                # the token at column j is predicted by the logits at column j - 1
                span = logp[row, longest - len(cont) : longest, :]
                out[i] = span.gather(-1, _tensor(cont, span.device).unsqueeze(-1)).squeeze(-1).double().cpu().numpy()
        return out

    def next_token_logprobs(self, prompts: list[list[int]]):
        """Log-softmax of the next token after each prompt: a [B, V] tensor (batched, chunked)."""
        import torch

        rows = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            logp = self._forward([prompts[i] for i in chunk], 1)[:, -1, :]
            for row, i in enumerate(chunk):
                rows[i] = logp[row]
        return torch.stack(rows)

    def generate(
        self, prompts: list[list[int]], n: int = 1, *, greedy: bool = False, seed: int | None = None
    ) -> list[list[Completion]]:
        """`n` completions per prompt, all prompts in batched `generate` calls (left padding)."""
        import torch

        per_call = max(1, self.batch_size // n)
        do_sample = not greedy and self.temperature > 0
        kwargs = dict(
            max_new_tokens=self.max_new_tokens,
            do_sample=do_sample,
            num_return_sequences=n,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_token_ids,
            repetition_penalty=self.repetition_penalty,
        )
        if do_sample:
            kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        kwargs.update(self.generation_kwargs)
        seed = self._next_seed() if seed is None else seed
        results: list[list[Completion]] = []
        eos = set(self.eos_token_ids)
        with self._rng_context(seed):
            for start in range(0, len(prompts), per_call):
                chunk = prompts[start : start + per_call]
                width = max(len(p) for p in chunk)
                ids = torch.full((len(chunk), width), self.tokenizer.pad_token_id, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for row, p in enumerate(chunk):
                    ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                    mask[row, width - len(p) :] = 1
                with self._inference():
                    out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs)
                new = out[:, width:].cpu().tolist()
                for row, p in enumerate(chunk):
                    group = []
                    for k in range(n):
                        tokens = new[row * n + k]
                        cut = next((j for j, t in enumerate(tokens) if t in eos), None)
                        finished = cut is not None
                        tokens = tokens[: cut + 1] if finished else tokens
                        body = tokens[:-1] if finished else tokens
                        text = self.tokenizer.decode(body, skip_special_tokens=True)
                        group.append(Completion(tuple(p), tuple(tokens), text, finished))
                    results.append(group)
        return results

    def turn_ids(self, messages: list[dict[str, str]], reply: Completion, next_messages: list[dict[str, str]]) -> list[int]:
        """The token ids an environment inserts after `reply` (generated for the chat `messages`) so
        that the sequence continues as `messages + [assistant: reply.text] + next_messages` with a
        generation prompt: the end of the assistant turn (minus the end-of-turn token the model
        generated itself), the next turns, the next assistant header. For multi-turn rollouts:
        these ids get `env_mask` 0. The sampled reply ids are never re-tokenized."""
        text = self.defuse(reply.text)
        next_messages = [{**m, "content": self.defuse(m["content"])} for m in next_messages]
        render = self.tokenizer.apply_chat_template
        prompt = render(messages, tokenize=False, add_generation_prompt=True)
        closed = render(messages + [{"role": "assistant", "content": text}], tokenize=False)
        opened = render(
            messages + [{"role": "assistant", "content": text}] + next_messages, tokenize=False, add_generation_prompt=True
        )
        if not closed.startswith(prompt + text) or not opened.startswith(closed):
            raise SepoError(
                f"the chat template of {self.name!r} does not render conversations prefix-preserving; "
                "multi-turn rollouts need one (use per-decision prompts instead)"
            )
        tail = closed[len(prompt) + len(text) :]
        if reply.finished:
            end = self.tokenizer.decode(list(reply.completion_ids[-1:]))
            if tail.startswith(end):
                tail = tail[len(end) :]
        return self._ids(tail + opened[len(closed) :])

    def _next_seed(self) -> int:
        self._calls += 1
        return int(np.random.SeedSequence([self._seed, self._calls]).generate_state(1, dtype=np.uint32)[0])

    # ------------------------------------------------------------------ scoring

    def _prefixes(self, decisions: list[Decision]) -> list[str]:
        if self.score_prefix is None:
            return [""] * len(decisions)
        if callable(self.score_prefix):
            return [self.score_prefix(d) for d in decisions]
        # "greedy": the greedy reply without its last line, i.e. the model's own reasoning
        replies = self.generate([self.prompt_ids(d) for d in decisions], 1, greedy=True, seed=0)
        prefixes = []
        for group in replies:
            lines = group[0].text.rstrip().split("\n")
            prefixes.append("\n".join(lines[:-1]) + "\n" if len(lines) > 1 else "")
        return prefixes

    def action_scores(
        self, decisions: list[Decision], prompts: list[list[int]] | None = None, prefixes: list[str] | None = None
    ) -> list[np.ndarray]:
        """Score of each legal action's answer text (summed or mean log-probability), per decision,
        in one batched pass. `prompts` overrides the rendered prompts (used by forced decoding);
        `prefixes` the reply prefixes (default: from `score_prefix`)."""
        if not decisions:
            return []
        if prompts is None:
            prefixes = self._prefixes(decisions) if prefixes is None else prefixes
            prompts = [self.prompt_ids(d) + self._ids(self.defuse(p)) for d, p in zip(decisions, prefixes)]
        answers = [[self._ids(self.text.answer_text(d, a)) for a in d.legal_actions] for d in decisions]
        for d, group in zip(decisions, answers):
            if any(not ids for ids in group):
                raise SepoError(f"{self.name}: an answer text of {d.info_key!r} tokenizes to nothing")
        if all(len(ids) == 1 for group in answers for ids in group):
            logp = self.next_token_logprobs(prompts).double().cpu().numpy()
            return [np.array([logp[i, ids[0]] for ids in group]) for i, group in enumerate(answers)]
        flat_prompts = [prompts[i] for i, group in enumerate(answers) for _ in group]
        flat = self.sequence_logprobs(flat_prompts, [ids for group in answers for ids in group])
        scores, k = [], 0
        for group in answers:
            values = []
            for _ in group:
                token_logps = flat[k]
                k += 1
                values.append(token_logps.sum() / (len(token_logps) if self.score_normalization == "mean" else 1))
            scores.append(np.array(values))
        return scores

    # ------------------------------------------------------------------ failure rules

    def forced_actions(self, decisions: list[Decision], replies: list[str]) -> list[int]:
        """The paper's forced decoding, batched over every failed decision (see module doc)."""
        if not decisions:
            return []
        prompts = []
        for d, reply in zip(decisions, replies):
            messages = self.messages(d) + [
                {"role": "assistant", "content": self.defuse(reply)},
                {"role": "user", "content": FORCED_QUESTION.format(names="/".join(d.action_names))},
            ]
            prompts.append(self.render(messages))
        candidates = [[self._first_tokens(self.text.answer_text(d, a)) for a in d.legal_actions] for d in decisions]
        disjoint = all(
            sum(len(c) for c in group) == len(set().union(*group)) for group in candidates
        )
        if disjoint:
            logp = self.next_token_logprobs(prompts)
            actions = []
            for i, (d, group) in enumerate(zip(decisions, candidates)):
                best = [max(float(logp[i, t]) for t in tokens) for tokens in group]
                actions.append(d.legal_actions[int(np.argmax(best))])
            return actions
        scores = self.action_scores(decisions, prompts=prompts)
        return [d.legal_actions[int(np.argmax(s))] for d, s in zip(decisions, scores)]

    def _first_tokens(self, answer: str) -> set[int]:
        return {ids[0] for ids in (self._ids(answer), self._ids(" " + answer)) if ids}

    def _fallback(self, decision: Decision) -> int:
        action = self.fallback_action(decision) if self.fallback_action else decision.legal_actions[0]
        if action not in decision.legal_actions:
            raise SepoError(f"{self.name}: fallback action {action!r} is not legal at {decision.info_key!r}")
        return action

    def _resolve(self, failed: list[tuple[int, Decision, str]], rng: np.random.Generator | None) -> dict[int, int]:
        """Actions for failed parses by the failure rule: {index: action}."""
        if not failed:
            return {}
        if self.failure_rule == "forced":
            actions = self.forced_actions([d for _, d, _ in failed], [r for _, _, r in failed])
        elif self.failure_rule == "fallback":
            actions = [self._fallback(d) for _, d, _ in failed]
        else:
            if rng is None:
                rng = np.random.default_rng(self._next_seed())
            actions = [d.legal_actions[int(rng.integers(len(d.legal_actions)))] for _, d, _ in failed]
        return {i: a for (i, _, _), a in zip(failed, actions)}

    def _parse(self, reply: str, decision: Decision):
        result = self.text.parse(reply, decision)
        if result.ok and result.action not in decision.legal_actions:  # a parser bug must not become an action
            return "illegal", None
        return result.status, result.action

    # ------------------------------------------------------------------ Policy protocol

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        return self.batch_action_probabilities([decision])[0]

    def batch_action_probabilities(self, decisions: list[Decision]) -> list[dict[int, float]]:
        if not decisions:
            return []
        if self.mode == "score":
            return self._scored(decisions, self._prefixes(decisions))
        samples = self.generate([self.prompt_ids(d) for d in decisions], self.num_samples)
        out, failed = [], []
        for i, (d, group) in enumerate(zip(decisions, samples)):
            tally = Counter()
            first_bad = None
            for completion in group:
                status, action = self._parse(completion.text, d)
                self.counts[f"sample.{status}"] += 1
                if status == "ok":
                    tally[action] += 1
                elif first_bad is None:
                    first_bad = completion.text
            total = sum(tally.values())
            if total:
                out.append({a: tally[a] / total for a in d.legal_actions})
            else:
                out.append(None)
                failed.append((i, d, first_bad or ""))
        if failed:
            self.counts[f"sample.all_invalid.rule.{self.failure_rule}"] += len(failed)
            if self.failure_rule == "random-legal":
                for i, d, _ in failed:
                    out[i] = {a: 1.0 / len(d.legal_actions) for a in d.legal_actions}
            else:
                for i, action in self._resolve(failed, None).items():
                    out[i] = {a: float(a == action) for a in decisions[i].legal_actions}
        return out

    def _scored(self, decisions: list[Decision], prefixes: list[str]) -> list[dict[int, float]]:
        out = []
        for d, scores in zip(decisions, self.action_scores(decisions, prefixes=prefixes)):
            probs = np.exp(scores - scores.max())
            probs /= probs.sum()
            out.append({a: float(p) for a, p in zip(d.legal_actions, probs)})
        return out

    def act(self, decisions: list[Decision], rng: np.random.Generator) -> list[Choice]:
        """One action per decision, one batched model call (plus one for forced decoding)."""
        if not decisions:
            return []
        self.counts["act.decisions"] += len(decisions)
        if self.mode == "score":
            choices = []
            prefixes = self._prefixes(decisions)
            for d, prefix, probs in zip(decisions, prefixes, self._scored(decisions, prefixes)):
                weights = np.array([probs[a] for a in d.legal_actions])
                action = d.legal_actions[_sample_index(weights, rng)]
                choices.append(Choice(action, prefix + self.text.answer_text(d, action), "ok", None))
            self.counts["act.ok"] += len(choices)
            return choices
        seed = int(rng.integers(2**63 - 1))
        replies = [g[0].text for g in self.generate([self.prompt_ids(d) for d in decisions], 1, seed=seed)]
        parsed = [self._parse(r, d) for r, d in zip(replies, decisions)]
        failed = [(i, d, r) for i, (d, r, (status, _)) in enumerate(zip(decisions, replies, parsed)) if status != "ok"]
        resolved = self._resolve(failed, rng)
        choices = []
        for i, (d, reply, (status, action)) in enumerate(zip(decisions, replies, parsed)):
            self.counts[f"act.{status}"] += 1
            if status == "ok":
                choices.append(Choice(action, reply, "ok", None))
            else:
                self.counts[f"act.rule.{self.failure_rule}"] += 1
                choices.append(Choice(resolved[i], reply, status, self.failure_rule))
        return choices

    # ------------------------------------------------------------------ bookkeeping

    def invalid_rate(self) -> float:
        """Fraction of `act` decisions whose reply did not parse (0 when none were played)."""
        n = self.counts["act.decisions"]
        return 0.0 if n == 0 else 1.0 - self.counts["act.ok"] / n

    def reset_counts(self) -> None:
        self.counts.clear()


def policy_table(policy: Policy, decisions: Sequence[Decision]) -> np.ndarray:
    """`[len(decisions), max legal actions]` probabilities, columns in legal-action order, from one
    batched call."""
    rows = policy.batch_action_probabilities(list(decisions))
    width = max(len(d.legal_actions) for d in decisions)
    table = np.zeros((len(decisions), width))
    for r, (d, probs) in enumerate(zip(decisions, rows)):
        for c, a in enumerate(d.legal_actions):
            table[r, c] = probs[a]
    return table


def _tensor(values: Iterable[int], device):
    import torch

    return torch.tensor(list(values), dtype=torch.long, device=device)
