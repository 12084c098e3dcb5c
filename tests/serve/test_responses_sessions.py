"""``POST /v1/responses`` in session mode, through the official ``openai`` client against the
recording fake: the client sends only each turn's new items and the proxy holds the history.

The same checks as chat completions and the Messages API make: a 30-turn tool loop with reasoning,
streamed and not, every forwarded input one the API takes (each call with its output, reasoning
before its item, the upstream's items byte for byte), compacted, instructions kept; tenants kept
apart; the seed's facts sequence; ``Idempotency-Key`` answered from the store, as JSON or a stream;
upstream errors and broken or failed streams storing nothing, on every store.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import STORES, FakeUpstream, Proxy, StartProxy, store_args
from tests.serve.test_responses import output_items, pairing_problems

from contextledger.messages import from_responses, validate

with try_import("openai") as openai_extra:
    import openai

pytestmark = openai_extra.skip

KEY = "sk-client-responses-alpha-0123456789"
OTHER_KEY = "sk-client-responses-beta-9876543210"
SESSION = "X-Contextledger-Session"
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(6)")


def client_for(proxy: Proxy, session: str | None, key: str = KEY) -> openai.OpenAI:
    headers = {SESSION: session} if session is not None else None
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, default_headers=headers)


def respond(client: openai.OpenAI, items: Any, streamed: bool, model: str = "fake", **options: Any) -> Any:
    if streamed:
        with client.responses.stream(model=model, input=items, instructions="Be brief.", **options) as events:
            return events.get_final_response()
    return client.responses.create(model=model, input=items, instructions="Be brief.", **options)


def responses_records(upstream: FakeUpstream) -> list[dict[str, Any]]:
    return [r for r in upstream.received() if r["path"] == "/v1/responses"]


@pytest.mark.parametrize("store", STORES)
def test_a_thirty_turn_session_tool_loop_goes_upstream_valid_compacted_and_byte_for_byte(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, request: pytest.FixtureRequest, store: str
) -> None:
    session = f"loop-{store}"
    with start_proxy(*WINDOW, *store_args(request, store)) as proxy:
        proxy.create_session(session, KEY)
        client = client_for(proxy, session)
        fake_upstream.clear()
        produced: dict[str, dict[str, Any]] = {}  # each item the upstream wrote, by id
        for turn in range(30):
            reply = respond(client, f"turn {turn}: please use the tool " + "context " * 20, streamed=turn % 2 == 0)
            items = output_items(reply)
            calls = [item for item in items if item["type"] == "function_call"]
            assert len(calls) == 1, items
            outputs = [{"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "999 EUR " * 20}]
            reply = respond(client, outputs, streamed=turn % 3 == 0)
            assert reply.output_text.startswith("echo: ")
        records = responses_records(fake_upstream)
        for record in records:
            produced.update({item["id"]: item for item in record["response"]["output"]})
        assert len(records) == 60
        for record in records:
            body = record["body"]
            assert record["strict"] is None
            assert record["authorization"] == f"Bearer {KEY}"
            assert body["instructions"] == "Be brief."
            assert "previous_response_id" not in body
            assert pairing_problems(body["input"]) == [], body["input"]
            assert validate(from_responses(body["input"])) == []
            for item in body["input"]:
                if "id" in item:  # the upstream's own items come back as it wrote them, every field
                    assert item == produced[item["id"]]
        assert max(len(r["body"]["input"]) for r in records) <= 40  # the window, not 150 items
        stored = proxy.messages(session, KEY)
        assert len(stored) >= 120  # the whole history is kept: the cut is the request view's

        # One key is one tenant: another key neither reads the session nor writes to it.
        status, _ = proxy.get(f"/v1/contextledger/sessions/{session}", OTHER_KEY)
        assert status == 404
        with pytest.raises(openai.NotFoundError):
            respond(client_for(proxy, session, OTHER_KEY), "hello", streamed=False)
        # The proxy owns the history: a session turn naming the upstream's is refused, saying why.
        with pytest.raises(openai.BadRequestError, match="upstream state"):
            respond(client, "hello", streamed=False, previous_response_id=reply.id)
        assert proxy.messages(session, KEY) == stored


@pytest.mark.parametrize("store", STORES)
def test_the_seed_facts_sequence_exactly_once_and_failures_storing_nothing(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, request: pytest.FixtureRequest, store: str
) -> None:
    desk = f"desk-{store}"
    with start_proxy("--max-body-bytes", "20000", *store_args(request, store)) as proxy:
        proxy.create_session(desk, KEY)
        client = client_for(proxy, desk)

        def say(text: str, streamed: bool = False, key: str | None = None) -> Any:
            headers = {"Idempotency-Key": key} if key is not None else None
            return respond(client, [{"role": "user", "content": text}], streamed, extra_headers=headers)

        say("module=Reporting; database=PostgreSQL")
        assert proxy.facts(desk, KEY) == {"module": "Reporting", "database": "PostgreSQL"}
        say("module=Billing; database=SQL Server 2022", streamed=True)
        assert proxy.facts(desk, KEY) == {"module": "Billing", "database": "SQL Server 2022"}
        say("Where can I find logs?")
        sent = fake_upstream.last_body()
        assert sent["instructions"] == "Be brief."
        assert "SQL Server 2022" in json.dumps(sent["input"])
        assert "Reporting" not in json.dumps(sent["input"][-2:])
        assert sent["input"][-1] == {"role": "user", "content": "Where can I find logs?"}
        status, report = proxy.call("POST", f"/v1/contextledger/sessions/{desk}/forget", {"key": "module"}, KEY)
        assert status == 200, report
        assert "Billing" not in json.dumps(proxy.messages(desk, KEY))
        say("Which module was it?")
        assert "Billing" not in json.dumps(fake_upstream.last_body())
        assert "SQL Server 2022" in json.dumps(fake_upstream.last_body())

        # Exactly once: a retried turn gets the stored response, as JSON or a stream, calling nothing.
        first = say("turn with a key", key="turn-1")
        calls = len(fake_upstream.received())
        again = say("turn with a key", key="turn-1")
        assert again.id == first.id
        assert output_items(again) == output_items(first)
        streamed = say("turn with a key", streamed=True, key="turn-1")
        assert output_items(streamed) == output_items(first)
        assert streamed.usage == first.usage
        assert len(fake_upstream.received()) == calls
        with pytest.raises(openai.UnprocessableEntityError):
            say("another turn", key="turn-1")

        # Upstream errors, an answer that is no response, broken and failed streams: nothing stored.
        before = proxy.messages(desk, KEY)
        with pytest.raises(openai.InternalServerError):
            respond(client, "module=Lost", streamed=False, model="fake-500")
        with pytest.raises(openai.APIStatusError) as garbage:
            respond(client, "module=Lost", streamed=False, model="fake-garbage")
        assert garbage.value.status_code == 502
        with pytest.raises(openai.APIError, match="stream"):
            respond(client, "module=Lost", streamed=True, model="fake-broken")
        with pytest.raises(RuntimeError, match=r"response\.completed"):  # the client's word for a failed response
            respond(client, "module=Lost", streamed=True, model="fake-failed")
        assert proxy.messages(desk, KEY) == before
        assert proxy.facts(desk, KEY) == {"database": "SQL Server 2022"}
        # A body over the limit is a 413, a call's output must answer a call the session holds open.
        with pytest.raises(openai.APIStatusError) as large:
            respond(client, "x" * 30_000, streamed=False)
        assert large.value.status_code == 413
        with pytest.raises(openai.BadRequestError):
            respond(client, [{"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}], False)
        _, metrics = proxy.get("/metrics")
    assert 'contextledger_requests_total{endpoint="responses",mode="session",status="200"}' in metrics
