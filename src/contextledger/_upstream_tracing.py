"""The CLIENT span of each call the proxy makes to its upstream.

Kept apart from :mod:`contextledger._tracing`, whose helpers it shares: the library's own spans
(model calls, compaction, agent runs, fact admissions) are read there without the proxy's
reading of each API's replies.  Like every span of the package, nothing here imports
OpenTelemetry unless the application already did.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from contextledger._tracing import (
    PROVIDER_COMPACTIONS,
    _failed,
    _present,
    _request_settings,
    _server,
    _set,
    _tracer,
    _usage,
)

__all__ = ["UpstreamCallTrace", "trace_upstream_call"]


def _finish_reasons(reply: Mapping[str, Any]) -> list[str] | None:
    """Why the upstream stopped, in each API's words: each chat choice's ``finish_reason`` (or a
    stream's), the Messages API's ``stop_reason``, a Responses API response's ``status``."""
    choices = reply.get("choices")
    if isinstance(choices, list):
        found = [choice.get("finish_reason") for choice in choices if isinstance(choice, Mapping)]
    else:
        found = [reply.get("finish_reason") or reply.get("stop_reason") or reply.get("status")]
    reasons = [reason for reason in found if isinstance(reason, str) and reason]
    return reasons or None


def _compaction_items(reply: Mapping[str, Any]) -> int | None:
    """The compaction passes a Responses reply shows (OpenAI reports no usage of its own for them:
    they are in the reply's counts): its ``compaction`` output items, or one for a
    ``/responses/compact`` answer; None for a reply that shows none."""
    output = reply.get("output")
    items = (
        sum(1 for i in output if isinstance(i, Mapping) and i.get("type") == "compaction")
        if isinstance(output, list)
        else 0
    )
    if reply.get("object") == "response.compaction":
        return max(items, 1)
    return items or None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class UpstreamCallTrace:
    """The CLIENT span of one call the proxy makes to its upstream, from the request going out to
    the answer read to its end (a stream's last event); inert when the application traces nothing."""

    def __init__(self, span: Any | None, read_usage: Callable[[Any], Any] | None = None) -> None:
        self._span = span
        self._read_usage = read_usage

    @property
    def recording(self) -> bool:
        return self._span is not None

    def answered(self, reply: Mapping[str, Any] | bytes) -> None:
        """End the span with what the upstream's answer (its body, or a stream's reply) says."""
        if self._span is None:
            return
        if isinstance(reply, bytes):
            try:
                reply = json.loads(reply)
            except (ValueError, RecursionError):
                reply = {}
        if isinstance(reply, Mapping):
            usage = reply.get("usage")
            read = _usage(None if self._read_usage is None else self._read_usage(usage))
            if read and read.get(PROVIDER_COMPACTIONS) is None:
                read[PROVIDER_COMPACTIONS] = _compaction_items(reply)
            _set(
                self._span,
                {
                    "gen_ai.response.model": _text(reply.get("model")),
                    "gen_ai.response.id": _text(reply.get("id")),
                    "gen_ai.response.finish_reasons": _finish_reasons(reply),
                    **read,
                },
            )
        self.end()

    def failed(self, error: BaseException, error_type: str | None = None) -> None:
        """End the span as failed: ``error_type`` is the upstream's status, or the error's class."""
        if self._span is None:
            return
        _failed(self._span, error, error_type)
        self.end()

    def end(self) -> None:
        """End the span as it stands (a stream the client walked away from); only the first end counts."""
        if self._span is not None:
            span, self._span = self._span, None
            span.end()

    @contextlib.contextmanager
    def shaping(self) -> Iterator[None]:
        """The span made current while the proxy shapes the request (compacts it), so that the
        compaction's span is a child of the call it shaped, as in the library's own calls."""
        if self._span is None:
            yield
            return
        from opentelemetry.trace import use_span  # noqa: PLC0415  (loaded: a span exists)

        with use_span(self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield


def trace_upstream_call(
    provider: str, base_url: str, body: bytes | Mapping[str, Any], *, read_usage: Callable[[Any], Any]
) -> UpstreamCallTrace:
    """Start the span of a call to the upstream at ``base_url`` for the request ``body`` (its bytes,
    read again for its model and settings only when the application traces, or already read).
    ``read_usage`` turns the answer's ``usage`` object into a usage (the clients' reader, handed in
    by the caller: the clients import this module, so it never imports them)."""
    tracer = _tracer()
    if tracer is None:
        return UpstreamCallTrace(None)
    from opentelemetry.trace import SpanKind  # noqa: PLC0415  (loaded: _tracer checked)

    payload: Any = body
    if isinstance(body, bytes):
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            payload = None
    payload = payload if isinstance(payload, dict) else {}
    model = _text(payload.get("model"))
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        **_server(base_url),
        **_request_settings(payload),
    }
    name = "chat" if model is None else f"chat {model}"
    span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=_present(attributes))
    return UpstreamCallTrace(span, read_usage)
