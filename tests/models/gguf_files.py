"""Tiny GGUF files written with the `gguf` package, for the converter's tests (no network).

`write_tiny_llama_gguf` saves a random 2-layer Llama as llama.cpp's converter would: its tensor
names, Q and K rows permuted for llama.cpp's rotary layout, a byte-level BPE vocabulary with
ChatML control tokens, and a ChatML chat template (SmolLM2's shape: a default system prompt,
no generation markers)."""
from __future__ import annotations

from pathlib import Path

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = ("Ġ t", "h e", "B E", "BE T", "P A", "PA S", "PAS S")
DEFAULT_SYSTEM = "You are a tiny test assistant."
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _tokens() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = list(SPECIALS) + list(bytes_to_unicode().values())
    tokens += ["".join(merge.split(" ")) for merge in MERGES]
    return tokens


def _permute(weights, n_head: int):
    """llama.cpp's row order for the rotary halves of Q and K (convert_hf_to_gguf's `permute`)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def tiny_llama(vocab_size: int, seed: int = 0):
    """A 2-layer Llama whose context holds a Kuhn prompt and its reply (the agent checks that they fit)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)  # not all ones, so a mixed-up norm would show
    return model


def write_tiny_llama_gguf(path: str | Path, seed: int = 0, architecture: str = "llama"):
    """Write the tiny model to `path` as GGUF (float32 tensors); returns the Hugging Face model it holds."""
    import gguf
    import numpy as np

    tokens = _tokens()
    model = tiny_llama(len(tokens), seed)
    config = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny test llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(len(tokens))
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    )
    writer.add_token_merges(list(MERGES))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    layer_names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied: llama.cpp writes no output.weight
        data = tensor.detach().numpy().astype(np.float32)
        if name in names:
            writer.add_tensor(names[name], data)
            continue
        _, _, layer, *rest = name.split(".")
        part = ".".join(rest[:-1])
        if part == "self_attn.q_proj":
            data = _permute(data, config.num_attention_heads)
        elif part == "self_attn.k_proj":
            data = _permute(data, config.num_key_value_heads)
        writer.add_tensor(f"blk.{layer}.{layer_names[part]}.weight", np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model
