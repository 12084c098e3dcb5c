"""The chat-completions rules on the wire shape of ``messages``, each at its boundary, and beside
:func:`validate`, which reads the same transcripts as messages."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.messages import chat_problems, from_openai, problems_for, validate


def call(call_id: str = "call_1", **function: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": "{}", **function}}


def asking(*calls: Any, content: Any = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def answer(call_id: str = "call_1", content: Any = "15 degrees") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "What's the weather in Paris?"}
REPLY = {"role": "assistant", "content": "Sunny."}


def codes(*messages: Any) -> list[tuple[int, str]]:
    return [(problem.index, problem.code) for problem in chat_problems({"messages": list(messages)})]


def test_the_documented_tool_round_trip_passes() -> None:
    system = {"role": "system", "content": "Be brief."}
    assert codes(system, USER, asking(call("a"), call("b")), answer("a"), answer("b"), REPLY) == []


def test_a_body_needs_a_message() -> None:
    assert codes() == [(-1, "no_messages")]
    assert [p.code for p in chat_problems({})] == ["no_messages"]
    assert [p.code for p in chat_problems({"messages": {"role": "user"}})] == ["malformed_body"]


@pytest.mark.parametrize("role", ["user", "system", "developer"])
def test_a_message_has_content(role: str) -> None:
    assert codes({"role": role, "content": "hi"}) == []
    assert codes({"role": role, "content": [{"type": "text", "text": "hi"}]}) == []
    assert codes({"role": role}) == [(0, "no_content")]
    assert codes({"role": role, "content": None}) == [(0, "no_content")]


def test_an_assistant_message_has_content_or_tool_calls() -> None:
    assert codes(USER, {"role": "assistant", "content": "hi"}) == []
    assert codes(USER, asking(call()), answer()) == []
    assert codes(USER, {"role": "assistant", "refusal": "I can't help with that."}) == []
    assert codes(USER, {"role": "assistant"}) == [(1, "no_content")]
    assert codes(USER, {"role": "assistant", "content": None, "tool_calls": []}) == [(1, "no_content")]


def test_a_tool_message_has_content_and_names_its_call() -> None:
    assert codes(USER, asking(call()), answer(content=None)) == [(2, "no_content")]
    assert codes(USER, asking(call()), {"role": "tool", "content": "x"}) == [
        (1, "missing_tool_result"),
        (2, "malformed_message"),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "", "function": {"name": "f", "arguments": "{}"}},
        {"id": 7, "function": {"name": "f", "arguments": "{}"}},
        {"id": "call_1"},
        {"id": "call_1", "function": "f"},
        {"id": "call_1", "function": {"name": "", "arguments": "{}"}},
        {"id": "call_1", "function": {"arguments": "{}"}},
        {"id": "call_1", "function": {"name": "f", "arguments": {"city": "Paris"}}},
        {"id": "call_1", "function": {"name": "f"}},
        {"id": "call_1", "type": ["function"], "function": {"name": "f", "arguments": "{}"}},
        "call_1",
    ],
)
def test_malformed_tool_calls(bad: Any) -> None:
    assert (1, "malformed_tool_call") in codes(USER, asking(bad), answer())


def test_a_well_formed_call_may_leave_out_its_type() -> None:
    untyped = {"id": "call_1", "function": {"name": "f", "arguments": ""}}
    assert codes(USER, asking(untyped), answer()) == []


def test_a_call_type_we_do_not_know_passes_with_its_id() -> None:
    custom = {"id": "call_1", "type": "custom", "custom": {"name": "grammar", "input": "x"}}
    assert codes(USER, asking(custom), answer()) == []


def test_each_call_is_answered_before_the_next_non_tool_message() -> None:
    assert codes(USER, asking(call()), answer(), USER) == []
    assert codes(USER, asking(call()), USER, answer()) == [(1, "missing_tool_result"), (3, "misplaced_tool_result")]
    assert codes(USER, asking(call())) == [(1, "missing_tool_result")]
    assert codes(USER, asking(call("a"), call("b")), answer("a"), REPLY) == [(1, "missing_tool_result")]


def test_a_tool_message_answers_a_call_of_the_assistant_before_its_run() -> None:
    assert codes(USER, answer("ghost")) == [(1, "orphan_tool_result")]
    assert codes(USER, asking(call()), answer(), answer()) == [(3, "duplicate_tool_result")]


def test_call_ids_are_unique() -> None:
    first = [USER, asking(call("a")), answer("a")]
    assert codes(*first, asking(call("b")), answer("b")) == []
    assert codes(*first, asking(call("a")), answer("a")) == [(3, "duplicate_call_id"), (4, "misplaced_tool_result")]


@pytest.mark.parametrize("role", ["robot", None, ["user"], {"name": "user"}])
def test_unknown_roles(role: Any) -> None:
    assert codes(USER, {"role": role, "content": "x"}) == [(1, "unknown_role")]


def test_malformed_messages() -> None:
    assert codes("hello") == [(0, "malformed_message")]
    assert codes({"role": "user", "content": 7}) == [(0, "malformed_message")]


def test_unknown_fields_pass_through() -> None:
    assert codes(USER | {"name": "ana", "future": [1]}, REPLY | {"reasoning_content": "r", "annotations": []}) == []


def test_the_wire_rules_agree_with_validate_on_its_pairing() -> None:
    rows = [USER, answer("ghost"), asking(call("c1")), USER]
    assert [(p.index, p.code) for p in validate(from_openai(rows))] == codes(*rows)


def test_dispatch_by_name() -> None:
    assert problems_for("chat", {"messages": [{"role": "user"}]})[0].code == "no_content"
