"""`sepo sft` on several datasets at once, and the loss on a ChatML model whose pad token is its
end-of-turn token (SmolLM2's `<|im_end|>`): the reply's end still carries loss."""
from __future__ import annotations

import pytest

pytest.importorskip("trl")
pytest.importorskip("gguf")

from typer.testing import CliRunner  # noqa: E402

from sepo.cli.main import app  # noqa: E402
from sepo.errors import SepoError  # noqa: E402
from sepo.runs import read_manifest  # noqa: E402


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"HF_HUB_OFFLINE": "1"})


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-data")
    for game in ("kuhn", "ipd"):
        result = _run(
            "data",
            "sft",
            "--game",
            game,
            "--episodes",
            "1",
            "--out",
            root / game,
            "--quiet",
            "--rounds" if game == "ipd" else "--hands",
            "2",
        )
        assert result.exit_code == 0, result.output
    return root / "kuhn", root / "ipd"


def test_several_datasets_are_concatenated_split_by_split(datasets):
    from datasets import load_from_disk

    from sepo.training.sft import _load_datasets

    kuhn, ipd = datasets
    train, validation = _load_datasets([str(kuhn), str(ipd)])
    parts = [load_from_disk(str(path)) for path in (kuhn, ipd)]
    assert len(train) == sum(len(p["train"]) for p in parts)
    assert len(validation) == sum(len(p["validation"]) for p in parts)
    systems = {example["messages"][0]["content"].split("\n")[0] for example in train}
    assert any("Kuhn" in s for s in systems) and any("Prisoner" in s for s in systems)
    with pytest.raises(SepoError, match="no such folder"):
        _load_datasets([str(kuhn), str(kuhn.parent / "missing")])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from sepo.models.tiny import init_tiny_model

    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny", seed=0, episodes=2, num_hidden_layers=1)


def test_sft_takes_data_more_than_once_and_records_every_folder(datasets, tiny, tmp_path):
    kuhn, ipd = datasets
    result = _run(
        "sft",
        "--model",
        tiny,
        "--data",
        kuhn,
        "--data",
        ipd,
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--out",
        tmp_path / "run",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert read_manifest(tmp_path / "run")["config"]["data"] == [str(kuhn.resolve()), str(ipd.resolve())]
    again = _run(
        "sft",
        "--model",
        tiny,
        "--data",
        kuhn,
        "--data",
        ipd,
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--out",
        tmp_path / "run",
        "--quiet",
    )
    assert "already complete" in again.stdout
    one = _run(
        "sft",
        "--model",
        tiny,
        "--data",
        kuhn,
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--out",
        tmp_path / "run",
        "--quiet",
    )
    assert one.exit_code == 2  # another run's settings: refused


def test_the_progress_names_the_validation_pass(datasets, tiny, tmp_path):
    """The validation loss of a real model takes minutes; the progress said the last checkpoint's
    stage all that time."""
    from sepo.training.sft import SFTRunConfig, run_sft

    seen = []
    run_sft(
        SFTRunConfig(model=str(tiny), data=str(datasets[0]), max_steps=1, batch_size=2),
        tmp_path / "run",
        on_stage=seen.append,
    )
    assert any(text.startswith("validation loss at step 1 (") for text in seen), seen


def test_lora_sft_on_the_cpu_saves_one_merged_model(datasets, tiny, tmp_path):
    """`--lora` had no test: the adapter trains on the CPU and the saved model is the base with the
    adapter merged in (a plain folder `hf:` loads, no adapter files), its attention weights moved."""
    import torch
    from transformers import AutoModelForCausalLM

    kuhn, _ = datasets
    result = _run(
        "sft",
        "--model",
        tiny,
        "--data",
        kuhn,
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--lr",
        "1e-2",
        "--lora",
        "--out",
        tmp_path / "run",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    saved = tmp_path / "run" / "model"
    assert (saved / "config.json").is_file() and not (saved / "adapter_config.json").exists()
    before = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    after = AutoModelForCausalLM.from_pretrained(saved).state_dict()
    assert before.keys() == after.keys()
    moved = [name for name in before if not torch.equal(before[name], after[name])]
    assert moved and all(
        any(part in name for part in ("q_proj", "k_proj", "v_proj", "o_proj")) for name in moved
    )


def test_the_reply_end_carries_loss_when_the_pad_token_is_the_end_of_turn(tmp_path):
    """SmolLM2 pads with `<|im_end|>`: a collator that masked pad ids would never teach the model to
    stop. TRL's masks padding by position; checked on a converted ChatML GGUF (pad = eos = im_end)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from sepo.models import gguf
    from sepo.training.sft import library_warnings
    from tests.models.gguf_files import write_tiny_llama_gguf

    write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    gguf.import_model(tmp_path / "tiny.gguf", tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert tokenizer.pad_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    chats = [[{"role": "user", "content": "Your move?"}, {"role": "assistant", "content": reply}]
             for reply in ("BET", "the card is high, so\nPASS")]
    with library_warnings():
        args = SFTConfig(
            output_dir=str(tmp_path / "out"),
            assistant_only_loss=True,
            use_cpu=True,
            report_to="none",
            max_length=128,
        )
        trainer = SFTTrainer(
            model=AutoModelForCausalLM.from_pretrained(tmp_path / "model"),
            args=args,
            train_dataset=Dataset.from_list([{"messages": c} for c in chats]),
            processing_class=tokenizer,
        )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    end = tokenizer.pad_token_id
    for ids, labels, mask in zip(
        batch["input_ids"].tolist(), batch["labels"].tolist(), batch["attention_mask"].tolist()
    ):
        trained = [t for t in labels if t != -100]
        assert tokenizer.decode(trained).rstrip("\n").endswith("<|im_end|>")
        # padding (also im_end ids) is not trained
        assert all(label == -100 for label, m in zip(labels, mask) if not m)
    # the shorter row really was padded with im_end
    assert any(ids.count(end) > 3 for ids in batch["input_ids"].tolist())


def test_the_same_dataset_twice_is_refused(tmp_path):
    """`sepo sft --data d --data ./d/` is refused: it would train on every example twice."""
    from typer.testing import CliRunner

    from sepo.cli.main import app

    (tmp_path / "d").mkdir()
    result = CliRunner().invoke(
        app,
        [
            "sft",
            "--model",
            "m",
            "--data",
            str(tmp_path / "d"),
            "--data",
            f"{tmp_path}/./d/",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 2 and "names the folder given before" in result.stderr, result.output
    assert not (tmp_path / "run").exists()
