"""A local model's batches kept on disk, so that a long audit resumes after a kill.

An endpoint agent keeps every answered request (`sepo.policies.endpoint`); a local model had
nothing of the kind, and an audit that samples hundreds of 256-token replies (the paper protocol
on a CPU: hours) started over after any interruption. Its replies cannot be kept one by one: one
seed draws a whole call's batches in turn from the torch generator, so a reply depends on every
batch drawn before it. `BatchCache` keeps each batch's output together with the generator's state
after it, keyed by everything that determines that output (a digest of the model's weights, the
prompts' token ids, the decoding, the call's seed, the batches drawn before it in the call, torch's
version, the device, the attention kernel and the thread count). A re-run reads the kept batches, restores the
generator after each, and computes the rest: its numbers equal those of a run never interrupted. Deterministic
calls (forced decoding) are kept the same way, without a generator state.

Records are JSON lines appended atomically by `ReplyCache`, one file per model in the folder.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import warnings
from pathlib import Path

from sepo.errors import SepoError
from sepo.policies.reply_cache import ReplyCache, request_key


def weights_digest(model) -> str:
    """SHA-256 of a torch model's class and state dict (names, dtypes, shapes and bytes)."""
    import torch

    digest = hashlib.sha256(type(model).__name__.encode())
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"\n{name}:{flat.dtype}:{tuple(tensor.shape)}\n".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def _canonical(value):
    """A request as JSON, refusing what has no stable text (a key from `repr` would never match)."""
    def refuse(item):
        raise SepoError(f"--reply-cache: cannot key a model call on {type(item).__name__} "
                        "(generation settings must be plain values to be kept on disk)")

    return json.loads(json.dumps(value, default=refuse))


class BatchCache:
    """Kept model calls of one model, in `folder` (created on first use). The weights are hashed
    once, on first use: a cache is for a model that does not change while it plays (an audit),
    never for one being trained."""

    def __init__(self, folder: str | os.PathLike, model, label: str):
        self.folder = Path(folder).expanduser()
        if self.folder.exists() and not self.folder.is_dir():
            raise SepoError(f"--reply-cache {str(folder)!r} is a file, not a folder")
        self.model = model
        self.label = label
        self._store: ReplyCache | None = None
        self._digest: str | None = None
        self.read = 0
        self.stored = 0

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = weights_digest(self.model)
        return self._digest

    @property
    def store(self) -> ReplyCache:
        """The file of this model's weights: found by their digest, so a model (or an interrupted
        experiment) moved to another path reads what it kept; named `<path>-<digest>.jsonl` when new."""
        if self._store is None:
            found = sorted(self.folder.glob(f"*-{self.digest[:12]}.jsonl")) if self.folder.is_dir() else []
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.label).strip("_")[-48:] or "model"
            self._store = ReplyCache(found[0] if found else self.folder / f"{slug}-{self.digest[:12]}.jsonl")
        return self._store

    def key(self, kind: str, request: dict) -> str:
        import torch

        device = next(self.model.parameters()).device.type
        attention = getattr(getattr(self.model, "config", None), "_attn_implementation", None)
        # the thread count too: a CPU reduction split another way can change a logit's last bits
        return request_key(
            _canonical(
                {
                    "kind": kind,
                    "model": self.digest,
                    "torch": torch.__version__,
                    "device": device,
                    "attention": attention,
                    "threads": torch.get_num_threads(),
                    **request,
                }
            )
        )

    def get(self, key: str, fits) -> dict | None:
        """The kept record under `key` if it is as it was written (its checksum) and `fits(record)`;
        else None, and the call is computed again."""
        record = self.store.get(key)
        if record is None:
            return None
        if record.get("check") != _checksum(record):
            why = ("has no checksum (kept by an older sepo)" if "check" not in record
                   else "was changed since it was written (its checksum differs)")
            warnings.warn(f"reply cache: a kept record ({key[:12]}) {why}; computing it again", stacklevel=3)
            return None
        if not fits(record):
            return None
        self.read += 1
        return record

    def put(self, key: str, record: dict) -> None:
        self.store.put(key, {**record, "check": _checksum(record)})
        self.stored += 1

    def record(self) -> dict:
        return {"path": str(self.store.path) if self._store is not None else str(self.folder),
                "batches_read": self.read, "batches_stored": self.stored}


def _checksum(record: dict) -> str:
    """SHA-256 of a record's content (without its key and checksum): a line changed on disk,
    by hand or by a fault, is computed again rather than read."""
    body = {k: v for k, v in record.items() if k not in ("key", "check")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def rows_fit(record: dict, rows: int, sampled: bool, vocab: int, max_new_tokens: int, device) -> bool:
    """Whether a kept batch has the shape its call needs: `rows` rows of at most `max_new_tokens`
    token ids in the vocabulary, and, when sampled, a generator state `restore_generator` can set
    (a foreign line is generated again, with a warning, rather than read)."""
    fits = (isinstance(record.get("rows"), list) and len(record["rows"]) == rows
            and all(isinstance(r, list) and len(r) <= max_new_tokens
                    and all(type(t) is int and 0 <= t < vocab for t in r) for r in record["rows"])
            and (not sampled or _generator_fits(record.get("generator"), device)))
    if not fits:
        warnings.warn(
            f"reply cache: a kept batch ({record.get('key', '?')[:12]}) is not a batch of {rows} replies "
            f"(rows of at most {max_new_tokens} token ids below {vocab}"
            + (", and a generator state this torch can set" if sampled else "")
            + "); generating it again",
            stacklevel=3,
        )
    return fits


def choices_fit(record: dict, decisions) -> bool:
    """Whether kept forced-decoding choices index each decision's legal actions."""
    choices = record.get("choices")
    fits = (isinstance(choices, list) and len(choices) == len(decisions)
            and all(isinstance(c, int) and 0 <= c < len(d.legal_actions) for c, d in zip(choices, decisions)))
    if not fits:
        warnings.warn(
            f"reply cache: kept forced decoding ({record.get('key', '?')[:12]}) does not fit its decisions; "
            "computing it again",
            stacklevel=3,
        )
    return fits


def generator_state(device) -> dict:
    """The torch generator state sampling on `device` reads (CPU, and the GPU's when on one)."""
    import torch

    state = {"cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if device.type == "cuda":
        state["cuda"] = base64.b64encode(torch.cuda.get_rng_state(device).numpy().tobytes()).decode()
    return state


def _state_bytes(text) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except ValueError:  # binascii.Error
        return None


def _generator_fits(state, device) -> bool:
    """Whether `state` holds generator states of this torch's sizes for `device`."""
    import torch

    if not isinstance(state, dict):
        return False
    cpu = _state_bytes(state.get("cpu"))
    if cpu is None or len(cpu) != torch.get_rng_state().numel():
        return False
    if device.type == "cuda":
        gpu = _state_bytes(state.get("cuda"))
        return gpu is not None and len(gpu) == torch.cuda.get_rng_state(device).numel()
    return True


def restore_generator(state: dict, device) -> None:
    import torch

    def tensor(text: str):
        return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)

    torch.set_rng_state(tensor(state["cpu"]))
    if device.type == "cuda":
        torch.cuda.set_rng_state(tensor(state["cuda"]), device)
