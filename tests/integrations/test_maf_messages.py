"""Converting messages between MAF and contextledger loses nothing, in either direction."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.exceptions import InvalidMessageError
from contextledger.messages import (
    ApprovalRequestContent,
    ApprovalResponseContent,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
    from_openai,
)
from tests.history.support import rich_messages
from tests.optional_imports import try_import
from tests.sizes import examples

with try_import("maf") as maf_extra:
    import agent_framework as maf

    from contextledger.integrations.maf import (
        MAF_CONTENTS_PROPERTY,
        from_maf_message,
        from_maf_messages,
        to_maf_message,
        to_maf_messages,
    )

if not maf_extra.installed:  # the strategies below are built from MAF's classes
    pytest.skip(maf_extra.reason, allow_module_level=True)

texts = st.text(max_size=40)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
properties = st.dictionaries(names, json_values, max_size=3)


statuses = st.none() | st.sampled_from(["in_progress", "completed", "incomplete"])
output_contents = st.lists(
    st.builds(maf.Content.from_text, texts)
    | st.builds(
        lambda stdout, code: maf.Content.from_shell_command_output(stdout=stdout, exit_code=code),
        texts,
        st.none() | st.integers(0, 3),
    ),
    max_size=3,
)


@st.composite
def maf_hosted_contents(draw: st.DrawFn) -> maf.Content:
    """MAF's hosted calls, their outputs and approvals, with the fields MAF gives each."""
    kind = draw(
        st.sampled_from(
            [
                "mcp_call",
                "mcp_result",
                "code_call",
                "code_result",
                "image_call",
                "image_result",
                "search_call",
                "search_result",
                "shell_call",
                "shell_result",
                "approval",
            ]
        )
    )
    call_id = draw(ids)
    extra = draw(st.none() | properties)
    if kind == "mcp_call":
        return maf.Content.from_mcp_server_tool_call(
            call_id=call_id,
            tool_name=draw(names),
            server_name=draw(st.none() | names),
            arguments=draw(st.none() | texts | st.dictionaries(names, json_values, max_size=3)),
            additional_properties=extra,
        )
    if kind == "mcp_result":
        return maf.Content.from_mcp_server_tool_result(
            call_id=call_id, output=draw(st.none() | texts | output_contents), additional_properties=extra
        )
    if kind == "code_call":
        return maf.Content.from_code_interpreter_tool_call(
            call_id=call_id, inputs=draw(st.none() | output_contents), status=draw(statuses)
        )
    if kind == "code_result":
        return maf.Content.from_code_interpreter_tool_result(call_id=call_id, outputs=draw(st.none() | output_contents))
    if kind == "image_call":
        return maf.Content.from_image_generation_tool_call(image_id=call_id, additional_properties=extra)
    if kind == "image_result":
        uri = maf.Content.from_uri(f"https://example.com/{draw(names)}.png", media_type="image/png")
        return maf.Content.from_image_generation_tool_result(image_id=call_id, outputs=draw(st.none() | st.just(uri)))
    if kind == "search_call":
        return maf.Content.from_search_tool_call(
            call_id=call_id,
            tool_name=draw(st.sampled_from(["web_search", "file_search"]) | names),
            arguments=draw(st.none() | texts | st.dictionaries(names, json_values, max_size=2)),
            status=draw(statuses),
        )
    if kind == "search_result":
        return maf.Content.from_search_tool_result(
            call_id=call_id,
            tool_name=draw(st.sampled_from(["web_search", "file_search"]) | names),
            result=draw(st.none() | texts | json_values),
        )
    if kind == "shell_call":
        return maf.Content.from_shell_tool_call(
            call_id=call_id, commands=draw(st.none() | st.lists(texts, max_size=3)), status=draw(statuses)
        )
    if kind == "shell_result":
        return maf.Content.from_shell_tool_result(call_id=call_id, outputs=draw(st.none() | output_contents))
    call = draw(
        st.sampled_from(
            [
                maf.Content.from_function_call(call_id, "pay", arguments="{}"),
                maf.Content.from_mcp_server_tool_call(call_id=call_id, tool_name="delete", server_name="files"),
            ]
        )
    )
    request = maf.Content.from_function_approval_request(id=draw(ids), function_call=call)
    if draw(st.booleans()):
        return request
    return request.to_function_approval_response(approved=draw(st.booleans()))


@st.composite
def maf_contents(draw: st.DrawFn) -> maf.Content:
    kind = draw(st.sampled_from(["text", "reasoning", "call", "result", "uri", "error", "hosted"]))
    if kind == "hosted":
        return draw(maf_hosted_contents())
    extra = draw(st.none() | properties)
    if kind == "text":
        return maf.Content.from_text(draw(texts), additional_properties=extra)
    if kind == "reasoning":
        return maf.Content.from_text_reasoning(
            id=draw(st.none() | ids),
            text=draw(st.none() | texts),
            protected_data=draw(st.none() | texts),
            additional_properties=extra,
        )
    if kind == "call":
        arguments = draw(st.none() | texts | st.dictionaries(names, json_values, max_size=3))
        return maf.Content.from_function_call(
            draw(ids), draw(names), arguments=arguments, id=draw(st.none() | ids), additional_properties=extra
        )
    if kind == "result":
        result = draw(st.none() | texts | st.dictionaries(names, json_values, max_size=2))
        return maf.Content.from_function_result(draw(ids), result=result, additional_properties=extra)
    if kind == "uri":
        return maf.Content.from_uri(f"https://example.com/{draw(names)}.png", media_type="image/png")
    return maf.Content.from_error(message=draw(texts), error_code=draw(st.none() | names))


@st.composite
def maf_messages(draw: st.DrawFn) -> maf.Message:
    return maf.Message(
        draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"])),
        draw(st.lists(maf_contents(), max_size=4)),
        author_name=draw(st.none() | names),
        message_id=draw(st.none() | ids),
        additional_properties=draw(st.none() | properties),
    )


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(maf_messages(), max_size=5))
def test_maf_to_contextledger_and_back_is_lossless(messages: list[maf.Message]) -> None:
    back = to_maf_messages(from_maf_messages(messages))
    assert [m.to_dict() for m in back] == [m.to_dict() for m in messages]


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(maf_messages(), max_size=5))
def test_the_typed_view_is_what_maf_holds(messages: list[maf.Message]) -> None:
    """The contextledger side is not a blob: texts, calls and results are typed with MAF's values."""
    for message, converted in zip(messages, from_maf_messages(messages)):
        assert converted.message_id == message.message_id
        assert converted.author_name == message.author_name
        for original, content in zip(message.contents, converted.contents):
            if original.type == "text":
                assert content == TextContent(original.text or "")
            elif original.type == "function_call":
                assert isinstance(content, FunctionCallContent)
                assert (content.call_id, content.name) == (original.call_id, original.name)
                if isinstance(original.arguments, str):
                    assert content.arguments == original.arguments
                elif original.arguments is not None:
                    assert json.loads(content.arguments) == original.arguments
            elif original.type == "function_result":
                assert isinstance(content, FunctionResultContent)
                assert (content.call_id, content.result) == (original.call_id, original.result or "")
            elif original.type == "text_reasoning":
                assert content == ReasoningContent(original.text or "")
            elif original.type.endswith("_tool_call"):
                assert isinstance(content, HostedCallContent)
                assert content.call_id == (original.image_id or original.call_id)
                if original.type == "mcp_server_tool_call":
                    assert (content.tool, content.name) == ("mcp", original.tool_name)
                if original.type == "search_tool_call":
                    assert content.tool == original.tool_name
            elif original.type.endswith("_tool_result"):
                assert isinstance(content, HostedResultContent)
                assert content.call_id == (original.image_id or original.call_id)
            elif original.type == "function_approval_request":
                assert isinstance(content, ApprovalRequestContent)
                assert original.function_call is not None
                assert (content.request_id, content.call.call_id) == (original.id, original.function_call.call_id)
            elif original.type == "function_approval_response":
                assert isinstance(content, ApprovalResponseContent)
                assert (content.request_id, content.approved) == (original.id, original.approved)
            else:
                assert isinstance(content, OpaqueContent)


data_values = st.dictionaries(st.sampled_from(["status", "server_name", "x_label", "x_container"]), texts, max_size=2)


@st.composite
def hosted_contents(draw: st.DrawFn) -> Any:
    """contextledger's own hosted contents, as an OpenAI-style transcript would carry them."""
    tool = draw(st.sampled_from(["mcp", "code_interpreter", "web_search", "file_search", "image_generation", "shell"]))
    call = HostedCallContent(
        draw(ids), tool, name=draw(st.just("") | names), arguments=draw(texts), data=draw(data_values)
    )
    kind = draw(st.sampled_from(["call", "result", "request", "response"]))
    if kind == "call":
        return call
    if kind == "result":
        return HostedResultContent(call.call_id, tool, output=draw(texts), data=draw(data_values))
    approved = call if draw(st.booleans()) else FunctionCallContent(draw(ids), draw(names), draw(texts))
    if kind == "request":
        return ApprovalRequestContent(draw(ids), approved)
    return ApprovalResponseContent(draw(ids), draw(st.booleans()), approved if draw(st.booleans()) else None)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(hosted_contents(), min_size=1, max_size=3), max_size=4))
def test_hosted_calls_results_and_approvals_go_to_maf_and_back_unchanged(batches: list[list[Any]]) -> None:
    messages = [Message("assistant", tuple(batch)) for batch in batches]
    assert from_maf_messages(to_maf_messages(messages)) == messages


def test_hosted_contents_become_mafs_own_types() -> None:
    """What MAF receives is its own hosted content, so its clients send them as the provider expects."""
    call = HostedCallContent("mcp_1", "mcp", name="search", arguments='{"q": "cats"}', data={"server_name": "docs"})
    result = HostedResultContent("mcp_1", "mcp", output="10 cats")
    shell = HostedCallContent("sh_1", "shell", arguments="ls\npwd")
    (converted,) = to_maf_messages([Message("assistant", (call, result, shell))])
    mcp_call, mcp_result, shell_call = converted.contents
    assert (mcp_call.type, mcp_call.call_id, mcp_call.tool_name, mcp_call.server_name) == (
        "mcp_server_tool_call",
        "mcp_1",
        "search",
        "docs",
    )
    assert (mcp_result.type, mcp_result.output) == ("mcp_server_tool_result", "10 cats")
    assert (shell_call.type, shell_call.commands) == ("shell_tool_call", ["ls", "pwd"])


def test_a_hosted_call_maf_gave_no_id_is_carried_as_it_came() -> None:
    """MAF allows a hosted call without an id; with nothing to pair by it stays opaque, unchanged."""
    call = maf.Content.from_code_interpreter_tool_call(inputs=[maf.Content.from_text("print(1)")])
    message = maf.Message("assistant", [call])
    (converted,) = from_maf_messages([message])
    assert isinstance(converted.contents[0], OpaqueContent)
    assert to_maf_message(converted).to_dict() == message.to_dict()


def test_a_hosted_tool_maf_has_no_type_for_is_refused_by_name() -> None:
    with pytest.raises(InvalidMessageError, match="hosted tool 'teleport' has no Agent Framework content type"):
        to_maf_messages([Message("assistant", (HostedCallContent("t1", "teleport"),))])


def test_contextledger_to_maf_and_back_is_lossless() -> None:
    """Every field a history store keeps (ids, properties, OpenAI extras, parts, developer role,
    summaries, reasoning-only messages) survives the trip through MAF."""
    messages = [m for m in rich_messages("rt") if not _has_unaddressable_image(m)]
    assert from_maf_messages(to_maf_messages(messages)) == messages


def test_an_image_part_becomes_maf_image_content_and_comes_back_unchanged() -> None:
    message = from_openai(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
                ],
            }
        ]
    )[0]
    converted = to_maf_message(message)
    assert [c.type for c in converted.contents] == ["text", "uri"]
    assert converted.contents[1].uri == "https://example.com/cat.png"
    assert from_maf_message(converted) == message


def test_an_unconvertible_part_is_refused_by_name() -> None:
    message = Message("user", (OpaqueContent({"type": "input_audio", "input_audio": {"data": "..."}}),))
    with pytest.raises(InvalidMessageError, match="input_audio"):
        to_maf_message(message)


def test_a_call_without_id_is_refused_with_its_position() -> None:
    broken = maf.Message("assistant", [maf.Content("function_call", name="lookup_price", arguments="{}")])
    with pytest.raises(InvalidMessageError, match=r"message 1: function call 'lookup_price' has no call_id"):
        from_maf_messages([maf.Message("user", ["hi"]), broken])


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="'critic'"):
        from_maf_message(maf.Message("critic", ["no"]))


def test_residuals_are_kept_only_when_maf_had_more_than_the_typed_fields() -> None:
    plain = from_maf_message(maf.Message("assistant", [maf.Content.from_text("hello")]))
    assert MAF_CONTENTS_PROPERTY not in plain.additional_properties
    rich = from_maf_message(maf.Message("assistant", [maf.Content.from_text_reasoning(text="t", protected_data="p")]))
    assert MAF_CONTENTS_PROPERTY in rich.additional_properties


def test_a_tampered_residual_list_is_refused() -> None:
    message = Message.assistant("hi", additional_properties={MAF_CONTENTS_PROPERTY: [None, None]})
    with pytest.raises(InvalidMessageError, match="one entry per content"):
        to_maf_message(message)


def _has_unaddressable_image(message: Message) -> bool:
    def bad(content: Any) -> bool:
        return isinstance(content, OpaqueContent) and content.data.get("type") == "image_url"

    return any(bad(c) for c in message.contents)
