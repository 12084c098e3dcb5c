"""Sessions: what survives serialisation, and what a damaged or foreign serialisation does.

A session is how a conversation outlives the process, so its JSON form must give back exactly
the state that went in (never a quietly different one: int keys turned into strings, tuples
into lists, NaN into invalid JSON), refuse what it cannot carry with a SessionError naming the
problem, and never carry the caches that are rebuilt from the history.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.agents import Agent, CompactionProvider, Session
from contextledger.clients import ScriptedChatClient
from contextledger.compaction import SlidingWindowStrategy
from contextledger.exceptions import AgentError, SessionError
from tests.sizes import examples

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
states = st.dictionaries(st.text(max_size=10), json_values, max_size=5)
session_ids = st.text(min_size=1, max_size=40)


@settings(max_examples=examples(150), deadline=None)
@given(session_id=session_ids, state=states)
def test_json_round_trip_gives_back_the_same_session(session_id: str, state: dict[str, Any]) -> None:
    session = Session(session_id, state)
    text = session.to_json()
    json.loads(text)  # strict JSON: no NaN, no Infinity
    restored = Session.from_json(text)
    assert restored.session_id == session_id
    assert restored.state == state
    assert restored.to_json() == text
    assert Session.from_json(text.encode("utf-8")).state == state
    assert Session.from_dict(session.to_dict()).state == state


@settings(max_examples=examples(50), deadline=None)
@given(state=states)
def test_the_restored_state_is_independent_of_the_serialised_one(state: dict[str, Any]) -> None:
    session = Session("s", state)
    as_dict = session.to_dict()
    as_dict["state"]["added later"] = [1]
    assert "added later" not in session.state
    restored = Session.from_dict(as_dict)
    restored.state["added by the restored session"] = True
    assert "added by the restored session" not in as_dict["state"]


def test_a_new_session_gets_a_fresh_id_and_empty_state() -> None:
    first, second = Session(), Session()
    assert first.session_id != second.session_id
    assert first.state == {}
    assert second.state == {}
    first.state["x"] = 1
    assert second.state == {}


@pytest.mark.parametrize("session_id", ["", 5, None.__class__, b"id"])
def test_a_session_id_must_be_non_empty_text(session_id: Any) -> None:
    with pytest.raises(SessionError, match=r"session_id must be a non-empty string"):
        Session(session_id)


@pytest.mark.parametrize("state", [[], "state", 3, (("a", 1),)])
def test_state_must_be_a_dict(state: Any) -> None:
    with pytest.raises(SessionError, match=r"session state must be a dict"):
        Session("s", state)


@pytest.mark.parametrize(
    ("state", "named"),
    [
        ({"when": object()}, "object"),
        ({"items": {1, 2}}, "set"),
        ({"pair": (1, 2)}, "tuple"),
        ({"nested": {"deep": [1, b"raw"]}}, "bytes"),
        ({"counts": {1: "one"}}, "1"),
        ({"ratio": math.nan}, "nan"),
        ({"ratio": math.inf}, "inf"),
        ({"list": [-math.inf]}, "inf"),
    ],
    ids=["object", "set", "tuple", "bytes", "int-key", "nan", "inf", "nested-inf"],
)
def test_state_that_is_not_plain_json_is_a_session_error(state: dict[str, Any], named: str) -> None:
    session = Session("abc", state)
    before = repr(state)
    with pytest.raises(SessionError) as caught:
        session.to_json()
    message = str(caught.value)
    assert "session 'abc'" in message
    assert named in message
    assert "session.state" in message  # says what providers may keep there
    assert repr(session.state) == before  # nothing was changed on the way


def test_state_that_contains_itself_is_a_session_error() -> None:
    state: dict[str, Any] = {"items": []}
    state["items"].append(state)
    with pytest.raises(SessionError, match=r"contains itself"):
        Session("loop", state).to_json()


def test_an_int_key_is_refused_rather_than_turned_into_text() -> None:
    # json.dumps would write {"1": ...} and the restored provider would look up 1 and miss it.
    with pytest.raises(SessionError, match=r"key 1"):
        Session("s", {"turns": {1: "first"}}).to_json()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", r"not a serialised session"),
        ("{", r"not a serialised session"),
        ("session", r"not a serialised session"),
        (b"\xff\xfe", r"not a serialised session"),
        ("[]", r"an object with a string 'session_id'"),
        ("null", r"an object with a string 'session_id'"),
        ('"s"', r"an object with a string 'session_id'"),
        ("{}", r"an object with a string 'session_id'"),
        ('{"session_id": 7}', r"an object with a string 'session_id'"),
        ('{"session_id": ""}', r"session_id must be a non-empty string"),
        ('{"session_id": "s", "state": []}', r"session 'state' must be an object, got list"),
        ('{"session_id": "s", "state": "x"}', r"session 'state' must be an object, got str"),
        ('{"session_id": "s", "state": {}, "history": []}', r"unexpected \['history'\]"),
        ('{"session_id": "s", "state": {"r": NaN}}', r"nan"),
        ('{"session_id": "s", "state": {"r": [Infinity]}}', r"inf"),
    ],
)
def test_malformed_serialisations_are_session_errors(text: str | bytes, expected: str) -> None:
    with pytest.raises(SessionError, match=expected):
        Session.from_json(text)


def test_from_json_of_something_that_is_not_text_is_a_session_error() -> None:
    with pytest.raises(SessionError, match=r"not a serialised session"):
        Session.from_json(42)  # type: ignore[arg-type]


def test_a_missing_state_means_an_empty_one() -> None:
    assert Session.from_json('{"session_id": "s"}').state == {}


def test_session_errors_are_agent_errors_and_value_errors() -> None:
    assert issubclass(SessionError, AgentError)
    assert issubclass(SessionError, ValueError)


def test_caches_are_never_serialised_and_a_restored_session_starts_without_them() -> None:
    provider = CompactionProvider(SlidingWindowStrategy(keep_last_groups=2))
    agent = Agent(ScriptedChatClient(["one", "two", "three"]), context_providers=[provider])
    session = agent.create_session("cached")

    async def two_turns() -> None:
        await agent.run("first question", session=session)
        await agent.run("second question", session=session)

    asyncio.run(two_turns())
    assert session.cache(provider), "the request view is cached on the session between calls"
    text = session.to_json()
    assert json.loads(text) == {"session_id": "cached", "state": session.state}
    assert "_cache" not in text
    assert set(session.to_dict()) == {"session_id", "state"}
    restored = Session.from_json(text)
    assert restored.cache(provider) == {}
    assert restored.state == session.state
