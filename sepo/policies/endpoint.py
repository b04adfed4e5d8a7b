"""Any model behind an OpenAI-compatible chat-completions endpoint as a sepo agent (`openai:MODEL@URL`).

`EndpointAgent` is a `ReplySource` (sepo/policies/replies.py): each decision is one stateless chat
[system, user], as for local models, sent with the official `openai` client. As a `TextPolicy` it
is played and measured like any text agent: replies parsed strictly, failures resolved by the
named rule (the paper's forced decoding through the API's `logprobs`, see `forced_actions`;
"fallback"; "random-legal"), its policy exact under greedy decoding and estimated from replies otherwise. It
adds what an audit against a remote model needs:

- **API key from the environment** (`SEPO_API_KEY`, else `OPENAI_API_KEY`; a loopback URL needs
  none). The key is never logged, stored in a record, written to the cache, or shown in an error.
- **Bounded concurrency**: at most `concurrency` requests in flight (a thread pool; the client
  is thread-safe).
- **Retries with backoff** on 408/409/429/5xx, connection errors and timeouts: the `openai`
  client's own (exponential backoff from 0.5 s to 8 s with jitter, honouring `Retry-After`),
  `max_retries` times; then the audit stops with one line, and what was answered is kept.
- **A response cache on disk**, keyed by (endpoint URL, model, messages, decoding, seed, n), one
  JSON line per answered request (`ReplyCache`): an interrupted audit resumes asking only for
  what is missing, and a re-run reads the same replies. Under greedy decoding the seed is left
  out of the key (the reply does not depend on it), so a prompt met again is not asked again.
- **Token usage** (prompt and completion tokens, requests sent, cache hits, retries) in `record()`:
  the tokens sent by this audit, and those its cached replies cost when they were first asked.
- **A token budget** (`max_tokens_total`): once the prompt and completion tokens sent reach it, no
  further request is sent and the audit stops with `TokenBudgetReached` (one line). Requests
  already in flight finish and are cached, so the spend may pass the budget by at most
  `concurrency` requests; a re-run resumes from the cache and spends a new budget on the rest.
- `n` replies per decision go out as requests of at most `max_n` (OpenAI's limit is 128).

`finished` is `finish_reason == "stop"`: a reply cut at `max_tokens` ("length") or filtered is a
parse failure (`truncated`), never read for an action.

Decoding maps to request fields: temperature, top_p, max_tokens, seed, n; top_k,
repetition_penalty and enable_thinking (as `chat_template_kwargs`) are sent as vLLM-style extra
fields only when they differ from their defaults (OpenAI's own API refuses them).
"""
from __future__ import annotations

import ipaddress
import os
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Sequence
from urllib.parse import urlparse

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, TextView
from sepo.policies.hf import FORCED_QUESTION
from sepo.policies.replies import Decoding, Reply
from sepo.policies.reply_cache import ReplyCache, request_key
from sepo.policies.text_policy import DEFAULT_REPROMPTS, DEFAULT_SAMPLES, TextPolicy
from sepo.redact import redact_secrets

API_KEY_VARIABLES = ("SEPO_API_KEY", "OPENAI_API_KEY")
CACHE_VARIABLE = "SEPO_CACHE_DIR"
_NO_KEY = "EMPTY"


def parse_endpoint_spec(arg: str) -> tuple[str, str | None]:
    """`MODEL@URL` (or `MODEL`, for the client's default URL / `OPENAI_BASE_URL`) -> (model, url).
    Errors name the spec with its credentials redacted."""
    try:
        return _parse_endpoint_spec(arg)
    except SepoError as error:
        raise SepoError(redact_secrets(str(error))) from None


def _parse_endpoint_spec(arg: str) -> tuple[str, str | None]:
    match = re.fullmatch(r"(?P<model>.+?)(?:@(?P<url>https?://\S+))?", arg.strip())
    if not match or not match.group("model") or "@http" in match.group("model"):
        raise SepoError(f"agent 'openai:{arg}': expected openai:MODEL@http(s)://HOST[:PORT]/v1")
    model, url = match.group("model"), match.group("url")
    if model.endswith("@"):
        raise SepoError(f"agent 'openai:{arg}': nothing after '@'; expected "
                        "openai:MODEL@http(s)://HOST[:PORT]/v1")
    if "@" in model and url is None and re.search(r"@[a-z]+:", model):
        raise SepoError(f"agent 'openai:{arg}': the URL must start with http:// or https://")
    if "@" in model and url is None:
        after = model.rsplit("@", 1)[1]
        raise SepoError(
            f"agent 'openai:{arg}': {after!r} after '@' is not a URL; expected "
            "openai:MODEL@http(s)://HOST[:PORT]/v1 (a model name with '@' in it needs the URL written after "
            "it)"
        )
    if url is not None and not urlparse(url).hostname:
        raise SepoError(f"agent 'openai:{arg}': {url!r} has no host")
    return model, url


def default_cache_dir() -> Path:
    """`$SEPO_CACHE_DIR`, else `$XDG_CACHE_HOME/sepo/replies` (`~/.cache/sepo/replies`)."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sepo" / "replies"


def _loopback(url: str | None) -> bool:
    host = urlparse(url).hostname if url else None
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TokenBudgetReached(SepoError):
    """The audit's token budget is spent: it stops, what was answered stays cached, a re-run resumes."""


class EndpointAgent(TextPolicy):
    """A chat model behind an OpenAI-compatible endpoint: a `ReplySource`, played and measured by
    the generic `TextPolicy` (see module doc)."""

    def __init__(
        self,
        model: str,
        base_url: str | None,
        game_text: TextView,
        decoding: Decoding | None = None,
        *,
        failure_rule: str = "forced",
        fallback_action=None,
        forced_top_logprobs: int = 20,
        samples: int = DEFAULT_SAMPLES,
        seed: int = 0,
        api_key: str | None = None,
        concurrency: int = 8,
        max_retries: int = 6,
        timeout: float = 120.0,
        cache_dir: str | os.PathLike | None = None,
        use_cache: bool = True,
        max_n: int = 128,
        name: str | None = None,
        client=None,
        reprompts: int = DEFAULT_REPROMPTS,
        max_tokens_total: int | None = None,
    ):
        try:
            import openai
        except ImportError:  # pragma: no cover - the `endpoint` extra is missing
            raise SepoError(
                "openai: agents need the `openai` package: pip install 'sepo[endpoint]'"
            ) from None
        if concurrency < 1 or max_retries < 0 or not timeout > 0 or max_n < 1:
            raise SepoError(
                "endpoint agent: concurrency and max_n must be >= 1, max_retries >= 0, timeout > 0"
            )
        if max_tokens_total is not None and max_tokens_total < 1:
            raise SepoError(f"--max-tokens-total must be >= 1, got {max_tokens_total}")
        self.max_tokens_total = max_tokens_total
        self.model = model
        self._url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        """The URL the client connects to, credentials included; never written or printed."""
        self.base_url = redact_secrets(self._url)
        """The URL as it is named, recorded, keyed and cached: credentials redacted."""
        self.text = game_text
        self.decoding = decoding or Decoding()
        self.concurrency = concurrency
        self.max_n = max_n
        if not 1 <= forced_top_logprobs <= 20:
            raise SepoError(
                f"forced_top_logprobs must be in 1..20 (the OpenAI API's limit), got {forced_top_logprobs}"
            )
        self.forced_top_logprobs = forced_top_logprobs
        self._serves_forced: bool | None = None
        self.name = name or f"openai:{model}@{self.base_url}"
        key = api_key or next((os.environ[v] for v in API_KEY_VARIABLES if os.environ.get(v)), None)
        if key is None and not _loopback(self._url):
            raise SepoError(f"agent {self.name!r}: no API key; set {' or '.join(API_KEY_VARIABLES)}")
        self._secret = key
        self.client = client or openai.OpenAI(
            api_key=key or _NO_KEY, base_url=self._url, max_retries=max_retries, timeout=timeout
        )
        self._openai = openai
        self.cache = None
        if use_cache:
            folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model)[:64]
            self.cache = ReplyCache(
                folder / f"{slug}-{request_key({'model': model, 'url': self.base_url})[:12]}.jsonl"
            )
        self.usage: Counter = Counter()
        self._usage_lock = threading.Lock()
        super().__init__(
            failure_rule=failure_rule,
            fallback_action=fallback_action,
            samples=samples,
            seed=seed,
            reprompts=reprompts,
        )

    # ------------------------------------------------------------------ ReplySource

    def messages(self, decision: Decision) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.text.system_prompt()},
                {"role": "user", "content": self.text.user_prompt(decision)}]

    def replies(self, decisions: Sequence[Decision], n: int, seed: int) -> list[list[Reply]]:
        """`n` replies per decision: requests of at most `max_n` replies each, their seeds drawn
        from `seed`, the decision's position and the request's part; cached; uncached requests run
        concurrently, at most `concurrency` at a time. Identical requests are asked once."""
        return self.chat_replies([self.messages(d) for d in decisions], n, seed)

    def chat_replies(self, chats: Sequence[list[dict]], n: int, seed: int) -> list[list[Reply]]:
        """`n` replies per chat (e.g. a cheap-talk message turn) under the decoding, through the
        same cache and concurrency as `replies`: the key holds the chat itself, so a message
        request never shares a key with an action request."""
        if n < 1:
            raise SepoError(f"endpoint agent: n must be >= 1, got {n}")
        parts = [(i, min(self.max_n, n - start), _request_seed(seed, i, part)) for i, _ in enumerate(chats)
                 for part, start in enumerate(range(0, n, self.max_n))]
        records = self._answers(
            [self._request(list(chats[i]), size, self.decoding, s) for i, size, s in parts]
        )
        out: list[list[Reply]] = [[] for _ in chats]
        for (i, _, _), record in zip(parts, records):
            out[i].extend(Reply(**r) for r in record["replies"])
        return out

    def forced_actions(self, decisions: list[Decision], replies: list[str]) -> list[int]:
        """The paper's forced decoding through the API: the reply as an assistant turn, then the
        user turn "State your final action (A/B):" with the legal names; one greedy token.

        Behind `sepo serve` the request also carries the legal answers (`sepo_forced_answers`) and
        the server answers with the action `HFPolicy`'s forced rule picks from the model's whole
        next-token distribution: the `hf:` and `openai:` routes of one model play one policy.
        Elsewhere the choice is read from the token's `forced_top_logprobs` most likely
        alternatives (OpenAI returns at most 20): the legal action whose answer text a candidate
        spells (whole word first, else a prefix of it) with the highest log-probability, the
        local rule whenever the legal tokens are among them; when none is, the fallback action
        plays, counted as `forced.unmatched` and reported with the result (`forced_record`)."""
        decoding = Decoding(temperature=0, max_new_tokens=1, enable_thinking=self.decoding.enable_thinking)
        served = self.serves_forced_choice()
        requests = []
        for d, reply in zip(decisions, replies):
            messages = self.messages(d) + [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": FORCED_QUESTION.format(names="/".join(d.action_names))},
            ]
            request = {**self._request(messages, 1, decoding, 0), "top_logprobs": self.forced_top_logprobs}
            if served:
                request["forced_answers"] = [self.text.answer_text(d, a) for a in d.legal_actions]
            requests.append(request)
        actions = []
        for d, record in zip(decisions, self._answers(requests)):
            if record.get("forced_choice") is not None:
                actions.append(d.legal_actions[record["forced_choice"]])
                self.counts["forced.whole_distribution"] += 1
                continue
            action = _forced_choice(
                d, [self.text.answer_text(d, a) for a in d.legal_actions], record["top_logprobs"]
            )
            if action is None:
                self.counts["forced.unmatched"] += 1
                action = self._fallback(d)
            actions.append(action)
        return actions

    def serves_forced_choice(self) -> bool:
        """Whether the endpoint is `sepo serve` (its model list says `owned_by: sepo`), which picks
        the forced action from the whole distribution; asked once."""
        if self._serves_forced is None:
            try:
                listed = self.client.models.list()
                self._serves_forced = any(
                    getattr(m, "id", None) == self.model and getattr(m, "owned_by", None) == "sepo"
                    for m in getattr(listed, "data", None) or []
                )
            except Exception:  # noqa: BLE001 - an endpoint without a model list is simply not sepo serve
                self._serves_forced = False
        return self._serves_forced

    def forced_record(self) -> dict | None:
        """`TextPolicy.forced_record`, plus how the choices were read: from the model's whole
        distribution (`whole_distribution`, behind `sepo serve`: the `hf:` rule) or from the
        `top_alternatives` returned, and how many of those found no legal token there and played
        the fallback action (`unmatched`), where the `hf:` route could have chosen otherwise."""
        whole, unmatched = int(self.counts["forced.whole_distribution"]), int(self.counts["forced.unmatched"])
        out = super().forced_record()
        if out is None and not whole + unmatched:
            return None
        out = out or {"computed": 0, "reused": 0}
        out["read_from"] = "whole distribution (sepo serve)" if whole and not unmatched else \
            f"the {self.forced_top_logprobs} likeliest tokens"
        out["unmatched"] = unmatched
        if unmatched:
            out["note"] = (
                f"{unmatched:,} failed replies had no legal answer among the endpoint's "
                f"{self.forced_top_logprobs} likeliest next tokens and played the fallback action; the same "
                "model read locally (hf:) picks the likeliest legal token there, so the two routes can differ"
            )
        return out

    def _request(self, messages: list[dict], n: int, decoding: Decoding, seed: int) -> dict:
        """A request as it is keyed: what determines the replies (no secret, no transport)."""
        return {
            "url": self.base_url,
            "model": self.model,
            "messages": messages,
            "n": n,
            "decoding": decoding.record(),
            "seed": None if decoding.greedy else seed,
        }

    def _answers(self, requests: list[dict]) -> list[dict]:
        """The cached record of each request; the missing ones asked concurrently (at most
        `concurrency` in flight), each distinct request once."""
        keys = [request_key(r) for r in requests]
        records: dict[str, dict] = {}
        missing: dict[str, dict] = {}
        for key, request in zip(keys, requests):
            record = self.cache.get(key) if self.cache is not None else None
            if record is not None:
                records[key] = record
                usage = record.get("usage") or {}
                self._count(cache_hits=1, cached_prompt_tokens=int(usage.get("prompt_tokens", 0)),
                            cached_completion_tokens=int(usage.get("completion_tokens", 0)))
            elif key not in missing:
                missing[key] = request
        if missing:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(missing))) as pool:
                for key, record in zip(missing, pool.map(self._ask, missing.items())):
                    records[key] = record
        return [records[key] for key in keys]

    def _ask(self, item: tuple[str, dict]) -> dict:
        """Send one request (the client retries it); its record goes to the cache."""
        key, request = item
        self._check_budget()
        d = Decoding(**request["decoding"])
        extra = {}
        if d.top_k:
            extra["top_k"] = d.top_k
        if d.repetition_penalty != 1.0:
            extra["repetition_penalty"] = d.repetition_penalty
        if d.enable_thinking is not None:
            extra["chat_template_kwargs"] = {"enable_thinking": d.enable_thinking}
        if request.get("forced_answers"):
            extra["sepo_forced_answers"] = request["forced_answers"]
        top = request.get("top_logprobs")
        logprobs = dict(logprobs=True, top_logprobs=top) if top else {}
        try:
            raw = self.client.chat.completions.with_raw_response.create(
                model=self.model,
                messages=request["messages"],
                temperature=d.temperature,
                top_p=d.top_p,
                max_tokens=d.max_new_tokens,
                n=request["n"],
                seed=request["seed"] or 0,
                extra_body=extra or None,
                **logprobs,
            )
            response = raw.parse()
        except self._openai.APIError as error:
            hint = "; forced decoding needs logprobs, else use the fallback rule" if top else ""
            raise SepoError(self._scrub(f"agent {self.name!r}: request failed ({_describe(error)}){hint}; "
                                        "replies received so far are cached, re-run to resume")) from None
        choices = sorted(response.choices, key=lambda c: c.index)
        if len(choices) != request["n"]:
            raise SepoError(f"agent {self.name!r}: asked for n={request['n']} replies, the endpoint returned "
                            f"{len(choices)} (it may not support n > 1)")
        usage = response.usage
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        shares = _split(completion_tokens, len(choices))
        replies = [
            Reply(
                text=c.message.content or "",
                finished=c.finish_reason == "stop",
                prompt_tokens=prompt_tokens,
                completion_tokens=share,
            )
            for c, share in zip(choices, shares)
        ]
        record = {"request": request, "replies": [asdict(r) for r in replies],
                  "finish_reasons": [c.finish_reason for c in choices],
                  "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
                  "system_fingerprint": getattr(response, "system_fingerprint", None)}
        if top:
            content = (choices[0].logprobs.content or []) if choices[0].logprobs else []
            record["top_logprobs"] = (
                [[t.token, t.logprob] for t in content[0].top_logprobs] if content else []
            )
        if request.get("forced_answers"):
            choice = (response.model_extra or {}).get("sepo_forced_choice")
            if not isinstance(choice, int) or not 0 <= choice < len(request["forced_answers"]):
                raise SepoError(
                    f"agent {self.name!r}: the server did not answer sepo_forced_answers with a choice"
                )
            record["forced_choice"] = choice
        if self.cache is not None:
            self.cache.put(key, record)
        self._count(
            requests=1,
            retries=int(getattr(raw, "retries_taken", 0) or 0),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
        return record

    def _check_budget(self) -> None:
        """Refuse to send a request once the tokens sent have reached `max_tokens_total`."""
        if self.max_tokens_total is None:
            return
        with self._usage_lock:
            prompt, completion = self.usage["prompt_tokens"], self.usage["completion_tokens"]
        if prompt + completion >= self.max_tokens_total:
            where = f" in {self.cache.path}" if self.cache is not None else ""
            raise TokenBudgetReached(
                f"agent {self.name!r}: token budget of {self.max_tokens_total:,} reached "
                f"({prompt:,} prompt + {completion:,} completion tokens sent); the replies received "
                f"are cached{where}: re-run the same command to resume"
            )

    def _count(self, **amounts) -> None:
        with self._usage_lock:
            self.usage.update(amounts)

    def _scrub(self, text: str) -> str:
        """`text` without the API key or the URL's credentials (an error may quote either)."""
        text = text.replace(self._secret, "***") if self._secret else text
        text = text.replace(self._url, self.base_url)
        parts = urlparse(self._url)
        for secret in (parts.password, parts.username):
            if secret and len(secret) >= 4:
                text = text.replace(secret, "***")
        return redact_secrets(text)

    def record(self) -> dict:
        """What goes into a result: the endpoint, the decoding, token usage (never the key)."""
        return {
            "kind": "openai",
            "model": self.model,
            "base_url": self.base_url,
            "decoding": self.decoding.record(),
            "usage": {
                k: int(self.usage.get(k, 0))
                for k in (
                    "requests",
                    "cache_hits",
                    "retries",
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_prompt_tokens",
                    "cached_completion_tokens",
                )
            },
            "max_tokens_total": self.max_tokens_total,
            "cache": str(self.cache.path) if self.cache is not None else None,
            "cache_lines_skipped": self.cache.dropped if self.cache is not None else 0,
        }


def _request_seed(seed: int, index: int, part: int) -> int:
    """A 31-bit request seed from the call's seed, the decision's position and the request's part
    (servers take int32)."""
    return int(np.random.SeedSequence([seed % 2**63, index, part]).generate_state(1)[0] & 0x7FFFFFFF)


def _forced_choice(decision: Decision, answers: list[str], candidates: list) -> int | None:
    """The legal action whose answer text the most likely candidate token spells: whole-word
    tokens first, else tokens that start the answer; None when no candidate matches. Ties go to
    the first legal action, as in `HFPolicy.forced_actions`."""
    for whole in (True, False):
        best: dict[int, float] = {}
        for token, logprob in candidates:
            word = token.strip()
            for action, answer in zip(decision.legal_actions, answers):
                if word and (word == answer if whole else answer.startswith(word)):
                    best[action] = max(best.get(action, -np.inf), logprob)
        if best:
            return max(
                decision.legal_actions, key=lambda a: (best.get(a, -np.inf), -decision.legal_actions.index(a))
            )
    return None


def _split(total: int, parts: int) -> list[int]:
    """`total` tokens over `parts` replies (the API reports only the sum for n > 1)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def _describe(error) -> str:
    status = getattr(error, "status_code", None)
    message = str(getattr(error, "message", "") or error).strip().splitlines()
    message = message[0] if message else type(error).__name__
    return f"{type(error).__name__}{f' {status}' if status else ''}: {message[:300]}"
