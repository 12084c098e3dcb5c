"""The Messages API's server-sent events: read as they pass, the reply assembled, and a stored
reply told again as events.

Anthropic streams name each event (``message_start``, ``content_block_start`` / ``_delta`` /
``_stop``, ``message_delta``, ``message_stop``, ``ping``, ``error``).  The proxy forwards every
event as soon as it is whole, except ``message_stop``: that one is held back until a session's turn
is stored, so a client that sees it knows the turn is kept; a stream that ends without it, or with
an ``error`` event, is broken and stores nothing.  The assembled message is the reply the
non-streaming API would have given: each block whole (text and thinking joined, a tool call's
input parsed from its JSON deltas, a thinking block's signature, citations), the stop reason and
the usage of ``message_start`` and ``message_delta`` together.
"""

from __future__ import annotations

import json
from typing import Any

from contextledger.serve._stream import event_data, split_events

__all__ = ["MessagesAssembler", "message_events", "named_event"]


def named_event(kind: str, body: dict[str, Any]) -> bytes:
    """One event as the Messages API writes it: its name, then its JSON."""
    return f"event: {kind}\ndata: ".encode() + json.dumps(body, ensure_ascii=False).encode("utf-8") + b"\n\n"


class MessagesAssembler:
    """Feed it the upstream's bytes; it returns whole events to forward and keeps the reply."""

    def __init__(self, hide_usage: bool = False) -> None:
        self._buffer = b""
        self.error: dict[str, Any] | None = None
        self.unreadable = False
        self.stopped = False
        self.usage: dict[str, Any] | None = None
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._held: bytes = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The complete events in ``data`` (with what was left before), ``message_stop`` held back."""
        events, self._buffer = split_events(self._buffer, data)
        passed: list[bytes] = []
        for event in events:
            verdict = self._read(event)
            if verdict:
                passed.append(event)
            elif verdict is not None:
                self._held = event
        return passed

    def _read(self, event: bytes) -> bool | None:
        """Take in one event: ``True`` to pass it on, ``False`` to hold it back (``message_stop``),
        ``None`` to drop it (it cannot be read: the client's SDK would fail on it before the error
        event the broken stream ends with)."""
        payload = event_data(event)
        if not payload:
            return True  # a comment or keep-alive
        try:
            body = json.loads(payload)
        except ValueError:
            self.unreadable = True
            return None
        if not isinstance(body, dict):
            self.unreadable = True
            return None
        try:
            return self._take(body)
        except (TypeError, ValueError, AttributeError, KeyError):
            self.unreadable = True  # an event of the right name with the wrong shape
            return None

    def _take(self, body: dict[str, Any]) -> bool:
        kind = body.get("type")
        if kind == "error":
            self.error = body
        elif kind == "message_start":
            self._message = dict(body["message"])
            self._message["content"] = []
            usage = self._message.get("usage")
            self.usage = dict(usage) if isinstance(usage, dict) else self.usage
        elif kind == "content_block_start":
            self._blocks[int(body["index"])] = dict(body["content_block"])
        elif kind == "content_block_delta":
            self._delta(int(body["index"]), body["delta"])
        elif kind == "content_block_stop":
            index = int(body["index"])
            text = "".join(self._json.get(index, ()))
            if text.strip():
                self._blocks[index]["input"] = json.loads(text)  # a broken input is an unreadable stream
        elif kind == "message_delta":
            delta = body.get("delta") or {}
            self._message.update(dict(delta))
            if isinstance(body.get("usage"), dict):
                self.usage = {**(self.usage or {}), **{k: v for k, v in body["usage"].items() if v is not None}}
        elif kind == "message_stop":
            self.stopped = True
            return False
        return True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks[index]
        kind = delta["type"]
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta["signature"]
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(delta["partial_json"])
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])

    @property
    def complete(self) -> bool:
        """Whether the stream said ``message_stop``, with nothing unreadable or erroneous in it."""
        return self.stopped and self.error is None and not self.unreadable and not self._buffer.strip()

    def message(self) -> dict[str, Any]:
        """The assistant message the stream spelled out, as the API's ``message`` object."""
        blocks = [dict(block) for _, block in sorted(self._blocks.items())]
        message = {**self._message, "content": blocks}
        if self.usage is not None:
            message["usage"] = self.usage
        return message

    def meta(self) -> dict[str, Any]:
        return {}

    def closing(self) -> bytes:
        return self._held or named_event("message_stop", {"type": "message_stop"})


def message_events(message: dict[str, Any]) -> bytes:
    """A whole ``message`` as the events of a stream (a retried turn's stored reply, streamed)."""
    head = {key: value for key, value in message.items() if key not in ("content", "stop_reason", "stop_sequence")}
    events = [named_event("message_start", {"type": "message_start", "message": {**head, "content": []}})]
    for index, block in enumerate(message.get("content") or ()):
        kind = block.get("type")
        opened, delta = dict(block), None
        if kind == "text":
            opened["text"], delta = "", {"type": "text_delta", "text": block.get("text", "")}
        elif kind == "tool_use":
            opened["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}), ensure_ascii=False)}
        elif kind == "thinking":
            opened.update(thinking="", signature="")
            delta = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
        events.append(
            named_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": opened})
        )
        if delta is not None:
            events.append(
                named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )
        if kind == "thinking" and block.get("signature"):
            signed = {"type": "signature_delta", "signature": block["signature"]}
            events.append(
                named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": signed})
            )
        events.append(named_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")}
    usage = message.get("usage") or {}
    events.append(named_event("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}))
    events.append(named_event("message_stop", {"type": "message_stop"}))
    return b"".join(events)
