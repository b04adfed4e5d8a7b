"""`sepo serve`: a local Hugging Face model behind an OpenAI-compatible chat-completions endpoint."""
from __future__ import annotations

import ipaddress
from typing import Optional

import typer

from sepo.cli.common import console, err_console, user_errors
from sepo.errors import SepoError


@user_errors
def serve_command(
    model: str = typer.Option(..., "--model", help="Model directory or hub id (needs the `llm` extra)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8000, "--port", help="Port; 0 picks a free one (printed)."),
    name: Optional[str] = typer.Option(
        None, "--name", help="Model name clients send (default: the --model value)."
    ),
    max_new_tokens: int = typer.Option(
        256, "--max-new-tokens", help="Reply length when a request sets no max_tokens."
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the replies of requests that carry no seed."),
    gpu: bool = typer.Option(False, "--gpu", help="Use the accelerator instead of the CPU."),
    fail_every: int = typer.Option(
        0, "--fail-every", help="Testing: answer every k-th chat request with status 500."
    ),
    stall_every: int = typer.Option(
        0, "--stall-every", help="Testing: hold every k-th chat request --stall-seconds first."
    ),
    stall_seconds: float = typer.Option(
        30.0, "--stall-seconds", help="Testing: how long a stalled request is held (0-3600)."
    ),
    max_queue: int = typer.Option(
        16,
        "--max-queue",
        help="Chat requests waiting for or using the model at once (1-4096); "
        "one more is answered 503 with Retry-After.",
    ),
    log_requests: bool = typer.Option(False, "--log-requests", help="Print one line per HTTP request."),
    max_request_tokens: int = typer.Option(
        32_768,
        "--max-request-tokens",
        help="New tokens one request may ask for (n x max_tokens; default 32,768 = 128 x 256); "
        "more is refused (400).",
    ),
):
    """Serve a local model as an OpenAI-compatible chat-completions endpoint (POST /v1/chat/completions).

    Audit it with `sepo eval --agent openai:NAME@http://HOST:PORT/v1`. Honours temperature, top_p,
    max_tokens, seed, n (and top_k, repetition_penalty, chat_template_kwargs); finish_reason is
    "length" for a reply cut at max_tokens. Every response echoes the decoding it was generated with
    (`sepo_decoding`); a request without temperature is sampled at 1.0 and warned about once. A
    prompt beyond the model's context, or a request too large for memory, is refused (400), a full
    queue answered 503; SIGTERM or Ctrl-C stops it cleanly."""
    from sepo.models.serve import MAX_STALL_SECONDS, ChatModel, ChatServer
    from sepo.policies.replies import MAX_NEW_TOKENS

    if not 0 <= port <= 65535:
        raise SepoError(f"--port must be in 0..65535, got {port}")
    if max_new_tokens < 1:
        raise SepoError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    if not 0 <= stall_seconds <= MAX_STALL_SECONDS:  # before the model loads; NaN fails both comparisons
        raise SepoError(
            f"--stall-seconds must be a number of seconds in 0..{MAX_STALL_SECONDS:g}, got {stall_seconds}"
        )
    if not 1 <= max_queue <= 4096:
        raise SepoError(f"--max-queue must be in 1..4096, got {max_queue}")
    if not 1 <= max_request_tokens <= 1 << 24:
        raise SepoError(f"--max-request-tokens must be in 1..{1 << 24}, got {max_request_tokens}")
    if max_new_tokens > MAX_NEW_TOKENS:
        raise SepoError(f"--max-new-tokens must be <= {MAX_NEW_TOKENS}, got {max_new_tokens}")
    if gpu:
        from sepo.training.config import check_accelerator

        check_accelerator("--gpu")
    chat = ChatModel(model, name=name, max_new_tokens=max_new_tokens, seed=seed,
                     device="cuda" if gpu else "cpu", max_request_tokens=max_request_tokens)
    server = ChatServer(
        chat,
        host,
        port,
        fail_every=fail_every,
        stall_every=stall_every,
        stall_seconds=stall_seconds,
        log=(lambda line: err_console.print(line, highlight=False)) if log_requests else None,
        max_queue=max_queue,
        warn=lambda line: err_console.print(line, highlight=False, soft_wrap=True),
    )
    if not _loopback(host):
        err_console.print(
            f"warning: serving on {host}, reachable from other machines, without authentication"
        )
    faults = [
        f"500 every {fail_every} requests" if fail_every else "",
        f"stall of {stall_seconds:g}s every {stall_every} requests" if stall_every else "",
    ]
    faults = [f for f in faults if f]
    console.print(
        f"serving {chat.name!r} at {server.url}"
        + (f" (injected faults: {'; '.join(faults)})" if faults else ""),
        highlight=False,
        soft_wrap=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the CLI raises it as KeyboardInterrupt)
        pass
    finally:
        clean = server.stop()
    stats = server.stats.record()
    err_console.print(f"stopped: {stats['answered']} requests answered" + ("" if clean else
                      "; a request still running after 30 s was abandoned"), highlight=False)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
