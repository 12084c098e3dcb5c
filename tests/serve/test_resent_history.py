"""A session client that keeps sending its whole conversation (the natural first step of adopting
session mode) is neither forwarded its history twice nor stored twice: the stored history it
repeats is recognised and only what follows it is new, which the answer says.  Through a real
``contextledger serve``, on chat completions (with a tool loop), the Responses API and the
Messages API, streamed and not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

with try_import("serve") as serve_extra:
    import httpx

pytestmark = serve_extra.skip

KEY = "sk-resent-0123456789"
RESENT = "x-contextledger-resent"
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


@pytest.fixture(scope="module")
def proxy(start_proxy_module: StartProxy, fake_upstream: FakeUpstream) -> Iterator[Proxy]:
    with start_proxy_module("--anthropic-upstream", fake_upstream.base_url.removesuffix("/v1")) as running:
        yield running


def body(api: str, messages: list[dict[str, Any]], model: str = "fake", stream: bool = False) -> dict[str, Any]:
    if api == "responses":
        return {"model": model, "input": messages, "stream": stream}
    extra = {"max_tokens": 64} if api == "messages" else {}
    return {"model": model, "messages": messages, "stream": stream, **extra}


def send(proxy: Proxy, session: str, payload: dict[str, Any], path: str, **headers: str) -> httpx.Response:
    sent = {"authorization": f"Bearer {KEY}", "x-api-key": KEY, "x-contextledger-session": session, **headers}
    return httpx.post(proxy.base_url + path, json=payload, headers=sent, timeout=30)


def reply_items(api: str, answer: httpx.Response) -> list[dict[str, Any]]:
    """What the client appends to its conversation from a JSON answer."""
    if api == "chat":
        return [answer.json()["choices"][0]["message"]]
    if api == "messages":
        return [{"role": "assistant", "content": answer.json()["content"]}]
    output: list[dict[str, Any]] = answer.json()["output"]
    return output


def sent_upstream(fake_upstream: FakeUpstream) -> list[Any]:
    last = fake_upstream.last_body()
    items = last.get("messages") or last.get("input")
    assert isinstance(items, list)
    return items


def without_facts(items: list[Any]) -> list[str]:
    """The upstream's messages as comparable text, the facts block left out."""
    texts = [json.dumps(item, sort_keys=True) for item in items]
    return [text for text in texts if "user_facts" not in text]


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("stream", [False, True])
def test_a_resent_history_is_sent_and_stored_once(
    api: str, stream: bool, proxy: Proxy, fake_upstream: FakeUpstream
) -> None:
    session = f"resent-{api}-{stream}"
    proxy.create_session(session, KEY)
    path = PATHS[api]
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "question A"}]
    first = send(proxy, session, body(api, conversation), path)
    assert first.status_code == 200, first.text
    assert RESENT not in first.headers
    conversation += reply_items(api, first)
    for turn in ("question B", "question C"):
        before = len(proxy.messages(session, KEY))
        conversation.append({"role": "user", "content": turn})
        fake_upstream.clear()
        answer = send(proxy, session, body(api, conversation, stream=stream), path)
        assert answer.status_code == 200, answer.text
        assert answer.headers[RESENT] == str(before), "the answer says how much of the request was already stored"
        forwarded = without_facts(sent_upstream(fake_upstream))
        assert len(forwarded) == len(set(forwarded)), f"a message went upstream twice: {forwarded}"
        stored = proxy.messages(session, KEY)
        assert [m["role"] for m in stored].count("user") == len([m for m in conversation if m.get("role") == "user"]), (
            "each user message stored once"
        )
        if stream:
            assert answer.text.rstrip().endswith(("[DONE]", "}")), answer.text[-200:]
            break  # a streamed reply is not read back into the conversation here
        conversation += reply_items(api, answer)


def test_a_resent_tool_loop_keeps_its_call_ids_once(proxy: Proxy, fake_upstream: FakeUpstream) -> None:
    """The resent calls would be refused as duplicate ids by the session's validity check, were the
    resent history not recognised first."""
    session = "resent-tools"
    proxy.create_session(session, KEY)
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "look the laptop up"}]
    first = send(proxy, session, body("chat", conversation, model="fake-tool"), "/chat/completions")
    assert first.status_code == 200, first.text
    call = first.json()["choices"][0]["message"]
    conversation += [call, {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "in stock"}]
    fake_upstream.clear()
    second = send(proxy, session, body("chat", conversation), "/chat/completions")
    assert second.status_code == 200, second.text
    assert second.headers[RESENT] == "2"
    forwarded = sent_upstream(fake_upstream)
    ids = [c["id"] for m in forwarded for c in m.get("tool_calls") or []]
    assert ids == [call["tool_calls"][0]["id"]]
    conversation += [second.json()["choices"][0]["message"], {"role": "user", "content": "thanks"}]
    third = send(proxy, session, body("chat", conversation), "/chat/completions")
    assert third.status_code == 200, third.text
    assert third.headers[RESENT] == "4"
    roles = [m["role"] for m in proxy.messages(session, KEY)]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_nothing_after_the_stored_history_is_a_400_naming_the_fix(proxy: Proxy) -> None:
    session = "resent-nothing-new"
    proxy.create_session(session, KEY)
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    first = send(proxy, session, body("chat", conversation), "/chat/completions")
    conversation += reply_items("chat", first)
    again = send(proxy, session, body("chat", conversation), "/chat/completions")
    assert again.status_code == 400, again.text
    error = again.json()["error"]
    assert error["code"] == "nothing_new"
    assert "send only the new messages" in error["message"]
    assert len(proxy.messages(session, KEY)) == 2


def test_a_retry_with_the_whole_history_gets_the_stored_reply(proxy: Proxy, fake_upstream: FakeUpstream) -> None:
    session = "resent-retry"
    proxy.create_session(session, KEY)
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "one"}]
    conversation += reply_items("chat", send(proxy, session, body("chat", conversation), "/chat/completions"))
    conversation.append({"role": "user", "content": "two"})
    first = send(proxy, session, body("chat", conversation), "/chat/completions", **{"idempotency-key": "turn-2"})
    assert first.status_code == 200, first.text
    fake_upstream.clear()
    retried = send(proxy, session, body("chat", conversation), "/chat/completions", **{"idempotency-key": "turn-2"})
    assert retried.status_code == 200, retried.text
    assert retried.headers["x-contextledger-replayed"] == "true"
    assert retried.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
    assert fake_upstream.received() == []
    assert len(proxy.messages(session, KEY)) == 4


@pytest.mark.parametrize("api", sorted(PATHS))
def test_a_history_resent_after_a_forget_is_known_and_the_value_goes_nowhere(
    api: str, proxy: Proxy, fake_upstream: FakeUpstream
) -> None:
    """The client still holds the forgotten value in its copy of the conversation; the stored copy
    holds the forget's markers instead.  The resend is recognised all the same, so the value is
    neither forwarded nor stored again."""
    session = f"resent-forget-{api}"
    proxy.create_session(session, KEY)
    path = PATHS[api]
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "We run on database=PostgreSQL 15"}]
    first = send(proxy, session, body(api, conversation), path)
    assert first.status_code == 200, first.text
    conversation += reply_items(api, first)
    assert "PostgreSQL" in json.dumps(conversation[1:])  # the reply echoed it: forget rewrites both
    status, report = proxy.call("POST", f"/v1/contextledger/sessions/{session}/forget", {"key": "database"}, KEY)
    assert status == 200, report
    assert "PostgreSQL" not in json.dumps(proxy.messages(session, KEY))
    stored = len(proxy.messages(session, KEY))

    conversation.append({"role": "user", "content": "which region are we in?"})
    fake_upstream.clear()
    answer = send(proxy, session, body(api, conversation), path)
    assert answer.status_code == 200, answer.text
    assert answer.headers[RESENT] == str(stored)
    assert "PostgreSQL" not in json.dumps(fake_upstream.last_body())
    assert "PostgreSQL" not in json.dumps(proxy.messages(session, KEY))
    users = [m["content"] for m in proxy.messages(session, KEY) if m["role"] == "user"]
    assert len(users) == 2, users  # the resent question stored once, the new one added
    assert proxy.facts(session, KEY) == {}
