"""The proxy killed (SIGKILL) while a session turn is in flight, restarted on the same store, and sent
the last turns again with their Idempotency-Keys: every turn is stored once, through the one turn
writer, and a retained history stays reduced and starts at a turn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.history.support import free_port
from tests.serve.conftest import ROOT, FakeUpstream, Proxy, _wait_until_up

from contextledger.history import SQLiteHistoryProvider
from contextledger.serve._sessions import session_key
from contextledger.serve._tenants import tenant_of

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

KEY = "sk-proxy-kill-tenant"
SESSION = "killed"


def start(upstream: FakeUpstream, store: Path, log: Path, *retain: str) -> tuple[Proxy, subprocess.Popen[bytes]]:
    port = free_port()
    command = [sys.executable, "-m", "contextledger.cli", "serve", "--port", str(port), "--no-facts"]
    command += ["--upstream", upstream.base_url, "--store", f"sqlite:{store}", *retain]
    with log.open("ab") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    _wait_until_up(root + "/healthz", process, log)
    return Proxy(root + "/v1", root, log), process


def ask(proxy: Proxy, number: int) -> tuple[int, Any]:
    body = {"model": "fake", "messages": [{"role": "user", "content": f"question {number}"}]}
    headers = {"X-Contextledger-Session": SESSION, "Idempotency-Key": f"turn-{number}"}
    return proxy.call("POST", "/v1/chat/completions", body, KEY, headers)


def ask_through_a_kill(proxy: Proxy, number: int) -> None:
    with contextlib.suppress(OSError):  # the proxy may die before it answers
        ask(proxy, number)


@pytest.mark.parametrize("retain", [False, True], ids=["whole", "retained"])
def test_a_proxy_killed_mid_turn_and_restarted_stores_every_turn_once(
    fake_upstream: FakeUpstream, tmp_path: Path, retain: bool
) -> None:
    store, log = tmp_path / "sessions.db", tmp_path / "proxy.log"
    window = ("--retain-param", "keep_last_groups=3", "--retain-param", "stable_step=1")
    flags = ("--retain-strategy", "sliding-window", *window) if retain else ()
    proxy, process = start(fake_upstream, store, log, *flags)
    try:
        proxy.create_session(SESSION, KEY)
        for number in range(15):
            assert ask(proxy, number)[0] == 200
        in_flight = threading.Thread(target=ask_through_a_kill, args=(proxy, 15), daemon=True)
        in_flight.start()
        time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)  # the sixteenth turn is somewhere on its way
        process.wait()
        in_flight.join(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    proxy, process = start(fake_upstream, store, log, *flags)
    try:
        for number in range(12, 20):  # acknowledged turns, the one in flight, and new ones
            status, body = ask(proxy, number)
            assert status == 200, body
            assert body["choices"][0]["message"]["content"] == f"echo: question {number}"
    finally:
        process.terminate()
        process.wait(timeout=10)

    async def read() -> None:
        key = session_key(tenant_of({"authorization": f"Bearer {KEY}"}, trust_tenant_header=False), SESSION)
        history = SQLiteHistoryProvider(store, source_id="serve")
        try:
            stored = [f"{m.role}:{m.text}" for m in await history.load(key)]
            recorded = sorted(turn.turn_id for turn in await history.load_turns(key))
        finally:
            await history.close()
        assert recorded == sorted(f"turn-{number}" for number in range(20))
        if retain:
            assert stored == ["user:question 19", "assistant:echo: question 19"]
        else:
            expected = [f"{role}question {n}" for n in range(20) for role in ("user:", "assistant:echo: ")]
            assert stored == expected

    asyncio.run(read())
