"""A real HTTP server on 127.0.0.1 that plays OpenAI's Responses API and Anthropic's Messages API,
compaction included, refusing what each API refuses.

It checks each request the way the provider would, and answers 400 in the provider's error shape
when it does not hold (the reason is kept in ``refused``):

- every request: a JSON object body, the API key header, no unknown top-level key;
- ``POST /v1/responses``: ``model``, a non-empty ``input`` list of objects that keeps the Responses
  rules (:func:`~contextledger.messages.responses_problems`), flat function tools
  (``{"type": "function", "name", "parameters"}``: the nested chat-completions form is refused),
  ``context_management`` a list of ``{"type": "compaction", "compact_threshold": N}``;
- ``POST /v1/responses/compact``: ``model`` and a non-empty ``input`` only (with ``instructions``);
- ``POST /v1/messages``: ``anthropic-version``, ``model``, ``max_tokens``, ``messages`` that keep the
  Messages rules (:func:`~contextledger.messages.anthropic_problems`), function tools in Anthropic's
  shape, and the compaction beta header whenever ``context_management`` asks for compaction or a
  message holds a ``compaction`` block; the ``compact_20260112`` edit with only its documented
  fields and a trigger of at least 50,000 input tokens.

What it answers: ``echo: <last user text>``; input tokens are counted as characters / 4 of the
messages, so a test passes a trigger by sending enough text.  ``/v1/responses/compact`` returns the
user messages it keeps and a ``compaction`` item whose ``encrypted_content`` names what it covered;
Anthropic's edit, once the input passes its trigger, returns a ``compaction`` block (alone and with
``stop_reason: "compaction"`` when paused) and bills it under ``usage.iterations``.  A request that
holds a compaction item is read from the newest one on (``read`` records what was read).

``fail`` scripts failures: a path mapped to an HTTP status answers it; ``no_item`` makes
``/v1/responses/compact`` return no compaction item.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextledger.messages import anthropic_problems, responses_problems

API_KEY = "test-key"
BETA = "compact-2026-01-12"

_RESPONSES_KEYS = {
    "model", "input", "store", "tools", "context_management", "instructions", "temperature",
    "include", "reasoning", "previous_response_id", "tool_choice", "max_output_tokens", "metadata",
}  # fmt: skip
_COMPACT_KEYS = {"model", "input", "instructions", "previous_response_id", "prompt_cache_key"}
_MESSAGES_KEYS = {
    "model", "max_tokens", "messages", "system", "tools", "context_management", "temperature",
    "thinking", "tool_choice", "metadata", "stop_sequences", "stream",
}  # fmt: skip
_EDIT_KEYS = {"type", "trigger", "pause_after_compaction", "instructions"}


class Refused(Exception):
    """A request the real API would refuse: 400 with this reason."""


@dataclass
class Provider:
    """The fake's state: what it received, refused and read, and the failures scripted."""

    url: str = ""
    received: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    read: list[list[dict[str, Any]]] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)
    no_item: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [body for where, _, body in self.received if where == path]

    def headers(self, path: str) -> list[dict[str, str]]:
        return [headers for where, headers, _ in self.received if where == path]


def _tokens(value: Any) -> int:
    return len(json.dumps(value)) // 4


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "".join(parts)


def _is_compaction(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "compaction"


# OpenAI Responses ---------------------------------------------------------------------------------


def _responses_body(body: dict[str, Any], keys: set[str]) -> list[dict[str, Any]]:
    unknown = sorted(set(body) - keys)
    if unknown:
        raise Refused(f"Unknown parameter: '{unknown[0]}'.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused("Missing required parameter: 'model'.")
    items = body.get("input")
    if not isinstance(items, list) or not items or not all(isinstance(item, dict) for item in items):
        raise Refused("Invalid 'input': expected a non-empty array of items.")
    problems = responses_problems(body)
    if problems:
        raise Refused(f"Invalid 'input': {problems[0].detail}")
    return items


def _read_from_newest_item(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    newest = max((at for at, item in enumerate(items) if _is_compaction(item)), default=0)
    return items[newest:]


def _responses(provider: Provider, body: dict[str, Any]) -> dict[str, Any]:
    items = _responses_body(body, _RESPONSES_KEYS)
    if "store" in body and not isinstance(body["store"], bool):
        raise Refused("Invalid type for 'store': expected a boolean.")
    for position, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or "function" in tool or not isinstance(tool.get("name"), str):
            raise Refused(f"Missing required parameter: 'tools[{position}].name'.")
    threshold = None
    management = body.get("context_management")
    if management is not None:
        if not isinstance(management, list) or not all(isinstance(entry, dict) for entry in management):
            raise Refused("Invalid 'context_management': expected an array of objects.")
        for entry in management:
            limit = entry.get("compact_threshold")
            if entry.get("type") != "compaction" or set(entry) - {"type", "compact_threshold"}:
                raise Refused("Invalid 'context_management': unknown entry.")
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise Refused("Invalid 'context_management[0].compact_threshold': expected a positive integer.")
            threshold = limit
    read = _read_from_newest_item(items)
    provider.read.append(read)
    output: list[dict[str, Any]] = []
    if threshold is not None and _tokens(read) > threshold:
        output.append(_compaction_item(provider, read))
    last: dict[str, Any] = next((item for item in reversed(items) if item.get("role") == "user"), {})
    text = "echo: " + _text_of(last.get("content"))
    output.append(
        {
            "type": "message",
            "id": f"msg_{len(provider.received)}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    )
    return {
        "id": f"resp_{len(provider.received)}",
        "object": "response",
        "status": "completed",
        "model": body["model"],
        "output": output,
        "usage": {
            "input_tokens": _tokens(items),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": len(text) // 4 + 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": _tokens(items) + len(text) // 4 + 1,
        },
    }


def _compaction_item(provider: Provider, covered: list[dict[str, Any]]) -> dict[str, Any]:
    digest = base64.b64encode(json.dumps(covered, sort_keys=True).encode()).decode()[:48]
    return {"type": "compaction", "id": f"cmp_{len(provider.received)}", "encrypted_content": f"gAAA{digest}"}


def _compact(provider: Provider, body: dict[str, Any]) -> dict[str, Any]:
    items = _responses_body(body, _COMPACT_KEYS)
    read = _read_from_newest_item(items)
    provider.read.append(read)
    # Like OpenAI's endpoint: the user messages are kept as they were sent, the rest is the item.
    kept = [item for item in items if item.get("role") == "user" and item.get("type", "message") == "message"]
    output = [*kept] if provider.no_item else [*kept, _compaction_item(provider, read)]
    return {
        "id": f"resp_cmp_{len(provider.received)}",
        "object": "response.compaction",
        "created_at": 1765000000,
        "output": output,
        "usage": {
            "input_tokens": _tokens(items),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 120,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": _tokens(items) + 120,
        },
    }


# Anthropic Messages -----------------------------------------------------------------------------


def _edit(body: dict[str, Any]) -> dict[str, Any] | None:
    management = body.get("context_management")
    if management is None:
        return None
    edits = management.get("edits") if isinstance(management, dict) else None
    if not isinstance(edits, list) or not edits:
        raise Refused("context_management.edits: Field required")
    found = None
    for edit in edits:
        if not isinstance(edit, dict) or edit.get("type") != "compact_20260112":
            raise Refused("context_management.edits.0: unknown edit type")
        extra = set(edit) - _EDIT_KEYS
        if extra:
            raise Refused(f"context_management.edits.0.{sorted(extra)[0]}: Extra inputs are not permitted")
        trigger = edit.get("trigger", {"type": "input_tokens", "value": 150_000})
        value = trigger.get("value") if isinstance(trigger, dict) else None
        if not isinstance(trigger, dict) or trigger.get("type") != "input_tokens":
            raise Refused("context_management.edits.0.trigger: expected an input_tokens trigger")
        if isinstance(value, bool) or not isinstance(value, int) or value < 50_000:
            raise Refused("context_management.edits.0.trigger.value: must be at least 50000")
        if not isinstance(edit.get("pause_after_compaction", False), bool):
            raise Refused("context_management.edits.0.pause_after_compaction: Input should be a valid boolean")
        found = edit
    return found


def _messages(provider: Provider, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    if not headers.get("anthropic-version"):
        raise Refused("anthropic-version: header is required")
    unknown = sorted(set(body) - _MESSAGES_KEYS)
    if unknown:
        raise Refused(f"{unknown[0]}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str):
        raise Refused("model: Field required")
    if isinstance(body.get("max_tokens"), bool) or not isinstance(body.get("max_tokens"), int):
        raise Refused("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Refused("messages: Field required")
    problems = anthropic_problems(body)
    if problems:
        raise Refused(f"messages: {problems[0].detail}")
    for position, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or "function" in tool or not isinstance(tool.get("input_schema"), dict):
            raise Refused(f"tools.{position}.input_schema: Field required")
    blocks = [(m, b) for m in messages for b in (m.get("content") if isinstance(m.get("content"), list) else [])]
    holds_block = any(_is_compaction(block) for _, block in blocks)
    edit = _edit(body)
    betas = {beta.strip() for beta in headers.get("anthropic-beta", "").split(",")}
    if (holds_block or edit is not None) and BETA not in betas:
        raise Refused(f"compaction requires the beta header 'anthropic-beta: {BETA}'")
    for message, block in blocks:
        if _is_compaction(block) and (message.get("role") != "assistant" or not isinstance(block.get("content"), str)):
            raise Refused("messages: a compaction block belongs to an assistant message and carries its content")
    # The server reads from the newest compaction block on.
    start = 0
    for at, message in enumerate(messages):
        if isinstance(message.get("content"), list) and any(map(_is_compaction, message["content"])):
            start = at
    read = messages[start:]
    provider.read.append(read)
    tokens = _tokens(read) + _tokens(body.get("system") or "")
    usage: dict[str, Any] = {
        "input_tokens": tokens,
        "output_tokens": 10,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    content: list[dict[str, Any]] = []
    reason = "end_turn"
    if edit is not None and tokens >= edit.get("trigger", {"value": 150_000})["value"]:
        content.append({"type": "compaction", "content": f"Summary of {len(read)} messages ({tokens} tokens)."})
        usage["iterations"] = [
            {
                "type": "compaction",
                "input_tokens": tokens,
                "output_tokens": 300,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
        ]
        if edit.get("pause_after_compaction"):
            usage["input_tokens"] = usage["output_tokens"] = 0
            reason = "compaction"
    if reason != "compaction":
        last: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        content.append({"type": "text", "text": "echo: " + _text_of(last.get("content"))})
    return {
        "id": f"msg_{len(provider.received)}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": reason,
        "stop_sequence": None,
        "usage": usage,
    }


# The server ------------------------------------------------------------------------------------


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            headers = {key.lower(): value for key, value in self.headers.items()}
            anthropic = path == "/v1/messages"
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            with provider.lock:
                provider.received.append((path, headers, body if isinstance(body, dict) else {}))
            status = provider.fail.get(path)
            if status is not None:
                self._send(status, _error(anthropic, "api_error", f"scripted {status}"))
                return
            try:
                # The official SDK sends the key as x-api-key or, in recent releases, as a bearer token.
                keys = {headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")}
                if anthropic and API_KEY not in keys:
                    raise Refused("invalid x-api-key")
                if not anthropic and headers.get("authorization") != f"Bearer {API_KEY}":
                    raise Refused("Incorrect API key provided")
                if not isinstance(body, dict):
                    raise Refused("the body is not a JSON object")
                if path == "/v1/responses":
                    answer = _responses(provider, body)
                elif path == "/v1/responses/compact":
                    answer = _compact(provider, body)
                elif anthropic:
                    answer = _messages(provider, headers, body)
                else:
                    self._send(404, _error(anthropic, "not_found_error", f"no route {path}"))
                    return
            except Refused as refused:
                with provider.lock:
                    provider.refused.append(str(refused))
                self._send(400, _error(anthropic, "invalid_request_error", str(refused)))
                return
            self._send(200, answer)

    return Handler


def _error(anthropic: bool, kind: str, message: str) -> dict[str, Any]:
    if anthropic:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


@contextmanager
def serving() -> Iterator[Provider]:
    """A fake provider on a port the OS chose, for the time of the ``with`` block."""
    provider = Provider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    provider.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
