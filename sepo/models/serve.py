"""An OpenAI-compatible chat-completions server for a local Hugging Face model (`sepo serve`).

`POST /v1/chat/completions` renders the messages with the model's chat template (special-token
strings in the text defused, as in `HFPolicy`), generates with `HFPolicy.generate` (the same code
that plays `hf:` agents, so both sides decode identically) and answers in the OpenAI format:
one choice per requested reply with `finish_reason` "stop" when the reply ended with an
end-of-turn token and "length" when it stopped at `max_tokens` (how clients detect truncation),
and `usage` (prompt tokens, completion tokens including the end-of-turn token).

Every response echoes the decoding its replies were generated with (`sepo_decoding`: the sampling
fields, the seed, the reply limit, and `defaults`, the fields the request left to the server). A
request without `temperature` is sampled at 1.0, as the OpenAI API does; the first such request
is warned about on the server's stderr and `/sepo/stats` counts them (`default_temperature`), so a
client whose library dropped the field (Inspect's OpenAI provider does, for unknown model names)
learns that its replies were sampled.

Honoured: `temperature` (0 = greedy), `top_p`, `max_tokens` / `max_completion_tokens`, `seed`,
`n`, `logprobs` / `top_logprobs` (the model's own log-probabilities; at most 20 alternatives, as
OpenAI allows), and the vLLM-style extras `top_k`, `repetition_penalty` and `chat_template_kwargs` (e.g.
`{"enable_thinking": false}`). Anything else that would change the reply (`stop`, `tools`,
`logit_bias`, `stream`, penalties, ...) is refused with status 400 rather than silently ignored.

One request is generated at a time (a lock around the model): a request's `seed` then fixes its
replies whatever else is being served. A request without a seed gets one drawn from the server's
own seeded generator.

Bounds, so that one client cannot take the server from the others: a prompt that with its
`max_tokens` does not fit the model's context is refused with 400 (`context_length_exceeded`, as
the OpenAI API answers; a request without `max_tokens` gets what is left of the context, up to the
server's default); a request whose replies, key/value cache and log-probabilities (`n` x
`max_tokens` x (1 + `top_logprobs`) entries) would not fit the memory the process can spare is
refused with 400 before anything is generated, as is one asking for more new tokens (`n` x
`max_tokens`) than `max_request_tokens` (32,768 by default: `sepo serve --max-request-tokens`);
a client that closes its connection stops its generation at the next token (or between its
replies' log-probability passes), so an abandoned request frees the model; messages far beyond
the context are refused
without being tokenized whole; request fields are typed strictly (`n: "2"` is refused, as are a
seed outside 64 bits and lone surrogate escapes); a body over 4 MiB is answered 413 (read and
dropped up to 64 MiB first, so the client reads the answer; refused before it is sent when the
client asks with `Expect: 100-continue`); a connection silent for `idle_timeout` seconds (20 by
default) between requests, or for `request_timeout` seconds (5) within a request line, headers
or body, or whose body does not arrive within `idle_timeout`, is closed; the kernel queues up to
128 connections, and past `max_connections` open ones (4 x `max_queue` + 64) one more closes the
oldest connection that is still sending (or waiting to send) its request, or, when every one is
being answered, is answered 503 at once, without a thread; at most `max_queue` chat requests
wait for or use the model at once, and one more is answered 503 with `Retry-After` (clients retry it). On
shutdown (`stop`, SIGTERM or Ctrl-C in `sepo serve`) the server stops accepting, the reply being generated
stops at its next token and is answered 503, and the process waits for it before it exits.

Also: `GET /v1/models` (the one served model), `GET /health`, and `GET /sepo/stats` (requests
received, answered, failed and stalled, for tests and monitoring; `?idle=1&answered=N&timeout=S`
waits, without polling, until no request is in flight and at least N were answered, or S seconds
passed). Fault injection for tests:
`fail_every=k` answers every k-th chat request with status 500, `stall_every=k` holds every k-th
request `stall_seconds` before answering it (a client with a shorter timeout retries).

Why the standard library's `ThreadingHTTPServer` rather than a web framework: the server has one
JSON route and a few GET routes, request bodies are validated with pydantic (already a core
dependency), and generation is serialised anyway, so FastAPI/uvicorn would add two dependencies
for no capability the command uses.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sepo.errors import SepoError
from sepo.inputs import parse_json
from sepo.limits import memory_budget, size_text

MAX_BODY_BYTES = 4 << 20
DISCARD_BYTES = 64 << 20
"""An over-long body up to this size is read and dropped before the connection closes, so its
client reads the 413 rather than a broken pipe; a longer one is cut off."""
IDLE_TIMEOUT = 20.0
"""Seconds a connection may wait silent for its next request (an idle keep-alive connection)
before the server closes it; a body must also arrive within this time."""
REQUEST_TIMEOUT = 5.0
"""Seconds a request that has begun (its request line, headers or body) may go without a byte
arriving before the server closes the connection (a client that stalls halfway holds a thread)."""
MAX_REQUEST_TOKENS = 32_768
"""New tokens one request may ask for by default (`n` x `max_tokens`): 128 replies (OpenAI's
largest `n`) of 256 tokens (the paper's reply length), so `sepo eval` against `sepo serve` fits."""
LISTEN_BACKLOG = 128
"""Connections the kernel holds for the server before it accepts them (the standard library's
default of 5 reset the sixth of a burst of simultaneous requests)."""
MAX_QUEUE = 16
"""Chat requests waiting for or using the model at once, by default; one more is answered 503."""
MAX_STALL_SECONDS = 3600.0
MAX_FORCED_ANSWERS = 256
MAX_ANSWER_CHARS = 1000
MAX_N = 128
MAX_TOP_LOGPROBS = 20
"""Alternatives per token, at most: OpenAI's own limit (a larger count multiplies the response by
the vocabulary: one request could hold gigabytes and the model for minutes)."""
LOGPROB_ENTRY_BYTES = 512
"""Memory one log-probability entry of a response holds while it is built and encoded (a dict
with the token text, its value and bytes, then its JSON; measured about 440 bytes)."""


class _Message(BaseModel):
    """One chat message. OpenAI's `developer` role (which its newer clients, Inspect's among them,
    send in place of `system`) is read as the system message."""

    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str

    @field_validator("role")
    @classmethod
    def _developer_is_system(cls, role: str) -> str:
        return "system" if role == "developer" else role


class ChatRequest(BaseModel):
    """The accepted subset of the chat-completions request (anything that changes replies and is
    not implemented is refused, see `_REFUSED`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    """Strict: `n: "2"` or `n: true` is refused, not read as 2 or 1 (an integer is still a number)."""
    model: str
    messages: list[_Message] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0, le=100)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, le=1 << 20)
    repetition_penalty: float = Field(1.0, gt=0, le=100)
    max_tokens: Optional[int] = Field(None, ge=1, le=1 << 16)
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=1 << 16)
    n: int = Field(1, ge=1, le=MAX_N)
    seed: Optional[int] = Field(None, ge=-(1 << 63), le=(1 << 63) - 1)
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=MAX_TOP_LOGPROBS)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    sepo_forced_answers: Optional[list[str]] = Field(None, min_length=2, max_length=MAX_FORCED_ANSWERS)
    """sepo's extension for forced decoding: the legal actions' answer texts; the response's
    `sepo_forced_choice` is the index of the one `HFPolicy`'s forced rule picks at the reply's
    first position (the model's whole next-token distribution, which 20 alternatives may miss)."""
    stream: Optional[bool] = False
    user: Optional[str] = None
    metadata: Optional[dict] = None
    store: Optional[bool] = None


_REFUSED = (
    "stop",
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "logit_bias",
    "presence_penalty",
    "frequency_penalty",
    "response_format",
    "stream_options",
    "audio",
    "modalities",
    "prediction",
    "reasoning_effort",
    "parallel_tool_calls",
    "min_p",
    "min_tokens",
)


@dataclass
class ServerStats:
    requests: int = 0
    answered: int = 0
    failed: int = 0
    stalled: int = 0
    invalid: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    completions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    default_temperature: int = 0
    refused_connections: int = 0
    """Connections answered 503 at once because `max_connections` were open."""
    timed_out: int = 0
    """Connections closed because a request (or its body) did not arrive within the idle timeout."""
    evicted: int = 0
    """Connections closed, when `max_connections` were open, because they were the oldest not
    sending their request, so that a new one could be served."""
    abandoned: int = 0
    """Chat requests whose client closed the connection before the answer: generation stopped."""
    """Answered requests that sent no temperature (sampled at the default 1.0; see `used_decoding`)."""
    lock: threading.Condition = field(default_factory=threading.Condition, repr=False)
    """Held to change the counts; every change notifies `wait`ers (`with stats.changing():` ... )."""

    def record(self) -> dict:
        with self.lock:
            return {k: v for k, v in self.__dict__.items() if k != "lock"}

    @contextlib.contextmanager
    def changing(self):
        """Hold the lock to change counts; waiters are woken afterwards."""
        with self.lock:
            yield
            self.lock.notify_all()

    def wait(self, *, idle: bool = False, answered: int = 0, timeout: float = 60.0) -> dict:
        """The counts once no request is in flight (`idle`) and at least `answered` were answered,
        or after `timeout` seconds (the caller checks the counts)."""
        with self.lock:
            self.lock.wait_for(
                lambda: (not idle or self.in_flight == 0) and self.answered >= answered, timeout
            )
            return self.record()


DECODING_FIELD = "sepo_decoding"
"""The response field that echoes the decoding a reply was generated with (see `used_decoding`)."""
_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty", "seed")


def used_decoding(request: ChatRequest, seed: int, max_tokens: int) -> dict:
    """The decoding the server generated with, as echoed in every response: the sampling fields,
    the seed (drawn by the server when the request had none), the reply limit, `greedy`, and
    `defaults`: the sampling fields the request did not send, so the server's default applied
    (a client whose library dropped `temperature` learns here that it was sampled at 1.0)."""
    given = request.model_fields_set
    return {"temperature": request.temperature, "top_p": request.top_p, "top_k": request.top_k,
            "repetition_penalty": request.repetition_penalty, "seed": seed, "max_tokens": max_tokens,
            "greedy": request.temperature == 0, "defaults": [f for f in _SAMPLING_FIELDS if f not in given]}


class ContextTooLong(SepoError):
    """A prompt that, with its reply, does not fit the model's context (HTTP 400, as OpenAI answers)."""


class TooLarge(SepoError):
    """A request whose replies, log-probabilities or cache would not fit the memory the server can
    spare (HTTP 400, before anything is generated)."""


class ShuttingDown(Exception):
    """The server is stopping: the request is answered 503."""


class ClientGone(Exception):
    """The client closed its connection: generation stops and nothing is answered."""


class ChatModel:
    """A loaded model answering chat requests (no HTTP here: `ChatServer` adds that)."""

    def __init__(self, model_dir: str, *, name: str | None = None, max_new_tokens: int = 256, seed: int = 0,
                 device: str | None = None, max_request_tokens: int = MAX_REQUEST_TOKENS):
        from sepo.policies.hf import check_reply_length, context_length, load_hf_model

        if max_request_tokens < 1:
            raise SepoError(f"--max-request-tokens must be >= 1, got {max_request_tokens}")
        self.max_request_tokens = max_request_tokens
        """The most new tokens (`n` x `max_tokens`) one request may ask for; more is refused (400)."""
        self.model, self.tokenizer, loaded = load_hf_model(model_dir, device=device)
        self.name = name or str(model_dir)
        check_reply_length(max_new_tokens, self.model, f"model {self.name!r}")
        self.context = context_length(self.model)
        self.default_max_tokens = max_new_tokens
        self._seeds = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        """Set on shutdown: a generation under way stops at its next token."""

    def _defuser(self):
        from sepo.policies.hf import HFDecoding, HFPolicy

        return HFPolicy(
            self.model,
            None,
            mode="sample",
            decoding=HFDecoding(max_new_tokens=1),
            tokenizer=self.tokenizer,
            name=self.name,
        )

    def prompt_ids(self, request: ChatRequest) -> list[int]:
        """The request's chat rendered and tokenized (outside the model lock: a long prompt costs
        its own thread the time, not every other request)."""
        self._check_not_far_too_long(request)
        defuser = self._defuser()
        messages = [{"role": m.role, "content": defuser.defuse(m.content)} for m in request.messages]
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                      **request.chat_template_kwargs)
        except Exception as error:  # noqa: BLE001 - a template error is the request's fault
            raise SepoError(f"the chat template cannot render these messages: {error}") from None
        # the length is checked next
        return list(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _check_not_far_too_long(self, request: ChatRequest) -> None:
        """`ContextTooLong` at once for messages far beyond the context: their text is counted in
        pieces cut before whitespace (where the tokenizer splits anyway), stopping once the count
        passes the context, instead of tokenizing megabytes to learn the same (seconds of CPU)."""
        if self.context is None:
            return
        texts = [m.content for m in request.messages]
        if sum(map(len, texts)) <= 8 * self.context:  # short enough to render and count whole
            return
        counted = 0
        for text in texts:
            start = 0
            while start < len(text):
                end = min(len(text), start + 4096)
                while end < len(text) and not text[end].isspace() and end - start < 8192:
                    end += 1
                counted += len(
                    self.tokenizer(text[start:end], add_special_tokens=False, verbose=False)["input_ids"]
                )
                start = end
                if counted > self.context:
                    raise ContextTooLong(
                        f"This model's maximum context length is {self.context} tokens. However, your "
                        f"messages hold more than {counted} tokens. Please reduce the length of the "
                        "messages."
                    )

    def reply_budget(self, request: ChatRequest, prompt_tokens: int) -> int:
        """The reply's token limit: the request's `max_tokens`, else the server's default cut to what
        the context leaves; `ContextTooLong` when the prompt and that reply do not fit."""
        asked = request.max_completion_tokens or request.max_tokens
        if self.context is None:
            return asked or self.default_max_tokens
        room = self.context - prompt_tokens
        if asked is None and room >= 1:
            return min(self.default_max_tokens, room)
        reply = asked or self.default_max_tokens
        if prompt_tokens + reply > self.context:
            raise ContextTooLong(
                f"This model's maximum context length is {self.context} tokens. However, you requested "
                f"{prompt_tokens + reply} tokens ({prompt_tokens} in the messages, {reply} in the "
                "completion). Please reduce the length of the messages or completion."
            )
        return reply

    def check_request_tokens(self, request: ChatRequest, max_tokens: int) -> None:
        """`TooLarge` when `n` x `max_tokens` passes `max_request_tokens` (one request would hold the
        model from every other client for that long)."""
        asked = request.n * max_tokens
        if asked > self.max_request_tokens:
            raise TooLarge(
                f"n {request.n} x max_tokens {max_tokens:,} = {asked:,} new tokens is over this server's cap "
                f"of {self.max_request_tokens:,} per request (sepo serve --max-request-tokens); lower n or "
                "max_tokens, or split the replies over several requests"
            )

    def complete(self, request: ChatRequest, prompt: list[int] | None = None, cancelled=None) -> dict:
        """The chat-completion response for `request` (model name already checked); `prompt`: its
        token ids when the caller rendered them already. `cancelled()`, when given, is asked between
        decoding steps and replies: once true (the client left) generation stops with `ClientGone`."""
        from transformers import StoppingCriteria, StoppingCriteriaList

        from sepo.policies.hf import HFDecoding, HFPolicy

        if prompt is None:
            prompt = self.prompt_ids(request)
        max_tokens = self.reply_budget(request, len(prompt))
        self.check_request_tokens(request, max_tokens)
        self.check_fits(request, len(prompt), max_tokens)
        stopping = self.stopping
        gone = cancelled or (lambda: False)

        class _Stop(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                import torch

                return torch.full((input_ids.shape[0],), stopping.is_set() or gone(), dtype=torch.bool,
                                  device=input_ids.device)

        with self._lock:
            if stopping.is_set():
                raise ShuttingDown()
            if gone():  # it left while waiting for the model
                raise ClientGone()
            seed = request.seed if request.seed is not None else int(self._seeds.integers(2**31 - 1))
            # a policy object per request carries this request's decoding; model and tokenizer are shared
            decoding = HFDecoding(temperature=request.temperature, top_p=request.top_p, top_k=request.top_k,
                                  repetition_penalty=request.repetition_penalty, max_new_tokens=max_tokens)
            # the default batch size, as an `hf:` agent draws: the same seed gives the same n replies
            policy = HFPolicy(self.model, None, mode="sample", decoding=decoding, tokenizer=self.tokenizer,
                              name=self.name,
                              generation_kwargs={"stopping_criteria": StoppingCriteriaList([_Stop()])})
            greedy = request.temperature == 0
            # greedy decoding has one reply; transformers refuses num_return_sequences > 1 for it
            group = policy.generate([prompt], 1 if greedy else request.n, greedy=greedy, seed=seed)[0]
            group = group * request.n if greedy else group
            if stopping.is_set():
                raise ShuttingDown()
            if gone():
                raise ClientGone()
            logprobs = self._all_logprobs(policy, prompt, group, request.top_logprobs, gone) \
                if request.logprobs else [None] * len(group)
            forced = (
                self._forced_choice(policy, prompt, request.sepo_forced_answers)
                if request.sepo_forced_answers
                else None
            )
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": lp,
                "finish_reason": "stop" if c.finished else "length",
            }
            for i, (c, lp) in enumerate(zip(group, logprobs))
        ]
        completion_tokens = sum(len(c.completion_ids) for c in group)
        return {
            "id": f"chatcmpl-{seed:x}-{time.monotonic_ns():x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": choices,
            "system_fingerprint": "sepo-serve",
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt) + completion_tokens,
            },
            DECODING_FIELD: used_decoding(request, seed, max_tokens),
            **({"sepo_forced_choice": forced} if forced is not None else {}),
        }

    def _forced_choice(self, policy, prompt: list[int], answers: list[str]) -> int:
        """The index of the answer `HFPolicy`'s forced decoding picks after `prompt` (its own code:
        the answers' first tokens over the whole vocabulary, or their full scores when they share
        a first token), so `openai:` agents behind this server play what `hf:` agents play."""
        from types import SimpleNamespace

        for answer in answers:
            if not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
                raise SepoError(
                    f"sepo_forced_answers: each answer must be 1-{MAX_ANSWER_CHARS} characters, not blank"
                )
        policy.text = SimpleNamespace(answer_text=lambda decision, action: answers[action])
        decision = SimpleNamespace(legal_actions=list(range(len(answers))), info_key="request")
        return int(policy._forced_pass([decision], [prompt])[0])

    def plan_bytes(self, request: ChatRequest, prompt_tokens: int, max_tokens: int) -> dict[str, int]:
        """What a request would hold at most, by part: the key/value cache of its `n` replies
        (`n` rows of prompt and reply), one step's next-token distribution per row, the
        log-probability pass of one reply (its distribution at every position) and the
        response's log-probability entries (`n` x tokens x (1 + top_logprobs))."""
        config = getattr(self.model, "config", None)
        vocab = int(getattr(config, "vocab_size", 0) or len(self.tokenizer))
        layers = int(getattr(config, "num_hidden_layers", 0) or 1)
        heads = int(getattr(config, "num_attention_heads", 0) or 1)
        kv_heads = int(getattr(config, "num_key_value_heads", 0) or heads)
        head_dim = int(getattr(config, "head_dim", 0) or (getattr(config, "hidden_size", 0) or 64) // heads)
        width = next(self.model.parameters()).element_size()
        rows = 1 if request.temperature == 0 else request.n  # greedy replies are generated once
        plan = {"cache": rows * (prompt_tokens + max_tokens) * 2 * layers * kv_heads * head_dim * width,
                "step": rows * vocab * 4 * 3}
        if request.logprobs:
            plan["logprobs"] = (prompt_tokens + max_tokens + 1) * vocab * 4 * 3
            plan["entries"] = request.n * max_tokens * (1 + request.top_logprobs) * LOGPROB_ENTRY_BYTES
        return plan

    def check_fits(self, request: ChatRequest, prompt_tokens: int, max_tokens: int) -> None:
        """`TooLarge` when `plan_bytes` passes the memory this process can spare now."""
        plan = self.plan_bytes(request, prompt_tokens, max_tokens)
        budget = memory_budget()
        if sum(plan.values()) <= budget:
            return
        top = f" x (1 + top_logprobs {request.top_logprobs})" if request.logprobs else ""
        raise TooLarge(
            f"this request would hold about {size_text(sum(plan.values()))} (n {request.n} x max_tokens "
            f"{max_tokens:,}{top}; prompt {prompt_tokens:,} tokens) and the server can spare "
            f"{size_text(budget)}; lower n, max_tokens" + (" or top_logprobs" if request.logprobs else "")
        )

    def _all_logprobs(self, policy, prompt: list[int], group, top: int, gone) -> list[dict]:
        """`_logprobs` of each reply, computed once per distinct reply (greedy copies share one);
        a shutdown or the client leaving stops between replies."""
        done: dict[tuple, dict] = {}
        for completion in group:
            if self.stopping.is_set():
                raise ShuttingDown()
            if gone():
                raise ClientGone()
            key = tuple(completion.completion_ids)
            if key not in done:
                done[key] = self._logprobs(policy, prompt, completion, top)
        return [done[tuple(c.completion_ids)] for c in group]

    def _logprobs(self, policy, prompt: list[int], completion, top: int) -> dict:
        """OpenAI's `logprobs.content` for a reply: each generated token (the end-of-turn token
        included, so a reply that ends at once still shows the alternatives at its first position)
        with its log-probability under the model and the `top` most likely tokens there (the
        model's own distribution, before temperature or filtering)."""
        import torch

        tokens = list(completion.completion_ids)
        logp = policy._forward([prompt + tokens], len(tokens) + 1)[0, :-1]
        top = min(top, logp.shape[-1])
        best = torch.topk(logp, top, dim=-1) if top else None
        content = []
        for j, token in enumerate(tokens):
            entry = _token_entry(self.tokenizer, token, float(logp[j, token]))
            entry["top_logprobs"] = (
                []
                if best is None
                else [
                    _token_entry(self.tokenizer, int(t), float(v))
                    for v, t in zip(best.values[j], best.indices[j])
                ]
            )
            content.append(entry)
        return {"content": content}


def _token_entry(tokenizer, token: int, logprob: float) -> dict:
    text = tokenizer.decode([token])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


class ChatServer(ThreadingHTTPServer):
    """`ChatModel` over HTTP, one thread per connection, with optional fault injection. At most
    `max_connections` connections are served at once (each is a thread); one more closes the
    oldest connection still sending (or waiting to send) its request, or, when every one is being
    answered, is answered 503 at once and closed. A connection silent for `idle_timeout` seconds
    between requests, or `request_timeout` seconds within one, is closed."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        chat: ChatModel,
        host: str = "127.0.0.1",
        port: int = 8000,
        *,
        fail_every: int = 0,
        stall_every: int = 0,
        stall_seconds: float = 30.0,
        log=None,
        max_queue: int = MAX_QUEUE,
        warn=None,
        idle_timeout: float = IDLE_TIMEOUT,
        max_connections: int | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
    ):
        if fail_every < 0 or stall_every < 0:
            raise SepoError("--fail-every and --stall-every must be >= 0")
        if not 0 <= stall_seconds <= MAX_STALL_SECONDS:  # NaN fails both comparisons
            raise SepoError(
                f"--stall-seconds must be a number of seconds in 0..{MAX_STALL_SECONDS:g}, got "
                f"{stall_seconds}"
            )
        if not 1 <= max_queue <= 4096:
            raise SepoError(f"--max-queue must be in 1..4096, got {max_queue}")
        if not 0 < idle_timeout <= 3600:
            raise SepoError(f"idle_timeout must be in (0, 3600] seconds, got {idle_timeout}")
        if not 0 < request_timeout <= 3600:
            raise SepoError(f"request_timeout must be in (0, 3600] seconds, got {request_timeout}")
        self.chat = chat
        self.max_queue = max_queue
        self.idle_timeout = idle_timeout
        self.request_timeout = min(request_timeout, idle_timeout)
        self.max_connections = max_connections or 4 * max_queue + 64
        self._open: dict[Any, list] = {}
        """Open connection -> [since when, whether it is receiving a request (evictable)]."""
        self._connections_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_queue)
        self.fail_every = fail_every
        self.stall_every = stall_every
        self.stall_seconds = stall_seconds
        self.stats = ServerStats()
        self.log = log
        self.warn = warn
        """Called with one line when a request first leaves the temperature to the server (always
        shown by `sepo serve`; `log` is only the per-request lines of `--log-requests`)."""
        try:
            super().__init__((host, port), _Handler)
        except OSError as error:
            raise SepoError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None

    def process_request(self, request, client_address):
        """A thread for the connection; past `max_connections`, the oldest connection still
        receiving its request is closed to make room, and when none is, a 503 is written at once."""
        import socket

        with self._connections_lock:
            victim = None
            if len(self._open) >= self.max_connections:
                waiting = [(since, id(c), c) for c, (since, receiving) in self._open.items() if receiving]
                if waiting:
                    victim = min(waiting)[2]
                    del self._open[victim]
            full = len(self._open) >= self.max_connections
            if not full:
                self._open[request] = [time.monotonic(), True]
        if victim is not None:
            with self.stats.changing():
                self.stats.evicted += 1
            with contextlib.suppress(OSError):  # its thread's read returns at once, and it ends
                victim.shutdown(socket.SHUT_RDWR)
        if full:
            return self._refuse_connection(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self._connections_lock:
                self._open.pop(request, None)
            raise

    def receiving(self, connection, receiving: bool) -> None:
        """Mark `connection` as receiving a request (it may be closed to make room) or as being
        answered (it may not)."""
        with self._connections_lock:
            if connection in self._open:
                self._open[connection] = [time.monotonic(), receiving]

    def handle_error(self, request, client_address):
        """One line (under `log`), not the standard library's traceback, for a connection that failed."""
        import sys

        if self.log:
            self.log(f"connection from {client_address[0]} failed: {_first_line(sys.exc_info()[1])}")

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._open.pop(request, None)

    def _refuse_connection(self, request) -> None:
        """503 with Retry-After on a connection over the limit, without a thread: the request bytes
        already received are read (so closing does not reset the answer away), then it closes."""
        import socket

        body = json.dumps(
            {
                "error": {
                    "message": f"the server is busy: {self.max_connections} connections are open; "
                    "retry later",
                    "type": "server_error",
                    "param": None,
                    "code": "overloaded",
                }
            }
        ).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        with self.stats.changing():
            self.stats.refused_connections += 1
        try:
            request.setblocking(False)
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while request.recv(65536):
                    pass
            request.send(head + body)
            request.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self, wait: float = 30.0) -> bool:
        """Stop cleanly (call from another thread than `serve_forever`'s, or after it returned):
        no new connection is served, the generation under way stops at its next token, and chat
        requests in flight are answered (503) within `wait` seconds. True when none is left."""
        self.chat.stopping.set()
        self.server_close()
        return self.stats.wait(idle=True, timeout=wait)["in_flight"] == 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ChatServer

    @property
    def timeout(self) -> float:  # read by `setup` for the connection's socket timeout
        return self.server.idle_timeout

    def handle_one_request(self):
        """Wait up to the idle timeout for a request to begin, then read it with the shorter
        request timeout (between bytes), so a client that stalls halfway frees its thread soon."""
        self.server.receiving(self.connection, True)
        try:
            self.connection.settimeout(self.server.idle_timeout)
            if not self.rfile.peek(1):  # closed by the client (or to make room)
                self.close_connection = True
                return
            self.connection.settimeout(self.server.request_timeout)
            # the base class closes a connection whose request line or headers time out
            super().handle_one_request()
        except (ConnectionError, TimeoutError, OSError, ValueError):  # it vanished or stayed silent
            self.close_connection = True

    def _client_gone(self) -> bool:
        """Whether the client has closed its connection (checked without waiting: its end read
        as closed, or reset). Data it sent ahead (a next request) does not count."""
        import select
        import socket

        try:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(0):
                return False
            return self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True

    def handle_expect_100(self):
        """A client that asks before sending (`Expect: 100-continue`) an over-long body gets the 413
        then, and never sends it."""
        if self._length() is not None and self._length() > MAX_BODY_BYTES:
            self._error(413, f"request body over {MAX_BODY_BYTES:,} bytes", "invalid_request_error")
            self.close_connection = True
            return False
        return super().handle_expect_100()

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        if self.server.log:
            self.server.log(format % args)

    def do_GET(self):
        self.server.receiving(self.connection, False)
        path = self.path.split("?")[0].rstrip("/")
        if path == "/health":
            return self._send(200, {"status": "ok"})
        if path == "/v1/models":
            return self._send(200, {"object": "list", "data": [
                {"id": self.server.chat.name, "object": "model", "created": 0, "owned_by": "sepo"}]})
        if path == "/sepo/stats":
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            if not query:
                return self._send(200, self.server.stats.record())
            try:
                wait = {
                    "idle": query.get("idle", ["0"])[0] == "1",
                    "answered": int(query.get("answered", ["0"])[0]),
                    "timeout": min(600.0, float(query.get("timeout", ["60"])[0])),
                }
            except ValueError:
                return self._error(
                    400, "stats: answered must be an integer and timeout a number", "invalid_request_error"
                )
            return self._send(200, self.server.stats.wait(**wait))
        return self._error(404, f"no route {path!r}", "not_found")

    def do_POST(self):
        path = self.path.split("?")[0].rstrip("/")
        if path != "/v1/chat/completions":
            self._drain()
            return self._error(404, f"no route {path!r}", "not_found")
        stats = self.server.stats
        with stats.changing():
            stats.requests += 1
            stats.in_flight += 1
            stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
            number = stats.requests
        try:
            self._chat(number)
        finally:
            with stats.changing():
                stats.in_flight -= 1

    def _chat(self, number: int):
        stats = self.server.stats
        body = self._drain()
        if body is None:
            return
        self.server.receiving(self.connection, False)
        if self.server.fail_every and number % self.server.fail_every == 0:
            with stats.changing():
                stats.failed += 1
            return self._error(500, f"injected failure (request {number})", "server_error")
        if self.server.stall_every and number % self.server.stall_every == 0:
            with stats.changing():
                stats.stalled += 1
            self.server.chat.stopping.wait(self.server.stall_seconds)  # a shutdown ends the stall
        try:
            # bounded depth: a deep body is a 400, not a dropped connection
            payload = parse_json(body.decode("utf-8"))
            if not isinstance(payload, dict):
                raise ValueError("the body must be a JSON object")
            try:
                json.dumps(payload, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    "the body holds a lone surrogate escape (e.g. \\ud800), which is not text"
                ) from None
            refused = sorted(
                k for k in payload if k in _REFUSED and payload[k] not in (None, 0, False, [], {})
            )
            if refused:
                return self._invalid(f"unsupported parameter(s): {', '.join(refused)}")
            request = ChatRequest.model_validate({k: v for k, v in payload.items() if k not in _REFUSED})
        except (ValueError, ValidationError) as error:
            return self._invalid(_first_line(error))
        if request.stream:
            return self._invalid("stream=true is not supported")
        if request.model != self.server.chat.name:
            with stats.changing():
                stats.invalid += 1
            return self._error(
                404,
                f"model {request.model!r} is not served here (serving {self.server.chat.name!r})",
                "model_not_found",
            )
        if not self.server._slots.acquire(blocking=False):
            return self._error(
                503,
                f"the server is busy: {self.server.max_queue} requests are already waiting for the "
                "model; retry later",
                "server_error",
                code="overloaded",
                retry_after=1,
            )
        # The slot is released before any answer is sent, so a client that sends its next request
        # as soon as it reads this answer never finds the slot still taken.
        failure = None
        try:
            prompt = self.server.chat.prompt_ids(request)
            response = self.server.chat.complete(request, prompt, cancelled=self._client_gone)
        except ClientGone:
            with stats.changing():
                stats.abandoned += 1
            failure = ()
        except ContextTooLong as error:
            with stats.changing():
                stats.invalid += 1
            failure = (400, str(error), "invalid_request_error", "context_length_exceeded", "messages")
        except ShuttingDown:
            failure = (503, "the server is shutting down", "server_error", "shutting_down", None)
        except SepoError as error:
            with stats.changing():
                stats.invalid += 1
            failure = (400, str(error), "invalid_request_error", None, None)
        except Exception as error:  # noqa: BLE001 - the client gets a 500 with one line, the server keeps serving
            if self.server.log:
                self.server.log(f"generation failed: {_first_line(error)}")
            failure = (500, f"generation failed: {_first_line(error)}", "server_error", None, None)
        finally:
            self.server._slots.release()
        if failure == ():  # nobody to answer
            self.close_connection = True
            return
        if failure is not None:
            status, message, kind, code, param = failure
            return self._error(status, message, kind, code=code, param=param)
        used = response[DECODING_FIELD]
        defaulted = "temperature" in used["defaults"]
        with stats.changing():
            stats.answered += 1
            stats.completions += len(response["choices"])
            stats.prompt_tokens += response["usage"]["prompt_tokens"]
            stats.completion_tokens += response["usage"]["completion_tokens"]
            stats.default_temperature += defaulted
            first_default = defaulted and stats.default_temperature == 1
        if self.server.log:
            self.server.log(
                f"request {number}: " + ", ".join(f"{k} {v}" for k, v in used.items() if k != "greedy")
            )
        if first_default and self.server.warn:
            self.server.warn(
                f"warning: request {number} sent no temperature, so it was sampled at temperature "
                f"{used['temperature']:g} (the OpenAI default), not greedily; every response says the "
                f"decoding it used in `{DECODING_FIELD}`, and /sepo/stats counts such requests "
                "(default_temperature)"
            )
        self._send(200, response)

    def _length(self) -> int | None:
        """The body's declared length; None when the header is not a length."""
        text = (self.headers.get("Content-Length") or "0").strip()
        return int(text) if text.isdigit() else None

    def _drain(self) -> bytes | None:
        """The request body, or None once refused: 400 for a length that is not one, 413 (after
        reading and dropping up to `DISCARD_BYTES`, so the client reads the answer) for one over
        `MAX_BODY_BYTES`, a closed connection for one that does not arrive within the idle timeout."""
        length = self._length()
        if length is None:
            self._error(400, "Content-Length is not a byte count", "invalid_request_error")
            self.close_connection = True
            return None
        if length > MAX_BODY_BYTES:
            with contextlib.suppress(TimeoutError):
                self._read(min(length, DISCARD_BYTES))
            self._error(413, f"request body over {MAX_BODY_BYTES:,} bytes", "invalid_request_error")
            self.close_connection = True
            return None
        try:
            body = self._read(length)
        except TimeoutError:
            body = b""
        if len(body) < length:  # the client stopped sending, or sends too slowly: close
            with self.server.stats.changing():
                self.server.stats.timed_out += 1
            self.close_connection = True
            return None
        return body

    def _read(self, length: int) -> bytes:
        """Up to `length` bytes of body, within one idle timeout in all (a client sending a byte
        at a time cannot hold the thread longer); fewer when it stops or the time is up."""
        deadline = time.monotonic() + self.server.idle_timeout
        parts, got = [], 0
        while got < length and time.monotonic() < deadline:
            part = self.rfile.read1(min(65536, length - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def _invalid(self, message: str):
        with self.server.stats.changing():
            self.server.stats.invalid += 1
        return self._error(400, message, "invalid_request_error")

    def _error(
        self,
        status: int,
        message: str,
        kind: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: int | None = None,
    ):
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        self._send(
            status, {"error": {"message": message, "type": kind, "param": param, "code": code}}, headers
        )

    def _send(self, status: int, data: dict, headers: dict | None = None):
        body = json.dumps(data).encode()
        try:
            self.send_response(status, HTTPStatus(status).phrase)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout): nothing to answer
            self.close_connection = True


def _first_line(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        return f"{where}: {first.get('msg', 'invalid')}"
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
