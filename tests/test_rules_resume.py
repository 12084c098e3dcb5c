"""The rules resumed: fed a body's items in parts, asked between the parts, copied at any point,
they find exactly what one check of the whole body finds; what the rest of the body could still
change is never reported early."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.exceptions import ConfigurationError
from contextledger.messages import Problem, problems_for
from contextledger.messages._rules import item_rules
from tests.test_rules_properties import API, APIS, BUILDERS, FAST, JSON, SCRIPTS

ARRAY = {"chat": "messages", "responses": "input", "anthropic": "messages"}


def assert_resumes(api: API, payload: dict[str, Any]) -> None:
    """Every split of the array gives the whole body's problems, and every prefix its own."""
    items = payload[ARRAY[api]]
    whole = problems_for(api, payload)
    fields = {**payload, ARRAY[api]: "not read"}  # the array of the payload given to problems() is ignored
    one_by_one = item_rules(api)
    for split in range(len(items) + 1):
        head = problems_for(api, {**payload, ARRAY[api]: items[:split]})
        assert one_by_one.problems(fields) == head
        rules = item_rules(api)
        rules.feed(items[:split])
        assert rules.problems(fields) == head
        assert rules.copy().problems(fields) == head
        resumed = rules.copy()
        resumed.feed(items[split:])
        assert resumed.problems(fields) == whole
        assert rules.problems(fields) == head  # feeding the copy left the original as it was
        rules.feed(items[split:])  # and asking left nothing behind that changes what follows
        assert rules.problems(fields) == whole
        one_by_one.feed(items[split : split + 1])


# Near-valid bodies: a body built to keep the rules, then a few edits that each break one rule or move
# where a rule is decided: items dropped, repeated, moved or cut off, blocks marked for caching, contents
# emptied, the body's other fields given.
EDITS = st.lists(
    st.tuples(
        st.sampled_from(["drop", "repeat", "swap", "insert", "cut", "mark", "empty"]),
        st.integers(min_value=0, max_value=40),
        st.integers(min_value=0, max_value=40),
        JSON | st.sampled_from(["", [], None, {"type": "reasoning", "id": "rs_x", "summary": []}]),
    ),
    max_size=4,
)
MARKED = {"type": "text", "text": "cached", "cache_control": {"type": "ephemeral"}}
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "system": st.lists(st.sampled_from([MARKED, {"type": "text", "text": ""}, {"type": "text", "text": "x"}])),
        "tools": st.lists(st.sampled_from([{"name": "f"}, {"name": "g", "cache_control": {"type": "ephemeral"}}])),
        "previous_response_id": st.sampled_from(["resp_1", "", None]),
        "conversation": st.sampled_from(["conv_1", {"id": "conv_1"}, None]),
    },
)


def marked(block: Any) -> Any:
    """A block marked for caching; a tool result's content marked too, since those marks count."""
    if not isinstance(block, dict):
        return block
    if block.get("type") == "tool_result":
        return {**block, "content": [MARKED, {"type": "text", "text": "result"}]}
    return {**block, "cache_control": {"type": "ephemeral"}}


def edited(items: list[Any], edits: list[tuple[str, int, int, Any]]) -> list[Any]:
    items = copy.deepcopy(items)
    for edit, drawn_at, drawn_to, value in edits:
        if not items:
            break
        at, to = drawn_at % len(items), drawn_to % (len(items) + 1)
        if edit == "drop":
            del items[at]
        elif edit == "repeat":
            items.insert(to, copy.deepcopy(items[at]))
        elif edit == "swap":
            items.insert(to, items.pop(at))
        elif edit == "insert":
            items.insert(to, value)
        elif edit == "cut":
            del items[to:]
        elif isinstance(items[at], dict) and edit == "empty":
            items[at]["content"] = value
        elif isinstance(items[at], dict) and isinstance(items[at].get("content"), list):
            items[at]["content"] = [marked(block) for block in items[at]["content"]]
            items[at]["content"].append(MARKED)
    return items


@FAST
@given(st.sampled_from(APIS), SCRIPTS, EDITS, FIELDS)
def test_an_edited_body_resumes_at_every_split(
    api: API, script: list[int], edits: list[tuple[str, int, int, Any]], fields: dict[str, Any]
) -> None:
    items = edited(BUILDERS[api](script)[ARRAY[api]], edits)
    assert_resumes(api, {**fields, ARRAY[api]: items})


@FAST
@given(st.sampled_from(APIS), SCRIPTS, FIELDS)
def test_a_valid_body_resumes_at_every_split(api: API, script: list[int], fields: dict[str, Any]) -> None:
    assert_resumes(api, {**BUILDERS[api](script), **fields})


@FAST
@given(st.sampled_from(APIS), st.lists(JSON, max_size=8), FIELDS)
def test_any_list_of_json_values_resumes_at_every_split(api: API, items: list[Any], fields: dict[str, Any]) -> None:
    assert_resumes(api, {**fields, ARRAY[api]: items})


@pytest.mark.parametrize("api", APIS)
def test_a_body_that_is_no_object_is_reported_by_the_resumed_rules_too(api: API) -> None:
    rules = item_rules(api)
    rules.feed([{"role": "user", "content": "hi"}])
    assert [p.code for p in rules.problems(["not", "a", "body"])] == ["malformed_body"]  # type: ignore[arg-type]


def test_an_unknown_api_names_the_ones_there_are() -> None:
    with pytest.raises(ConfigurationError, match="'chat', 'responses' or 'anthropic'"):
        item_rules("gemini")  # type: ignore[arg-type]


# What only the rest of the body decides, shown on the split where it changes.


def codes(problems: list[Problem]) -> list[tuple[int, str]]:
    return [(problem.index, problem.code) for problem in problems]


def test_chat_calls_wait_for_their_results_across_parts() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    rules = item_rules("chat")
    rules.feed([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]}])
    assert codes(rules.problems({})) == [(1, "missing_tool_result")]
    answered = rules.copy()
    answered.feed([{"role": "tool", "tool_call_id": "call_1", "content": "ok"}])
    assert codes(answered.problems({})) == []
    rules.feed([{"role": "user", "content": "never mind"}])
    assert codes(rules.problems({})) == [(1, "missing_tool_result")]


def test_responses_outputs_are_judged_by_what_follows_and_by_the_payload() -> None:
    output = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    rules = item_rules("responses")
    rules.feed([output])
    assert codes(rules.problems({})) == [(0, "output_without_call")]
    assert codes(rules.problems({"previous_response_id": "resp_1"})) == []
    compacted = rules.copy()
    compacted.feed([{"type": "compaction", "encrypted_content": "..."}])
    assert codes(compacted.problems({})) == []
    rules.feed([{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}])
    assert codes(rules.problems({"previous_response_id": "resp_1"})) == [(0, "output_before_call")]


def test_responses_reasoning_is_last_only_until_an_item_follows() -> None:
    rules = item_rules("responses")
    rules.feed([{"role": "user", "content": "hi"}, {"type": "reasoning", "id": "rs_1", "summary": []}])
    assert codes(rules.problems({})) == [(1, "reasoning_last")]
    rules.feed([{"type": "message", "role": "assistant", "content": "hello"}])
    assert codes(rules.problems({})) == []


def test_anthropic_empty_reply_is_fine_only_while_it_is_last() -> None:
    rules = item_rules("anthropic")
    rules.feed([{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}])
    assert codes(rules.problems({})) == []
    rules.feed([{"role": "user", "content": "and?"}])
    assert codes(rules.problems({})) == [(1, "empty_content")]


@pytest.mark.parametrize("in_system", [0, 1, 3, 4, 5])
def test_anthropic_cache_marks_over_the_limit_are_counted_from_system_and_tools(in_system: int) -> None:
    """The fifth mark is on the message where the count, started by ``system``, passes four."""
    messages = [{"role": "user", "content": [MARKED]}, {"role": "assistant", "content": [MARKED]}] * 3
    rules = item_rules("anthropic")
    rules.feed(messages)
    system = [MARKED] * in_system
    expected = (
        [(-1, "too_many_cache_breakpoints")] if in_system > 4 else [(4 - in_system, "too_many_cache_breakpoints")]
    )
    assert codes(rules.problems({"system": system})) == expected
    assert rules.problems({"system": system}) == problems_for("anthropic", {"system": system, "messages": messages})


def test_anthropic_mark_over_the_limit_keeps_its_place_among_the_message_problems() -> None:
    """Found in one pass, the fifth mark is reported where it is met: after what comes before it in
    the message, before what comes after."""
    empty = {"type": "text", "text": ""}
    system = [MARKED] * 4
    for blocks, expected in (
        ([MARKED, empty], ["too_many_cache_breakpoints", "empty_text_block"]),
        ([empty, MARKED], ["empty_text_block", "too_many_cache_breakpoints"]),
    ):
        rules = item_rules("anthropic")
        rules.feed([{"role": "user", "content": blocks}])
        assert [p.code for p in rules.problems({"system": system})] == expected
