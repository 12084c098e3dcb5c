"""Through the proxy, a provider's compaction item is a boundary: in a growing conversation every
forwarded request holds the newest one, byte for byte, under every built-in strategy and the
default, stateless and in sessions, on the Responses and Messages APIs; ``context_management``
and ``anthropic-beta`` reach the upstream as the client sent them; the compaction usage the
provider bills reaches ``/metrics``.

The upstream (``provider_compaction_upstream.py``) compacts as the providers do and refuses what
they refuse: a changed or missing compaction item cannot pass it unnoticed.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.optional_imports import try_import

with try_import("serve") as serve_extra:
    import httpx
    from tests.serve.provider_compaction_upstream import CompactingUpstream, compacting_upstream

    from contextledger.serve import ServeConfig, StrategySpec, create_app

pytestmark = serve_extra.skip

API = Literal["responses", "anthropic"]
PATHS: dict[API, str] = {"responses": "/v1/responses", "anthropic": "/v1/messages"}
HEADERS = {"authorization": "Bearer sk-client", "x-api-key": "sk-client", "content-type": "application/json"}
BETA = "compact-2026-01-12,context-management-2025-06-27"
MANAGEMENT: dict[API, Any] = {
    "responses": [{"type": "compaction", "compact_threshold": 600}],
    "anthropic": {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 600}}]},
}
STRATEGIES: dict[str, tuple[str | None, tuple[str, ...], int | None]] = {
    "default": (None, (), None),
    "window-turns": ("sliding-window", ("trigger=turns_exceed(3)",), None),
    "window-groups": ("sliding-window", ("keep_last_groups=4",), None),
    "truncation": ("truncation", ("max_n=500", "compact_to=250"), None),
    "collapse": ("tool-result-collapse", ("keep_last_tool_call_groups=1",), None),
    "selective": ("selective-tool-call", ("keep_last_tool_call_groups=0",), None),
    "budget": (None, (), 700),
}
REQUESTS = 20
BIG = 3  # the request whose size makes the provider compact


@pytest.fixture(scope="module")
def upstream() -> Iterator[CompactingUpstream]:
    with compacting_upstream() as running:
        yield running


def app_for(upstream: CompactingUpstream, folder: Path, strategy: str) -> Any:
    name, params, budget = STRATEGIES[strategy]
    extra: dict[str, Any] = {}
    if strategy != "default":
        extra["strategy"] = StrategySpec(name, params, budget=budget)
    config = ServeConfig(
        upstream.base_url,
        anthropic_upstream=upstream.base_url.removesuffix("/v1"),
        store=f"sqlite:{folder / 's.db'}",
        **extra,
    )
    return create_app(config)


def user_turn(api: API, number: int) -> dict[str, Any]:
    """Short requests, but for a long one early on that makes the provider compact; what follows
    stays under its threshold, so the item ages as the conversation grows (where strategies that
    count from the start would drop it)."""
    text = f"request {number}: " + "tell me more about it " * (150 if number == BIG else 3)
    return {"role": "user", "content": text}


def reply_items(api: API, reply: dict[str, Any]) -> list[dict[str, Any]]:
    """What a client appends to its history from a reply."""
    if api == "responses":
        return list(reply["output"])
    return [{"role": "assistant", "content": reply["content"]}]


def newest_compaction(api: API, history: list[dict[str, Any]]) -> Any:
    """The newest compaction item (Responses) or block (Anthropic) of a client's history."""
    found = None
    for item in history:
        if api == "responses" and item.get("type") == "compaction":
            found = item
        content = item.get("content")
        for block in content if api == "anthropic" and isinstance(content, list) else []:
            if block.get("type") == "compaction":
                found = block
    return found


def holds(api: API, body: dict[str, Any], wanted: Any) -> bool:
    if api == "responses":
        return wanted in body["input"]
    return any(wanted in message["content"] for message in body["messages"] if isinstance(message.get("content"), list))


def body_of(api: API, items: list[dict[str, Any]]) -> dict[str, Any]:
    field = "input" if api == "responses" else "messages"
    body: dict[str, Any] = {"model": "fake", field: items, "context_management": MANAGEMENT[api]}
    if api == "anthropic":
        body["max_tokens"] = 64
    return body


def headers_for(api: API, session: str | None = None) -> dict[str, str]:
    extra = {"anthropic-beta": BETA, "anthropic-version": "2023-06-01"} if api == "anthropic" else {}
    return {**HEADERS, **extra, **({"x-contextledger-session": session} if session else {})}


def converse(upstream: CompactingUpstream, api: API, strategy: str, *, session: bool) -> list[tuple[Any, bool]]:
    """Run a growing conversation of :data:`REQUESTS` requests; for each forwarded request, the
    newest compaction item the client held when sending it and whether the request held it."""
    upstream.received.clear()
    checks: list[tuple[Any, bool]] = []
    with tempfile.TemporaryDirectory() as folder:
        app = app_for(upstream, Path(folder), strategy)

        async def run() -> None:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
                if session:
                    created = await client.post("/v1/contextledger/sessions", json={"id": "s"}, headers=HEADERS)
                    assert created.status_code == 201, created.text
                history: list[dict[str, Any]] = []
                for number in range(REQUESTS):
                    turn = user_turn(api, number)
                    history.append(turn)
                    wanted = newest_compaction(api, history)
                    sent = [turn] if session else history
                    answer = await client.post(
                        PATHS[api],
                        content=json.dumps(body_of(api, sent)),
                        headers=headers_for(api, "s" if session else None),
                    )
                    assert answer.status_code == 200, (strategy, number, answer.text)
                    forwarded = upstream.bodies(PATHS[api])[-1]
                    checks.append((wanted, wanted is None or holds(api, forwarded, wanted)))
                    history.extend(reply_items(api, answer.json()))
            await app.state.proxy.close()

        asyncio.run(run())
    return checks


@pytest.mark.parametrize("session", [False, True], ids=["stateless", "session"])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_every_forwarded_request_of_a_growing_conversation_holds_the_newest_item(
    upstream: CompactingUpstream, api: API, strategy: str, session: bool
) -> None:
    checks = converse(upstream, api, strategy, session=session)
    carried = [kept for wanted, kept in checks if wanted is not None]
    assert len(checks) == REQUESTS
    assert len(carried) >= REQUESTS // 2, "the upstream compacted too late for the test to mean anything"
    assert all(carried), f"{carried.count(False)} of {len(carried)} requests lost the compaction item"
    first = next(number for number, (wanted, _) in enumerate(checks) if wanted is not None)
    assert first == BIG + 1, "the provider compacts on the long request"


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_context_management_and_the_beta_header_reach_the_upstream_as_sent(
    upstream: CompactingUpstream, api: API
) -> None:
    upstream.received.clear()
    with tempfile.TemporaryDirectory() as folder:
        app = app_for(upstream, Path(folder), "window-turns")

        async def run() -> None:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
                answer = await client.post(
                    PATHS[api], content=json.dumps(body_of(api, [user_turn(api, 0)])), headers=headers_for(api)
                )
                assert answer.status_code == 200, answer.text
            await app.state.proxy.close()

        asyncio.run(run())
    (record,) = upstream.received
    assert record["body"]["context_management"] == MANAGEMENT[api]
    if api == "anthropic":
        assert record["headers"]["anthropic-beta"] == BETA


def test_an_output_whose_call_went_before_the_item_is_no_orphan(upstream: CompactingUpstream) -> None:
    """A client may drop what precedes the newest compaction item (OpenAI's guide says so): an
    output left after it whose call was before it is held by the item, not refused."""
    item = {"id": "cmp_dropped", "type": "compaction", "encrypted_content": "gAAAA-earlier"}
    upstream.written.append(json.dumps(item, sort_keys=True))
    upstream.received.clear()
    items = [
        item,
        {"type": "function_call_output", "call_id": "call_before", "output": "42"},
        *(user_turn("responses", n) for n in range(4)),
    ]
    with tempfile.TemporaryDirectory() as folder:
        app = app_for(upstream, Path(folder), "window-groups")

        async def run() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
                answer = await client.post(
                    "/v1/responses", content=json.dumps(body_of("responses", items)), headers=HEADERS
                )
            await app.state.proxy.close()
            return answer

        answer = asyncio.run(run())
    assert answer.status_code == 200, answer.text
    (forwarded,) = upstream.bodies("/v1/responses")
    assert forwarded["input"][0] == item


# Random conversations through the proxy -------------------------------------------------------------

SOME = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def client_history(api: API, turns: list[tuple[int, bool]], at: int, number: int) -> tuple[list[dict[str, Any]], Any]:
    """A client's history of ``turns`` (words, whether the turn uses a tool), with a compaction
    item the upstream wrote after turn ``at``'s reply; and that item."""
    history: list[dict[str, Any]] = []
    item: Any = None
    for turn, (words, tool) in enumerate(turns):
        text = f"turn {turn} " + "word " * words
        history.append({"role": "user", "content": text})
        call = f"call_{number}_{turn}"
        if api == "responses":
            if tool:
                history.append({"type": "function_call", "call_id": call, "name": "lookup", "arguments": "{}"})
                history.append({"type": "function_call_output", "call_id": call, "output": "result " * words})
            if turn == at:
                item = {"id": f"cmp_r{number}", "type": "compaction", "encrypted_content": f"gAAAA-{number}"}
                history.append(item)
            history.append({"role": "assistant", "content": f"answer {turn}"})
            continue
        if tool:
            use = {"type": "tool_use", "id": call, "name": "lookup", "input": {}}
            history.append({"role": "assistant", "content": [use]})
            result = {"type": "tool_result", "tool_use_id": call, "content": "result " * words}
            history.append({"role": "user", "content": [result]})
        blocks: list[dict[str, Any]] = []
        if turn == at:
            item = {"type": "compaction", "content": f"Summary {number} of turns 0-{turn}."}
            blocks.append(item)
        blocks.append({"type": "text", "text": f"answer {turn}"})
        history.append({"role": "assistant", "content": blocks})
    return history, item


@pytest.mark.parametrize("api", ["responses", "anthropic"])
@SOME
@given(
    turns=st.lists(st.tuples(st.sampled_from([2, 30, 300]), st.booleans()), min_size=2, max_size=9),
    at=st.integers(min_value=0, max_value=8),
    strategy=st.sampled_from(sorted(STRATEGIES)),
)
def test_no_forwarded_request_holds_what_follows_the_item_without_it(
    upstream: CompactingUpstream, api: API, turns: list[tuple[int, bool]], at: int, strategy: str
) -> None:
    at = min(at, len(turns) - 1)
    number = len(upstream.written)
    history, item = client_history(api, turns, at, number)
    history.append(user_turn(api, 99))
    upstream.written.append(json.dumps(item, sort_keys=True))
    upstream.received.clear()
    with tempfile.TemporaryDirectory() as folder:
        app = app_for(upstream, Path(folder), strategy)

        async def run() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
                answer = await client.post(
                    PATHS[api], content=json.dumps(body_of(api, history)), headers=headers_for(api)
                )
            await app.state.proxy.close()
            return answer

        answer = asyncio.run(run())
    assert answer.status_code == 200, (strategy, answer.text)  # the upstream refuses what its API would
    (forwarded,) = upstream.bodies(PATHS[api])
    assert holds(api, forwarded, item), strategy
