"""The message reader: a remembered message is only ever reused for exactly the same JSON value."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger import from_openai
from contextledger.exceptions import ProxyError
from contextledger.serve._requests import MessageReader

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.floats(-2, 2, allow_nan=False), st.text(max_size=4)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text(min_size=1, max_size=4),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.text(min_size=1, max_size=4), "arguments": st.text(max_size=6)}
            ),
        },
        optional={"extra": json_values},
    ),
    min_size=1,
    max_size=2,
)
messages = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=6)},
        optional={"name": st.text(min_size=1, max_size=3), "extra": json_values},
    ),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(), "tool_calls": calls}),
    st.fixed_dictionaries(
        {"role": st.just("tool"), "tool_call_id": st.text(min_size=1, max_size=4), "content": st.text(max_size=6)},
        optional={"extra": json_values},
    ),
)


@given(st.lists(messages, max_size=6), st.lists(messages, max_size=6))
def test_reading_through_the_memory_gives_what_a_fresh_conversion_gives(
    first: list[dict[str, Any]], second: list[dict[str, Any]]
) -> None:
    reader = MessageReader()
    assert reader.read(first) == from_openai(first)
    again = reader.read([*first, *second])
    assert again == from_openai([*first, *second])
    assert all(a is b for a, b in zip(again, reader.read(first)))  # seen before: the very same objects


def test_values_that_compare_equal_in_python_but_differ_in_json_are_not_confused() -> None:
    reader = MessageReader()
    variants = [{"role": "user", "content": "x", "extra": value} for value in (1, 1.0, True, [1], {"1": 1})]
    read = [reader.read([variant])[0] for variant in variants]
    assert [message.extra["extra"] for message in read] == [1, 1.0, True, (1,), {"1": 1}]
    assert [type(message.extra["extra"]) for message in read][:3] == [int, float, bool]


def test_a_malformed_message_is_a_400_naming_its_position() -> None:
    with pytest.raises(ProxyError, match="message 1") as caught:
        MessageReader().read([{"role": "user", "content": "hi"}, {"role": "tool", "content": "no call id"}])
    assert caught.value.status == 400
    assert caught.value.code == "invalid_messages"


def test_the_reader_remembers_within_its_byte_limit_the_most_recently_used_first() -> None:
    reader = MessageReader(limit=200_000)
    kept = {"role": "user", "content": "the system prompt, sent with every request"}
    first = reader.read([kept])[0]
    for number in range(300):
        reader.read([kept, {"role": "user", "content": f"{number:04d}" + "x" * 10_000}])
        assert reader.held_bytes <= 200_000
    assert reader.read([kept])[0] is first  # used on every call: never the one to go
    assert reader.read([{"role": "user", "content": "y" * 300_000}])  # larger than the limit: read, not kept
    assert reader.held_bytes <= 200_000
