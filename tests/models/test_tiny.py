"""The tiny local model: builds, reloads through the Auto classes, tokenizes action words as single
tokens, has a TRL-ready chat template, and is deterministic given its seed."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from sepo.games.kuhn.text import ACTION_WORDS  # noqa: E402
from sepo.models.tiny import IM_END, init_tiny_model  # noqa: E402

EPISODES = 60  # fewer random episodes than the default keeps the tests fast; the prompts are the same kind


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=EPISODES)


def test_builds_and_reloads_with_auto_classes(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    info = json.loads((tiny_dir / "sepo_tiny.json").read_text())
    params = sum(p.numel() for p in model.parameters())
    assert params == info["parameters"]
    assert 100_000 <= params <= 2_000_000
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token_id is not None
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    ids = tokenizer("Your card: K", return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape == (1, ids["input_ids"].shape[1], len(tokenizer))


def test_action_words_are_single_tokens(tiny_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    for word in ACTION_WORDS:
        assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1, word
        assert len(tokenizer(" " + word, add_special_tokens=False)["input_ids"]) == 1, word
        # at the start of a reply line, as the model writes it
        alone = tokenizer(word, add_special_tokens=False)["input_ids"]
        assert tokenizer("reason.\n" + word, add_special_tokens=False)["input_ids"][-1:] == alone, word


def test_loaded_tokenizer_matches_trained_one_and_round_trips(tiny_dir):
    from tokenizers import Tokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)  # Qwen2Tokenizer rebuilds its pre-tokenizer
    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    text = "Hand 2 of 6.\nYour card: Q\n  weird  spacing, ünïcode 🎲 and 12345\n\nBET"
    assert (
        tokenizer(text, add_special_tokens=False)["input_ids"]
        == raw.encode(text, add_special_tokens=False).ids
    )
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_recurring_prompt_lines_are_single_tokens(tiny_dir):
    from sepo.games.kuhn.exact import canonical_decisions as kuhn_canonical_decisions
    from sepo.games.kuhn.text import KuhnText

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    text = KuhnText()
    for line in [
        "Your card: K",
        "Legal actions: CALL or FOLD.",
        "What is your action?",
        text.system_prompt().splitlines()[0],
    ]:
        assert len(tokenizer(line, add_special_tokens=False)["input_ids"]) == 1, line
    decision = kuhn_canonical_decisions()["1pb"]
    chat = [
        {"role": "system", "content": text.system_prompt()},
        {"role": "user", "content": text.user_prompt(decision)},
    ]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert len(ids) < 60  # a whole Kuhn decision in a few dozen tokens: fast SFT and GRPO on CPU
    assert tokenizer.decode(ids) == prompt
    # a line token never swallows an action word of a reply
    reply = tokenizer("I hold Q. Legal actions: CALL or FOLD.\nCALL", add_special_tokens=False)["input_ids"]
    assert reply[-1:] == tokenizer("CALL", add_special_tokens=False)["input_ids"]


def test_chat_template_serves_generation_and_assistant_only_loss(tiny_dir):
    from trl.chat_template_utils import has_generation_markers, is_chat_template_stop_token_trained

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    chat = [{"role": "system", "content": "rules"}, {"role": "user", "content": "Your card: K"}]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    full = chat + [{"role": "assistant", "content": "Strong card.\nBET"}]
    rendered = tokenizer.apply_chat_template(full, tokenize=False)
    assert rendered.startswith(prompt) and rendered == prompt + "Strong card.\nBET<|im_end|>\n"
    out = tokenizer.apply_chat_template(
        full, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    masked = [t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tokenizer.decode(masked) == "Strong card.\nBET<|im_end|>\n"
    assert has_generation_markers(tokenizer.chat_template)
    assert is_chat_template_stop_token_trained(tokenizer)


def test_deterministic_given_seed(tiny_dir, tmp_path):
    from safetensors.torch import load_file

    again = init_tiny_model(tmp_path / "again", seed=0, episodes=EPISODES)
    other = init_tiny_model(tmp_path / "other", seed=1, episodes=EPISODES)
    assert (again / "tokenizer.json").read_bytes() == (tiny_dir / "tokenizer.json").read_bytes()
    a, b = load_file(tiny_dir / "model.safetensors"), load_file(again / "model.safetensors")
    c = load_file(other / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].shape == c[k].shape)


def test_llama_variant_loads(tmp_path):
    path = init_tiny_model(tmp_path / "llama", seed=0, episodes=20, arch="llama", num_hidden_layers=1)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "llama"
    assert all(len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1 for w in ACTION_WORDS)


def test_bad_arch_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="arch"):
        init_tiny_model(tmp_path / "x", episodes=5, arch="gpt9")


def test_writing_and_loading_print_no_library_progress_bars(tmp_path, capfd):
    from transformers.utils import logging as transformers_logging

    from sepo.policies.hf import load_hf_model

    transformers_logging.enable_progress_bar()
    capfd.readouterr()
    folder = init_tiny_model(tmp_path / "m", seed=0, episodes=EPISODES)
    load_hf_model(folder, device="cpu")
    err = capfd.readouterr().err
    assert "Writing model shards" not in err and "Loading weights" not in err, err[-300:]


def test_the_tokenizer_corpus_domains_are_recorded_by_name_and_choose_the_model(tiny_dir, tmp_path):
    """Registering a domain changes the default model, so the list it was built from is recorded by
    name and a subset rebuilds a different tokenizer."""
    from sepo.games import domain_names

    info = json.loads((tiny_dir / "sepo_tiny.json").read_text())
    assert info["domains"] == sorted(domain_names())
    fewer = init_tiny_model(tmp_path / "fewer", seed=0, episodes=EPISODES, domains=["kuhn", "ipd"])
    assert json.loads((fewer / "sepo_tiny.json").read_text())["domains"] == ["ipd", "kuhn"]
    assert (fewer / "tokenizer.json").read_bytes() != (tiny_dir / "tokenizer.json").read_bytes()


def test_model_init_names_an_unknown_corpus_domain_in_one_line(tmp_path):
    from tests.cli.cli_helpers import _error, _run

    _error(
        _run("model", "init", "--out", tmp_path / "m", "--domains", "kuhn,chess"),
        "--domains",
        "'chess'",
        "registered",
    )
    assert not (tmp_path / "m").exists()
