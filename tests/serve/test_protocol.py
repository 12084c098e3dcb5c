"""HTTP around the API, through a real proxy: keep-alive connections survive every error, every
error is in OpenAI's shape, the upstream's rate-limit headers reach the client, and slow
clients cannot hold connections."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.history.support import free_port
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy, _process
from tests.serve.test_failures import assert_openai_error
from tests.serve.test_hostile_input import HOSTILE

KEY = "sk-protocol-tenant-3"

# A real ``contextledger serve`` with one fault injected: reading a session's summary raises, as
# a bug would, so the proxy's answer to an unexpected failure can be tried on a live connection.
FAULTY = """
import sys
from contextledger.serve._app import Proxy

async def fault(self, request):
    raise RuntimeError("an injected fault")

Proxy.session_info = fault
from contextledger.cli import main
sys.exit(main(sys.argv[1:]))
"""


class Connection:
    """One keep-alive HTTP/1.1 connection to the proxy, which notices when it was closed."""

    def __init__(self, root: str) -> None:
        host, port = root.removeprefix("http://").split(":")
        self.http = http.client.HTTPConnection(host, int(port), timeout=30)
        self.http.auto_open = False  # a connection the server closed is an error, not silently reopened
        self.http.connect()

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict[str, str], Any]:
        headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
        self.http.request(method, path, body, headers)
        reply = self.http.getresponse()
        raw = reply.read()
        try:
            decoded: Any = json.loads(raw)
        except ValueError:
            decoded = raw.decode(errors="replace")
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, decoded

    def close(self) -> None:
        self.http.close()


def assert_next_request_served(connection: Connection, headers: dict[str, str]) -> None:
    """After an answer, the same connection serves the next request, unless the answer said close."""
    if headers.get("connection", "").lower() == "close":
        return
    status, _, body = connection.call("GET", "/healthz")
    assert status == 200, body


@pytest.fixture
def faulty_proxy(fake_upstream: FakeUpstream, tmp_path: Path) -> Iterator[Proxy]:
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", FAULTY, "serve", "--port", str(port), "--upstream", fake_upstream.base_url]
    command += ["--store", f"sqlite:{tmp_path / 'sessions.db'}"]
    log = tmp_path / "faulty.log"
    with _process(command, root + "/healthz", log):
        yield Proxy(root + "/v1", root, log)


def test_an_unexpected_failure_is_a_500_in_openai_shape_and_the_connection_serves_on(faulty_proxy: Proxy) -> None:
    connection = Connection(faulty_proxy.root)
    for _ in range(3):
        status, headers, body = connection.call("GET", "/v1/contextledger/sessions/anything")
        assert status == 500
        assert_openai_error(body)
        assert "injected" not in str(body)  # the details are in the log, not in the answer
        assert_next_request_served(connection, headers)
    connection.close()
    assert "RuntimeError: an injected fault" in faulty_proxy.log.read_text()


@pytest.mark.parametrize("session", [False, True])
def test_no_refused_body_breaks_the_keep_alive_connection(start_proxy: StartProxy, session: bool) -> None:
    with start_proxy() as proxy:
        connection = Connection(proxy.root)
        if session:
            proxy.create_session("kept", KEY)
            connection.http.putheader  # noqa: B018  (headers go per request below)
        for case, body in sorted(HOSTILE.items()):
            path = "/v1/chat/completions"
            extra = {"X-Contextledger-Session": "kept"} if session else {}
            connection.http.request(
                "POST", path, body, {"authorization": f"Bearer {KEY}", "content-type": "application/json", **extra}
            )
            reply = connection.http.getresponse()
            reply.read()
            assert reply.status < 500, case
            assert_next_request_served(connection, {k.lower(): v for k, v in reply.getheaders()})
        connection.close()


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/nothing-here", 404),
        ("POST", "/v2/chat/completions", 404),
        ("GET", "/v1/chat/completions", 405),
        ("PUT", "/v1/models", 405),
        ("DELETE", "/healthz", 405),
    ],
)
def test_unknown_paths_and_wrong_methods_answer_json_errors(
    start_proxy: StartProxy, method: str, path: str, status: int
) -> None:
    with start_proxy() as proxy:
        connection = Connection(proxy.root)
        answer_status, headers, body = connection.call(method, path, b"{}" if method != "GET" else None)
        assert answer_status == status
        error = assert_openai_error(body)
        assert path in str(error["message"])
        if status == 405:
            assert "allow" in headers
        assert_next_request_served(connection, headers)
        connection.close()
