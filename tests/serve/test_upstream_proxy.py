"""The proxy reaches its upstream through the HTTP proxy the environment names, as HTTP clients
do: ``HTTP_PROXY`` (and ``HTTPS_PROXY``) is used, ``NO_PROXY`` bypasses it.

The environment is read once, when the proxy starts.  The forward proxy here is a small server on
127.0.0.1 that records the request line it is sent (an absolute URL, as a client speaks to a
forward proxy) and answers a chat completion itself.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from tests.history.support import free_port
from tests.serve.conftest import FakeUpstream, StartProxy

KEY = "sk-through-a-proxy"
_REPLY = json.dumps(
    {
        "id": "chatcmpl-proxied",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "fake",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "via the proxy"}, "finish_reason": "stop"}
        ],
    }
).encode()


class ForwardProxy:
    """Records each request line; answers every request with the same chat completion."""

    def __init__(self) -> None:
        self.port = free_port()
        self.lines: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                self.lines.append(lines[0])
                length = next(
                    (int(line.partition(":")[2]) for line in lines if line.lower().startswith("content-length:")), 0
                )
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                    + str(len(_REPLY)).encode()
                    + b"\r\n\r\n"
                    + _REPLY
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._started.set()
        self._loop.run_forever()
        server.close()

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def forward_proxy() -> Iterator[ForwardProxy]:
    with ForwardProxy() as proxy:
        yield proxy


def _ask(proxy_call: object) -> tuple[int, object]:
    assert callable(proxy_call)
    body = {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}
    result: tuple[int, object] = proxy_call("POST", "/v1/chat/completions", body, KEY)
    return result


def test_the_upstream_is_reached_through_the_proxy_the_environment_names(
    start_proxy: StartProxy, forward_proxy: ForwardProxy
) -> None:
    upstream = "http://upstream.invalid:9/v1"  # reachable only through the forward proxy
    env = {"HTTP_PROXY": f"http://127.0.0.1:{forward_proxy.port}", "NO_PROXY": "", "no_proxy": ""}
    with start_proxy(upstream=upstream, env=env) as proxy:
        status, answer = _ask(proxy.call)
        assert status == 200, answer
        assert isinstance(answer, dict)
        assert answer["choices"][0]["message"]["content"] == "via the proxy"
    assert forward_proxy.lines == ["POST http://upstream.invalid:9/v1/chat/completions HTTP/1.1"]


def test_no_proxy_sends_the_upstream_request_directly(
    start_proxy: StartProxy, forward_proxy: ForwardProxy, fake_upstream: FakeUpstream
) -> None:
    env = {"HTTP_PROXY": f"http://127.0.0.1:{forward_proxy.port}", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    with start_proxy(env=env) as proxy:
        status, answer = _ask(proxy.call)
        assert status == 200, answer
        assert isinstance(answer, dict)
        assert answer["choices"][0]["message"]["content"] != "via the proxy"
    assert forward_proxy.lines == []
