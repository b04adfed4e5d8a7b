"""Loading a Hugging Face causal LM for `HFPolicy`: model and tokenizer, dtype, threads, device.

`load_hf_model` takes a local folder, a Hub id, a PEFT adapter folder or an already loaded model,
and turns every way that can fail into one line naming the path (`SepoError`). The checks beside
it refuse what would otherwise fail late or silently: a tokenizer that is not the model's, a reply
limit or a prompt that does not fit the model's context. `LoadedModel` is what the other parts of
the policy share about the loaded model: its device, inference mode and tokenization.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from sepo.errors import SepoError


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
        raise SepoError(f"cannot load Hugging Face model {repo_id!r}: no such local folder, and it is not in "
                        "the Hub cache (HF_HUB_OFFLINE is set)")
    try:
        huggingface_hub.model_info(repo_id, timeout=10)
    except Exception as error:  # noqa: BLE001 - unreachable Hub, unknown or gated repo: one line either way
        raise SepoError(f"cannot load Hugging Face model {repo_id!r}: no such local folder, and the Hub "
                        f"says: {_one_line(error)}") from None


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
        looks_local = (local.exists() or path.startswith((".", "/", "~")) or path.count("/") > 1
                       or path.endswith("/") or os.sep != "/" and os.sep in path)
        if local.is_file():
            hint = ("; convert a GGUF file first: `sepo model import FILE --out DIR`"
                    if local.suffix.lower() == ".gguf" else "")
            raise SepoError(f"cannot load Hugging Face model {path!r}: it is a file, not a model "
                            f"folder{hint}")
        if looks_local and not local.is_dir():
            raise SepoError(f"cannot load Hugging Face model {path!r}: no such directory")
        source = tokenizer_source = str(local) if local.is_dir() else path
        if not local.is_dir():
            _check_hub_model(path)
        try:
            if local.is_dir() and (local / "adapter_config.json").exists():
                from peft import AutoPeftModelForCausalLM

                model = AutoPeftModelForCausalLM.from_pretrained(source, dtype=dtype,
                                                                 trust_remote_code=trust_remote_code)
                if tokenizer is None:
                    tok_source = source if (local / "tokenizer_config.json").exists() else model.peft_config[
                        "default"
                    ].base_model_name_or_path
                    tokenizer = AutoTokenizer.from_pretrained(tok_source, trust_remote_code=trust_remote_code)
            else:
                model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype,
                                                             trust_remote_code=trust_remote_code)
        except Exception as error:  # noqa: BLE001 - any loading failure becomes one clear line
            where = ("local directory" if local.is_dir()
                     else "not a local directory, and the Hub download failed")
            raise SepoError(f"cannot load Hugging Face model {path!r} ({where}): "
                            f"{_one_line(error)}") from None
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
        raise SepoError(f"the tokenizer of {name!r} is not the model's: it knows {known:,} tokens{size} and "
                        f"encodes a sentence to {len(ids)} tokens (is the folder's tokenizer.json missing?)")


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
        raise SepoError(f"{option} {max_new_tokens} does not fit {name}'s context of {context:,} tokens, "
                        f"which holds the prompt too; use at most {context - 1:,} (less the prompt's length)")


def check_prompt_room(prompt_tokens: int, max_new_tokens: int, model, name: str,
                      option: str = "--max-new-tokens") -> None:
    """A prompt of `prompt_tokens` and a reply of up to `max_new_tokens` within the model's context
    (checked where the prompt is known: `check_reply_length` can only check the reply alone)."""
    context = context_length(model)
    if context is None or prompt_tokens + max_new_tokens <= context:
        return
    room = context - prompt_tokens
    shorter = "a shorter game (fewer rounds: a shorter history in the prompt)"
    fix = (f"use {option} {room} or fewer, or {shorter}" if room >= 1
           else f"use {shorter} or a model with a longer context")
    raise SepoError(f"a prompt of {prompt_tokens:,} tokens and {option} {max_new_tokens} do not fit "
                    f"{name}'s context of {context:,} tokens ({max(room, 0):,} left for the reply); {fix}")


class LoadedModel:
    """What every part of `HFPolicy` shares about its loaded model: the device it computes on, the
    inference mode of a call, and plain tokenization. Needs `self.model` and `self.tokenizer`."""

    model: Any
    tokenizer: Any

    @property
    def device(self):
        return next(self.model.parameters()).device

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

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def _vocabulary(self) -> int:
        """How many token ids generation can produce: the model's output size (or the tokenizer's)."""
        return max(len(self.tokenizer), int(getattr(self.model.config, "vocab_size", 0) or 0))
