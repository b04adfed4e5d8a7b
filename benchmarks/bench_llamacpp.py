"""An outside anchor: llama.cpp serving the same GGUF behind its OpenAI-compatible server, against sepo's own
path.

What it measures (the model: a GGUF, e.g. SmolLM2-135M-Instruct.Q4_1.gguf, and the folder
`sepo model get` / `sepo model import` converted it into; `--smoke` writes a tiny one, see below)
--------------------------------------------------------------------------------------------------
The reference is llama.cpp: `llama-cpp-python`'s server (`python -m llama_cpp.server`, run from
`--server-python`, its own virtual environment: a C++ build sepo does not install) loads the GGUF
with its quantized weights (Q4_1 for SmolLM2) on `--threads` CPU threads, and sepo's `openai:`
agent (`EndpointAgent`) plays through it, one chat-completions request per decision, as
`sepo eval --agent openai:MODEL@URL` does. sepo's own path is `HFPolicy` on the converted folder
(the same weights dequantized to float32, torch on `--threads` threads).

0. The prompt: the server is started without `--chat_format`, so llama-cpp-python applies the
   chat template stored in the GGUF (a Jinja template, unless it is byte-for-byte one of the few
   it knows by name). Run in the server's Python, the same chat handler renders and tokenizes the
   system + user messages of each of Kuhn's 12 information states; the script prints whether the
   text and the token ids equal those of sepo's chat-templated prompt (`HFPolicy.prompt_ids`), and
   in the timed run whether the server's `usage.prompt_tokens` equals their length.
1. Play, decisions per second: `--decisions` Kuhn decisions (the 12 information states, cycled),
   greedy (temperature 0), at most `--max-new-tokens` new tokens, each reply parsed strictly and a
   failure played by `--failure-rule` (default `fallback`, so that the time is the replies'):
   a. sepo's `openai:` agent against the server, one `act` call over all decisions (one request per
      distinct prompt, at most 8 in flight, as `sepo eval` sends them; the server answers one at a
      time; no response cache). Twice: as sepo sends it, which leaves llama.cpp's own sampling
      defaults in place (its server applies `repeat_penalty` 1.1 unless told otherwise, even at
      temperature 0), and with `repeat_penalty` 1.0 added to each request (plain greedy decoding,
      what HFPolicy does);
   b. `HFPolicy`, one `act` call per decision (the reference), and one batched call over all of them.
   Decisions/s and the ratio to (b) one at a time, requests or rows actually computed (the
   endpoint agent asks an identical greedy request once, so with more than 12 decisions it sends
   12 requests; HFPolicy generates every row), the parse statuses of each run, and how many
   greedy replies are the same text as HFPolicy's one-at-a-time reply at the same decision, with the
   first differences shown (llama.cpp's quantized Q4_1 kernels against their float32
   dequantization in transformers: small differences are expected, and counted).
2. An answer-only policy read exactly (`--score-states` information states, default 4; 0 skips it):
   sepo's `HFPolicy.answer_probabilities` (the probability that the whole reply is each legal
   answer line followed by the turn's end, one batched pass over a prefix tree of the (prompt,
   answer) sequences: how every exact audit in docs/real-models.md reads a policy) against the
   same probabilities through the server. llama-cpp-python's server does return
   log-probabilities: chat completions take `logprobs` / `top_logprobs` (sepo's forced decoding
   uses them), and `/v1/completions` with `echo` and `logprobs` reports those of the prompt's own
   tokens (the server loads the model with `logits_all`), so an answer line can be scored as the
   end of a prompt, one request per (state, answer), nothing batched. The echo leaves out every
   token equal to the BOS id (SmolLM2's BOS is `<|im_start|>`), so the scored tokens are counted
   from the end. Seconds both ways and the largest log-probability difference. sepo's `openai:`
   agent does not score answer lines: through it, a policy is exact only under greedy decoding
   and otherwise estimated from sampled replies.

When to audit through the server instead (the figures of both parts, measured in one run, say by
how much): when transformers cannot read the model (an architecture or quantization it does not
support), when the float32 model does not fit in memory but the quantized file does, or to check
sepo's numbers against an independent implementation; greedy play one decision at a time is
where the server does best. sepo's own path is the one for batched play, for a policy read exactly
from its answer lines at any temperature, and for training, which needs the model's gradients.

`--smoke`: a tiny random Llama written as a GGUF by tests/models/gguf_files.py (float32 tensors,
ChatML template) and converted with `sepo.models.gguf.import_model`, 12 decisions, 8 new tokens.
It checks the script runs end to end in about a minute; its numbers mean nothing. If llama_cpp is
not importable from `--server-python`, the script says so in one line and exits with status 2.

Timings are wall clock (`time.perf_counter`), one pass each; the load average is printed with
every figure: on a loaded machine the seconds are not representative, the ratios measured in the
same run are more so (and both sides here share the same CPUs: run it on a quiet machine).

Run: `.venv/bin/python benchmarks/bench_llamacpp.py --model runs/smollm2 [--gguf FILE]
[--server-python PYTHON (default: $SEPO_LLAMACPP_PYTHON, else this Python)] [--threads 2] [--decisions 48]` or
`--smoke`. The server's Python needs `pip install 'llama-cpp-python[server]'` (a source build of llama.cpp).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SERVER_PYTHON = os.environ.get("SEPO_LLAMACPP_PYTHON", sys.executable)
"""The Python whose environment has `llama-cpp-python[server]`: this one unless $SEPO_LLAMACPP_PYTHON names
another."""
SMOKE = dict(decisions=12, max_new_tokens=8)

RENDER_IN_SERVER_PYTHON = r"""
import json, sys
from llama_cpp import Llama

path, n_ctx = sys.argv[1], int(sys.argv[2])
chats = json.load(sys.stdin)
llm = Llama(model_path=path, n_ctx=n_ctx, n_threads=1, verbose=False)
seen = []
tokenize = llm.tokenize


def capture(text, add_bos=True, special=False):
    ids = tokenize(text, add_bos=add_bos, special=special)
    seen.append((text.decode("utf-8", "replace"), [int(i) for i in ids]))
    return ids


llm.tokenize = capture
prompts = []
for messages in chats:
    seen.clear()
    llm.create_chat_completion(messages=messages, max_tokens=1, temperature=0)
    prompts.append({"text": seen[0][0], "ids": seen[0][1]})
print(json.dumps({"chat_format": llm.chat_format, "prompts": prompts}))
"""
"""Run in the server's Python: the prompt text and token ids llama-cpp-python's chat handler
(the one its server uses for this GGUF) builds for each chat, captured at its `tokenize` call."""


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "load average unknown"


def fail(message: str) -> None:
    print(message)
    sys.exit(2)


# ------------------------------------------------------------------------------ the GGUF

def default_gguf(model_dir: Path) -> Path:
    """The GGUF the converted folder was made from: a known packaged model's file (installed
    package, else `sepo model get`'s cache) with the sha256 its `sepo_model.json` records."""
    from sepo.models import gguf as real

    info = model_info(model_dir)
    source = info.get("source", {})
    for model in real.KNOWN_MODELS.values():
        if model.file_name != source.get("file") or model.sha256 != source.get("sha256"):
            continue
        path = real.installed_file(model)
        cached = real.default_cache_dir() / f"{model.package}-{model.version}" / model.file_name
        if path is None and cached.is_file():
            path = cached
        if path is not None:
            return path
    fail(
        f"cannot find the GGUF {model_dir} was converted from ({source.get('file', 'unknown')}): pass --gguf "
        "FILE"
    )


def model_info(model_dir: Path) -> dict:
    from sepo.models.gguf import INFO_FILE

    try:
        return json.loads((model_dir / INFO_FILE).read_text())
    except (OSError, ValueError):
        fail(
            f"{model_dir} holds no {INFO_FILE}: give the folder `sepo model get` or `sepo model import` "
            "wrote (--model)"
        )


def check_same_file(gguf: Path, model_dir: Path) -> str:
    """The GGUF's sha256, refused in one line when it is not the file the folder was converted from."""
    from sepo.models.gguf import sha256_of

    if not gguf.is_file():
        fail(f"--gguf {gguf}: no such file")
    digest, recorded = sha256_of(gguf), model_info(model_dir).get("source", {}).get("sha256")
    if recorded and digest != recorded:
        fail(
            f"--gguf {gguf} (sha256 {digest[:12]}) is not the file {model_dir} was converted from "
            f"({recorded[:12]})"
        )
    return digest


# ------------------------------------------------------------------------------ the server

def check_server_python(python: str) -> str:
    """llama-cpp-python's version in `python`, or one line and exit status 2."""
    try:
        result = subprocess.run(
            [python, "-c", "import llama_cpp, llama_cpp.server.app; print(llama_cpp.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        fail(f"--server-python {python}: cannot run it ({error}); build llama-cpp-python into a venv: "
             "pip install 'llama-cpp-python[server]'")
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"--server-python {python}: llama_cpp (with its server extra) is not importable ({last}); "
             "pip install 'llama-cpp-python[server]' into that environment")
    return result.stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m llama_cpp.server` on a free loopback port, stopped on exit (its log kept in `log`)."""

    def __init__(self, python: str, gguf: Path, threads: int, n_ctx: int, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.command = [
            python,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--n_ctx",
            str(n_ctx),
        ]
        self.log = log
        self.process = None

    def __enter__(self) -> "Server":
        self._log = open(self.log, "w")
        self.process = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        started = time.perf_counter()
        while time.perf_counter() - started < 300:
            if self.process.poll() is not None:
                self._stop()
                fail(f"the llama.cpp server exited with status {self.process.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=5) as answer:
                    self.models = json.load(answer)
                    self.seconds_to_answer = time.perf_counter() - started
                    return self
            except OSError:
                time.sleep(0.5)
        self._stop()
        fail(f"the llama.cpp server did not answer within 300 s: {self.tail()}")

    def tail(self, lines: int = 3) -> str:
        text = self.log.read_text(errors="replace").strip().splitlines() if self.log.is_file() else []
        return " | ".join(text[-lines:]) or "no output"

    def _stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __exit__(self, *exc) -> None:
        self._stop()


def with_request_fields(client, fields: dict):
    """`client` with `fields` added to every chat-completions request's body (e.g. llama.cpp's
    `repeat_penalty`, which sepo's agent sends only when it differs from 1.0)."""
    from types import SimpleNamespace

    raw = client.chat.completions.with_raw_response

    def create(**kwargs):
        kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), **fields}
        return raw.create(**kwargs)

    return SimpleNamespace(
        chat=SimpleNamespace(completions=SimpleNamespace(with_raw_response=SimpleNamespace(create=create)))
    )


# ------------------------------------------------------------------------------ 0. the prompt

def check_prompts(python: str, gguf: Path, n_ctx: int, policy, agent, states) -> None:
    result = subprocess.run(
        [python, "-c", RENDER_IN_SERVER_PYTHON, str(gguf), str(n_ctx)],
        input=json.dumps([agent.messages(d) for d in states]),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        print(
            "\n0. The prompt: could not render it in the server's Python "
            f"({(result.stderr.strip().splitlines() or ['?'])[-1]})"
        )
        return
    served = json.loads(result.stdout.strip().splitlines()[-1])
    texts = [policy._apply_template(policy.messages(d), True) for d in states]
    ids = [policy.prompt_ids(d) for d in states]
    same_text = sum(s["text"] == t for s, t in zip(served["prompts"], texts))
    same_ids = sum(s["ids"] == i for s, i in zip(served["prompts"], ids))
    print(
        f"\n0. The prompt llama-cpp-python's server builds (chat format {served['chat_format']!r}) against "
        f"sepo's chat-templated prompt, at Kuhn's {len(states)} information states: text equal at "
        f"{same_text}/{len(states)}, token ids equal at {same_ids}/{len(states)} "
        f"({np.mean([len(i) for i in ids]):.0f} tokens on average)"
    )
    for s, t, i in zip(served["prompts"], texts, ids):
        if s["text"] != t or s["ids"] != i:
            where = next(
                (k for k, (a, b) in enumerate(zip(s["text"], t)) if a != b), min(len(s["text"]), len(t))
            )
            print(
                f"   first difference: text at character {where}: server {s['text'][where : where + 40]!r}, "
                f"sepo {t[where : where + 40]!r}; {len(s['ids'])} tokens against {len(i)}"
            )
            break


# ------------------------------------------------------------------------------ 1. play

def statuses(counts: Counter) -> str:
    return ", ".join(
        f"{k[4:]} {v}" for k, v in sorted(counts.items()) if k.startswith("act.") and k != "act.decisions"
    )


def agreement(replies: list, reference: list) -> tuple[int, int, list]:
    """(replies with the same text as the reference, with the same played action, the differing pairs)."""
    same_text = sum(a.text == b.text for a, b in zip(replies, reference))
    same_action = sum(a.action == b.action for a, b in zip(replies, reference))
    differing = [(i, a.text, b.text) for i, (a, b) in enumerate(zip(replies, reference)) if a.text != b.text]
    return same_text, same_action, differing


def bench_play(model_dir: Path, server: Server, args, check_prompt) -> None:
    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.policies.endpoint import EndpointAgent
    from sepo.policies.hf import HFDecoding, HFPolicy
    from sepo.policies.replies import Decoding

    game = load_game("kuhn")
    states = list(canonical_decisions(game.hands).values())
    decisions = [states[i % len(states)] for i in range(args.decisions)]
    decoding = Decoding(temperature=0, max_new_tokens=args.max_new_tokens)
    name = server.models["data"][0]["id"] if server.models.get("data") else "gguf"
    policy = HFPolicy(str(model_dir), game.text, mode="sample", batch_size=max(64, args.decisions),
                      decoding=HFDecoding.of(decoding, failure_rule=args.failure_rule, seed=args.seed))

    def agent(fields: dict | None = None):
        endpoint = EndpointAgent(
            name,
            server.url,
            game.text,
            decoding,
            failure_rule=args.failure_rule,
            seed=args.seed,
            use_cache=False,
        )
        if fields:
            endpoint.client = with_request_fields(endpoint.client, fields)
        return endpoint

    check_prompt(policy, agent(), states)
    rng = np.random.default_rng(args.seed)
    runs = []

    def timed(label, play, counts_of, computed):
        started = time.perf_counter()
        choices = play()
        seconds = time.perf_counter() - started
        runs.append((label, seconds, choices, counts_of(), computed(), load()))

    hf_once = lambda: [c for d in decisions for c in policy.act([d], rng)]  # noqa: E731
    policy.act(decisions[:1], rng)  # warm-up
    policy.reset_counts()
    timed(
        "HFPolicy, one call per decision (ref)",
        hf_once,
        lambda: Counter(policy.counts),
        lambda: f"{len(decisions)} rows",
    )
    policy.reset_counts()
    timed("HFPolicy, one batched call", lambda: policy.act(decisions, rng), lambda: Counter(policy.counts),
          lambda: f"{len(decisions)} rows")
    prompt_tokens = {}
    for label, fields in (("openai: agent -> llama.cpp, as sent", None),
                          ("openai: agent -> llama.cpp, repeat_penalty 1.0", {"repeat_penalty": 1.0})):
        endpoint = agent(fields)
        endpoint.act(decisions[:1], rng)  # warm-up (the server's first request)
        endpoint.reset_counts()
        endpoint.usage.clear()
        timed(label, lambda: endpoint.act(decisions, rng), lambda: Counter(endpoint.counts),
              lambda: f"{endpoint.usage['requests']} requests")
        prompt_tokens[label] = endpoint.usage["prompt_tokens"] / max(1, endpoint.usage["requests"])
    reference = runs[0]
    rate_ref = len(decisions) / reference[1]
    print(
        f"\n1. Play: {len(decisions)} Kuhn decisions (the 12 information states, cycled), greedy, "
        f"max_new_tokens {args.max_new_tokens}, failures played by the '{args.failure_rule}' rule; "
        f"{args.threads} thread(s) each"
    )
    print(
        f"{'run':<48}{'seconds':>9}{'dec/s':>8}{'ratio':>8}{'computed':>14}{'same text':>11}"
        f"{'same action':>13}  load; replies"
    )
    for label, seconds, choices, counts, computed, when in runs:
        same_text, same_action, _ = agreement(choices, reference[2])
        print(
            f"{label:<48}{seconds:>9.2f}{len(decisions) / seconds:>8.2f}"
            f"{len(decisions) / seconds / rate_ref:>7.2f}x"
            f"{computed:>14}{same_text:>7}/{len(decisions):<3}{same_action:>9}/{len(decisions):<3}  {when}; "
            f"{statuses(counts)}"
        )
    ids = np.mean([len(policy.prompt_ids(d)) for d in decisions])
    print(
        "(ratio: decisions/s against HFPolicy one call per decision; same text / same action: against its "
        "reply at the same decision; server prompt tokens per request: "
        + ", ".join(f"{v:.1f}" for v in prompt_tokens.values())
        + f", sepo's prompt {ids:.1f})"
    )
    served = max(len(decisions) / r[1] for r in runs[2:])
    print(f"the server's best: {served / rate_ref:.2f}x HFPolicy one call per decision, "
          f"{served / (len(decisions) / runs[1][1]):.2f}x HFPolicy batched")
    for label, _, choices, _, _, _ in runs[1:]:
        for i, served, own in agreement(choices, reference[2])[2][:2]:
            print(
                f"  differs, {label}, decision {i} ({decisions[i].info_key}): {served[:70]!r} vs sepo "
                f"{own[:70]!r}"
            )


# ------------------------------------------------------------------------- 2. answer lines scored

def bench_score(model_dir: Path, server: Server, args) -> None:
    """An answer-only policy's exact read: sepo's `answer_probabilities` (one batched pass over the
    prefix tree of the (prompt, answer) sequences) against the server's `/v1/completions` with
    `echo` and `logprobs`, one request per (state, answer line + turn end), at the first
    `--score-states` information states; the largest log-probability difference."""
    from sepo.games import load_game
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.policies.hf import HFDecoding, HFPolicy

    game = load_game("kuhn")
    states = list(canonical_decisions(game.hands).values())[: args.score_states]
    policy = HFPolicy(str(model_dir), game.text,
                      decoding=HFDecoding(temperature=1, max_new_tokens=args.max_new_tokens,
                                          failure_rule="fallback", exact_tolerance=1.0, seed=args.seed))
    policy.answer_probabilities(states[:1])  # warm-up
    started = time.perf_counter()
    rows, _ = policy.answer_probabilities(states)
    sepo_seconds, sepo_load = time.perf_counter() - started, load()
    end = policy.tokenizer.decode(policy.turn_end_ids[:1])
    labelled, shifted, lengths = [], [], []
    started = time.perf_counter()
    for d in states:
        prompt_text, prompt_ids = policy._apply_template(policy.messages(d), True), policy.prompt_ids(d)
        for a in d.legal_actions:
            answer = game.text.answer_text(d, a)
            scored = len(policy._ids(answer)) + 1
            body = json.dumps(
                {
                    "prompt": prompt_text + answer + end,
                    "max_tokens": 1,
                    "echo": True,
                    "logprobs": 1,
                    "temperature": 0,
                    "repeat_penalty": 1.0,
                }
            ).encode()
            request = urllib.request.Request(
                f"{server.url}/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=600) as answer_:
                reply = json.load(answer_)
            logprobs = reply["choices"][0]["logprobs"]["token_logprobs"]
            lengths.append(len(logprobs) - reply["usage"]["completion_tokens"] - len(prompt_ids))
            end_at = len(logprobs) - reply["usage"]["completion_tokens"]  # the echo's prompt ends here
            labelled.append(sum(logprobs[end_at - scored:end_at]))
            shifted.append(sum(logprobs[end_at - scored - 1:end_at - 1]))
    server_seconds = time.perf_counter() - started
    own = np.log(np.concatenate(rows))
    requests = len(own)
    print(
        f"\n2. An answer-only policy read exactly at {len(states)} Kuhn information states ({requests} "
        f"answer lines, temperature 1): sepo's answer_probabilities {sepo_seconds:.2f} s [{sepo_load}]; the "
        f"server's /v1/completions with echo and logprobs, one request per answer line, {server_seconds:.2f} "
        f"s [{load()}] ({server_seconds / sepo_seconds:.1f}x sepo's time)"
    )
    print(
        f"   the echo's prompt tokens minus sepo's prompt tokens: {sorted(set(lengths))} (sepo's answer + "
        f"turn end: {scored} tokens at the last state; the echo leaves out every token equal to the BOS id); "
        "largest |log p| difference against sepo, reading token_logprobs[i] as token i's: "
        f"{np.abs(np.array(labelled) - own).max():.3f}; as token i+1's (one position later): "
        f"{np.abs(np.array(shifted) - own).max():.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="runs/smollm2", help="the folder `sepo model get`/`import` converted the GGUF into"
    )
    parser.add_argument(
        "--gguf",
        help="the GGUF file (default: the one the folder's sepo_model.json names, from "
        "the installed package or sepo's model cache)",
    )
    parser.add_argument("--server-python", default=DEFAULT_SERVER_PYTHON,
                        help="a Python with llama-cpp-python[server] installed (default %(default)s)")
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny random GGUF and tiny sizes: checks the script runs"
    )
    parser.add_argument("--decisions", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--failure-rule", default="fallback", choices=("fallback", "forced", "random-legal"))
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads for torch and for llama.cpp alike"
    )
    parser.add_argument(
        "--n-ctx", type=int, default=2048, help="the server's context (llama-cpp-python's default)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--score-states", type=int, default=4,
                        help="part 2: information states whose answer lines are scored both ways (0: skip)")
    args = parser.parse_args()
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    version = check_server_python(args.server_python)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    import torch
    import transformers

    from sepo.training.sft import quiet_library_progress

    quiet_library_progress()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_llamacpp_") as tmp:
        if args.smoke:
            from sepo.models.gguf import import_model
            from tests.models.gguf_files import write_tiny_llama_gguf

            gguf = Path(tmp) / "tiny.gguf"
            write_tiny_llama_gguf(gguf, seed=args.seed)
            model_dir = Path(tmp) / "converted"
            import_model(gguf, model_dir)
        else:
            model_dir = Path(args.model)
            if not (model_dir / "config.json").is_file():
                fail(
                    f"{model_dir} holds no model: run `sepo model get smollm2-135m --out {model_dir}` first, "
                    "or --smoke"
                )
            gguf = Path(args.gguf).expanduser() if args.gguf else default_gguf(model_dir)
        digest = check_same_file(gguf, model_dir)
        print(
            f"GGUF {gguf} (sha256 {digest[:12]})"
            f"{', the tiny random model: --smoke, numbers mean nothing' if args.smoke else ''}; "
            f"converted folder {model_dir}; llama-cpp-python {version} in {args.server_python}; "
            f"torch {torch.__version__}, "
            f"transformers {transformers.__version__}; {args.threads} thread(s) each; Python "
            f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, {load()} at the start"
        )
        with Server(args.server_python, gguf, args.threads, args.n_ctx, Path(tmp) / "server.log") as server:
            print(
                f"llama.cpp server: answered {server.seconds_to_answer:.1f} s after it was started, at "
                f"{server.url}"
            )
            bench_play(
                model_dir,
                server,
                args,
                lambda policy, agent, states: check_prompts(
                    args.server_python, gguf, args.n_ctx, policy, agent, states
                ),
            )
            if args.score_states > 0:
                bench_score(model_dir, server, args)
    print(f"\n{load()} at the end; total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
