"""The shared lock on a session (Redis or Postgres) is a short lease renewed while its turn runs: a
stream lasting many leases keeps its session from another proxy process, a killed holder frees it
within one lease, and a holder that lost its lease (paused past it) cannot store its turn beside
the next holder's.

Every proxy is a real ``contextledger serve`` process on one real Redis, or one real Postgres,
with a 2-second lease so that a 20-second stream lasts ten leases (five, 10 seconds, at the small
test size).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.history.conftest import _stop
from tests.history.support import RedisServer, free_port
from tests.postgres_server import PostgresServer
from tests.serve.conftest import ROOT, FakeUpstream, Proxy, _wait_until_up
from tests.serve.test_failures import assert_openai_error
from tests.sizes import sized

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL and SIGSTOP")

KEY = "sk-lease-tenant-3c1d"
LEASE = 2.0
# A stream ten leases long (five at the small size); CONTEXTLEDGER_LEASE_STREAM=70 runs the same
# tests with a 70-second one.
STREAM = float(os.environ.get("CONTEXTLEDGER_LEASE_STREAM", sized(10, 5) * LEASE))


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def shared_store(request: pytest.FixtureRequest) -> str:
    """The ``--store`` every proxy of a test shares: a Redis, a Redis Cluster or a Postgres the tests started."""
    if request.param == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        return postgres.url
    if request.param == "redis-cluster":
        cluster_url: str = request.getfixturevalue("redis_cluster").url
        return cluster_url
    redis: RedisServer = request.getfixturevalue("redis_server")
    return f"redis://127.0.0.1:{redis.port}/5"


@contextlib.contextmanager
def running(
    upstream: FakeUpstream, store: str, log: Path, *flags: str
) -> Iterator[tuple[Proxy, subprocess.Popen[bytes]]]:
    """``contextledger serve`` on the shared store with a short lease, and its process (to kill or pause)."""
    port = free_port()
    command = [sys.executable, "-m", "contextledger.cli", "serve", "--port", str(port), "--no-facts"]
    command += ["--upstream", upstream.base_url, "--store", store]
    command += ["--lock-lease", str(LEASE), *flags]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    try:
        root = f"http://127.0.0.1:{port}"
        _wait_until_up(root + "/healthz", process, log)
        yield Proxy(root + "/v1", root, log), process
    finally:
        process.send_signal(signal.SIGCONT)
        _stop(process)


def turn(proxy: Proxy, session: str, text: str, model: str = "fake", stream: bool = False) -> tuple[int, Any]:
    body = {"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]}
    headers = {"X-Contextledger-Session": session}
    return proxy.call("POST", "/v1/chat/completions", body, KEY, headers, timeout=STREAM + 60)


def events(text: str) -> list[Any]:
    """The data of each server-sent event in a streamed answer (``[DONE]`` as the string)."""
    lines = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def wait_for_upstream(upstream: FakeUpstream, text: str) -> None:
    """Until the upstream has been sent the turn asking ``text`` (its proxy then holds the session)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for record in upstream.received():
            messages = (record.get("body") or {}).get("messages")
            last = messages[-1] if isinstance(messages, list) and messages else None
            if isinstance(last, dict) and last.get("content") == text:
                return
        time.sleep(0.02)
    raise AssertionError(f"the upstream was never sent {text!r}")


def stored(proxy: Proxy, session: str) -> list[str]:
    return [f"{m['role']}:{m['content']}" for m in proxy.messages(session, KEY)]


def test_a_stream_lasting_ten_leases_keeps_its_session_and_the_waiting_turn_runs_after_it(
    fake_upstream: FakeUpstream, shared_store: str, tmp_path: Path
) -> None:
    # Each text names its session: the upstream is shared by the tests, and a turn found there by its
    # text must be this test's own, not an earlier parameter's.
    session = f"lease-{uuid.uuid4().hex[:8]}"
    first, second = f"first, streamed slowly ({session})", f"second, waiting ({session})"
    with (
        running(fake_upstream, shared_store, tmp_path / "a.log") as (a, _),
        running(fake_upstream, shared_store, tmp_path / "b.log", "--lock-timeout", f"{STREAM + 40:g}") as (b, _),
        running(fake_upstream, shared_store, tmp_path / "c.log", "--lock-timeout", "3") as (c, _),
    ):
        a.create_session(session, KEY)
        answers: dict[str, tuple[int, Any, float]] = {}

        def ask(name: str, proxy: Proxy, text: str, model: str = "fake", stream: bool = False) -> None:
            status, body = turn(proxy, session, text, model, stream)
            answers[name] = (status, body, time.monotonic())

        started = time.monotonic()
        streaming = threading.Thread(target=ask, args=("a", a, first, f"fake-drip-{STREAM:g}", True))
        streaming.start()
        wait_for_upstream(fake_upstream, first)
        time.sleep(2 * LEASE)  # a lease the stream would have lost without renewal
        impatient = threading.Thread(target=ask, args=("c", c, "third, impatient"))
        asked = time.monotonic()
        impatient.start()
        ask("b", b, second)
        streaming.join(timeout=STREAM + 60)
        impatient.join(timeout=STREAM + 60)
        history = stored(a, session)

    a_status, a_body, a_done = answers["a"]
    b_status, b_body, b_done = answers["b"]
    c_status, c_body, c_done = answers["c"]
    assert a_status == 200
    assert events(a_body)[-1] == "[DONE]", a_body
    assert a_done - started >= STREAM
    assert b_status == 200, b_body
    assert b_body["choices"][0]["message"]["content"] == f"echo: {second}"
    assert b_done > a_done  # it waited for the stream: never ran beside it
    assert c_status == 409
    assert assert_openai_error(c_body, "session_busy")["type"] == "conflict_error"
    assert 3 <= c_done - asked < 3 + 2 * LEASE
    # The waiting turn was sent with the stream's turn before it, and both are stored in the order they ended.
    bodies = [record.get("body") or {} for record in fake_upstream.received()]
    sent = next(body["messages"] for body in bodies if body.get("messages", [{}])[-1].get("content") == second)
    assert [m["content"] for m in sent if m["role"] != "system"] == [first, f"echo: {first}", second]
    assert history == [
        f"user:{first}",
        f"assistant:echo: {first}",
        f"user:{second}",
        f"assistant:echo: {second}",
    ]
    print(
        f"\nstream {a_done - started:.1f}s with a {LEASE:g}s lease; the second proxy's turn waited "
        f"{b_done - asked:.1f}s and ended {b_done - a_done:.2f}s after the stream; 409 after {c_done - asked:.1f}s"
    )


def test_a_killed_holder_frees_its_session_within_one_lease(
    fake_upstream: FakeUpstream, shared_store: str, tmp_path: Path
) -> None:
    session = f"lease-{uuid.uuid4().hex[:8]}"
    doomed, after = f"turn of a proxy about to die ({session})", f"turn after the kill ({session})"
    with (
        running(fake_upstream, shared_store, tmp_path / "a.log") as (a, process),
        running(fake_upstream, shared_store, tmp_path / "b.log", "--lock-timeout", "30") as (b, _),
    ):
        a.create_session(session, KEY)

        def ask_through_the_kill() -> None:
            with contextlib.suppress(OSError, http.client.HTTPException):  # the proxy dies mid-answer
                turn(a, session, doomed, f"fake-drip-{STREAM:g}", stream=True)

        streaming = threading.Thread(target=ask_through_the_kill, daemon=True)
        streaming.start()
        wait_for_upstream(fake_upstream, doomed)
        time.sleep(LEASE)  # renewed at least twice by now
        os.kill(process.pid, signal.SIGKILL)
        killed = time.monotonic()
        status, body = turn(b, session, after)
        released = time.monotonic() - killed
        streaming.join(timeout=30)
        assert status == 200, body
        assert body["choices"][0]["message"]["content"] == f"echo: {after}"
        assert released < LEASE + 1.5
        assert stored(b, session) == [f"user:{after}", f"assistant:echo: {after}"]
    print(f"\nthe session was free again {released:.2f}s after its holder was killed ({LEASE:g}s lease)")


def test_a_holder_paused_past_its_lease_cannot_store_its_turn_beside_the_next_holder(
    fake_upstream: FakeUpstream, shared_store: str, tmp_path: Path
) -> None:
    # The pause must fall while the proxy holds the session: wait_for_upstream finds this very turn
    # (a text of an earlier parameter's run would let the pause fall before the lock was taken).
    session = f"lease-{uuid.uuid4().hex[:8]}"
    paused, meanwhile = f"turn of a paused proxy ({session})", f"turn meanwhile ({session})"
    with (
        running(fake_upstream, shared_store, tmp_path / "a.log") as (a, process),
        running(fake_upstream, shared_store, tmp_path / "b.log", "--lock-timeout", "30") as (b, _),
    ):
        a.create_session(session, KEY)
        answers: list[tuple[int, Any]] = []
        streaming = threading.Thread(
            target=lambda: answers.append(turn(a, session, paused, f"fake-drip-{3 * LEASE:g}", stream=True))
        )
        streaming.start()
        wait_for_upstream(fake_upstream, paused)
        process.send_signal(signal.SIGSTOP)  # a pause longer than the lease: it cannot renew
        try:
            status, body = turn(b, session, meanwhile)
        finally:
            process.send_signal(signal.SIGCONT)
        streaming.join(timeout=30)
        assert status == 200, body
        [(a_status, a_body)] = answers
        assert a_status == 200  # the stream had begun; its end says the turn was not stored
        last = events(a_body)[-1]
        assert last != "[DONE]"
        assert assert_openai_error(last, "session_lock_lost")["type"] == "conflict_error"
        assert stored(b, session) == [f"user:{meanwhile}", f"assistant:echo: {meanwhile}"]
        assert "ran out and another holder may have taken it" in a.log.read_text()
