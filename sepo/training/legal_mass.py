"""The legal-reply term of answer-only SFT: keep every next token on a legal answer.

An answer-only reply is legal when it is one of the decision's answer lines followed by the end of
the turn (what `HFPolicy.answer_probabilities` reads). Cross-entropy on a demonstration raises the
demonstrated answer and lowers every other token alike, a legal alternative answer or an illegal
one (a demand over the pool, a word instead of a number). Along each demonstrated reply this term
adds, per token,

    -log P(the next token continues some legal answer | the prompt, the demonstrated prefix)

which lowers only the illegal continuations: unlikelihood training (Welleck et al. 2019) with the
decision's legal answers as the allowed set. TRL has no such loss, so it is written here; it sits
beside TRL's cross-entropy through `SFTTrainer`'s `compute_loss_func`.

The allowed tokens come from rendering each legal answer with the tokenizer's chat template exactly
as TRL renders the demonstration, so a row of a batch is matched to its decision by its prompt's
token ids; `LegalIndex.check_covers` refuses a dataset whose rows TRL tokenized differently.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sepo.errors import SepoError

LEGAL_COLUMN = "legal_replies"
"""The dataset column (answer-only data) holding each decision's legal answer lines."""


def render(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
    """(token ids, assistant mask) of a conversation, rendered as TRL renders it for assistant-only loss."""
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return list(out["input_ids"]), list(out["assistant_masks"])


def reply_span(mask: list[int]) -> tuple[int, int]:
    """[start, end) of the trained reply tokens (the assistant mask's ones; one reply per example)."""
    ones = [i for i, m in enumerate(mask) if m]
    if not ones:
        raise SepoError("an SFT example has no assistant tokens (its chat template marks no reply)")
    return ones[0], ones[-1] + 1


@dataclass
class LegalIndex:
    """Per prompt (its token ids), the trie of its legal replies' tokens: prefix -> allowed next tokens."""

    tries: dict[tuple[int, ...], dict[tuple[int, ...], set[int]]] = field(default_factory=dict)
    demonstrated: set[tuple[int, ...]] = field(default_factory=set)

    @classmethod
    def build(cls, tokenizer, examples) -> "LegalIndex":
        """From examples {"messages": [..., assistant reply], "legal_replies": [answer lines]}; an
        example without legal replies (a message turn) gets no term. The demonstrated reply must be
        one of the legal ones: a dataset saying otherwise is refused."""
        index = cls()
        for number, example in enumerate(examples):
            legal = example.get(LEGAL_COLUMN) or []
            if not legal:
                continue
            messages = list(example["messages"])
            if messages[-1]["content"] not in legal:
                raise SepoError(
                    f"SFT example {number}: its reply {messages[-1]['content']!r} is not one of its legal "
                    "replies"
                )
            trie = None
            for reply in legal:
                ids, mask = render(tokenizer, messages[:-1] + [{"role": "assistant", "content": reply}])
                start, end = reply_span(mask)
                prompt = tuple(ids[:start])
                if trie is None:
                    trie = index.tries.setdefault(prompt, defaultdict(set))
                    index.demonstrated.add(prompt)
                elif prompt not in index.tries or index.tries[prompt] is not trie:
                    raise SepoError(
                        f"SFT example {number}: its legal replies render different prompts (the chat "
                        "template depends on the reply); the legal-reply term cannot be used with it"
                    )
                for j in range(start, end):
                    trie[tuple(ids[start:j])].add(ids[j])
        return index

    def check_covers(self, prompts: set[tuple[int, ...]]) -> None:
        """Every demonstrated prompt must be found among the prompts of the rows TRL tokenized."""
        missing = self.demonstrated - prompts
        if missing:
            raise SepoError(
                f"{len(missing)} of {len(self.demonstrated)} SFT prompts with legal replies were tokenized "
                "differently by the trainer (or truncated by its max length); the legal-reply term cannot "
                "match them"
            )

    def allowed(self, ids: list[int], start: int, end: int) -> list[tuple[int, list[int]]] | None:
        """For a row whose reply occupies [start, end): (position, allowed token ids) per reply
        token, the allowed set being those that keep the prefix on a legal reply; None when the
        row's prompt has no legal replies."""
        trie = self.tries.get(tuple(ids[:start]))
        if trie is None:
            return None
        steps = []
        for j in range(start, end):
            prefix = tuple(ids[start:j])
            # the demonstrated prefix left every legal reply: nothing further is defined
            if prefix not in trie:
                break
            steps.append((j, sorted(trie[prefix])))
        return steps


def illegal_log_mass(logits, input_ids, labels, attention_mask, index: LegalIndex):
    """The per-token terms -log P(allowed next token) along every row's reply, as one 1-D tensor
    (empty when no row has legal replies). `labels` marks the reply (-100 elsewhere); `logits`
    at position j - 1 predict token j."""
    import torch

    rows, positions, allowed_sets = [], [], []
    ids_rows = input_ids.tolist()
    label_rows = labels.tolist()
    keep_rows = attention_mask.tolist() if attention_mask is not None else [[1] * len(r) for r in ids_rows]
    for b, (ids, row_labels, keep) in enumerate(zip(ids_rows, label_rows, keep_rows)):
        trained = [j for j, label in enumerate(row_labels) if label != -100]
        if not trained:
            continue
        start, end = trained[0], trained[-1] + 1
        # left padding, if any, is not part of the prompt
        lead = next((j for j, k in enumerate(keep) if k), 0)
        steps = index.allowed(ids[lead:], start - lead, end - lead)
        for j, tokens in steps or []:
            rows.append(b)
            positions.append(j + lead - 1)
            allowed_sets.append(tokens)
    if not rows:
        return logits.new_zeros(0)
    picked = logits[torch.tensor(rows), torch.tensor(positions)].float()
    mask = torch.zeros_like(picked, dtype=torch.bool)
    for i, tokens in enumerate(allowed_sets):
        mask[i, tokens] = True
    return torch.logsumexp(picked, dim=-1) - torch.logsumexp(picked.masked_fill(~mask, float("-inf")), dim=-1)
