"""Generation through vLLM in SEPO-GRPO (`sepo train --vllm colocate|server`), by TRL's vLLM path.

TRL's `GRPOConfig(use_vllm=True)` builds a vLLM engine beside the trainer (`trainer.vllm_generation`,
TRL's `VLLMGeneration`): `colocate`, an engine inside each training process sharing its GPU; or
`server`, a separate server (`trl vllm-serve` / `vllm serve`) on GPUs of its own. TRL pushes the
trained weights into it before every call of the rollout function. SEPO-GRPO's rollout builds its
prompts itself, so TRL would start the engine and leave generation to the rollout: here the rollout
sends it every reply it draws, through `VLLMPolicy`, an `HFPolicy` whose sampled replies come from
the engine:

- the played-policy read at the start of each step (the replies at each information state that
  estimate the policy the completions are drawn from) and the group's completions both go through
  `engine.generate(prompts=token ids, images=None, num_generations=n)`, each prompt repeated `n`
  times in a row (what both of TRL's modes read: `colocate` draws one completion per entry, `server`
  `n` per distinct prompt); the engine samples with the trainer's decoding (temperature, top-p,
  top-k, repetition penalty, token limit), which is the run's, checked when the policy is built;
- each completion is cut after its first end-of-turn token, as sepo's own generation stops there,
  and its per-token log-probabilities (the engine's, after temperature and filters) are cut with it
  and returned to TRL, whose importance-sampling correction weighs each completion by the trained
  model's probability over the engine's (`vllm_importance_sampling_correction`, on);
- exact reads stay scoring passes of the trained model (the answer lines' probabilities), and so
  does a greedy reply (a constrained player's prefix), which the sampling engine does not draw;
- the final model's measurement, after training, uses transformers' `generate` on the final
  weights (the engine holds the weights of the last step's start).

Sampling seeds come from vLLM, not from sepo's (seed, step, prompt) keys: a run with `--vllm` is not
reproduced draw for draw, and resuming one draws other replies than the killed run would have.
vLLM needs a GPU and is not installed with sepo; `--vllm` is refused in one line without it.
"""
from __future__ import annotations

import importlib.util
import re

from sepo.errors import SepoError
from sepo.policies.hf import HFPolicy
from sepo.policies.hf_sampling import Completion

MODES = ("colocate", "server")
DEFAULT_SERVER = "http://localhost:8000"


def installed() -> bool:
    """Whether the vllm package can be imported here."""
    return importlib.util.find_spec("vllm") is not None


def needs_accelerator(config) -> bool:
    """Whether `config` would run vLLM without the accelerator (vLLM generates on a GPU)."""
    return bool(config.use_cpu)


def check_vllm(config) -> None:
    """One line for a `--vllm` setting that cannot run: an unknown mode, vLLM not installed, the
    CPU, a server URL that is not one, a URL without the server mode."""
    mode, server = config.vllm, config.vllm_server
    if mode and mode not in MODES:
        raise SepoError(f"unknown --vllm {mode!r}; use colocate or server")
    if server and mode != "server":
        raise SepoError("--vllm-server names a vLLM server: use it with --vllm server")
    if server and not re.fullmatch(r"https?://[^\s/]+(:\d{1,5})?/?", server):
        raise SepoError(f"--vllm-server {server[:200]!r} is not a server's base URL (http://HOST:PORT)")
    if not mode:
        return
    if not installed():
        raise SepoError(f"--vllm {mode} generates with vLLM, which is not installed here: pip install vllm "
                        "(it runs on a GPU), or leave --vllm out to generate with transformers")
    if needs_accelerator(config):
        raise SepoError(f"--vllm {mode} generates on a GPU: add --gpu")


def grpo_arguments(config) -> dict:
    """TRL `GRPOConfig` fields for the run's `--vllm` setting (none without it)."""
    if not config.vllm:
        return {}
    out = {"use_vllm": True, "vllm_mode": config.vllm, "vllm_importance_sampling_correction": True}
    if config.vllm == "server":
        out["vllm_server_base_url"] = (config.vllm_server or DEFAULT_SERVER).rstrip("/")
    return out


class VLLMPolicy(HFPolicy):
    """An `HFPolicy` of the trained model whose sampled replies come from TRL's vLLM engine
    (`engine`, `trainer.vllm_generation`); `last_logprobs` holds the per-token log-probabilities
    of the last call's completions, in its order."""

    def __init__(self, *args, engine, **kwargs):
        super().__init__(*args, **kwargs)
        self.engine = engine
        self.last_logprobs: list[list[float]] = []
        d = self.decoding
        ours = {"temperature": d.temperature, "top_p": d.top_p, "top_k": d.top_k,
                "repetition_penalty": d.repetition_penalty, "max_completion_length": d.max_new_tokens}
        theirs = {name: getattr(engine, name, value) for name, value in ours.items()}
        if any(theirs[name] != value for name, value in ours.items()):
            raise SepoError(f"the vLLM engine samples with {theirs}, not the run's decoding {ours}")

    def generate(self, prompts: list[list[int]], n: int = 1, *, greedy: bool = False,
                 seed: int | None = None) -> list[list[Completion]]:
        """`n` completions per prompt from the engine (module doc); a greedy reply from the model."""
        if greedy or self.decoding.greedy:
            return super().generate(prompts, n, greedy=greedy, seed=seed)
        self.last_logprobs = []
        if not prompts:
            return []
        sent = [list(map(int, p)) for p in prompts for _ in range(n)]
        _, completion_ids, logprobs, _ = self.engine.generate(prompts=sent, images=None, num_generations=n)
        if len(completion_ids) != len(sent) or logprobs is None or len(logprobs) != len(sent):
            rows = "no" if logprobs is None else len(logprobs)
            raise RuntimeError(f"the vLLM engine returned {len(completion_ids)} completions and {rows} "
                               f"log-probability rows for {len(sent)} prompts")
        ends = set(self.eos_token_ids)
        groups: list[list[Completion]] = []
        for k, (prompt, tokens, scores) in enumerate(zip(sent, completion_ids, logprobs)):
            tokens = [int(t) for t in tokens]
            if len(scores) != len(tokens):
                raise RuntimeError(f"the vLLM engine returned {len(scores)} log-probabilities for a "
                                   f"completion of {len(tokens)} tokens")
            cut = next((i + 1 for i, t in enumerate(tokens) if t in ends), None)
            finished = cut is not None
            tokens, scores = (tokens[:cut], scores[:cut]) if finished else (tokens, scores)
            body = tokens[:-1] if finished else tokens
            text = self.tokenizer.decode(body, skip_special_tokens=True)
            if k % n == 0:
                groups.append([])
            groups[-1].append(Completion(tuple(prompt), tuple(tokens), text, finished))
            self.last_logprobs.append([float(s[0] if isinstance(s, (list, tuple)) else s) for s in scores])
        return groups
