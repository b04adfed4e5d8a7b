"""Exact reads of a local model for `HFPolicy`: scored answers, in one pass over a prefix tree.

Where a policy can be read without sampling, it is read from the model's probabilities:

- `answer_probabilities`: the probability, under the decoding (its logits processors applied at
  every scored position), that the whole reply is each legal action's answer line followed by the
  template's end-of-turn token; `exact_distribution` plays the policy from them when they cover
  all but `exact_tolerance` of the reply probability (a model whose replies are the answer line).
- `action_scores`: each legal answer's summed (or mean) log-probability after a prompt, what the
  constrained player (`mode="score"`) and forced decoding decide by.

Every read encodes each prefix its sequences share once (the system prompt, a repeated game's
history, the prompt shared by every legal answer) when `prefix_sharing` is on and the model allows
it (`sepo.policies.prefix_cache`); otherwise every sequence is encoded whole, in batches.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, TextView
from sepo.policies.hf_loading import LoadedModel, check_prompt_room
from sepo.policies.replies import Decoding


class ExactReads(LoadedModel):
    """Scoring and exact reads (see module doc). Needs, beside the loaded model: `text`, `mode`,
    `decoding`, `batch_size`, `prefix_sharing`, `exact_tolerance`, `score_normalization`,
    `score_prefix`, `turn_end_ids`, `model_name`, `name`, the counters `encoded_tokens` and
    `exact_rest`, the prompt helpers `prompt_ids` and `defuse`, and `generate` (a greedy reply is
    the default score prefix)."""

    text: TextView
    mode: str
    decoding: Decoding
    batch_size: int
    prefix_sharing: bool
    exact_tolerance: float
    exact_rest: float
    score_normalization: str
    score_prefix: Any
    turn_end_ids: list[int]
    model_name: str
    name: str
    encoded_tokens: int
    defuse: Callable[[str], str]
    prompt_ids: Callable[[Decision], list[int]]
    generate: Callable[..., list]

    def _shares_prefixes(self, prompts: list[list[int]]) -> bool:
        """Whether a read at `prompts` encodes their shared prefixes once: `prefix_sharing` is on, no
        prompt is empty and the model allows it."""
        from sepo.policies import prefix_cache

        return bool(self.prefix_sharing and prompts and min(map(len, prompts)) > 0
                    and prefix_cache.supports(self.model))

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
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                    logits_to_keep=keep).logits
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

        if self._shares_prefixes(prompts):
            values = [np.zeros(len(c)) for c in continuations]

            def visit(position, logits, requests):
                logp = torch.log_softmax(logits.float(), dim=-1)
                for i, _ in requests:
                    j = position + 1 - len(prompts[i])  # the continuation token these logits predict
                    values[i][j] = float(logp[continuations[i][j]])

            sequences = [p + c for p, c in zip(prompts, continuations)]
            wanted = [range(len(p) - 1, len(p) + len(c) - 1) for p, c in zip(prompts, continuations)]
            with self._inference():
                self.encoded_tokens += prefix_cache.prefix_logits(self.model, sequences, wanted, visit,
                                                                  self.batch_size)
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
                picked = span.gather(-1, _tensor(cont, span.device).unsqueeze(-1)).squeeze(-1)
                out[i] = picked.double().cpu().numpy()
        return out

    def next_token_logprobs(self, prompts: list[list[int]]):
        """Log-softmax of the next token after each prompt: a [B, V] tensor (batched, chunked;
        shared prefixes encoded once under `prefix_sharing`)."""
        import torch

        from sepo.policies import prefix_cache

        rows = [None] * len(prompts)
        if self._shares_prefixes(prompts):
            def visit(position, logits, requests):
                logp = torch.log_softmax(logits, dim=-1)
                for i, _ in requests:
                    rows[i] = logp

            with self._inference():
                self.encoded_tokens += prefix_cache.prefix_logits(
                    self.model, prompts, [[len(p) - 1] for p in prompts], visit, self.batch_size)
            return torch.stack(rows)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            logp = self._forward([prompts[i] for i in chunk], 1)[:, -1, :]
            for row, i in enumerate(chunk):
                rows[i] = logp[row]
        return torch.stack(rows)

    # ------------------------------------------------------------------ scored answers


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
        self, decisions: list[Decision], prompts: list[list[int]] | None = None,
        prefixes: list[str] | None = None
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
                size = len(token_logps) if self.score_normalization == "mean" else 1
                values.append(token_logps.sum() / size)
            scores.append(np.array(values))
        return scores

    def _scored(self, decisions: list[Decision], prefixes: list[str]) -> list[dict[int, float]]:
        """The constrained player's distribution per decision: the softmax of its answers' scores."""
        out = []
        for d, scores in zip(decisions, self.action_scores(decisions, prefixes=prefixes)):
            probs = np.exp(scores - scores.max())
            probs /= probs.sum()
            out.append({a: float(p) for a, p in zip(d.legal_actions, probs)})
        return out

    # ------------------------------------------------------------------ answer lines read exactly

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
            check_prompt_room(max(map(len, prompts)), self.decoding.max_new_tokens, self.model,
                              self.model_name)
        fits = [len(answer) + 1 <= self.decoding.max_new_tokens for answer in answers]
        kept = [k for k, fit in enumerate(fits) if fit]
        scored = iter(self._processed_probabilities([prompts[k] for k in kept], [answers[k] for k in kept])
                      if kept else [])
        probs = [next(scored) if fit else 0.0 for fit in fits]
        rows, k = [], 0
        for d in decisions:
            rows.append(np.array(probs[k : k + len(d.legal_actions)]))
            k += len(d.legal_actions)
        return rows, np.array([max(0.0, 1.0 - row.sum()) for row in rows])

    def _processors(self):
        """The decoding's logits processors, in `generate`'s order."""
        from transformers import (
            LogitsProcessorList,
            RepetitionPenaltyLogitsProcessor,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

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
            scores = processors(torch.tensor([context[: position + 1]], dtype=torch.long),
                                logits[None].cpu().float())
            logp = torch.log_softmax(scores, dim=-1)[0]
            return [float(logp[t]) if isinstance(t, int) else float(torch.logsumexp(logp[ends], dim=0))
                    for t in targets]

        def target(i: int, position: int):
            j = position + 1 - len(prompts[i])
            return answers[i][j] if j < len(answers[i]) else None

        totals = [0.0] * len(sequences)
        if self.prefix_sharing and prefix_cache.supports(self.model):
            def visit(position, logits, requests):
                values = score(position, logits, sequences[requests[0][0]],
                               [target(i, position) for i, _ in requests])
                for (i, _), value in zip(requests, values):
                    totals[i] += value

            wanted = [range(len(p) - 1, len(p) + len(a)) for p, a in zip(prompts, answers)]
            with self._inference():
                self.encoded_tokens += prefix_cache.prefix_logits(self.model, sequences, wanted, visit,
                                                                  self.batch_size)
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

    def exact_distribution(self, decisions: list[Decision], failure_rule: str,
                           fallback) -> list[np.ndarray] | None:
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
        other_rows, other_rest = (self.answer_probabilities([decisions[k] for k in others]) if others
                                  else ([], np.zeros(0)))
        self.exact_rest = max(self.exact_rest, float(other_rest.max(initial=0.0)))
        if self.exact_rest > self.exact_tolerance:
            return None
        rows: list = [None] * len(decisions)
        for k, row, rest in [*zip(firsts, probe_rows, probe_rest), *zip(others, other_rows, other_rest)]:
            rows[k] = self._rest_played(decisions[k], row, rest, failure_rule, fallback)
        return rows

    @staticmethod
    def _rest_played(decision: Decision, row: np.ndarray, rest: float, failure_rule: str,
                     fallback) -> np.ndarray:
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
        first_index = {d.info_key: k for k, d in reversed(list(enumerate(decisions)))}
        firsts = list(first_index.values())[::-1][: self.EXACT_PROBE]
        return firsts, self.answer_probabilities([decisions[k] for k in firsts])

    def reads_without_sampling(self, decisions: list[Decision]) -> bool:
        """Whether this model's policy at `decisions` can be read without sampled replies: scored
        (`mode="score"`), greedy, or, as far as the probe of `exact_distribution` tells, answer-only.
        Asked before a long audit, so that a sample count too large to read is refused before play."""
        if self.mode != "sample" or self.decoding.greedy or not decisions:
            return True
        return bool(self._probe(list(decisions))[1][1].max() <= self.exact_tolerance)


def _tensor(values: Iterable[int], device):
    import torch

    return torch.tensor(list(values), dtype=torch.long, device=device)
