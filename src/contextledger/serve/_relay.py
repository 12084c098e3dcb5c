"""The proxy's calls to the upstream: one answer, or a stream passed through as it arrives.

Both count the upstream's latency in the metrics and turn its errors into :class:`ProxyError`
with its retry headers.  A stream is relayed event by event while an assembler rebuilds the
reply; ``finish`` (a session's turn write) runs after the last event and before ``[DONE]``, so a
client that saw ``[DONE]`` knows its turn is stored, and a turn that could not be stored ends the
stream with an error event instead.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from contextledger.exceptions import ContextLedgerError, ProxyError
from contextledger.serve._metrics import Metrics
from contextledger.serve._stream import DONE_EVENT, StreamAssembler, sse_event
from contextledger.serve._upstream import Upstream, error_body, passed_back, timeout_error, upstream_error

__all__ = ["Finish", "Relay", "completion"]

Finish = Callable[[dict[str, Any], dict[str, Any]], Awaitable[bool]]
"""Stores a streamed turn: called with the assembled message and the reply's fields."""


class _CleanupStream(StreamingResponse):
    """A streaming response that runs ``cleanup`` when the response ends, however it ends
    (finished, failed, or the client went away before or during the stream)."""

    def __init__(self, content: Any, cleanup: Callable[[], Awaitable[None]], headers: Mapping[str, str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"})
        self._cleanup = cleanup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._cleanup()


class Relay:
    """Sends requests to the upstream for the proxy's handlers."""

    def __init__(self, upstream: Upstream, metrics: Metrics) -> None:
        self.upstream = upstream
        self.metrics = metrics

    async def call(self, headers: dict[str, str], body: bytes) -> httpx.Response:
        started = time.perf_counter()
        upstream = await self.upstream.send("POST", "/chat/completions", headers, body, stream=False)
        self.metrics.observe(
            self.metrics.upstream_seconds,
            time.perf_counter() - started,
            "chat_completions",
            "answered" if upstream.status_code < 400 else "error",
        )
        if upstream.status_code >= 400:
            raise upstream_error(upstream.status_code, upstream.content, upstream.headers)
        return upstream

    async def stream(
        self,
        headers: dict[str, str],
        body: bytes,
        *,
        finish: Finish | None,
        release: Callable[[], Awaitable[None]] | None,
        trailer: Callable[[], bytes] | None = None,
        usage: Callable[[object], object] | None = None,
        hide_usage: bool = False,
    ) -> Response:
        """Pass the upstream's events through as they arrive; ``finish`` runs before ``[DONE]`` is sent.

        ``usage`` is given the upstream's ``usage`` once a stream has ended properly (it was billed,
        whether or not a turn is then stored); ``hide_usage`` keeps the usage chunk from a client
        that did not ask for it (the proxy asked on its behalf).
        """
        started = time.perf_counter()
        try:
            upstream = await self.upstream.send("POST", "/chat/completions", headers, body, stream=True)
            if upstream.status_code >= 400:
                content = await upstream.aread()
                await upstream.aclose()
                raise upstream_error(upstream.status_code, content, upstream.headers)
        except BaseException:
            if release is not None:
                await release()
            raise

        async def events() -> Any:
            assembler = StreamAssembler(hide_usage=hide_usage)
            failure: ProxyError | None = None
            try:
                async for data in upstream.aiter_bytes():
                    for event in assembler.feed(data):
                        yield event
            except httpx.TimeoutException:
                failure = timeout_error()
            except httpx.HTTPError as error:
                failure = _broken(f"the upstream's stream broke ({type(error).__name__})")
            outcome = "answered"
            if failure is None and assembler.error is not None:
                outcome = "error"  # the upstream's own error event has been passed on as it came
            elif failure is None and not assembler.complete:
                failure = _broken("the upstream's stream ended before it said it was done")
            if failure is None and outcome == "answered" and usage is not None:
                usage(assembler.usage)
            if failure is None and outcome == "answered" and finish is not None:
                meta = {
                    "finish_reason": assembler.finish_reason,
                    "id": assembler.response_id,
                    "model": assembler.model,
                    "created": assembler.created,
                    "usage": assembler.usage,
                }
                try:
                    await finish(assembler.message(), meta)
                except ProxyError as error:
                    failure = error
                except ContextLedgerError as error:
                    failure = ProxyError(
                        f"the turn could not be stored: {error}",
                        status=503,
                        error_type="server_error",
                        code="store_unavailable",
                    )
            if failure is not None:
                outcome = "broken"
                if finish is not None:
                    self.metrics.count(self.metrics.turns, "failed")
                yield sse_event(error_body(str(failure), failure.error_type, failure.code))
            elif outcome == "answered":
                if trailer is not None and (said := trailer()):
                    yield said
                yield DONE_EVENT
            self.metrics.observe(
                self.metrics.upstream_seconds, time.perf_counter() - started, "chat_completions", outcome
            )

        async def cleanup() -> None:
            await upstream.aclose()
            if release is not None:
                await release()

        return _CleanupStream(events(), cleanup, passed_back(upstream.headers))


def completion(upstream: httpx.Response) -> tuple[dict[str, Any], dict[str, Any]]:
    """The upstream's chat completion and its first choice's message, or 502: a client must never
    take a malformed answer for a completion, nor a session store it."""
    try:
        reply = upstream.json()
        message = reply["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProxyError(
            "the upstream's reply is not a chat completion with a message; nothing was stored",
            status=502,
            error_type="upstream_error",
            code="upstream_invalid_response",
            headers=passed_back(upstream.headers),
        ) from None
    return reply, message


def _broken(reason: str) -> ProxyError:
    return ProxyError(
        f"{reason}; nothing was stored and no fact was admitted",
        status=502,
        error_type="upstream_error",
        code="upstream_stream_broken",
    )
