"""The proxy's calls to its upstream are GenAI CLIENT spans: the proxy runs in-process, read back from
OpenTelemetry's in-memory exporter, its upstream the fake on 127.0.0.1 (chat completions, Responses and
Anthropic's Messages API, whole and streamed, and a failing call)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream

from contextledger.serve import ServeConfig

with try_import("serve") as serve_extra:
    import httpx

    from contextledger.serve import create_app

pytest.importorskip("opentelemetry.sdk", reason="the 'otel' extra")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tests.spans import spans

__all__ = ["spans"]  # the fixture, for the tests below

pytestmark = serve_extra.skip


def reported(usage: dict[str, Any]) -> dict[str, Any]:
    """The conventions' usage attributes for a reply's usage, worked out from each vendor's documentation:
    every input token counts, cached ones included (Anthropic's ``input_tokens`` leaves them out)."""
    if "cache_creation_input_tokens" in usage:
        read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        return {
            "gen_ai.usage.input_tokens": usage["input_tokens"] + read + written,
            "gen_ai.usage.output_tokens": usage["output_tokens"],
            "gen_ai.usage.cache_read.input_tokens": read,
            "gen_ai.usage.cache_creation.input_tokens": written,
        }
    # Chat completions say prompt and completion, the Responses API input and output; both count
    # the cache's reads among the input, in their details.
    chat = "prompt_tokens" in usage
    counts = {
        "gen_ai.usage.input_tokens": usage["prompt_tokens" if chat else "input_tokens"],
        "gen_ai.usage.output_tokens": usage["completion_tokens" if chat else "output_tokens"],
    }
    cached = (usage.get("prompt_tokens_details" if chat else "input_tokens_details") or {}).get("cached_tokens")
    return counts if cached is None else {**counts, "gen_ai.usage.cache_read.input_tokens": cached}


def streamed_usage(text: str) -> dict[str, Any]:
    """The usage a streamed answer carried, as the client saw it (Anthropic's in two events)."""
    usage: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line.removeprefix("data: "))
        found = (
            event.get("usage")
            or (event.get("message") or {}).get("usage")
            or (event.get("response") or {}).get("usage")
        )
        if isinstance(found, dict):
            usage = {**usage, **{key: value for key, value in found.items() if value is not None}}
    return usage


def upstream_spans(exported: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in exported.get_finished_spans() if span.kind is SpanKind.CLIENT]


def test_each_upstream_call_is_a_client_span_with_its_provider_model_and_usage(
    spans: InMemorySpanExporter, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    root = fake_upstream.base_url.removesuffix("/v1")
    port = int(root.rsplit(":", 1)[1])
    app = create_app(ServeConfig(fake_upstream.base_url, anthropic_upstream=root, store=f"sqlite:{tmp_path / 's.db'}"))
    user = [{"role": "user", "content": "hello"}]
    # A tool of its own keeps these requests out of the prefixes other tests' requests find in the
    # fake's prompt cache (it is shared by the session).
    tools = [{"type": "function", "function": {"name": "span_lookup", "parameters": {"type": "object"}}}]
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("openai", "/v1/chat/completions", {"model": "fake-cache-openai", "messages": user, "tools": tools, "seed": 7}),
        (
            "openai",
            "/v1/chat/completions",
            {"model": "fake-cache-openai", "messages": user, "tools": tools, "stream": True},
        ),
        ("openai", "/v1/responses", {"model": "gpt-responses", "input": "hello"}),
        ("openai", "/v1/responses", {"model": "gpt-responses", "input": "hello", "stream": True}),
        ("anthropic", "/v1/messages", {"model": "claude-test", "max_tokens": 64, "messages": user}),
        ("anthropic", "/v1/messages", {"model": "claude-test", "max_tokens": 64, "messages": user, "stream": True}),
    ]
    headers = {"authorization": "Bearer sk-client", "x-api-key": "sk-client", "anthropic-version": "2023-06-01"}

    async def run() -> list[dict[str, Any]]:
        usages: list[dict[str, Any]] = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy", timeout=30) as client:
            for _, path, body in calls:
                answer = await client.post(path, json=body, headers=headers)
                assert answer.status_code == 200, answer.text
                if not body.get("stream"):
                    usages.append(answer.json()["usage"])
                elif path.endswith("/chat/completions"):  # the proxy asked for usage, the client did not
                    usages.append(fake_upstream.received()[-1]["usage"])
                else:
                    usages.append(streamed_usage(answer.text))
            failing = {"model": "fake-500", "messages": user}
            assert (await client.post("/v1/chat/completions", json=failing, headers=headers)).status_code == 500
        await app.state.proxy.close()
        return usages

    usages = asyncio.run(run())
    *answered, failed = upstream_spans(spans)
    assert len(answered) == len(calls)
    for span, (provider, _, body), usage in zip(answered, calls, usages, strict=True):
        attributes = dict(span.attributes or {})
        assert span.name == f"chat {body['model']}"
        assert span.status.status_code is not StatusCode.ERROR
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == provider
        assert attributes["gen_ai.request.model"] == body["model"]
        assert (attributes["server.address"], attributes["server.port"]) == ("127.0.0.1", port)
        assert attributes["gen_ai.response.model"]
        assert attributes["gen_ai.response.id"]
        assert attributes["gen_ai.response.finish_reasons"]
        assert {key: value for key, value in attributes.items() if key.startswith("gen_ai.usage.")} == reported(usage)
    assert dict(answered[0].attributes or {})["gen_ai.request.seed"] == 7
    assert dict(answered[0].attributes or {})["gen_ai.usage.cache_read.input_tokens"] is not None
    assert dict(answered[4].attributes or {})["gen_ai.request.max_tokens"] == 64

    attributes = dict(failed.attributes or {})
    assert failed.name == "chat fake-500"
    assert failed.status.status_code is StatusCode.ERROR
    assert attributes["error.type"] == "500"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert not any(key.startswith("gen_ai.usage.") for key in attributes)


@pytest.mark.parametrize("mode", ["stateless", "session"])
def test_the_proxys_compaction_is_a_child_of_the_upstream_call_it_shaped(
    mode: str, fake_upstream: FakeUpstream, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    from contextledger.serve import StrategySpec  # noqa: PLC0415

    strategy = StrategySpec("sliding-window", ("trigger=turns_exceed(1)",))
    app = create_app(ServeConfig(fake_upstream.base_url, store=f"sqlite:{tmp_path / 's.db'}", strategy=strategy))
    headers = {"authorization": "Bearer sk-shaped", "content-type": "application/json"}
    turns = [{"role": "user", "content": f"question {n}"} for n in range(3)]
    history = [message for n, turn in enumerate(turns) for message in (turn, {"role": "assistant", "content": f"a{n}"})]

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            if mode == "stateless":
                body = {"model": "fake", "messages": [*history, {"role": "user", "content": "and now?"}]}
                answer = await client.post("/v1/chat/completions", json=body, headers=headers)
                assert answer.status_code == 200, answer.text
            else:
                created = await client.post("/v1/contextledger/sessions", json={"id": "s"}, headers=headers)
                assert created.status_code == 201, created.text
                for turn in turns:
                    answer = await client.post(
                        "/v1/chat/completions",
                        json={"model": "fake", "messages": [turn]},
                        headers={**headers, "x-contextledger-session": "s"},
                    )
                    assert answer.status_code == 200, answer.text
        await app.state.proxy.close()

    asyncio.run(run())
    finished = spans.get_finished_spans()
    calls = {span.context.span_id: span for span in finished if span.kind == SpanKind.CLIENT}
    compactions = [span for span in finished if span.name == "contextledger.compaction"]
    assert compactions, [span.name for span in finished]
    for compaction in compactions:
        assert compaction.parent is not None
        assert compaction.parent.span_id in calls, "a compaction span outside the call it shaped"
        assert calls[compaction.parent.span_id].name == "chat fake"
