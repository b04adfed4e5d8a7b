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
    name: Optional[str] = typer.Option(None, "--name", help="Model name clients send (default: the --model value)."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="Reply length when a request sets no max_tokens."),
    seed: int = typer.Option(0, "--seed", help="Seeds the replies of requests that carry no seed."),
    gpu: bool = typer.Option(False, "--gpu", help="Use the accelerator instead of the CPU."),
    fail_every: int = typer.Option(0, "--fail-every", help="Testing: answer every k-th chat request with status 500."),
    stall_every: int = typer.Option(0, "--stall-every", help="Testing: hold every k-th chat request --stall-seconds first."),
    stall_seconds: float = typer.Option(30.0, "--stall-seconds", help="Testing: how long a stalled request is held."),
    log_requests: bool = typer.Option(False, "--log-requests", help="Print one line per HTTP request."),
):
    """Serve a local model as an OpenAI-compatible chat-completions endpoint (POST /v1/chat/completions).

    Audit it with `sepo eval --agent openai:NAME@http://HOST:PORT/v1`. Honours temperature, top_p,
    max_tokens, seed, n (and top_k, repetition_penalty, chat_template_kwargs); finish_reason is
    "length" for a reply cut at max_tokens."""
    from sepo.models.serve import ChatModel, ChatServer

    if not 0 <= port <= 65535:
        raise SepoError(f"--port must be in 0..65535, got {port}")
    if max_new_tokens < 1:
        raise SepoError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    chat = ChatModel(model, name=name, max_new_tokens=max_new_tokens, seed=seed, device="cuda" if gpu else "cpu")
    server = ChatServer(chat, host, port, fail_every=fail_every, stall_every=stall_every, stall_seconds=stall_seconds,
                        log=(lambda line: err_console.print(line, highlight=False)) if log_requests else None)
    if not _loopback(host):
        err_console.print(f"warning: serving on {host}, reachable from other machines, without authentication")
    faults = [f"500 every {fail_every} requests" if fail_every else "", f"stall of {stall_seconds:g}s every {stall_every} requests" if stall_every else ""]
    faults = [f for f in faults if f]
    console.print(f"serving {chat.name!r} at {server.url}" + (f" (injected faults: {'; '.join(faults)})" if faults else ""),
                  highlight=False, soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
