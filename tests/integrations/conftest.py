"""Fixtures for the integration tests: a chat-completions server on 127.0.0.1 that computes each reply
from the request it received and records every request, and the Redis server of the history tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.history.conftest import redis_server  # noqa: F401  (the fixture, shared with the history tests)
from tests.loopback import json_endpoint

Responder = Callable[[dict[str, Any]], dict[str, Any]]


def completion(
    content: str | None = "ok",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A chat.completion body with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
    }
    if usage is not None:
        body["usage"] = {**usage, "total_tokens": sum(usage.values())}
    return body


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


@dataclass
class ChatServer:
    """Answers POST /v1/chat/completions with ``respond(request_body)`` (a status 500 when it raises)."""

    url: str = ""
    respond: Responder = lambda request: completion()
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append(body)
        try:
            return 200, self.respond(body)
        except Exception as error:  # the test scripted a failure
            return 500, {"error": {"message": str(error), "type": "server_error"}}


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    state = ChatServer()

    with json_endpoint(state.record) as url:
        state.url = url
        yield state
