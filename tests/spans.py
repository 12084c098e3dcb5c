"""The spans a test reads back: the process's tracer provider (OpenTelemetry allows one to be set)
exporting into one in-memory exporter, attached once whichever test module asks first.

A test module that needs the ``otel`` extra skips itself first, then imports the fixture::

    pytest.importorskip("opentelemetry.sdk", reason="the 'otel' extra")
    from tests.spans import spans
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["spans"]

_EXPORTER = InMemorySpanExporter()
_ATTACHED: list[TracerProvider] = []  # the provider the exporter was attached to, once


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans finished during the test (and only those)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # another test (the README's) may have set one already
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not _ATTACHED:
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        _ATTACHED.append(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()
