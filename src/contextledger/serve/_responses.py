"""``POST /v1/responses``: OpenAI's Responses API through the proxy, stateless or in sessions.

The client's ``input`` items are read with :func:`contextledger.messages.from_responses` (the
conversion the Agents SDK integration uses), compacted with the proxy's strategy and written back
with :func:`~contextledger.messages.to_responses`.  Every item the strategy keeps goes upstream as
the very object the client sent, so ids, encrypted reasoning and fields this library does not know
pass byte for byte; a reasoning item stays with the item it precedes and a call with its output,
as in every other format (design.md#proxy-formats).

Stateless, two inputs are forwarded as they came, with ``X-Contextledger-Compaction`` saying why:

- a request with ``previous_response_id`` or ``conversation``: the upstream holds the conversation
  before this input, so cutting the input alone would cut blind (``skipped; previous_response_id``);
- a string ``input``: one user message, nothing to cut (``skipped; text input``).

Session mode (the session header) runs the one session flow (:mod:`contextledger.serve._flow`)
with :class:`ResponsesFormat`: the client sends only the turn's new items (a string input is one
user message), the proxy owns the history, and a request that also names upstream state
(``previous_response_id``, ``conversation``) is refused with a 400, since two owners of one history
would each hold half of it.  The response's output items are stored as the reply, each as the
upstream wrote it; ``instructions`` and system or developer items are that call's and are not
stored.

A stream is passed through event by event as it arrives, the reply assembled from its last event
(``response.completed``, or ``response.incomplete``), which in a session is held back until the
turn is stored.  One that breaks, ends before its last event or ends in ``response.failed`` or
``error`` stores nothing, and gets an ``error`` event of the API's own shape at its end.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contextledger.compaction import CompactionResult
from contextledger.exceptions import InvalidMessageError, ProxyError
from contextledger.history import StoredTurn
from contextledger.messages import Message, TextContent, from_responses, to_responses, validate
from contextledger.messages._contents import thawed
from contextledger.messages._message import held_by_provider_compaction
from contextledger.messages._responses import item_runs, joins_calls, kept_as_given
from contextledger.serve._bodies import Compacted, joined
from contextledger.serve._config import ServeConfig
from contextledger.serve._metrics import Metrics
from contextledger.serve._openai_breakpoints import responses_with_breakpoint
from contextledger.serve._relay import Relay, Wire
from contextledger.serve._replies import REPLY_PROPERTY
from contextledger.serve._requests import MessageReader, json_object, kept_places
from contextledger.serve._stateless import COMPACTION_HEADER, Outgoing, StatelessBody
from contextledger.serve._stream import event_data, split_events
from contextledger.serve._tenants import request_tenant
from contextledger.serve._upstream import Answer, Upstream, passed_back

__all__ = ["RESPONSES_WIRE", "ResponsesAssembler", "ResponsesFormat", "parse_responses_payload"]

_UPSTREAM_STATE = ("previous_response_id", "conversation")


def _bad(message: str, code: str = "invalid_request") -> ProxyError:
    return ProxyError(message, status=400, error_type="invalid_request_error", code=code)


def parse_responses_payload(body: bytes) -> dict[str, Any]:
    """A Responses API request: a JSON object with ``model`` and an ``input`` (a string or a list of items)."""
    payload = json_object(body, "a Responses API JSON object")
    return check_responses_payload(payload, payload.get("input"))


def check_responses_payload(payload: dict[str, Any], items: object) -> dict[str, Any]:
    """``payload`` if it is a Responses API request whose ``input`` (as read, or the values of the
    items read apart) is a string or a list of items; 400 saying what is wrong otherwise."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("a Responses request needs 'model', a non-empty string")
    if not isinstance(items, str) and (
        not isinstance(items, list) or not all(isinstance(item, dict) for item in items)
    ):
        raise _bad("'input' must be a string or a list of Responses API items (objects)")
    if "stream" in payload and not isinstance(payload["stream"], bool):
        raise _bad(f"'stream' must be true or false, got {payload['stream']!r}")
    return payload


def _same(item: Any) -> Any:
    return item


def _item_bytes(item: Any) -> bytes:
    return json.dumps(item, ensure_ascii=False).encode("utf-8")


def _forwarded(
    kept: Sequence[Message],
    messages: list[Message],
    spans: list[tuple[int, int]],
    items: list[Any],
    written: Callable[[Any], Any],
) -> list[Any]:
    """What goes upstream for a compaction ``kept`` of ``messages`` (read from ``items``, each
    message from ``items[start:end]``): each kept message as the very items it came from, found
    by identity (a strategy keeps the objects it was given), and what the strategy wrote (a
    summary, a collapsed result) as :func:`to_responses` writes it, made an item by ``written``."""
    out: list[Any] = []
    for message, found in zip(kept, kept_places(kept, messages), strict=True):
        if found is None:
            out += map(written, to_responses([message]))
        else:
            start, end = spans[found]
            out += items[start:end]
    return out


def _error_event(failure: ProxyError) -> bytes:
    """The Responses API's ``error`` event, with the error also nested as the official clients read it."""
    nested = {"type": failure.error_type, "code": failure.code, "message": str(failure)}
    event: dict[str, Any] = {"type": "error", "code": failure.code, "message": str(failure), "param": None}
    event["error"] = nested
    return b"event: error\ndata: " + json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n\n"


def _event(kind: str, number: int, **fields: Any) -> bytes:
    body = {"type": kind, "sequence_number": number, **fields}
    return f"event: {kind}\ndata: ".encode() + json.dumps(body, ensure_ascii=False).encode("utf-8") + b"\n\n"


_CLOSING = frozenset({"response.completed", "response.incomplete"})
_FAILING = frozenset({"response.failed", "error"})


class ResponsesAssembler:
    """Feed it the upstream's bytes; it returns whole events to forward and keeps the reply: the
    response its last event carries (held back until a session's turn is stored)."""

    def __init__(self, hide_usage: bool = False) -> None:
        self._buffer = b""
        self.error: dict[str, Any] | None = None
        self.unreadable = False
        self.usage: dict[str, Any] | None = None
        self._response: dict[str, Any] | None = None
        self._held = b""

    def feed(self, data: bytes) -> list[bytes]:
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
        """``True`` to pass the event on, ``False`` to hold it back (the closing one), ``None`` to
        drop it (unreadable: the stream ends in an error event the client can read instead)."""
        payload = event_data(event)
        if not payload:
            return True  # a comment or keep-alive
        try:
            body = json.loads(payload)
        except ValueError:
            self.unreadable = True
            return None
        kind = body.get("type") if isinstance(body, dict) else None
        if kind in _FAILING:
            self.error = body
        elif kind in _CLOSING:
            response = body.get("response")
            if not isinstance(response, dict) or not isinstance(response.get("output"), list):
                self.unreadable = True
                return None
            self._response = response
            usage = response.get("usage")
            self.usage = usage if isinstance(usage, dict) else None
            return False
        elif not isinstance(kind, str):
            self.unreadable = True
            return None
        return True

    @property
    def complete(self) -> bool:
        return self._response is not None and self.error is None and not self.unreadable and not self._buffer.strip()

    def message(self) -> dict[str, Any]:
        return self._response or {}

    def meta(self) -> dict[str, Any]:
        return {}

    def closing(self) -> bytes:
        return self._held


RESPONSES_WIRE = Wire("responses", "/responses", ResponsesAssembler, _error_event, whole_reply=True)
"""OpenAI's Responses API, as the relay speaks it."""


class ResponsesFormat:
    """The Responses API: its stateless handling, and its side of a session turn."""

    keys_in_x_api_key = False
    opens_with_user = False  # a Responses input may start with any item but a call's output
    rules: Literal["chat", "responses", "anthropic"] = "responses"  # whose structural rules its bodies keep

    def __init__(
        self,
        config: ServeConfig,
        upstream: Upstream,
        metrics: Metrics,
    ) -> None:
        self.config = config
        self.upstream = upstream
        self.relay = Relay(upstream, metrics, RESPONSES_WIRE)
        self.reader = MessageReader()

    def conversation(self, items: list[Any]) -> tuple[list[Message], list[tuple[int, int]]]:
        """The items as messages (with the slice of items each came from), or a 400 for an item
        that is not one.  The reader remembers what it converted: a stateless client's input is
        mostly what it sent the time before."""
        try:
            return self.reader.read_runs(items, item_runs(items), from_responses)
        except InvalidMessageError as error:
            raise _bad(f"'input' is not valid: {error}") from None

    # Stateless mode (the steps are the one stateless flow's, :mod:`contextledger.serve._stateless`) ----------

    def read_body(self, body: bytes) -> StatelessBody:
        """A stateless request, its input read as its items' bytes where it can be (as chat
        completions' messages are, see ``ChatFormat.read_body``): items seen before are looked
        up, and the items kept go upstream as the bytes that came in.  An input the proxy does not
        cut (see the module docstring) is not read into messages."""
        split = self.reader.split(body, "input")
        if split is not None:
            raw = self.reader.read_split_runs(split, joins_calls, from_responses)
            if raw is not None:
                check_responses_payload(split.payload, raw.values)  # items that are not objects: a 400 here
                read = StatelessBody(
                    split.payload, raw.messages, body, items=raw.items, raw=raw, memo=split.memo, before=split.before
                )
                read.values = raw.values
                return self._cut(read)
        payload = parse_responses_payload(body)
        given = payload["input"]
        read = StatelessBody(payload, None, body, values=given if isinstance(given, list) else None)
        return self._cut(read)

    def _cut(self, read: StatelessBody) -> StatelessBody:
        """Whether the input is read into messages to be cut, and what the client is told if not."""
        if any(read.payload.get(name) is not None for name in _UPSTREAM_STATE):
            # Its input may answer calls the stored response made: read nothing into it.
            read.messages = None
            read.said[COMPACTION_HEADER] = "skipped; previous_response_id"
        elif read.values is None:
            read.said[COMPACTION_HEADER] = "skipped; text input"
        elif read.raw is None:
            read.messages, read.spans = self.conversation(read.values)
        return read

    def refuse(self, messages: list[Message]) -> None:
        # Refused where the upstream would refuse it; a compaction item holds what precedes it.
        problems = validate(held_by_provider_compaction(messages))
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise _bad(f"'input' is not a valid conversation: {problems[0].detail}{more}")

    def forwarded(self, read: StatelessBody, result: CompactionResult) -> list[bytes]:
        raw = read.raw
        if raw is None:
            raise ValueError("only a body read apart is forwarded as its items' bytes")
        return _forwarded(result.messages, raw.messages, raw.spans, raw.items, _item_bytes)

    def outgoing(self, read: StatelessBody, made: Compacted[Any] | None, request: Request) -> Outgoing:
        """The payload to send upstream, its input as messages (for the cost meter; none when the
        proxy did not read it), and why the proxy did not cut it, if it did not."""
        payload, said = read.payload, dict(read.said)
        messages: list[Message] = []
        kept: list[bytes] | None = None
        if read.messages is not None and made is not None:
            messages = read.messages
            result = made.result
            if result is not None:
                if result.changed and read.raw is not None:
                    kept = made.forwarded
                elif result.changed:
                    written = _forwarded(result.messages, messages, read.spans or [], read.values or [], _same)
                    payload = {**payload, "input": written}
                messages = list(result.messages)
        elif said.get(COMPACTION_HEADER) == "skipped; text input":
            messages = [Message.user(payload["input"])]
        sent = self.cache_key(payload, read.values, request, None)
        models = self.config.cache_breakpoint_models
        if read.raw is None:
            given = sent.get("input")
            placed = responses_with_breakpoint(sent, given, models) if isinstance(given, list) else None
            sent = sent if placed is None else {**sent, "input": placed}
            body = json.dumps(sent, ensure_ascii=False).encode("utf-8")
        else:
            items = read.raw.items if kept is None else kept
            body = joined(sent, "input", responses_with_breakpoint(sent, items, models) or items)
        return Outgoing(sent, body, messages, said)

    def cache_key(
        self, payload: dict[str, Any], items: list[dict[str, Any]] | None, request: Request, session: str | None
    ) -> dict[str, Any]:
        """``payload`` with a ``prompt_cache_key`` as ``--prompt-cache-key`` asks, unless the client set
        one: a hash of the session in session mode (``session``), else of what every request of the
        conversation starts with (its instructions and first input item).  Keys are hashes: nothing of
        the tenant's key or text is sent."""
        mode = self.config.prompt_cache_key
        if mode == "off" or "prompt_cache_key" in payload:
            return payload
        if mode == "session" and session is not None:
            seed = "session\0" + session
        else:
            try:
                tenant = request_tenant(request, trust_tenant_header=self.config.trust_tenant_header)
            except ProxyError:  # a keyless client: the conversation alone names the cache key
                tenant = ""
            first = items[0] if items else payload.get("input")
            seed = "responses\0" + tenant + json.dumps([payload.get("instructions"), first], sort_keys=True)
        digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return {**payload, "prompt_cache_key": "cl-" + digest}

    # A session turn ---------------------------------------------------------------------------

    def read_turn(self, payload: dict[str, Any]) -> tuple[list[Message], list[Message]]:
        named = [name for name in _UPSTREAM_STATE if payload.get(name) is not None]
        if named:
            raise _bad(
                f"a session turn cannot name upstream state ({named[0]!r}): in session mode the proxy holds the "
                "history, so send only the turn's new items and leave the upstream's state out",
                "session_with_upstream_state",
            )
        given = payload["input"]
        incoming = [Message.user(given)] if isinstance(given, str) else self.conversation(given)[0]
        instructions = [m for m in incoming if m.role == "system"]
        return instructions, [m for m in incoming if m.role != "system"]

    def upstream_payload(
        self, payload: dict[str, Any], sent: list[Message], request: Request, session: str
    ) -> tuple[dict[str, Any], bool]:
        given = payload["input"]
        written = to_responses(sent)
        if isinstance(given, list):
            written = kept_as_given(written, given)  # the turn's own items go as the client sent them
        written = responses_with_breakpoint(payload, written, self.config.cache_breakpoint_models) or written
        return self.cache_key({**payload, "input": written}, None, request, session), False

    def answer(self, upstream: Answer) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The upstream's response, or 502: a client must never take a malformed answer for a
        response, nor a session store it."""
        try:
            reply = upstream.json()
            if not isinstance(reply, dict) or not isinstance(reply.get("output"), list):
                raise TypeError
        except (ValueError, TypeError):
            raise ProxyError(
                "the upstream's reply is not a Responses API response with output; nothing was stored",
                status=502,
                error_type="upstream_error",
                code="upstream_invalid_response",
                headers=passed_back(upstream.headers),
            ) from None
        return reply, reply, {}

    def reply_messages(self, message: dict[str, Any], meta: dict[str, Any]) -> tuple[Message, ...]:
        """The response's output items as stored messages (each item as the upstream wrote it), the
        response's other fields aside on the last one, for a retried turn's replay."""
        aside = {key: value for key, value in message.items() if key != "output"}
        try:
            stored = from_responses(message.get("output") or [])
            if any(m.role != "assistant" for m in stored):
                raise InvalidMessageError("an output item that is not the model's")
        except InvalidMessageError:
            raise ProxyError(
                "the upstream's response has output items that cannot be read; nothing was stored",
                status=502,
                error_type="upstream_error",
                code="upstream_invalid_response",
            ) from None
        if not stored:  # nothing said (stopped at once): stored as empty text, told again as no output
            aside["output"] = []
            return (Message("assistant", (TextContent(""),), additional_properties={REPLY_PROPERTY: aside}),)
        last = stored[-1]
        properties = {**last.additional_properties, REPLY_PROPERTY: aside}
        kept = Message("assistant", last.contents, message_id=last.message_id, additional_properties=properties)
        return (*stored[:-1], kept)

    def replay(self, done: StoredTurn, streaming: bool) -> Response:
        aside = thawed(done.reply[-1].additional_properties.get(REPLY_PROPERTY) or {})
        told: dict[str, Any] = {"id": f"resp_{done.turn_id}", "object": "response", "status": "completed", "model": ""}
        told.update(aside)
        if "output" not in told:
            told["output"] = thawed(to_responses(done.reply))
        if not streaming:
            return JSONResponse(told)
        return Response(response_events(told), media_type="text/event-stream")


def response_events(response: dict[str, Any]) -> bytes:
    """A response as the events of a stream: created, each output item added and done, completed."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [_event("response.created", 0, response=started)]
    number = 1
    for index, item in enumerate(response["output"]):
        events.append(_event("response.output_item.added", number, output_index=index, item=item))
        events.append(_event("response.output_item.done", number + 1, output_index=index, item=item))
        number += 2
    kind = "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
    events.append(_event(kind, number, response=response))
    return b"".join(events)
