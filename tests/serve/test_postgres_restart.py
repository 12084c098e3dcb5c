"""A Postgres restart under a running ``contextledger serve``: the pooled connections it killed are
found dead when they are checked out and replaced, so the next session turns answer 200, not
503; and a 503 while the server is down says what happened in the client's terms, never the
database's address or the session's internal key."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.postgres_server import PostgresServer, _answers, _run_as, _server_user, _stop, started_postgres
from tests.serve.conftest import Proxy, StartProxy

from contextledger.serve._sessions import session_key
from contextledger.serve._tenants import tenant_of

with try_import("serve") as serve_extra:
    import httpx  # noqa: F401

pytestmark = [serve_extra.skip, pytest.mark.postgres]

KEY = "sk-restart-0123456789"
SESSION = {"X-Contextledger-Session": "restarted"}


class RestartablePostgres:
    """A Postgres of this module's own, stopped and started again on the same data and port."""

    def __init__(self, server: PostgresServer, process: subprocess.Popen[bytes]) -> None:
        self.server = server
        self.process = process
        self.command = list(process.args)  # type: ignore[arg-type]

    def stop(self) -> None:
        _stop(self.process)

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **_run_as(_server_user()),  # type: ignore[call-overload]
        )
        deadline = time.monotonic() + 30
        while not _answers(self.server.port):
            assert time.monotonic() < deadline, "Postgres did not start again"
            time.sleep(0.05)


@pytest.fixture(scope="module")
def postgres() -> Iterator[RestartablePostgres]:
    with started_postgres() as (server, process):
        restartable = RestartablePostgres(server, process)
        try:
            yield restartable
        finally:
            restartable.stop()


def turn(proxy: Proxy, text: str) -> tuple[int, Any]:
    body = {"model": "fake", "messages": [{"role": "user", "content": text}]}
    return proxy.call("POST", "/v1/chat/completions", body, KEY, SESSION)


def test_the_turns_after_a_restart_answer_200(postgres: RestartablePostgres, start_proxy: StartProxy) -> None:
    with start_proxy("--store", postgres.server.fresh_database()) as proxy:
        proxy.create_session("restarted", KEY)
        for number in range(4):  # the pools fill with connections
            assert turn(proxy, f"before {number}")[0] == 200
        postgres.stop()
        postgres.start()
        after = [turn(proxy, f"after {number}") for number in range(4)]
        assert [status for status, _ in after] == [200] * 4, after
        assert len(proxy.messages("restarted", KEY)) == 16


def test_a_503_names_neither_the_database_nor_the_internal_key(
    postgres: RestartablePostgres, start_proxy: StartProxy
) -> None:
    url = postgres.server.fresh_database()
    internal = session_key(tenant_of({"authorization": f"Bearer {KEY}"}, trust_tenant_header=False), "restarted")
    with start_proxy("--store", url) as proxy:
        proxy.create_session("restarted", KEY)
        assert turn(proxy, "before")[0] == 200
        postgres.stop()
        try:
            answers = [turn(proxy, "while down"), proxy.call("POST", "/v1/contextledger/sessions", {"id": "new"}, KEY)]
            answers.append(proxy.get("/v1/contextledger/sessions/restarted/messages", KEY))
        finally:
            postgres.start()
        for status, body in answers:
            assert status == 503, body
            message = body["error"]["message"]
            assert body["error"]["code"] == "store_unavailable"
            for secret in (str(postgres.server.port), "127.0.0.1", internal, url):
                assert secret not in message, message
            assert "log" in message, "the operator is told where the details are"
        assert "127.0.0.1" in proxy.log.read_text(), "the proxy's log keeps the details"
