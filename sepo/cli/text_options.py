"""Decoding options of text agents, shared by `eval`, `exploit` and `train`.

`with_decoding` gives a command `--temperature --top-p --top-k --max-new-tokens
--repetition-penalty --thinking --samples` (and `--failure-rule`, `--reprompts` where an agent is
audited); the
command receives the ones given as `decoding` (a dict) and builds its settings with
`text_agent_options(protocol, seed, **decoding)`: the protocol's decoding (`--protocol paper` =
the paper's), then every option given. They apply to every text agent (hf:, run: with a model,
openai:) in every domain; given for another agent, they are refused.
"""
from __future__ import annotations

import functools
import inspect
from typing import Optional

import typer

from sepo.errors import SepoError, brief
from sepo.policies.text_policy import DEFAULT_REPROMPTS, DEFAULT_SAMPLES, FAILURE_RULES

_OPTIONS = {
    "temperature": (
        Optional[float],
        "--temperature",
        "Text agents: sampling temperature, 0 = greedy (default 1; the paper's 0.8 under --protocol paper).",
    ),
    "top_p": (Optional[float], "--top-p", "Text agents: nucleus sampling mass (default 1; paper 0.95)."),
    "top_k": (Optional[int], "--top-k", "Text agents: top-k filter, 0 = off (default 0; paper 50)."),
    "max_new_tokens": (
        Optional[int],
        "--max-new-tokens",
        "Text agents: reply length limit; a reply cut off there is 'truncated' (default 48; paper 256).",
    ),
    "repetition_penalty": (
        Optional[float],
        "--repetition-penalty",
        "Text agents: repetition penalty (default 1; paper 1.3).",
    ),
    "thinking": (
        Optional[bool],
        "--thinking/--no-thinking",
        "Text agents: the chat template's enable_thinking switch "
        "(Qwen 3 style); unset leaves the template's default.",
    ),
}
_SAMPLES = (
    f"Text agents: replies per information state when the policy is estimated (default {DEFAULT_SAMPLES})."
)
_TRAIN_SAMPLES = (
    "hf: replies per information state for the played policy each step's charges and logs use (default 64)."
)
_FAILURE_RULE = (
    f"Text agents: rule for replies that do not parse: {' | '.join(FAILURE_RULES)} (default forced)."
)
_MAX_TOKENS = (
    "openai: agents: stop the audit cleanly once this many prompt + completion tokens were sent; the "
    "replies received stay cached, so re-running the command resumes (docs/endpoints.md)."
)
_REPLY_CACHE = (
    "Text agents: keep what the model answered in this folder, so that re-running the same command after "
    "a kill resumes where it stopped, with the same numbers (hf: and run: models keep each batch of "
    "replies and of forced decoding; openai: keeps its replies here instead of ~/.cache/sepo/replies)."
)
_REPROMPTS = (
    f"Text agents, with --failure-rule reprompt: correction turns per failed reply before the fallback "
    f"action plays (default {DEFAULT_REPROMPTS})."
)


def with_decoding(training: bool = False):
    """Add the decoding options to a command, passed on as `decoding` (the options given)."""

    def decorate(command):
        signature = inspect.signature(command)
        kept = [p for name, p in signature.parameters.items() if name != "decoding"]
        options = dict(
            _OPTIONS, samples=(Optional[int], "--samples", _TRAIN_SAMPLES if training else _SAMPLES)
        )
        if not training:
            options["failure_rule"] = (Optional[str], "--failure-rule", _FAILURE_RULE)
            options["reprompts"] = (Optional[int], "--reprompts", _REPROMPTS)
            options["max_tokens_total"] = (Optional[int], "--max-tokens-total", _MAX_TOKENS)
            options["reply_cache"] = (Optional[str], "--reply-cache", _REPLY_CACHE)
        extra = [inspect.Parameter(f"decoding_{name}", inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                   default=typer.Option(None, flag, help=help))
                 for name, (kind, flag, help) in options.items()]

        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            given = {
                key[len("decoding_") :]: kwargs.pop(key)
                for key in list(kwargs)
                if key.startswith("decoding_")
            }
            return command(*args, decoding={k: v for k, v in given.items() if v is not None}, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=kept + extra)
        return wrapper

    return decorate


def decoding_applies(decoding: dict, policy, agent: str) -> None:
    """The decoding options given apply to text agents only: one given for another agent (a bot, a
    table) would change nothing, so it is refused rather than ignored."""
    if decoding and getattr(policy, "decoding", None) is None:
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in decoding)
        verb = "applies" if len(decoding) == 1 else "apply"
        raise SepoError(
            f"{flags} {verb} to text agents only (hf:, run: with a model, openai:); {brief(agent)} is not one"
        )


def text_agent_options(
    protocol: str,
    seed: int,
    *,
    temperature=None,
    top_p=None,
    top_k=None,
    max_new_tokens=None,
    repetition_penalty=None,
    thinking=None,
    samples=None,
    failure_rule=None,
    reprompts=None,
    max_tokens_total=None,
    reply_cache=None,
):
    """The decoding and estimation settings of a text agent from a command's options."""
    from sepo.policies.replies import decoding_for
    from sepo.policies.text_policy import TextAgentOptions

    if reprompts is not None and failure_rule != "reprompt":
        raise SepoError("--reprompts applies with --failure-rule reprompt only")
    decoding = decoding_for(
        protocol,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_new_tokens=max_new_tokens,
        repetition_penalty=repetition_penalty,
        enable_thinking=thinking,
    )
    if reply_cache is not None and not reply_cache.strip():
        raise SepoError("--reply-cache needs a folder, got an empty name")
    if samples is not None and samples < 1:  # named by its flag (the options' own check names the setting)
        raise SepoError(f"--samples must be >= 1 (replies per information state), got {samples}")
    if samples is not None and decoding.greedy:  # it would change nothing: refused rather than ignored
        raise SepoError(
            f"--samples {samples} applies to sampled replies; under greedy decoding (--temperature 0) each "
            "prompt has one reply and the policy is read exactly from it"
        )
    return TextAgentOptions(
        decoding,
        DEFAULT_SAMPLES if samples is None else samples,
        failure_rule or "forced",
        seed,
        DEFAULT_REPROMPTS if reprompts is None else reprompts,
        max_tokens_total,
        reply_cache,
    )


def policy_line(record: dict, decoding: dict | None = None) -> str:
    """One line saying how the agent's policy table was obtained (`exact` or `estimated (n replies
    per state)`) and, for a text agent, under which decoding."""
    line = f"policy table: {record['read']}"
    if not record.get("read_exactly") and record.get("replies"):
        line += (f" ({record['states']} states, {record['invalid_replies']} of {record['replies']} replies "
                 "did not parse)")
    if decoding:
        line += "; decoding: " + ", ".join(f"{k} {v}" for k, v in decoding.items() if v is not None)
    return line


def reply_cache_line(record: dict) -> str:
    """One line on a local model's batch cache: what this run read from it and added to it."""
    return (
        f"reply cache: {record['batches_read']:,} batches read, {record['batches_stored']:,} generated and "
        f"kept ({record['path']})"
    )


def reply_kinds_line(kinds: dict[str, dict[str, int]]) -> str | None:
    """One line on how the replies parsed, in play and in reading the policy (None when no reply
    was parsed, e.g. an answer-only model read exactly)."""
    parts = []
    for where in ("played", "policy"):
        counts = kinds.get(where) or {}
        total = sum(counts.values())
        if total:
            failed = ", ".join(f"{k} {n}" for k, n in counts.items() if k != "ok") or "none"
            parts.append(f"{where} {total - counts.get('ok', 0)} of {total} invalid ({failed})")
    return "replies: " + "; ".join(parts) if parts else None


def reprompt_line(record: dict) -> str:
    """One line on the `reprompt` rule: in play, how many replies failed, the correction turns
    sent, how many they recovered and how many still fell back."""
    played = record["played"]
    line = (
        f"re-prompts (at most {record['max_reprompts']} per failed reply): in play "
        f"{played['failed_replies']} replies failed, {played['reprompts_sent']} corrections sent, "
        f"{played['recovered']} recovered, {played['fell_back']} played the fallback action"
    )
    policy = record["policy"]
    if policy["failed_replies"]:
        line += (f"; reading the policy {policy['failed_replies']} failed, {policy['reprompts_sent']} sent, "
                 f"{policy['recovered']} recovered, {policy['fell_back']} fell back")
    return line


def usage_line(record: dict) -> str:
    """One line on an endpoint agent's token spend: sent by this audit, and read from the cache."""
    u = record["usage"]
    line = (
        f"tokens: {u['prompt_tokens']:,} prompt + {u['completion_tokens']:,} completion sent in "
        f"{u['requests']:,} requests ({u['retries']} retries); {u['cache_hits']:,} requests read from the "
        f"cache ({u['cached_prompt_tokens']:,} + {u['cached_completion_tokens']:,} tokens when first asked)"
    )
    if record.get("max_tokens_total") is not None:
        line += f"; budget {record['max_tokens_total']:,}"
    if record.get("cache_lines_skipped"):
        skipped = record["cache_lines_skipped"]
        line += f"; {skipped:,} cache line{'s' if skipped != 1 else ''} skipped (unreadable: see the warning)"
    return line
