"""The rules under generated bodies: no JSON value makes a check raise, a body built to keep the
rules passes, and one mutation that breaks one rule is reported with that rule's code."""

from __future__ import annotations

import copy
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.messages import problems_for
from tests.sizes import examples

API = Literal["chat", "responses", "anthropic"]
APIS: tuple[API, ...] = ("chat", "responses", "anthropic")
FAST = settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Arbitrary JSON, biased toward the names the rules read so that near-valid shapes come up often.
NAMES = st.sampled_from(
    ["role", "content", "type", "id", "call_id", "tool_use_id", "tool_call_id", "tool_calls", "function", "name",
     "arguments", "text", "cache_control", "messages", "input", "system", "tools", "previous_response_id",
     "conversation", "approval_request_id"]
)  # fmt: skip
WORDS = st.sampled_from(
    ["user", "assistant", "tool", "system", "text", "tool_use", "tool_result", "function", "function_call",
     "function_call_output", "local_shell_call_output", "reasoning", "compaction", "mcp_approval_request",
     "mcp_approval_response", "message", "a", "b", ""]
)  # fmt: skip
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | WORDS | st.text(max_size=4)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(NAMES | st.text(max_size=3), inner, max_size=5),
    max_leaves=30,
)


@FAST
@given(st.sampled_from(APIS), JSON)
def test_no_json_value_makes_a_check_raise(api: API, value: Any) -> None:
    for body in (value, {"messages": value, "input": value, "system": value, "tools": value}):
        for problem in problems_for(api, body):
            assert isinstance(problem.code, str)
            assert problem.detail
            assert problem.index >= -1


@FAST
@given(st.sampled_from(APIS), st.lists(JSON, max_size=8))
def test_no_list_of_json_values_makes_a_check_raise(api: API, items: list[Any]) -> None:
    problems = problems_for(api, {"messages": items, "input": items})
    assert [p.index for p in problems] == sorted(p.index for p in problems)
    assert all(-1 <= p.index < max(len(items), 1) for p in problems)


# Valid conversations: a script of turns, each plain text or a round of tool calls with results, written
# out in each API's shape.

Turn = list[str]  # the call ids of one assistant turn; empty for a plain reply
SCRIPTS = st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=8)


def turns(script: list[int]) -> list[Turn]:
    counter = iter(range(1000))
    return [[f"call_{next(counter)}" for _ in range(calls)] for calls in script]


def chat_body(script: list[int]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for calls in turns(script):
        if not calls:
            messages += [{"role": "assistant", "content": "reply"}, {"role": "user", "content": "more"}]
            continue
        tool_calls = [{"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in calls]
        messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        messages += [{"role": "tool", "tool_call_id": c, "content": "result"} for c in calls]
    return {"messages": messages}


def responses_body(script: list[int]) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for number, calls in enumerate(turns(script)):
        items.append({"type": "reasoning", "id": f"rs_{number}", "summary": []})
        items += [{"type": "function_call", "call_id": c, "name": "f", "arguments": "{}"} for c in calls]
        items += [{"type": "function_call_output", "call_id": c, "output": "result"} for c in calls]
        items.append({"type": "message", "role": "assistant", "content": "reply", "id": f"msg_{number}"})
    return {"input": items}


def anthropic_body(script: list[int]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "start"}]}]
    for calls in turns(script):
        uses = [{"type": "tool_use", "id": c, "name": "f", "input": {}} for c in calls]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "reply"}, *uses]})
        results = [{"type": "tool_result", "tool_use_id": c, "content": "result"} for c in calls]
        messages.append({"role": "user", "content": [*results, {"type": "text", "text": "more"}]})
    return {
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    }


BUILDERS = {"chat": chat_body, "responses": responses_body, "anthropic": anthropic_body}


@FAST
@given(st.sampled_from(APIS), SCRIPTS)
def test_a_body_built_valid_passes(api: API, script: list[int]) -> None:
    assert problems_for(api, BUILDERS[api](script)) == []


def _calls(api: API, body: dict[str, Any]) -> list[tuple[int, int]]:
    """(message or item index, position in it) of every call in a built body."""
    if api == "responses":
        return [(i, -1) for i, item in enumerate(body["input"]) if item.get("type") == "function_call"]
    if api == "chat":
        return [(i, n) for i, m in enumerate(body["messages"]) for n, _ in enumerate(m.get("tool_calls") or [])]
    return [
        (i, n)
        for i, m in enumerate(body["messages"])
        for n, block in enumerate(m["content"])
        if block["type"] == "tool_use"
    ]


def _results(api: API, body: dict[str, Any]) -> list[int]:
    listed = body["input"] if api == "responses" else body["messages"]
    if api == "anthropic":
        return [i for i, m in enumerate(listed) if m["role"] == "user" and m["content"][0]["type"] == "tool_result"]
    kind, key = ("function_call_output", "type") if api == "responses" else ("tool", "role")
    return [i for i, item in enumerate(listed) if item.get(key) == kind]


UNANSWERED = {"chat": "missing_tool_result", "responses": "call_without_output", "anthropic": "tool_use_unanswered"}
ORPHAN = {"chat": "orphan_tool_result", "responses": "output_without_call", "anthropic": "orphan_tool_result"}
DUPLICATE = {"chat": "duplicate_call_id", "responses": "duplicate_call_id", "anthropic": "duplicate_tool_use_id"}


def _rename_call(api: API, body: dict[str, Any], where: tuple[int, int], new_id: str) -> None:
    index, position = where
    if api == "responses":
        body["input"][index]["call_id"] = new_id
    elif api == "chat":
        body["messages"][index]["tool_calls"][position]["id"] = new_id
    else:
        body["messages"][index]["content"][position]["id"] = new_id


@FAST
@given(st.sampled_from(APIS), SCRIPTS.filter(any), st.data())
def test_a_dropped_result_is_an_unanswered_call(api: API, script: list[int], data: st.DataObject) -> None:
    body = copy.deepcopy(BUILDERS[api](script))
    results = _results(api, body)
    index = data.draw(st.sampled_from(results))
    listed = body["input"] if api == "responses" else body["messages"]
    if api == "anthropic":
        listed[index]["content"].pop(0)  # the first result; the turn's text stays
    else:
        del listed[index]
    assert UNANSWERED[api] in {p.code for p in problems_for(api, body)}


@FAST
@given(st.sampled_from(APIS), SCRIPTS.filter(any), st.data())
def test_a_renamed_call_leaves_its_result_orphan(api: API, script: list[int], data: st.DataObject) -> None:
    body = copy.deepcopy(BUILDERS[api](script))
    _rename_call(api, body, data.draw(st.sampled_from(_calls(api, body))), "renamed")
    got = {p.code for p in problems_for(api, body)}
    assert ORPHAN[api] in got
    assert UNANSWERED[api] in got


@FAST
@given(st.sampled_from(APIS), SCRIPTS.filter(lambda s: sum(s) >= 2), st.data())
def test_a_repeated_call_id_is_reported(api: API, script: list[int], data: st.DataObject) -> None:
    body = copy.deepcopy(BUILDERS[api](script))
    calls = _calls(api, body)
    earlier, later = sorted(
        data.draw(st.lists(st.sampled_from(range(len(calls))), min_size=2, max_size=2, unique=True))
    )
    _rename_call(api, body, calls[later], f"call_{earlier}")  # calls are numbered in the order they come
    assert DUPLICATE[api] in {p.code for p in problems_for(api, body)}


@FAST
@given(SCRIPTS.filter(any))
def test_anthropic_results_moved_behind_text_are_not_first(script: list[int]) -> None:
    body = copy.deepcopy(anthropic_body(script))
    turn = next(m for m in body["messages"] if m["content"][0]["type"] == "tool_result")
    turn["content"].insert(0, turn["content"].pop())  # the trailing text to the front
    assert "tool_result_not_first" in {p.code for p in problems_for("anthropic", body)}


@FAST
@given(SCRIPTS, st.integers(min_value=0, max_value=7))
def test_responses_ending_on_reasoning_is_reported(script: list[int], at: int) -> None:
    body = responses_body(script)
    body["input"] = [*body["input"][: 1 + at], {"type": "reasoning", "id": "rs_last", "summary": []}]
    assert "reasoning_last" in {p.code for p in problems_for("responses", body)}


@FAST
@given(st.sampled_from(APIS), SCRIPTS)
def test_an_unknown_role_is_reported(api: API, script: list[int]) -> None:
    body = copy.deepcopy(BUILDERS[api](script))
    listed = body["input"] if api == "responses" else body["messages"]
    listed.append({"role": "robot", "content": "beep"})
    assert "unknown_role" in {p.code for p in problems_for(api, body)}
