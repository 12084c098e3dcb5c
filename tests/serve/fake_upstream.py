"""A fake OpenAI-compatible upstream on 127.0.0.1 that records every request it receives.

Run as a process (``python -m tests.serve.fake_upstream PORT``) so the proxy and it never share
an interpreter.  It answers at once and deterministically, and the requested ``model`` picks how
it behaves, so tests need no shared switch:

- any model: a reply ``echo: <last user text>`` (streamed in several chunks when asked);
- ``fake-tool``: a reply calling the tool ``lookup`` (two streamed argument deltas);
- ``fake-500``: HTTP 500 in OpenAI's error shape;  ``fake-slow``: answers after 5 seconds;
- ``fake-broken``: a stream that stops half-way (the connection is dropped, no ``[DONE]``);
- ``fake-garbage``: HTTP 200 whose body is not JSON.

``GET /_received`` returns what it was sent (path, Authorization header, JSON body) in order;
``DELETE /_received`` empties the record.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

RECEIVED: list[dict[str, Any]] = []


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class _Broken(Exception):
    """Raised inside a stream to drop the connection half-way."""


async def chat(request: Request) -> Response:
    payload = await request.json()
    RECEIVED.append(
        {"path": "/v1/chat/completions", "authorization": request.headers.get("authorization"), "body": payload}
    )
    model = str(payload.get("model", "fake"))
    if model == "fake-500":
        error = {"error": {"message": "the fake model fell over", "type": "server_error", "param": None, "code": None}}
        return JSONResponse(error, status_code=500)
    if model == "fake-slow":
        await asyncio.sleep(5)
    if model == "fake-garbage":
        return Response(b"<html>not json</html>", media_type="application/json")
    text = "echo: " + _last_user_text(payload.get("messages", []))
    tool = model == "fake-tool"
    if payload.get("stream"):

        async def events() -> AsyncIterator[bytes]:
            yield _chunk(model, {"role": "assistant", "content": "" if not tool else None})
            if tool:
                call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}
                yield _chunk(model, {"tool_calls": [call]})
                for part in ('{"item": ', '"laptop"}'):
                    yield _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                yield _chunk(model, {}, "tool_calls")
            else:
                middle = len(text) // 2
                yield _chunk(model, {"content": text[:middle]})
                if model == "fake-broken":
                    raise _Broken("the fake upstream drops the connection")
                yield _chunk(model, {"content": text[middle:]})
                yield _chunk(model, {}, "stop")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool:
        call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"item": "laptop"}'}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return JSONResponse(
        {
            "id": f"chatcmpl-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }
    )


async def models(request: Request) -> Response:
    RECEIVED.append({"path": "/v1/models", "authorization": request.headers.get("authorization"), "body": None})
    return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "t"}]})


async def received(request: Request) -> Response:
    if request.method == "DELETE":
        RECEIVED.clear()
        return JSONResponse({"cleared": True})
    return JSONResponse(RECEIVED)


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/_received", received, methods=["GET", "DELETE"]),
    ]
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
