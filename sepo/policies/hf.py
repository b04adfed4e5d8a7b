"""Hugging Face causal LMs as sepo policies: batched replies, exact scoring, named failure rules.

`HFPolicy` turns any chat model (a local directory, a Hub id, a PEFT adapter directory, or an
already loaded model) into a `Policy`. One decision is one stateless chat, as in the paper:
`[system: text.system_prompt(), user: text.user_prompt(decision)]`, rendered with the tokenizer's
chat template and `add_generation_prompt=True` (template options such as `enable_thinking` come
from the `Decoding`).

Two modes:

- **sample** (default): the model plays by writing a reply under its `Decoding` (temperature, top-p,
  top-k, repetition penalty, max new tokens). It is a `ReplySource` and a `TextPolicy`
  (`sepo.policies.text_policy`): the reply is parsed strictly (cut-off replies are `truncated`),
  a failure is counted and resolved by the named failure rule, and its policy is the distribution
  of the played action at the prompts it meets: exact under greedy decoding, or when the model's
  replies are the answer line alone (`exact_distribution`: the answer's tokens and the turn's real
  end token scored under the decoding's logits processors cover all but `exact_tolerance` of the
  probability); otherwise estimated from `samples` replies per state, with counts for intervals.
- **score**: a constrained player. For each legal action `a` it scores the log-probability that
  the reply is `text.answer_text(decision, a)` after a reply prefix (`score_prefix`: by default the
  model's own greedy reply minus its last line; `None` for no prefix; or a function of the
  decision), and plays a draw from the softmax of these scores, writing prefix + answer. What it
  plays is that distribution, so it is exact; it is a different agent from the sampling one.
  `score_normalization="mean"` divides by the answer's token count.

Failure rules (a reply that names no action, two actions or an illegal one, or is truncated):
- "forced": the paper's forced decoding (paper-protocol §1), batched: the reply is appended as an
  assistant turn, then a user turn "State your final action (PASS/BET):" listing the *legal*
  actions only; one forward pass; the next-token logits are masked to the first token of each
  legal action name (tokenised with and without a leading space); argmax. If two legal names share
  a first token, the full answer texts are scored in that context instead.
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
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from sepo import progress
from sepo.errors import SepoError
from sepo.games.base import Decision, TextView
from sepo.policies.base import Choice, Policy, _sample_index
from sepo.policies.replies import Decoding, Reply
from sepo.policies.text_policy import (DEFAULT_REPROMPTS, DEFAULT_SAMPLES, EXACT_REST, FAILURE_RULES, PolicyEstimate,
                                       TextPolicy)

MODES = ("sample", "score")
EXACT_TOLERANCE = EXACT_REST
"""Reply probability an exact read leaves unscored by default (`text_policy.EXACT_REST`). A
larger `exact_tolerance` reads a model whose answer lines cover all but that share, the rest
played by the failure rule and the estimate labelled with it (`PolicyEstimate.rest`)."""
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


def _check_hub_model(repo_id: str) -> None:
    """A Hub id that is neither cached nor reachable is one clear line, before transformers tries
    (and retries, printing each attempt) every file of the model."""
    import huggingface_hub

    from sepo.policies.specs import check_model_source

    check_model_source(repo_id)  # a name that is no Hub id is one line here, not huggingface_hub's traceback
    if isinstance(huggingface_hub.try_to_load_from_cache(repo_id, "config.json"), str):
        return
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise SepoError(f"cannot load Hugging Face model {repo_id!r}: no such local folder, and it is not in the Hub cache (HF_HUB_OFFLINE is set)")
    try:
        huggingface_hub.model_info(repo_id, timeout=10)
    except Exception as error:  # noqa: BLE001 - unreachable Hub, unknown or gated repo: one line either way
        raise SepoError(f"cannot load Hugging Face model {repo_id!r}: no such local folder, and the Hub says: "
                        f"{_one_line(error)}") from None


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

    from sepo import threads
    from sepo.models import quiet_library_progress

    quiet_library_progress()
    threads.settle()  # a command's torch thread count, chosen (and said) before the model computes
    tokenizer_source = None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = str(model_or_path)
        if not path.strip():
            raise SepoError("no Hugging Face model named: give a model folder or a Hub id (hf:DIR)")
        local = Path(path).expanduser()
        # a Hub id is "name" or "owner/name"; anything else that does not exist is a missing directory
        looks_local = (local.exists() or path.startswith((".", "/", "~")) or path.count("/") > 1 or path.endswith("/")
                       or os.sep != "/" and os.sep in path)
        if local.is_file():
            hint = "; convert a GGUF file first: `sepo model import FILE --out DIR`" if local.suffix.lower() == ".gguf" else ""
            raise SepoError(f"cannot load Hugging Face model {path!r}: it is a file, not a model folder{hint}")
        if looks_local and not local.is_dir():
            raise SepoError(f"cannot load Hugging Face model {path!r}: no such directory")
        source = tokenizer_source = str(local) if local.is_dir() else path
        if not local.is_dir():
            _check_hub_model(path)
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
    check_tokenizer_fits(tokenizer, model, name)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device is not None and getattr(model, "hf_device_map", None) is None:
        model = model.to(device)
    return model, tokenizer, name


def check_tokenizer_fits(tokenizer, model, name: str) -> None:
    """Refuse a tokenizer that cannot be the model's: one that encodes text to nothing or to ids past the
    model's vocabulary, or knows under half of it. transformers loads a folder that lacks tokenizer.json
    from tokenizer_config.json's few special tokens alone, and that tokenizer encodes every prompt to
    no tokens at all: the model would be audited and trained without ever reading a prompt."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    known = len(tokenizer)
    ids = tokenizer("The players take turns; each says one word.", add_special_tokens=False)["input_ids"]
    if not ids or (isinstance(vocab, int) and (known < vocab // 2 or max(ids) >= vocab)):
        size = f" (the model's vocabulary has {vocab:,})" if isinstance(vocab, int) else ""
        raise SepoError(f"the tokenizer of {name!r} is not the model's: it knows {known:,} tokens{size} and encodes a "
                        f"sentence to {len(ids)} tokens (is the folder's tokenizer.json missing?)")


def context_length(model) -> int | None:
    """The longest sequence (prompt and reply) the model attends over, from its config, or None."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_reply_length(max_new_tokens: int, model, name: str, option: str = "--max-new-tokens") -> None:
    """A reply limit the model can write: below its context (which holds the prompt too)."""
    context = context_length(model)
    if context is not None and max_new_tokens >= context:
        raise SepoError(f"{option} {max_new_tokens:,} does not fit {name}'s context of {context:,} tokens, which holds the "
                        f"prompt too; use at most {context - 1:,} (less the prompt's length)")


def check_prompt_room(prompt_tokens: int, max_new_tokens: int, model, name: str, option: str = "--max-new-tokens") -> None:
    """A prompt of `prompt_tokens` and a reply of up to `max_new_tokens` within the model's context
    (checked where the prompt is known: `check_reply_length` can only check the reply alone)."""
    context = context_length(model)
    if context is None or prompt_tokens + max_new_tokens <= context:
        return
    room = context - prompt_tokens
    fix = (f"use {option} {room:,} or fewer, or a shorter game (fewer rounds: a shorter history in the prompt)" if room >= 1
           else "use a shorter game (fewer rounds: a shorter history in the prompt) or a model with a longer context")
    raise SepoError(f"a prompt of {prompt_tokens:,} tokens and {option} {max_new_tokens:,} do not fit {name}'s context of "
                    f"{context:,} tokens ({max(room, 0):,} left for the reply); {fix}")


class HFPolicy(TextPolicy):
    """A causal LM with a chat template as a policy over a game's text view (see module doc).

    The decoding is `decoding`, or built from the individual keywords (temperature, top_p, top_k,
    repetition_penalty, max_new_tokens) when it is not given."""

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
        tokenizer: Any = None,
        decoding: Decoding | None = None,
        failure_rule: str = "forced",
        fallback_action: Callable[[Decision], int] | None = None,
        samples: int = DEFAULT_SAMPLES,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        repetition_penalty: float = 1.0,
        max_new_tokens: int = 48,
        exact_tolerance: float = EXACT_TOLERANCE,
        score_normalization: str = "sum",
        score_prefix: Callable[[Decision], str] | str | None = "greedy",
        batch_size: int = 64,
        device: str | None = None,
        dtype: Any = "auto",
        seed: int = 0,
        name: str | None = None,
        generation_kwargs: dict | None = None,
        trust_remote_code: bool = False,
        reprompts: int = DEFAULT_REPROMPTS,
        reply_cache: str | os.PathLike | None = None,
    ):
        if mode not in MODES:
            raise SepoError(f"HFPolicy: mode must be one of {', '.join(MODES)}; got {mode!r}")
        if failure_rule not in FAILURE_RULES:
            raise SepoError(f"HFPolicy: failure_rule must be one of {', '.join(FAILURE_RULES)}; got {failure_rule!r}")
        if score_normalization not in ("sum", "mean"):
            raise SepoError(f"HFPolicy: score_normalization must be 'sum' or 'mean'; got {score_normalization!r}")
        if not (isinstance(score_prefix, str) and score_prefix == "greedy" or score_prefix is None or callable(score_prefix)):
            raise SepoError("HFPolicy: score_prefix must be None, 'greedy' or a function of the decision")
        if samples < 1 or batch_size < 1:
            raise SepoError("HFPolicy: samples and batch_size must be >= 1")
        if decoding is None:
            decoding = Decoding(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens,
                                repetition_penalty=repetition_penalty)
        self.model, self.tokenizer, model_name = load_hf_model(
            model_or_path, tokenizer, device=device, dtype=dtype, trust_remote_code=trust_remote_code
        )
        check_reply_length(decoding.max_new_tokens, self.model, f"model {model_name!r}")
        self.model_name = f"model {model_name!r}"
        if decoding.enable_thinking is not None and "enable_thinking" not in str(self.tokenizer.chat_template):
            raise SepoError(f"--{'' if decoding.enable_thinking else 'no-'}thinking: the chat template of model {model_name!r} "
                            "does not read enable_thinking, so the switch would change nothing")
        self.text = game_text
        self.mode = mode
        self.decoding = decoding
        self.exact_tolerance = exact_tolerance
        self.exact_rest = 0.0
        """The largest reply probability the last `exact_distribution` found left to replies other
        than answer lines (where it refused the read: at the prompts it read before refusing)."""
        self.score_normalization = score_normalization
        self.score_prefix = score_prefix
        self.batch_size = batch_size
        self.generation_kwargs = dict(generation_kwargs or {})
        self.name = name or f"hf:{model_name}"
        super().__init__(failure_rule=failure_rule, fallback_action=fallback_action, samples=samples, seed=seed,
                         reprompts=reprompts)
        self._seed = seed
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
        eos = self.model.generation_config.eos_token_id if getattr(self.model, "generation_config", None) else None
        eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
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
            text = self._apply_template([{"role": "user", "content": "x"}, {"role": "assistant", "content": marker}], False)
        except Exception:  # noqa: BLE001 - templates that refuse this conversation: no template end
            text = ""
        tail = text.split(marker, 1)[1] if marker in text else ""
        ids = self._ids(tail.lstrip(" ")) if tail.strip() else []
        special = set(self.tokenizer.all_special_ids)
        if ids and ids[0] in special:
            return [ids[0]]
        eos = self.model.generation_config.eos_token_id if getattr(self.model, "generation_config", None) else None
        eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        return eos or ([self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else [])

    def _apply_template(self, messages, add_generation_prompt: bool) -> str:
        extra = {} if self.decoding.enable_thinking is None else {"enable_thinking": self.decoding.enable_thinking}
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra)

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
            text = self._apply_template(messages, True)
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

    def _forward(self, sequences: list[list[int]], keep: int, raw: bool = False):
        """Log-softmax (or the raw logits) of the last `keep` positions of each left-padded
        sequence: [B, keep, V]."""
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
            logits = logits[:, -keep:, :].float()
            return logits if raw else torch.log_softmax(logits, dim=-1)

    def sequence_logprobs(self, prompts: list[list[int]], continuations: list[list[int]]) -> list[np.ndarray]:
        """Per-token log-probabilities of each continuation given its prompt (batched, chunked;
        shared prefixes encoded once under `prefix_sharing`: scoring every legal action after
        one prompt, as forced decoding does in a game of many actions, encodes the prompt once)."""
        import torch

        from sepo.policies import prefix_cache

        if self.prefix_sharing and prompts and min(map(len, prompts)) > 0 and prefix_cache.supports(self.model):
            values = [np.zeros(len(c)) for c in continuations]

            def visit(position, logits, requests):
                logp = torch.log_softmax(logits.float(), dim=-1)
                for i, _ in requests:
                    j = position + 1 - len(prompts[i])  # the continuation token these logits predict
                    values[i][j] = float(logp[continuations[i][j]])

            wanted = [range(len(p) - 1, len(p) + len(c) - 1) for p, c in zip(prompts, continuations)]
            with self._inference():
                self.encoded_tokens += prefix_cache.prefix_logits(self.model, [p + c for p, c in zip(prompts, continuations)],
                                                                  wanted, visit, self.batch_size)
            return values
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
        """Log-softmax of the next token after each prompt: a [B, V] tensor (batched, chunked;
        shared prefixes encoded once under `prefix_sharing`)."""
        import torch

        from sepo.policies import prefix_cache

        rows = [None] * len(prompts)
        if self.prefix_sharing and prompts and min(map(len, prompts)) > 0 and prefix_cache.supports(self.model):
            def visit(position, logits, requests):
                logp = torch.log_softmax(logits, dim=-1)
                for i, _ in requests:
                    rows[i] = logp

            with self._inference():
                self.encoded_tokens += prefix_cache.prefix_logits(self.model, prompts, [[len(p) - 1] for p in prompts],
                                                                  visit, self.batch_size)
            return torch.stack(rows)
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
        per_call = max(1, self.batch_size // n)
        decoding = self.decoding
        if prompts:
            check_prompt_room(max(map(len, prompts)), decoding.max_new_tokens, self.model, self.model_name)
        do_sample = not greedy and not decoding.greedy
        kwargs = dict(
            max_new_tokens=decoding.max_new_tokens,
            do_sample=do_sample,
            num_return_sequences=n,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_token_ids,
            repetition_penalty=decoding.repetition_penalty,
        )
        if do_sample:
            kwargs.update(temperature=decoding.temperature, top_p=decoding.top_p, top_k=decoding.top_k)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        kwargs.update(self.generation_kwargs)
        seed = self._next_seed() if seed is None else seed
        results: list[list[Completion]] = []
        setting = {"n": n, "sample": do_sample, "kwargs": {k: v for k, v in kwargs.items() if k != "num_return_sequences"},
                   "seed": seed if do_sample else None, "prefix_sharing": self.prefix_sharing, "batch_size": self.batch_size}
        with self._rng_context(seed), progress.counting("model replies", len(prompts) * n) as advance:
            previous = None  # a sampled batch's key names the one before it: the generator state it starts from
            for batch, start in enumerate(range(0, len(prompts), per_call)):
                chunk = prompts[start : start + per_call]
                rows, key = self._kept_batch(chunk, n, kwargs, {**setting, "batch": batch, "after": previous})
                previous = key if do_sample else None
                for row, p in enumerate(chunk):
                    group = []
                    for k in range(n):
                        tokens = rows[row * n + k]
                        finished = bool(tokens) and tokens[-1] in self.eos_token_ids
                        body = tokens[:-1] if finished else tokens
                        text = self.tokenizer.decode(body, skip_special_tokens=True)
                        group.append(Completion(tuple(p), tuple(tokens), text, finished))
                    results.append(group)
                advance(len(chunk) * n)
        return results

    def _kept_batch(self, chunk: list[list[int]], n: int, kwargs: dict, setting: dict) -> tuple[list[list[int]], str | None]:
        """The new tokens of each of a batch's `len(chunk) * n` rows, cut after the first end
        token: generated, or read from the batch cache (which then restores the generator state
        the batch left, so the next batch draws what it would have drawn); and the batch's key
        (None without a cache). A sampled batch's setting names the key of the batch before it
        in its call, so a batch is read only after the same batches drew from the same seed."""
        from sepo.policies import batch_cache

        key = None
        if self.batch_cache is not None:
            key = self.batch_cache.key("generate", {"prompts": chunk, **setting})
            kept = self.batch_cache.get(key, lambda record: batch_cache.rows_fit(
                record, len(chunk) * n, setting["sample"], self._vocabulary(), kwargs["max_new_tokens"], self.device))
            if kept is not None:
                if setting["sample"]:
                    batch_cache.restore_generator(kept["generator"], self.device)
                return kept["rows"], key
        import torch

        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(chunk):
            ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p) :] = 1
        steps = progress.counting("this batch's tokens (at most)", kwargs["max_new_tokens"])
        with self._inference(), steps as step:
            out = self._generate_chunk(chunk, ids, mask, n, _counting_steps(kwargs, step))
        eos = set(self.eos_token_ids)
        rows = []
        for tokens in out[:, width:].cpu().tolist():
            cut = next((j for j, t in enumerate(tokens) if t in eos), None)
            rows.append(tokens[: cut + 1] if cut is not None else tokens)
        if key is not None:
            generator = batch_cache.generator_state(self.device) if setting["sample"] else None
            self.batch_cache.put(key, {"rows": rows, "generator": generator})
        return rows, key

    def _vocabulary(self) -> int:
        """How many token ids generation can produce: the model's output size (or the tokenizer's)."""
        return max(len(self.tokenizer), int(getattr(self.model.config, "vocab_size", 0) or 0))

    def _generate_chunk(self, chunk: list[list[int]], ids, mask, n: int, kwargs: dict):
        """`generate` on one left-padded chunk, `n` completions a prompt (rows prompt-major). With
        `prefix_sharing` on a model that allows it, every distinct prompt's cache is built once,
        its shared prefixes once (`prefix_cache.prompt_cache`), and copied to the rows that sample
        from it: `generate`'s `num_return_sequences` copies the prompt before encoding it, so a
        GRPO group of G completions (or G equal prompts) would encode it G times."""
        from sepo.policies import prefix_cache

        if not (self.prefix_sharing and min(len(p) for p in chunk) > 1 and prefix_cache.supports(self.model)):
            return self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs)
        import torch

        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(p), len(distinct)) for p in chunk for _ in range(n)]
        cache, encoded = prefix_cache.prompt_cache(self.model, [list(p[:-1]) for p in distinct],
                                                   kwargs["max_new_tokens"] + 1, self.batch_size, rows=source)
        self.prefill_tokens += encoded
        rows = torch.tensor([row for row in range(len(chunk)) for _ in range(n)], dtype=torch.long)
        name = prefix_cache._cache_argument(self.model)
        return self.model.generate(input_ids=ids[rows].to(self.device), attention_mask=mask[rows].to(self.device),
                                   **{**kwargs, "num_return_sequences": 1, name: cache})

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

    FORCED_CHUNK = 64
    """Failed replies decided per batched pass of forced decoding; the passes are counted on the
    progress line, which otherwise stood still for the tens of minutes a model that fails most
    replies spends here."""

    def forced_actions(self, decisions: list[Decision], replies: list[str]) -> list[int]:
        """The paper's forced decoding, batched over the failed decisions (see module doc)."""
        if not decisions:
            return []
        actions: list[int] = []
        with progress.counting("forced decoding", len(decisions)) as advance:
            for start in range(0, len(decisions), self.FORCED_CHUNK):
                chunk = slice(start, start + self.FORCED_CHUNK)
                actions.extend(self._forced_chunk(decisions[chunk], replies[chunk]))
                advance(len(decisions[chunk]))
        return actions

    def _forced_chunk(self, decisions: list[Decision], replies: list[str]) -> list[int]:
        """One batched pass of forced decoding, or its answers read from the batch cache."""
        if not decisions:
            return []
        prompts = []
        for d, reply in zip(decisions, replies):
            messages = self.messages(d) + [
                {"role": "assistant", "content": self.defuse(reply)},
                {"role": "user", "content": FORCED_QUESTION.format(names="/".join(d.action_names))},
            ]
            prompts.append(self.render(messages))
        from sepo.policies import batch_cache

        key = None
        if self.batch_cache is not None:
            answers = [[self.text.answer_text(d, a) for a in d.legal_actions] for d in decisions]
            key = self.batch_cache.key("forced", {"prompts": prompts, "answers": answers,
                                                  "normalization": self.score_normalization,
                                                  "prefix_sharing": self.prefix_sharing, "batch_size": self.batch_size})
            kept = self.batch_cache.get(key, lambda record: batch_cache.choices_fit(record, decisions))
            if kept is not None:
                return [d.legal_actions[i] for d, i in zip(decisions, kept["choices"])]
        actions = self._forced_pass(decisions, prompts)
        if key is not None:
            self.batch_cache.put(key, {"choices": [d.legal_actions.index(a) for d, a in zip(decisions, actions)]})
        return actions

    def _forced_pass(self, decisions: list[Decision], prompts: list[list[int]]) -> list[int]:
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

    # ------------------------------------------------------------------ the reply source

    def chat_replies(self, chats: Sequence[list[dict[str, str]]], n: int, seed: int) -> list[list[Reply]]:
        """`n` replies per chat (e.g. a cheap-talk message turn) under the decoding, in batched
        `generate` calls; special-token strings in the chat are defused as in every prompt."""
        if not chats:
            return []
        prompts = [self.render([{**m, "content": self.defuse(m["content"])} for m in chat]) for chat in chats]
        groups = self.generate(prompts, n, seed=seed)
        return [[Reply(c.text, c.finished, len(c.prompt_ids), len(c.completion_ids)) for c in group] for group in groups]

    def replies(self, decisions: Sequence[Decision], n: int, seed: int) -> list[list[Reply]]:
        """`n` replies per decision under the decoding, in batched `generate` calls."""
        if not decisions:
            return []
        groups = self.generate([self.prompt_ids(d) for d in decisions], n, seed=seed)
        return [[Reply(c.text, c.finished, len(c.prompt_ids), len(c.completion_ids)) for c in group] for group in groups]

    def answer_probabilities(self, decisions: list[Decision]) -> tuple[list[np.ndarray], np.ndarray]:
        """Per decision, the probability under the decoding that the whole reply is each legal
        action's answer line followed by the template's end-of-turn token, and the probability
        left to every other reply. The decoding's logits processors (repetition penalty,
        temperature, top-k, top-p, in `generate`'s order) are applied at every scored position.
        An answer whose tokens and the end token exceed `max_new_tokens` has probability 0:
        generation stops there, so that reply is always `truncated`, never played."""
        if self.decoding.greedy:
            raise SepoError("answer_probabilities needs a sampling decoding (temperature > 0)")
        prompts, answers = [], []
        for d in decisions:
            for a in d.legal_actions:
                prompts.append(self.prompt_ids(d))
                answers.append(self._ids(self.defuse(self.text.answer_text(d, a))))
        if prompts:  # the decoding read here generates up to max_new_tokens after the prompt
            check_prompt_room(max(map(len, prompts)), self.decoding.max_new_tokens, self.model, self.model_name)
        fits = [len(answer) + 1 <= self.decoding.max_new_tokens for answer in answers]
        kept = [k for k, fit in enumerate(fits) if fit]
        scored = iter(self._processed_probabilities([prompts[k] for k in kept], [answers[k] for k in kept]) if kept else [])
        probs = [next(scored) if fit else 0.0 for fit in fits]
        rows, k = [], 0
        for d in decisions:
            rows.append(np.array(probs[k : k + len(d.legal_actions)]))
            k += len(d.legal_actions)
        return rows, np.array([max(0.0, 1.0 - row.sum()) for row in rows])

    def _processors(self):
        """The decoding's logits processors, in `generate`'s order."""
        from transformers import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                  TopKLogitsWarper, TopPLogitsWarper)

        d = self.decoding
        processors = LogitsProcessorList()
        if d.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(d.repetition_penalty))
        if d.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(d.temperature))
        if d.top_k:
            processors.append(TopKLogitsWarper(d.top_k))
        if d.top_p < 1.0:
            processors.append(TopPLogitsWarper(d.top_p))
        return processors

    def _processed_probabilities(self, prompts: list[list[int]], answers: list[list[int]]) -> list[float]:
        """P(answer, then a turn-end token) for each (prompt, answer) under the decoding. Shared
        prefixes (the system prompt, a repeated game's history) are encoded once
        (`sepo.policies.prefix_cache`) when the model allows it and `prefix_sharing` is on;
        otherwise every sequence is encoded whole."""
        import torch

        from sepo.policies import prefix_cache

        processors = self._processors()
        ends = _tensor(self.turn_end_ids, "cpu")
        sequences = [p + a for p, a in zip(prompts, answers)]

        def score(position: int, logits, context: list[int], targets) -> float:
            scores = processors(torch.tensor([context[: position + 1]], dtype=torch.long), logits[None].cpu().float())
            logp = torch.log_softmax(scores, dim=-1)[0]
            return [float(logp[t]) if isinstance(t, int) else float(torch.logsumexp(logp[ends], dim=0)) for t in targets]

        def target(i: int, position: int):
            j = position + 1 - len(prompts[i])
            return answers[i][j] if j < len(answers[i]) else None

        totals = [0.0] * len(sequences)
        if self.prefix_sharing and prefix_cache.supports(self.model):
            def visit(position, logits, requests):
                values = score(position, logits, sequences[requests[0][0]], [target(i, position) for i, _ in requests])
                for (i, _), value in zip(requests, values):
                    totals[i] += value

            wanted = [range(len(p) - 1, len(p) + len(a)) for p, a in zip(prompts, answers)]
            with self._inference():
                self.encoded_tokens += prefix_cache.prefix_logits(self.model, sequences, wanted, visit, self.batch_size)
            return [float(np.exp(t)) for t in totals]
        for start in range(0, len(prompts), self.batch_size):
            chunk = range(start, min(start + self.batch_size, len(prompts)))
            longest = max(len(answers[i]) for i in chunk)
            logits = self._forward([sequences[i] for i in chunk], longest + 1, raw=True)
            self.encoded_tokens += sum(len(sequences[i]) for i in chunk)
            for row, i in enumerate(chunk):
                for j in range(len(answers[i]) + 1):  # positions predicting answer tokens, then the end
                    position = len(prompts[i]) - 1 + j
                    column = longest + 1 - (len(answers[i]) + 1) + j
                    totals[i] += score(position, logits[row, column], sequences[i], [target(i, position)])[0]
        return [float(np.exp(t)) for t in totals]

    EXACT_PROBE = 16
    """Prompts read first by `exact_distribution`: a model that is not answer-only is told apart
    there, before the whole read."""

    def exact_distribution(self, decisions: list[Decision], failure_rule: str, fallback) -> list[np.ndarray] | None:
        """The played distribution read from the answer lines when they cover all but
        `exact_tolerance` of the reply probability at every prompt, else None (then the policy is
        estimated from sampled replies). The probability they leave (`exact_rest`: its largest at
        any prompt read, also when that refuses the read) is played as the failure rule plays a
        reply that does not parse: the fallback
        action, or uniformly ("random-legal"); a rule that reads the reply (forced decoding,
        re-prompting) cannot be applied to replies never written, so there it is renormalised
        away. Either way each action's probability is within `exact_rest` of the truth. One prompt
        of each of the first `EXACT_PROBE` information states is read first; only if they all pass
        is the rest read."""
        if self.mode != "sample" or self.decoding.greedy or not decisions:
            return None
        firsts, (probe_rows, probe_rest) = self._probe(decisions)
        self.exact_rest = float(probe_rest.max())
        if self.exact_rest > self.exact_tolerance:
            return None
        probed = set(firsts)
        others = [k for k in range(len(decisions)) if k not in probed]
        other_rows, other_rest = self.answer_probabilities([decisions[k] for k in others]) if others else ([], np.zeros(0))
        self.exact_rest = max(self.exact_rest, float(other_rest.max(initial=0.0)))
        if self.exact_rest > self.exact_tolerance:
            return None
        rows: list = [None] * len(decisions)
        for k, row, rest in [*zip(firsts, probe_rows, probe_rest), *zip(others, other_rows, other_rest)]:
            rows[k] = self._rest_played(decisions[k], row, rest, failure_rule, fallback)
        return rows

    @staticmethod
    def _rest_played(decision: Decision, row: np.ndarray, rest: float, failure_rule: str, fallback) -> np.ndarray:
        """A prompt's played distribution from its answer lines' probabilities `row`, the `rest`
        played by the failure rule where the rule does not read the reply (`exact_distribution`)."""
        if failure_rule == "fallback" and fallback is not None:
            row = row + rest * np.eye(len(row))[decision.legal_actions.index(fallback(decision))]
        elif failure_rule == "random-legal":
            row = row + rest / len(row)
        return row / row.sum()

    def _probe(self, decisions: list[Decision]):
        """(positions, `answer_probabilities` there): one prompt of each of the first `EXACT_PROBE`
        information states of `decisions`."""
        firsts = list({d.info_key: k for k, d in reversed(list(enumerate(decisions)))}.values())[::-1][: self.EXACT_PROBE]
        return firsts, self.answer_probabilities([decisions[k] for k in firsts])

    def reads_without_sampling(self, decisions: list[Decision]) -> bool:
        """Whether this model's policy at `decisions` can be read without sampled replies: scored
        (`mode="score"`), greedy, or, as far as the probe of `exact_distribution` tells, answer-only.
        Asked before a long audit, so that a sample count too large to read is refused before play."""
        if self.mode != "sample" or self.decoding.greedy or not decisions:
            return True
        return bool(self._probe(list(decisions))[1][1].max() <= self.exact_tolerance)

    # ------------------------------------------------------------------ the constrained player ("score")

    def estimate(self, decisions: list[Decision], prompts=None) -> PolicyEstimate:
        if self.mode == "sample":
            return super().estimate(decisions, prompts)
        rows = self._scored(list(decisions), self._prefixes(list(decisions)))
        outcomes = [np.array([[probs[a] for a in d.legal_actions]]) for d, probs in zip(decisions, rows)]
        return PolicyEstimate(list(decisions), outcomes, [np.ones(1) for _ in decisions], True, 0,
                              [0] * len(decisions), [1] * len(decisions))

    def _scored(self, decisions: list[Decision], prefixes: list[str]) -> list[dict[int, float]]:
        out = []
        for d, scores in zip(decisions, self.action_scores(decisions, prefixes=prefixes)):
            probs = np.exp(scores - scores.max())
            probs /= probs.sum()
            out.append({a: float(p) for a, p in zip(d.legal_actions, probs)})
        return out

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


def _counting_steps(kwargs: dict, advance) -> dict:
    """`generate`'s arguments, plus (when progress is shown) a stopping criterion that stops
    nothing and counts each decoding step: a batch of a slow model shows its steps, with an ETA
    from the first one, instead of a count that stands still until the whole batch is done."""
    if getattr(advance, "reporter", None) is None:
        return kwargs
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _CountSteps(StoppingCriteria):
        def __call__(self, input_ids, scores, **unused):
            advance(1)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    given = list(kwargs.get("stopping_criteria") or [])
    return {**kwargs, "stopping_criteria": StoppingCriteriaList([*given, _CountSteps()])}


def _tensor(values: Iterable[int], device):
    import torch

    return torch.tensor(list(values), dtype=torch.long, device=device)
