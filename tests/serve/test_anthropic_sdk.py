"""``POST /v1/messages`` through the official ``anthropic`` SDK against the recording fake: a
30-turn tool loop with thinking, stateless and in a session, every forwarded request one the API
takes, thinking blocks byte for byte, the system prompt kept, the seed's facts sequence, tenants,
``Idempotency-Key``, errors in Anthropic's shape, and a broken stream storing nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.history.support import RedisServer
from tests.optional_imports import try_import
from tests.serve.conftest import STORES, FakeUpstream, Proxy, StartProxy, store_args

with try_import("anthropic") as anthropic_extra:
    import anthropic

pytestmark = anthropic_extra.skip

KEY = "sk-ant-client-alpha-0123456789"
OTHER_KEY = "sk-ant-client-beta-9876543210"
SYSTEM = "You are the support desk."
TOOLS = [{"name": "lookup", "description": "Look an item up.", "input_schema": {"type": "object"}}]
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(4)")
THINKING = {"type": "enabled", "budget_tokens": 1024}


def anthropic_root(upstream: FakeUpstream) -> str:
    return upstream.base_url.removesuffix("/v1")


def start(start_proxy: StartProxy, upstream: FakeUpstream, *args: str) -> Any:
    return start_proxy("--anthropic-upstream", anthropic_root(upstream), *args)


def client_for(proxy: Proxy, key: str = KEY, **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.root, api_key=key, max_retries=0, default_headers=headers or None)


def as_sent(message: Any) -> list[dict[str, Any]]:
    """A reply's content as the client sends it back."""
    return [
        {k: v for k, v in block.model_dump(mode="json", exclude_none=True).items() if k != "parsed_output"}
        for block in message.content
    ]


def anthropic_records(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [r for r in upstream.received() if r["path"] == "/v1/messages"]


def thinking_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "thinking"
    ]


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], streamed: bool, model: str = "fake") -> Any:
    options: dict[str, Any] = {"model": model, "max_tokens": 256, "system": SYSTEM, "tools": TOOLS}
    options["thinking"] = THINKING
    if streamed:
        with client.messages.stream(messages=messages, **options) as stream:  # type: ignore[arg-type]
            return stream.get_final_message()
    return client.messages.create(messages=messages, **options)  # type: ignore[arg-type]


def test_a_thirty_turn_tool_loop_with_thinking_goes_upstream_valid_and_compacted(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    messages: list[dict[str, Any]] = []
    sent_lengths = []
    with start(start_proxy, fake_upstream, *WINDOW) as proxy:
        client = client_for(proxy)
        fake_upstream.clear()
        for turn in range(30):
            messages.append({"role": "user", "content": f"turn {turn}: use the tool for item {turn}"})
            sent_lengths.append(len(messages))
            reply = ask(client, messages, streamed=turn % 2 == 1)
            assert reply.stop_reason == "tool_use"
            call = next(block for block in reply.content if block.type == "tool_use")
            messages.append({"role": "assistant", "content": as_sent(reply)})
            result = {"type": "tool_result", "tool_use_id": call.id, "content": f"item {turn}: " + "in stock " * 30}
            messages.append({"role": "user", "content": [result]})
            sent_lengths.append(len(messages))
            reply = ask(client, messages, streamed=turn % 3 == 0)
            assert reply.content[-1].text == "echo: tool results read"
            messages.append({"role": "assistant", "content": as_sent(reply)})
    records = anthropic_records(fake_upstream)
    assert len(records) == 60
    for record in records:
        body = record["body"]
        assert record["problems"] == [], record["problems"]
        # The client's key as its SDK sent it (this SDK version: a bearer token).
        assert KEY in (record["x-api-key"], (record["authorization"] or "").removeprefix("Bearer "))
        assert body["system"][0]["text"] == SYSTEM  # the system prompt kept (with the proxy's breakpoint)
        by_signature = {
            b["signature"]: b
            for m in messages
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "thinking"
        }
        for block in thinking_blocks(body):
            assert json.dumps(block) == json.dumps(by_signature[block["signature"]])  # byte for byte
    assert [len(r["body"]["messages"]) for r in records[:4]] == sent_lengths[:4]
    assert any(len(r["body"]["messages"]) < n for r, n in zip(records, sent_lengths))  # compacted over the trigger
    last = records[-1]["body"]["messages"]
    assert last[-1] == {
        **messages[-2],
        "content": [{**messages[-2]["content"][0], "cache_control": {"type": "ephemeral"}}],
    }


def test_without_a_strategy_the_body_goes_as_it_came_with_breakpoints_added(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    messages = [{"role": "user", "content": "hello"}]
    with start(start_proxy, fake_upstream, "--strategy", "none") as proxy:
        client = client_for(proxy)
        client.messages.create(model="fake", max_tokens=64, messages=messages, extra_headers={"anthropic-beta": "b-1"})  # type: ignore[arg-type]
        sent = fake_upstream.last_body()
        record = fake_upstream.received()[-1]
        marked = [{"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]
        assert sent["messages"] == [{"role": "user", "content": marked}]
        assert record["anthropic-version"]
        assert record["anthropic-beta"] == "b-1"
        own = [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            }
        ]
        client.messages.create(model="fake", max_tokens=64, system=SYSTEM, messages=own)  # type: ignore[arg-type]
        sent = fake_upstream.last_body()
        assert sent["messages"] == own
        assert sent["system"] == SYSTEM  # the client's breakpoint: nothing added
        counted = client.messages.count_tokens(model="fake", messages=messages)  # type: ignore[arg-type]
        assert counted.input_tokens > 0
        assert fake_upstream.received()[-1]["path"] == "/v1/messages/count_tokens"


def test_errors_reach_the_sdk_in_anthropics_shape(start_proxy: StartProxy, fake_upstream: FakeUpstream) -> None:
    messages = [{"role": "user", "content": "hello"}]
    with start(start_proxy, fake_upstream, "--max-body-bytes", "2000") as proxy:
        client = client_for(proxy)
        with pytest.raises(anthropic.InternalServerError) as failed:
            client.messages.create(model="fake-500", max_tokens=64, messages=messages)  # type: ignore[arg-type]
        assert failed.value.body == {
            "type": "error",
            "error": {"type": "api_error", "message": "the fake model fell over"},
        }
        with pytest.raises(anthropic.APIStatusError) as overloaded:
            client.messages.create(model="fake-529", max_tokens=64, messages=messages)  # type: ignore[arg-type]
        assert overloaded.value.status_code == 529
        with pytest.raises(anthropic.APIStatusError) as large:
            client.messages.create(model="fake", max_tokens=64, messages=[{"role": "user", "content": "x" * 5000}])
        assert large.value.status_code == 413
        assert large.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
        orphan = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}]}]
        with pytest.raises(anthropic.BadRequestError) as bad:
            client.messages.create(model="fake", max_tokens=64, messages=orphan)  # type: ignore[arg-type]
        assert bad.value.body["type"] == "error"  # type: ignore[index]
        assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        session = client_for(proxy, **{"X-Contextledger-Session": "nowhere"})
        with pytest.raises(anthropic.NotFoundError):
            session.messages.create(model="fake", max_tokens=64, messages=messages)  # type: ignore[arg-type]
        with pytest.raises(anthropic.APIStatusError) as garbage:
            client.messages.create(model="fake-garbage", max_tokens=64, messages=messages)  # type: ignore[arg-type]
        assert garbage.value.status_code == 502
        status, body = proxy.call("POST", "/v1/messages/nothing", {})
        assert status == 404
        assert body["type"] == "error"


def session_turns(proxy: Proxy, upstream: FakeUpstream, session: str, key: str = KEY) -> None:
    """A session's 30-turn tool loop with thinking: the client sends only its new messages."""
    proxy.create_session(session, key)
    client = client_for(proxy, key, **{"X-Contextledger-Session": session})
    upstream.clear()
    for turn in range(30):
        reply = ask(client, [{"role": "user", "content": f"turn {turn}: use the tool"}], streamed=turn % 2 == 0)
        call = next(block for block in reply.content if block.type == "tool_use")
        result = {"type": "tool_result", "tool_use_id": call.id, "content": f"item {turn} " + "in stock " * 30}
        reply = ask(client, [{"role": "user", "content": [result]}], streamed=turn % 3 == 0)
        assert reply.content[-1].text == "echo: tool results read"
    records = anthropic_records(upstream)
    replies = {b["signature"]: b for r in records for b in r["reply"]["content"] if b["type"] == "thinking"}
    for record in records:
        assert record["problems"] == [], record["problems"]
        for block in thinking_blocks(record["body"]):
            assert json.dumps(block) == json.dumps(replies[block["signature"]])  # stored and sent byte for byte
    assert max(len(r["body"]["messages"]) for r in records) < 60  # the default strategy's window


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_session_tool_loop_with_thinking_and_isolated_tenants(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, redis_server: RedisServer, store: str
) -> None:
    args = ("--store", redis_server.url) if store == "redis" else ()
    with start(
        start_proxy, fake_upstream, *args, "--strategy", "sliding-window", "--param", "trigger=turns_exceed(6)"
    ) as proxy:
        session_turns(proxy, fake_upstream, f"loop-{store}")
        stored = proxy.messages(f"loop-{store}", KEY)
        assert len(stored) >= 60
        # One key is one tenant whichever header carries it; another key sees nothing.
        status, _ = proxy.get(f"/v1/contextledger/sessions/loop-{store}", KEY)
        assert status == 200
        turn = {"model": "fake", "max_tokens": 64, "messages": [{"role": "user", "content": "by x-api-key"}]}
        headers = {"x-api-key": KEY, "X-Contextledger-Session": f"loop-{store}", "anthropic-version": "2023-06-01"}
        status, body = proxy.call("POST", "/v1/messages", turn, headers=headers)
        assert status == 200, body
        assert proxy.messages(f"loop-{store}", KEY)[-2]["content"] == "by x-api-key"
        assert fake_upstream.received()[-1]["x-api-key"] == KEY
        status, body = proxy.get(f"/v1/contextledger/sessions/loop-{store}", OTHER_KEY)
        assert status == 404
        other = client_for(proxy, OTHER_KEY, **{"X-Contextledger-Session": f"loop-{store}"})
        with pytest.raises(anthropic.NotFoundError):
            other.messages.create(model="fake", max_tokens=64, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("store", STORES)
def test_the_seed_facts_sequence_and_exactly_once_through_the_sdk(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, request: pytest.FixtureRequest, store: str
) -> None:
    desk = f"desk-{store}"
    with start(start_proxy, fake_upstream, *store_args(request, store)) as proxy:
        proxy.create_session(desk, KEY)
        client = client_for(proxy, **{"X-Contextledger-Session": desk})

        def say(text: str, **headers: str) -> Any:
            return client.messages.create(
                model="fake",
                max_tokens=64,
                system=SYSTEM,
                messages=[{"role": "user", "content": text}],
                extra_headers=headers or None,
            )

        say("module=Reporting; database=PostgreSQL")
        assert proxy.facts(desk, KEY) == {"module": "Reporting", "database": "PostgreSQL"}
        say("module=Billing; database=SQL Server 2022")
        assert proxy.facts(desk, KEY) == {"module": "Billing", "database": "SQL Server 2022"}
        say("Where can I find logs?")
        sent = fake_upstream.last_body()
        assert sent["system"][0]["text"] == SYSTEM
        last = sent["messages"][-1]
        assert last["role"] == "user"
        assert "SQL Server 2022" in last["content"][0]["text"]  # the facts block, with the newest user message
        assert last["content"][-1]["text"] == "Where can I find logs?"
        assert fake_upstream.received()[-1]["problems"] == []
        status, report = proxy.call("POST", f"/v1/contextledger/sessions/{desk}/forget", {"key": "module"}, KEY)
        assert status == 200, report
        assert "Billing" not in json.dumps(proxy.messages(desk, KEY))
        say("Which module was it?")
        assert "Billing" not in json.dumps(fake_upstream.last_body())
        assert "SQL Server 2022" in json.dumps(fake_upstream.last_body())

        # Exactly once: a retried turn gets the stored reply, JSON or streamed, and calls nothing.
        first = say("turn with a key", **{"Idempotency-Key": "turn-1"})
        calls = len(fake_upstream.received())
        again = say("turn with a key", **{"Idempotency-Key": "turn-1"})
        assert again.content == first.content
        assert again.id == first.id
        with client.messages.stream(
            model="fake",
            max_tokens=64,
            system=SYSTEM,
            messages=[{"role": "user", "content": "turn with a key"}],
            extra_headers={"Idempotency-Key": "turn-1"},
        ) as stream:
            streamed = stream.get_final_message()
        assert as_sent(streamed) == as_sent(first)
        assert len(fake_upstream.received()) == calls
        with pytest.raises(anthropic.APIStatusError) as reused:
            say("another turn", **{"Idempotency-Key": "turn-1"})
        assert reused.value.status_code == 422

        # A broken stream, or one with an error event, stores nothing and admits nothing.
        before = proxy.messages(desk, KEY)
        for model in ("fake-broken", "fake-error-event"):
            with (
                pytest.raises(anthropic.APIError),
                client.messages.stream(
                    model=model, max_tokens=64, messages=[{"role": "user", "content": "module=Lost"}]
                ) as stream,
            ):
                stream.get_final_message()
        assert proxy.messages(desk, KEY) == before
        assert proxy.facts(desk, KEY) == {"database": "SQL Server 2022"}
        _, metrics = proxy.get("/metrics")
    assert 'contextledger_requests_total{endpoint="messages",mode="session",status="200"}' in metrics
