"""The fake upstream's Anthropic side: ``POST /v1/messages`` (streamed or not) and
``/v1/messages/count_tokens``, served by the same process as :mod:`tests.serve.fake_upstream`.

It checks every request as the Messages API would and records what it found in ``problems`` (an
empty list: a request the API takes): the first message from the user, each ``tool_result``
answering a ``tool_use`` of the assistant message right before it and coming first in its
message, every ``tool_use`` answered in the next message, no more than four ``cache_control``
breakpoints and none on a thinking block, and each thinking block exactly as this fake signed it.

What it answers, by ``model``:

- any model: a thinking block (signed), then, when the last user message is text holding the word
  ``tool``, a ``tool_use`` of ``lookup``; otherwise the text ``echo: <last user text>``;
- ``fake-500`` / ``fake-529``: that status in Anthropic's error shape (``529`` is ``overloaded_error``);
- ``fake-broken``: a stream that stops half-way (the connection dropped, no ``message_stop``);
- ``fake-error-event``: a stream with an ``error`` event after its first block;
- ``fake-garbage``: HTTP 200 whose body is not JSON.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

SIGNED: dict[str, str] = {}  # signature -> the thinking block's JSON, as the fake wrote it

# The serial of each reply's ids, never reset: a test that clears what was received must not see
# the next reply reuse an id a stored conversation already holds (a provider's ids are unique).
_SERIALS = itertools.count(1)


class Broken(Exception):
    """Raised inside a stream to drop the connection half-way."""


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def problems(payload: dict[str, Any]) -> list[str]:
    """What the Messages API would refuse in ``payload`` (see the module docstring)."""
    found: list[str] = []
    messages = payload.get("messages") or []
    if not messages or messages[0].get("role") != "user":
        found.append("the first message is not the user's")
    breakpoints = 0
    for place in ("system", "tools"):
        value = payload.get(place)
        if isinstance(value, list):
            breakpoints += sum(1 for item in value if isinstance(item, dict) and "cache_control" in item)
    merged: list[dict[str, Any]] = []
    for message in messages:  # the API joins consecutive messages of one role
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["blocks"] += _blocks(message)
        else:
            merged.append({"role": message["role"], "blocks": _blocks(message)})
    for position, message in enumerate(merged):
        blocks = message["blocks"]
        for block in blocks:
            if "cache_control" in block:
                breakpoints += 1
                if block.get("type") in ("thinking", "redacted_thinking"):
                    found.append(f"message {position}: a breakpoint on a thinking block")
            signed = SIGNED.get(block.get("signature", ""))
            if block.get("type") == "thinking" and signed != json.dumps(block, sort_keys=True):
                found.append(f"message {position}: a thinking block that is not the one signed")
        calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        kinds = [b.get("type") == "tool_result" for b in blocks]
        if results and kinds[: len(results)] != [True] * len(results):
            found.append(f"message {position}: a tool_result after another block")
        before = merged[position - 1]["blocks"] if position else []
        asked = [b["id"] for b in before if b.get("type") == "tool_use"]
        for result in results:
            if result not in asked:
                found.append(f"message {position}: tool_result {result} without its tool_use right before")
        if calls and position + 1 < len(merged):
            answered = {b.get("tool_use_id") for b in merged[position + 1]["blocks"] if b.get("type") == "tool_result"}
            for call in calls:
                if call not in answered:
                    found.append(f"message {position}: tool_use {call} not answered in the next message")
    if breakpoints > 4:
        found.append(f"{breakpoints} cache_control breakpoints")
    return found


def _last_user_text(messages: list[dict[str, Any]]) -> str | None:
    """The last user message's text; None when it carries tool results."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        blocks = _blocks(message)
        if any(b.get("type") == "tool_result" for b in blocks):
            return None
        return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    return ""


def _reply(payload: dict[str, Any], serial: int) -> dict[str, Any]:
    messages = payload.get("messages") or []
    text = _last_user_text(messages)
    thinking = {"type": "thinking", "thinking": f"step {serial}: reading the request", "signature": ""}
    thinking["signature"] = "sig-" + hashlib.sha256(f"{serial}{thinking['thinking']}".encode()).hexdigest()[:24]
    SIGNED[thinking["signature"]] = json.dumps(thinking, sort_keys=True)
    content: list[dict[str, Any]] = [thinking]
    if text is not None and "tool" in text:
        call = {
            "type": "tool_use",
            "id": f"toolu_{serial:04d}",
            "name": "lookup",
            "input": {"item": serial, "q": text[-20:]},
        }
        content.append(call)
        stop = "tool_use"
    else:
        content.append({"type": "text", "text": "echo: " + (text if text is not None else "tool results read")})
        stop = "end_turn"
    raw = len(json.dumps(payload))
    usage = {
        "input_tokens": raw // 4,
        "output_tokens": 7,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    return {
        "id": f"msg_{serial:04d}",
        "type": "message",
        "role": "assistant",
        "model": payload.get("model"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _event(kind: str, body: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()


async def _events(reply: dict[str, Any], model: str) -> AsyncIterator[bytes]:
    head = {key: value for key, value in reply.items() if key not in ("content",)}
    start = {**head, "content": [], "stop_reason": None, "usage": {**reply["usage"], "output_tokens": 1}}
    yield _event("message_start", {"type": "message_start", "message": start})
    yield _event("ping", {"type": "ping"})
    if model == "fake-unparsable":  # an event whose JSON is cut short
        yield b'event: content_block_delta\ndata: {"type": "content_block_delta", "delta": {"text": "cut\n\n'
    for index, block in enumerate(reply["content"]):
        kind = block["type"]
        if kind == "thinking":
            opened: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            yield _event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": opened}
            )
            middle = len(block["thinking"]) // 2
            for piece in (block["thinking"][:middle], block["thinking"][middle:]):
                delta = {"type": "thinking_delta", "thinking": piece}
                yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            signed = {"type": "signature_delta", "signature": block["signature"]}
            yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": signed})
        elif kind == "text":
            opened = {"type": "text", "text": ""}
            yield _event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": opened}
            )
            middle = len(block["text"]) // 2
            for piece in (block["text"][:middle], block["text"][middle:]):
                delta = {"type": "text_delta", "text": piece}
                yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        else:
            opened = {**block, "input": {}}
            yield _event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": opened}
            )
            text = json.dumps(block["input"])
            for piece in (text[:5], text[5:]):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
        if model == "fake-broken":
            raise Broken("the fake upstream drops the connection")
        if model == "fake-error-event":
            yield _event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            return
    delta = {"stop_reason": reply["stop_reason"], "stop_sequence": None}
    yield _event("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 7}})
    yield _event("message_stop", {"type": "message_stop"})


def _record(request: Request, path: str) -> dict[str, Any]:
    return {
        "path": path,
        "authorization": request.headers.get("authorization"),
        "x-api-key": request.headers.get("x-api-key"),
        "anthropic-version": request.headers.get("anthropic-version"),
        "anthropic-beta": request.headers.get("anthropic-beta"),
    }


async def messages(request: Request, received: list[dict[str, Any]], strict: Any) -> Response:
    raw = await request.body()
    payload = json.loads(raw)
    model = str(payload.get("model", "fake"))
    record = _record(request, "/v1/messages")
    record.update(body=payload, strict=strict(raw), problems=problems(payload))
    received.append(record)
    headers = {"request-id": f"req_{len(received)}", "anthropic-ratelimit-requests-remaining": "99"}
    if model in ("fake-500", "fake-529"):
        status = int(model[-3:])
        kind = "api_error" if status == 500 else "overloaded_error"
        error = {"type": "error", "error": {"type": kind, "message": "the fake model fell over"}}
        return JSONResponse(error, status_code=status, headers=headers)
    if model == "fake-garbage":
        return Response(b"<html>not json</html>", media_type="application/json")
    if model.startswith("fake-window-"):  # a context of N tokens, counted as the fake upstream counts them
        limit = int(model.removeprefix("fake-window-"))
        system = payload.get("system")
        counted = sum(len(json.dumps(item, sort_keys=True)) // 4 + 1 for item in payload.get("messages") or [])
        counted += len(json.dumps(system)) // 4 + 1 if system else 0
        if counted > limit:
            message = f"prompt is too long: {counted} tokens > {limit} maximum"
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
            return JSONResponse(error, status_code=400, headers=headers)
    reply = _reply(payload, next(_SERIALS))
    record["reply"] = reply
    if payload.get("stream"):
        return StreamingResponse(_events(reply, model), media_type="text/event-stream", headers=headers)
    return JSONResponse(reply, headers=headers)


async def count_tokens(request: Request, received: list[dict[str, Any]]) -> Response:
    raw = await request.body()
    record = _record(request, "/v1/messages/count_tokens")
    record["body"] = json.loads(raw)
    received.append(record)
    return JSONResponse({"input_tokens": len(raw) // 4})
