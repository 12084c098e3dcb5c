"""OpenAI's explicit cache breakpoints through the proxy: placed for the models that take them, at
the end of the instructions, on chat completions and Responses, stateless and in sessions; never
for another model, never beside or instead of a client's own.  The fake upstream refuses a
breakpoint as OpenAI does (an earlier model, an assistant's content, more than four writes), so a
mark the proxy placed wrongly fails the request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream

from contextledger.exceptions import ConfigurationError
from contextledger.serve import ServeConfig, StrategySpec
from contextledger.serve._openai_breakpoints import chat_with_breakpoint, responses_with_breakpoint

with try_import("serve") as serve_extra:
    import httpx


pytestmark = serve_extra.skip

KEY = "sk-breakpoints-0123456789"
HEADERS = {"authorization": f"Bearer {KEY}"}
MARK = "prompt_cache_breakpoint"
INSTRUCTIONS = "You answer questions about the shop's catalogue. " * 40


def marks(value: Any, role: str | None = None) -> list[str | None]:
    """The role of the message holding each breakpoint in ``value``."""
    if isinstance(value, dict):
        here = value.get("role", role)
        return ([here] if MARK in value else []) + [m for item in value.values() for m in marks(item, here)]
    if isinstance(value, list):
        return [m for item in value for m in marks(item, role)]
    return []


def chat_body(model: str, turns: int = 2) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": INSTRUCTIONS}]
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"question {turn}"},
            {"role": "assistant", "content": f"answer {turn}"},
        ]
    messages.append({"role": "user", "content": "and now?"})
    return {"model": model, "messages": messages}


def responses_body(model: str, turns: int = 2) -> dict[str, Any]:
    body = chat_body(model, turns)
    items = [{**m, "role": "developer"} if m["role"] == "system" else m for m in body["messages"]]
    return {"model": model, "instructions": "Be brief.", "input": items}


def app_for(fake_upstream: FakeUpstream, folder: Path, **settings: Any) -> Any:
    from contextledger.serve import create_app  # noqa: PLC0415

    config = ServeConfig(fake_upstream.base_url, store=f"sqlite:{folder / 's.db'}", **settings)
    return create_app(config)


def send(app: Any, path: str, bodies: list[dict[str, Any]], session: str | None = None) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            headers = dict(HEADERS)
            if session is not None:
                created = await client.post("/v1/contextledger/sessions", json={"id": session}, headers=headers)
                assert created.status_code == 201, created.text
                headers["x-contextledger-session"] = session
            for body in bodies:
                answer = await client.post(path, json=body, headers=headers)
                assert answer.status_code == 200, answer.text

    asyncio.run(run())


def upstream_items(fake_upstream: FakeUpstream, path: str) -> list[Any]:
    sent = [r["body"] for r in fake_upstream.received() if r["path"] == path]
    return [body["messages" if path.endswith("completions") else "input"] for body in sent]


PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


@pytest.mark.parametrize("api", sorted(PATHS))
@pytest.mark.parametrize("model", ["gpt-5.6", "gpt-5.6-mini-2026-07-01", "gpt-4.1", "gpt-5.5"])
def test_a_breakpoint_ends_the_instructions_of_gpt_5_6_requests_and_no_other_models(
    api: str, model: str, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    fake_upstream.clear()
    make = chat_body if api == "chat" else responses_body
    send(app_for(fake_upstream, tmp_path), PATHS[api], [make(model)])
    (items,) = upstream_items(fake_upstream, PATHS[api])
    if model.startswith("gpt-5.6"):
        assert marks(items) == [items[0]["role"]]  # one, on the instructions
        part = items[0]["content"][0]
        assert part == {
            "type": "text" if api == "chat" else "input_text",
            "text": INSTRUCTIONS,
            MARK: {"mode": "explicit"},
        }
        assert items[1:] == make(model)[("messages" if api == "chat" else "input")][1:]  # the rest as sent
    else:
        assert marks(items) == []
        assert items == make(model)["messages" if api == "chat" else "input"]


@pytest.mark.parametrize("api", sorted(PATHS))
def test_in_a_session_and_after_a_cut_the_instructions_still_carry_the_breakpoint(
    api: str, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    fake_upstream.clear()
    window = StrategySpec("sliding-window", ("trigger=turns_exceed(2)",))
    app = app_for(fake_upstream, tmp_path, strategy=window)
    make = chat_body if api == "chat" else responses_body
    send(app, PATHS[api], [make("gpt-5.6", 1), make("gpt-5.6", 6)])  # within the window, then cut
    for items in upstream_items(fake_upstream, PATHS[api]):
        assert marks(items) == [items[0]["role"]]
    fake_upstream.clear()
    turn = make("gpt-5.6", 0)
    send(app, PATHS[api], [turn, turn, turn], session=f"desk-{api}")
    for items in upstream_items(fake_upstream, PATHS[api]):
        assert len(marks(items)) == 1
        assert marks(items)[0] in ("system", "developer")  # the session writes its instructions its own way


@pytest.mark.parametrize("api", sorted(PATHS))
def test_a_clients_own_marks_are_sent_as_they_came_and_nothing_is_added(
    api: str, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    fake_upstream.clear()
    make = chat_body if api == "chat" else responses_body
    body = make("gpt-5.6")
    key = "messages" if api == "chat" else "input"
    text = "text" if api == "chat" else "input_text"
    body[key][1] = {"role": "user", "content": [{"type": text, "text": "question 0", MARK: {"mode": "explicit"}}]}
    explicit = {**make("gpt-5.6"), "prompt_cache_options": {"mode": "explicit"}}
    send(app_for(fake_upstream, tmp_path), PATHS[api], [body, explicit])
    mine, chose = upstream_items(fake_upstream, PATHS[api])
    assert mine == body[key]  # the client's mark where it put it, none added
    assert marks(chose) == []  # explicit mode: the client chose its writes


def test_the_models_are_a_setting(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    fake_upstream.clear()
    assert ServeConfig(fake_upstream.base_url).cache_breakpoint_models == ("gpt-5.6",)
    given: Any = "gpt-5.6, gpt-6"  # as the flag gives it
    assert ServeConfig(fake_upstream.base_url, cache_breakpoint_models=given).cache_breakpoint_models == (
        "gpt-5.6",
        "gpt-6",
    )
    with pytest.raises(ConfigurationError, match="model-name prefixes"):
        ServeConfig(fake_upstream.base_url, cache_breakpoint_models=[5])  # type: ignore[arg-type]
    send(app_for(fake_upstream, tmp_path, cache_breakpoint_models=()), PATHS["chat"], [chat_body("gpt-5.6")])
    (items,) = upstream_items(fake_upstream, PATHS["chat"])
    assert marks(items) == []


def test_the_serve_flag_names_the_models() -> None:
    from contextledger.cli import _parser  # noqa: PLC0415
    from contextledger.serve._command import config_from_args  # noqa: PLC0415

    args = _parser().parse_args(["serve", "--upstream", "http://127.0.0.1:9/v1", "--cache-breakpoint-models", ""])
    assert config_from_args(args).cache_breakpoint_models == ()
    args = _parser().parse_args(["serve", "--upstream", "http://127.0.0.1:9/v1"])
    assert config_from_args(args).cache_breakpoint_models == ("gpt-5.6",)


# The placement on its own: bytes or values, any content shape ---------------------------------

contents = st.one_of(
    st.text(max_size=5),
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}),
            st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.just({"url": "data:,"})}),
        ),
        max_size=3,
    ),
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]), "content": contents}
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(messages, st.booleans())
def test_at_most_one_mark_is_added_on_a_leading_instruction_and_nothing_else_changes(
    given_messages: list[dict[str, Any]], as_bytes: bool
) -> None:
    items: list[Any] = [json.dumps(m).encode() for m in given_messages] if as_bytes else given_messages
    placed = chat_with_breakpoint({"model": "gpt-5.6"}, items, ("gpt-5.6",))
    assert chat_with_breakpoint({"model": "gpt-4.1"}, items, ("gpt-5.6",)) is None
    if placed is None:
        return
    values = [json.loads(m) if isinstance(m, bytes) else m for m in placed]
    found = [n for n, m in enumerate(values) if marks(m)]
    assert len(found) == 1
    (where,) = found
    assert values[where]["role"] in ("system", "developer")
    assert all(m["role"] in ("system", "developer") for m in values[:where])
    assert [m for n, m in enumerate(values) if n != where] == [m for n, m in enumerate(given_messages) if n != where]
    assert chat_with_breakpoint({"model": "gpt-5.6"}, placed, ("gpt-5.6",)) is None  # marked once: left alone
    assert responses_with_breakpoint({"model": "gpt-5.6"}, placed, ("gpt-5.6",)) is None


@pytest.mark.parametrize("api", sorted(PATHS))
def test_a_body_writing_more_than_four_entries_is_refused_before_the_upstream(
    api: str, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    fake_upstream.clear()
    key = "messages" if api == "chat" else "input"
    text = "text" if api == "chat" else "input_text"
    body = (chat_body if api == "chat" else responses_body)("gpt-5.6", 4)
    for item in body[key]:
        if item["role"] == "user":
            item["content"] = [{"type": text, "text": item["content"], MARK: {"mode": "explicit"}}]
    app = app_for(fake_upstream, tmp_path)

    async def run() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            return await client.post(PATHS[api], json=body, headers=HEADERS)

    answer = asyncio.run(run())
    assert answer.status_code == 400, answer.text
    assert "prompt_cache_breakpoint" in answer.json()["error"]["message"]
    assert fake_upstream.received() == []
