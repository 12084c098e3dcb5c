"""``Idempotency-Key``: a retried turn is stored once and answered with the stored reply."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, StartProxy

from contextledger._forgotten import REMOVED_MARKER

with try_import("openai") as openai_extra:
    import openai

with try_import("redis") as redis_extra:
    import redis
with try_import("postgres") as postgres_extra:
    import psycopg

pytestmark = [openai_extra.skip, redis_extra.skip]

KEY = "sk-idempotent-tenant-31"


def test_a_retried_turn_is_answered_from_the_store_without_calling_the_upstream(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    session = {"X-Contextledger-Session": "once"}
    body: Any = {"model": "fake", "messages": [{"role": "user", "content": "product=Ledger; priority=high"}]}
    with start_proxy() as proxy:
        proxy.create_session("once", KEY)
        calls = len(fake_upstream.received())
        headers = {**session, "Idempotency-Key": "order-17"}
        status, first = proxy.call("POST", "/v1/chat/completions", body, KEY, headers)
        assert status == 200
        status, second = proxy.call("POST", "/v1/chat/completions", body, KEY, headers)
        assert status == 200
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0, default_headers=headers)
        with client.chat.completions.create(model="fake", messages=body["messages"], stream=True) as stream:
            streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert len(fake_upstream.received()) == calls + 1
        assert second["id"] == first["id"]
        assert second["choices"] == [{**first["choices"][0], "logprobs": None}]
        assert second["usage"] == first["usage"]
        assert streamed == first["choices"][0]["message"]["content"] == "echo: product=Ledger; priority=high"
        assert len(proxy.messages("once", KEY)) == 2  # stored once
        status, mem = proxy.get("/v1/contextledger/sessions/once/facts", KEY)
        assert {fact["turn"] for fact in mem["data"]} == {1}  # admitted once, from the first attempt

        other = {"model": "fake", "messages": [{"role": "user", "content": "something else"}]}
        status, refused = proxy.call("POST", "/v1/chat/completions", other, KEY, headers)
        assert status == 422
        assert refused["error"]["code"] == "idempotency_key_reused"
        status, fresh = proxy.call("POST", "/v1/chat/completions", other, KEY, {**session, "Idempotency-Key": "o-18"})
        assert status == 200
        assert fresh["choices"][0]["message"]["content"] == "echo: something else"
        assert len(proxy.messages("once", KEY)) == 4
        status, bad = proxy.call("POST", "/v1/chat/completions", other, KEY, {**session, "Idempotency-Key": "x" * 300})
        assert status == 400
        assert bad["error"]["code"] == "invalid_idempotency_key"


def test_a_turn_that_failed_upstream_can_be_retried_with_its_key_and_then_stored(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    headers = {"X-Contextledger-Session": "later", "Idempotency-Key": "k-1"}
    with start_proxy() as proxy:
        proxy.create_session("later", KEY)
        failing = {"model": "fake-500", "messages": [{"role": "user", "content": "customer=Acme"}]}
        status, _ = proxy.call("POST", "/v1/chat/completions", failing, KEY, headers)
        assert status == 500
        assert proxy.messages("later", KEY) == []
        working = {**failing, "model": "fake"}
        status, answer = proxy.call("POST", "/v1/chat/completions", working, KEY, headers)
        assert status == 200
        assert json.dumps(answer).count("echo: customer=Acme") == 1
        assert [m["content"] for m in proxy.messages("later", KEY)] == ["customer=Acme", "echo: customer=Acme"]
        assert proxy.facts("later", KEY) == {"customer": "Acme"}


def _stored_turn_records(store: str, tmp_path: Path, redis_port: int, postgres_url: str) -> list[str]:
    """Every turn record the proxy's store holds, read straight from the SQLite file, Redis or Postgres."""
    if store == "sqlite":
        with contextlib.closing(sqlite3.connect(tmp_path / "sessions.db")) as connection:
            return [record for (record,) in connection.execute("SELECT record FROM contextledger_turns")]
    if store == "postgres":
        with psycopg.connect(postgres_url) as postgres:
            rows = postgres.execute('SELECT record FROM "contextledger-serve".contextledger_turns').fetchall()
            return [record for (record,) in rows]
    client = redis.Redis(port=redis_port, db=5, decode_responses=True)
    try:
        return [
            str(value)
            for name in client.scan_iter()
            if client.type(name) == "hash"
            for value in client.hgetall(name).values()
        ]
    finally:
        client.close()


@pytest.mark.parametrize(
    "store",
    ["sqlite", pytest.param("redis", marks=pytest.mark.redis), pytest.param("postgres", marks=pytest.mark.postgres)],
)
def test_a_retry_after_forget_replays_the_turn_without_the_forgotten_value(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, request: pytest.FixtureRequest, tmp_path: Path, store: str
) -> None:
    """design.md#forgetting through the proxy: an Idempotency-Key retry reads the turn record, which forget rewrote."""
    redis_port, postgres_url = 0, ""
    args: tuple[str, ...] = ()
    if store == "redis":
        redis_port = request.getfixturevalue("redis_server").port
        redis.Redis(port=redis_port, db=5).flushdb()
        args = ("--store", f"redis://127.0.0.1:{redis_port}/5")
    if store == "postgres":
        postgres_url = request.getfixturevalue("postgres_server").fresh_database()
        args = ("--store", postgres_url)
    body: Any = {"model": "fake", "messages": [{"role": "user", "content": "We run on database=PostgreSQL 15"}]}
    headers = {"X-Contextledger-Session": "db", "Idempotency-Key": "turn-db"}
    with start_proxy(*args) as proxy:
        proxy.create_session("db", KEY)
        status, first = proxy.call("POST", "/v1/chat/completions", body, KEY, headers)
        assert status == 200, first
        assert "PostgreSQL 15" in first["choices"][0]["message"]["content"]
        assert any("PostgreSQL" in record for record in _stored_turn_records(store, tmp_path, redis_port, postgres_url))
        calls = len(fake_upstream.received())

        status, report = proxy.call("POST", "/v1/contextledger/sessions/db/forget", {"key": "database"}, KEY)
        assert status == 200, report
        assert (report["messages_changed"], report["turns_changed"]) == (2, 1)

        status, again = proxy.call("POST", "/v1/chat/completions", body, KEY, headers)
        assert status == 200, again
        assert len(fake_upstream.received()) == calls  # replayed, no upstream call
        assert "PostgreSQL" not in json.dumps(again)
        assert again["choices"][0]["message"]["content"] == REMOVED_MARKER
        assert "PostgreSQL" not in json.dumps(proxy.messages("db", KEY))
        records = _stored_turn_records(store, tmp_path, redis_port, postgres_url)
        assert records  # the turn id is still recorded, so the retry was known
        assert not any("PostgreSQL" in record for record in records)
        assert proxy.facts("db", KEY) == {}
