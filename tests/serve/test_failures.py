"""Bad input and failing upstreams: clear errors in OpenAI's shape, nothing stored, nothing admitted,
and no key ever written to the log or the metrics."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from tests.history.support import free_port
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

with try_import("openai") as openai_extra:
    import openai

pytestmark = openai_extra.skip

KEY = "sk-failure-tenant-7f3a9c"
UPSTREAM_KEY = "sk-upstream-configured-55aa"
SESSION = {"X-Contextledger-Session": "fragile"}


def turn(model: str, text: str = "module=Billing", **extra: object) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def assert_openai_error(body: object, code: str | None = None) -> dict[str, object]:
    assert isinstance(body, dict), body
    assert set(body) == {"error"}, body
    error: dict[str, object] = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str)
    assert error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error


def unchanged(proxy: Proxy) -> None:
    """The session still holds exactly its one good turn and its one fact."""
    messages = proxy.messages("fragile", KEY)
    assert [m["content"] for m in messages] == ["customer=Acme", "echo: customer=Acme"]
    assert proxy.facts("fragile", KEY) == {"customer": "Acme"}


@pytest.fixture
def proxy(start_proxy: StartProxy) -> Iterator[Proxy]:
    with start_proxy("--max-body-bytes", "20000", "--upstream-timeout", "1.5") as running:
        running.create_session("fragile", KEY)
        status, body = running.call("POST", "/v1/chat/completions", turn("fake", "customer=Acme"), KEY, SESSION)
        assert status == 200, body
        yield running


def test_bad_requests_are_refused_in_openai_shape_and_store_nothing(proxy: Proxy, fake_upstream: FakeUpstream) -> None:
    received = len(fake_upstream.received())
    status, body = proxy.call("POST", "/v1/chat/completions", turn("fake", "x" * 30_000), KEY, SESSION)
    assert status == 413
    assert_openai_error(body, "request_too_large")
    status, body = proxy.call("POST", "/v1/chat/completions", b'{"model": "fake", "messages": [', KEY, SESSION)
    assert status == 400
    assert_openai_error(body, "invalid_json")
    status, body = proxy.call("POST", "/v1/chat/completions", b'{"model": "fake", "messages": [', KEY)
    assert status == 400  # stateless mode answers the same way
    assert_openai_error(body, "invalid_json")
    bad_role = {"model": "fake", "messages": [{"role": "wizard", "content": "hi"}]}
    status, body = proxy.call("POST", "/v1/chat/completions", bad_role, KEY, SESSION)
    assert status == 400
    assert "wizard" in str(assert_openai_error(body, "invalid_messages")["message"])
    status, body = proxy.call("POST", "/v1/chat/completions", {"model": "fake", "messages": []}, KEY)
    assert status == 400
    status, body = proxy.call("POST", "/v1/chat/completions", turn("fake"), KEY, {"X-Contextledger-Session": "gone"})
    assert status == 404
    assert_openai_error(body, "session_not_found")
    assert len(fake_upstream.received()) == received  # none of them reached the upstream
    unchanged(proxy)


@pytest.mark.parametrize("stream", [False, True])
def test_failing_upstreams_are_reported_and_nothing_is_stored(
    proxy: Proxy, fake_upstream: FakeUpstream, stream: bool
) -> None:
    expected = {"fake-500": (500, None), "fake-slow": (504, "upstream_timeout"), "fake-garbage": (502, None)}
    if stream:
        expected["fake-broken"] = (502, "upstream_stream_broken")
    for model, (status_wanted, code) in expected.items():
        status, body = proxy.call("POST", "/v1/chat/completions", turn(model, stream=stream), KEY, SESSION)
        if stream and model in ("fake-broken", "fake-garbage"):
            # The stream had begun (HTTP 200): the failure arrives as an error event, and no [DONE].
            assert status == 200
            assert "data: [DONE]" not in body
            assert '"error"' in body
            assert code is None or code in body
        else:
            assert status == status_wanted, (model, body)
            error = assert_openai_error(body, code)
            if model == "fake-500":
                assert error["message"] == "the fake model fell over"  # the upstream's own error, passed through
        unchanged(proxy)


def test_the_sdk_sees_a_broken_stream_as_an_error(proxy: Proxy) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0, default_headers=SESSION)
    with pytest.raises(openai.APIError, match="nothing was stored"):
        for _ in client.chat.completions.create(
            model="fake-broken", messages=[{"role": "user", "content": "priority=low"}], stream=True
        ):
            pass
    unchanged(proxy)


def test_keys_never_reach_the_log_or_the_metrics(start_proxy: StartProxy, fake_upstream: FakeUpstream) -> None:
    env = {"CONTEXTLEDGER_UPSTREAM_KEY": UPSTREAM_KEY}
    with start_proxy(env=env) as proxy:
        proxy.create_session("fragile", KEY)
        for model in ("fake", "fake-500", "fake-garbage"):
            proxy.call("POST", "/v1/chat/completions", turn(model), KEY, SESSION)
            proxy.call("POST", "/v1/chat/completions", turn(model), KEY)
        proxy.call(
            "POST", "/v1/chat/completions", turn("fake"), "sk-unknown-tenant-key", {"X-Contextledger-Session": "x"}
        )
        _, metrics = proxy.get("/metrics")
        received = fake_upstream.received()[-1]
    log = proxy.log.read_text(errors="replace")
    assert "POST /v1/chat/completions" in log  # the log is written (the checks below could fail)
    assert "contextledger_requests_total" in metrics
    for secret in (KEY, UPSTREAM_KEY, "sk-unknown-tenant-key"):
        assert secret not in log
        assert secret not in metrics
    assert received["authorization"] == f"Bearer {UPSTREAM_KEY}"  # the configured key replaced the client's


def test_an_unreachable_store_or_upstream_is_an_openai_shaped_error(start_proxy: StartProxy) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with start_proxy("--store", dead, upstream=f"http://127.0.0.1:{free_port()}/v1") as proxy:
        status, body = proxy.call("POST", "/v1/contextledger/sessions", {"id": "s"}, KEY)
        assert status == 503
        assert_openai_error(body, "store_unavailable")
        status, body = proxy.call("POST", "/v1/chat/completions", turn("fake"), KEY, {"X-Contextledger-Session": "s"})
        assert status == 503
        assert_openai_error(body, "store_unavailable")
        status, body = proxy.call("POST", "/v1/chat/completions", turn("fake"), KEY)
        assert status == 502
        assert_openai_error(body, "upstream_unreachable")
        status, body = proxy.get("/v1/models", KEY)
        assert status == 502


class _ClosingUpstream:
    """A real HTTP upstream on 127.0.0.1 that lets connections go the ways real ones do: ``expire``
    answers one request per connection and closes the connection when the next request arrives
    on it (a keep-alive running out as the request goes out), ``drop`` closes every connection on
    its request, ``break`` sends the answer's status and half its body, then closes."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.requests = 0
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.port = free_port()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.lower().split(b"\r\n")
                length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length")), 0)
                await reader.readexactly(length)
                self.requests += 1
                if self.behaviour == "drop" or (self.behaviour == "expire" and answered):
                    break
                message = {"role": "assistant", "content": "ok"}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                reply = json.dumps({"id": "c", "object": "chat.completion", "created": 1, "choices": [choice]}).encode()
                head_out = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(reply)}\r\n\r\n"
                if self.behaviour == "break":
                    writer.write(head_out.encode() + reply[: len(reply) // 2])
                    await writer.drain()
                    break
                writer.write(head_out.encode() + reply)
                await writer.drain()
                answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.mark.parametrize("behaviour", ["expire", "drop", "break"])
def test_a_connection_the_upstream_closes_before_answering_is_tried_once_more(
    start_proxy: StartProxy, behaviour: str
) -> None:
    """A pooled connection the upstream let go as a request went out on it is tried again on a new
    one, once: the client sees the answer.  An upstream that drops every connection is tried
    twice, not more (502), and an answer that started and broke is never asked for again."""
    upstream = _ClosingUpstream(behaviour)
    try:
        with start_proxy("--strategy", "none", upstream=f"http://127.0.0.1:{upstream.port}/v1") as proxy:
            for sent in range(1, 4):
                status, body = proxy.call("POST", "/v1/chat/completions", turn("m"), KEY)
                if behaviour == "expire":
                    assert status == 200, body
                    # The second and third requests each went out on the pooled connection first.
                    assert (upstream.requests, upstream.connections) == (2 * sent - 1, sent)
                else:
                    assert status == 502, body
                    assert_openai_error(body)
                    assert upstream.requests == (2 if behaviour == "drop" else 1) * sent
    finally:
        upstream.close()
