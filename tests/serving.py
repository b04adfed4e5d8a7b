"""Test helpers: the tiny local model behind `ChatServer` on the loopback address, in a thread."""
from __future__ import annotations

import contextlib
import json
import threading
import urllib.request

import pytest

from sepo.games.kuhn.exact import canonical_decisions
from sepo.games.kuhn.rules import INFO_STATES
from sepo.models.serve import ChatModel, ChatServer
from sepo.models.tiny import init_tiny_model


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    """The tiny model (built locally, seed 0) as a served chat model."""
    return ChatModel(
        init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=60), name="tiny", device="cpu"
    )


@pytest.fixture(scope="module")
def server(chat):
    with running_server(chat) as running:
        yield running


@pytest.fixture(scope="module")
def decisions():
    """Kuhn's twelve canonical decisions, in information-state order."""
    table = canonical_decisions()
    return [table[key] for key in INFO_STATES]


@contextlib.contextmanager
def running_server(chat: ChatModel, **faults):
    """A `ChatServer` for `chat` on 127.0.0.1 (a free port), stopped on exit."""
    server = ChatServer(chat, "127.0.0.1", 0, **faults)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def post(url: str, payload: dict) -> tuple[int, dict]:
    """POST JSON with the standard library (not the client under test); (status, body)."""
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())
