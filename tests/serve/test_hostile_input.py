"""Hostile request bodies through a real proxy: each one a 400 in OpenAI's error shape, decided
before the upstream is called, in every mode; never a 500, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy
from tests.serve.test_failures import assert_openai_error

KEY = "sk-hostile-tenant-1"
SESSION = {"X-Contextledger-Session": "hostile"}
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(4)")
MODES = ["stateless", "stateless with a strategy", "session"]


def body(messages: str, extra: str = "") -> bytes:
    return ('{"model": "fake", ' + extra + '"messages": ' + messages + "}").encode()


HOSTILE = {
    "deep nesting": body('[{"role": "user", "content": "hi", "x": ' + "[" * 100_000 + "]" * 100_000 + "}]"),
    "deep unclosed nesting": body("[" * 100_000),
    "nesting past 128 levels": body('[{"role": "user", "content": "hi", "x": ' + "[" * 200 + "]" * 200 + "}]"),
    "a role that is a list": body('[{"role": ["user"], "content": "hi"}]'),
    "a role that is an object": body('[{"role": {"name": "user"}, "content": "hi"}]'),
    "a lone surrogate": body('[{"role": "user", "content": "module=\\ud800"}]'),
    "a lone low surrogate in a key": body('[{"role": "user", "content": "hi", "\\udfff": 1}]'),
    "NaN": body('[{"role": "user", "content": "hi"}]', '"temperature": NaN, '),
    "Infinity": body('[{"role": "user", "content": "hi"}]', '"temperature": -Infinity, '),
    "1e400": body('[{"role": "user", "content": "hi"}]', '"temperature": 1e400, '),
}


@pytest.fixture(scope="module", params=MODES)
def running(request: pytest.FixtureRequest, start_proxy_module: StartProxy) -> Iterator[tuple[Proxy, dict[str, str]]]:
    mode = request.param
    with start_proxy_module(*(WINDOW if mode == "stateless with a strategy" else ())) as proxy:
        headers: dict[str, str] = {}
        if mode == "session":
            proxy.create_session("hostile", KEY)
            headers = SESSION
        yield proxy, headers


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bodies_are_400s_before_the_upstream_is_called(
    running: tuple[Proxy, dict[str, str]], fake_upstream: FakeUpstream, case: str
) -> None:
    proxy, headers = running
    before = len(fake_upstream.received())
    status, answer = proxy.call("POST", "/v1/chat/completions", HOSTILE[case], KEY, headers)
    assert status == 400, (case, answer)
    error = assert_openai_error(answer)
    assert error["code"] in ("invalid_json", "invalid_messages"), error
    assert "Traceback" not in str(error["message"])
    assert len(fake_upstream.received()) == before  # nothing went upstream
    status, answer = proxy.call(
        "POST", "/v1/chat/completions", {"model": "fake", "messages": [{"role": "user", "content": "ok"}]}, KEY, headers
    )
    assert status == 200, answer  # and the proxy serves the next request as before
