"""Anthropic's Messages API rules, each at its boundary: the body just inside it passes, the body
just past it is refused with that rule's code."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.messages import anthropic_problems, problems_for

MARK = {"type": "ephemeral"}


def user(content: Any = "Hello") -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any = "Hi there.") -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def text(value: str = "What is the weather in Paris?", **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def tool_use(call_id: str = "toolu_01", name: str = "get_weather") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"location": "Paris"}}


def tool_result(call_id: str = "toolu_01", content: Any = "15 degrees") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def codes(*messages: dict[str, Any], **body: Any) -> list[tuple[int, str]]:
    return [(problem.index, problem.code) for problem in anthropic_problems({"messages": list(messages), **body})]


def test_the_documented_tool_round_trip_passes() -> None:
    assert (
        codes(
            user("What's the weather like in Paris?"),
            assistant([text("I'll check."), tool_use()]),
            user([tool_result(), text("And tomorrow?")]),
            assistant("Sunny."),
        )
        == []
    )


@pytest.mark.parametrize("messages", [None, []], ids=["absent", "empty"])
def test_a_body_needs_one_message(messages: Any) -> None:
    assert [(p.index, p.code) for p in anthropic_problems({"messages": messages})] == [(-1, "no_messages")]
    assert codes(user()) == []


def test_the_first_message_is_the_users() -> None:
    assert codes(assistant(), user()) == [(0, "first_message_not_user")]


@pytest.mark.parametrize("role", ["system", "tool", "developer", None, ["user"]])
def test_only_user_and_assistant_roles(role: Any) -> None:
    assert codes(user(), {"role": role, "content": "x"}) == [(1, "unknown_role")]


def test_consecutive_same_role_messages_are_one_turn() -> None:
    assert codes(user("a"), user("b"), assistant("c"), assistant("d"), user("e")) == []


def test_a_tool_use_is_answered_in_the_next_user_turn() -> None:
    assert codes(user(), assistant([tool_use()]), user([tool_result()])) == []
    assert codes(user(), assistant([tool_use()]), user("no result")) == [(1, "tool_use_unanswered")]
    assert codes(user(), assistant([tool_use()])) == [(1, "tool_use_unanswered")]


def test_a_result_one_turn_late_is_unanswered_and_orphan() -> None:
    got = codes(user(), assistant([tool_use()]), user("wait"), assistant("ok"), user([tool_result()]))
    assert got == [(1, "tool_use_unanswered"), (4, "orphan_tool_result")]


def test_every_call_of_a_turn_needs_its_result() -> None:
    asked = assistant([tool_use("toolu_a"), tool_use("toolu_b")])
    assert codes(user(), asked, user([tool_result("toolu_a"), tool_result("toolu_b")])) == []
    assert codes(user(), asked, user([tool_result("toolu_a")])) == [(1, "tool_use_unanswered")]


def test_a_tool_use_followed_by_more_assistant_text_is_one_turn() -> None:
    # The API joins the two assistant messages, so the results belong to the user turn after both.
    assert codes(user(), assistant([tool_use()]), assistant("Checking."), user([tool_result()])) == []


def test_results_across_joined_user_messages_still_open_the_turn() -> None:
    asked = assistant([tool_use("toolu_a"), tool_use("toolu_b")])
    assert codes(user(), asked, user([tool_result("toolu_a")]), user([tool_result("toolu_b")])) == []
    assert codes(user(), asked, user([tool_result("toolu_a"), text()]), user([tool_result("toolu_b")])) == [
        (3, "tool_result_not_first")
    ]


def test_tool_results_come_first_in_the_user_message() -> None:
    asked = assistant([tool_use()])
    assert codes(user(), asked, user([tool_result(), text()])) == []
    assert codes(user(), asked, user([text(), tool_result()])) == [(2, "tool_result_not_first")]
    assert codes(user(), asked, user([{"type": "image", "source": {}}, tool_result()])) == [
        (2, "tool_result_not_first")
    ]


def test_a_result_answers_a_call_of_the_turn_just_before() -> None:
    assert codes(user([tool_result("toolu_ghost")])) == [(0, "orphan_tool_result")]
    assert codes(user(), assistant("no call"), user([tool_result("toolu_ghost")])) == [(2, "orphan_tool_result")]
    assert codes(user(), assistant([tool_use()]), user([tool_result(), tool_result()])) == [
        (2, "duplicate_tool_result")
    ]


def test_tool_use_ids_are_unique() -> None:
    first = [user(), assistant([tool_use("toolu_a")]), user([tool_result("toolu_a")])]
    assert codes(*first, assistant([tool_use("toolu_b")]), user([tool_result("toolu_b")])) == []
    assert codes(*first, assistant([tool_use("toolu_a")]), user([tool_result("toolu_a")])) == [
        (3, "duplicate_tool_use_id"),
        (4, "orphan_tool_result"),
    ]


def test_tool_blocks_stay_with_their_roles() -> None:
    assert codes(user([tool_use()]), assistant()) == [(0, "misplaced_tool_block")]
    assert codes(user(), assistant([tool_result()])) == [(1, "misplaced_tool_block")]


def test_no_empty_text_block() -> None:
    assert codes(user([text("x")])) == []
    assert codes(user([text("")])) == [(0, "empty_text_block")]
    assert codes(user(), assistant([tool_use()]), user([tool_result(content=[text("")])])) == [(2, "empty_text_block")]
    body = anthropic_problems({"system": [text("")], "messages": [user()]})
    assert [(p.index, p.code) for p in body] == [(-1, "empty_text_block")]


@pytest.mark.parametrize("empty", ["", []], ids=["string", "list"])
def test_no_empty_message_but_an_optional_final_assistant_one(empty: Any) -> None:
    assert codes(user(empty), assistant()) == [(0, "empty_content")]
    assert codes(user(), assistant(empty), user()) == [(1, "empty_content")]
    assert codes(user(), assistant(empty)) == []  # the model continues from it


def test_content_must_be_text_or_blocks() -> None:
    assert codes(user(7)) == [(0, "malformed_message")]
    assert codes(user(["text"])) == [(0, "malformed_message")]
    assert codes("hello") == [(0, "malformed_message")]  # type: ignore[arg-type]


def marked(count: int) -> list[dict[str, Any]]:
    return [text(f"part {n}", cache_control=MARK) for n in range(count)]


@pytest.mark.parametrize(("count", "refused"), [(3, False), (4, False), (5, True)])
def test_at_most_four_cache_breakpoints_in_messages(count: int, refused: bool) -> None:
    assert codes(user(marked(count))) == ([(0, "too_many_cache_breakpoints")] if refused else [])


@pytest.mark.parametrize(("in_tools", "in_system", "in_messages", "where"), [
    (2, 2, 0, None),
    (2, 2, 1, 0),
    (3, 2, 0, -1),
    (1, 1, 2, None),
])  # fmt: skip
def test_cache_breakpoints_count_over_tools_system_and_messages(
    in_tools: int, in_system: int, in_messages: int, where: int | None
) -> None:
    tools = [{"name": f"tool_{n}", "input_schema": {}, "cache_control": MARK} for n in range(in_tools)]
    got = codes(user(marked(in_messages) or "hi"), tools=tools, system=marked(in_system))
    assert got == ([] if where is None else [(where, "too_many_cache_breakpoints")])


def test_a_mark_inside_a_tool_result_counts() -> None:
    inner = [text("r", cache_control=MARK)]
    got = codes(user(marked(3)), assistant([tool_use()]), user([tool_result(content=inner)]))
    assert got == []
    got = codes(user(marked(3)), assistant([tool_use()]), user([{**tool_result(content=inner), "cache_control": MARK}]))
    assert got == [(2, "too_many_cache_breakpoints")]


def test_a_null_mark_is_no_mark() -> None:
    assert codes(user([text(f"{n}", cache_control=None) for n in range(6)])) == []


def test_unknown_blocks_and_fields_pass_through() -> None:
    blocks = [
        {"type": "thinking", "thinking": "", "signature": "sig"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "a_block_from_next_month", "whatever": [1, 2]},
        text("Done.", citations=[]),
    ]
    assert codes(user(), {**assistant(blocks), "future_field": True}, metadata={"user_id": "u"}) == []


def test_problems_come_sorted_by_position() -> None:
    got = anthropic_problems(
        {"messages": [assistant([tool_use()]), user([text(""), tool_result()]), {"role": "robot"}]}
    )
    assert [p.index for p in got] == sorted(p.index for p in got)
    assert {p.code for p in got} >= {"first_message_not_user", "empty_text_block", "tool_result_not_first"}
    assert all(p.detail for p in got)


def test_a_body_that_is_not_an_object_is_one_problem() -> None:
    bodies: list[Any] = [None, [], "text", 3]
    for body in bodies:
        assert [(p.index, p.code) for p in problems_for("anthropic", body)] == [(-1, "malformed_body")]
    assert [p.code for p in anthropic_problems({"messages": "hi"})] == ["malformed_body"]
