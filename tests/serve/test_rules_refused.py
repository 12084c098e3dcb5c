"""A stateless body that breaks its API's structural rules is a 400 from the proxy, in the API's
error shape, naming the rule and where, and the upstream is never called; a body that continues
an earlier one is checked for what it adds (the rules' state kept with the earlier body) with the
same verdict as checking it whole."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream
from tests.serve.in_process import proxy_app

from contextledger.messages import problems_for

with try_import("serve") as serve_extra:
    import httpx


pytestmark = serve_extra.skip


USER = {"role": "user", "content": "hi"}
CALL: dict[str, Any] = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}

# (endpoint, body, the rule's code): each one the provider documents as refused.
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "/v1/messages",
        {"model": "m", "max_tokens": 9, "messages": [{"role": "assistant", "content": "hello"}, USER]},
        "first_message_not_user",
    ),
    (
        "/v1/messages",
        {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
        "empty_text_block",
    ),
    ("/v1/responses", {"model": "m", "input": []}, "empty_input"),
    (
        "/v1/responses",
        {"model": "m", "input": [USER, {"type": "reasoning", "id": "rs_1", "summary": []}]},
        "reasoning_last",
    ),
    (
        "/v1/chat/completions",
        {"model": "m", "messages": [USER, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}]},
        "malformed_tool_call",
    ),
    (
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [
                USER,
                {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"a": 1}}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "r"},
            ],
        },
        "malformed_tool_call",
    ),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}]}, "no_content"),
]


def post_all(app: Any, requests: list[tuple[str, bytes]]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        headers = {"authorization": "Bearer sk-rules", "x-api-key": "sk-rules", "content-type": "application/json"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            answers = [await client.post(path, content=body, headers=headers) for path, body in requests]
        await app.state.proxy.close()
        return answers

    return asyncio.run(run())


@pytest.mark.parametrize(("path", "body", "code"), REFUSED, ids=[f"{p}-{c}" for p, _, c in REFUSED])
def test_a_body_the_api_refuses_is_a_400_before_the_upstream(
    path: str, body: dict[str, Any], code: str, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    api = {"/v1/messages": "anthropic", "/v1/responses": "responses"}.get(path, "chat")
    assert [p.code for p in problems_for(api, body)][:1] == [code]  # type: ignore[arg-type]
    fake_upstream.clear()
    (answer,) = post_all(proxy_app(fake_upstream, tmp_path), [(path, json.dumps(body).encode())])
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    # A message the proxy cannot read at all (a tool call without its function) is refused by the
    # reader first, naming the message; every other refusal names the rule.
    assert error["code"] in (code, "invalid_messages" if code == "malformed_tool_call" else code)
    assert "message 1" in error["message"] or "message 0" in error["message"] or "item" in error["message"]
    if path == "/v1/messages":
        assert answer.json()["type"] == "error"  # Anthropic's shape
        assert error["type"] == "invalid_request_error"
    assert fake_upstream.received() == [], "the upstream was called for a body it would refuse"


MARK = {"type": "ephemeral"}


def growing(endpoint: str, turns: int) -> list[dict[str, Any]]:
    """A conversation with a tool call a turn, in the endpoint's shape (the Messages API's first
    four questions each hold a cache mark, the most a request may hold; the Responses API's first
    question has an id)."""
    items: list[dict[str, Any]] = []
    for turn in range(turns):
        if endpoint == "/v1/messages":
            text: dict[str, Any] = {"type": "text", "text": f"question {turn}"}
            if turn < 4:
                text["cache_control"] = MARK
            items.append({"role": "user", "content": [text]})
            use = {"type": "tool_use", "id": f"toolu_{turn}", "name": "lookup", "input": {}}
            items.append({"role": "assistant", "content": [use]})
            items.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{turn}"}]})
        elif endpoint == "/v1/responses":
            question: dict[str, Any] = {"role": "user", "content": f"question {turn}"}
            if turn == 0:
                question["id"] = "msg_0"
            items.append(question)
            call: dict[str, Any] = {
                "type": "function_call",
                "call_id": f"call_{turn}",
                "name": "lookup",
                "arguments": "{}",
            }
            items += [call, {"type": "function_call_output", "call_id": f"call_{turn}", "output": "r"}]
        else:
            items.append({"role": "user", "content": f"question {turn}"})
            call = {**CALL, "id": f"call_{turn}"}
            items.append({"role": "assistant", "content": None, "tool_calls": [call]})
            items.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": "r"})
    return items


def body_of(endpoint: str, items: list[dict[str, Any]]) -> bytes:
    field = "input" if endpoint == "/v1/responses" else "messages"
    extra = {"max_tokens": 9} if endpoint == "/v1/messages" else {}
    return json.dumps({"model": "m", **extra, field: items}).encode()


# What the fifth body of a growing conversation adds that breaks a rule, and the rule: in Anthropic's
# case a fifth cache mark, which only the marks of the earlier messages make one too many.
BROKEN_BY_WHAT_IS_ADDED = {
    "/v1/chat/completions": "no_content",
    "/v1/responses": "duplicate_item_id",
    "/v1/messages": "too_many_cache_breakpoints",
}


def broken_turn(endpoint: str, turn: dict[str, Any]) -> dict[str, Any]:
    """The user message of a turn, made to break the rule above."""
    if endpoint == "/v1/chat/completions":
        return {"role": "user"}
    if endpoint == "/v1/responses":
        return {**turn, "id": "msg_0"}  # the first turn's id again
    return {**turn, "content": [{"type": "text", "text": turn["content"][0]["text"], "cache_control": MARK}]}


@pytest.mark.parametrize("endpoint", sorted(BROKEN_BY_WHAT_IS_ADDED))
def test_a_growing_conversation_is_checked_for_what_each_body_adds(
    endpoint: str, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Each body repeats the one before and adds a turn; the fifth breaks a rule with what it adds
    and is refused, the sixth goes on from the fourth and is served: the same verdicts as checking
    each body whole."""
    api = {"/v1/messages": "anthropic", "/v1/responses": "responses"}.get(endpoint, "chat")
    conversation = growing(endpoint, 8)
    per_turn = 3
    bodies = [conversation[: per_turn * turns] for turns in range(1, 5)]
    broken = copy.deepcopy(conversation[: per_turn * 5])
    broken[per_turn * 4] = broken_turn(endpoint, broken[per_turn * 4])
    bodies += [broken, conversation[: per_turn * 5]]
    expected = [200, 200, 200, 200, 400, 200]
    whole = [bool(problems_for(api, json.loads(body_of(endpoint, b)))) for b in bodies]  # type: ignore[arg-type]
    assert whole == [status == 400 for status in expected]
    answers = post_all(proxy_app(fake_upstream, tmp_path), [(endpoint, body_of(endpoint, b)) for b in bodies])
    assert [answer.status_code for answer in answers] == expected, [a.text for a in answers]
    assert answers[4].json()["error"]["code"] == BROKEN_BY_WHAT_IS_ADDED[endpoint]


def test_the_same_messages_with_other_fields_are_checked_again(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    """What the messages made is kept for the same messages again, but the rules read the body's
    other fields too: the same conversation under a system prompt holding its fifth cache mark is
    refused, though the body before it was served."""
    question = "a question long enough that the proxy keeps its body for the next one " * 8
    messages = [{"role": "user", "content": [{"type": "text", "text": question, "cache_control": MARK}]}]
    marked = [{"type": "text", "text": f"rule {n}", "cache_control": MARK} for n in range(4)]
    plain = {"model": "m", "max_tokens": 9, "messages": messages}
    answers = post_all(
        proxy_app(fake_upstream, tmp_path),
        [
            ("/v1/messages", json.dumps(plain).encode()),
            ("/v1/messages", json.dumps({**plain, "system": marked}).encode()),
        ],
    )
    assert [answer.status_code for answer in answers] == [200, 400], [a.text for a in answers]
    assert answers[1].json()["error"]["code"] == "too_many_cache_breakpoints"
