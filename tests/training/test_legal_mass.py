"""The legal-reply term of answer-only SFT (`sepo.training.legal_mass`, `sepo sft --legal-weight`):
the allowed next tokens come from the decision's legal answers as the chat template renders them,
the term is -log of their probability, and training with it lowers the probability of illegal replies."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("trl")

from typer.testing import CliRunner  # noqa: E402

from sepo.cli.main import app  # noqa: E402
from sepo.errors import SepoError  # noqa: E402
from sepo.training.legal_mass import LegalIndex, illegal_log_mass, render, reply_span  # noqa: E402


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"HF_HUB_OFFLINE": "1"})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny", seed=0, episodes=2, num_hidden_layers=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("legal-data")
    answer_only = _run(
        "data",
        "sft",
        "--game",
        "negotiation-gt",
        "--answer-only",
        "--episodes",
        "2",
        "--out",
        root / "ao",
        "--quiet",
    )
    with_reasons = _run(
        "data", "sft", "--game", "kuhn", "--episodes", "1", "--out", root / "reasons", "--quiet"
    )
    assert answer_only.exit_code == 0 and with_reasons.exit_code == 0, (
        answer_only.output + with_reasons.output
    )
    return root / "ao", root / "reasons"


def _examples(folder):
    from datasets import load_from_disk

    return load_from_disk(str(folder))["train"].to_list()


def test_the_allowed_tokens_are_the_legal_answers_and_the_term_is_minus_log_their_mass(tiny, data):
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    example = next(ex for ex in _examples(data[0]) if len(ex["legal_replies"]) > 2)
    index = LegalIndex.build(tokenizer, [example])
    ids, mask = render(tokenizer, example["messages"])
    start, end = reply_span(mask)
    steps = index.allowed(ids, start, end)
    assert [j for j, _ in steps] == list(range(start, end))
    renders = [
        render(tokenizer, example["messages"][:-1] + [{"role": "assistant", "content": r}])
        for r in example["legal_replies"]
    ]
    assert steps[0][1] == sorted({r_ids[reply_span(r_mask)[0]] for r_ids, r_mask in renders})
    assert all(ids[j] in allowed for j, allowed in steps)  # the demonstration itself is legal at every token

    vocab = len(tokenizer)
    logits = torch.zeros(1, len(ids), vocab)  # uniform: the term is log(vocab / allowed)
    labels = torch.tensor([[t if start <= j < end else -100 for j, t in enumerate(ids)]])
    terms = illegal_log_mass(
        logits, torch.tensor([ids]), labels, torch.ones(1, len(ids), dtype=torch.long), index
    )
    assert terms.tolist() == pytest.approx([math.log(vocab / len(allowed)) for _, allowed in steps])
    j, allowed = steps[0]
    logits[0, j - 1, allowed] = 50.0  # all the mass on the legal first tokens: the term vanishes there
    assert illegal_log_mass(logits, torch.tensor([ids]), labels, None, index)[0].item() == pytest.approx(
        0.0, abs=1e-6
    )


def test_a_reply_outside_its_legal_list_is_refused(tiny, data):
    from transformers import AutoTokenizer

    example = _examples(data[0])[0]
    example["legal_replies"] = [
        r for r in example["legal_replies"] if r != example["messages"][-1]["content"]
    ]
    with pytest.raises(SepoError, match="is not one of its legal replies"):
        LegalIndex.build(AutoTokenizer.from_pretrained(tiny), [example])


def _illegal_mass(model_dir, examples, index):
    """Mean probability of an illegal next token along the examples' demonstrated replies."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    masses = []
    for example in examples:
        ids, mask = render(tokenizer, example["messages"])
        start, end = reply_span(mask)
        labels = torch.tensor([[t if start <= j < end else -100 for j, t in enumerate(ids)]])
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits
        masses += (
            1 - torch.exp(-illegal_log_mass(logits, torch.tensor([ids]), labels, None, index))
        ).tolist()
    return sum(masses) / len(masses)


def test_training_with_the_term_lowers_the_illegal_mass_more_than_cross_entropy_alone(tiny, data, tmp_path):
    from transformers import AutoTokenizer

    answer_only = data[0]
    runs = {}
    for weight in ("0", "5"):
        result = _run(
            "sft",
            "--model",
            tiny,
            "--data",
            answer_only,
            "--max-steps",
            "6",
            "--batch-size",
            "4",
            "--lr",
            "2e-3",
            "--legal-weight",
            weight,
            "--out",
            tmp_path / weight,
            "--quiet",
        )
        assert result.exit_code == 0, result.output
        runs[weight] = tmp_path / weight / "model"
    from sepo.runs import read_manifest

    # runs made before the term resume unchanged
    assert "legal_weight" not in read_manifest(tmp_path / "0")["config"]
    assert read_manifest(tmp_path / "5")["config"]["legal_weight"] == 5.0
    assert any("illegal_mass" in line for line in (tmp_path / "5" / "metrics.jsonl").read_text().splitlines())
    examples = _examples(answer_only)
    index = LegalIndex.build(AutoTokenizer.from_pretrained(tiny), examples)
    before = _illegal_mass(tiny, examples, index)
    plain, with_term = _illegal_mass(runs["0"], examples, index), _illegal_mass(runs["5"], examples, index)
    assert with_term < plain < before, (before, plain, with_term)


def test_the_term_needs_answer_only_data_and_a_weight_in_range(tiny, data, tmp_path):
    reasons = _run("sft", "--model", tiny, "--data", data[1], "--max-steps", "1", "--legal-weight", "1",
                   "--out", tmp_path / "r", "--quiet")
    assert reasons.exit_code == 2 and "needs answer-only data" in reasons.output
    assert not (tmp_path / "r").exists()  # refused before the run folder is made
    negative = _run("sft", "--model", tiny, "--data", data[0], "--max-steps", "1", "--legal-weight", "-1",
                    "--out", tmp_path / "n", "--quiet")
    assert negative.exit_code == 2 and "--legal-weight must be in [0, 1000]" in negative.output
