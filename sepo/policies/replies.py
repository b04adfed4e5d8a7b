"""Text agents as reply sources: the contract shared by local models and endpoint models.

A language model's policy is what it plays: the distribution of the *parsed action* of the replies
it writes under the decoding it is evaluated with, at the prompts it meets in play. Anything that
can write replies to a game's prompts (a local Hugging Face model, a model behind an
OpenAI-compatible endpoint, a scripted text agent in tests) is a `ReplySource`; the estimation of
its action distribution, the handling of truncated or unparsable replies and the labels
`exact` / `estimated (n replies per state)` are written once, over this contract.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, Sequence

from sepo.errors import SepoError
from sepo.games.base import Decision, ParseResult, TextView

REASONING_OPEN = "<think>"
REASONING_CLOSE = "</think>"
TRUNCATED = "truncated"
"""Parse status of a reply that stopped at the token limit, or inside an unclosed reasoning block."""


MAX_NEW_TOKENS = 1 << 17
"""The longest reply asked of any model (131,072 tokens, beyond today's largest output limits);
a local model is further bounded by its own context (`sepo.policies.hf.context_length`)."""


@dataclass(frozen=True)
class Decoding:
    """How replies are generated. `temperature == 0` means greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 48
    repetition_penalty: float = 1.0
    enable_thinking: bool | None = None
    """Passed to chat templates that accept it (Qwen 3 style); None leaves the template's default."""

    def __post_init__(self):
        import math

        for name in ("temperature", "top_p", "repetition_penalty"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SepoError(f"decoding {name} must be a finite number, got {value!r}")
        if self.temperature < 0:
            raise SepoError(f"decoding temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SepoError(f"decoding top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SepoError(f"decoding top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_new_tokens < 1:
            raise SepoError(f"decoding max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_new_tokens > MAX_NEW_TOKENS:
            raise SepoError(
                f"decoding max_new_tokens must be <= {MAX_NEW_TOKENS:,} (the longest reply any served model "
                f"writes; a local model is bounded by its context), got {self.max_new_tokens:,}"
            )
        if self.repetition_penalty <= 0:
            raise SepoError(f"decoding repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def record(self) -> dict:
        """The decoding as it goes into every result file."""
        return asdict(self)


PAPER_DECODING = Decoding(temperature=0.8, top_p=0.95, top_k=50, max_new_tokens=256, repetition_penalty=1.3)
"""The paper's evaluation decoding (docs/paper-protocol.md §1: T 0.8, top-p 0.95, repetition penalty 1.3,
256 new tokens by default; its training also used top-k 50)."""


def decoding_for(protocol: str, **overrides) -> Decoding:
    """The decoding of a command: the paper's under `--protocol paper`, else `Decoding()`
    (temperature 1, no filters, 48 new tokens), with every option the user gave (not None)
    replacing the protocol's value."""
    base = PAPER_DECODING if protocol == "paper" else Decoding()
    given = {name: value for name, value in overrides.items() if value is not None}
    unknown = set(given) - set(asdict(base))
    if unknown:
        raise SepoError(f"unknown decoding options: {', '.join(sorted(unknown))}")
    return Decoding(**{**asdict(base), **given})


@dataclass(frozen=True)
class Reply:
    """One generated reply. `finished` is False when generation stopped at the token limit
    instead of the end of the turn: such a reply is a parse failure (`truncated`), never read."""

    text: str
    finished: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0


def answer_part(text: str) -> str | None:
    """The part of a reply that may hold the answer: everything after the last `</think>`.
    None when a `<think>` block is still open at the end (the reply never left its reasoning)."""
    close = text.rfind(REASONING_CLOSE)
    tail = text if close < 0 else text[close + len(REASONING_CLOSE):]
    return None if REASONING_OPEN in tail else tail


def answer_line(reply: str) -> str | ParseResult:
    """Steps 1 and 2 of the strict rule (docs/parsing.md), where every domain's strict parser
    starts: the last non-empty line of the reply's answer part, or the parse that ends there
    (`truncated` while a reasoning block is still open, `no_action` when nothing is left)."""
    answer = answer_part(reply)
    if answer is None:
        return ParseResult(TRUNCATED)
    lines = [line for line in answer.splitlines() if line.strip()]
    return lines[-1] if lines else ParseResult("no_action")


def parse_reply(view: TextView, reply: Reply | str, decision: Decision) -> ParseResult:
    """The strict parse of a whole reply: a reply cut off at the token limit (`finished=False`) or
    still inside its reasoning is `truncated`; otherwise the game's parser reads the answer part.
    A parser bug that returns an illegal action is `illegal`, never an action."""
    text, finished = (reply, True) if isinstance(reply, str) else (reply.text, reply.finished)
    answer = answer_part(text)
    if not finished or answer is None:
        return ParseResult(TRUNCATED)
    result = view.parse(answer, decision)
    if result.ok and result.action not in decision.legal_actions:
        return ParseResult("illegal", names_found=result.names_found)
    return result


class ReplySource(Protocol):
    """Anything that writes replies to a game's prompts under a fixed decoding."""

    name: str
    text: TextView
    decoding: Decoding

    def replies(self, decisions: Sequence[Decision], n: int, seed: int) -> list[list[Reply]]:
        """`n` replies per decision (one chat per decision, as in play); same seed, same replies
        where the backend allows it."""
        ...
