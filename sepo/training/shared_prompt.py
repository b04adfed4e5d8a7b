"""The GRPO loss's forward pass with each group's prompt encoded once.

A GRPO group's completions all answer one prompt. TRL scores a batch by running the model over
every row's prompt + completion, so a group of G completions of a few tokens after a prompt of a
few hundred re-encodes that prompt G times, forward and backward: with answer-only replies that
is nearly all of a step's cost. Here each distinct prompt is run once (with gradients), its keys
and values are repeated for the rows that share it (`DynamicCache.batch_repeat_interleave`, a
differentiable copy), and only the completions are run over that cache. The log-probabilities,
entropies and gradients are those of the whole-row forward up to float rounding (RoPE attention
depends on relative positions only, so the rows' left padding, which shifts TRL's positions, does
not change them); `tests/training/test_shared_prompt.py` checks both.

Hand-written because TRL (1.16) has no such path: its fused LM head saves the logits' memory, not
the repeated prompt. The trainer falls back to TRL's own forward for what this does not cover
(multimodal inputs, MoE auxiliary losses, models `prefix_cache.supports` refuses, gradient
checkpointing, which `sepo train` keeps on an accelerator only). A PEFT model (`--lora`) runs here
too: its adapters are injected into the wrapped model's layers, which this calls directly."""
from __future__ import annotations

SHARED_PROMPTS = True
"""Encode each distinct prompt of a loss batch once (False: TRL's whole-row forward, the reference)."""


def usable(model) -> bool:
    """Whether `logps_and_entropies` can run `model`: a decoder-only model with full attention and a
    cache `prefix_cache` can drive, trained without gradient checkpointing (which drops the cache)."""
    from sepo.policies import prefix_cache

    checkpointing = getattr(model, "is_activation_checkpointing", None)  # transformers 5's name
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    return SHARED_PROMPTS and not checkpointing and prefix_cache.supports(model)


def logps_and_entropies(
    model, input_ids, attention_mask, logits_to_keep: int, temperature: float, compute_entropy: bool
):
    """Per-token log-probabilities [B, logits_to_keep] of the last `logits_to_keep` tokens of each row
    (TRL's layout: left-padded prompt, then right-padded completion) under logits / `temperature`,
    and their entropies when asked (else None)."""
    import torch

    from sepo.policies.prefix_cache import _cache_argument, unwrapped

    model = unwrapped(model)  # a PEFT model's adapters sit in the layers this calls
    # transformers renames `past_key_values` to `cache`
    cache_name = _cache_argument(model) or "past_key_values"
    prompt_len = input_ids.size(1) - logits_to_keep
    rows_of: dict[tuple[int, ...], list[int]] = {}
    for row in range(input_ids.size(0)):
        prompt = input_ids[row, :prompt_len][attention_mask[row, :prompt_len].bool()]
        rows_of.setdefault(tuple(prompt.tolist()), []).append(row)
    logps = [None] * input_ids.size(0)
    entropies = [None] * input_ids.size(0)
    for prompt, rows in rows_of.items():
        index = torch.tensor(rows, device=input_ids.device)
        completion, completion_mask = input_ids[index, prompt_len:], attention_mask[index, prompt_len:]
        ids = torch.tensor([prompt], dtype=input_ids.dtype, device=input_ids.device)
        head = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = getattr(head, cache_name, None) or head.past_key_values
        cache.batch_repeat_interleave(len(rows))
        mask = torch.cat([completion_mask.new_ones((len(rows), len(prompt))), completion_mask], dim=1)
        positions = (len(prompt) + torch.arange(logits_to_keep, device=input_ids.device)).expand(
            len(rows), -1
        )
        tail = model(
            input_ids=completion,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{cache_name: cache},
        )
        # completion token j is predicted by the prompt's last position (j = 0) or by completion token j - 1
        logits = (
            torch.cat([head.logits[:, -1:].expand(len(rows), -1, -1), tail.logits[:, :-1]], dim=1).float()
            / temperature
        )
        logp = torch.log_softmax(logits, dim=-1)
        token_logp = logp.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1) if compute_entropy else None
        for k, row in enumerate(rows):
            logps[row] = token_logp[k]
            if compute_entropy:
                entropies[row] = entropy[k]
    return torch.stack(logps), torch.stack(entropies) if compute_entropy else None


def trainer_class():
    """TRL's GRPOTrainer with the loss's log-probabilities from `logps_and_entropies` where usable."""
    from trl import GRPOTrainer

    class SharedPromptGRPOTrainer(GRPOTrainer):
        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **extra,
        ):
            if compute_aux_loss or any(v is not None for v in extra.values()) or not usable(model):
                return super()._get_per_token_logps_and_entropies(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size,
                    compute_entropy,
                    compute_aux_loss,
                    **extra,
                )
            with self.accelerator.autocast():
                logps, entropies = logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, self.temperature, compute_entropy
                )
            return logps, entropies, None

    return SharedPromptGRPOTrainer
