"""A request the upstream refuses as longer than the model's context is compacted harder once and
sent again, through a real ``contextledger serve``: to the limit the error states (chat
completions, Anthropic's "prompt is too long"), else to three quarters of what was sent (the
Responses API says no number).  Never a loop; a session stores the turn as usual; the answer says
what happened; ``--no-overflow-retry`` and ``--strategy none`` give the upstream's error back as
it came."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

with try_import("serve") as serve_extra:
    import httpx
    from tests.serve.fake_upstream import window_tokens

pytestmark = serve_extra.skip

KEY = "sk-overflow-0123456789"
HEADER = "x-contextledger-compaction"
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
WINDOW = 2000


@pytest.fixture(scope="module")
def proxies(
    start_proxy_module: StartProxy, fake_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Proxy]]:
    folder = tmp_path_factory.mktemp("overflow")
    anthropic = ("--anthropic-upstream", fake_upstream.base_url.removesuffix("/v1"))
    with (
        start_proxy_module(*anthropic) as default,
        start_proxy_module(*anthropic, "--no-overflow-retry", "--store", f"sqlite:{folder / 'off.db'}") as off,
        start_proxy_module(*anthropic, "--strategy", "none", "--store", f"sqlite:{folder / 'none.db'}") as none,
    ):
        yield {"default": default, "off": off, "none": none}


def conversation(turns: int) -> list[dict[str, Any]]:
    """A conversation of ``turns`` exchanges, each message about 100 tokens, then a question."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: " + "lorem ipsum " * 32})
        messages.append({"role": "assistant", "content": f"answer {turn}: " + "dolor sit amet " * 26})
    messages.append({"role": "user", "content": "and the last question?"})
    return messages


def body(api: str, messages: list[dict[str, Any]], model: str, stream: bool = False) -> dict[str, Any]:
    if api == "responses":
        return {"model": model, "input": messages, "stream": stream}
    extra = {"max_tokens": 64} if api == "messages" else {}
    return {"model": model, "messages": messages, "stream": stream, **extra}


def post(proxy: Proxy, api: str, payload: dict[str, Any], session: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    if session is not None:
        headers["x-contextledger-session"] = session
    return httpx.post(proxy.base_url + PATHS[api], json=payload, headers=headers, timeout=30)


def forwarded(fake_upstream: FakeUpstream) -> list[list[Any]]:
    """What each request that reached the upstream held (messages or input items)."""
    return [r["body"].get("messages") or r["body"].get("input") for r in fake_upstream.received()]


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("stream", [False, True])
def test_a_request_too_long_for_the_model_is_compacted_and_sent_once_more(
    api: str, stream: bool, proxies: dict[str, Proxy], fake_upstream: FakeUpstream
) -> None:
    messages = conversation(14)  # about 2,900 tokens for a model that takes 2,000
    window = WINDOW if api != "responses" else 2400  # the Responses API's error states no limit: 3/4
    fake_upstream.clear()
    answer = post(proxies["default"], api, body(api, messages, f"fake-window-{window}", stream))
    assert answer.status_code == 200, answer.text
    assert answer.headers[HEADER].startswith("compacted; retried once within"), answer.headers[HEADER]
    sent = forwarded(fake_upstream)
    assert len(sent) == 2, "one refusal, one retry"
    assert window_tokens(sent[0]) > window >= window_tokens(sent[1])
    assert "and the last question?" in json.dumps(sent[1][-1]), "the newest message is kept"
    if api == "messages":
        assert sent[1][0]["role"] == "user", "an Anthropic conversation still opens with the user"


def test_a_retry_refused_again_goes_back_as_it_came_never_a_loop(
    proxies: dict[str, Proxy], fake_upstream: FakeUpstream
) -> None:
    """Three quarters of what was sent (the Responses API states no limit) does not fit a model
    half the size: the second refusal is the answer, after exactly two calls."""
    fake_upstream.clear()
    answer = post(proxies["default"], "responses", body("responses", conversation(14), "fake-window-1400"))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "context_length_exceeded"
    assert len(fake_upstream.received()) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_session_turn_too_long_for_the_model_is_stored_as_usual(
    stream: bool, proxies: dict[str, Proxy], fake_upstream: FakeUpstream
) -> None:
    proxy = proxies["default"]
    session = f"overflow-session-{stream}"
    proxy.create_session(session, KEY)
    for turn in conversation(14)[0:-1:2]:  # the history, stored turn by turn on a roomy model
        assert post(proxy, "chat", body("chat", [turn], "fake"), session).status_code == 200
    stored = len(proxy.messages(session, KEY))
    fake_upstream.clear()
    answer = post(
        proxy, "chat", body("chat", [{"role": "user", "content": "one more?"}], "fake-window-2000", stream), session
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers[HEADER].startswith("compacted; retried once"), answer.headers[HEADER]
    sent = forwarded(fake_upstream)
    assert len(sent) == 2
    assert window_tokens(sent[1]) <= 2000 < window_tokens(sent[0])
    assert any("user_facts" in json.dumps(item) for item in sent[1]), "the facts block goes with the retry"
    kept = proxy.messages(session, KEY)
    assert len(kept) == stored + 2, "the whole history is kept; only what was sent was cut"
    assert kept[-2]["content"] == "one more?"


@pytest.mark.parametrize("flavour", ["off", "none"])
def test_without_the_retry_the_error_goes_back_as_it_came(
    flavour: str, proxies: dict[str, Proxy], fake_upstream: FakeUpstream
) -> None:
    for api in ("chat", "messages"):
        fake_upstream.clear()
        answer = post(proxies[flavour], api, body(api, conversation(14), f"fake-window-{WINDOW}"))
        assert answer.status_code == 400, answer.text
        said = json.dumps(answer.json())
        assert "context_length_exceeded" in said or "prompt is too long" in said
        assert len(fake_upstream.received()) == 1, "no retry"


@pytest.mark.parametrize(
    ("code", "message", "limit", "counted"),
    [
        (
            "context_length_exceeded",
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. "
            "Please reduce the length of the messages.",
            8192,
            8227,
        ),
        (
            "context_length_exceeded",
            "This model's maximum context length is 4097 tokens. However, you requested 4268 tokens (4012 in the "
            "messages, 256 in the completion). Please reduce the length of the messages or completion.",
            4097 - 256,
            4012,
        ),
        (
            "context_length_exceeded",
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            None,
            None,
        ),
        (None, "prompt is too long: 219898 tokens > 200000 maximum", 200000, 219898),
        (
            None,
            "input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648, decrease input length or "
            "`max_tokens` and try again",
            204648 - 20000,
            189136,
        ),
    ],
)
def test_the_providers_too_long_errors_are_read(
    code: str | None, message: str, limit: int | None, counted: int | None
) -> None:
    from contextledger.exceptions import ProxyError  # noqa: PLC0415
    from contextledger.serve._overflow import TooLong, overflow_budget, too_long  # noqa: PLC0415

    refused = too_long(ProxyError(message, status=400, code=code))
    assert refused == TooLong(limit, counted)
    assert too_long(ProxyError(message, status=429, code=code)) is None
    assert too_long(ProxyError("max_tokens: must be at most 8192", status=400)) is None
    assert refused is not None
    stated = 10_000 * limit * 19 // (counted * 20) if limit is not None and counted is not None else 7_500
    assert overflow_budget(refused, 10_000) == stated
