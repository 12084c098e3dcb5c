"""The Messages API through the proxy's default strategy: a conversation Anthropic takes is
forwarded as one Anthropic takes, stateless and in a session, however the cut falls.

The recording fake checks each forwarded body as the Messages API would (``problems``): the first
message the user's, every ``tool_result`` first in the message right after its ``tool_use``.
"""

from __future__ import annotations

from typing import Any

from tests.serve.conftest import FakeUpstream, StartProxy
from tests.serve.test_anthropic_sdk import anthropic_records, anthropic_root

KEY = "sk-ant-client-openings-0123456789"
PASTE = "Summarise this:\n" + "lorem ipsum dolor sit amet " * 5_200  # 140,000 characters and more
TOOL_USE: dict[str, Any] = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "I will look the report up first."},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"q": "report"}},
    ],
}
TOOL_RESULT: dict[str, Any] = {
    "role": "user",
    "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "the report"},
        {"type": "text", "text": "thanks"},
    ],
}


def body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "fake", "max_tokens": 64, "messages": messages}


def headers(session: str | None = None) -> dict[str, str]:
    given = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    if session is not None:
        given["X-Contextledger-Session"] = session
    return given


def unmarked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]} for m in messages
    ]


def assert_forwarded_valid(upstream: FakeUpstream) -> dict[str, Any]:
    record = anthropic_records(upstream)[-1]
    assert record["problems"] == [], record["problems"]
    forwarded: dict[str, Any] = record["body"]
    first = forwarded["messages"][0]
    assert first["role"] == "user"
    texts = [b.get("text") for m in forwarded["messages"] if m["role"] == "user" for b in m["content"]]
    assert "I will look the report up first." not in texts, "the assistant's words sent as the user's"
    return forwarded


def test_the_pasted_document_case_answers_200_stateless_through_the_default_strategy(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    assert len(PASTE) > 140_000
    with start_proxy("--anthropic-upstream", anthropic_root(fake_upstream)) as proxy:
        fake_upstream.clear()
        status, answer = proxy.call(
            "POST", "/v1/messages", body([{"role": "user", "content": PASTE}, TOOL_USE, TOOL_RESULT]), headers=headers()
        )
        assert status == 200, answer
        forwarded = assert_forwarded_valid(fake_upstream)
        assert forwarded["messages"][0]["content"] == [{"type": "text", "text": "[1 earlier message set aside]"}]
        assert unmarked(forwarded["messages"][1:]) == [TOOL_USE, TOOL_RESULT]  # the proxy adds its breakpoints
        # The next request of the conversation is forwarded valid too.
        reply: dict[str, Any] = {"role": "assistant", "content": answer["content"]}
        later: list[dict[str, Any]] = [
            {"role": "user", "content": PASTE},
            TOOL_USE,
            TOOL_RESULT,
            reply,
            {"role": "user", "content": "more"},
        ]
        status, answer = proxy.call("POST", "/v1/messages", body(later), headers=headers())
        assert status == 200, answer
        assert_forwarded_valid(fake_upstream)


def test_the_pasted_document_case_answers_200_in_a_session(
    start_proxy: StartProxy, fake_upstream: FakeUpstream
) -> None:
    with start_proxy("--anthropic-upstream", anthropic_root(fake_upstream)) as proxy:
        proxy.create_session("paste", KEY)
        fake_upstream.clear()
        # The fake answers a user text holding the word "tool" with a tool_use of its own.
        status, answer = proxy.call(
            "POST",
            "/v1/messages",
            body([{"role": "user", "content": PASTE + " use the tool"}]),
            headers=headers("paste"),
        )
        assert status == 200, answer
        (call,) = [block for block in answer["content"] if block["type"] == "tool_use"]
        result = {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call["id"], "content": "the report"},
                {"type": "text", "text": "thanks"},
            ],
        }
        for turn in ([result], [{"role": "user", "content": "and then?"}]):
            status, answer = proxy.call("POST", "/v1/messages", body(turn), headers=headers("paste"))
            assert status == 200, answer
            forwarded = assert_forwarded_valid(fake_upstream)
            assert forwarded["messages"][0]["content"] == [{"type": "text", "text": "[1 earlier message set aside]"}]
        assert len(proxy.messages("paste", KEY)) >= 5, "the session keeps everything; only what is sent is cut"
