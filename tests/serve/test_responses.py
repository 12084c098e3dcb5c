"""``POST /v1/responses`` through a real ``contextledger serve``, driven by the official ``openai``
client against the recording fake upstream: 30 turns of reasoning items and function calls, sent
statelessly (the whole input each time), streamed and not.

What the upstream receives must be a valid Responses input (every call with its output, every
reasoning item before the item it belongs to), compacted once it passes the trigger, and made of
the very items the client sent (ids and encrypted reasoning byte for byte) or summaries the proxy
wrote.  The two inputs passed through uncompacted say so in a header, and errors come in the API's
shape.  Session mode is ``test_responses_sessions.py``.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, StartProxy
from tests.serve.near_valid import FUZZ_KEY, Client, dump
from tests.serve.near_valid import _mutate as mutate
from tests.sizes import sized

from contextledger.messages import from_responses, validate

with try_import("openai") as openai_extra:
    import openai

pytestmark = openai_extra.skip

KEY = "sk-client-responses-0123456789"
# A truncation on tokens: 30 turns of tool calls pass 3,000 tokens by about the tenth.
TRUNCATION = ("--strategy", "truncation", "--param", "max_n=3000", "--param", "compact_to=1500")


def output_items(response: Any) -> list[dict[str, Any]]:
    """A response's output as input items, as a client sends them back next turn."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def pairing_problems(items: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    opened: set[str] = set()
    for position, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            opened.add(item["call_id"])
        elif kind == "function_call_output" and item["call_id"] not in opened:
            problems.append(f"item {position}: output of {item['call_id']} without its call")
        elif kind == "reasoning":
            following = items[position + 1] if position + 1 < len(items) else None
            if following is None or following.get("role") == "user" or following.get("type") == "reasoning":
                problems.append(f"item {position}: reasoning not followed by what it belongs to")
    answered = {item["call_id"] for item in items if item.get("type") == "function_call_output"}
    problems += [f"call {call_id} has no output" for call_id in sorted(opened - answered)]
    return problems


def run_conversation(client: Any, turns: int, *, stream: bool) -> list[dict[str, Any]]:
    """``turns`` turns, every other one asking for a tool; returns every item the client sent."""
    items: list[dict[str, Any]] = []
    for number in range(turns):
        ask = "please use the tool" if number % 2 == 0 else "thanks, go on"
        items.append({"role": "user", "content": f"turn {number}: {ask} " + "context " * 30})
        while True:
            if stream:
                with client.responses.stream(model="fake", input=items, instructions="Be brief.") as events:
                    response = events.get_final_response()
            else:
                response = client.responses.create(model="fake", input=items, instructions="Be brief.")
            new = output_items(response)
            items += new
            calls = [item for item in new if item["type"] == "function_call"]
            if not calls:
                break
            items += [
                {"type": "function_call_output", "call_id": call["call_id"], "output": "laptop: 999 EUR " * 20}
                for call in calls
            ]
    return items


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_thirty_turns_of_calls_and_reasoning_are_compacted_validly_and_byte_for_byte(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.clear()
    with start_proxy(*TRUNCATION) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        sent_by_client = run_conversation(client, 30, stream=stream)
    received = [r for r in fake_upstream.received() if r["path"] == "/v1/responses"]
    assert len(received) == 45  # 30 turns, 15 of them with a tool call
    known = {json.dumps(item, sort_keys=True) for item in sent_by_client}
    for record in received:
        body = record["body"]
        assert record["strict"] is None
        assert record["authorization"] == f"Bearer {KEY}"
        assert body["instructions"] == "Be brief."
        items = body["input"]
        assert pairing_problems(items) == [], items
        assert validate(from_responses(items)) == []
        for item in items:
            # Every item is one the client sent, as it sent it, or a summary the proxy wrote.
            assert json.dumps(item, sort_keys=True) in known or item.get("role") == "assistant", item
    last = received[-1]["body"]["input"]
    assert len(last) < len(sent_by_client) * 0.7  # the whole conversation was cut down, from its start
    assert last[0] != sent_by_client[0]
    reasoning = [item for item in last if item.get("type") == "reasoning"]
    assert reasoning
    assert all(item["encrypted_content"].startswith("opaque-") for item in reasoning)


def test_a_request_continuing_a_stored_response_or_with_text_input_passes_through(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    long_input = [{"role": "user", "content": "word " * 4000}, {"role": "user", "content": "and more " * 3000}]
    with start_proxy(*TRUNCATION) as proxy:
        for body, said in (
            ({"model": "fake", "input": long_input, "previous_response_id": "resp_1"}, "skipped; previous_response_id"),
            ({"model": "fake", "input": "just a question"}, "skipped; text input"),
            ({"model": "fake", "input": long_input}, "compacted"),
        ):
            client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
            raw = client.responses.with_raw_response.create(**body)
            assert raw.headers["x-contextledger-compaction"] == said
            forwarded = fake_upstream.last_body()
            if said.startswith("skipped"):
                assert forwarded["input"] == body["input"]
            else:
                assert forwarded["input"] == long_input[1:]


def test_bad_input_and_upstream_errors_answer_in_the_apis_shape(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    with start_proxy(*TRUNCATION) as proxy:
        for bad, code in (
            ({"input": "hi"}, 400),
            ({"model": "fake", "input": 3}, 400),
            ({"model": "fake", "input": [{"type": "function_call_output", "output": "x"}]}, 400),
            ({"model": "fake", "input": "hi", "stream": "yes"}, 400),
            (b'{"model": "fake", "input": "hi", "input": "again"}', 400),
            (b"[1, 2]", 400),
        ):
            status, answer = proxy.call("POST", "/v1/responses", bad, KEY)
            assert status == code, (bad, answer)
            assert set(answer["error"]) >= {"message", "type", "code"}, answer
        client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.responses.create(model="fake-500", input="hi")
        with pytest.raises(openai.APIStatusError) as garbage:
            client.responses.create(model="fake-garbage", input="hi")
        assert garbage.value.status_code == 502
        broken = client.responses.stream(model="fake-broken", input=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.APIError, match="stream"), broken as events:
            events.get_final_response()


# Hostile input -------------------------------------------------------------------------------

FUZZ_BODIES = sized(full=1_500, small=250)


def responses_input(rng: random.Random) -> list[dict[str, Any]]:
    call = f"call_{rng.randint(0, 999)}"
    shapes: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": "hello 東京 \u200b"}],
        [
            {"role": "developer", "content": "Be exact."},
            {"role": "user", "content": [{"type": "input_text", "text": "price of item 4?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "id": "fc_1", "call_id": call, "name": "price", "arguments": "{}"},
            {"type": "function_call_output", "call_id": call, "output": "12 EUR"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "12 EUR"}]},
            {"role": "user", "content": "and item 5?"},
        ],
        [{"type": "web_search_call", "id": "ws_1", "status": "completed"}, {"role": "user", "content": "next"}],
    ]
    return json.loads(json.dumps(rng.choice(shapes)))  # type: ignore[no-any-return]


def near_valid_responses(count: int, seed: int) -> list[bytes]:
    """Valid Responses bodies with one to three mutations each (a tenth left valid)."""
    rng = random.Random(seed)
    bodies: list[bytes] = []
    for _ in range(count):
        body: Any = {"model": "fake", "input": responses_input(rng), "instructions": "Be brief."}
        if rng.random() < 0.3:
            body["stream"] = True
        if rng.random() >= 0.1:
            for _ in range(rng.choice([1, 1, 2, 3])):
                if not isinstance(body, dict) or not body:
                    break
                body = mutate(rng, body)
        bodies.append(dump(body).encode("utf-8", "surrogatepass"))
    return bodies


def test_near_valid_responses_bodies_never_get_a_500_and_nothing_invalid_goes_upstream(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    fake_upstream.clear()
    statuses: Counter[tuple[str, int]] = Counter()
    leaks: list[str] = []
    # The session's window is by turns: a fuzzed item's unknown fields weigh no tokens, and the fake
    # upstream, unlike a real one, takes them, so a token budget would let them pile up.
    window = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(2)")
    with start_proxy(*TRUNCATION) as proxy, start_proxy(*window, "--store", f"sqlite:{tmp_path / 'f.db'}") as sessions:
        sessions.create_session("fuzzed", FUZZ_KEY)
        clients = {  # one keep-alive connection each, throughout
            "stateless": Client(proxy.root, {}, path="/v1/responses"),
            "session": Client(sessions.root, {"X-Contextledger-Session": "fuzzed"}, path="/v1/responses"),
        }
        for number, body in enumerate(near_valid_responses(FUZZ_BODIES, seed=25)):
            for mode, client in clients.items():
                status, raw = client.post(body)
                statuses[mode, status] += 1
                text = raw.decode("utf-8", "replace")
                if status >= 500 or "Traceback" in text:
                    leaks.append(f"body {number} ({mode}): {status} {text[:200]} <- {body[:200]!r}")
                elif status >= 400:
                    assert set(json.loads(raw)) == {"error"}, (number, mode, text[:200])
        log = proxy.log.read_text(errors="replace") + sessions.log.read_text(errors="replace")
    forwarded = [r for r in fake_upstream.received() if r["path"] == "/v1/responses"]
    fake_upstream.clear()  # the bodies are odd on purpose: no later test should read them
    refused: list[str] = []
    for record in forwarded:
        body = record["body"]
        if record["strict"] is not None or not isinstance(body.get("model"), str):
            refused.append(f"{record['strict']} / model {body.get('model')!r}")
        elif isinstance(body.get("input"), list) and body.get("previous_response_id") is None:
            problems = validate(from_responses(body["input"]))
            if problems:
                refused.append(str(problems[0]))
    print(f"responses: {dict(sorted(statuses.items()))}; {len(forwarded)} forwarded")
    assert not leaks, leaks[:5]
    assert "Traceback" not in log
    assert [client.broken for client in clients.values()] == [0, 0], statuses
    assert not refused, refused[:5]
    assert statuses["stateless", 200] > FUZZ_BODIES // 20
    assert statuses["session", 200] > FUZZ_BODIES // 20
