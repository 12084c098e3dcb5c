"""``POST /v1/messages``: Anthropic's Messages API through the proxy, to an Anthropic-compatible upstream.

The same proxy as chat completions: stateless compaction, or session mode through the one session
flow (:mod:`contextledger.serve._flow`) with its facts, ``Idempotency-Key``, tenants and streams.
Messages are read with :func:`contextledger.messages.from_anthropic`, so a ``tool_use`` and the
``tool_result`` blocks answering it are kept or dropped together, a turn's thinking stays with its
tool calls, and every block the proxy keeps goes upstream as the client sent it (thinking
signatures and fields this library does not know included).  The top-level ``system`` is kept as
it came; the tenant is a hash of the key, sent as ``x-api-key`` or a bearer token; the
``anthropic-*`` headers go upstream as they came; every error is in Anthropic's shape.

Session mode keeps the client's ``system`` as that call's instructions (never stored, as system
messages are on chat completions) and puts the facts block as a text block of the newest user
message (``--facts-placement latest_user``, so what comes before it stays cached) or after the
system blocks (``start``).

Cache breakpoints (``cache_control``): unless the client placed any, the proxy marks the end of the
system prompt (or of the tools, without one), which a compaction cut leaves cached, and the last
block of the request, so the next request of the conversation reads everything up to it (the
proxy guide, docs/guides/proxy.md, gives the measurement).  A client's own breakpoints are never moved, and
none is added beside them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contextledger.compaction import CompactionResult
from contextledger.exceptions import FactsError, HistoryError, InvalidMessageError, ProxyError
from contextledger.history import StoredTurn
from contextledger.messages import Message, TextContent, from_anthropic, to_anthropic
from contextledger.messages._anthropic import message_blocks, system_messages
from contextledger.messages._contents import thawed
from contextledger.serve._anthropic_stream import MessagesAssembler, message_events, named_event
from contextledger.serve._bodies import Compacted, joined
from contextledger.serve._config import ServeConfig
from contextledger.serve._errors import store_failure
from contextledger.serve._metrics import Metrics
from contextledger.serve._relay import Relay, Wire
from contextledger.serve._replies import REPLY_PROPERTY
from contextledger.serve._requests import (
    MessageReader,
    RawInput,
    bad_request,
    json_object,
    kept_places,
    refuse_invalid,
)
from contextledger.serve._stateless import Outgoing, StatelessBody
from contextledger.serve._upstream import _TYPES, Answer, Upstream, anthropic_error, passed_back

__all__ = ["MESSAGES_WIRE", "MessagesFormat", "anthropic_error_response", "parse_messages_payload"]


def anthropic_error_response(error: ProxyError | HistoryError | FactsError) -> JSONResponse:
    """The answer to a refused request, in Anthropic's shape; a failing store is a 503."""
    if not isinstance(error, ProxyError):
        error = store_failure(error, "the session store failed", error_type="api_error")
    body = anthropic_error(str(error), error.status, error.error_type, error.code)
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def _upstream_error(status: int, content: bytes, headers: Mapping[str, str]) -> ProxyError:
    """An Anthropic upstream's error, its type and message kept; anything else said in words."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        return ProxyError(error["message"], status=status, error_type=kind or "api_error", headers=passed_back(headers))
    excerpt = content[:300].decode("utf-8", "replace")
    return ProxyError(
        f"the upstream answered HTTP {status}: {excerpt!r}; nothing was stored",
        status=status,
        error_type=_TYPES.get(status, "api_error"),
        code="upstream_error",
        headers=passed_back(headers),
    )


def _error_event(failure: ProxyError) -> bytes:
    return named_event("error", anthropic_error(str(failure), failure.status, failure.error_type, failure.code))


MESSAGES_WIRE = Wire("messages", "/v1/messages", MessagesAssembler, _error_event, _upstream_error)
"""Anthropic's Messages API, as the relay speaks it."""


def _bad(message: str, code: str = "invalid_request") -> ProxyError:
    return bad_request(message, code)


def parse_messages_payload(body: bytes) -> dict[str, Any]:
    """A Messages API request: a JSON object with ``model`` and a non-empty ``messages`` list."""
    payload = json_object(body, "a Messages API JSON object")
    return check_messages_payload(payload, payload.get("messages"))


def check_messages_payload(payload: dict[str, Any], messages: object) -> dict[str, Any]:
    """``payload`` if it is a Messages API request whose ``messages`` (as read, or the values of
    the messages read apart) is a non-empty list; 400 saying what is wrong otherwise."""
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list of messages", "invalid_messages")
    model = payload.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _bad("'model' must name the model as a non-empty string", "invalid_model")
    if "stream" in payload and not isinstance(payload["stream"], bool):
        raise _bad(f"'stream' must be true or false, got {payload['stream']!r}", "invalid_stream")
    system = payload.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise _bad("'system' must be a string or a list of text blocks", "invalid_system")
    return payload


def _one_by_one(messages: list[Any]) -> list[tuple[int, int]]:
    """Each Messages API message converts on its own (to one message, or a tool message and a user one)."""
    return [(position, position + 1) for position in range(len(messages))]


def _system(payload: Mapping[str, Any]) -> list[Message]:
    try:
        return system_messages(payload.get("system"))
    except InvalidMessageError as error:
        raise _bad(f"'system' is malformed: {error}", "invalid_system") from None


def _has_breakpoint(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_has_breakpoint(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_breakpoint(item) for item in value)
    return False


_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _mark_last(blocks: list[Any]) -> bool:
    """Put a breakpoint on the last block that takes one (not thinking, not empty text); False if none does."""
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue
        blocks[index] = {**block, "cache_control": {"type": "ephemeral"}}
        return True
    return False


def _raw_breakpoints(
    payload: dict[str, Any], items: list[bytes], values: list[Any], client_marked: bool = True
) -> tuple[dict[str, Any], list[bytes]]:
    """:func:`with_breakpoints` for a payload whose messages are apart, as their bytes (and
    ``values``): the messages are looked through for the client's breakpoints only when one the
    client sent holds one (``client_marked``), and only the last message that takes the proxy's
    is written again."""
    if client_marked and any(map(_has_breakpoint, values)):
        return payload, items
    marked = with_breakpoints(payload, messages_unmarked=True)
    if marked is payload:  # the client placed its own (on the system prompt or the tools)
        return payload, items
    for position in range(len(items) - 1, -1, -1):
        last = _marked_message(values[position])  # a new dict: the remembered value stays as it was
        if last is not None:
            written = json.dumps(last, ensure_ascii=False).encode("utf-8")
            return marked, [*items[:position], written, *items[position + 1 :]]
    return marked, items


_Whole = tuple[list[bytes], list[Any]]  # the client's messages kept whole: their bytes and values


def _whole_items(kept: Sequence[Message], raw: RawInput) -> _Whole | None:
    """The client's messages a compaction kept, as their bytes and values, when sending them is
    sending what :func:`to_anthropic` would write of ``kept``: every kept message is one the client
    sent (found by identity: a strategy keeps the objects it was given), all the messages made of
    one client message (its tool results and its text) are kept together, and the client messages
    left start with a user message and alternate roles (``to_anthropic`` would merge two of one
    role, and read a leading assistant message as context).  None when they must be written anew."""
    places = kept_places(kept, raw.messages)
    if None in places:
        return None  # written by the strategy
    # The client's messages, by their place in the array: where each made one message of its
    # own, the kept messages' places; else those whole.
    taken = cast("list[int]", places) if raw.one_each else _whole(cast("list[int]", places), raw.spans)
    if taken is None:
        return None
    values = raw.values
    roles = [values[index].get("role") if type(values[index]) is dict else None for index in taken]
    if not roles or roles[0] != "user" or any(role not in ("user", "assistant") for role in roles):
        return None
    if any(one == other for one, other in itertools.pairwise(roles)):
        return None
    return [raw.items[index] for index in taken], [values[index] for index in taken]


def _whole(places: list[int], spans: list[tuple[int, int]]) -> list[int] | None:
    """The client messages (their places in the array) the messages at ``places`` were made of,
    if every such client message is kept whole; None if one is kept in part."""
    taken: list[int] = []
    last = -1  # the place in raw.messages of the kept message before
    for found in places:
        if last >= 0 and spans[found] == spans[last]:
            if found != last + 1:
                return None  # part of one client message dropped
        else:
            if found > 0 and spans[found - 1] == spans[found]:
                return None  # kept from the middle of one client message
            if last >= 0 and last + 1 < len(spans) and spans[last + 1] == spans[last]:
                return None  # the end of the one before dropped
            taken.extend(range(*spans[found]))
        last = found
    if last >= 0 and last + 1 < len(spans) and spans[last + 1] == spans[last]:
        return None
    return taken


def _marked_message(message: Any) -> dict[str, Any] | None:
    """``message`` with a breakpoint on its last block that takes one, or None if none does."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str) and content:
        content = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        content = list(content)
    else:
        return None
    return {**message, "content": content} if _mark_last(content) else None


def with_breakpoints(payload: dict[str, Any], *, messages_unmarked: bool = False) -> dict[str, Any]:
    """``payload`` with the proxy's cache breakpoints (see the module docstring), or as it was
    when the client placed any of its own (``messages_unmarked``: the caller knows its messages
    hold none, and they are not looked through again)."""
    names = ("system", "tools") if messages_unmarked else ("system", "tools", "messages")
    if any(_has_breakpoint(payload.get(name)) for name in names) or "cache_control" in payload:
        return payload
    payload = dict(payload)
    system, tools = payload.get("system"), payload.get("tools")
    if isinstance(system, str) and system:
        payload["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    elif isinstance(system, list) and system:
        payload["system"] = list(system)
        _mark_last(payload["system"])
    elif isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        payload["tools"] = [*tools[:-1], {**tools[-1], "cache_control": {"type": "ephemeral"}}]
    messages = list(payload["messages"])
    for position in range(len(messages) - 1, -1, -1):
        marked = _marked_message(messages[position])
        if marked is not None:
            messages[position] = marked
            break
    payload["messages"] = messages
    return payload


def _with_system(given: Any, added: str | list[dict[str, Any]] | None) -> Any:
    """The client's ``system`` with the proxy's system blocks (a facts block placed at the start) after it."""
    if not added:
        return given
    extra = [{"type": "text", "text": added}] if isinstance(added, str) else added
    if given is None:
        return extra
    return [*([{"type": "text", "text": given}] if isinstance(given, str) else given), *extra]


class MessagesFormat:
    """The Messages API: its stateless handling, and its side of a session turn."""

    keys_in_x_api_key = True
    opens_with_user = True  # the Messages API refuses a conversation the assistant opens
    rules: Literal["chat", "responses", "anthropic"] = "anthropic"  # whose structural rules its bodies keep

    def __init__(
        self,
        config: ServeConfig,
        upstream: Upstream,
        metrics: Metrics,
    ) -> None:
        self.config = config
        self.upstream = upstream
        self.relay = Relay(upstream, metrics, MESSAGES_WIRE)
        self.reader = MessageReader()

    def read(self, payload: Mapping[str, Any]) -> list[Message]:
        """The request's messages, or a 400 naming the first malformed one.  The reader remembers
        what it converted: a stateless client's messages are mostly those it sent the time before."""
        given = payload["messages"]
        try:
            return self.reader.read_runs(given, _one_by_one(given), from_anthropic)[0]
        except InvalidMessageError as error:
            raise _bad(f"'messages' is malformed: {error}", "invalid_messages") from None

    # Stateless mode (the steps are the one stateless flow's, :mod:`contextledger.serve._stateless`) ----------

    def read_body(self, body: bytes) -> StatelessBody:
        """A stateless request, its messages read as their bytes where it can be (as chat
        completions' are, see ``ChatFormat.read_body``): messages seen before are looked up,
        and when the strategy leaves them all, they go upstream as the bytes that came in."""
        split = self.reader.split(body, "messages")
        if split is not None:
            # Each message is told once, when first read, whether it holds a breakpoint.
            raw = self.reader.read_split_runs(split, None, from_anthropic, marks=_has_breakpoint)
            if raw is not None:
                payload = check_messages_payload(split.payload, raw.values)
                return StatelessBody(
                    payload, raw.messages, body, items=raw.items, raw=raw, memo=split.memo, before=split.before
                )
        payload = parse_messages_payload(body)
        return StatelessBody(payload, self.read(payload), body)

    def refuse(self, messages: list[Message]) -> None:
        refuse_invalid(messages)

    def forwarded(self, read: StatelessBody, result: CompactionResult) -> _Whole | None:
        """The client's messages the compaction keeps whole, as they came, when sending them is
        sending what it keeps; None when they must be written anew."""
        return _whole_items(result.messages, read.raw) if read.raw is not None else None

    def outgoing(self, read: StatelessBody, made: Compacted[Any] | None, request: Request) -> Outgoing:
        """The messages as the client sent them where the strategy kept them so, else written anew;
        with the proxy's cache breakpoints unless the client placed its own (``raw.marked`` tells
        whether a message the client sent holds one)."""
        payload, raw = read.payload, read.raw
        incoming: Sequence[Message] = read.messages or []
        system = _system(payload)
        kept = None if raw is None else (raw.items, raw.values)  # the client's messages that go as they came
        if made is not None and made.result is not None and made.result.changed:
            incoming, kept = made.result.messages, made.forwarded
            if kept is None:
                _, written = to_anthropic(incoming)
                payload = {**payload, "messages": written}
        if raw is None:
            payload = with_breakpoints(payload)
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        elif kept is None:
            # Written again: they carry the client's breakpoints of the messages kept. When no
            # message the client sent holds one, they are not looked through.
            payload = with_breakpoints(payload, messages_unmarked=not raw.marked)
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        else:
            payload, items = _raw_breakpoints(payload, *kept, raw.marked)
            body = joined(payload, "messages", items)
        return Outgoing(payload, body, [*system, *incoming], {})

    async def count_tokens(self, request: Request, body: bytes) -> Response:
        """``POST /v1/messages/count_tokens``, passed through as it came."""
        json_object(body, "a Messages API JSON object")  # strict JSON, or a 400 here
        upstream = await self.upstream.send(
            "POST", "/v1/messages/count_tokens", self.upstream.headers(request.headers), body
        )
        if upstream.status_code >= 400:
            raise _upstream_error(upstream.status_code, upstream.content, upstream.headers)
        return Response(
            upstream.content,
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type", "application/json"),
            headers=passed_back(upstream.headers),
        )

    # A session turn ---------------------------------------------------------------------------

    def read_turn(self, payload: dict[str, Any]) -> tuple[list[Message], list[Message]]:
        _system(payload)  # checked now; it goes upstream as it came
        return [], self.read(payload)

    def upstream_payload(
        self, payload: dict[str, Any], sent: list[Message], request: Request, session: str
    ) -> tuple[dict[str, Any], bool]:
        added, written = to_anthropic(sent)
        payload = {**payload, "messages": written}
        if added:
            payload["system"] = _with_system(payload.get("system"), added)
        return with_breakpoints(payload), False

    def answer(self, upstream: Answer) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The upstream's message, or 502: a client must never take a malformed answer for a
        message, nor a session store it."""
        try:
            reply = upstream.json()
            if not isinstance(reply, dict) or not isinstance(reply.get("content"), list):
                raise TypeError
        except (ValueError, TypeError):
            raise ProxyError(
                "the upstream's reply is not a Messages API message with content; nothing was stored",
                status=502,
                error_type="api_error",
                code="upstream_invalid_response",
                headers=passed_back(upstream.headers),
            ) from None
        return reply, reply, {}

    def reply_messages(self, message: dict[str, Any], meta: dict[str, Any]) -> tuple[Message, ...]:
        return (self._reply_message(message),)

    def _reply_message(self, message: dict[str, Any]) -> Message:
        if message.get("content") == []:  # an empty reply (stopped at once): stored as empty text
            aside = {key: value for key, value in message.items() if key != "content"}
            return Message("assistant", (TextContent(""),), additional_properties={REPLY_PROPERTY: aside})
        try:
            [stored] = from_anthropic([{"role": "assistant", "content": message.get("content")}])
        except (InvalidMessageError, ValueError):
            raise ProxyError(
                "the upstream's reply message cannot be read; nothing was stored",
                status=502,
                error_type="api_error",
                code="upstream_invalid_response",
            ) from None
        aside = {key: value for key, value in message.items() if key != "content"}
        properties = {**stored.additional_properties, REPLY_PROPERTY: aside}
        return Message("assistant", stored.contents, additional_properties=properties)

    def replay(self, done: StoredTurn, streaming: bool) -> Response:
        message = done.reply[-1]
        aside = dict(message.additional_properties.get(REPLY_PROPERTY) or {})
        told: dict[str, Any] = {"id": f"msg_{done.turn_id}", "type": "message", "role": "assistant", "model": ""}
        told.update(thawed(aside))
        told["content"] = message_blocks(message)
        if not streaming:
            return JSONResponse(told)
        return Response(message_events(told), media_type="text/event-stream")
