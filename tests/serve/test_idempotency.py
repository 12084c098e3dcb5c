"""``Idempotency-Key``: a retried turn is stored once and answered with the stored reply."""

from __future__ import annotations

import json
from typing import Any

import openai
from tests.serve.conftest import FakeUpstream, StartProxy

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
