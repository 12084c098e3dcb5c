"""A recording upstream that compacts as the providers do, for the proxy's provider-compaction tests.

It speaks the Responses API (``/v1/responses``) and Anthropic's Messages API (``/v1/messages``) on
127.0.0.1 (a port the OS chooses), records every request's path, headers and body, and refuses
what the real APIs refuse, as they document it:

- a body that breaks the API's structural rules (:func:`contextledger.messages.problems_for`, and
  for Anthropic the fake Messages API's own checks: the first message is the user's, each
  ``tool_result`` right after its ``tool_use``);
- a compaction item or block it did not write, or one changed by a byte (its content is the
  provider's own, opaque or not);
- Anthropic's ``context_management`` without the ``compact-2026-01-12`` beta named in
  ``anthropic-beta``.

When ``context_management`` asks for compaction and what the request holds after its newest
compaction item is larger than the threshold (``compact_threshold``; Anthropic's
``trigger.value``), the reply opens with a new compaction item (Responses) or block (Anthropic),
and Anthropic's ``usage.iterations`` bills the compaction apart, as the providers do.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.serve import fake_anthropic

from contextledger.messages import problems_for

__all__ = ["CompactingUpstream", "compacting_upstream"]


def _size(value: Any) -> int:
    return len(json.dumps(value)) // 4


@dataclass
class CompactingUpstream:
    """The running upstream: its /v1 base URL, what it received, what it wrote."""

    base_url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # each compaction's JSON, as the upstream wrote it
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [record["body"] for record in self.received if record["path"] == path]

    # Responses API ---------------------------------------------------------------------------

    def responses(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        items = body.get("input")
        problems = [str(p) for p in problems_for("responses", body)]
        if problems:
            return 400, _openai_error("; ".join(problems))
        assert isinstance(items, list)
        newest = max((at for at, item in enumerate(items) if item.get("type") == "compaction"), default=-1)
        for item in items:
            if item.get("type") == "compaction" and json.dumps(item, sort_keys=True) not in self.written:
                return 400, _openai_error("invalid_encrypted_content: the compaction item was not written here")
        serial = len(self.received)
        output: list[dict[str, Any]] = []
        threshold = _threshold_responses(body.get("context_management"))
        if threshold is not None and _size(items[newest + 1 :]) > threshold:
            item = {"id": f"cmp_{serial}", "type": "compaction", "encrypted_content": f"gAAAA-{serial}-" + "x" * 40}
            self.written.append(json.dumps(item, sort_keys=True))
            output.append(item)
        last = items[-1] if items else {}
        said = last.get("content")
        text = said if isinstance(said, str) else "..."
        output.append(
            {
                "id": f"msg_{serial}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"echo: {text[:30]}", "annotations": []}],
            }
        )
        usage = {"input_tokens": _size(items), "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 9}
        return 200, {
            "id": f"resp_{serial}",
            "object": "response",
            "status": "completed",
            "model": body.get("model"),
            "output": output,
            "usage": usage,
        }

    # Messages API ----------------------------------------------------------------------------

    def messages(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        problems = [str(p) for p in problems_for("anthropic", body)] + fake_anthropic.problems(body)
        management = body.get("context_management")
        if management is not None and "compact-2026-01-12" not in headers.get("anthropic-beta", ""):
            problems.append("context_management.edits: compact_20260112 needs the beta compact-2026-01-12")
        if problems:
            return 400, _anthropic_error("; ".join(problems))
        messages = body["messages"]
        newest = -1
        for at, message in enumerate(messages):
            blocks = message.get("content")
            for block in blocks if isinstance(blocks, list) else []:
                if block.get("type") == "compaction":
                    if json.dumps(block, sort_keys=True) not in self.written:
                        return 400, _anthropic_error("a compaction block that was not written here")
                    newest = at
        serial = len(self.received)
        content: list[dict[str, Any]] = []
        iterations: list[dict[str, Any]] = []
        threshold = _threshold_anthropic(management)
        effective = _size(messages[newest:] if newest >= 0 else messages)
        if threshold is not None and effective > threshold:
            block = {"type": "compaction", "content": f"Summary {serial}: the user asked for echoes."}
            self.written.append(json.dumps(block, sort_keys=True))
            content.append(block)
            iterations.append(
                {
                    "type": "compaction",
                    "input_tokens": effective,
                    "output_tokens": 30,
                    "cache_read_input_tokens": 0,
                    "cache_creation_input_tokens": 0,
                }
            )
        content.append({"type": "text", "text": f"reply {serial}"})
        usage: dict[str, Any] = {
            "input_tokens": 50,
            "output_tokens": 7,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
        if iterations:
            usage["iterations"] = [*iterations, {"type": "message", "input_tokens": 50, "output_tokens": 7}]
        return 200, {
            "id": f"msg_{serial}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }


def _threshold_responses(management: Any) -> int | None:
    for entry in management if isinstance(management, list) else []:
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            return int(entry.get("compact_threshold", 0))
    return None


def _threshold_anthropic(management: Any) -> int | None:
    edits = management.get("edits") if isinstance(management, dict) else None
    for edit in edits if isinstance(edits, list) else []:
        if isinstance(edit, dict) and edit.get("type") == "compact_20260112":
            trigger = edit.get("trigger") or {}
            return int(trigger.get("value", 150_000))
    return None


def _responses_events(response: dict[str, Any]) -> bytes:
    """``response`` as OpenAI streams it: created, each output item added and done, completed."""
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {**response, "output": [], "usage": None}}]
    for index, item in enumerate(response["output"]):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': at})}\n\n".encode()
        for at, event in enumerate(events)
    )


def _openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


def _anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


@contextmanager
def compacting_upstream() -> Iterator[CompactingUpstream]:
    """Serve a :class:`CompactingUpstream` on 127.0.0.1; yield it with its base URL set."""
    upstream = CompactingUpstream()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            headers = {key.lower(): value for key, value in self.headers.items()}
            with upstream.lock:
                upstream.received.append({"path": self.path, "headers": headers, "body": body})
                if self.path == "/v1/responses":
                    status, reply = upstream.responses(body)
                elif self.path == "/v1/messages":
                    status, reply = upstream.messages(body, headers)
                else:
                    status, reply = 404, _openai_error(f"no route {self.path}")
                upstream.received[-1]["reply"] = reply
            if status == 200 and self.path == "/v1/responses" and body.get("stream") is True:
                data, kind = _responses_events(reply), "text/event-stream"
            else:
                data, kind = json.dumps(reply).encode(), "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    upstream.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield upstream
    finally:
        server.shutdown()
        server.server_close()
