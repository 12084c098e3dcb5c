"""A fake OpenAI-compatible upstream on 127.0.0.1 that records every request it receives.

Run as a process (``python -m tests.serve.fake_upstream PORT``) so the proxy and it never share
an interpreter.  It answers at once and deterministically, and the requested ``model`` picks how
it behaves, so tests need no shared switch:

- any model: a reply ``echo: <last user text>`` (streamed in several chunks when asked);
- ``fake-tool``: a reply calling the tool ``lookup`` (two streamed argument deltas), its id
  ``call_`` and a digest of the request, so no two requests' calls share one, however much of
  the conversation a request shows;
- ``fake-500``: HTTP 500 in OpenAI's error shape;  ``fake-slow``: answers after 5 seconds;
- ``fake-broken``: a stream that stops half-way (the connection is dropped, no ``[DONE]``);
- ``fake-garbage``: HTTP 200 whose body is not JSON;  ``fake-hollow``: HTTP 200 JSON with no choices;
- ``fake-429`` / ``fake-503``: that status in OpenAI's error shape, with ``Retry-After``,
  ``x-ratelimit-*`` and ``x-request-id`` headers as OpenAI sends them (every answer carries a
  request id and rate-limit headers);
- ``fake-window-N``: a model whose context holds N tokens (a message counts ``len(JSON) // 4 + 1``,
  as in the fake cache below): a longer request is refused as the provider refuses it (400
  ``context_length_exceeded``; chat completions state the limit and the count, the Responses API
  neither), an Anthropic one with ``prompt is too long: M tokens > N maximum``;
- ``fake-unparsable``: a stream with an event whose JSON is cut short half-way (chat completions,
  Responses and Messages), then the rest as usual;
- ``fake-bulk``: an ordinary reply, but only the body's size is recorded (for tests that send
  gigabytes);
- ``fake-drip-SECONDS``: the ordinary streamed reply, drawn out over SECONDS seconds by an empty
  content chunk every quarter second between its two halves (a stream that outlives a lock's lease);
- ``fake-cache-SHAPE``: the ordinary reply, with a prompt cache behind it: a request's longest
  prefix of whole messages (model, tools and messages; a message counts ``len(JSON) // 4 + 1``
  tokens) already seen in an earlier request is read from the cache when it holds at least
  1,024 tokens (the providers' smallest cacheable prefix: the model and tools alone, which every
  request to a model shares, are never a hit), the rest up to the last message written to it, and
  the usage reports that in one vendor's fields: ``openai`` (``prompt_tokens_details``),
  ``anthropic`` (``input_tokens`` without the cache, ``cache_read_input_tokens``,
  ``cache_creation_input_tokens``), ``deepseek`` (``prompt_cache_hit_tokens`` / ``_miss_``) or
  ``garbage`` (counts as strings, floats, negatives and ``true``).

A streamed request with ``stream_options.include_usage`` gets the usage in a last chunk with no
choices, as OpenAI sends it.  Each record also holds the ``usage`` the answer reported.

Anthropic's Messages API is served too (``/v1/messages``, ``/v1/messages/count_tokens``; see
``fake_anthropic.py``), so ``--anthropic-upstream`` can point at this fake's root.

``GET /_received`` returns what it was sent (path, Authorization header, JSON body, and
``strict``: why a strict JSON parser would refuse the raw body, or ``None``) in order;
``DELETE /_received`` empties the record.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from tests.serve import fake_anthropic

RECEIVED: list[dict[str, Any]] = []
# The serial of each Responses answer's ids, never reset (clearing what was received must not make
# the next answer reuse an id a stored conversation already holds: a provider's ids are unique).
SERIALS = itertools.count(1)
CACHED_PREFIXES: dict[str, None] = {}  # insertion-ordered; the oldest go past _CACHE_ENTRIES
_CACHE_ENTRIES = 100_000
_SMALLEST_CACHED = 1_024  # tokens: a shorter prefix is never read from a provider's cache
RATE_LIMITS = {
    "x-ratelimit-limit-requests": "100",
    "x-ratelimit-remaining-requests": "99",
    "x-ratelimit-reset-requests": "600ms",
}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate keys in {names}")
    return dict(pairs)


def _strict_problem(raw: bytes) -> str | None:
    """Why a strict upstream would refuse ``raw``: not UTF-8, not RFC 8259 JSON (NaN, Infinity,
    an overflowing number, a duplicate key), or a lone surrogate in a string."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as error:
        return f"{type(error).__name__}: {error}"[:200]
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and item in (float("inf"), float("-inf")):
            return "a number out of range"
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "a lone surrogate"
    return None


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


def _usage(model: str, payload: dict[str, Any], text: str) -> dict[str, Any]:
    """What the answer reports; for ``fake-cache-*`` models, after a lookup in the fake's prompt cache."""
    if not model.startswith("fake-cache-"):
        return {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    parts = [json.dumps([model, payload.get("tools")], sort_keys=True)]
    parts += [json.dumps(message, sort_keys=True) for message in payload.get("messages", [])]
    total = read = 0
    prefix = ""
    for part in parts:
        prefix = hashlib.sha256((prefix + part).encode()).hexdigest()
        last = len(part) // 4 + 1
        total += last
        if prefix in CACHED_PREFIXES:
            read = total
        CACHED_PREFIXES[prefix] = None
    while len(CACHED_PREFIXES) > _CACHE_ENTRIES:
        del CACHED_PREFIXES[next(iter(CACHED_PREFIXES))]
    read = read if read >= _SMALLEST_CACHED else 0
    # Written up to the request's last message (Anthropic's breakpoint there), that message not.
    written, output = max(0, total - read - last), len(text) // 4 + 1
    shape = model.removeprefix("fake-cache-")
    if shape == "anthropic":
        return {
            "input_tokens": total - read - written,
            "output_tokens": output,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }
    if shape == "deepseek":
        return {
            "prompt_tokens": total,
            "completion_tokens": output,
            "total_tokens": total + output,
            "prompt_cache_hit_tokens": read,
            "prompt_cache_miss_tokens": total - read,
        }
    if shape == "garbage":
        return {"prompt_tokens": str(total), "completion_tokens": -1, "prompt_tokens_details": {"cached_tokens": 1.5e3}}
    return {
        "prompt_tokens": total,
        "completion_tokens": output,
        "total_tokens": total + output,
        "prompt_tokens_details": {"cached_tokens": read, "audio_tokens": 0},
    }


def window_tokens(items: Any) -> int:
    """A request's length as the ``fake-window-N`` models count it."""
    return sum(len(json.dumps(item, sort_keys=True)) // 4 + 1 for item in items) if isinstance(items, list) else 0


def _breakpoints(value: Any, owner: str | None = None) -> list[str | None]:
    """The roles of the messages holding each ``prompt_cache_breakpoint`` found in ``value``."""
    if isinstance(value, dict):
        role = value.get("role") if isinstance(value.get("role"), str) else owner
        found: list[str | None] = [role] if "prompt_cache_breakpoint" in value else []
        return found + [mark for item in value.values() for mark in _breakpoints(item, role)]
    if isinstance(value, list):
        return [mark for item in value for mark in _breakpoints(item, owner)]
    return []


def breakpoint_refusal(model: str, payload: dict[str, Any], api: str) -> JSONResponse | None:
    """What OpenAI answers to explicit cache breakpoints it does not take, as a 400: on a model
    before the GPT-5.6 family (models named ``gpt-5.6...`` here take them), on an assistant's
    content, or more than four cache writes in one request (the provider's own breakpoint is one
    unless ``prompt_cache_options`` asks for explicit mode)."""
    marks = _breakpoints(payload.get("messages" if api == "chat" else "input"))
    if not marks:
        return None
    options = payload.get("prompt_cache_options")
    writes = len(marks) + (0 if isinstance(options, dict) and options.get("mode") == "explicit" else 1)
    if not model.startswith("gpt-5.6"):
        why = f"Unsupported parameter: 'prompt_cache_breakpoint' is not supported with the model {model}."
    elif "assistant" in marks:
        why = "Invalid value: 'prompt_cache_breakpoint' is not supported on assistant content."
    elif writes > 4:
        why = f"Too many cache breakpoints: a request may write at most 4 cache entries, got {writes}."
    else:
        return None
    error = {"message": why, "type": "invalid_request_error", "param": "prompt_cache_breakpoint", "code": None}
    return JSONResponse({"error": error}, status_code=400)


def window_refusal(model: str, items: Any, api: str) -> JSONResponse | None:
    """The ``fake-window-N`` model's refusal of a request longer than N tokens, in the API's words."""
    if not model.startswith("fake-window-"):
        return None
    limit, counted = int(model.removeprefix("fake-window-")), window_tokens(items)
    if counted <= limit:
        return None
    if api == "chat":
        message = (
            f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{counted} tokens. Please reduce the length of the messages."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    else:
        message = "Your input exceeds the context window of this model. Please adjust your input and try again."
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    return JSONResponse({"error": error}, status_code=400)


class _Broken(Exception):
    """Raised inside a stream to drop the connection half-way."""


async def chat(request: Request) -> Response:
    raw = await request.body()
    payload = json.loads(raw)
    model = str(payload.get("model", "fake"))
    record: dict[str, Any] = {"path": "/v1/chat/completions", "authorization": request.headers.get("authorization")}
    if model == "fake-bulk":
        record["bytes"] = len(raw)
    else:
        record.update(body=payload, strict=_strict_problem(raw))
    RECEIVED.append(record)
    request_id = f"req_{len(RECEIVED)}"
    headers = {**RATE_LIMITS, "x-request-id": request_id}
    if model == "fake-500":
        error = {"error": {"message": "the fake model fell over", "type": "server_error", "param": None, "code": None}}
        return JSONResponse(error, status_code=500, headers=headers)
    if model in ("fake-429", "fake-503"):
        status = int(model[-3:])
        reason = "rate limit reached" if status == 429 else "the fake model is overloaded"
        error = {"error": {"message": reason, "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
        limited = {**headers, "retry-after": "7", "x-ratelimit-remaining-requests": "0", "retry-after-ms": "7000"}
        return JSONResponse(error, status_code=status, headers=limited)
    if (refused := window_refusal(model, payload.get("messages"), "chat")) is not None:
        return refused
    if (refused := breakpoint_refusal(model, payload, "chat")) is not None:
        return refused
    if model == "fake-slow":
        await asyncio.sleep(5)
    if model == "fake-garbage":
        return Response(b"<html>not json</html>", media_type="application/json")
    if model == "fake-hollow":
        return JSONResponse({"id": "chatcmpl-hollow", "object": "chat.completion", "choices": []}, headers=headers)
    text = "echo: " + _last_user_text(payload.get("messages", []))
    tool = model == "fake-tool"
    # Each call its own id, as a provider's are: counting the calls a request shows would give a
    # compacted request (a window over the conversation) an id its earlier calls already had.
    digest = hashlib.sha256(json.dumps(payload.get("messages"), sort_keys=True, default=str).encode()).hexdigest()
    call_id = f"call_{digest[:16]}"
    usage = _usage(model, payload, text)
    record["usage"] = usage
    options = payload.get("stream_options")
    if payload.get("stream"):

        async def events() -> AsyncIterator[bytes]:
            yield _chunk(model, {"role": "assistant", "content": "" if not tool else None})
            if tool:
                call = {"index": 0, "id": call_id, "type": "function", "function": {"name": "lookup", "arguments": ""}}
                yield _chunk(model, {"tool_calls": [call]})
                for part in ('{"item": ', '"laptop"}'):
                    yield _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                yield _chunk(model, {}, "tool_calls")
            else:
                middle = len(text) // 2
                yield _chunk(model, {"content": text[:middle]})
                if model == "fake-broken":
                    raise _Broken("the fake upstream drops the connection")
                if model == "fake-unparsable":
                    yield b'data: {"choices": [{"index": 0, "delta": {"content": "cut\n\n'  # JSON cut short
                if model.startswith("fake-drip-"):
                    until = time.monotonic() + float(model.removeprefix("fake-drip-"))
                    while time.monotonic() < until:
                        await asyncio.sleep(0.25)
                        yield _chunk(model, {"content": ""})
                yield _chunk(model, {"content": text[middle:]})
                yield _chunk(model, {}, "stop")
            if isinstance(options, dict) and options.get("include_usage") is True:
                last = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000}
                yield b"data: " + json.dumps({**last, "model": model, "choices": [], "usage": usage}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool:
        call = {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": '{"item": "laptop"}'}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return JSONResponse(
        {
            "id": f"chatcmpl-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": usage,
        },
        headers=headers,
    )


def _responses_output(payload: dict[str, Any], serial: str) -> list[dict[str, Any]]:
    """A reasoning item, then a call to ``lookup`` when the last input asks for a tool (a user
    message mentioning one), else a message echoing the last user text."""
    items = payload.get("input")
    last = items[-1] if isinstance(items, list) and items else {"role": "user", "content": str(items)}
    content = last.get("content") if isinstance(last, dict) else None
    text = content if isinstance(content, str) else json.dumps(content)
    output: list[dict[str, Any]] = [
        {
            "type": "reasoning",
            "id": f"rs_{serial}",
            "summary": [{"type": "summary_text", "text": "thinking"}],
            "encrypted_content": f"opaque-{serial}",
        }
    ]
    if isinstance(last, dict) and last.get("role") == "user" and "tool" in text:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{serial}",
                "call_id": f"call_{serial}",
                "name": "lookup",
                "arguments": json.dumps({"item": serial}),
                "status": "completed",
            }
        )
    else:
        reply = {"type": "output_text", "text": "echo: " + text[-40:], "annotations": []}
        output.append(
            {"type": "message", "id": f"msg_{serial}", "role": "assistant", "status": "completed", "content": [reply]}
        )
    return output


async def responses(request: Request) -> Response:
    """The Responses API: ``fake-500`` fails, ``fake-garbage`` answers 200 with no response,
    ``fake-broken`` drops its stream half-way, ``fake-failed`` ends its stream in ``response.failed``."""
    raw = await request.body()
    payload = json.loads(raw)
    model = str(payload.get("model", "fake"))
    record = {
        "path": "/v1/responses",
        "authorization": request.headers.get("authorization"),
        "body": payload,
        "strict": _strict_problem(raw),
    }
    RECEIVED.append(record)
    headers = {**RATE_LIMITS, "x-request-id": f"req_{len(RECEIVED)}"}
    if model == "fake-500":
        error = {"error": {"message": "the fake model fell over", "type": "server_error", "param": None, "code": None}}
        return JSONResponse(error, status_code=500, headers=headers)
    if model == "fake-garbage":
        return Response(b"<html>not a response</html>", media_type="text/html", headers=headers)
    if (refused := window_refusal(model, payload.get("input"), "responses")) is not None:
        return refused
    if (refused := breakpoint_refusal(model, payload, "responses")) is not None:
        return refused
    serial = f"{next(SERIALS)}"
    output = _responses_output(payload, serial)
    usage = {
        "input_tokens": len(raw) // 4,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": len(raw) // 4 + 5,
    }
    response = {
        "id": f"resp_{serial}",
        "object": "response",
        "created_at": 1700000000,
        "model": model,
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
    record["response"] = response
    if not payload.get("stream"):
        return JSONResponse(response, headers=headers)

    def event(kind: str, number: int, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": number, **fields}
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()

    async def events() -> AsyncIterator[bytes]:
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        yield event("response.created", 0, response=started)
        number = 1
        for index, item in enumerate(output):
            yield event("response.output_item.added", number, output_index=index, item=item)
            number += 1
            if model == "fake-broken" and index == 0:
                raise _Broken("the fake upstream drops the connection")
            if model == "fake-unparsable" and index == 0:
                yield b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta\n\n'
                number += 1
            if model == "fake-failed" and index == 0:
                failed = {**response, "status": "failed", "error": {"code": "server_error", "message": "it failed"}}
                yield event("response.failed", number, response=failed)
                return
            yield event("response.output_item.done", number, output_index=index, item=item)
            number += 1
        yield event("response.completed", number, response=response)

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


async def models(request: Request) -> Response:
    RECEIVED.append({"path": "/v1/models", "authorization": request.headers.get("authorization"), "body": None})
    return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "t"}]})


async def anthropic_messages(request: Request) -> Response:
    """Anthropic's Messages API (see ``fake_anthropic.py``)."""
    return await fake_anthropic.messages(request, RECEIVED, _strict_problem)


async def anthropic_count_tokens(request: Request) -> Response:
    return await fake_anthropic.count_tokens(request, RECEIVED)


async def received(request: Request) -> Response:
    if request.method == "DELETE":
        RECEIVED.clear()
        return JSONResponse({"cleared": True})
    return JSONResponse(RECEIVED)


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/messages", anthropic_messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", anthropic_count_tokens, methods=["POST"]),
        Route("/_received", received, methods=["GET", "DELETE"]),
    ]
)

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
