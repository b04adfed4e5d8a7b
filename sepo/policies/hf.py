"""Hugging Face causal LMs as sepo policies: batched replies, exact scoring, named failure rules.

`HFPolicy` turns any chat model (a local directory, a Hub id, a PEFT adapter directory, or an
already loaded model) into a `Policy`. One decision is one stateless chat, as in the paper:
`[system: text.system_prompt(), user: text.user_prompt(decision)]`, rendered with the tokenizer's
chat template and `add_generation_prompt=True` (template options such as `enable_thinking` come
from the `Decoding`).

How the model decides is one value, an `HFDecoding`: a `Decoding` (temperature, top-p, top-k,
repetition penalty, max new tokens) with the settings that read the played action from the
replies (replies per state, failure rule, re-prompts, the exact read's tolerance, the seed, and
the constrained player's scoring). The constructor takes it beside what says which model, on
which device, in batches of what size.

Two modes:

- **sample** (default): the model plays by writing a reply under its decoding. It is a
  `ReplySource` and a `TextPolicy` (`sepo.policies.text_policy`): the reply is parsed strictly
  (cut-off replies are `truncated`), a failure is counted and resolved by the named failure rule,
  and its policy is the distribution of the played action at the prompts it meets: exact under
  greedy decoding, or when the model's replies are the answer line alone (`exact_distribution`:
  the answer's tokens and the turn's real end token scored under the decoding's logits processors
  cover all but `exact_tolerance` of the probability); otherwise estimated from `samples` replies
  per state, with counts for intervals.
- **score**: a constrained player. For each legal action `a` it scores the log-probability that
  the reply is `text.answer_text(decision, a)` after a reply prefix (`score_prefix`: by default the
  model's own greedy reply minus its last line; `None` for no prefix; or a function of the
  decision), and plays a draw from the softmax of these scores, writing prefix + answer. What it
  plays is that distribution, so it is exact; it is a different agent from the sampling one.
  `score_normalization="mean"` divides by the answer's token count.

Failure rules (a reply that names no action, two actions or an illegal one, or is truncated):
- "forced": the paper's forced decoding (docs/paper-protocol.md §1), batched: the model is asked for its
  final action among the legal ones after its reply, and the legal action it ranks first plays
  (`sepo.policies.hf_forced`).
- "fallback": a fixed action, `fallback_action(decision)` if given, else the domain's
  (`text_policy.fallback_action`: its text view's rule where it has one, else the first legal
  action), the one SEPO training plays for a reply that does not parse.
- "random-legal": a uniformly random legal action.
- "reprompt": one short correction turn after the failed reply, and the model replies again in
  the same chat, up to `reprompts` times; still failing, the fallback action (`text_policy`).

End of turn: generation stops at the model's declared end tokens plus the chat template's
end-of-turn token (`turn_end_ids`, read from the template: Gemma's `<end_of_turn>`, ChatML's
`<|im_end|>`); a reply that stops at the token limit instead is `truncated`. Scoring a whole reply
uses the template's end-of-turn token, never an unrelated `eos_token`.

Opponent text is data, never instructions: the legal set always comes from the `Decision`; the
parser only accepts legal action names; and any special-token string (e.g. `<|im_end|>`) inside
prompt or reply text is defused (a zero-width space after its first character) before templating,
so text cannot open or close chat turns.

The parts, one module each: loading the model (`hf_loading`), sampling replies (`hf_sampling`),
exact reads and scoring (`hf_exact`) and forced decoding (`hf_forced`); this module holds the
decoding, the prompts, and the policy that joins them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Callable, Sequence

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, TextView
from sepo.policies.base import Choice, Policy, _sample_index
from sepo.policies.hf_exact import ExactReads
from sepo.policies.hf_forced import FORCED_QUESTION, ForcedDecoding
from sepo.policies.hf_loading import (
    check_prompt_room,
    check_reply_length,
    check_tokenizer_fits,
    context_length,
    load_hf_model,
)
from sepo.policies.hf_sampling import Completion, Sampling
from sepo.policies.replies import Decoding
from sepo.policies.text_policy import (
    DEFAULT_REPROMPTS,
    DEFAULT_SAMPLES,
    EXACT_REST,
    FAILURE_RULES,
    PolicyEstimate,
    TextPolicy,
    check_reprompts,
)

__all__ = ["EXACT_TOLERANCE", "FORCED_QUESTION", "MODES", "Completion", "HFDecoding", "HFPolicy",
           "check_prompt_room", "check_reply_length", "check_tokenizer_fits", "context_length",
           "load_hf_model", "policy_table"]

MODES = ("sample", "score")
EXACT_TOLERANCE = EXACT_REST
"""Reply probability an exact read leaves unscored by default (`text_policy.EXACT_REST`). A
larger `exact_tolerance` reads a model whose answer lines cover all but that share, the rest
played by the failure rule (or renormalised away where the rule needs the reply) and the estimate
labelled with it (`PolicyEstimate.rest`)."""
_ZWSP = "\u200b"


@dataclass(frozen=True)
class HFDecoding(Decoding):
    """How a local model decides, in one value: how its replies are generated (the `Decoding`
    every text agent shares) and how the action it plays is read from them."""

    samples: int = DEFAULT_SAMPLES
    """Replies per state where the played policy is estimated from sampled replies."""
    failure_rule: str = "forced"
    """What plays for a reply that does not parse (`text_policy.FAILURE_RULES`)."""
    reprompts: int = DEFAULT_REPROMPTS
    """Correction turns per failed reply under the `reprompt` rule."""
    exact_tolerance: float = EXACT_TOLERANCE
    """Reply probability an exact read may leave to replies other than the answer lines (the
    trainer's `answer_rest`)."""
    seed: int = 0
    """Seeds every sampled reply: the same seed, the same replies."""
    score_normalization: str = "sum"
    """The constrained player's (and forced decoding's) score of an answer: its summed
    log-probability, or "mean" per token."""
    score_prefix: Callable[[Decision], str] | str | None = "greedy"
    """The reply prefix the constrained player scores answers after: "greedy" (the model's own
    greedy reply minus its last line), None, or a function of the decision."""

    def __post_init__(self):
        super().__post_init__()
        if self.failure_rule not in FAILURE_RULES:
            raise SepoError(f"HFPolicy: failure_rule must be one of {', '.join(FAILURE_RULES)}; "
                            f"got {self.failure_rule!r}")
        if self.score_normalization not in ("sum", "mean"):
            raise SepoError("HFPolicy: score_normalization must be 'sum' or 'mean'; "
                            f"got {self.score_normalization!r}")
        prefix = self.score_prefix
        if not (isinstance(prefix, str) and prefix == "greedy" or prefix is None or callable(prefix)):
            raise SepoError("HFPolicy: score_prefix must be None, 'greedy' or a function of the decision")
        if self.samples < 1:
            raise SepoError("HFPolicy: samples must be >= 1")
        check_reprompts(self.reprompts)

    @classmethod
    def of(cls, decoding: Decoding | None = None, **settings) -> HFDecoding:
        """`decoding` (a plain `Decoding`, read with the default settings, or an `HFDecoding`; None:
        the default decoding) with `settings` in place of its own."""
        base = cls() if decoding is None else decoding
        return cls(**{**{f.name: getattr(base, f.name) for f in fields(base)}, **settings})

    @property
    def generation(self) -> Decoding:
        """The reply-generation settings alone, as every text agent has them."""
        return Decoding(**{f.name: getattr(self, f.name) for f in fields(Decoding)})

    def record(self) -> dict:
        """The decoding as it goes into every result file: the generation settings (the reading
        settings are recorded with the policy's estimate: replies per state, failure rule)."""
        return self.generation.record()


class HFPolicy(ForcedDecoding, ExactReads, Sampling, TextPolicy):
    """A causal LM with a chat template as a policy over a game's text view (see module doc).

    `decoding` is how it decides: an `HFDecoding`, or a plain `Decoding` read with the default
    settings (forced decoding, `DEFAULT_SAMPLES` replies per state, seed 0); None is
    `HFDecoding()`. The other arguments say which model (`model_or_path`, `tokenizer`,
    `trust_remote_code`), where (`device`, `dtype`), in batches of what size (`batch_size`), under
    which name, where a re-run resumes from (`reply_cache`), the `fallback_action` of the failure
    rules that play one, and extra keywords for `generate` (`generation_kwargs`)."""

    prefix_sharing = True
    """Encode each prefix shared by an exact read's sequences, or by a batch's prompts before
    sampling, once (`sepo.policies.prefix_cache`); False re-encodes every sequence (the reference
    the tests and benchmarks compare with)."""

    def __init__(
        self,
        model_or_path: Any,
        game_text: TextView,
        mode: str = "sample",
        *,
        decoding: Decoding | None = None,
        tokenizer: Any = None,
        fallback_action: Callable[[Decision], int] | None = None,
        batch_size: int = 64,
        device: str | None = None,
        dtype: Any = "auto",
        trust_remote_code: bool = False,
        name: str | None = None,
        reply_cache: str | os.PathLike | None = None,
        generation_kwargs: dict | None = None,
    ):
        if mode not in MODES:
            raise SepoError(f"HFPolicy: mode must be one of {', '.join(MODES)}; got {mode!r}")
        if batch_size < 1:
            raise SepoError("HFPolicy: batch_size must be >= 1")
        decoding = decoding if isinstance(decoding, HFDecoding) else HFDecoding.of(decoding)
        self.model, self.tokenizer, model_name = load_hf_model(
            model_or_path, tokenizer, device=device, dtype=dtype, trust_remote_code=trust_remote_code
        )
        check_reply_length(decoding.max_new_tokens, self.model, f"model {model_name!r}")
        self.model_name = f"model {model_name!r}"
        thinking = decoding.enable_thinking
        if thinking is not None and "enable_thinking" not in str(self.tokenizer.chat_template):
            raise SepoError(f"--{'' if thinking else 'no-'}thinking: the chat template of model "
                            f"{model_name!r} does not read enable_thinking, so the switch would change "
                            "nothing")
        self.text = game_text
        self.mode = mode
        self.decoding = decoding
        self.exact_tolerance = decoding.exact_tolerance
        self.exact_rest = 0.0
        """The largest reply probability the last `exact_distribution` found left to replies other
        than answer lines (where it refused the read: at the prompts it read before refusing)."""
        self.score_normalization = decoding.score_normalization
        self.score_prefix = decoding.score_prefix
        self.batch_size = batch_size
        self.generation_kwargs = dict(generation_kwargs or {})
        self.name = name or f"hf:{model_name}"
        super().__init__(failure_rule=decoding.failure_rule, fallback_action=fallback_action,
                         samples=decoding.samples, seed=decoding.seed, reprompts=decoding.reprompts)
        self._seed = decoding.seed
        self._calls = 0
        self.encoded_tokens = 0
        """Tokens the exact reads have encoded so far (what prefix sharing saves is visible here)."""
        self.prefill_tokens = 0
        """Prompt tokens encoded before sampling with prefix sharing (`generate`)."""
        self._prompt_cache: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._special = sorted(
            {t for t in self.tokenizer.all_special_tokens if t}
            | {t.content for t in self.tokenizer.added_tokens_decoder.values() if t.special and t.content},
            key=len,
            reverse=True,
        )
        self.turn_end_ids = self._template_turn_end()
        eos = self._declared_eos()
        for token in [*self.turn_end_ids, self.tokenizer.eos_token_id]:
            if token is not None and token not in eos:
                eos.append(token)
        self.eos_token_ids = eos
        self.batch_cache = None
        """Where generated batches and forced-decoding answers are kept, so a re-run resumes
        (`sepo.policies.batch_cache`); None keeps nothing."""
        if reply_cache is not None:
            from sepo.policies.batch_cache import BatchCache

            self.batch_cache = BatchCache(reply_cache, self.model, model_name)

    @property
    def temperature(self) -> float:
        return self.decoding.temperature

    @property
    def max_new_tokens(self) -> int:
        return self.decoding.max_new_tokens

    def _template_turn_end(self) -> list[int]:
        """The token the chat template puts right after an assistant reply (the end of the turn
        the model is trained to write: `<end_of_turn>` for Gemma, `<|im_end|>` for ChatML). Falls
        back to the model's declared eos tokens when the template shows none."""
        marker = "\u2063sepo\u2063"
        try:
            chat = [{"role": "user", "content": "x"}, {"role": "assistant", "content": marker}]
            text = self._apply_template(chat, False)
        except Exception:  # noqa: BLE001 - templates that refuse this conversation: no template end
            text = ""
        tail = text.split(marker, 1)[1] if marker in text else ""
        ids = self._ids(tail.lstrip(" ")) if tail.strip() else []
        special = set(self.tokenizer.all_special_ids)
        if ids and ids[0] in special:
            return [ids[0]]
        eos = self._declared_eos()
        return eos or ([self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else [])

    def _declared_eos(self) -> list[int]:
        """The end tokens the model's generation config declares."""
        config = getattr(self.model, "generation_config", None)
        eos = config.eos_token_id if config else None
        return [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))

    def _apply_template(self, messages, add_generation_prompt: bool) -> str:
        thinking = self.decoding.enable_thinking
        extra = {} if thinking is None else {"enable_thinking": thinking}
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **extra)

    # ------------------------------------------------------------------ prompts

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
            text = self._apply_template(messages, True)
            cached = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._prompt_cache) > 4096:
                self._prompt_cache.clear()
            self._prompt_cache[key] = cached
        return list(cached)

    def prompt_ids(self, decision: Decision) -> list[int]:
        return self.render(self.messages(decision))

    # ------------------------------------------------------------------ the constrained player ("score")

    def estimate(self, decisions: list[Decision], prompts=None) -> PolicyEstimate:
        if self.mode == "sample":
            return super().estimate(decisions, prompts)
        rows = self._scored(list(decisions), self._prefixes(list(decisions)))
        outcomes = [np.array([[probs[a] for a in d.legal_actions]]) for d, probs in zip(decisions, rows)]
        return PolicyEstimate(list(decisions), outcomes, [np.ones(1) for _ in decisions], True, 0,
                              [0] * len(decisions), [1] * len(decisions))

    def act(self, decisions: list[Decision], rng: np.random.Generator) -> list[Choice]:
        """One action per decision, one batched model call (plus one for forced decoding)."""
        if self.mode == "sample" or not decisions:
            return super().act(decisions, rng)
        self.counts["act.decisions"] += len(decisions)
        choices = []
        prefixes = self._prefixes(decisions)
        for d, prefix, probs in zip(decisions, prefixes, self._scored(decisions, prefixes)):
            weights = np.array([probs[a] for a in d.legal_actions])
            action = d.legal_actions[_sample_index(weights, rng)]
            choices.append(Choice(action, prefix + self.text.answer_text(d, action), "ok", None))
        self.counts["act.ok"] += len(choices)
        return choices

    def record(self) -> dict | None:
        """What goes into a result beside the numbers: the batch cache's path and use, when one is kept."""
        if self.batch_cache is None:
            return None
        return {"kind": "hf", "model": self.name, "reply_cache": self.batch_cache.record()}


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
