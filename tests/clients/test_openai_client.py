"""OpenAIChatClient against a real HTTP server on 127.0.0.1, so the SDK's whole request path is exercised."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from contextledger.clients import ChatResponse, Usage
from contextledger.exceptions import (
    ConfigurationError,
    MissingExtraError,
    ModelConnectionError,
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
)
from contextledger.messages import FunctionCallContent, Message, to_openai
from tests.optional_imports import try_import

with try_import("openai") as openai_extra:
    import openai

    from contextledger.clients.openai import OpenAIChatClient

pytestmark = openai_extra.skip

MODEL = "test-model"


@dataclass
class Reply:
    """One scripted answer: status, body (a dict is sent as JSON), and an optional delay before sending it."""

    body: dict[str, Any] | str
    status: int = 200
    delay: float = 0.0


@dataclass
class FakeServer:
    """Serves scripted replies in order (the last one repeats) and records every request body."""

    url: str = ""
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *replies: Reply) -> None:
        self.replies = list(replies)

    def record(self, path: str, body: dict[str, Any]) -> Reply:
        """Record a request and pick its reply: the n-th request gets the n-th reply, or the last one."""
        with self.lock:
            self.paths.append(path)
            self.requests.append(body)
            return self.replies[min(len(self.requests), len(self.replies)) - 1]


def completion(
    content: str | None = "hello",
    *,
    usage: dict[str, Any] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


@pytest.fixture
def server() -> Iterator[FakeServer]:
    state = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            reply = state.record(self.path, json.loads(raw))
            if reply.delay:
                time.sleep(reply.delay)
            payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            data = payload.encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.block_on_close = False
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def make_client(server: FakeServer, **kwargs: Any) -> OpenAIChatClient:
    options: dict[str, Any] = {"base_url": server.url, "backoff": 0.01, "timeout": 5.0}
    options.update(kwargs)
    return OpenAIChatClient(MODEL, **options)


def ask(client: OpenAIChatClient, messages: list[Message] | None = None, **kwargs: Any) -> ChatResponse:
    return asyncio.run(client.get_response(messages or [Message.user("hi")], **kwargs))


# --- replies and usage ---------------------------------------------------------------------------------------------


def test_usage_present(server: FakeServer) -> None:
    server.script(Reply(completion("hello there", usage={"prompt_tokens": 12, "completion_tokens": 3})))
    response = ask(make_client(server))
    assert response.text == "hello there"
    assert response.usage == Usage(12, 3, is_estimate=False)
    assert len(response.messages) == 1
    assert response.messages[0].role == "assistant"
    assert response.messages[0].text == "hello there"
    assert server.paths == ["/v1/chat/completions"]


def test_usage_absent_is_none(server: FakeServer) -> None:
    server.script(Reply(completion("hi")))
    response = ask(make_client(server))
    assert response.usage is None
    assert response.text == "hi"


def test_usage_partial_keeps_unknown_counts_none(server: FakeServer) -> None:
    server.script(Reply(completion("hi", usage={"prompt_tokens": 7})))
    response = ask(make_client(server))
    assert response.usage == Usage(7, None)
    assert response.usage is not None
    assert response.usage.total_tokens is None
    assert response.usage.describe() == "in=7 out=unknown"


def test_null_content_gives_empty_text(server: FakeServer) -> None:
    server.script(Reply(completion(None)))
    assert ask(make_client(server)).text == ""


def test_request_body_carries_model_messages_tools_and_options(server: FakeServer) -> None:
    server.script(Reply(completion()))
    messages = [Message.system("be brief"), Message.user("price of apples?")]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup_price",
                "description": "Price of an item",
                "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
            },
        }
    ]
    ask(make_client(server), messages, tools=tools, temperature=0.2)
    [body] = server.requests
    assert body["model"] == MODEL
    assert body["messages"] == to_openai(messages)
    assert body["tools"] == tools
    assert body["temperature"] == 0.2


def test_no_tools_key_when_no_tools(server: FakeServer) -> None:
    server.script(Reply(completion()))
    ask(make_client(server))
    assert "tools" not in server.requests[0]


def test_tool_call_response_is_parsed(server: FakeServer) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup_price", "arguments": '{"item": "apple"}'}}
    server.script(Reply(completion(None, tool_calls=[call], usage={"prompt_tokens": 5, "completion_tokens": 9})))
    response = ask(make_client(server))
    assert response.text == ""
    [message] = response.messages
    assert message.function_calls == (FunctionCallContent("call_1", "lookup_price", '{"item": "apple"}'),)
    assert response.usage == Usage(5, 9)


# --- retries -------------------------------------------------------------------------------------------------------


def test_429_then_success(server: FakeServer) -> None:
    server.script(Reply({"error": {"message": "slow down"}}, status=429), Reply(completion("made it")))
    response = ask(make_client(server))
    assert response.text == "made it"
    assert len(server.requests) == 2


def test_429_every_time_raises_rate_limit_after_all_attempts(server: FakeServer) -> None:
    server.script(Reply({"error": {"message": "slow down"}}, status=429))
    client = make_client(server, max_retries=3)
    with pytest.raises(ModelRateLimitError, match="429") as caught:
        ask(client)
    assert len(server.requests) == 4
    assert MODEL in str(caught.value)
    assert server.url in str(caught.value)


def test_500_then_success(server: FakeServer) -> None:
    server.script(Reply({"error": {"message": "boom"}}, status=500), Reply(completion("recovered")))
    assert ask(make_client(server)).text == "recovered"
    assert len(server.requests) == 2


def test_500_every_time_raises_response_error(server: FakeServer) -> None:
    server.script(Reply({"error": {"message": "kaput"}}, status=500))
    with pytest.raises(ModelResponseError, match="500") as caught:
        ask(make_client(server, max_retries=2))
    assert len(server.requests) == 3
    assert "kaput" in str(caught.value)
    assert MODEL in str(caught.value)
    assert server.url in str(caught.value)


def test_400_is_not_retried(server: FakeServer) -> None:
    server.script(Reply({"error": {"message": "bad request"}}, status=400))
    with pytest.raises(ModelResponseError, match="400"):
        ask(make_client(server, max_retries=2))
    assert len(server.requests) == 1


def test_zero_retries_makes_one_request(server: FakeServer) -> None:
    server.script(Reply({"error": {}}, status=503))
    with pytest.raises(ModelResponseError):
        ask(make_client(server, max_retries=0))
    assert len(server.requests) == 1


# --- malformed bodies ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("{not json", id="not-json"),
        pytest.param({"id": "x", "object": "chat.completion"}, id="no-choices"),
        pytest.param({"choices": []}, id="empty-choices"),
        pytest.param({"choices": "nope"}, id="choices-not-list"),
        pytest.param({"choices": [{"index": 0}]}, id="no-message"),
        pytest.param({"choices": [{"message": {"role": "assistant", "content": 42}}]}, id="content-not-string"),
        pytest.param({"choices": [{"message": {"role": "user", "content": "x"}}]}, id="wrong-role"),
        pytest.param("[1, 2]", id="json-array"),
    ],
)
def test_malformed_body_raises_response_error(server: FakeServer, body: dict[str, Any] | str) -> None:
    server.script(Reply(body))
    with pytest.raises(ModelResponseError) as caught:
        ask(make_client(server))
    message = str(caught.value)
    assert MODEL in message
    assert server.url in message
    assert "200" in message
    assert len(server.requests) == 1  # a malformed 200 is not retried


@pytest.mark.parametrize(
    "usage",
    [
        pytest.param("lots", id="usage-a-string"),
        pytest.param({"prompt_tokens": "many", "completion_tokens": 2}, id="count-a-string"),
        pytest.param({"prompt_tokens": -5, "completion_tokens": 2, "prompt_tokens_details": []}, id="negative"),
    ],
)
def test_an_untrustworthy_usage_is_ignored_and_the_reply_kept(server: FakeServer, usage: Any) -> None:
    """A hostile or broken upstream's usage never fails a good reply: what cannot be trusted is unknown."""
    server.script(Reply(completion("fine", usage=usage)))
    response = ask(make_client(server))
    assert response.text == "fine"
    assert response.usage is None or response.usage.input_tokens is None


def test_cached_tokens_are_read_from_the_reply(server: FakeServer) -> None:
    usage = {"prompt_tokens": 2048, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 1920}}
    server.script(Reply(completion("cached", usage=usage)))
    response = ask(make_client(server))
    assert response.usage == Usage(2048, 9, cache_read_tokens=1920)
    assert response.usage.uncached_input_tokens == 128


def test_reply_without_role_is_taken_as_assistant(server: FakeServer) -> None:
    server.script(Reply({"choices": [{"message": {"content": "ok"}}]}))
    response = ask(make_client(server))
    assert response.messages[0].role == "assistant"
    assert response.text == "ok"


# --- timeouts, connection errors, cancellation ---------------------------------------------------------------------


def test_slow_response_raises_timeout(server: FakeServer) -> None:
    server.script(Reply(completion(), delay=1.0))
    started = time.monotonic()
    with pytest.raises(ModelTimeoutError) as caught:
        ask(make_client(server, timeout=0.3, max_retries=1))
    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 2
    assert MODEL in str(caught.value)
    assert server.url in str(caught.value)


def test_closed_port_raises_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    client = OpenAIChatClient(MODEL, base_url=url, max_retries=1, backoff=0.01, timeout=2.0)
    with pytest.raises(ModelConnectionError) as caught:
        ask(client)
    assert url in str(caught.value)
    assert MODEL in str(caught.value)


def test_cancellation_propagates_unchanged(server: FakeServer) -> None:
    server.script(Reply(completion(), delay=1.0))
    client = make_client(server)

    async def main() -> None:
        task = asyncio.create_task(client.get_response([Message.user("hi")]))
        await asyncio.sleep(0.2)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())


def test_cancellation_during_backoff_propagates(server: FakeServer) -> None:
    server.script(Reply({"error": {}}, status=500))
    client = make_client(server, backoff=5.0)

    async def main() -> None:
        task = asyncio.create_task(client.get_response([Message.user("hi")]))
        await asyncio.sleep(0.3)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    assert len(server.requests) == 1


# --- configuration -------------------------------------------------------------------------------------------------


def test_environment_configuration(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    server.script(Reply(completion("from env")))
    client = OpenAIChatClient()
    assert client.model == "env-model"
    assert client.base_url.rstrip("/") == server.url
    assert ask(client).text == "from env"
    assert server.requests[0]["model"] == "env-model"


def test_arguments_override_environment(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    server.script(Reply(completion()))
    client = OpenAIChatClient("arg-model", base_url=server.url, api_key="sk-arg")
    ask(client)
    assert server.requests[0]["model"] == "arg-model"


def test_base_url_without_key_uses_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = OpenAIChatClient(MODEL, base_url="http://127.0.0.1:11434/v1")
    assert client._client.api_key == "not-needed"


def test_missing_model_raises_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_MODEL"):
        OpenAIChatClient(base_url="http://127.0.0.1:1/v1")


def test_no_key_and_no_base_url_raises_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChatClient(MODEL)


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout": 0}, {"timeout": -1.0}, {"max_retries": -1}, {"max_retries": 1.5}, {"backoff": -0.1}],
)
def test_bad_arguments_raise_configuration_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        OpenAIChatClient(MODEL, base_url="http://127.0.0.1:1/v1", **kwargs)


def test_missing_sdk_raises_missing_extra_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'contextledger\[openai\]'"):
        OpenAIChatClient(MODEL, base_url="http://127.0.0.1:1/v1")


def test_importing_the_library_does_not_import_openai() -> None:
    code = (
        "import sys, contextledger, contextledger.clients, contextledger.clients.openai\n"
        "assert 'openai' not in sys.modules, 'openai was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_supplied_sdk_client_is_used_without_its_retries(server: FakeServer) -> None:
    server.script(Reply({"error": {}}, status=500))
    sdk = openai.AsyncOpenAI(api_key="sk-x", base_url=server.url, max_retries=5)
    client = OpenAIChatClient(MODEL, client=sdk, max_retries=1, backoff=0.01)
    with pytest.raises(ModelResponseError):
        ask(client)
    assert len(server.requests) == 2
