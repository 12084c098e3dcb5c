"""The Responses API's rules for ``input``, each at its boundary: the body just inside it passes,
the body just past it is refused with that rule's code."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.messages import problems_for, responses_problems


def message(role: str = "user", text: str = "What is the weather in Paris?") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def call(call_id: str = "call_1", kind: str = "function_call", **extra: Any) -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "name": "get_weather", "arguments": '{"city": "Paris"}', **extra}


def output(call_id: str = "call_1", kind: str = "function_call_output") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "output": "15 degrees"}


def reasoning(item_id: str = "rs_1") -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": []}


def codes(*items: Any, **body: Any) -> list[tuple[int, str]]:
    return [(problem.index, problem.code) for problem in responses_problems({"input": list(items), **body})]


def test_the_documented_function_round_trip_passes() -> None:
    assert codes(message(), reasoning(), call(id="fc_1"), output(), message("assistant", "15 degrees.")) == []


def test_a_string_input_is_always_valid() -> None:
    assert responses_problems({"input": "Hello"}) == []
    assert responses_problems({"input": ""}) == []


def test_an_input_list_is_not_empty() -> None:
    assert codes() == [(-1, "empty_input")]
    assert codes(message()) == []
    assert [p.code for p in responses_problems({"input": {"role": "user"}})] == ["malformed_body"]


@pytest.mark.parametrize(
    "kind", ["function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call"]
)
def test_each_client_call_is_answered_by_its_output_after_it(kind: str) -> None:
    answer = output(kind=f"{kind}_output")
    assert codes(message(), call(kind=kind), answer) == []
    assert codes(message(), call(kind=kind)) == [(1, "call_without_output")]
    assert codes(message(), answer) == [(1, "output_without_call")]
    assert codes(message(), answer, call(kind=kind)) == [(1, "output_before_call")]


def test_a_local_shell_output_may_name_its_call_by_id() -> None:
    shell = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_1", "action": {}, "status": "completed"}
    assert codes(message(), shell, {"type": "local_shell_call_output", "id": "call_1", "output": "ok"}) == []


def test_hosted_calls_carry_their_output() -> None:
    hosted = [
        {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "search", "arguments": "{}", "output": "x"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "code_interpreter_call", "id": "ci_1", "code": "1", "outputs": []},
    ]
    assert codes(message(), *hosted, message("assistant")) == []


def test_an_approval_response_answers_its_request() -> None:
    request = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "n", "arguments": "{}"}
    response = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    assert codes(message(), request, response) == []
    assert codes(message(), request) == []  # a request may go unanswered: the client declined
    assert codes(message(), response) == [(1, "output_without_call")]
    assert codes(message(), response, request) == [(1, "output_before_call")]


@pytest.mark.parametrize("field", ["previous_response_id", "conversation"])
def test_a_stored_conversation_holds_the_calls_of_earlier_outputs(field: str) -> None:
    assert codes(output()) == [(0, "output_without_call")]
    assert codes(output(), **{field: "resp_1" if field == "previous_response_id" else {"id": "conv_1"}}) == []
    assert codes(output(), **{field: None}) == [(0, "output_without_call")]
    # A call in this input still needs its output here.
    assert codes(call("call_2"), **{field: "resp_1"}) == [(0, "call_without_output")]


def test_a_compaction_item_holds_what_went_before_it() -> None:
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "..."}
    # A call before it whose output follows it, an output after it whose call it holds, a call before it unanswered.
    assert codes(call("call_1"), compaction, output("call_1")) == []
    assert codes(compaction, output("call_0"), message()) == []
    assert codes(call("call_1"), compaction, message()) == []
    # After the newest boundary the rules hold again.
    assert codes(compaction, message(), call("call_2")) == [(2, "call_without_output")]
    assert codes(call("call_1"), compaction, message(), compaction | {"id": "cmp_2"}, call("call_2")) == [
        (4, "call_without_output")
    ]


def test_no_reasoning_item_last() -> None:
    assert codes(message(), reasoning(), message("assistant")) == []
    assert codes(message(), reasoning()) == [(1, "reasoning_last")]
    assert codes(message(), reasoning("rs_1"), reasoning("rs_2")) == [(2, "reasoning_last")]
    assert codes(message(), reasoning(), **{"previous_response_id": "resp_1"}) == [(1, "reasoning_last")]


def test_call_ids_are_unique_among_calls() -> None:
    assert codes(call("call_1"), output("call_1"), call("call_2"), output("call_2")) == []
    assert codes(call("call_1"), output("call_1"), call("call_1", kind="custom_tool_call"), output("call_1")) == [
        (2, "duplicate_call_id")
    ]


def test_item_ids_are_unique() -> None:
    assert codes(message() | {"id": "msg_1"}, message("assistant") | {"id": "msg_2"}) == []
    assert codes(message() | {"id": "msg_1"}, message("assistant") | {"id": "msg_1"}) == [(1, "duplicate_item_id")]


def test_message_roles() -> None:
    for role in ("user", "assistant", "system", "developer"):
        assert codes(message(role)) == []
        assert codes({"role": role, "content": "shorthand"}) == []
    assert codes(message("tool")) == [(0, "unknown_role")]
    assert codes({"role": ["user"], "content": "x"}) == [(0, "unknown_role")]


def test_malformed_items() -> None:
    assert codes("hello") == [(0, "malformed_item")]
    assert codes(call(""), message()) == [(0, "malformed_item")]
    assert codes(call(), {"type": "function_call_output", "output": "x"}) == [
        (0, "call_without_output"),
        (1, "malformed_item"),
    ]


def test_unknown_items_and_fields_pass_through() -> None:
    new = {"type": "an_item_from_next_month", "call_id": "call_1", "id": "new_1"}
    assert codes(message() | {"future_field": 1}, new, {"type": ["list"]}, message("assistant")) == []


def test_problems_come_sorted_and_dispatch_by_name() -> None:
    items = [output("call_9"), message("robot"), call("call_1"), reasoning()]
    got = problems_for("responses", {"input": items})
    assert [(p.index, p.code) for p in got] == [
        (0, "output_without_call"),
        (1, "unknown_role"),
        (2, "call_without_output"),
        (3, "reasoning_last"),
    ]
