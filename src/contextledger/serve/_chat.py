"""``POST /v1/chat/completions``: OpenAI's chat completions through the proxy.

Stateless mode (no session header): the client sends its whole history; the configured strategy
compacts it and the projection goes upstream; nothing is kept.  Session mode runs the one session
flow (:mod:`contextledger.serve._flow`) with :class:`ChatFormat` reading and writing the messages.

System messages a client sends in session mode are the instructions for that call: they are put
first in the request and not stored, so a client that sends its system prompt every time (as
OpenAI clients do) does not pile up copies of it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contextledger.compaction import CompactionStrategy, compact_with_report
from contextledger.exceptions import ProxyError
from contextledger.history import StoredTurn
from contextledger.messages import Message, to_openai
from contextledger.serve._bodies import BodyMemo, Compacted, joined
from contextledger.serve._config import ServeConfig
from contextledger.serve._metrics import Metrics
from contextledger.serve._relay import Relay, completion
from contextledger.serve._replies import completion_events, reply_message, stored_completion
from contextledger.serve._requests import (
    MessageReader,
    check_payload,
    parse_payload,
    refuse_invalid,
    without_metadata,
)
from contextledger.serve._tenants import request_tenant
from contextledger.serve._upstream import Answer, Upstream, passed_back
from contextledger.serve._usage import CostMeter, with_usage_requested
from contextledger.tokenizers import Tokenizer

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

    def __init__(
        self,
        config: ServeConfig,
        upstream: Upstream,
        relay: Relay,
        metrics: Metrics,
        cost: CostMeter,
        strategy: CompactionStrategy | None,
        tokenizer: Tokenizer,
    ) -> None:
        self.config = config
        self.upstream = upstream
        self.relay = relay
        self.metrics = metrics
        self.cost = cost
        self.strategy = strategy
        self.tokenizer = tokenizer
        self.reader = MessageReader()

    # Stateless mode ---------------------------------------------------------------------------

    async def stateless_body(self, request: Request, body: bytes) -> Response:
        """A stateless request, read as its messages' bytes where it can be: a history sent again
        is looked up message by message, not parsed, and the messages kept go upstream as the bytes
        that came in.  A body that cannot be read so (not strict JSON, a malformed message, the
        library's private key in a message) is read whole, which refuses it with its own message."""
        split = self.reader.split(body, "messages")
        if split is not None:
            incoming = self.reader.read_split(split)
            if incoming is not None:
                payload = check_payload(split.payload, split.items)
                return await self.stateless(request, payload, body, incoming, split.items, split.memo)
        payload = parse_payload(body)
        return await self.stateless(request, payload, body, self.reader.read(payload["messages"]), None)

    async def stateless(
        self,
        request: Request,
        payload: dict[str, Any],
        body: bytes,
        incoming: list[Message],
        items: list[bytes] | None,
        memo: BodyMemo | None = None,
    ) -> Response:
        """``incoming``: the messages read from ``payload["messages"]``, or (``items`` given) from
        the items of a :class:`SplitBody`, whose ``payload`` holds an empty array in their place;
        ``memo``: the split's, where what is made of the messages is kept for the same body again."""
        # Every message is read, strategy or not, so a malformed one is refused here and not upstream
        # (the reader remembers what it has read: a repeated history costs little).  With no strategy
        # the body then goes as it came.
        made: Compacted[list[bytes]] | None = memo.recall(incoming) if memo is not None else None
        if made is None:
            refuse_invalid(incoming)
            made = await self._compacted(incoming, items)
            if memo is not None:
                memo.keep(incoming, made)
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
        sent, forwarded = incoming, items
        if made.result is not None:
            self.metrics.count(self.metrics.tokens_before, "stateless", amount=made.result.before["included_tokens"])
            self.metrics.count(self.metrics.tokens_after, "stateless", amount=made.result.after["included_tokens"])
            if made.result.changed:
                sent, forwarded, rewrite = made.result.messages, made.forwarded, True
        if rewrite and forwarded is not None:
            body = joined(payload, "messages", forwarded)
        elif rewrite:
            messages = to_openai(sent) if sent is not incoming else payload["messages"]
            body = json.dumps({**payload, "messages": messages}, ensure_ascii=False).encode("utf-8")
        headers = self.upstream.headers(request.headers)
        if payload.get("stream") is True:
            usage = functools.partial(self.cost.answered, self.cost.expect("stateless", payload, sent))
            return await self.relay.stream(headers, body, finish=None, release=None, usage=usage, hide_usage=hide_usage)
        upstream = await self.relay.call(headers, body)
        reply, _ = completion(upstream)  # one rule in both modes: a 200 that is no completion is the upstream's fault
        return Response(
            upstream.content,
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type", "application/json"),
            headers=passed_back(upstream.headers),
            background=self.cost.after_answer("stateless", payload, sent, reply.get("usage")),
        )

    async def _compacted(self, incoming: list[Message], items: list[bytes] | None) -> Compacted[list[bytes]]:
        """The strategy's compaction of ``incoming`` (read from ``items`` when given), and what of
        it is forwarded as bytes."""
        if self.strategy is None:
            return Compacted(None, None)
        result = await compact_with_report(incoming, strategy=self.strategy, tokenizer=self.tokenizer)
        forwarded = _as_sent(result.messages, incoming, items) if result.changed and items is not None else None
        return Compacted(result, forwarded)

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
        return with_usage_requested(self.cache_key({**payload, "messages": to_openai(sent)}, request, session))

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
