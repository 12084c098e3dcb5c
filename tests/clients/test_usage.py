"""read_usage: every vendor's usage shape gives one Usage whose input is every token sent, and
nothing an upstream puts in ``usage`` makes it raise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.agents._response import sum_usage
from contextledger.clients import Usage, read_usage
from tests.sizes import examples


def test_openai_chat_completions_cached_tokens_are_part_of_prompt_tokens() -> None:
    raw = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    usage = read_usage(raw)
    assert usage == Usage(2006, 300, cache_read_tokens=1920)
    assert usage is not None
    assert usage.uncached_input_tokens == 86


def test_openai_responses_api_input_tokens_include_cached_ones() -> None:
    raw = {"input_tokens": 1500, "output_tokens": 20, "input_tokens_details": {"cached_tokens": 1024}}
    assert read_usage(raw) == Usage(1500, 20, cache_read_tokens=1024)


def test_anthropic_input_tokens_leave_cache_reads_and_writes_out_so_they_are_added_back() -> None:
    raw = {"input_tokens": 50, "output_tokens": 7, "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 300}
    usage = read_usage(raw)
    assert usage == Usage(2150, 7, cache_read_tokens=1800, cache_write_tokens=300)
    assert usage is not None
    assert usage.uncached_input_tokens == 350


def test_an_openai_compatible_server_with_anthropic_cache_fields_keeps_prompt_tokens_as_the_total() -> None:
    raw = {"prompt_tokens": 2150, "completion_tokens": 7, "cache_read_input_tokens": 1800}
    raw["cache_creation_input_tokens"] = 300
    assert read_usage(raw) == Usage(2150, 7, cache_read_tokens=1800, cache_write_tokens=300)


def test_deepseek_hit_and_miss_tokens() -> None:
    raw = {"prompt_tokens": 1000, "completion_tokens": 5, "prompt_cache_hit_tokens": 768}
    raw["prompt_cache_miss_tokens"] = 232
    assert read_usage(raw) == Usage(1000, 5, cache_read_tokens=768)
    without_total = {"completion_tokens": 5, "prompt_cache_hit_tokens": 768, "prompt_cache_miss_tokens": 232}
    assert read_usage(without_total) == Usage(1000, 5, cache_read_tokens=768)


def test_a_server_without_cache_fields_leaves_them_unknown() -> None:
    usage = read_usage({"prompt_tokens": 12, "completion_tokens": 3})
    assert usage == Usage(12, 3)
    assert usage is not None
    assert usage.cache_read_tokens is None
    assert usage.uncached_input_tokens is None
    assert usage.describe() == "in=12 out=3"


def test_describe_shows_the_cache_when_reported() -> None:
    usage = Usage(2048, 9, cache_read_tokens=1920, cache_write_tokens=0)
    assert usage.describe() == "in=2048 out=9 cache_read=1920 cache_write=0"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param("lots", None, id="a-string"),
        pytest.param([1, 2], None, id="a-list"),
        pytest.param({}, Usage(), id="empty"),
        pytest.param({"prompt_tokens": "12", "completion_tokens": 3.0}, Usage(), id="numbers-as-text-and-float"),
        pytest.param({"prompt_tokens": True, "completion_tokens": False}, Usage(), id="booleans"),
        pytest.param({"prompt_tokens": -1, "completion_tokens": 10**40}, Usage(), id="negative-and-absurd"),
        pytest.param({"prompt_tokens": 2**53, "completion_tokens": 2**53 + 1}, Usage(2**53), id="bound"),
        pytest.param(
            {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 101}}, Usage(100), id="cache-over-input"
        ),
        pytest.param(
            {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 60}, "cache_creation_input_tokens": 50},
            Usage(100, cache_read_tokens=60),
            id="read-and-written-over-input",
        ),
        pytest.param(
            {"prompt_tokens": 100, "prompt_tokens_details": "none", "cache_read_input_tokens": 40},
            Usage(100, cache_read_tokens=40),
            id="details-not-an-object",
        ),
        pytest.param(
            {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": None}}, Usage(100), id="cached-null"
        ),
        pytest.param(
            {"input_tokens": 10, "cache_read_input_tokens": "x", "cache_creation_input_tokens": 5},
            Usage(15, cache_write_tokens=5),
            id="anthropic-garbage-read",
        ),
        pytest.param({"prompt_cache_hit_tokens": 5}, Usage(cache_read_tokens=5), id="deepseek-half"),
    ],
)
def test_garbage_is_read_as_not_reported(raw: Any, expected: Usage | None) -> None:
    assert read_usage(raw) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=12,
)
usage_keys = st.sampled_from(
    [
        "prompt_tokens",
        "completion_tokens",
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "prompt_cache_hit_tokens",
        "prompt_cache_miss_tokens",
        "prompt_tokens_details",
        "input_tokens_details",
    ]
)
counts = st.integers(min_value=-5, max_value=10**6) | json_values
details = st.dictionaries(st.sampled_from(["cached_tokens", "cache_write_tokens"]), counts, max_size=2)


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(usage_keys, counts | details, max_size=8))
def test_any_usage_gives_sane_counts(raw: dict[str, Any]) -> None:
    """Whatever the upstream wrote: no exception, counts are whole numbers >= 0, the cache is part
    of the input, and the usage sums with others."""
    usage = read_usage(raw)
    assert usage is not None
    for value in (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens):
        assert value is None or (type(value) is int and value >= 0)
    if usage.input_tokens is not None:
        assert (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0) <= usage.input_tokens
        assert usage.uncached_input_tokens is None or usage.uncached_input_tokens >= 0
    json.dumps(usage.describe())
    total = sum_usage([usage, usage])
    assert total.cache_read_tokens == (None if usage.cache_read_tokens is None else 2 * usage.cache_read_tokens)


def test_sum_usage_adds_cache_counts_and_keeps_unknown_unknown() -> None:
    first = Usage(2000, 10, cache_read_tokens=1024, cache_write_tokens=0)
    second = Usage(2100, 12, cache_read_tokens=1920, cache_write_tokens=100)
    assert sum_usage([first, second]) == Usage(4100, 22, cache_read_tokens=2944, cache_write_tokens=100)
    assert sum_usage([first, Usage(5, 1)]) == Usage(2005, 11)
    assert sum_usage([first, None]) == Usage(None, None)
