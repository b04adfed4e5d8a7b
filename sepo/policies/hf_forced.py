"""Forced decoding for `HFPolicy`: the action of a reply that does not parse, asked of the model.

The paper's rule (docs/paper-protocol.md §1), batched: the failed reply is appended as an assistant turn,
then a user turn `FORCED_QUESTION` ("State your final action (PASS/BET):") listing the *legal*
actions only; one forward pass; the next-token logits are masked to the first token of each legal
action name (tokenised with and without a leading space); argmax. If two legal names share a first
token, the full answer texts are scored in that context instead (`action_scores`). With a batch
cache (`sepo.policies.batch_cache`) each pass's answers are kept and read back on a re-run.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sepo import progress
from sepo.games.base import Decision, TextView
from sepo.policies.hf_loading import LoadedModel

FORCED_QUESTION = "State your final action ({names}):"
"""The user turn of forced decoding; `names` = the legal action names joined by '/'."""


class ForcedDecoding(LoadedModel):
    """Forced decoding (see module doc). Needs, beside the loaded model: `text`, `batch_cache`,
    `score_normalization`, `prefix_sharing`, `batch_size`, the prompt helpers `messages`, `render`
    and `defuse`, and the scoring of `sepo.policies.hf_exact` (`next_token_logprobs`,
    `action_scores`)."""

    text: TextView
    batch_cache: Any
    score_normalization: str
    prefix_sharing: bool
    batch_size: int
    messages: Callable[[Decision], list[dict[str, str]]]
    render: Callable[[list[dict[str, str]]], list[int]]
    defuse: Callable[[str], str]
    next_token_logprobs: Callable[[list[list[int]]], Any]
    action_scores: Callable[..., list[np.ndarray]]

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
                                                  "prefix_sharing": self.prefix_sharing,
                                                  "batch_size": self.batch_size})
            kept = self.batch_cache.get(key, lambda record: batch_cache.choices_fit(record, decisions))
            if kept is not None:
                return [d.legal_actions[i] for d, i in zip(decisions, kept["choices"])]
        actions = self._forced_pass(decisions, prompts)
        if key is not None:
            choices = [d.legal_actions.index(a) for d, a in zip(decisions, actions)]
            self.batch_cache.put(key, {"choices": choices})
        return actions

    def _forced_pass(self, decisions: list[Decision], prompts: list[list[int]]) -> list[int]:
        candidates = [[self._first_tokens(self.text.answer_text(d, a)) for a in d.legal_actions]
                      for d in decisions]
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

