"""A conversation no model would take is refused before it goes upstream or into a session, in
every mode, and an upstream answer that is not a completion is a 502 in every mode."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy
from tests.serve.test_failures import assert_openai_error

KEY = "sk-conversations-tenant-5"
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(4)")
MODES = ["stateless", "stateless with a strategy", "session"]
CALL = {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


MALFORMED: dict[str, tuple[Any, str]] = {
    "a tool result without its call": (
        {"model": "fake", "messages": [user("hi"), {"role": "tool", "tool_call_id": "call_404", "content": "x"}]},
        "invalid_messages",
    ),
    "a call without its result": (
        {"model": "fake", "messages": [user("hi"), {"role": "assistant", "tool_calls": [CALL]}, user("and?")]},
        "invalid_messages",
    ),
    "a call id used twice": (
        {
            "model": "fake",
            "messages": [
                user("hi"),
                {"role": "assistant", "tool_calls": [CALL, CALL]},
                {"role": "tool", "tool_call_id": "call_9", "content": "x"},
            ],
        },
        "invalid_messages",
    ),
    "no model": ({"messages": [user("hi")]}, "invalid_model"),
    "a model that is a number": ({"model": 4, "messages": [user("hi")]}, "invalid_model"),
    "an empty model": ({"model": " ", "messages": [user("hi")]}, "invalid_model"),
    "a key twice in a message": (
        b'{"model": "fake", "messages": [{"role": "user", "content": "hi", "content": "other"}]}',
        "invalid_json",
    ),
    "a key twice at the top": (
        b'{"model": "fake", "model": "fake-500", "messages": [{"role": "user", "content": "hi"}]}',
        "invalid_json",
    ),
}


@pytest.fixture(scope="module", params=MODES)
def running(request: pytest.FixtureRequest, start_proxy_module: StartProxy) -> Iterator[tuple[Proxy, str]]:
    mode = request.param
    with start_proxy_module(*(WINDOW if mode == "stateless with a strategy" else ())) as proxy:
        yield proxy, mode


def headers_for(proxy: Proxy, mode: str, session: str) -> dict[str, str]:
    if mode != "session":
        return {}
    proxy.create_session(session, KEY)
    return {"X-Contextledger-Session": session}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_conversation_is_refused_before_the_upstream(
    running: tuple[Proxy, str], fake_upstream: FakeUpstream, case: str
) -> None:
    proxy, mode = running
    headers = headers_for(proxy, mode, f"malformed-{sorted(MALFORMED).index(case)}")
    body, code = MALFORMED[case]
    before = len(fake_upstream.received())
    status, answer = proxy.call("POST", "/v1/chat/completions", body, KEY, headers)
    assert status == 400, (case, answer)
    assert assert_openai_error(answer, code)
    assert len(fake_upstream.received()) == before
    if mode == "session":
        assert proxy.messages(headers["X-Contextledger-Session"], KEY) == []  # nothing stored


def test_a_session_turn_answers_the_stored_call_and_only_that(start_proxy_module: StartProxy, tmp_path: Path) -> None:
    # A file of its own: the module's proxy may still hold the shared one (one proxy per file).
    with start_proxy_module("--store", f"sqlite:{tmp_path / 'answers.db'}") as proxy:
        answer_the_stored_call(proxy, headers_for(proxy, "session", "answers"))


def answer_the_stored_call(proxy: Proxy, headers: dict[str, str]) -> None:
    status, answer = proxy.call(
        "POST", "/v1/chat/completions", {"model": "fake-tool", "messages": [user("price?")]}, KEY, headers
    )
    assert status == 200, answer
    call_id = answer["choices"][0]["message"]["tool_calls"][0]["id"]
    wrong = {"role": "tool", "tool_call_id": "call_other", "content": "999"}
    status, answer = proxy.call("POST", "/v1/chat/completions", {"model": "fake", "messages": [wrong]}, KEY, headers)
    assert status == 400, answer
    assert "call_other" in assert_openai_error(answer, "invalid_messages")["message"]  # type: ignore[operator]
    skipped = {"model": "fake", "messages": [user("never mind the call")]}
    status, answer = proxy.call("POST", "/v1/chat/completions", skipped, KEY, headers)
    assert status == 400, answer
    assert "stored history" in assert_openai_error(answer, "invalid_messages")["message"]  # type: ignore[operator]
    right = {"role": "tool", "tool_call_id": call_id, "content": "999"}
    status, answer = proxy.call("POST", "/v1/chat/completions", {"model": "fake", "messages": [right]}, KEY, headers)
    assert status == 200, answer
    assert [m["role"] for m in proxy.messages("answers", KEY)] == ["user", "assistant", "tool", "assistant"]


def test_the_librarys_own_metadata_never_goes_upstream(running: tuple[Proxy, str], fake_upstream: FakeUpstream) -> None:
    proxy, mode = running
    headers = headers_for(proxy, mode, "metadata")
    message = {**user("hello"), "_contextledger": {"message_id": "m-1", "additional_properties": {"x": 1}}}
    status, answer = proxy.call("POST", "/v1/chat/completions", {"model": "fake", "messages": [message]}, KEY, headers)
    assert status == 200, answer
    sent = fake_upstream.last_body()
    assert "_contextledger" not in json.dumps(sent)
    assert sent["messages"][-1]["content"] == "hello"


@pytest.mark.parametrize("model", ["fake-hollow", "fake-garbage"])
def test_a_200_that_is_not_a_completion_is_a_502_in_every_mode(running: tuple[Proxy, str], model: str) -> None:
    proxy, mode = running
    headers = headers_for(proxy, mode, f"not-a-completion-{model}")
    status, answer = proxy.call(
        "POST", "/v1/chat/completions", {"model": model, "messages": [user("hi")]}, KEY, headers
    )
    assert status == 502, answer
    assert_openai_error(answer, "upstream_invalid_response")
    if mode == "session":
        assert proxy.messages(headers["X-Contextledger-Session"], KEY) == []


def long_conversation(turns: int, words: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You answer questions about orders."}]
    for turn in range(turns):
        messages += [user(f"question {turn}: " + "detail " * words), {"role": "assistant", "content": f"answer {turn}"}]
    return [*messages, user("and the last one?")]


@pytest.mark.parametrize(("flags", "compacts"), [((), True), (("--strategy", "none"), False)])
def test_the_default_compacts_and_says_so(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, flags: tuple[str, ...], compacts: bool
) -> None:
    messages = long_conversation(98, 400)  # about 70,000 tokens as the proxy estimates them
    with start_proxy(*flags) as proxy:
        status, answer = proxy.call("POST", "/v1/chat/completions", {"model": "fake", "messages": messages}, KEY)
        assert status == 200, answer
        sent = fake_upstream.last_body()["messages"]
        started = proxy.log.read_text()
    if compacts:
        assert len(sent) < len(messages)
        assert sent[0] == messages[0]  # the instructions kept
        assert sent[-1] == messages[-1]  # and the question
        assert sum(len(m["content"]) for m in sent) < 32_000 * 4  # within the default's trigger
        assert "compacted by: truncation max_n=32000 compact_to=16000" in started
    else:
        assert sent == messages
        assert "compacted by: nothing" in started
