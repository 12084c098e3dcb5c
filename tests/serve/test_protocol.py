"""HTTP around the API, through a real proxy: keep-alive connections survive every error, every
error is in OpenAI's shape, the upstream's rate-limit headers reach the client, and slow
clients cannot hold connections."""

from __future__ import annotations

import http.client
import json
import socket
import sys
import time
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


def post_chat(
    connection: Connection, model: str, extra: dict[str, str], stream: bool = False
) -> tuple[int, dict[str, str], Any]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}).encode()
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json", **extra}
    connection.http.request("POST", "/v1/chat/completions", body, headers)
    reply = connection.http.getresponse()
    raw = reply.read()
    try:
        decoded: Any = json.loads(raw)
    except ValueError:
        decoded = raw.decode()
    return reply.status, {k.lower(): v for k, v in reply.getheaders()}, decoded


@pytest.mark.parametrize("session", [False, True])
def test_the_upstreams_retry_and_rate_limit_headers_reach_the_client(start_proxy: StartProxy, session: bool) -> None:
    with start_proxy() as proxy:
        connection = Connection(proxy.root)
        extra: dict[str, str] = {}
        if session:
            proxy.create_session("limited", KEY)
            extra = {"X-Contextledger-Session": "limited"}
        for model, status in (("fake-429", 429), ("fake-503", 503)):
            for stream in (False, True):
                got, headers, body = post_chat(connection, model, extra, stream)
                assert got == status, body
                assert_openai_error(body, "rate_limit_exceeded")
                assert headers["retry-after"] == "7"
                assert headers["retry-after-ms"] == "7000"
                assert headers["x-ratelimit-remaining-requests"] == "0"
                assert headers["x-request-id"].startswith("req_")
                assert_next_request_served(connection, headers)
        for stream in (False, True):  # an answer carries the upstream's request id and limits too
            got, headers, body = post_chat(connection, "fake", extra, stream)
            assert got == 200, body
            assert headers["x-request-id"].startswith("req_")
            assert headers["x-ratelimit-limit-requests"] == "100"
        connection.close()


def raw_connection(proxy: Proxy) -> socket.socket:
    host, port = proxy.root.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)), timeout=10)
    return connection


def read_answer(connection: socket.socket) -> tuple[int, dict[str, str], Any]:
    """The whole answer on a connection the server closes after it (empty status 0 if it said nothing)."""
    raw = b""
    while chunk := connection.recv(65536):
        raw += chunk
    if not raw:
        return 0, {}, None
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, json.loads(body)


def test_a_client_trickling_its_headers_gets_408_and_is_disconnected(start_proxy: StartProxy) -> None:
    with start_proxy("--read-timeout", "1.5") as proxy:
        connection = raw_connection(proxy)
        started = time.monotonic()
        request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\nx-slow: "
        for byte in request:
            try:
                connection.send(bytes([byte]))
            except OSError:
                break  # the server closed it: what the test wants
            time.sleep(0.05)
        status, headers, body = read_answer(connection)
        waited = time.monotonic() - started
        assert status == 408, body
        assert_openai_error(body, "request_timeout")
        assert headers["connection"] == "close"
        assert 1.4 < waited < 5, waited
        connection.close()
        silent = raw_connection(proxy)  # one that connects and says nothing is closed too
        assert read_answer(silent)[0] == 408
        silent.close()
        assert Connection(proxy.root).call("GET", "/healthz")[0] == 200  # and the proxy serves on


def test_a_body_that_never_finishes_gets_408(start_proxy: StartProxy) -> None:
    with start_proxy("--read-timeout", "1.5") as proxy:
        connection = raw_connection(proxy)
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {KEY}\r\ncontent-length: 1000\r\n\r\n"
        )
        connection.sendall(head.encode() + b'{"model": "fake", "mess')
        started = time.monotonic()
        status, headers, body = read_answer(connection)
        assert status == 408, body
        assert_openai_error(body, "request_timeout")
        assert headers["connection"] == "close"
        assert time.monotonic() - started < 5
        connection.close()


def test_connections_past_the_limit_are_refused_and_the_others_served(start_proxy: StartProxy) -> None:
    with start_proxy("--max-connections", "4", "--read-timeout", "20") as proxy:
        held = [Connection(proxy.root) for _ in range(4)]
        extra = raw_connection(proxy)
        status, _, body = read_answer(extra)
        assert status == 503, body
        assert_openai_error(body, "too_many_connections")
        extra.close()
        for connection in held:  # the connections already open are served as before
            assert connection.call("GET", "/healthz")[0] == 200
        held.pop().close()
        time.sleep(0.2)
        assert Connection(proxy.root).call("GET", "/healthz")[0] == 200  # a place freed is taken
        for connection in held:
            connection.close()
