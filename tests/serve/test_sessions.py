"""Session mode over HTTP: the seed's facts check sequence, streaming turns, and tenants that
can never reach each other's sessions (on SQLite and on Redis)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tests.history.support import RedisServer
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

from contextledger import Message, from_openai, validate
from contextledger.history import SQLiteHistoryProvider
from contextledger.serve._sessions import session_key
from contextledger.serve._tenants import tenant_of

with try_import("openai") as openai_extra:
    import openai

pytestmark = openai_extra.skip

KEY_A = "sk-tenant-a-secret-111"
KEY_B = "sk-tenant-b-secret-222"
SYSTEM = {"role": "system", "content": "You are the support desk."}


def session_client(proxy: Proxy, session_id: str, key: str = KEY_A, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.base_url,
        api_key=key,
        max_retries=0,
        default_headers={"X-Contextledger-Session": session_id, **headers},
    )


def say(client: openai.OpenAI, text: str, model: str = "fake") -> str:
    reply = client.chat.completions.create(model=model, messages=[SYSTEM, {"role": "user", "content": text}])  # type: ignore[list-item]
    return reply.choices[0].message.content or ""


def sent_text(upstream: FakeUpstream) -> str:
    return json.dumps(upstream.last_body()["messages"], ensure_ascii=False)


def test_the_seed_check_sequence_holds_through_http(start_proxy: StartProxy, fake_upstream: FakeUpstream) -> None:
    with start_proxy() as proxy:
        proxy.create_session("desk", KEY_A)
        client = session_client(proxy, "desk")

        say(client, "module=Reporting; database=PostgreSQL")
        assert proxy.facts("desk", KEY_A) == {"module": "Reporting", "database": "PostgreSQL"}

        say(client, "module=Billing; database=SQL Server 2022")
        status, mem = proxy.get("/v1/contextledger/sessions/desk/facts", KEY_A)
        assert status == 200
        assert {f["key"]: (f["value"], f["evidence"], f["turn"]) for f in mem["data"]} == {
            "module": ("Billing", "module=Billing", 2),
            "database": ("SQL Server 2022", "database=SQL Server 2022", 2),
        }
        assert "database=SQL Server 2022" in mem["text"]

        say(client, "Where can I find logs?")
        sent = fake_upstream.last_body()["messages"]
        assert sent[0] == SYSTEM  # the client's instructions first, as sent
        assert "SQL Server 2022" in sent[-2]["content"]  # the block, with the newest user message
        assert sent[-2]["role"] == "system"
        assert sent[-1] == {"role": "user", "content": "Where can I find logs?"}
        assert validate(from_openai(sent)) == []
        assert proxy.facts("desk", KEY_A) == {
            "module": "Billing",
            "database": "SQL Server 2022",
        }  # a question adds none

        status, report = proxy.call("POST", "/v1/contextledger/sessions/desk/forget", {"key": "module"}, KEY_A)
        assert status == 200, report
        assert [f["key"] for f in report["forgotten"]] == ["module"]
        assert proxy.facts("desk", KEY_A) == {"database": "SQL Server 2022"}
        stored = json.dumps(proxy.messages("desk", KEY_A))
        assert "module=" not in stored
        assert "Reporting" not in stored
        assert "Billing" not in stored

        say(client, "Which module was it?")
        text = sent_text(fake_upstream)
        assert "Reporting" not in text
        assert "Billing" not in text
        assert "SQL Server 2022" in text  # the fact kept is still sent

        status, report = proxy.call("POST", "/v1/contextledger/sessions/desk/forget", {}, KEY_A)
        assert status == 200, report
        assert proxy.facts("desk", KEY_A) == {}
        say(client, "What do you know about my setup?")
        assert proxy.facts("desk", KEY_A) == {}  # a later question recreates nothing
        text = sent_text(fake_upstream)
        assert "SQL Server 2022" not in text
        assert "PostgreSQL" not in text
        stored_messages = proxy.messages("desk", KEY_A)
        assert all(m["role"] != "system" for m in stored_messages)  # instructions are not stored
        assert stored_messages[-1]["content"] == "echo: What do you know about my setup?"

        say(client, "modul=Reporting; database=Oracle")  # a misspelt key: the whole batch is refused
        assert proxy.facts("desk", KEY_A) == {}
        _, metrics = proxy.get("/metrics")
    assert 'contextledger_facts_total{outcome="admitted"} 4' in metrics
    assert 'contextledger_facts_total{outcome="rejected"} 1' in metrics
    assert 'contextledger_session_turns_total{outcome="stored"} 6' in metrics


def test_a_streamed_turn_stores_the_message_the_stream_spelled_out(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    with start_proxy() as proxy:
        proxy.create_session("stream", KEY_A)
        client = session_client(proxy, "stream")
        with client.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "priority=high"}], stream=True
        ) as stream:
            text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        with client.chat.completions.create(
            model="fake-tool", messages=[{"role": "user", "content": "price of a laptop?"}], stream=True
        ) as stream:
            list(stream)
        stored = proxy.messages("stream", KEY_A)
        assert proxy.facts("stream", KEY_A) == {"priority": "high"}
        call_id = stored[3]["tool_calls"][0]["id"]
        result = {"role": "tool", "tool_call_id": call_id, "content": "$999"}
        client.chat.completions.create(model="fake", messages=[result])  # type: ignore[list-item]
        sent = fake_upstream.last_body()["messages"]
    assert text == "echo: priority=high"
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1]["content"] == "echo: priority=high"
    assert stored[3]["tool_calls"] == [
        {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": '{"item": "laptop"}'}}
    ]
    assert call_id.startswith("call_")
    assert validate(from_openai(sent)) == []  # the stored call and the new result travel together
    assert sent[-2]["tool_calls"][0]["id"] == call_id
    assert sent[-1] == result


def test_a_retained_history_strategy_keeps_the_stored_session_small(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    with start_proxy("--retain-strategy", "sliding-window", "--retain-param", "trigger=turns_exceed(2)") as proxy:
        proxy.create_session("short", KEY_A)
        client = session_client(proxy, "short")
        for number in range(5):
            say(client, f"question {number}")
        stored = proxy.messages("short", KEY_A)
    assert [m["content"] for m in stored if m["role"] == "user"] == ["question 3", "question 4"]


def test_session_requests_need_a_key_and_a_known_session(start_proxy: StartProxy) -> None:
    with start_proxy() as proxy:
        turn = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
        status, body = proxy.call("POST", "/v1/chat/completions", turn, None, {"X-Contextledger-Session": "s"})
        assert status == 401
        assert body["error"]["type"] == "authentication_error"
        status, body = proxy.call("POST", "/v1/chat/completions", turn, KEY_A, {"X-Contextledger-Session": "nope"})
        assert status == 404
        assert body["error"]["code"] == "session_not_found"
        proxy.create_session("dup", KEY_A)
        status, body = proxy.call("POST", "/v1/contextledger/sessions", {"id": "dup"}, KEY_A)
        assert status == 409
        assert body["error"]["code"] == "session_exists"
        status, body = proxy.call("POST", "/v1/contextledger/sessions", {}, KEY_A)
        assert status == 201
        assert len(body["id"]) == 32


def isolation_scenario(proxy: Proxy, upstream: FakeUpstream) -> None:
    """Tenant B, knowing tenant A's session id, can neither read it nor write it nor learn it exists."""
    proxy.create_session("shared-id", KEY_A)
    say(session_client(proxy, "shared-id", KEY_A), "customer=Acme; module=Billing")
    before_messages = proxy.messages("shared-id", KEY_A)
    before_facts = proxy.facts("shared-id", KEY_A)
    received = len(upstream.received())

    base = "/v1/contextledger/sessions/shared-id"
    attempts: list[tuple[str, str, Any, dict[str, str]]] = [
        ("GET", base, None, {}),
        ("GET", base + "/messages", None, {}),
        ("GET", base + "/facts", None, {}),
        ("POST", base + "/forget", {}, {}),
        ("POST", base + "/forget", {"key": "customer"}, {}),
        ("DELETE", base, None, {}),
        (
            "POST",
            "/v1/chat/completions",
            {"model": "fake", "messages": [{"role": "user", "content": "customer=Evil"}]},
            {"X-Contextledger-Session": "shared-id"},
        ),
    ]
    for method, path, body, headers in attempts:
        status, answer = proxy.call(method, path, body, KEY_B, headers)
        assert status == 404, (method, path, answer)
        assert answer["error"]["type"] == "not_found_error"
    assert len(upstream.received()) == received  # B's turn never reached the model
    assert proxy.messages("shared-id", KEY_A) == before_messages
    assert proxy.facts("shared-id", KEY_A) == before_facts == {"customer": "Acme", "module": "Billing"}
    # B may have a session with the same id; it is another session.
    proxy.create_session("shared-id", KEY_B)
    assert proxy.messages("shared-id", KEY_B) == []
    assert proxy.facts("shared-id", KEY_B) == {}


def test_tenants_are_isolated_on_sqlite(start_proxy: StartProxy, fake_upstream: FakeUpstream) -> None:
    with start_proxy() as proxy:
        isolation_scenario(proxy, fake_upstream)


@pytest.mark.redis
def test_tenants_are_isolated_on_redis(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    with start_proxy("--store", f"redis://127.0.0.1:{redis_server.port}/3") as proxy:
        isolation_scenario(proxy, fake_upstream)


def test_a_tenant_header_counts_only_when_the_operator_trusts_it(start_proxy: StartProxy) -> None:
    tenant = {"X-Contextledger-Tenant": "team-red"}
    with start_proxy() as proxy:
        status, _ = proxy.call("POST", "/v1/contextledger/sessions", {"id": "t"}, None, tenant)
        assert status == 401  # the header alone is not a tenant
    with start_proxy("--trust-tenant-header") as proxy:
        status, _ = proxy.call("POST", "/v1/contextledger/sessions", {"id": "t"}, KEY_A, tenant)
        assert status == 201
        # Another key behind the same gateway tenant sees the session; the key's own tenant does not.
        assert proxy.call("GET", "/v1/contextledger/sessions/t", None, KEY_B, tenant)[0] == 200
        assert proxy.call("GET", "/v1/contextledger/sessions/t", None, KEY_A)[0] == 404


def test_a_write_by_another_program_is_seen_on_the_next_turn(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The proxy keeps a session's history between turns, but only while the store's version says
    nobody else wrote it: an agent appending to the same store is seen at once."""
    with start_proxy() as proxy:
        proxy.create_session("shared", KEY_A)
        client = session_client(proxy, "shared")
        say(client, "first question")
        key = session_key(tenant_of({"authorization": f"Bearer {KEY_A}"}, trust_tenant_header=False), "shared")
        history = SQLiteHistoryProvider(tmp_path / "sessions.db", source_id="serve")
        asyncio.run(history.append(key, [Message.user("a note an agent added"), Message.assistant("noted")]))
        say(client, "second question")
        users = [m["content"] for m in fake_upstream.last_body()["messages"] if m["role"] == "user"]
        assert users == ["first question", "a note an agent added", "second question"]
        asyncio.run(history.replace(key, []))
        say(client, "third question")
        users = [m["content"] for m in fake_upstream.last_body()["messages"] if m["role"] == "user"]
        assert users == ["third question"]
        asyncio.run(history.close())
