"""Server-sent events from the upstream: split into events, and the reply assembled from them.

The proxy forwards each event as soon as it is complete, and reads it on the way to build the
assistant message the session stores (text deltas joined, tool-call deltas joined per index).
A stream counts as finished only when the upstream said so (``data: [DONE]``, or a choice with a
``finish_reason`` before a clean end); anything else is a broken stream, and a broken stream
stores nothing.  An event that cannot be read is not passed on: a client's SDK would fail on it
before it reached the error event that says what happened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DONE_EVENT", "StreamAssembler", "event_data", "split_events", "sse_event"]

DONE_EVENT = b"data: [DONE]\n\n"


def sse_event(body: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``body`` as JSON (an error body makes the official SDKs raise)."""
    return b"data: " + json.dumps(body, ensure_ascii=False).encode("utf-8") + b"\n\n"


def split_events(pending: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """The whole events in ``pending + data``, and what is left of an unfinished one.  Joined
    before normalising, so a CR LF split across two reads is still one line break.  Every API's
    assembler reads its upstream's bytes through this."""
    buffer = (pending + data).replace(b"\r\n", b"\n")
    events: list[bytes] = []
    while (end := buffer.find(b"\n\n")) >= 0:
        events.append(buffer[: end + 2])
        buffer = buffer[end + 2 :]
    return events, buffer


def event_data(event: bytes) -> bytes:
    """An event's ``data:`` lines joined (empty for a comment or keep-alive)."""
    return b"".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")).strip()


@dataclass
class _ToolCall:
    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Feed it the upstream's bytes; it returns whole events to forward and keeps the reply."""

    def __init__(self, *, hide_usage: bool = False) -> None:
        self.hide_usage = hide_usage  # the proxy asked for usage, the client did not: keep it back
        self._buffer = b""
        self.done = False
        self.finished = False
        self.finish_reason: str | None = None
        self.error: dict[str, Any] | None = None
        self.unreadable = False
        self.response_id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.usage: dict[str, Any] | None = None
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._tool_calls: dict[int, _ToolCall] = {}

    def feed(self, data: bytes) -> list[bytes]:
        """The complete events in ``data`` (with what was left over before), ``[DONE]`` held back."""
        events, self._buffer = split_events(self._buffer, data)
        return [event for event in events if self._read(event)]

    def _read(self, event: bytes) -> bool:
        """Take in one event; ``False`` for the ``[DONE]`` marker, which the caller sends itself, for
        a usage chunk the client did not ask for, and for an event that is not a JSON object (the
        stream is then broken, and ends in an error event the client can read)."""
        payload = event_data(event)
        if not payload:
            return True  # a comment or keep-alive
        if payload == b"[DONE]":
            self.done = True
            return False
        try:
            chunk = json.loads(payload)
        except ValueError:
            self.unreadable = True
            return False  # not the client's to parse: the stream ends in an error event instead
        if not isinstance(chunk, dict):
            self.unreadable = True
            return False
        if "error" in chunk:
            self.error = chunk
            return True
        self.response_id = chunk.get("id", self.response_id)
        self.model = chunk.get("model", self.model)
        self.created = chunk.get("created", self.created)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
            if self.hide_usage and not chunk.get("choices"):
                return False
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # the session keeps the first choice, as it does without streaming
            if choice.get("finish_reason"):
                self.finished = True
                self.finish_reason = str(choice["finish_reason"])
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
            if isinstance(delta.get("refusal"), str):
                self._refusal.append(delta["refusal"])
            for call in delta.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                slot = self._tool_calls.setdefault(int(call.get("index", 0)), _ToolCall())
                slot.id = call.get("id") or slot.id
                slot.type = call.get("type") or slot.type
                function = call.get("function") or {}
                slot.name = function.get("name") or slot.name
                if isinstance(function.get("arguments"), str):
                    slot.arguments.append(function["arguments"])
        return True

    def meta(self) -> dict[str, Any]:
        """The reply's fields a session keeps beside the message."""
        return {
            "finish_reason": self.finish_reason,
            "id": self.response_id,
            "model": self.model,
            "created": self.created,
            "usage": self.usage,
        }

    def closing(self) -> bytes:
        return DONE_EVENT

    @property
    def complete(self) -> bool:
        """Whether the upstream ended the stream properly, with nothing unreadable or erroneous in it."""
        return (self.done or self.finished) and self.error is None and not self.unreadable and not self._buffer.strip()

    def message(self) -> dict[str, Any]:
        """The assistant message the stream spelled out, as an OpenAI message dict."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) if self._text else None}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": call.type,
                    "function": {"name": call.name, "arguments": "".join(call.arguments)},
                }
                for _, call in sorted(self._tool_calls.items())
            ]
        return message
