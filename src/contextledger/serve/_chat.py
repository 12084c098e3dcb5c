"""``POST /v1/chat/completions``: OpenAI's chat completions through the proxy.

Stateless mode (no session header): the client sends its whole history; the configured strategy
compacts it and the projection goes upstream; nothing is kept.  It runs the one stateless flow
(:mod:`contextledger.serve._stateless`) with :class:`ChatFormat` reading and writing.  Session mode runs the one session
flow (:mod:`contextledger.serve._flow`) with :class:`ChatFormat` reading and writing the messages.

System messages a client sends in session mode are the instructions for that call: they are put
first in the request and not stored, so a client that sends its system prompt every time (as
OpenAI clients do) does not pile up copies of it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contextledger.compaction import CompactionResult
from contextledger.exceptions import ProxyError
from contextledger.history import StoredTurn
from contextledger.messages import Message, to_openai
from contextledger.serve._bodies import Compacted, joined
from contextledger.serve._config import ServeConfig
from contextledger.serve._openai_breakpoints import chat_with_breakpoint
from contextledger.serve._relay import Relay, completion
from contextledger.serve._replies import completion_events, reply_message, stored_completion
from contextledger.serve._requests import (
    MessageReader,
    check_payload,
    parse_payload,
    refuse_invalid,
    without_metadata,
)
from contextledger.serve._stateless import Outgoing, StatelessBody
from contextledger.serve._tenants import request_tenant
from contextledger.serve._upstream import Answer, Upstream
from contextledger.serve._usage import with_usage_requested

__all__ = ["ChatFormat"]


def _as_sent(sent: list[Message], incoming: list[Message], items: list[bytes]) -> list[bytes]:
    """Each message of ``sent`` as the bytes it came in (``items``, one per message of
    ``incoming``), or written anew when a strategy made it."""
    came = {id(message): item for message, item in zip(incoming, items, strict=True)}
    return [
        came.get(id(message)) or json.dumps(to_openai([message])[0], ensure_ascii=False).encode("utf-8")
        for message in sent
    ]


def _leading(items: list[bytes]) -> list[Any]:
    """The messages a ``prefix`` cache key is made of, read from a body's items: those up to the
    first user message (the instructions before it, and it), not the whole history."""
    read: list[Any] = []
    for item in items:
        read.append(json.loads(item))
        if isinstance(read[-1], dict) and read[-1].get("role") == "user":
            break
    return read


class ChatFormat:
    """Chat completions: its stateless handling, and its side of a session turn."""

    keys_in_x_api_key = False
    opens_with_user = False  # chat completions take any role first
    rules: Literal["chat", "responses", "anthropic"] = "chat"  # whose structural rules its bodies keep

    def __init__(
        self,
        config: ServeConfig,
        upstream: Upstream,
        relay: Relay,
    ) -> None:
        self.config = config
        self.upstream = upstream
        self.relay = relay
        self.reader = MessageReader()

    # Stateless mode (the steps are the one stateless flow's, :mod:`contextledger.serve._stateless`) ----------

    def read_body(self, body: bytes) -> StatelessBody:
        """A stateless request, read as its messages' bytes where it can be: a history sent again
        is looked up message by message, not parsed, and the messages kept go upstream as the bytes
        that came in.  A body that cannot be read so (not strict JSON, a malformed message, the
        library's private key in a message) is read whole, which refuses it with its own message."""
        split = self.reader.split(body, "messages")
        if split is not None:
            incoming = self.reader.read_split(split)
            if incoming is not None:
                payload = check_payload(split.payload, split.items)
                return StatelessBody(
                    payload,
                    incoming,
                    body,
                    items=split.items,
                    memo=split.memo,
                    before=split.before,
                )
        payload = parse_payload(body)
        return StatelessBody(payload, self.reader.read(payload["messages"]), body)

    def refuse(self, messages: list[Message]) -> None:
        refuse_invalid(messages)

    def forwarded(self, read: StatelessBody, result: CompactionResult) -> list[bytes]:
        return _as_sent(result.messages, read.messages or [], read.items or [])

    def outgoing(self, read: StatelessBody, made: Compacted[Any] | None, request: Request) -> Outgoing:
        """The body as it came unless something changed it: the strategy, the library's private key
        taken out of a message, or a ``prompt_cache_key`` added."""
        payload, items, incoming = read.payload, read.items, read.messages or []
        rewrite = False
        if items is None:
            plain = without_metadata(payload["messages"])
            if plain is not None:
                payload, rewrite = {**payload, "messages": plain}, True
        # A stateless request's cache key (``prefix``, or ``session`` with no session) hashes its first messages.
        apart = None if items is None or self.config.prompt_cache_key == "off" else _leading(items)
        keyed, hide_usage = with_usage_requested(self.cache_key(payload, request, None, apart))
        rewrite = rewrite or keyed is not payload
        payload = keyed
        sent: list[Message] = incoming
        forwarded: list[bytes] | None = items
        if made is not None and made.result is not None and made.result.changed:
            sent, forwarded, rewrite = made.result.messages, made.forwarded, True
        body = read.body
        models = self.config.cache_breakpoint_models
        if forwarded is not None:
            placed = chat_with_breakpoint(payload, forwarded, models)
            forwarded, rewrite = (forwarded, rewrite) if placed is None else (placed, True)
        if rewrite and forwarded is not None:
            body = joined(payload, "messages", forwarded)
        elif forwarded is None:
            messages = to_openai(sent) if sent is not incoming else payload["messages"]
            placed = chat_with_breakpoint(payload, messages, models)
            messages, rewrite = (messages, rewrite) if placed is None else (placed, True)
            if rewrite:
                body = json.dumps({**payload, "messages": messages}, ensure_ascii=False).encode("utf-8")
        return Outgoing(payload, body, sent, {}, hide_usage)

    def cache_key(
        self, payload: dict[str, Any], request: Request, session: str | None, messages: list[Any] | None = None
    ) -> dict[str, Any]:
        """``payload`` with a ``prompt_cache_key`` as ``--prompt-cache-key`` asks, unless the client
        set one: OpenAI routes requests with one key to the same cache, so a session's or a
        conversation's requests find their prefix (some compatible servers refuse fields they do
        not know, hence off by default).  ``session``: a hash of the tenant and session; ``prefix``:
        a hash of the conversation's first messages (its instructions and first user message), the
        same for every request of one conversation.  Keys are hashes: nothing of the tenant's key
        or text is sent.  ``messages``: the request's messages, when ``payload`` holds them apart."""
        mode = self.config.prompt_cache_key
        if mode == "off" or "prompt_cache_key" in payload:
            return payload
        if mode == "session" and session is not None:
            seed = "session\0" + session
        else:
            messages = [m for m in (payload["messages"] if messages is None else messages) if isinstance(m, dict)]
            lead = next((i for i, m in enumerate(messages) if m.get("role") != "system"), len(messages))
            first_user = next((m for m in messages if m.get("role") == "user"), None)
            try:
                tenant = request_tenant(request, trust_tenant_header=self.config.trust_tenant_header)
            except ProxyError:  # a keyless stateless client: the conversation alone names the key
                tenant = ""
            # The instructions and the first user message: what every request of the conversation
            # starts with, whatever was cut or placed (a facts block) after them.
            seed = "prefix\0" + tenant + json.dumps([*messages[:lead], first_user], sort_keys=True)
        digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return {**payload, "prompt_cache_key": "cl-" + digest}

    # A session turn ---------------------------------------------------------------------------

    def read_turn(self, payload: dict[str, Any]) -> tuple[list[Message], list[Message]]:
        incoming = self.reader.read(payload["messages"])
        return [m for m in incoming if m.role == "system"], [m for m in incoming if m.role != "system"]

    def upstream_payload(
        self, payload: dict[str, Any], sent: list[Message], request: Request, session: str
    ) -> tuple[dict[str, Any], bool]:
        messages = to_openai(sent)
        messages = chat_with_breakpoint(payload, messages, self.config.cache_breakpoint_models) or messages
        return with_usage_requested(self.cache_key({**payload, "messages": messages}, request, session))

    def answer(self, upstream: Answer) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        reply, message = completion(upstream)
        meta = {name: reply.get(name) for name in ("id", "model", "created", "usage", "system_fingerprint")}
        meta["finish_reason"] = reply["choices"][0].get("finish_reason")
        return reply, message, meta

    def reply_messages(self, message: dict[str, Any], meta: dict[str, Any]) -> tuple[Message, ...]:
        return (reply_message(message, meta),)

    def replay(self, done: StoredTurn, streaming: bool) -> Response:
        told = stored_completion(done)
        if not streaming:
            return JSONResponse(told)
        return Response(completion_events(told), media_type="text/event-stream")
