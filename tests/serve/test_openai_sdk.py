"""Stateless mode through the official ``openai`` SDK (sync, async, streaming): the upstream
receives the compacted projection, valid to send, with the system instructions kept."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, StartProxy

from contextledger import from_openai, validate

with try_import("openai") as openai_extra:
    import openai

pytestmark = openai_extra.skip

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support-session.jsonl"
KEY = "sk-client-alpha-0123456789"
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(4)")


def transcript() -> Any:
    """The example transcript and a new question (typed loosely: the SDK wants its own message types)."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    messages = [json.loads(line) for line in lines if line.strip()]
    return [*messages, {"role": "user", "content": "And what about ticket 113?"}]


def check_projection(sent: list[dict[str, Any]], original: list[dict[str, Any]]) -> None:
    """What the upstream got: fewer turns, the last four user messages, valid, the system prompt first."""
    users = [m for m in sent if m["role"] == "user"]
    assert users == [m for m in original if m["role"] == "user"][-4:]
    assert len(sent) < len(original)
    assert sent[0] == original[0]
    assert sent[0]["role"] == "system"
    assert validate(from_openai(sent)) == []
    assert validate(from_openai(original)) == []  # the check above could fail: the input was valid too


def test_sync_client_gets_the_reply_and_the_upstream_gets_the_compacted_projection(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    original = transcript()
    with start_proxy(*WINDOW) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        reply = client.chat.completions.create(model="fake", messages=original)
    assert reply.choices[0].message.content == "echo: And what about ticket 113?"
    received = fake_upstream.received()[-1]
    assert received["authorization"] == f"Bearer {KEY}"  # the client's own key, passed through
    check_projection(received["body"]["messages"], original)
    assert received["body"]["model"] == "fake"


def test_async_and_streaming_clients_through_the_same_proxy(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    original = transcript()

    async def scenario(base_url: str) -> tuple[str, str]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
        reply = await client.chat.completions.create(model="fake", messages=original)
        stream = await client.chat.completions.create(model="fake", messages=original, stream=True)
        pieces = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        await client.close()
        return reply.choices[0].message.content or "", "".join(pieces)

    with start_proxy(*WINDOW) as proxy:
        fake_upstream.clear()
        text, streamed = asyncio.run(scenario(proxy.base_url))
        sync_client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        with sync_client.chat.completions.create(model="fake", messages=original, stream=True) as stream:
            sync_streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == streamed == sync_streamed == "echo: And what about ticket 113?"
    received = fake_upstream.received()
    assert len(received) == 3
    for request in received:
        check_projection(request["body"]["messages"], original)
    assert [request["body"].get("stream", False) for request in received] == [False, True, True]


def test_without_a_strategy_the_request_goes_upstream_unchanged(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    original = transcript()
    with start_proxy() as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        client.chat.completions.create(model="fake", messages=original, temperature=0.25)
        models = client.models.list()
    chat = [r for r in fake_upstream.received() if r["path"] == "/v1/chat/completions"][-1]["body"]
    assert chat["messages"] == original
    assert chat["temperature"] == 0.25
    assert [model.id for model in models.data] == ["fake"]  # /v1/models passed through


def test_a_budget_collapses_tool_results_and_keeps_every_call_with_its_result(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    original = transcript()
    # 5,601 tokens; collapsing the older tool results brings them to 2,523, within 3,000.
    with start_proxy("--budget", "3000") as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        client.chat.completions.create(model="fake", messages=original)
    sent = fake_upstream.last_body()["messages"]
    assert validate(from_openai(sent)) == []
    assert sent[0] == original[0]
    assert sent[-1] == original[-1]
    assert len(json.dumps(sent)) < len(json.dumps(original)) / 2
    assert any("[Tool results:" in str(m.get("content")) for m in sent)


@pytest.mark.parametrize("stream", [False, True])
def test_the_metrics_count_tokens_before_and_after_compaction(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, stream: bool
) -> None:
    original = transcript()
    with start_proxy(*WINDOW) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        created: Any = client.chat.completions.create(model="fake", messages=original, stream=stream)
        if stream:
            list(created)
        status, text = proxy.get("/metrics")
    assert status == 200
    values = {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and not line.startswith("#")
    }
    before = values['contextledger_tokens_before_compaction_total{mode="stateless"}']
    after = values['contextledger_tokens_after_compaction_total{mode="stateless"}']
    assert 0 < after < before
    assert values['contextledger_requests_total{endpoint="chat_completions",mode="stateless",status="200"}'] == 1
    assert values['contextledger_upstream_seconds_count{endpoint="chat_completions",outcome="answered"}'] == 1
