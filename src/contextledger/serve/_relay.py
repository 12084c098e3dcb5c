"""The proxy's calls to the upstream: one answer, or a stream passed through as it arrives.

Both count the upstream's latency in the metrics and turn its errors into :class:`ProxyError`
with its retry headers.  A stream is relayed event by event while an assembler rebuilds the
reply; ``finish`` (a session's turn write) runs after the last event and before the stream's
closing event (``[DONE]``, or the Messages API's ``message_stop``), so a client that saw it knows
its turn is stored, and a turn that could not be stored ends the stream with an error event
instead.  What differs between the APIs (the upstream path, how events are assembled, the error
event's shape) is the :class:`Wire` a call is made with.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from contextledger._upstream_tracing import UpstreamCallTrace, trace_upstream_call
from contextledger.clients import read_usage
from contextledger.exceptions import ContextLedgerError, ProxyError
from contextledger.serve._errors import store_failure
from contextledger.serve._metrics import Metrics
from contextledger.serve._stream import StreamAssembler, sse_event
from contextledger.serve._upstream import (
    Answer,
    StreamBroken,
    Upstream,
    error_body,
    passed_back,
    timeout_error,
    upstream_error,
)

__all__ = ["CHAT_WIRE", "Assembly", "Finish", "Relay", "UsageSink", "Wire", "completion"]

Finish = Callable[[dict[str, Any], dict[str, Any]], Awaitable[bool]]
"""Stores a streamed turn: called with the assembled message and the reply's fields."""


class Assembly(Protocol):
    """What the relay reads a stream with: whole events out, the reply kept (see ``_stream.py``)."""

    error: dict[str, Any] | None
    usage: dict[str, Any] | None

    def feed(self, data: bytes) -> list[bytes]: ...

    @property
    def complete(self) -> bool: ...

    def message(self) -> dict[str, Any]: ...

    def meta(self) -> dict[str, Any]: ...

    def closing(self) -> bytes:
        """The stream's last event, held back until the turn is stored."""
        ...


@dataclass(frozen=True, slots=True)
class Wire:
    """One API as the relay speaks it: the metrics' endpoint label, the upstream path, the
    assembler of its streams, its error event and how it reads an upstream error."""

    endpoint: str
    path: str
    assembler: Callable[[bool], Assembly]
    error_event: Callable[[ProxyError], bytes]
    upstream_error: Callable[[int, bytes, Mapping[str, str]], ProxyError] = upstream_error
    whole_reply: bool = False
    """The assembled message is the API's whole reply body (a Responses ``response``): the meter
    reads it, not only its usage, for what the upstream billed apart (its compaction items)."""


class UsageSink(Protocol):
    """Takes a finished stream's ``usage`` and, on a wire with ``whole_reply``, the whole reply."""

    def __call__(self, raw_usage: object, *, reply: Mapping[str, Any] | None = None) -> object: ...


def _chat_error_event(failure: ProxyError) -> bytes:
    return sse_event(error_body(str(failure), failure.error_type, failure.code))


CHAT_WIRE = Wire(
    "chat_completions", "/chat/completions", lambda hide: StreamAssembler(hide_usage=hide), _chat_error_event
)
"""OpenAI's chat completions."""


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

    def __init__(self, upstream: Upstream, metrics: Metrics, wire: Wire = CHAT_WIRE) -> None:
        self.upstream = upstream
        self.metrics = metrics
        self.wire = wire

    def traced(self, body: bytes | Mapping[str, Any]) -> UpstreamCallTrace:
        """The span of a call about to be made for the request ``body`` (the client's, or what goes
        upstream), started now: a flow that shapes the request first starts it before, and hands it
        to :meth:`call` or :meth:`stream`."""
        return trace_upstream_call(self.upstream.provider, self.upstream.base_url, body, read_usage=read_usage)

    async def call(self, headers: dict[str, str], body: bytes, traced: UpstreamCallTrace | None = None) -> Answer:
        started = time.perf_counter()
        traced = traced if traced is not None else self.traced(body)
        try:
            upstream = await self.upstream.send("POST", self.wire.path, headers, body)
        except BaseException as error:
            traced.failed(error, _error_type(error))
            raise
        self.metrics.observe(
            self.metrics.upstream_seconds,
            time.perf_counter() - started,
            self.wire.endpoint,
            "answered" if upstream.status_code < 400 else "error",
        )
        if upstream.status_code >= 400:
            failure = self.wire.upstream_error(upstream.status_code, upstream.content, upstream.headers)
            traced.failed(failure, str(upstream.status_code))
            raise failure
        traced.answered(upstream.content)
        return upstream

    async def stream(
        self,
        headers: dict[str, str],
        body: bytes,
        *,
        finish: Finish | None,
        release: Callable[[], Awaitable[None]] | None,
        trailer: Callable[[], bytes] | None = None,
        usage: UsageSink | None = None,
        hide_usage: bool = False,
        traced: UpstreamCallTrace | None = None,
    ) -> Response:
        """Pass the upstream's events through as they arrive; ``finish`` runs before ``[DONE]`` is sent.

        ``release`` runs when the returned stream ends, however it ends; when the upstream could not
        be reached or refused the request (raised here), it has not run and is the caller's to run.

        ``usage`` is given the upstream's ``usage`` once a stream has ended properly (it was billed,
        whether or not a turn is then stored); ``hide_usage`` keeps the usage chunk from a client
        that did not ask for it (the proxy asked on its behalf).
        """
        started = time.perf_counter()
        traced = traced if traced is not None else self.traced(body)
        try:
            upstream = await self.upstream.open_stream("POST", self.wire.path, headers, body)
            if upstream.status_code >= 400:
                content = await upstream.aread()
                await upstream.aclose()
                failure = self.wire.upstream_error(upstream.status_code, content, upstream.headers)
                traced.failed(failure, str(upstream.status_code))
                raise failure
        except BaseException as error:
            # Not released: the caller still holds what ``release`` frees (a session's lock) and may
            # send the request again, compacted harder, while it does.
            traced.failed(error, _error_type(error))  # nothing if already ended
            raise

        async def events() -> Any:
            assembler = self.wire.assembler(hide_usage)
            failure: ProxyError | None = None
            try:
                async for data in upstream.chunks():
                    for event in assembler.feed(data):
                        yield event
            except StreamBroken as error:
                failure = timeout_error() if error.timed_out else _broken(f"the upstream's stream broke ({error})")
            outcome = "answered"
            if failure is None and assembler.error is not None:
                outcome = "error"  # the upstream's own error event has been passed on as it came
            elif failure is None and not assembler.complete:
                failure = _broken("the upstream's stream ended before it said it was done")
            # The upstream's part ends here; storing the turn is the proxy's own.
            if failure is not None:
                traced.failed(failure, failure.code)
            elif outcome == "error":
                traced.failed(ProxyError("the upstream's stream carried an error event", status=502), "error_event")
            elif traced.recording:
                traced.answered({**assembler.message(), **assembler.meta(), "usage": assembler.usage})
            if failure is None and outcome == "answered" and usage is not None:
                usage(assembler.usage, reply=assembler.message() if self.wire.whole_reply else None)
            if failure is None and outcome == "answered" and finish is not None:
                try:
                    await finish(assembler.message(), assembler.meta())
                except ProxyError as error:
                    failure = error
                except ContextLedgerError as error:
                    failure = store_failure(error, "the turn could not be stored")
            if failure is not None:
                outcome = "broken"
                if finish is not None:
                    self.metrics.count(self.metrics.turns, "failed")
                yield self.wire.error_event(failure)
            elif outcome == "answered":
                if trailer is not None and (said := trailer()):
                    yield said
                yield assembler.closing()
            self.metrics.observe(
                self.metrics.upstream_seconds, time.perf_counter() - started, self.wire.endpoint, outcome
            )

        async def cleanup() -> None:
            traced.end()  # a stream the client walked away from ends here, its outcome unknown
            await upstream.aclose()
            if release is not None:
                await release()

        return _CleanupStream(events(), cleanup, passed_back(upstream.headers))


def completion(upstream: Answer) -> tuple[dict[str, Any], dict[str, Any]]:
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


def _error_type(error: BaseException) -> str | None:
    """A failure's ``error.type`` in traces: the proxy's code for it (``upstream_timeout``...), else its class."""
    return error.code if isinstance(error, ProxyError) else None


def _broken(reason: str) -> ProxyError:
    return ProxyError(
        f"{reason}; nothing was stored and no fact was admitted",
        status=502,
        error_type="upstream_error",
        code="upstream_stream_broken",
    )
