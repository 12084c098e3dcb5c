"""Valid in, valid out, through the proxy: whenever a client's body keeps its API's structural rules,
every body the proxy forwards keeps them too, stateless and in sessions, under the proxy's default
strategy and the built-in ones, with tool use, reasoning or thinking, parallel calls and messages
larger than the default trigger.

The oracle is :func:`contextledger.messages.problems_for` on what the recording fake upstream
received; the conversations are drawn by hypothesis (``tests/compaction/test_valid_out.py`` writes
the stateless ones; a session's turns answer the calls the fake upstream makes).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.compaction.test_valid_out import BODIES, HUGE, scripts, spoken, user_texts
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream
from tests.serve.in_process import proxy_app
from tests.sizes import examples

from contextledger.messages import problems_for
from contextledger.serve import StrategySpec

with try_import("serve") as serve_extra:
    import httpx


pytestmark = serve_extra.skip


API = Literal["chat", "responses", "anthropic"]
PATHS: dict[API, str] = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
STRATEGIES = {
    "default": None,  # the proxy's own default
    "window": StrategySpec("sliding-window", ("trigger=turns_exceed(2)",)),
    "truncation": StrategySpec("truncation", ("max_n=3000", "compact_to=1000")),
    "collapse": StrategySpec("tool-result-collapse", ("keep_last_tool_call_groups=1",)),
    "budget": StrategySpec(budget=2_000),
}
HEADERS = {"authorization": "Bearer sk-valid-out", "x-api-key": "sk-valid-out", "content-type": "application/json"}
SLOW = settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))


def forwarded(fake_upstream: FakeUpstream, api: API) -> list[dict[str, Any]]:
    return [record["body"] for record in fake_upstream.received() if record["path"] == PATHS[api]]


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@SLOW
@given(steps=scripts(), strategy=st.sampled_from(sorted(STRATEGIES)))
def test_a_valid_stateless_body_is_forwarded_valid(
    api: API, steps: list[dict[str, Any]], strategy: str, fake_upstream: FakeUpstream
) -> None:
    body = BODIES[api](steps)
    assert problems_for(api, body) == []
    fake_upstream.clear()
    with tempfile.TemporaryDirectory() as folder:
        app = proxy_app(fake_upstream, Path(folder), STRATEGIES[strategy])

        async def run() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
                answer = await client.post(PATHS[api], content=json.dumps(body), headers=HEADERS)
            await app.state.proxy.close()
            return answer

        answer = asyncio.run(run())
    assert answer.status_code == 200, answer.text
    (sent,) = forwarded(fake_upstream, api)
    assert problems_for(api, sent) == [], (strategy, [str(p) for p in problems_for(api, sent)])
    said = spoken(api, body)
    assert not [text for text in user_texts(api, sent) if text in said], "an assistant's words sent as the user's"


def next_turn(api: API, reply: dict[str, Any], number: int, words: int, tool: bool) -> tuple[list[Any], str]:
    """The session turn after ``reply``: the results of the calls it made, else a user message
    (asking for a tool when ``tool``); and the model to ask (the chat fake calls a tool when its
    model says so, the others when the user's text does)."""
    text = f"turn {number} " + "word " * words + (" use the tool" if tool else "")
    if api == "chat":
        calls = ((reply.get("choices") or [{}])[0].get("message") or {}).get("tool_calls") or []
        if calls:
            return [{"role": "tool", "tool_call_id": call["id"], "content": "result"} for call in calls], "fake"
        return [{"role": "user", "content": text}], "fake-tool" if tool else "fake"
    if api == "responses":
        calls = [item for item in reply.get("output", []) if item.get("type") == "function_call"]
        if calls:
            return [
                {"type": "function_call_output", "call_id": c["call_id"], "output": "result"} for c in calls
            ], "fake"
        return [{"role": "user", "content": text}], "fake"
    uses = [block for block in reply.get("content", []) if block.get("type") == "tool_use"]
    if uses:
        results = [{"type": "tool_result", "tool_use_id": use["id"], "content": "result"} for use in uses]
        return [{"role": "user", "content": results}], "fake"
    return [{"role": "user", "content": text}], "fake"


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
@SLOW
@given(
    turns=st.lists(st.tuples(st.sampled_from([3, 40, 400, HUGE]), st.booleans()), min_size=1, max_size=8),
    strategy=st.sampled_from(sorted(STRATEGIES)),
)
def test_every_session_request_is_forwarded_valid(
    api: API, turns: list[tuple[int, bool]], strategy: str, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.clear()
    with tempfile.TemporaryDirectory() as folder:
        app = proxy_app(fake_upstream, Path(folder), STRATEGIES[strategy])

        async def run() -> None:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
                created = await client.post("/v1/contextledger/sessions", json={"id": "s"}, headers=HEADERS)
                assert created.status_code == 201, created.text
                reply: dict[str, Any] = {}
                for number, (words, tool) in enumerate(turns):
                    items, model = next_turn(api, reply, number, words, tool)
                    field = "input" if api == "responses" else "messages"
                    body = {"model": model, field: items, **({"max_tokens": 64} if api == "anthropic" else {})}
                    answer = await client.post(
                        PATHS[api], content=json.dumps(body), headers={**HEADERS, "x-contextledger-session": "s"}
                    )
                    assert answer.status_code == 200, (number, answer.text)
                    reply = answer.json()
            await app.state.proxy.close()

        asyncio.run(run())
    sent = forwarded(fake_upstream, api)
    assert len(sent) == len(turns)
    for number, body in enumerate(sent):
        assert problems_for(api, body) == [], (strategy, number, [str(p) for p in problems_for(api, body)])
