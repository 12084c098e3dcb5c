"""The providers' own compaction in ``Usage``: Anthropic's ``usage.iterations`` (billed on top of
the top-level counts) and OpenAI's compaction passes, read from a usage object or a whole reply."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from contextledger.clients import Usage, read_reply_usage, read_usage

# The example of Anthropic's compaction guide: the top-level counts leave the compaction out.
ANTHROPIC_USAGE = {
    "input_tokens": 45000,
    "output_tokens": 1234,
    "iterations": [
        {"type": "compaction", "input_tokens": 180000, "output_tokens": 3500},
        {"type": "message", "input_tokens": 23000, "output_tokens": 1000},
    ],
}


def test_anthropic_compaction_iterations_are_summed_beside_the_top_level_counts() -> None:
    usage = read_usage(ANTHROPIC_USAGE)
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (45000, 1234)
    assert usage.compactions == 1
    assert usage.compaction == Usage(180000, 3500, cache_read_tokens=0, cache_write_tokens=0)
    assert (usage.billed_input_tokens, usage.billed_output_tokens) == (225000, 4734)
    assert "compactions=1 compaction_in=180000 compaction_out=3500" in usage.describe()


def test_anthropic_compaction_iterations_cache_counts_are_part_of_their_input() -> None:
    raw = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 0,
        "iterations": [
            {
                "type": "compaction",
                "input_tokens": 100,
                "output_tokens": 40,
                "cache_read_input_tokens": 900,
                "cache_creation_input_tokens": 50,
            },
            {"type": "compaction", "input_tokens": 7, "output_tokens": 3},
            {"type": "message", "input_tokens": 10, "output_tokens": 5},
        ],
    }
    usage = read_usage(raw)
    assert usage is not None
    assert usage.compaction is not None
    assert usage.compactions == 2
    assert usage.compaction == Usage(1057, 43, cache_read_tokens=900, cache_write_tokens=50)


def test_iterations_without_a_compaction_count_none_and_bill_nothing_more() -> None:
    usage = read_usage({"input_tokens": 3, "output_tokens": 4, "iterations": [{"type": "message"}]})
    assert usage is not None
    assert (usage.compactions, usage.compaction, usage.billed_input_tokens) == (0, None, 3)
    plain = read_usage({"input_tokens": 3, "output_tokens": 4})
    assert plain is not None
    assert (plain.compactions, plain.compaction) == (None, None)


def test_openai_compact_endpoint_answer_is_one_pass_reported_as_its_own_usage() -> None:
    reply = {
        "id": "resp_001",
        "object": "response.compaction",
        "output": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"id": "cmp_001", "type": "compaction", "encrypted_content": "gAAAA"},
        ],
        "usage": {"input_tokens": 139, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 438},
    }
    usage = read_reply_usage(reply)
    assert usage == Usage(139, 438, cache_read_tokens=0, compactions=1)


def test_openai_context_management_compaction_is_counted_inside_the_response() -> None:
    reply = {
        "object": "response",
        "output": [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "x"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        ],
        "usage": {"input_tokens": 900, "output_tokens": 20},
    }
    usage = read_reply_usage(reply)
    assert usage is not None
    assert usage.compactions == 1
    assert usage.compaction is None
    assert usage.billed_input_tokens == 900
    assert read_reply_usage({"object": "response", "output": [], "usage": {"input_tokens": 1}}) == Usage(1)
    assert read_reply_usage({"usage": ANTHROPIC_USAGE}) == read_usage(ANTHROPIC_USAGE)
    assert read_reply_usage("not a reply") is None


_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)


@given(
    st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["compaction", "message", 3, None])},
            optional={
                "input_tokens": _JUNK,
                "output_tokens": _JUNK,
                "cache_read_input_tokens": _JUNK,
                "cache_creation_input_tokens": _JUNK,
            },
        )
        | _JUNK,
        max_size=5,
    ),
    _JUNK,
)
def test_no_iterations_list_makes_reading_raise_or_count_a_negative(iterations: list[Any], output: Any) -> None:
    usage = read_reply_usage(
        {"usage": {"input_tokens": 1, "output_tokens": 1, "iterations": iterations}, "output": output}
    )
    assert usage is not None
    assert usage.compactions is not None
    assert usage.compactions >= 0
    if usage.compaction is not None:
        assert (usage.compaction.input_tokens or 0) >= 0
        assert (usage.compaction.output_tokens or 0) >= 0
