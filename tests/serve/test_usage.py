"""Real usage, read where the upstream reports it: for one sequence of calls, the runtime (the real
OpenAI-compatible client over HTTP), the spans and a real proxy's ``/metrics`` carry the numbers
the fake upstream reported, in OpenAI's, Anthropic's and DeepSeek's shapes, streamed or not; and
the proxy's prefix-cache estimate stands beside them."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

from contextledger.agents import Agent, AgentResponse
from contextledger.agents._response import sum_usage
from contextledger.clients import Usage

with try_import("openai") as openai_extra:
    import openai

    from contextledger.clients.openai import OpenAIChatClient

pytest.importorskip("opentelemetry.sdk", reason="the 'otel' extra")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.spans import spans

__all__ = ["spans"]  # the fixture, for the tests below

pytestmark = openai_extra.skip

KEY = "sk-usage-tenant-1"
# Long enough (about 2,000 tokens) for a provider to cache, and for the estimate's 1,024-token floor.
INSTRUCTIONS = "You are the billing desk's assistant. " + "Keep every answer short and exact. " * 230


def instructions(marker: str) -> str:
    """The instructions, opened by the test's own marker: the fake's prompt cache lives as long as the
    worker, so a prefix another test sent would otherwise be read from it on a first request."""
    return f"{marker} {INSTRUCTIONS}"


def normalised(shape: str, raw: dict[str, Any]) -> Usage:
    """The fake's report in the library's terms, worked out here from each vendor's documentation."""
    if shape == "anthropic":
        read, written = raw["cache_read_input_tokens"], raw["cache_creation_input_tokens"]
        return Usage(raw["input_tokens"] + read + written, raw["output_tokens"], False, read, written)
    if shape == "deepseek":
        return Usage(raw["prompt_tokens"], raw["completion_tokens"], False, raw["prompt_cache_hit_tokens"])
    return Usage(raw["prompt_tokens"], raw["completion_tokens"], False, raw["prompt_tokens_details"]["cached_tokens"])


def reported(fake_upstream: FakeUpstream, marker: str) -> list[dict[str, Any]]:
    """The usage the fake upstream reported for every request carrying ``marker``, in order."""
    return [record["usage"] for record in fake_upstream.received() if marker in str(record.get("body"))]


def metrics(proxy: Proxy) -> dict[str, float]:
    status, text = proxy.get("/metrics")
    assert status == 200
    values = {}
    for line in text.splitlines():
        if line.startswith(("contextledger_upstream_", "contextledger_estimated_")) and "_seconds" not in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def series(values: dict[str, float], name: str, **labels: str) -> float | None:
    wanted = name + "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"
    return values.get(wanted)


def check_metrics(values: dict[str, float], mode: str, usages: list[Usage]) -> None:
    """The proxy's counters of upstream-reported tokens are the sums of ``usages``, part by part."""
    total = sum_usage(usages)
    expected = {
        "input": total.input_tokens,
        "cache_read": total.cache_read_tokens,
        "cache_write": total.cache_write_tokens,
        "uncached_input": total.uncached_input_tokens,
        "output": total.output_tokens,
    }
    for part, value in expected.items():
        assert series(values, f"contextledger_upstream_{part}_tokens_total", mode=mode) == value, part


def chat_spans(exporter: InMemorySpanExporter, model: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == f"chat {model}"]


def span_usage(span: ReadableSpan) -> Usage:
    attributes = dict(span.attributes or {})
    return Usage(
        attributes.get("gen_ai.usage.input_tokens"),  # type: ignore[arg-type]
        attributes.get("gen_ai.usage.output_tokens"),  # type: ignore[arg-type]
        False,
        attributes.get("gen_ai.usage.cache_read.input_tokens"),  # type: ignore[arg-type]
        attributes.get("gen_ai.usage.cache_creation.input_tokens"),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("shape", ["openai", "anthropic", "deepseek"])
def test_the_runtime_the_spans_and_the_metrics_carry_the_upstream_s_cache_figures(
    shape: str, start_proxy: StartProxy, fake_upstream: FakeUpstream, spans: InMemorySpanExporter
) -> None:
    model = f"fake-cache-{shape}"
    marker = uuid.uuid4().hex
    questions = [f"{marker} first question", "second question", "third question"]
    with start_proxy("--price-profile", "anthropic") as proxy:
        client = OpenAIChatClient(model, base_url=proxy.base_url, api_key=KEY, max_retries=0)
        agent = Agent(client, name="billing", instructions=instructions(marker))
        session = agent.create_session()

        async def converse() -> list[AgentResponse]:
            return [await agent.run(question, session=session) for question in questions]

        responses = asyncio.run(converse())
        values = metrics(proxy)

    upstream = [normalised(shape, raw) for raw in reported(fake_upstream, marker)]
    assert len(upstream) == 3
    assert upstream[0].cache_read_tokens == 0
    assert all(usage.cache_read_tokens for usage in upstream[1:])  # each request repeats the one before
    if shape == "anthropic":
        assert all(usage.cache_write_tokens for usage in upstream)
    # The runtime: each call's usage, and each run's sum.
    assert [response.usage for response in responses] == upstream
    assert sum_usage(response.usage for response in responses) == sum_usage(upstream)
    # The spans: each chat span, and each run's invoke_agent span.
    assert [span_usage(span) for span in chat_spans(spans, model)] == upstream
    runs = [span for span in spans.get_finished_spans() if span.name == "invoke_agent billing"]
    assert [span_usage(span) for span in runs] == upstream
    # The proxy's metrics.
    check_metrics(values, "stateless", upstream)
    assert series(values, "contextledger_upstream_usage_reports_total", mode="stateless", reported="cache") == 3
    # Beside them, the estimate: all three requests' tokens, and the later two reading their prefix.
    estimate = {
        part: series(values, f"contextledger_estimated_{part}_total", mode="stateless", profile="anthropic")
        for part in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "uncached_input_tokens")
    }
    assert estimate["input_tokens"] == (estimate["cache_read_tokens"] or 0) + (estimate["uncached_input_tokens"] or 0)
    assert (estimate["cache_read_tokens"] or 0) > 2 * 1024
    sent = sum_usage(upstream).input_tokens
    assert sent is not None
    assert estimate["input_tokens"] is not None
    assert 0.5 * sent < estimate["input_tokens"] < 2 * sent  # another tokenizer, the same order


def test_streams_are_counted_whether_or_not_the_client_asked_for_usage(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    """A stream that did not ask for usage is counted too (the proxy asked upstream), and the client
    still gets no usage chunk; one that asked gets it, with the figures the metrics counted."""
    marker = uuid.uuid4().hex
    model = "fake-cache-openai"
    messages: list[Any] = [{"role": "system", "content": instructions(marker)}, {"role": "user", "content": marker}]
    with start_proxy() as proxy:
        sdk = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        proxy.create_session("streams", KEY)
        seen: list[Any] = []
        for turn, asked in enumerate((False, True, False, True)):
            extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if asked else {}
            headers = {"X-Contextledger-Session": "streams"} if turn >= 2 else {}
            stream = sdk.chat.completions.create(
                model=model, messages=messages, stream=True, extra_headers=headers, **extra
            )
            chunks = list(stream)
            usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
            assert len(usage) == (1 if asked else 0)
            assert all(chunk.choices for chunk in chunks if chunk.usage is None)
            seen.extend(usage)
            if turn < 2:
                text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
                messages = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
            else:
                messages = [{"role": "user", "content": f"{marker} turn {turn}"}]
        values = metrics(proxy)
    upstream = [normalised("openai", raw) for raw in reported(fake_upstream, marker)]
    assert len(upstream) == 4
    raw = reported(fake_upstream, marker)
    assert [usage.model_dump(exclude_none=True) for usage in seen] == [raw[1], raw[3]]
    check_metrics(values, "stateless", upstream[:2])
    check_metrics(values, "session", upstream[2:])
    assert upstream[1].cache_read_tokens  # the second stateless request repeated the first


def test_a_hostile_usage_neither_fails_the_call_nor_reaches_the_counts(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, spans: InMemorySpanExporter
) -> None:
    marker = uuid.uuid4().hex
    with start_proxy() as proxy:
        client = OpenAIChatClient("fake-cache-garbage", base_url=proxy.base_url, api_key=KEY, max_retries=0)
        response = asyncio.run(Agent(client).run(f"{marker} hello"))
        values = metrics(proxy)
    assert response.text.startswith("echo:")
    assert response.usage == Usage()
    assert "gen_ai.usage.input_tokens" not in dict(chat_spans(spans, "fake-cache-garbage")[0].attributes or {})
    assert series(values, "contextledger_upstream_usage_reports_total", mode="stateless", reported="none") == 1
    assert series(values, "contextledger_upstream_input_tokens_total", mode="stateless") is None
    assert (series(values, "contextledger_estimated_input_tokens_total", mode="stateless", profile="openai") or 0) > 0


def test_the_client_reads_anthropic_shaped_usage_straight_from_the_upstream(fake_upstream: FakeUpstream) -> None:
    """Without the proxy: the client adds Anthropic's cache reads and writes back into the input."""
    marker = uuid.uuid4().hex
    client = OpenAIChatClient("fake-cache-anthropic", base_url=fake_upstream.base_url, api_key=KEY, max_retries=0)
    agent = Agent(client, instructions=instructions(marker))
    session = agent.create_session()

    async def converse() -> list[AgentResponse]:
        return [await agent.run(f"{marker} {turn}", session=session) for turn in range(2)]

    responses = asyncio.run(converse())
    upstream = [normalised("anthropic", raw) for raw in reported(fake_upstream, marker)]
    assert [response.usage for response in responses] == upstream
    second = responses[1].usage
    assert second.input_tokens is not None
    assert second.cache_read_tokens is not None
    assert second.cache_write_tokens is not None
    assert second.input_tokens > second.cache_read_tokens + second.cache_write_tokens > 0
    assert re.fullmatch(r"in=\d+ out=\d+ cache_read=\d+ cache_write=\d+", second.describe())
