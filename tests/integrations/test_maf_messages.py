"""Converting messages between MAF and contextledger loses nothing, in either direction."""

from __future__ import annotations

import json
from typing import Any

import agent_framework as maf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.exceptions import InvalidMessageError
from contextledger.integrations.maf import (
    MAF_CONTENTS_PROPERTY,
    from_maf_message,
    from_maf_messages,
    to_maf_message,
    to_maf_messages,
)
from contextledger.messages import (
    FunctionCallContent,
    FunctionResultContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
    from_openai,
)
from tests.history.support import rich_messages

texts = st.text(max_size=40)
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
properties = st.dictionaries(names, json_values, max_size=3)


@st.composite
def maf_contents(draw: st.DrawFn) -> maf.Content:
    kind = draw(st.sampled_from(["text", "reasoning", "call", "result", "uri", "error"]))
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


@settings(max_examples=150, deadline=None)
@given(st.lists(maf_messages(), max_size=5))
def test_maf_to_contextledger_and_back_is_lossless(messages: list[maf.Message]) -> None:
    back = to_maf_messages(from_maf_messages(messages))
    assert [m.to_dict() for m in back] == [m.to_dict() for m in messages]


@settings(max_examples=150, deadline=None)
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
            else:
                assert isinstance(content, OpaqueContent)


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
