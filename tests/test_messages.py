"""Tests for the message model: OpenAI round trips, JSONL transcripts, input validation and `validate()`.

The library promises that an OpenAI Chat Completions history passes through it without loss,
that transcripts are written atomically, that every malformed input is rejected with an error
naming the bad value, and that messages are immutable values.  These tests hold it to each of
those promises with concrete shapes seen in real traffic and with generated ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger import (
    ApprovalRequestContent,
    ApprovalResponseContent,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    InvalidMessageError,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
    TranscriptError,
    from_openai,
    read_jsonl,
    to_openai,
    validate,
    write_jsonl,
)
from contextledger.messages import load_jsonl
from contextledger.messages._message import assistant_text_message
from contextledger.messages._openai import message_from_openai, message_to_openai, result_text
from tests.sizes import examples

Json = dict[str, Any]


def round_trip(messages: list[Json]) -> list[Json]:
    """OpenAI dicts -> Messages -> OpenAI dicts, the path every request takes through the library."""
    return to_openai(from_openai(messages))


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> FunctionCallContent:
    return FunctionCallContent(call_id, name, arguments)


def codes(messages: list[Any]) -> list[tuple[int, str]]:
    """`validate()` reduced to (index, code) pairs, so expectations can be compared exactly."""
    return [(p.index, p.code) for p in validate(messages)]


# ---------------------------------------------------------------------------------------------
# Lossless OpenAI round trip: hand-picked shapes
# ---------------------------------------------------------------------------------------------

ROUND_TRIP_CASES: dict[str, Json] = {
    "several_tool_calls": {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz":"CET"}'},
            },
            {"id": "call_3", "type": "function", "function": {"name": "search", "arguments": ""}},
        ],
    },
    "tool_result_with_call_id": {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 18°C"},
    "user_name": {"role": "user", "name": "alice", "content": "hello"},
    "assistant_name": {"role": "assistant", "name": "planner", "content": "on it"},
    "tool_name": {"role": "tool", "name": "get_weather", "tool_call_id": "call_1", "content": "ok"},
    "content_string": {"role": "user", "content": "plain text"},
    "content_empty_string": {"role": "assistant", "content": ""},
    "content_null": {"role": "assistant", "content": None},
    "content_absent_assistant": {"role": "assistant"},
    "content_absent_user": {"role": "user"},
    "content_null_with_calls": {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
    "content_absent_with_calls": {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
    "content_text_with_calls": {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
    "content_parts_text_and_image": {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
            {"type": "text", "text": "Be brief."},
        ],
    },
    "content_parts_single_text": {"role": "user", "content": [{"type": "text", "text": "only one part"}]},
    "content_parts_empty_list": {"role": "user", "content": []},
    "content_parts_text_with_cache_control": {
        "role": "system",
        "content": [{"type": "text", "text": "long prompt", "cache_control": {"type": "ephemeral"}}],
    },
    "content_parts_assistant": {"role": "assistant", "content": [{"type": "text", "text": "part"}]},
    "tool_content_parts": {
        "role": "tool",
        "tool_call_id": "call_9",
        "content": [{"type": "text", "text": "row 1"}, {"type": "text", "text": "row 2"}],
    },
    "tool_content_null": {"role": "tool", "tool_call_id": "call_9", "content": None},
    "tool_content_absent": {"role": "tool", "tool_call_id": "call_9"},
    "tool_content_empty": {"role": "tool", "tool_call_id": "call_9", "content": ""},
    "reasoning_with_text": {"role": "assistant", "reasoning_content": "think first", "content": "answer"},
    "reasoning_only": {"role": "assistant", "reasoning_content": "just thinking"},
    "reasoning_with_calls": {
        "role": "assistant",
        "reasoning_content": "I need the weather",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
    },
    "developer_role": {"role": "developer", "content": "Answer in French."},
    "developer_role_with_name": {"role": "developer", "name": "policy", "content": "Be terse."},
    "system_role": {"role": "system", "content": "You are helpful."},
    "unknown_top_level_keys": {
        "role": "assistant",
        "content": "Hi",
        "refusal": None,
        "audio": {"id": "audio_1", "expires_at": 1700000000, "transcript": "Hi"},
        "annotations": [],
        "cache_control": {"type": "ephemeral"},
        "function_call": None,
    },
    "unknown_keys_in_tool_call_item_and_function": {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "index": 0,
                "cache_control": {"type": "ephemeral"},
                "function": {"name": "f", "arguments": "{}", "strict": True, "parsed_arguments": {"a": 1}},
            }
        ],
    },
    "tool_call_item_without_type": {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
        ],
    },
    "tool_call_item_with_other_type": {
        "role": "assistant",
        "tool_calls": [{"id": "call_1", "type": "custom", "function": {"name": "f", "arguments": "x"}}],
    },
    "empty_tool_calls_list": {"role": "assistant", "content": "done", "tool_calls": []},
}


@pytest.mark.parametrize(
    "item",
    [
        {"id": "c1", "__no_type__": None, "function": {"name": "f", "arguments": "{}"}},
        {"id": "c1", "type": "function", "__no_type__": False, "function": {"name": "f", "arguments": "{}"}},
    ],
    ids=["without_type", "with_type"],
)
def test_unknown_tool_call_key_that_matches_an_internal_marker_survives(item: Json) -> None:
    """Unknown keys are arbitrary strings; one that happens to match a name the converter uses for its own
    bookkeeping must still come back as it was."""
    data: Json = {"role": "assistant", "content": None, "tool_calls": [item]}
    assert round_trip([data]) == [json.loads(json.dumps(data))]


@pytest.mark.parametrize("data", list(ROUND_TRIP_CASES.values()), ids=list(ROUND_TRIP_CASES))
def test_openai_round_trip_is_exact(data: Json) -> None:
    """Anything dropped or rewritten here would change what the model receives after compaction."""
    original = json.loads(json.dumps(data))  # an independent copy, in case conversion mutates its input
    assert round_trip([data]) == [original]
    assert data == original


def test_round_trip_of_a_whole_conversation_keeps_order_and_every_message() -> None:
    """The list form must be the per-message conversion applied in order, nothing merged or reordered."""
    conversation = list(ROUND_TRIP_CASES.values())
    assert round_trip(conversation) == conversation


def test_several_tool_calls_become_one_call_content_each_in_order() -> None:
    """Compaction groups tool results by call id, so every call must be visible as its own content."""
    [message] = from_openai([ROUND_TRIP_CASES["several_tool_calls"]])
    assert [(c.call_id, c.name) for c in message.function_calls] == [
        ("call_1", "get_weather"),
        ("call_2", "get_time"),
        ("call_3", "search"),
    ]
    assert message.function_calls[0].arguments == '{"city":"Oslo"}'


def test_parsed_message_exposes_roles_names_results_and_reasoning() -> None:
    """The typed view must mean what the dict meant: developer is a system instruction, name is the author."""
    developer, tool, reasoning, user = from_openai(
        [
            ROUND_TRIP_CASES["developer_role_with_name"],
            ROUND_TRIP_CASES["tool_name"],
            ROUND_TRIP_CASES["reasoning_with_text"],
            ROUND_TRIP_CASES["content_parts_text_and_image"],
        ]
    )
    assert developer.role == "system"
    assert developer.author_name == "policy"
    assert tool.function_results == (FunctionResultContent("call_1", "ok"),)
    assert tool.author_name == "get_weather"
    assert reasoning.contents == (ReasoningContent("think first"), TextContent("answer"))
    assert isinstance(user.contents[1], OpaqueContent)
    assert user.text == "What is in this picture?Be brief."


def test_messages_built_in_python_convert_to_the_usual_openai_shapes() -> None:
    """Messages constructed without a source dict still need to produce what the API expects."""
    messages = [
        Message.system("sys"),
        Message.user("hi", author_name="bob"),
        Message.assistant(calls=[call("c1", "f", '{"x":1}')]),
        Message.tool("c1", "42"),
        Message.assistant("done", reasoning="why"),
    ]
    assert to_openai(messages) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi", "name": "bob"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}],
        },
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
        {"role": "assistant", "content": "done", "reasoning_content": "why"},
    ]


def test_null_tool_calls_as_dumped_by_the_openai_sdk_survive_the_round_trip() -> None:
    """`ChatCompletionMessage.model_dump()` writes `tool_calls: None`; a lossless converter keeps it."""
    sdk_dump: Json = {
        "role": "assistant",
        "content": "Hello!",
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": None,
    }
    assert round_trip([sdk_dump]) == [sdk_dump]


# ---------------------------------------------------------------------------------------------
# Lossless OpenAI round trip: generated shapes
# ---------------------------------------------------------------------------------------------

_TOP_LEVEL_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"})
_RESERVED_TOP_LEVEL = _TOP_LEVEL_KEYS | {"_contextledger"}
_CALL_ITEM_KEYS = frozenset({"id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def unknown_keys(reserved: frozenset[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Keys the library has no field for, with any JSON value: they must come back untouched."""
    names = st.text(min_size=1, max_size=12).filter(lambda k: k not in reserved)
    return st.dictionaries(names, json_values, max_size=3)


@st.composite
def content_parts(draw: st.DrawFn) -> list[Json]:
    """A list-of-parts `content`: plain text parts, text parts with extras, images, arbitrary typed parts."""
    text_part = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=30))
    text_part_with_extra = st.builds(
        lambda t, extra: {**extra, "type": "text", "text": t},
        st.text(max_size=30),
        unknown_keys(frozenset({"type", "text"})).filter(bool),
    )
    image_part = st.builds(
        lambda url, extra: {**extra, "type": "image_url", "image_url": {"url": url}},
        st.text(max_size=30),
        unknown_keys(frozenset({"type", "image_url"})),
    )
    other_part = st.builds(
        lambda kind, extra: {**extra, "type": kind},
        st.text(max_size=10),
        unknown_keys(frozenset({"type"})),
    )
    return draw(st.lists(text_part | text_part_with_extra | image_part | other_part, max_size=4))


@st.composite
def tool_call_items(draw: st.DrawFn) -> Json:
    """One `tool_calls` entry, sometimes without `type`, with unknown keys at both levels."""
    function: Json = {
        **draw(unknown_keys(_FUNCTION_KEYS)),
        "name": draw(st.text(max_size=20)),
        "arguments": draw(st.text(max_size=40)),
    }
    item: Json = {**draw(unknown_keys(_CALL_ITEM_KEYS)), "id": draw(st.text(min_size=1, max_size=12))}
    if draw(st.booleans()):
        item["type"] = "function"
    item["function"] = function
    return item


@st.composite
def openai_messages(draw: st.DrawFn) -> Json:
    """A valid OpenAI Chat Completions message of any role, plus arbitrary unknown top-level keys."""
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
    data: Json = dict(draw(unknown_keys(_RESERVED_TOP_LEVEL)))
    data["role"] = role
    if draw(st.booleans()):
        data["name"] = draw(st.text(max_size=12))
    if role in ("system", "developer", "user"):
        data["content"] = draw(st.text(max_size=40) | content_parts())
    elif role == "assistant":
        content = draw(st.sampled_from(["text", "null", "absent", "parts"]))
        if content == "text":
            data["content"] = draw(st.text(max_size=40))
        elif content == "null":
            data["content"] = None
        elif content == "parts":
            data["content"] = draw(content_parts())
        if draw(st.booleans()):
            data["reasoning_content"] = draw(st.text(max_size=40))
        if draw(st.booleans()):
            data["tool_calls"] = draw(st.lists(tool_call_items(), max_size=3))
    else:
        data["tool_call_id"] = draw(st.text(min_size=1, max_size=12))
        data["content"] = draw(st.text(max_size=40) | st.none() | content_parts())
    return data


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(openai_messages(), max_size=5))
def test_generated_openai_histories_round_trip_exactly(messages: list[Json]) -> None:
    """Whatever valid shape a provider sends, unknown keys included, must come back byte-for-byte equal."""
    original = json.loads(json.dumps(messages))
    assert round_trip(messages) == original


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(openai_messages(), max_size=5))
def test_generated_openai_histories_survive_a_jsonl_transcript(messages: list[Json]) -> None:
    """A transcript written and read back must still convert to the very dicts it was made from."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "generated.jsonl"
        write_jsonl(path, from_openai(messages))
        assert to_openai(read_jsonl(path)) == messages


# ---------------------------------------------------------------------------------------------
# JSONL transcripts
# ---------------------------------------------------------------------------------------------


def sample_history() -> list[Message]:
    return [
        Message.system("rules", message_id="m0"),
        Message.user("hi", message_id="m1", additional_properties={"source": "web", "n": [1, 2]}),
        Message.assistant(
            "[Summary] earlier",
            message_id="m2",
            additional_properties={"_is_summary": True, "_summary_source": "summarization"},
        ),
        Message.assistant(calls=[call("c1", "f", '{"q":"日本"}')]),
        Message.tool("c1", "result"),
    ]


def test_jsonl_round_trip_keeps_message_ids_and_additional_properties(tmp_path: Path) -> None:
    """Ids and summary markers have no OpenAI field; losing them on save would break later compaction."""
    path = tmp_path / "history.jsonl"
    history = sample_history()
    write_jsonl(path, history)
    loaded = read_jsonl(path)
    assert loaded == history
    assert [m.message_id for m in loaded] == ["m0", "m1", "m2", None, None]
    assert loaded[2].is_summary
    # Stored read-only all the way down: lists come back as tuples, and JSON output gives lists again.
    assert dict(loaded[1].additional_properties) == {"source": "web", "n": (1, 2)}
    written = to_openai(loaded, metadata=True)[1]["_contextledger"]["additional_properties"]
    assert written == {"source": "web", "n": [1, 2]}
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[1])["_contextledger"] == {
        "message_id": "m1",
        "additional_properties": {"source": "web", "n": [1, 2]},
    }
    assert "_contextledger" not in json.loads(lines[4])


def test_metadata_is_left_out_of_model_requests() -> None:
    """A model API rejects unknown keys, so the transcript block must only appear when asked for."""
    message = Message.user("hi", message_id="m1", additional_properties={"k": "v"})
    assert message_to_openai(message) == {"role": "user", "content": "hi"}
    assert message_to_openai(message, metadata=True)["_contextledger"] == {
        "message_id": "m1",
        "additional_properties": {"k": "v"},
    }


def test_jsonl_keeps_non_ascii_text_readable(tmp_path: Path) -> None:
    """Transcripts are for people too; non-ASCII text is written as itself, not as escapes."""
    path = tmp_path / "t.jsonl"
    write_jsonl(path, [Message.user("こんにちは 🎉")])
    assert "こんにちは 🎉" in path.read_text(encoding="utf-8")
    assert read_jsonl(path)[0].text == "こんにちは 🎉"


def test_blank_lines_in_a_transcript_are_ignored(tmp_path: Path) -> None:
    """Hand-edited transcripts often carry blank or whitespace-only lines; they are not messages."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        '\n{"role": "user", "content": "a"}\n   \n\t\n{"role": "assistant", "content": "b"}\n\n',
        encoding="utf-8",
    )
    assert [m.text for m in read_jsonl(path)] == ["a", "b"]
    assert load_jsonl(["", "  ", '{"role": "user", "content": "x"}']) == [Message.user("x")]


def test_malformed_json_line_names_the_file_and_line(tmp_path: Path) -> None:
    """In a long transcript the user must be told exactly where the bad line is."""
    path = tmp_path / "broken.jsonl"
    path.write_text('{"role": "user", "content": "a"}\n\n{"role": "user", "content": \n', encoding="utf-8")
    with pytest.raises(TranscriptError) as caught:
        read_jsonl(path)
    assert caught.value.line == 3
    assert caught.value.path == str(path)
    assert f"{path}:3:" in str(caught.value)


def test_invalid_message_line_names_the_file_and_line(tmp_path: Path) -> None:
    """Valid JSON that is not a valid message is reported the same way, with the reason."""
    path = tmp_path / "roles.jsonl"
    path.write_text('{"role": "user", "content": "a"}\n{"role": "robot", "content": "b"}\n', encoding="utf-8")
    with pytest.raises(TranscriptError) as caught:
        read_jsonl(path)
    assert caught.value.line == 2
    assert f"{path}:2:" in str(caught.value)
    assert "'robot'" in str(caught.value)
    assert isinstance(caught.value, InvalidMessageError)


def test_missing_transcript_raises_transcript_error(tmp_path: Path) -> None:
    """A wrong path is a transcript problem the caller can catch, not a bare OSError."""
    with pytest.raises(TranscriptError, match=r"missing\.jsonl"):
        read_jsonl(tmp_path / "missing.jsonl")


def unserialisable_history() -> list[Message]:
    """Two good messages around one whose metadata json cannot encode, so the failure is midway."""
    return [
        Message.user("first"),
        Message.user("second", additional_properties={"handle": object()}),
        Message.user("third"),
    ]


def test_failed_write_creates_no_file(tmp_path: Path) -> None:
    """A half-written transcript would later load as a silently truncated history."""
    path = tmp_path / "new.jsonl"
    with pytest.raises(TypeError):
        write_jsonl(path, unserialisable_history())
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_an_existing_transcript_untouched(tmp_path: Path) -> None:
    """Overwriting a good transcript must be all or nothing, and leave no temporary files behind."""
    path = tmp_path / "history.jsonl"
    write_jsonl(path, sample_history())
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_jsonl(path, unserialisable_history())
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


def test_write_interrupted_at_the_final_rename_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a failure after the data was written to disk must not replace or litter the directory."""
    path = tmp_path / "history.jsonl"
    write_jsonl(path, sample_history())
    before = path.read_bytes()

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_jsonl(path, [Message.user("new")])
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

BAD_OPENAI_MESSAGES: dict[str, tuple[Any, str]] = {
    "unknown_role": ({"role": "robot", "content": "beep"}, "'robot'"),
    "missing_role": ({"content": "who am I"}, "None"),
    "tool_without_tool_call_id": ({"role": "tool", "content": "42"}, "tool_call_id"),
    "tool_with_empty_tool_call_id": ({"role": "tool", "tool_call_id": "", "content": "42"}, "''"),
    "content_int": ({"role": "user", "content": 12345}, "12345"),
    "content_dict": ({"role": "user", "content": {"text": "nested"}}, "{'text': 'nested'}"),
    "tool_arguments_dict": (
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"city": "Oslo"}}}],
        },
        "{'city': 'Oslo'}",
    ),
    "tool_calls_not_a_list": ({"role": "assistant", "tool_calls": "call_abc"}, "'call_abc'"),
    "tool_calls_on_user": (
        {"role": "user", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
        "'user'",
    ),
    "tool_call_without_id": (
        {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
        "{'function': {'name': 'f'}}",
    ),
    "tool_call_not_an_object": ({"role": "assistant", "tool_calls": ["c1"]}, "'c1'"),
    "content_part_not_an_object": ({"role": "user", "content": ["plain string part"]}, "'plain string part'"),
    "text_part_with_non_string_text": ({"role": "user", "content": [{"type": "text", "text": 7}]}, "7"),
    "tool_call_id_on_assistant": (
        {"role": "assistant", "content": "x", "tool_call_id": "c9"},
        "tool_call_id",
    ),
    "name_not_a_string": ({"role": "user", "content": "x", "name": 99}, "99"),
    "reasoning_not_a_string": ({"role": "assistant", "reasoning_content": ["r"]}, "['r']"),
    "message_not_an_object": ("just a string", "'just a string'"),
}


@pytest.mark.parametrize(("data", "shown"), list(BAD_OPENAI_MESSAGES.values()), ids=list(BAD_OPENAI_MESSAGES))
def test_malformed_openai_message_is_rejected_with_the_bad_value(data: Any, shown: str) -> None:
    """The error must name what was wrong, or the user cannot find it in a long history."""
    with pytest.raises(InvalidMessageError) as caught:
        from_openai([{"role": "user", "content": "fine"}, data])
    assert shown in str(caught.value)
    assert "message 1" in str(caught.value)


def test_invalid_message_error_is_a_value_error() -> None:
    """Callers that already catch ValueError for bad input keep working."""
    with pytest.raises(ValueError, match="robot"):
        message_from_openai({"role": "robot"})


@pytest.mark.parametrize(
    "value",
    [{"role": "user", "content": "x"}, "not a list", b"bytes"],
    ids=["dict", "str", "bytes"],
)
def test_from_openai_rejects_a_single_value_instead_of_a_list(value: Any) -> None:
    """Passing one message dict is an easy mistake; iterating its keys would give nonsense errors."""
    with pytest.raises(InvalidMessageError, match="list"):
        from_openai(value)


@pytest.mark.parametrize(
    ("build", "shown"),
    [
        (lambda: Message(cast(Any, "robot"), (TextContent("x"),)), "'robot'"),
        (lambda: Message("user", cast(Any, 42)), "42"),
        (lambda: Message("user", cast(Any, ("loose string",))), "'loose string'"),
        (lambda: Message("user", cast(Any, (TextContent("ok"), {"text": "dict"}))), "{'text': 'dict'}"),
        (lambda: Message("user", (TextContent("x"),), author_name=cast(Any, 5)), "5"),
        (lambda: Message("user", (TextContent("x"),), additional_properties=cast(Any, ["a"])), "['a']"),
        (lambda: TextContent(cast(Any, 3.5)), "3.5"),
        (lambda: FunctionCallContent("c1", "f", cast(Any, {"a": 1})), "{'a': 1}"),
        (lambda: FunctionCallContent("", "f"), "call_id"),
        (lambda: FunctionResultContent("c1", cast(Any, None)), "None"),
    ],
    ids=[
        "unknown_role",
        "contents_int",
        "contents_holds_str",
        "contents_holds_dict",
        "author_name_int",
        "properties_not_mapping",
        "text_float",
        "arguments_dict",
        "empty_call_id",
        "result_none",
    ],
)
def test_constructing_an_invalid_message_raises(build: Any, shown: str) -> None:
    """Messages built in Python get the same checks as parsed ones, so a bad one never reaches the index."""
    with pytest.raises(InvalidMessageError) as caught:
        build()
    assert shown in str(caught.value)


def test_contents_may_be_given_as_a_list_and_are_stored_as_a_tuple() -> None:
    """A list would let callers mutate contents after the fact; the message keeps its own tuple."""
    parts: list[TextContent | ReasoningContent] = [ReasoningContent("r"), TextContent("t")]
    message = Message("assistant", cast(Any, parts))
    parts.append(TextContent("late"))
    assert message.contents == (ReasoningContent("r"), TextContent("t"))


# ---------------------------------------------------------------------------------------------
# validate()
# ---------------------------------------------------------------------------------------------


def test_empty_history_is_valid() -> None:
    assert validate([]) == []


def test_well_formed_history_is_valid() -> None:
    history = [
        Message.system("s"),
        Message.user("u"),
        Message.assistant(calls=[call("a")]),
        Message.tool("a", "r"),
        Message.assistant("done"),
    ]
    assert validate(history) == []


def test_orphan_tool_result() -> None:
    """A result for a call that never happened is rejected by the API."""
    assert codes([Message.user("u"), Message.tool("ghost", "r")]) == [(1, "orphan_tool_result")]


def test_missing_tool_result_before_the_next_message() -> None:
    """Every call needs its result before the conversation moves on; the problem points at the call."""
    history = [
        Message.user("u"),
        Message.assistant(calls=[call("a"), call("b")]),
        Message.tool("a", "r"),
        Message.user("next"),
    ]
    problems = validate(history)
    assert [(p.index, p.code) for p in problems] == [(1, "missing_tool_result")]
    assert "'b'" in problems[0].detail


def test_missing_tool_result_at_the_end_of_the_history() -> None:
    assert codes([Message.user("u"), Message.assistant(calls=[call("a")])]) == [(1, "missing_tool_result")]


def test_duplicate_call_id() -> None:
    """A reused id makes results ambiguous; the second result is then a duplicate too."""
    history = [
        Message.user("u"),
        Message.assistant(calls=[call("a")]),
        Message.tool("a", "r1"),
        Message.assistant(calls=[call("a")]),
        Message.tool("a", "r2"),
    ]
    assert codes(history) == [(3, "duplicate_call_id"), (4, "duplicate_tool_result")]


def test_duplicate_call_id_within_one_message() -> None:
    history = [Message.user("u"), Message.assistant(calls=[call("a"), call("a")]), Message.tool("a", "r")]
    assert codes(history) == [(1, "duplicate_call_id")]


def test_duplicate_tool_result() -> None:
    history = [
        Message.user("u"),
        Message.assistant(calls=[call("a")]),
        Message.tool("a", "r"),
        Message.tool("a", "r"),
    ]
    assert codes(history) == [(3, "duplicate_tool_result")]


def test_misplaced_tool_result() -> None:
    """A result after an intervening message is misplaced, and its call is reported as unanswered."""
    history = [
        Message.user("u"),
        Message.assistant(calls=[call("a")]),
        Message.user("wait"),
        Message.tool("a", "r"),
    ]
    assert codes(history) == [(1, "missing_tool_result"), (3, "misplaced_tool_result")]


def test_text_assistant_message_between_call_and_result_is_not_allowed() -> None:
    """Only reasoning-only messages may sit between a call and its results."""
    history = [
        Message.user("u"),
        Message.assistant(calls=[call("a")]),
        Message.assistant("chatter"),
        Message.tool("a", "r"),
    ]
    assert codes(history) == [(1, "missing_tool_result"), (3, "misplaced_tool_result")]


def test_unknown_role_in_a_dict() -> None:
    history: list[Any] = [Message.user("u"), {"role": "robot", "content": "x"}]
    assert codes(history) == [(1, "unknown_role")]


@pytest.mark.parametrize(
    "bad",
    [{"role": "tool", "content": "x"}, {"role": "user", "content": 5}, "not a dict"],
    ids=["tool_without_id", "int_content", "string"],
)
def test_malformed_dict(bad: Any) -> None:
    history: list[Any] = [Message.user("u"), Message.assistant("a"), bad]
    assert codes(history) == [(2, "malformed_message")]


def test_malformed_dict_is_not_reported_as_unknown_role_because_of_its_text() -> None:
    """The code must come from what is wrong, not from words that happen to appear in the bad value."""
    history: list[Any] = [{"role": "user", "content": {"note": "unknown role"}}]
    assert codes(history) == [(0, "malformed_message")]


def test_dicts_and_messages_can_be_mixed() -> None:
    """A raw OpenAI history is validated without converting it first."""
    history: list[Any] = [
        {"role": "user", "content": "u"},
        Message.assistant(calls=[call("a")]),
        {"role": "tool", "tool_call_id": "a", "content": "r"},
    ]
    assert validate(history) == []


def test_parallel_calls_with_results_in_any_order_are_valid() -> None:
    """Providers return parallel results in completion order, not call order."""
    history = [
        Message.user("u"),
        Message.assistant(calls=[call("a"), call("b"), call("c")]),
        Message.tool("c", "3"),
        Message.tool("a", "1"),
        Message.tool("b", "2"),
        Message.assistant("all done"),
    ]
    assert validate(history) == []


def test_reasoning_only_message_between_results_is_valid() -> None:
    """Reasoning models interleave thinking between results; that must not count as leaving the block."""
    history = [
        Message.user("u"),
        Message.assistant(calls=[call("a"), call("b")]),
        Message.tool("a", "1"),
        Message.assistant(reasoning="hmm, one more"),
        Message.tool("b", "2"),
    ]
    assert validate(history) == []


def test_problem_renders_index_and_code() -> None:
    [problem] = validate([Message.tool("x", "r")])
    assert str(problem).startswith("message 0: orphan_tool_result: ")


# ---------------------------------------------------------------------------------------------
# Immutability
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("role", "user"),
        ("contents", ()),
        ("author_name", "x"),
        ("message_id", "m"),
        ("additional_properties", {}),
    ],
)
def test_message_attributes_cannot_be_assigned(attribute: str, value: object) -> None:
    """The index hands back the caller's own objects; if they could change, projections would too."""
    message = Message.assistant("a", message_id="m1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(message, attribute, value)
    with pytest.raises(AttributeError):
        setattr(message, attribute, value)


@pytest.mark.parametrize(
    "content",
    [
        TextContent("t"),
        ReasoningContent("r"),
        call("c"),
        FunctionResultContent("c", "r"),
        OpaqueContent({"a": 1}),
    ],
    ids=lambda c: type(c).__name__,
)
def test_contents_are_frozen(content: object) -> None:
    with pytest.raises(AttributeError):
        setattr(content, "type", "other")  # noqa: B010 - the attribute name is the point of the test


def test_additional_properties_are_read_only_and_copied() -> None:
    """Neither the message's mapping nor the caller's original dict can change the stored metadata."""
    source: dict[str, Any] = {"k": 1}
    message = Message.user("x", additional_properties=source)
    source["k"] = 2
    assert message.additional_properties["k"] == 1
    with pytest.raises(TypeError):
        cast("dict[str, Any]", message.additional_properties)["k"] = 3
    with pytest.raises(TypeError):
        cast("dict[str, Any]", message.extra)["k"] = 3
    with pytest.raises(TypeError):
        cast("dict[str, Any]", call("c", "f").extra)["k"] = 3


def test_editing_the_dicts_from_to_openai_does_not_change_the_message() -> None:
    """Callers post-process request dicts (rewrite image URLs, redact audio); that must not edit history."""
    [message] = from_openai(
        [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
                "audio": {"id": "audio_1"},
            }
        ]
    )
    snapshot = json.loads(json.dumps(to_openai([message])))
    request = to_openai([message])
    request[0]["content"][0]["image_url"]["url"] = "data:redacted"
    request[0]["audio"]["id"] = "changed"
    assert to_openai([message]) == snapshot


def test_editing_the_source_dict_after_conversion_does_not_change_the_message() -> None:
    """A message is a value: reusing the provider's response dict afterwards must not rewrite history."""
    source: Json = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}", "meta": {"v": 1}}}
        ],
        "audio": {"id": "audio_1"},
    }
    [message] = from_openai([source])
    snapshot = json.loads(json.dumps(source))
    source["audio"]["id"] = "changed"
    source["tool_calls"][0]["function"]["meta"]["v"] = 2
    assert to_openai([message]) == [snapshot]


def test_equal_messages_compare_equal_and_differ_on_content() -> None:
    """Equality is by value, which the index relies on to detect an unchanged prefix."""
    assert Message.user("x", message_id="1") == Message.user("x", message_id="1")
    assert Message.user("x") != Message.user("y")
    assert Message.user("x") != Message.user("x", additional_properties={"k": 1})


# Messages the library writes itself ---------------------------------------------------------


@given(text=st.text(max_size=60), summary=st.booleans(), memo=st.none() | st.integers(0, 99))
def test_a_message_the_library_writes_is_an_ordinary_frozen_message(text: str, summary: bool, memo: int | None) -> None:
    """Compaction builds its summaries without re-validating them (thousands per call); what comes
    out must be indistinguishable from a message made the usual way, memo aside."""
    properties = MappingProxyType({"_is_summary": True} if summary else {})
    token_memo = None if memo is None else ("estimate/4", memo)
    written = assistant_text_message(text, properties, token_memo)
    usual = Message("assistant", (TextContent(text),), additional_properties=dict(properties))
    assert type(written) is Message
    assert type(written.contents[0]) is TextContent
    assert written == usual
    assert hash(written.contents[0]) == hash(usual.contents[0])
    assert written.is_summary is summary
    assert written._token_memo == token_memo
    assert message_to_openai(written, metadata=True) == message_to_openai(usual, metadata=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        written.role = "user"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        written.contents[0].text = "changed"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Hosted calls, their results and approvals (design.md#units)
# ---------------------------------------------------------------------------------------------

HOSTED_ROUND_TRIP_CASES: dict[str, list[Json]] = {
    "mcp_call_and_result_in_one_message": [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "hosted_call",
                    "call_id": "mcp_1",
                    "tool": "mcp",
                    "name": "search",
                    "arguments": "{}",
                    "server_label": "docs",
                    "status": "completed",
                },
                {"type": "hosted_result", "call_id": "mcp_1", "tool": "mcp", "output": "3 hits", "status": "ok"},
            ],
        }
    ],
    "code_interpreter_then_output_later": [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "hosted_call",
                    "call_id": "ci_1",
                    "tool": "code_interpreter",
                    "arguments": "print(1)",
                    "container_id": "c9",
                }
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "hosted_result",
                    "call_id": "ci_1",
                    "tool": "code_interpreter",
                    "output": "1",
                    "outputs": [{"type": "logs", "logs": "1"}],
                }
            ],
        },
    ],
    "search_and_image_without_optional_fields": [
        {
            "role": "assistant",
            "content": [
                {"type": "hosted_call", "call_id": "ws_1", "tool": "web_search"},
                {"type": "hosted_call", "call_id": "ig_1", "tool": "image_generation"},
                {"type": "text", "text": "done"},
            ],
        },
    ],
    "function_approval_request_and_response": [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "approval_request",
                    "request_id": "a1",
                    "call": {"id": "c1", "type": "function", "function": {"name": "pay", "arguments": "{}"}},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "approval_response", "request_id": "a1", "approved": True, "reason": "fine"}],
        },
    ],
    "mcp_approval_of_a_hosted_call": [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "approval_request",
                    "request_id": "mcpr_1",
                    "call": {
                        "type": "hosted_call",
                        "call_id": "mcp_2",
                        "tool": "mcp",
                        "name": "delete",
                        "arguments": "{}",
                    },
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "approval_response",
                    "request_id": "mcpr_1",
                    "approved": False,
                    "call": {"type": "hosted_call", "call_id": "mcp_2", "tool": "mcp", "name": "delete"},
                }
            ],
        },
    ],
}


@pytest.mark.parametrize("case", sorted(HOSTED_ROUND_TRIP_CASES))
def test_hosted_calls_and_approvals_survive_the_openai_round_trip(case: str) -> None:
    source = HOSTED_ROUND_TRIP_CASES[case]
    assert round_trip(source) == source
    assert load_jsonl(json.dumps(m) for m in to_openai(from_openai(source), metadata=True)) == from_openai(source)


def test_hosted_parts_become_typed_contents_with_their_ids_and_provider_fields() -> None:
    [message] = from_openai(HOSTED_ROUND_TRIP_CASES["mcp_call_and_result_in_one_message"])
    call_content, result = message.contents
    assert call_content == HostedCallContent(
        "mcp_1", "mcp", "search", "{}", {"server_label": "docs", "status": "completed"}
    )
    assert result == HostedResultContent("mcp_1", "mcp", "3 hits", {"status": "ok"})
    assert message.opened_ids == ["mcp_1"]
    assert message.answered_ids == ["mcp_1"]
    assert list(message.payload_texts()) == ["search", "{}", "3 hits"]


def test_an_approval_request_opens_its_own_id_and_its_calls_id() -> None:
    request, response = from_openai(HOSTED_ROUND_TRIP_CASES["function_approval_request_and_response"])
    [content] = request.contents
    assert isinstance(content, ApprovalRequestContent)
    assert content.call == call("c1", "pay")
    assert request.opened_ids == ["a1", "c1"]
    assert response.answered_ids == ["a1"]
    assert response.opened_ids == []
    assert response.contents == (ApprovalResponseContent("a1", True, None, {"reason": "fine"}),)


@pytest.mark.parametrize(
    ("part", "shown"),
    [
        ({"type": "hosted_call", "tool": "mcp"}, "HostedCallContent.call_id must be a string"),
        ({"type": "hosted_call", "call_id": "x", "tool": ""}, "HostedCallContent.tool is empty"),
        ({"type": "hosted_result", "call_id": "x", "tool": "mcp", "output": 3}, "HostedResultContent.output"),
        ({"type": "approval_request", "request_id": "a"}, "needs the 'call'"),
        ({"type": "approval_response", "request_id": "a", "approved": "yes"}, "must be True or False"),
    ],
)
def test_a_malformed_hosted_part_is_rejected_naming_it(part: Json, shown: str) -> None:
    with pytest.raises(InvalidMessageError, match="content part 0") as raised:
        message_from_openai({"role": "assistant", "content": [part]})
    assert shown in str(raised.value)


@pytest.mark.parametrize("key", ["tool_calls", "reasoning_content"])
@pytest.mark.parametrize("value", [[], [{"id": "c", "function": {"name": "f"}}], "x", {"a": 1}])
def test_a_tool_message_carrying_calls_or_reasoning_is_rejected_not_dropped(key: str, value: object) -> None:
    """Regression: `tool_calls` on a tool message vanished on the round trip, silently."""
    data = {"role": "tool", "tool_call_id": "c1", "content": "ok", key: value}
    with pytest.raises(InvalidMessageError, match=f"a tool message carries one result, not '{key}'"):
        from_openai([data])


def test_a_tool_message_with_an_explicit_null_tool_calls_keeps_it() -> None:
    data: Json = {"role": "tool", "tool_call_id": "c1", "content": "ok", "tool_calls": None}
    assert round_trip([data]) == [data]


@pytest.mark.parametrize(
    "content",
    [
        call("c1"),
        HostedCallContent("h1", "shell"),
        ApprovalRequestContent("a1", call("c1")),
        TextContent("x"),
        FunctionResultContent("c2", "y"),
    ],
)
def test_a_tool_message_openai_cannot_hold_is_refused_on_output_not_cut_down(content: Any) -> None:
    """Other frameworks allow any content in a tool message; OpenAI's format holds one result."""
    message = Message("tool", (FunctionResultContent("c0", "x"), content))
    with pytest.raises(InvalidMessageError, match="exactly one FunctionResultContent"):
        to_openai([message])


def test_a_stored_message_keeps_the_order_of_its_contents_and_each_reasoning_part() -> None:
    """Chat Completions fields put reasoning first, then content parts, then tool calls, and join
    reasoning parts: with ``metadata=True`` a message whose contents were in another order, or
    held several reasoning parts, records what it needs to read back as it was."""
    hosted = HostedCallContent("cc_1", "computer", "", '{"type": "click"}')
    call = FunctionCallContent("c1", "lookup", "{}")
    message = Message("assistant", (call, hosted, ReasoningContent("first"), ReasoningContent("second")))
    stored = message_to_openai(message, metadata=True)
    assert stored["_contextledger"] == {"order": ["c", "p", "r", "r"], "reasoning": ["first", "second"]}
    assert message_from_openai(stored) == message
    plain = message_to_openai(message)  # what a model is sent: the fields alone
    assert "_contextledger" not in plain
    assert plain["reasoning_content"] == "firstsecond"
    in_field_order = Message("assistant", (ReasoningContent("why"), TextContent("Checking."), call))
    assert "_contextledger" not in message_to_openai(in_field_order, metadata=True)
    tampered = {**stored, "_contextledger": {"order": ["c", "c", "r", "r"]}}
    with pytest.raises(InvalidMessageError, match="order"):
        message_from_openai(tampered)


def test_a_tool_result_given_as_parts_reads_its_text_from_every_text_like_part() -> None:
    parts = [{"type": "input_text", "text": "hello "}, {"type": "text", "text": "world"}, {"type": "input_image"}]
    message = message_from_openai({"role": "tool", "tool_call_id": "c1", "content": parts})
    (result,) = message.contents
    assert isinstance(result, FunctionResultContent)
    assert result.result == "hello world" == result_text(parts)
    assert message_from_openai(message_to_openai(message, metadata=True)) == message
