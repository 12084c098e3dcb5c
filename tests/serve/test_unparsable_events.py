"""An upstream stream event whose JSON cannot be read is not relayed: the client's SDK would fail
on it before it reached the ``error`` event that closes the broken stream and says what happened.
Through a real ``contextledger serve``, on the three APIs, stateless and in a session (which then
stores nothing)."""

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

KEY = "sk-unparsable-0123456789"
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


@pytest.fixture(scope="module")
def proxy(start_proxy_module: StartProxy, fake_upstream: FakeUpstream) -> Iterator[Proxy]:
    with start_proxy_module("--anthropic-upstream", fake_upstream.base_url.removesuffix("/v1")) as running:
        yield running


def body(api: str) -> dict[str, Any]:
    messages = [{"role": "user", "content": "hello there"}]
    if api == "responses":
        return {"model": "fake-unparsable", "input": messages, "stream": True}
    extra = {"max_tokens": 64} if api == "messages" else {}
    return {"model": "fake-unparsable", "messages": messages, "stream": True, **extra}


def events(text: str) -> list[str]:
    """Each event's data, joined as a client reads it."""
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if data:
            found.append("\n".join(data))
    return found


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("session", [False, True])
def test_an_unreadable_event_is_not_relayed_before_the_closing_error(api: str, session: bool, proxy: Proxy) -> None:
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    name = f"unparsable-{api}"
    if session:
        proxy.create_session(name, KEY)
        headers["x-contextledger-session"] = name
    answer = httpx.post(proxy.base_url + PATHS[api], json=body(api), headers=headers, timeout=30)
    assert answer.status_code == 200
    said = events(answer.text)
    assert said, answer.text
    for data in said:
        if data != "[DONE]":
            assert isinstance(json.loads(data), dict), f"relayed an event a client cannot read: {data!r}"
    last = json.loads(said[-1])
    assert last.get("type") == "error" or "error" in last, said[-1]
    assert "[DONE]" not in said
    if session:
        assert proxy.messages(name, KEY) == [], "a broken stream stores nothing"
