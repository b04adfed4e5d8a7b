"""The GRPO loss's forward with each group's prompt encoded once equals TRL's whole-row forward:
log-probabilities, entropies and gradients, on the tiny model, with left-padded prompts of
different lengths and right-padded completions."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model
    from sepo.policies.hf import load_hf_model

    folder = init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, domains=["kuhn"])
    model, _, _ = load_hf_model(str(folder), None, device="cpu", dtype="float32")
    model.config.use_cache = True
    return model


def _batch():
    """Two groups of three completions (TRL's layout): prompts of 9 and 6 tokens left-padded to 9,
    completions of up to 4 tokens right-padded."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 60, (9,), generator=g), torch.randint(3, 60, (6,), generator=g)]
    completions = [[5, 7, 9, 2], [11, 2, 0, 0], [13, 17, 2, 0], [19, 2, 0, 0], [23, 29, 31, 2], [37, 2, 0, 0]]
    lengths = [4, 2, 3, 2, 4, 2]
    ids, mask = torch.zeros((6, 13), dtype=torch.long), torch.zeros((6, 13), dtype=torch.long)
    for row in range(6):
        prompt = prompts[row // 3]
        ids[row, 9 - len(prompt):9] = prompt
        mask[row, 9 - len(prompt):9] = 1
        ids[row, 9:] = torch.tensor(completions[row])
        mask[row, 9:9 + lengths[row]] = 1
    return ids, mask


def _whole_rows(model, ids, mask, keep, temperature):
    """What TRL computes: the model over every whole row (positions as TRL passes them)."""
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1:-1].float() / temperature
    logp = torch.log_softmax(logits, -1)
    return logp.gather(-1, ids[:, -keep:].unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("temperature", [0.7])
def test_log_probabilities_entropies_and_gradients_equal_the_whole_row_forward(model, temperature):
    from sepo.training.shared_prompt import logps_and_entropies, usable

    assert usable(model)
    ids, mask = _batch()
    completion_mask = mask[:, -4:].float()
    results = []
    for shared in (True, False):
        model.zero_grad()
        if shared:
            logp, entropy = logps_and_entropies(model, ids, mask, 4, temperature, True)
        else:
            logp, entropy = _whole_rows(model, ids, mask, 4, temperature)
        loss = (logp * completion_mask).sum() + 0.1 * (entropy * completion_mask).sum()
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logp.detach() * completion_mask, entropy.detach() * completion_mask, grads))
    (lp_s, en_s, g_s), (lp_w, en_w, g_w) = results
    assert torch.allclose(lp_s, lp_w, atol=1e-5) and torch.allclose(en_s, en_w, atol=1e-5)
    assert set(g_s) == set(g_w) and len(g_s) > 5
    for name in g_w:
        assert torch.allclose(g_s[name], g_w[name], atol=1e-5, rtol=1e-4), name
    assert lp_w.abs().sum() > 1.0  # a real comparison, not zeros


def test_a_lora_model_gets_the_whole_row_forwards_log_probabilities_and_adapter_gradients(tmp_path):
    """Through a PEFT wrapper (`--lora`) the loss runs the wrapped model, whose layers carry the
    adapters: log-probabilities and the adapters' gradients equal the wrapper's whole-row forward."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model

    from sepo.models.tiny import init_tiny_model
    from sepo.policies.hf import load_hf_model
    from sepo.training.shared_prompt import logps_and_entropies, usable

    folder = init_tiny_model(tmp_path / "m", seed=0, domains=["kuhn"])
    base, _, _ = load_hf_model(str(folder), None, device="cpu", dtype="float32")
    base.config.use_cache = True
    torch.manual_seed(0)
    adapters = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False,
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    lora = get_peft_model(base, adapters)
    assert usable(lora)
    ids, mask = _batch()
    completion_mask = mask[:, -4:].float()
    results = []
    for shared in (True, False):
        lora.zero_grad()
        if shared:
            logp = logps_and_entropies(lora, ids, mask, 4, 1.0, False)[0]
        else:
            logp = _whole_rows(lora, ids, mask, 4, 1.0)[0]
        (logp * completion_mask).sum().backward()
        grads = {n: p.grad.detach().clone() for n, p in lora.named_parameters() if p.grad is not None}
        results.append((logp.detach() * completion_mask, grads))
    (lp_s, g_s), (lp_w, g_w) = results
    assert torch.allclose(lp_s, lp_w, atol=1e-5)
    assert set(g_s) == set(g_w) and all("lora_" in n for n in g_w) and len(g_w) >= 8
    for name in g_w:
        assert torch.allclose(g_s[name], g_w[name], atol=1e-5, rtol=1e-4), name
    assert max(g.abs().max() for g in g_w.values()) > 1e-4  # the adapters do receive gradient


def test_a_prompt_tuning_model_is_not_unwrapped_so_its_virtual_tokens_are_kept(tmp_path):
    """Prompt tuning adds virtual tokens in the PEFT wrapper itself: calling the wrapped model would
    drop them, so such a model stays wrapped and takes TRL's whole-row forward."""
    pytest.importorskip("peft")
    from peft import PromptTuningConfig, get_peft_model

    from sepo.models.tiny import init_tiny_model
    from sepo.policies.hf import load_hf_model
    from sepo.policies.prefix_cache import supports, unwrapped
    from sepo.training.shared_prompt import usable

    folder = init_tiny_model(tmp_path / "m", seed=0, domains=["kuhn"])
    base, _, _ = load_hf_model(str(folder), None, device="cpu", dtype="float32")
    tuned = get_peft_model(base, PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4))
    assert unwrapped(tuned) is tuned and not supports(tuned) and not usable(tuned)


def test_the_trainer_uses_it_and_falls_back_where_it_does_not_apply(model, monkeypatch):
    from sepo.training import shared_prompt

    calls = []
    monkeypatch.setattr(shared_prompt, "logps_and_entropies", lambda *a, **k: calls.append(1) or (None, None))
    cls = shared_prompt.trainer_class()
    trainer = cls.__new__(cls)  # only the method under test; no TRL set-up
    trainer.temperature = 1.0
    trainer.accelerator = type(
        "A", (), {"autocast": staticmethod(lambda: __import__("contextlib").nullcontext())}
    )()
    ids, mask = _batch()
    assert cls._get_per_token_logps_and_entropies(trainer, model, ids, mask, 4)[2] is None and calls == [1]
    monkeypatch.setattr(shared_prompt, "SHARED_PROMPTS", False)
    fallback = []
    monkeypatch.setattr(
        cls.__mro__[1], "_get_per_token_logps_and_entropies", lambda self, *a, **k: fallback.append(1)
    )
    cls._get_per_token_logps_and_entropies(trainer, model, ids, mask, 4)
    assert calls == [1] and fallback == [1]


def test_training_on_the_cpu_keeps_the_cache_that_the_shared_prompt_loss_needs(model, monkeypatch):
    """TRL turns gradient checkpointing on by default, which drops the KV cache (and would send
    every step back to the whole-row forward); `sepo train` turns it off on the CPU, and only where
    the shared-prompt loss applies (TRL's whole rows without it hold many times the activations)."""
    from sepo.training import shared_prompt
    from sepo.training.grpo import LLMSEPOConfig, gradient_checkpointing

    assert gradient_checkpointing(LLMSEPOConfig(model="m"), model) is False
    assert gradient_checkpointing(LLMSEPOConfig(model="m", use_cpu=False), model) is True
    model.gradient_checkpointing_enable()  # a model checkpointed already keeps TRL's path (no cache to share)
    try:
        assert not shared_prompt.usable(model)
    finally:
        model.gradient_checkpointing_disable()
    assert shared_prompt.usable(model)
    monkeypatch.setattr(shared_prompt, "SHARED_PROMPTS", False)
    assert gradient_checkpointing(LLMSEPOConfig(model="m"), model) is True


def test_a_training_step_on_the_cpu_goes_through_it(tmp_path, monkeypatch):
    from sepo.models.tiny import init_tiny_model
    from sepo.training import shared_prompt
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

    calls = []
    original = shared_prompt.logps_and_entropies
    monkeypatch.setattr(
        shared_prompt, "logps_and_entropies", lambda *a, **k: calls.append(a[1].shape) or original(*a, **k)
    )
    tiny = init_tiny_model(tmp_path / "tiny", seed=0, domains=["kuhn"])
    run_llm_sepo(
        LLMSEPOConfig(
            model=str(tiny),
            steps=1,
            groups=2,
            group_size=2,
            table_samples=2,
            final_samples=1,
            max_new_tokens=8,
            seed=0,
        ),
        tmp_path / "run",
    )
    assert calls and all(shape[0] == 4 for shape in calls)  # the step's 2 groups x 2 completions


def test_a_lora_step_on_the_cpu_trains_through_it(tmp_path, monkeypatch):
    """A LoRA adapter (PEFT-wrapped model) trains through the same trainer and the shared-prompt loss."""
    pytest.importorskip("peft")
    from sepo.models.tiny import init_tiny_model
    from sepo.training import shared_prompt
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

    calls = []
    original = shared_prompt.logps_and_entropies
    def spy(*args, **kwargs):
        calls.append(type(args[0]).__name__)
        return original(*args, **kwargs)

    monkeypatch.setattr(shared_prompt, "logps_and_entropies", spy)

    tiny = init_tiny_model(tmp_path / "tiny", seed=0, domains=["kuhn"])
    summary = run_llm_sepo(
        LLMSEPOConfig(
            model=str(tiny),
            steps=1,
            groups=2,
            group_size=2,
            table_samples=2,
            final_samples=1,
            max_new_tokens=8,
            seed=0,
            lora=True,
            lora_r=4,
        ),
        tmp_path / "run",
    )
    assert summary["steps"] == 1 and (tmp_path / "run" / "model").is_dir()
    assert calls and all(name.startswith("Peft") for name in calls)
