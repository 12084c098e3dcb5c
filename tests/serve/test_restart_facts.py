"""Facts outlive the proxy: on the default SQLite store they are kept in the file with the
history, so a restarted proxy (even after SIGKILL) tells the model what the user declared; and a
second proxy on the same file is refused, since its facts and locks would drift from the first's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.history.support import RedisServer, free_port
from tests.serve.conftest import ROOT, FakeUpstream, Proxy, StartProxy

KEY = "sk-restart-tenant-2"
SESSION = {"X-Contextledger-Session": "kept"}


def say(proxy: Proxy, text: str) -> None:
    body = {"model": "fake", "messages": [{"role": "user", "content": text}]}
    status, answer = proxy.call("POST", "/v1/chat/completions", body, KEY, SESSION)
    assert status == 200, answer


def block_sent(fake_upstream: FakeUpstream) -> str:
    return next(str(m["content"]) for m in fake_upstream.last_body()["messages"] if "<user_facts>" in str(m["content"]))


def serving_pid(proxy: Proxy) -> int:
    from tests.serve.test_memory import proxy_pid  # noqa: PLC0415

    return proxy_pid(proxy)


def test_facts_survive_a_restart_and_a_sigkill_on_sqlite(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    store = ("--store", f"sqlite:{tmp_path / 'facts.db'}")
    with start_proxy(*store) as proxy:
        proxy.create_session("kept", KEY)
        say(proxy, "module=Billing; database=PostgreSQL")
    with start_proxy(*store) as proxy:  # stopped cleanly, started again
        say(proxy, "Which database?")
        assert 'database = "PostgreSQL"' in block_sent(fake_upstream)
        assert proxy.facts("kept", KEY) == {"module": "Billing", "database": "PostgreSQL"}
        say(proxy, "database=SQL Server 2022")
        os.kill(serving_pid(proxy), signal.SIGKILL)  # no chance to close anything
    with start_proxy(*store) as proxy:  # the lock file's hold died with the process
        say(proxy, "And now?")
        block = block_sent(fake_upstream)
        assert 'database = "SQL Server 2022"' in block
        assert "PostgreSQL" not in block
        status, report = proxy.call("POST", "/v1/contextledger/sessions/kept/forget", {"key": "module"}, KEY)
        assert status == 200, report
    with start_proxy(*store) as proxy:  # a forget is kept too
        assert proxy.facts("kept", KEY) == {"database": "SQL Server 2022"}


def test_facts_survive_a_restart_on_redis(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    store = ("--store", f"redis://127.0.0.1:{redis_server.port}/12")
    with start_proxy(*store) as proxy:
        proxy.create_session("kept", KEY)
        say(proxy, "module=Reporting")
    with start_proxy(*store) as proxy:
        say(proxy, "Which module?")
        assert 'module = "Reporting"' in block_sent(fake_upstream)


def test_a_second_proxy_on_the_same_sqlite_file_is_refused(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    path = tmp_path / "shared.db"
    with start_proxy("--store", f"sqlite:{path}"):
        command = [sys.executable, "-m", "contextledger.cli", "serve", "--port", str(free_port())]
        command += ["--upstream", fake_upstream.base_url, "--store", f"sqlite:{path}"]
        second = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert "another contextledger serve already uses the SQLite file" in second.stderr
        assert str(path) in second.stderr
        assert "Traceback" not in second.stderr
