"""The compaction a provider bills reaches the proxy's ``/metrics`` and its upstream spans:
Anthropic's ``usage.iterations`` (billed apart from the request's counts) and the compaction
items a Responses reply returns, whole and streamed."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from tests.optional_imports import try_import

with try_import("serve") as serve_extra:
    import httpx
    from tests.serve.provider_compaction_upstream import CompactingUpstream, compacting_upstream

    from contextledger.serve import ServeConfig, create_app

pytest.importorskip("opentelemetry.sdk", reason="the 'otel' extra")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from tests.spans import spans

from contextledger._tracing import (
    PROVIDER_COMPACTION_INPUT_TOKENS,
    PROVIDER_COMPACTION_OUTPUT_TOKENS,
    PROVIDER_COMPACTIONS,
)

__all__ = ["spans"]  # the fixture, for the tests below

pytestmark = serve_extra.skip

API = Literal["responses", "anthropic"]
HEADERS = {
    "authorization": "Bearer sk-client",
    "x-api-key": "sk-client",
    "content-type": "application/json",
    "anthropic-beta": "compact-2026-01-12",
}
LONG = "tell me everything about it " * 80


@pytest.fixture(scope="module")
def upstream() -> Iterator[CompactingUpstream]:
    with compacting_upstream() as running:
        yield running


def body(api: API, *, stream: bool = False) -> dict[str, Any]:
    if api == "responses":
        management: Any = [{"type": "compaction", "compact_threshold": 100}]
        asked = {"model": "fake", "input": [{"role": "user", "content": LONG}], "context_management": management}
        return {**asked, "stream": True} if stream else asked
    management = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 100}}]}
    return {
        "model": "fake",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": LONG}],
        "context_management": management,
    }


def ask(upstream: CompactingUpstream, api: API, times: int, *, stream: bool = False) -> str:
    """``times`` requests that make the upstream compact; the proxy's /metrics after them."""
    with tempfile.TemporaryDirectory() as folder:
        config = ServeConfig(
            upstream.base_url,
            anthropic_upstream=upstream.base_url.removesuffix("/v1"),
            store=f"sqlite:{Path(folder) / 's.db'}",
        )
        app = create_app(config)

        async def run() -> str:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
                path = "/v1/responses" if api == "responses" else "/v1/messages"
                for _ in range(times):
                    answer = await client.post(path, content=json.dumps(body(api, stream=stream)), headers=HEADERS)
                    assert answer.status_code == 200, answer.text
                    if stream:
                        assert '"type": "compaction"' in answer.text  # the item reached the client
                        assert answer.text.count('"type": "response.completed"') == 1
                await asyncio.sleep(0)  # the meter counts once the answer is sent
                metrics = await client.get("/metrics")
            await app.state.proxy.close()
            return metrics.text

        return asyncio.run(run())


def series(text: str, name: str) -> float:
    found = re.search(rf'^{name}\{{mode="stateless"\}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_anthropic_compaction_iterations_reach_metrics_and_spans(
    upstream: CompactingUpstream, spans: InMemorySpanExporter
) -> None:
    text = ask(upstream, "anthropic", 2)
    assert series(text, "contextledger_upstream_compactions_total") == 2
    # What the upstream billed for each compaction: its iterations, as it wrote them.
    billed = [record["reply"]["usage"]["iterations"][0] for record in upstream.received[-2:]]
    assert [entry["type"] for entry in billed] == ["compaction", "compaction"]
    effective = billed[0]["input_tokens"]
    assert series(text, "contextledger_upstream_compaction_input_tokens_total") == 2 * effective
    assert series(text, "contextledger_upstream_compaction_output_tokens_total") == 2 * 30
    assert series(text, "contextledger_upstream_input_tokens_total") == 2 * 50  # the request's own, apart
    calls = [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]
    assert len(calls) == 2
    for span in calls:
        attributes = dict(span.attributes or {})
        assert attributes[PROVIDER_COMPACTIONS] == 1
        assert attributes[PROVIDER_COMPACTION_INPUT_TOKENS] == effective
        assert attributes[PROVIDER_COMPACTION_OUTPUT_TOKENS] == 30
        assert attributes["gen_ai.usage.input_tokens"] == 50


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_compaction_items_are_counted_in_metrics_and_spans(
    upstream: CompactingUpstream, spans: InMemorySpanExporter, stream: bool
) -> None:
    text = ask(upstream, "responses", 3, stream=stream)
    assert series(text, "contextledger_upstream_compactions_total") == 3
    assert series(text, "contextledger_upstream_input_tokens_total") == sum(
        record["reply"]["usage"]["input_tokens"] for record in upstream.received[-3:]
    )
    assert series(text, "contextledger_upstream_compaction_input_tokens_total") == 0  # in the reply's own counts
    calls = [span for span in spans.get_finished_spans() if span.kind is SpanKind.CLIENT]
    assert [dict(span.attributes or {})[PROVIDER_COMPACTIONS] for span in calls] == [1, 1, 1]
    assert all(PROVIDER_COMPACTION_INPUT_TOKENS not in (span.attributes or {}) for span in calls)
