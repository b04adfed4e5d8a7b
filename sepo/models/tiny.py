"""A tiny causal LM built locally: the test model of every LLM code path.

No weights can be downloaded where sepo is built and tested, so `init_tiny_model` makes a small
Qwen2-style model with random weights and a byte-level BPE tokenizer trained on the implemented
domains' own text (`sepo.models.corpus`), with a ChatML chat template. The directory it writes
loads with `AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)`,
exactly like a real model from the Hub, so every command that takes a model id takes it too.

Design points:
- Byte-level BPE is lossless (any text round-trips, newlines included, so the strict parsers see
  exactly what the model wrote), and every action word of every domain is one token both at the
  start of a line and after a space (a numeral: one token per digit, the space apart, as Qwen2's
  pre-tokenizer splits digits); `init_tiny_model` checks that and fails otherwise.
- Line tokens: every line of the system prompts and every line that recurs in the corpus (a
  prompt's state lines, its "Legal actions: ..." line) is added as one ordinary (non-special)
  token, so a whole decision is ~40 tokens instead of ~270 and each state feature is one distinct
  token. A 0.5M-parameter model then learns state-conditioned play from SFT in a few hundred
  steps; with plain BPE it must first learn to find the private state among the words of the
  rules, which took it 350 steps in one run and never happened in another (1000 steps). Action
  words are never part of a line token.
- Chat template: ChatML (`<|im_start|>role\\n...<|im_end|>\\n`), `add_generation_prompt` support,
  and `{% generation %}` markers around each assistant reply *including its `<|im_end|>`*, which is
  what TRL's `SFTTrainer(assistant_only_loss=True)` needs (it masks with
  `return_assistant_tokens_mask=True` and warns if the end-of-turn token is not trained). The
  prompt rendered with a generation prompt is a prefix of the full conversation.
- Special tokens: `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos; also the generation
  config's eos, so `generate` stops at the end of the assistant turn). No BOS.
- Deterministic: the same seed, corpus and sizes give byte-identical files.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

from sepo.models import quiet_library_progress

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
ROLE_WORDS = ("system", "user", "assistant")

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}"
    "{{- message['content'] + '<|im_end|>\\n' }}"
    "{%- endgeneration %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
"""ChatML with TRL's `{% generation %}` markers (assistant content and its `<|im_end|>` trained)."""

DEFAULT_SIZES = dict(
    hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def train_tokenizer(
    texts: Sequence[str], words: Iterable[str], vocab_size: int = 1024, lines: Sequence[str] = ()
):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `texts`, with every word of `words`
    guaranteed to be one token (alone and after a space), and every string of `lines` added as
    one (non-special) token of its own."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    words = list(words)
    tokenizer = Tokenizer(models.BPE())
    # Exactly Qwen2's normaliser and pre-tokenizer: `AutoTokenizer` loads any `model_type: qwen2`
    # directory as `Qwen2Tokenizer`, which rebuilds these from vocab + merges, so training with
    # anything else would make the loaded tokenizer differ from the trained one.
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # the action words (and the chat roles), repeated, so that BPE merges each into one token
    boosted = words + [w for w in ROLE_WORDS if w not in words]
    boost = [(" ".join(boosted) + "\n") * 50 + "\n".join(boosted * 50)]
    tokenizer.train_from_iterator(list(texts) + boost, trainer=trainer)
    if lines:
        tokenizer.add_tokens([AddedToken(line, special=False, normalized=False) for line in lines])
    for word in words:
        # Qwen2's pre-tokenizer isolates every digit, so a numeral is one token per digit and a
        # space before it stays a token of its own, as in every Qwen tokenizer
        length = len(word) if word.isdigit() else 1
        for spelling in (word, " " + word, "\n" + word):
            ids = tokenizer.encode(spelling).ids
            expected = (
                length
                if spelling == word
                else length + 1
                if word.isdigit() or spelling.startswith("\n")
                else 1
            )
            if len(ids) != expected:
                raise ValueError(
                    f"tiny tokenizer: action word {spelling!r} is not a single token ({ids}); raise "
                    "vocab_size"
                )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def build_tiny_model(vocab_size: int, pad_id: int, eos_id: int, seed: int = 0, arch: str = "qwen2", **sizes):
    """A randomly initialised Qwen2- or Llama-style causal LM (float32, tied embeddings)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    cfg = dict(DEFAULT_SIZES)
    cfg.update(sizes)
    common = dict(
        vocab_size=vocab_size,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        initializer_range=0.02,
        **cfg,
    )
    if arch == "qwen2":
        config, cls = Qwen2Config(use_sliding_window=False, **common), Qwen2ForCausalLM
    elif arch == "llama":
        config, cls = LlamaConfig(**common), LlamaForCausalLM
    else:
        raise ValueError(f"tiny model: arch must be 'qwen2' or 'llama', got {arch!r}")
    config.dtype = "float32"
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = cls(config).float()
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    model.eval()
    return model


def init_tiny_model(
    out_dir: str | os.PathLike,
    seed: int = 0,
    corpus: Iterable[str] | None = None,
    *,
    domains: Iterable[str] | None = None,
    episodes: int = 200,
    vocab_size: int = 1024,
    line_tokens: bool = True,
    min_line_count: int = 2,
    arch: str = "qwen2",
    **sizes,
) -> Path:
    """Build the tiny model and its tokenizer and save both to `out_dir`; returns the path.

    `corpus`: extra texts for the tokenizer (e.g. SFT reasons), added to the text of `domains`
    (default: every registered game, both protocols, `episodes` random episodes each). The
    tokenizer, and so every number measured with the model, depends on which domains were read:
    registering a new domain changes the default model, so `sepo_tiny.json` lists them by name
    and `sepo model init --domains` rebuilds an earlier model.
    `sizes`: Qwen2/Llama config overrides (hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads). Writes `sepo_tiny.json` with what was built."""
    from sepo.games import domain_names
    from sepo.models.corpus import action_words, domain_corpus, frequent_lines, system_prompts

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    domains = sorted(domain_names() if domains is None else domains)
    texts = domain_corpus(domains, episodes=episodes, seed=seed)
    if corpus is not None:
        texts.extend(corpus)
    words = action_words(domains)
    lines = (
        frequent_lines(texts, exclude=words, min_count=min_line_count, always=system_prompts(domains))
        if line_tokens
        else []
    )
    tokenizer = train_tokenizer(texts, words, vocab_size=vocab_size, lines=lines)
    model = build_tiny_model(
        len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, seed=seed, arch=arch, **sizes
    )
    quiet_library_progress()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "seed": seed,
        "arch": arch,
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "domains": domains,
        "action_words": words,
        "line_tokens": len(lines),
        "corpus_texts": len(texts),
        "sizes": {**DEFAULT_SIZES, **sizes},
    }
    (out / "sepo_tiny.json").write_text(json.dumps(info, indent=2) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m sepo.models.tiny --out DIR [--seed S]`"""
    import argparse

    parser = argparse.ArgumentParser(description="Build the tiny local test model (random weights).")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--arch", choices=("qwen2", "llama"), default="qwen2")
    parser.add_argument("--corpus", help="a text file of extra tokenizer text, one document per line")
    args = parser.parse_args(argv)
    corpus = Path(args.corpus).read_text().splitlines() if args.corpus else None
    out = init_tiny_model(args.out, seed=args.seed, corpus=corpus, vocab_size=args.vocab_size, arch=args.arch)
    print(json.loads((out / "sepo_tiny.json").read_text()))


if __name__ == "__main__":
    main()
