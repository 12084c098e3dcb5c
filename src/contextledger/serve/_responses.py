"""``POST /v1/responses``: OpenAI's Responses API through the proxy, compacted statelessly.

The client's ``input`` items are read with :func:`contextledger.messages.from_responses` (the
conversion the Agents SDK integration uses), compacted with the proxy's strategy and written back
with :func:`~contextledger.messages.to_responses`.  Every item the strategy keeps goes upstream as
the very object the client sent, so ids, encrypted reasoning and fields this library does not know
pass byte for byte; a reasoning item stays with the item it precedes and a call with its output,
as in every other format (SPEC §12).

Two inputs are forwarded as they came, with ``X-Contextledger-Compaction`` saying why:

- a request with ``previous_response_id``: the upstream holds the conversation before this input,
  so cutting the input alone would cut blind (``skipped; previous_response_id``);
- a string ``input``: one user message, nothing to cut (``skipped; text input``).

Session mode (the session header) is served on ``/v1/chat/completions``; here it is refused with a
400 that says so, never silently ignored.  A stream is passed through event by event as it arrives;
one that breaks or ends before its last event (``response.completed``, ``.failed``,
``.incomplete`` or ``error``) gets an ``error`` event of the API's own shape at its end.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from starlette.responses import Response

from contextledger.compaction import CompactionStrategy, compact_with_report
from contextledger.exceptions import InvalidMessageError, ProxyError
from contextledger.messages import Message, from_responses, kept_as_given, to_responses, validate
from contextledger.serve._config import ServeConfig
from contextledger.serve._metrics import Metrics
from contextledger.serve._relay import _CleanupStream
from contextledger.serve._requests import json_object
from contextledger.serve._tenants import SESSION_HEADER, tenant_of
from contextledger.serve._upstream import Upstream, passed_back, timeout_error, upstream_error
from contextledger.tokenizers import Tokenizer

__all__ = ["COMPACTION_HEADER", "ResponsesRoute"]

COMPACTION_HEADER = "X-Contextledger-Compaction"

_LAST_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})


def _bad(message: str) -> ProxyError:
    return ProxyError(message, status=400, error_type="invalid_request_error", code="invalid_request")


def _input_items(payload: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The request's input items; None for a string input.  Anything else is a 400."""
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("a Responses request needs 'model', a non-empty string")
    items = payload.get("input")
    if isinstance(items, str):
        return None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise _bad("'input' must be a string or a list of Responses API items (objects)")
    return items


def _conversation(items: list[dict[str, Any]]) -> list[Message]:
    """The items as messages, refused (400) where the upstream would refuse them: an item that is
    not one, a call without its output, an output without its call."""
    try:
        messages = from_responses(items)
    except InvalidMessageError as error:
        raise _bad(f"'input' is not valid: {error}") from None
    problems = validate(messages)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise _bad(f"'input' is not a valid conversation: {problems[0].detail}{more}")
    return messages


class ResponsesRoute:
    """The handler's work, apart from the app: read, compact, forward, pass the answer back."""

    def __init__(
        self,
        upstream: Upstream,
        metrics: Metrics,
        strategy: CompactionStrategy | None,
        tokenizer: Tokenizer,
        config: ServeConfig,
    ) -> None:
        self.upstream = upstream
        self.metrics = metrics
        self.strategy = strategy
        self.tokenizer = tokenizer
        self.prompt_cache_key = config.prompt_cache_key
        self.trust_tenant_header = config.trust_tenant_header

    async def answer(self, given: Mapping[str, str], body: bytes, headers: dict[str, str]) -> Response:
        """The answer to one request (``given``: the client's headers; ``headers``: the upstream's)."""
        if SESSION_HEADER in given:
            raise ProxyError(
                "session mode is served on /v1/chat/completions; /v1/responses takes the whole input",
                status=400,
                code="session_not_supported",
            )
        payload = json_object(body, "a Responses API JSON object")
        if "stream" in payload and not isinstance(payload["stream"], bool):
            raise _bad(f"'stream' must be true or false, got {payload['stream']!r}")
        try:
            tenant = tenant_of(given, trust_tenant_header=self.trust_tenant_header)
        except ProxyError:  # a keyless client: the conversation alone names the cache key
            tenant = ""
        sent, said = await self.prepare(payload, tenant)
        if payload.get("stream") is True:
            return await self.stream(headers, sent, said)
        upstream = await self.call(headers, sent)
        media = upstream.headers.get("content-type", "application/json")
        back = {**passed_back(upstream.headers), **said}
        return Response(upstream.content, upstream.status_code, headers=back, media_type=media)

    async def prepare(self, payload: dict[str, Any], tenant: str) -> tuple[bytes, dict[str, str]]:
        """The body to send upstream, and the headers that say what the proxy did."""
        items = _input_items(payload)
        said: dict[str, str] = {}
        if payload.get("previous_response_id") is not None:
            # Its input may answer calls the stored response made: read nothing into it.
            said[COMPACTION_HEADER] = "skipped; previous_response_id"
        elif items is None:
            said[COMPACTION_HEADER] = "skipped; text input"
        else:
            messages = _conversation(items)
            if self.strategy is None:
                said[COMPACTION_HEADER] = "unchanged"
            else:
                result = await compact_with_report(messages, strategy=self.strategy, tokenizer=self.tokenizer)
                self.metrics.count(self.metrics.tokens_before, "stateless", amount=result.before["included_tokens"])
                self.metrics.count(self.metrics.tokens_after, "stateless", amount=result.after["included_tokens"])
                said[COMPACTION_HEADER] = "compacted" if result.changed else "unchanged"
                if result.changed:
                    payload = {**payload, "input": kept_as_given(to_responses(result.messages), items)}
        if self.prompt_cache_key != "off" and "prompt_cache_key" not in payload:
            payload = {**payload, "prompt_cache_key": self._cache_key(payload, items, tenant)}
        return json.dumps(payload, ensure_ascii=False).encode("utf-8"), said

    @staticmethod
    def _cache_key(payload: Mapping[str, Any], items: list[dict[str, Any]] | None, tenant: str) -> str:
        """A hash of what every request of the conversation starts with: its instructions and its
        first input item (``--prompt-cache-key``; there are no sessions here, so both modes key so)."""
        first = items[0] if items else payload.get("input")
        seed = "responses\0" + tenant + json.dumps([payload.get("instructions"), first], sort_keys=True)
        return "cl-" + hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    async def call(self, headers: dict[str, str], body: bytes) -> httpx.Response:
        started = time.perf_counter()
        upstream = await self.upstream.send("POST", "/responses", headers, body, stream=False)
        outcome = "answered" if upstream.status_code < 400 else "error"
        self.metrics.observe(self.metrics.upstream_seconds, time.perf_counter() - started, "responses", outcome)
        if upstream.status_code >= 400:
            raise upstream_error(upstream.status_code, upstream.content, upstream.headers)
        return upstream

    async def stream(self, headers: dict[str, str], body: bytes, said: Mapping[str, str]) -> _CleanupStream:
        started = time.perf_counter()
        upstream = await self.upstream.send("POST", "/responses", headers, body, stream=True)
        if upstream.status_code >= 400:
            content = await upstream.aread()
            await upstream.aclose()
            raise upstream_error(upstream.status_code, content, upstream.headers)

        async def events() -> AsyncIterator[bytes]:
            watcher = _LastEvent()
            problem: str | None = None
            try:
                async for data in upstream.aiter_bytes():
                    watcher.feed(data)
                    yield data
            except httpx.TimeoutException:
                problem = str(timeout_error())
            except httpx.HTTPError as error:
                problem = f"the upstream's stream broke ({type(error).__name__})"
            if problem is None and watcher.last not in _LAST_EVENTS:
                problem = "the upstream's stream ended before its last event"
            if problem is not None:
                # The Responses API's error event, with the error also nested as the official clients read it.
                said_error = {"type": "upstream_error", "code": "upstream_stream_broken", "message": problem}
                event: dict[str, Any] = {"type": "error", "code": "upstream_stream_broken", "message": problem}
                event.update(param=None, error=said_error)
                yield b"\n\nevent: error\ndata: " + json.dumps(event).encode("utf-8") + b"\n\n"
            outcome = "broken" if problem is not None else "answered"
            self.metrics.observe(self.metrics.upstream_seconds, time.perf_counter() - started, "responses", outcome)

        async def cleanup() -> None:
            await upstream.aclose()

        return _CleanupStream(events(), cleanup, {**passed_back(upstream.headers), **said})


class _LastEvent:
    """Reads the ``type`` of each server-sent event as the bytes pass, keeping the last one."""

    def __init__(self) -> None:
        self.last: str | None = None
        self._pending = b""

    def feed(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        if len(self._pending) > 1 << 24:
            self._pending = b""  # no event line is this long; drop it rather than hold it
        for line in lines:
            if line.startswith(b"data:"):
                try:
                    kind = json.loads(line[5:]).get("type")
                except (ValueError, AttributeError):
                    continue
                if isinstance(kind, str):
                    self.last = kind
