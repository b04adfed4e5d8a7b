"""`sepo serve` + `sepo eval --agent openai:...` as a user runs them, in separate processes on the
loopback address: an audit completes through a server that answers one request in five with
500, is reproducible, and after a kill resumes asking the server only for what is missing."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from sepo.cli.main import app  # noqa: E402
from sepo.models.tiny import init_tiny_model  # noqa: E402
from tests.serving import get  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DECODING = ["--temperature", "0", "--max-new-tokens", "8"]
EVAL = ["eval", "--agent", "AGENT", "--episodes", "2", "--seed", "3", *DECODING, "--json"]


def _env(**extra) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **extra}
    for name in ("SEPO_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    return env


def _sepo(*args) -> list[str]:
    return [sys.executable, "-m", "sepo.cli.main", *args]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=60)


@pytest.fixture(scope="module")
def flaky_server(tiny, tmp_path_factory):
    """`sepo serve` on a free loopback port, failing every fifth chat request with 500. Its
    output is read line by line until it names its address (then drained by a thread)."""
    process = subprocess.Popen(
        _sepo(
            "--threads",
            "1",
            "serve",
            "--model",
            str(tiny),
            "--name",
            "tiny",
            "--port",
            "0",
            "--fail-every",
            "5",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        seen = []
        for line in process.stdout:
            seen.append(line)
            if match := re.search(r"http://127\.0\.0\.1:\d+/v1", line):
                break
        else:
            pytest.fail("sepo serve exited without serving:\n" + "".join(seen))
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield match.group(0)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def _stats(url: str, **wait) -> dict:
    """The server's counts; with `idle=1` / `answered=N` the server answers once they hold (it
    waits on a condition, no polling)."""
    query = "&".join(f"{k}={v}" for k, v in {**wait, "timeout": 300}.items()) if wait else ""
    return get(url.removesuffix("/v1") + "/sepo/stats" + (f"?{query}" if query else ""))


def _answered(url: str) -> int:
    """Requests answered so far, once none is in flight (a killed client's last request may still be
    running)."""
    stats = _stats(url, idle=1)
    assert stats["in_flight"] == 0
    return stats["answered"]


def _audit(agent: str, cache: Path, *extra: str) -> dict:
    args = [agent if a == "AGENT" else a for a in EVAL] + list(extra)
    done = subprocess.run(_sepo("--threads", "1", *args), capture_output=True, text=True,
                          env=_env(SEPO_CACHE_DIR=str(cache)), cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _eval(url: str, cache: Path, *extra: str) -> tuple[dict, int]:
    """Run the audit to completion in a process; (result, requests the server answered for it)."""
    before = _answered(url)
    result = _audit("openai:tiny@" + url, cache, *extra)
    return result, _answered(url) - before


def _metrics(result: dict) -> str:
    """The result without the agent's name and usage record, as text (NaN intervals compare equal)."""
    return json.dumps({k: v for k, v in result.items() if k not in ("agent_record", "agent")}, sort_keys=True)


@pytest.mark.slow  # about 150 requests, one at a time, and three processes: minutes on a busy CPU
def test_audit_completes_through_500s_reproduces_and_resumes_after_a_kill(flaky_server, tmp_path):
    url = flaky_server
    full, asked = _eval(url, tmp_path / "full")
    stats = _stats(url)
    assert stats["failed"] >= asked // 5 - 1 > 0  # one request in five failed, the audit still completed
    usage = full["agent_record"]["usage"]
    assert usage["requests"] == asked and usage["retries"] >= 1 and usage["completion_tokens"] > 0
    assert full["decoding"] == full["agent_record"]["decoding"]
    assert (full["decoding"]["temperature"], full["decoding"]["max_new_tokens"]) == (0, 8)

    again, asked_again = _eval(url, tmp_path / "full")
    assert asked_again == 0 and _metrics(again) == _metrics(full)

    cache = tmp_path / "killed"
    before = _answered(url)
    args = ["openai:tiny@" + url if a == "AGENT" else a for a in EVAL]
    process = subprocess.Popen(
        _sepo("--threads", "1", *args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(SEPO_CACHE_DIR=str(cache)),
        cwd=ROOT,
    )
    assert _stats(url, answered=before + asked // 2)["answered"] >= before + asked // 2
    assert process.poll() is None
    process.kill()
    process.wait()
    kept = sum(1 for line in next(cache.iterdir()).read_text().splitlines() if line.endswith("}"))
    assert 0 < kept < asked
    resumed, asked_after = _eval(url, cache)
    assert asked_after == asked - kept  # only what the killed run had not stored
    assert _metrics(resumed) == _metrics(full)


@pytest.mark.slow  # the local model and the served one each play the whole audit
def test_greedy_audit_through_sepo_serve_equals_the_local_hf_agent(tiny, flaky_server, tmp_path):
    """Same model, seed and flags: the same result file, under the default forced rule too:
    `sepo serve` picks the forced action from the model's whole next-token distribution, as the
    local rule does, though the API returns at most 20 alternatives."""
    remote, _ = _eval(flaky_server, tmp_path / "remote")
    local = _audit(f"hf:{tiny}", tmp_path / "local")
    assert remote["policy"]["read"] == local["policy"]["read"] == "exact"
    assert remote["exploitability"] == local["exploitability"] is not None
    assert remote["forced_decoding"].pop("read_from") == "whole distribution (sepo serve)"
    assert remote["forced_decoding"].pop("unmatched") == 0
    assert _metrics(remote) == _metrics(local)


def test_serve_refuses_bad_options(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["serve", "--model", str(tmp_path / "missing"), "--port", "70000"])
    assert result.exit_code == 2 and "--port" in result.stderr
    result = runner.invoke(app, ["serve", "--model", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_serve_refuses_unbounded_settings_before_loading(tmp_path):
    runner = CliRunner()
    for option, value in (("--stall-seconds", "nan"), ("--stall-seconds", "1e9"), ("--max-queue", "0"),
                          ("--max-new-tokens", "1000000000"), ("--max-request-tokens", "0")):
        result = runner.invoke(app, ["serve", "--model", str(tmp_path / "missing"), option, value])
        assert (
            result.exit_code == 2 and option in result.stderr and len(result.stderr.strip().splitlines()) == 1
        ), result.stderr


def test_sigterm_stops_serve_cleanly_while_a_request_is_in_flight(tiny):
    """SIGTERM stops the server without "terminate called without an active exception": the
    request in flight (held by a stall) is answered 503 and the process exits 0 with one line."""
    from tests.serving import post

    process = subprocess.Popen(
        _sepo(
            "--threads",
            "1",
            "serve",
            "--model",
            str(tiny),
            "--name",
            "tiny",
            "--port",
            "0",
            "--stall-every",
            "1",
            "--stall-seconds",
            "600",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        line = process.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/v1", line).group(0)
        answers = []
        sender = threading.Thread(target=lambda: answers.append(post(url + "/chat/completions", {
            "model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})))
        sender.start()
        while _stats(url)["stalled"] < 1:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
        sender.join(60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "terminate called" not in err and err.strip().splitlines()[-1].startswith("stopped:"), err
    assert answers and answers[0][0] == 503 and answers[0][1]["error"]["code"] == "shutting_down"
