"""Sampling replies from a local model for `HFPolicy`: batched generation and the static sampling cache.

Every reply is drawn in batched `generate` calls (left padding), under the policy's `Decoding`,
stopping at the model's end tokens and the chat template's end of turn. Each call draws from its
own seed (the policy's seed and a count of calls, or the seed the caller gives), so the same seeds
give the same replies. Under `prefix_sharing` each distinct prompt of a batch (and the prefixes the
prompts share) is encoded once into a static cache that every row sampling from it copies
(`sepo.policies.prefix_cache.prompt_cache`). With a batch cache (`sepo.policies.batch_cache`) a
generated batch is kept and read back on a re-run, with the generator state it left.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from sepo import progress
from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.policies.hf_loading import LoadedModel, check_prompt_room
from sepo.policies.replies import Decoding, Reply


@dataclass(frozen=True)
class Completion:
    """One generated reply: token ids (completion includes the end-of-turn token if generated)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    text: str
    finished: bool


class Sampling(LoadedModel):
    """Batched generation (see module doc). Needs, beside the loaded model: `decoding`,
    `batch_size`, `prefix_sharing`, `generation_kwargs`, `eos_token_ids`, `batch_cache`,
    `model_name`, `name`, the seed state (`_seed`, `_calls`), the prefill count `prefill_tokens`,
    and the prompt helpers `render`, `prompt_ids` and `defuse`."""

    decoding: Decoding
    batch_size: int
    prefix_sharing: bool
    generation_kwargs: dict
    eos_token_ids: list[int]
    batch_cache: Any
    model_name: str
    name: str
    prefill_tokens: int
    _seed: int
    _calls: int
    defuse: Callable[[str], str]
    render: Callable[[list[dict[str, str]]], list[int]]
    prompt_ids: Callable[[Decision], list[int]]

    def _rng_context(self, seed: int):
        import torch

        devices = [self.device.index or 0] if self.device.type == "cuda" else []

        @contextlib.contextmanager
        def ctx():
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                yield

        return ctx()

    def _next_seed(self) -> int:
        self._calls += 1
        return int(np.random.SeedSequence([self._seed, self._calls]).generate_state(1, dtype=np.uint32)[0])

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
        setting = {"n": n, "sample": do_sample,
                   "kwargs": {k: v for k, v in kwargs.items() if k != "num_return_sequences"},
                   "seed": seed if do_sample else None, "prefix_sharing": self.prefix_sharing,
                   "batch_size": self.batch_size}
        # more completions of one prompt than a batch holds are drawn in pieces of at most
        # `batch_size` rows: a batch's attention cache grows with its rows, so an unbounded `n`
        # (thousands of replies per state) would allocate its whole cache at once
        pieces = [(start, min(self.batch_size, n - start)) for start in range(0, n, self.batch_size)]
        with self._rng_context(seed), progress.counting("model replies", len(prompts) * n) as advance:
            previous = None  # a sampled batch's key names the one before it: the generator state it starts at
            batch = 0
            for start in range(0, len(prompts), per_call):
                chunk = prompts[start : start + per_call]
                groups: list[list[Completion]] = [[] for _ in chunk]
                for _, m in pieces if n > self.batch_size else [(0, n)]:
                    rows, key = self._kept_batch(chunk, m, kwargs | {"num_return_sequences": m},
                                                 {**setting, "batch": batch, "after": previous})
                    batch += 1
                    previous = key if do_sample else None
                    for row, p in enumerate(chunk):
                        for k in range(m):
                            tokens = rows[row * m + k]
                            finished = bool(tokens) and tokens[-1] in self.eos_token_ids
                            body = tokens[:-1] if finished else tokens
                            text = self.tokenizer.decode(body, skip_special_tokens=True)
                            groups[row].append(Completion(tuple(p), tuple(tokens), text, finished))
                    advance(len(chunk) * m)
                results.extend(groups)
        return results

    def _kept_batch(self, chunk: list[list[int]], n: int, kwargs: dict,
                    setting: dict) -> tuple[list[list[int]], str | None]:
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
                record, len(chunk) * n, setting["sample"], self._vocabulary(), kwargs["max_new_tokens"],
                self.device))
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

    def _generate_chunk(self, chunk: list[list[int]], ids, mask, n: int, kwargs: dict):
        """`generate` on one left-padded chunk, `n` completions a prompt (rows prompt-major). With
        `prefix_sharing` on a model that allows it, every distinct prompt's cache is built once,
        its shared prefixes once (`prefix_cache.prompt_cache`), and copied to the rows that sample
        from it: `generate`'s `num_return_sequences` copies the prompt before encoding it, so a
        GRPO group of G completions (or G equal prompts) would encode it G times."""
        from sepo.policies import prefix_cache

        if not (self.prefix_sharing and min(len(p) for p in chunk) > 1 and prefix_cache.supports(self.model)):
            return self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                       **kwargs)
        import torch

        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(p), len(distinct)) for p in chunk for _ in range(n)]
        cache, encoded = prefix_cache.prompt_cache(self.model, [list(p[:-1]) for p in distinct],
                                                   kwargs["max_new_tokens"] + 1, self.batch_size, rows=source)
        self.prefill_tokens += encoded
        rows = torch.tensor([row for row in range(len(chunk)) for _ in range(n)], dtype=torch.long)
        name = prefix_cache._cache_argument(self.model)
        return self.model.generate(input_ids=ids[rows].to(self.device),
                                   attention_mask=mask[rows].to(self.device),
                                   **{**kwargs, "num_return_sequences": 1, name: cache})

    def turn_ids(self, messages: list[dict[str, str]], reply: Completion,
                 next_messages: list[dict[str, str]]) -> list[int]:
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
            messages + [{"role": "assistant", "content": text}] + next_messages, tokenize=False,
            add_generation_prompt=True
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

    # ------------------------------------------------------------------ the reply source

    def chat_replies(self, chats: Sequence[list[dict[str, str]]], n: int, seed: int) -> list[list[Reply]]:
        """`n` replies per chat (e.g. a cheap-talk message turn) under the decoding, in batched
        `generate` calls; special-token strings in the chat are defused as in every prompt."""
        if not chats:
            return []
        prompts = [self.render([{**m, "content": self.defuse(m["content"])} for m in chat]) for chat in chats]
        groups = self.generate(prompts, n, seed=seed)
        return [[Reply(c.text, c.finished, len(c.prompt_ids), len(c.completion_ids)) for c in group]
                for group in groups]

    def replies(self, decisions: Sequence[Decision], n: int, seed: int) -> list[list[Reply]]:
        """`n` replies per decision under the decoding, in batched `generate` calls."""
        if not decisions:
            return []
        groups = self.generate([self.prompt_ids(d) for d in decisions], n, seed=seed)
        return [[Reply(c.text, c.finished, len(c.prompt_ids), len(c.completion_ids)) for c in group]
                for group in groups]


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
