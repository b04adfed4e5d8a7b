"""Supervised warm start with TRL's SFTTrainer, loss on the assistant turns only.

Runs are directories: `trainer/` holds TRL's checkpoints (a killed run resumes from the latest),
`metrics.jsonl` the logged losses, and `model/` the final model with its tokenizer (a LoRA
adapter is merged into the base weights first), loadable as `hf:DIR/model` or `run:DIR`.
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from sepo.errors import SepoError, brief, one_line
from sepo.runs import MANIFEST, check_out_path, open_run
from sepo.training.checkpoint import MetricsLog, is_number, quiet_tied_weights, read_json
from sepo.training.config import check_accelerator, check_learning_rate


@dataclass
class SFTRunConfig:
    """Settings of `sepo sft` (defaults sized for the tiny local model on a CPU)."""

    model: str
    data: str | list[str]
    """One dataset folder from `sepo data sft`, or several (their splits are concatenated)."""
    epochs: float = 2.0
    max_steps: int = -1
    batch_size: int = 16
    learning_rate: float = 2e-3
    warmup_ratio: float = 0.05
    lora: bool = False
    lora_r: int = 32
    max_length: int = 512
    seed: int = 0
    save_steps: int = 200
    use_cpu: bool = True
    legal_weight: float = 0.0
    """Weight of the legal-reply term (`sepo.training.legal_mass`) beside the cross-entropy; it needs
    answer-only data, whose examples list their legal replies. 0: cross-entropy alone."""

    def validate(self) -> "SFTRunConfig":
        for name in ("epochs", "learning_rate", "warmup_ratio", "legal_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SepoError(f"{_OPTION.get(name, name)} must be a finite number, got {value}")
        if self.max_steps != -1 and self.max_steps < 1:
            raise SepoError(f"--max-steps must be >= 1, or -1 to train for --epochs; got {self.max_steps}")
        if self.max_steps == -1 and not 0 < self.epochs <= 1e6:
            raise SepoError(f"--epochs must be > 0 (and at most 1e6), got {self.epochs}")
        check_learning_rate(self.learning_rate)
        if not 0 <= self.legal_weight <= 1e3:
            raise SepoError(f"--legal-weight must be in [0, 1000], got {self.legal_weight}")
        if not 0 <= self.warmup_ratio < 1:
            raise SepoError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        for name in ("batch_size", "lora_r", "max_length", "save_steps"):
            if getattr(self, name) < 1:
                raise SepoError(f"{_OPTION.get(name, name)} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.seed < 2**32:
            raise SepoError(f"--seed must be in [0, 2**32), got {self.seed}")
        if isinstance(self.data, list):
            resolved = [Path(path).expanduser().resolve() for path in self.data]
            for i, path in enumerate(resolved):
                if path in resolved[:i]:
                    raise SepoError(
                        f"--data {brief(str(self.data[i]))} names the folder given before as "
                        f"{brief(str(self.data[resolved.index(path)]))}; give each dataset once (its "
                        "examples would count double)"
                    )
        if not self.use_cpu:
            check_accelerator()
        return self

    def settings(self) -> dict:
        """The run's manifest config: local paths made absolute, so a resume from another folder still
        matches."""
        settings = asdict(self)
        if not self.legal_weight:  # runs made before the term existed resume under the same settings
            del settings["legal_weight"]
        settings["data"] = ([str(Path(d).resolve()) for d in self.data] if isinstance(self.data, list)
                            else str(Path(self.data).resolve()))
        if Path(self.model).expanduser().is_dir():
            settings["model"] = str(Path(self.model).expanduser().resolve())
        return settings


_OPTION = {
    "epochs": "--epochs",
    "learning_rate": "--lr",
    "batch_size": "--batch-size",
    "max_steps": "--max-steps",
    "legal_weight": "--legal-weight",
}


@dataclass
class SFTResult:
    model: Path
    steps: int
    train_loss: float | None
    already_complete: bool = False


DATA_IDENTITY = "data.json"
"""A run's record of its datasets' contents (sha256 per folder), written at its start and checked
on resume: a dataset replaced in place (`sepo data sft --overwrite`) would otherwise be trained on
past a kill without a word, the run's config naming only its path."""


def data_identity(paths: str | list[str]) -> dict[str, str]:
    """{resolved folder: sha256 of its dataset files} (`dataset_dict.json` and each split's data,
    state and info files; nothing else in the folder counts)."""
    identity = {}
    for path in [paths] if isinstance(paths, str) else paths:
        folder = Path(path).expanduser().resolve()
        digest = hashlib.sha256()
        index = folder / "dataset_dict.json"
        files = [index]
        try:
            splits = json.loads(index.read_text()).get("splits", [])
        except (OSError, ValueError, AttributeError):
            splits = []
        for split in sorted(s for s in splits if isinstance(s, str)):
            files += sorted(
                p for p in (folder / split).glob("*") if p.is_file() and p.name.endswith((".arrow", ".json"))
            )
        for file in files:
            digest.update(str(file.relative_to(folder)).encode() + b"\0")
            try:
                digest.update(file.read_bytes())
            except OSError:
                digest.update(b"<unreadable>")
        identity[str(folder)] = digest.hexdigest()
    return identity


def _check_same_data(run, out: Path, paths: str | list[str]) -> None:
    """Record the datasets' identity at a run's start; on resume, refuse data changed since."""
    identity = data_identity(paths)
    saved = out / DATA_IDENTITY
    if not run.fresh and saved.is_file():
        before = read_json(saved, "SFT data record")
        changed = [path for path, digest in identity.items() if before.get(path) != digest]
        if changed:
            raise SepoError(
                f"--data {brief(changed[0], 200)} changed since this run started (its dataset files differ); "
                f"resuming would train on other data: use another --out, or --overwrite to start over"
            )
    run.write_json(DATA_IDENTITY, identity)


MODEL_IDENTITY = "base_model.json"
"""A run's record of its starting model folder's files (name, size, modification time), written at
its start and checked on resume: a model replaced in place (`sepo sft --overwrite`, `sepo model
init --overwrite`) would otherwise be resumed from without a word, the run's config naming only
its path, and a LoRA checkpoint (an adapter alone) applied to other base weights. Sizes and times,
not a hash: hashing a 4B model's weights at every resume would take a minute."""


def model_stamp(model: str) -> dict | None:
    """{resolved folder, {file: [size, mtime_ns]}} of a local model folder's own files (not its
    sub-folders, not sepo's run files); None for a Hub id (its revision is the Hub's to keep)."""
    from sepo.runs import LOCK, TMP_PREFIX

    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in (MANIFEST, LOCK) and not path.name.startswith(TMP_PREFIX):
            info = path.stat()
            files[path.name] = [info.st_size, info.st_mtime_ns]
    return {"folder": str(folder.resolve()), "files": files}


def check_same_model(run, out: Path, model: str, option: str = "--model") -> None:
    """Record the starting model's files at a run's start; on resume, refuse a model changed since."""
    stamp = model_stamp(model)
    if stamp is None:
        return
    saved = out / MODEL_IDENTITY
    if not run.fresh and saved.is_file():
        before = read_json(saved, "run's model record").get("files", {})
        names = sorted(set(before) | set(stamp["files"]))
        changed = [name for name in names if before.get(name) != stamp["files"].get(name)]
        if changed:
            raise SepoError(
                f"{option} {brief(model, 200)} changed since this run started ({brief(changed[0], 80)} "
                f"{_change_word(changed[0], before, stamp['files'])}); "
                "resuming would continue from other weights: use another --out, or --overwrite to start over"
            )
    run.write_json(MODEL_IDENTITY, stamp)


def _change_word(name: str, before, now) -> str:
    """How a file of a model folder changed: it is new, it was removed, or it differs."""
    return "is new" if name not in before else "was removed" if name not in now else "differs"


def _check_inputs(config: SFTRunConfig, out: Path, overwrite: bool) -> None:
    """The model and the dataset folders, as far as they can be checked without loading them, before
    the run folder is opened: `--overwrite` removes the old run first, which a typo must not cost."""
    from sepo.policies.specs import check_model_source
    from sepo.runs import check_inputs_outside

    paths = [config.data] if isinstance(config.data, str) else list(config.data)
    for path in paths:
        _check_dataset_folder(path)
        if config.legal_weight > 0:
            _check_legal_column(path)
    if isinstance(config.model, str):
        check_model_source(config.model)
        check_inputs_outside(
            out,
            {"--model": config.model} if Path(config.model).expanduser().exists() else {},
            overwrite=overwrite,
        )
    for path in paths:
        check_inputs_outside(out, {"--data": path}, overwrite=overwrite)


def _check_dataset_folder(path: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise SepoError(
            f"--data {brief(path)}: "
            + ("is a file, not a dataset folder" if folder.exists() else "no such folder")
        )
    if not (folder / "dataset_dict.json").is_file():
        raise SepoError(
            f"--data {brief(path)} is not a dataset folder (no dataset_dict.json; make one with `sepo data "
            "sft`)"
        )
    return folder


def _load_datasets(paths: str | list[str]):
    """The train and validation splits of one dataset folder, or of several concatenated (e.g. one
    per domain, for one model that plays them all)."""
    from datasets import concatenate_datasets

    if isinstance(paths, str):
        return _load_dataset(paths)
    if not paths:
        raise SepoError("--data: give at least one dataset folder")
    splits = [_load_dataset(path) for path in paths]
    return concatenate_datasets([t for t, _ in splits]), concatenate_datasets([v for _, v in splits])


def _load_dataset(path: str, columns: tuple[str, ...] | None = ("messages",)):
    """The (train, validation) splits of a dataset folder, with only `columns` (None: all)."""
    from datasets import load_from_disk

    _check_dataset_folder(path)
    try:
        # in memory, so TRL's maps write no cache-*.arrow into the data folder
        data = load_from_disk(path, keep_in_memory=True)
    except Exception as error:  # noqa: BLE001 - any unreadable dataset (torn, binary junk) is one clear line
        raise SepoError(f"cannot read SFT data {brief(path)}: {one_line(str(error), 200)}") from None
    for split in ("train", "validation"):
        if split not in data or "messages" not in data[split].column_names:
            raise SepoError(
                f"SFT data {path} needs '{split}' with a 'messages' column (make it with `sepo data sft`)"
            )
    if columns is None:
        return data["train"], data["validation"]
    return data["train"].select_columns(list(columns)), data["validation"].select_columns(list(columns))


def _check_legal_column(path: str) -> None:
    from sepo.training.legal_mass import LEGAL_COLUMN

    for split in _load_dataset(path, columns=None):
        if LEGAL_COLUMN not in split.column_names:
            raise SepoError(
                "--legal-weight needs answer-only data that lists each decision's legal replies; "
                f"{brief(path)} has none (`sepo data sft --answer-only` writes them; answer-only data made "
                "before sepo recorded them must be made again)"
            )


def _legal_examples(paths: str | list[str]) -> list[dict]:
    """Every example (both splits) of the datasets with its legal replies, for the legal-reply term."""
    from sepo.training.legal_mass import LEGAL_COLUMN

    examples = []
    for path in [paths] if isinstance(paths, str) else paths:
        for split in _load_dataset(path, columns=("messages", LEGAL_COLUMN)):
            examples += split.to_list()
    return examples


def _with_legal_term(trainer_class, index, weight: float):
    """`trainer_class` (TRL's SFTTrainer) whose loss is its cross-entropy plus `weight` times the mean
    legal-reply term of the batch's reply tokens (`sepo.training.legal_mass`); the mean probability
    of an illegal next token along the demonstrated replies is logged as `illegal_mass`."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    from sepo.training.legal_mass import illegal_log_mass

    class LegalTermSFTTrainer(trainer_class):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            # `compute_loss_func` sees the outputs and labels only; the term needs the prompts
            self._batch = inputs
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )

        def legal_loss(self, outputs, labels, num_items_in_batch=None):
            import torch

            logits = outputs.logits
            loss = ForCausalLMLoss(logits, labels, logits.shape[-1], num_items_in_batch=num_items_in_batch)
            terms = illegal_log_mass(
                logits, self._batch["input_ids"], labels, self._batch.get("attention_mask"), index
            )
            if len(terms):
                mode = "train" if self.model.training else "eval"
                self._metrics[mode]["illegal_mass"].append(float((1 - torch.exp(-terms.detach())).mean()))
                loss = loss + weight * terms.mean()
            return loss

    return LegalTermSFTTrainer


def _tokenized_prompts(dataset) -> set[tuple[int, ...]]:
    """The prompt token ids (before the first trained token) of each row TRL tokenized."""
    prompts = set()
    for ids, labels in zip(dataset["input_ids"], dataset["labels"]):
        start = next((j for j, label in enumerate(labels) if label != -100), None)
        if start is not None:
            prompts.add(tuple(ids[:start]))
    return prompts


def quiet_library_progress() -> None:
    """The datasets map and model-shard progress bars of TRL's preprocessing and saving: sepo shows
    its own progress (steps, loss), and these would print a dozen bars per run."""
    import datasets

    from sepo.models import quiet_library_progress as quiet_model_progress

    datasets.disable_progress_bars()
    quiet_model_progress()


TRAINER_STATE = "trainer_state.json"
"""What transformers writes last into a checkpoint (after the weights, optimizer, scheduler and RNG
states): a checkpoint folder without it is a save that was cut off."""


def _checkpoint_folders(trainer_dir: Path) -> dict[int, Path]:
    return {int(p.name.split("-")[1]): p for p in trainer_dir.glob("checkpoint-*")
            if p.is_dir() and p.name.split("-")[1].isdigit()}


def _checkpoint_step(trainer_dir: Path) -> int | None:
    """The step of the latest complete checkpoint (one holding its trainer state)."""
    steps = [
        step
        for step, folder in _checkpoint_folders(trainer_dir).items()
        if (folder / TRAINER_STATE).is_file()
    ]
    return max(steps) if steps else None


def discard_torn_checkpoints(trainer_dir: Path) -> list[str]:
    """Remove the checkpoint folders whose save was cut off (a kill or a full disk while the
    optimizer state was written): transformers would resume from the latest folder and fail on it,
    and count it among the checkpoints it keeps. The run resumes from the latest complete one.
    Returns the names removed."""
    import shutil

    torn = [
        folder
        for folder in _checkpoint_folders(trainer_dir).values()
        if not (folder / TRAINER_STATE).is_file()
    ]
    for folder in torn:
        shutil.rmtree(folder)
    return sorted(folder.name for folder in torn)


def weights_problem(folder: Path) -> str | None:
    """Why a checkpoint's weights would not load (None: they look whole): no weights file, or a
    safetensors file whose header does not read or whose size is not what the header declares (a
    copy cut short, bit rot in the header). Reads the headers only, never the tensors."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if (
        not files
        and not any(folder.glob("pytorch_model*.bin"))
        and not (folder / "adapter_model.bin").is_file()
    ):
        return "it holds no weights file"
    for path in files:
        try:
            with safe_open(str(path), "numpy"):  # checks the header and that the data covers the file exactly
                pass
        except Exception as error:  # safetensors' own error type, or an OSError  # noqa: BLE001
            return f"its {path.name} does not read ({one_line(str(error)) or type(error).__name__})"
    return None


def discard_damaged_checkpoints(trainer_dir: Path) -> list[tuple[str, str]]:
    """Remove the complete checkpoints newer than the latest whose weights read (a checkpoint
    loaded whole, its weights then damaged: an interrupted copy, bit rot), so the run resumes from
    that one; transformers would fail on them. Returns (name, problem) of each removed; with none
    left to resume from, one line naming the damaged checkpoint (rerun with --overwrite)."""
    import shutil

    complete = sorted((step, folder) for step, folder in _checkpoint_folders(trainer_dir).items()
                      if (folder / TRAINER_STATE).is_file())
    damaged = []
    for _, folder in reversed(complete):
        problem = weights_problem(folder)
        if problem is None:
            break
        damaged.append((folder, problem))
    else:
        if damaged:
            folder, problem = damaged[0]
            raise SepoError(f"{folder} is damaged: {problem}; no earlier checkpoint is left to resume from, "
                            "rerun with --overwrite to start the run again")
    for folder, _ in damaged:
        shutil.rmtree(folder)
    return [(folder.name, problem) for folder, problem in damaged]


def resume_point(run, trainer_dir: Path, stage: Callable[[str], None]) -> int | None:
    """The step a resumed run continues from (None: from the start), once torn checkpoints, and
    complete ones whose weights do not read, are removed."""
    if not run.resumed:
        return None
    for name in discard_torn_checkpoints(trainer_dir):
        stage(f"removed {name}: its save was cut off before it finished")
    damaged = discard_damaged_checkpoints(trainer_dir)
    step = _checkpoint_step(trainer_dir)
    for name, problem in damaged:
        warnings.warn(f"removed {trainer_dir / name}: {problem}; the run resumes from checkpoint-{step}")
    return step


def finished_checkpoint(trainer_dir: Path, steps: int | None = None) -> Path | None:
    """The latest checkpoint if training had reached its last step there (a run killed while saving
    its final model). Resuming from it would train a step past the end (transformers skips the
    step check on resume), so the caller loads it instead of training.

    `steps` is the run's last step as configured now; without it, the one the checkpoint was saved
    under. Pass it for a run that can be extended: the checkpoint at the end of the run it extends
    records that run's last step, and it is where the extension resumes, not where it ends."""
    from sepo.training.checkpoint import read_json

    step = _checkpoint_step(trainer_dir)
    if step is None:
        return None
    folder = trainer_dir / f"checkpoint-{step}"
    state = read_json(folder / TRAINER_STATE, "trainer state")
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return None
    last = steps if steps is not None else state.get("max_steps")
    done = isinstance(last, int) and 0 < last <= state["global_step"]
    return folder if done else None


CHECKPOINT_SECONDS = 600.0
"""A checkpoint at least this often besides `save_steps`, so that a stop loses little (a step of a
large model can take minutes)."""


def checkpoint_note(step: int) -> None:
    """A checkpoint is a moment, not a stage: one line, and the status goes on naming the current step."""
    from sepo import progress

    progress.note(f"checkpoint at step {step} written")


def run_files_callback(run, folder: str = "trainer", every_seconds: float | None = None, on_checkpoint=None):
    """A `transformers.TrainerCallback` that records what the trainer writes in the run folder (each
    checkpoint, the README.md TRL writes beside them) as the run's, and asks for a checkpoint whenever
    `every_seconds` (default `CHECKPOINT_SECONDS`) passed since the last one; `on_checkpoint(step)` follows
    the saves."""
    import time

    from transformers import TrainerCallback

    every_seconds = CHECKPOINT_SECONDS if every_seconds is None else every_seconds

    class RunFiles(TrainerCallback):
        last = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - self.last >= every_seconds and state.global_step < state.max_steps:
                control.should_save = True

        def on_save(self, args, state, control, **kwargs):
            self.last = time.monotonic()
            if state.is_world_process_zero:
                if (run.root / folder / f"checkpoint-{state.global_step}").is_dir():
                    run.adopt(f"{folder}/checkpoint-{state.global_step}")
                if (run.root / folder / "README.md").is_file():
                    run.adopt(f"{folder}/README.md")
            run.commit()
            if on_checkpoint is not None:
                on_checkpoint(state.global_step)

    return RunFiles()


@contextmanager
def library_warnings():
    """The FutureWarnings TRL's trainers trigger in transformers on every run (deprecated
    gradient-checkpointing names TRL calls itself): TRL's to fix, silenced here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning
        )
        yield


def run_sft(config: SFTRunConfig, out: str | Path, *, overwrite: bool = False,
            on_log: Callable[[int, int, float | None], None] | None = None, stop_after: int | None = None,
            part_of: str | None = None, on_stage: Callable[[str], None] | None = None) -> SFTResult:
    """Train and save the final model in `out/model`; a run folder of the same config resumes from
    its latest checkpoint, and a finished one is read, never trained further. `on_log(step, total,
    loss)` follows progress, `on_stage(text)` the stages; `stop_after` raises KeyboardInterrupt after
    that step (a kill, for tests); `part_of` names the command whose output the run is part of."""
    config.validate()  # before the libraries load: a bad setting is refused at once
    out = check_out_path(out)
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from sepo.policies.hf import load_hf_model

    stage = on_stage or (lambda text: None)
    quiet_library_progress()
    with library_warnings():  # TRL's config itself reads a deprecated transformers field
        args = SFTConfig(
            output_dir=str(out / "trainer"),
            num_train_epochs=config.epochs,
            max_steps=config.max_steps,
            per_device_train_batch_size=config.batch_size,
            per_device_eval_batch_size=config.batch_size,
            learning_rate=config.learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=config.warmup_ratio,  # transformers 5: a float below 1 is a fraction of the steps
            assistant_only_loss=True,
            use_cpu=config.use_cpu,
            bf16=False,
            max_length=config.max_length,
            logging_steps=10,
            eval_strategy="steps",
            eval_steps=config.save_steps,
            save_strategy="steps",
            save_steps=config.save_steps,
            save_total_limit=2,
            report_to="none",
            dataloader_num_workers=0,
            seed=config.seed,
            disable_tqdm=True,
        )
    main_process = args.process_index == 0  # only process 0 writes run files
    _check_inputs(config, out, overwrite)
    with open_run(
        out, "sft", config.settings(), overwrite=overwrite, writer=main_process, part_of=part_of
    ) as run:
        if run.finished:  # read, never trained further or rewritten
            result = run.result or {"steps": _checkpoint_step(out / "trainer") or 0}
            steps, loss = result.get("steps"), result.get("train_loss")
            if not isinstance(steps, int) or isinstance(steps, bool) or not (loss is None or is_number(loss)):
                raise SepoError(
                    f"unreadable run manifest {out / MANIFEST}: its result is not a whole number of steps "
                    "and a train loss; the run is damaged: rerun with --overwrite to redo it"
                )
            return SFTResult(run.finished_output("model"), steps, loss, already_complete=True)
        stage(f"loading the data {config.data if isinstance(config.data, str) else ', '.join(config.data)}")
        train, validation = _load_datasets(config.data)
        _check_same_data(run, out, config.data)
        if isinstance(config.model, str):
            check_same_model(run, out, config.model)
        stage(f"loading the model {config.model}")
        model, tokenizer, _ = load_hf_model(
            config.model, None, device="cpu" if config.use_cpu else None, dtype="float32"
        )
        run.write_json("sft_config.json", asdict(config))
        log = MetricsLog(run.path("metrics.jsonl"))
        run.path("trainer")
        resume_step = resume_point(run, out / "trainer", stage)
        done_at = finished_checkpoint(out / "trainer") if run.resumed else None
        if main_process:
            log.truncate_after(resume_step if resume_step is not None else -1)

        class _Log(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and state.is_world_process_zero:
                    log.append(
                        {
                            "step": state.global_step,
                            **{k: v for k, v in logs.items() if isinstance(v, (int, float))},
                        }
                    )
                    if on_log:
                        on_log(state.global_step, state.max_steps, logs.get("loss"))

            def on_evaluate(self, args, state, control, **kwargs):
                stage("training")  # the validation's stage named its step: the steps after it are training's

            def on_step_end(self, args, state, control, **kwargs):
                if on_log:
                    on_log(state.global_step, state.max_steps, None)
                if control.should_evaluate:  # minutes for a real model: say so, not the last stage's name
                    stage(f"validation loss at step {state.global_step} ({len(validation)} examples)")
                if stop_after is not None and state.global_step >= stop_after:
                    raise KeyboardInterrupt(f"stopped after step {state.global_step}")

        peft_config = None
        if config.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=config.lora_r,
                lora_alpha=2 * config.lora_r,
                lora_dropout=0.05,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                task_type="CAUSAL_LM",
            )
        trainer_class, index = SFTTrainer, None
        if config.legal_weight > 0:
            from sepo.training.legal_mass import LegalIndex

            stage("rendering each decision's legal replies")
            index = LegalIndex.build(tokenizer, _legal_examples(config.data))
            trainer_class = _with_legal_term(SFTTrainer, index, config.legal_weight)
        with library_warnings():
            trainer = trainer_class(
                model=model,
                args=args,
                train_dataset=train,
                eval_dataset=validation,
                processing_class=tokenizer,
                peft_config=peft_config,
                callbacks=[_Log(), run_files_callback(run, on_checkpoint=checkpoint_note)],
            )
            if index is not None:
                index.check_covers(
                    _tokenized_prompts(trainer.train_dataset) | _tokenized_prompts(trainer.eval_dataset)
                )
                trainer.compute_loss_func = trainer.legal_loss
            # it prints raw log dicts; progress and metrics.jsonl show them
            trainer.remove_callback(PrinterCallback)
            # killed after its last step, before the model was saved: nothing to train
            if done_at is not None:
                stage(f"training had finished at {done_at.name}; loading it")
                with quiet_tied_weights(trainer.model):
                    trainer._load_from_checkpoint(str(done_at))
                trainer.state = type(trainer.state).load_from_json(str(done_at / "trainer_state.json"))
                train_loss = next(
                    (r.get("train_loss") for r in reversed(log.read()) if "train_loss" in r), None
                )
            else:
                stage("training" + (f" from checkpoint-{resume_step}" if resume_step is not None else ""))
                with quiet_tied_weights(trainer.model):
                    output = trainer.train(resume_from_checkpoint=None if resume_step is None
                                           else str(out / "trainer" / f"checkpoint-{resume_step}"))
                train_loss = getattr(output, "training_loss", None)
        steps = trainer.state.global_step
        if trainer.accelerator.is_main_process:
            stage(f"saving the model to {out / 'model'}")
            with run.staged("model") as tmp:
                save_final_model(trainer.model, tokenizer, tmp)
            run.complete({"steps": steps, "train_loss": train_loss})
        trainer.accelerator.wait_for_everyone()
    return SFTResult(out / "model", steps, train_loss)


def save_final_model(model, tokenizer, target: Path) -> Path:
    """Merge any LoRA adapter and save model + tokenizer into the new folder `target`
    (callers write it aside and rename it into place, see `sepo.runs.RunDir.staged`)."""
    quiet_library_progress()
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.config.use_cache = True  # trainers switch the KV cache off; generation wants it back
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target
