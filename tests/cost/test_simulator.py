"""The prefix-cache estimate against sequences whose bills are worked out by hand.

Each case names the provider rule it pins (append-only growth, a cut in the middle, a changed
system message, an expired entry, the least cacheable prefix, 128-token steps, breakpoints and
their look-back); the figures in the assertions are computed in the comments beside them.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger import Message
from contextledger.cost import (
    ANTHROPIC,
    NO_CACHE,
    OPENAI,
    Block,
    CostTotals,
    PrefixCacheSimulator,
    PriceProfile,
    RequestPrefixes,
    price_profile,
    request_blocks,
)
from contextledger.exceptions import ConfigurationError
from tests.sizes import examples


def blocks(*spec: tuple[str, int]) -> list[Block]:
    return [Block.of(name, tokens) for name, tokens in spec]


S, A, B, C = ("system", 1100), ("a", 500), ("b", 500), ("c", 300)


# OpenAI's automatic caching --------------------------------------------------------------------


def test_append_only_growth_reads_the_previous_request_in_128_token_steps() -> None:
    cache = PrefixCacheSimulator("openai")
    first = cache.send(blocks(("a", 600), ("b", 600)))
    # Nothing cached yet: 1,200 uncached; the cacheable prefix is 1,200 // 128 * 128 = 1,152.
    assert (first.sent, first.cache_read, first.uncached, first.cache_write) == (1200, 0, 1200, 1152)
    assert first.cost == 1200
    second = cache.send(blocks(("a", 600), ("b", 600), ("c", 300)))
    # 1,200 shared tokens read as 1,152 (9 steps of 128); 348 uncached; 1,408 - 1,152 = 256 newly cached.
    assert (second.sent, second.cache_read, second.uncached, second.cache_write) == (1500, 1152, 348, 256)
    assert second.cost == pytest.approx(348 + 0.1 * 1152)


def test_a_cut_in_the_middle_keeps_only_the_prefix_before_it() -> None:
    cache = PrefixCacheSimulator(OPENAI)
    cache.send(blocks(S, A, B))
    after_cut = cache.send(blocks(S, B, C))
    # Only the 1,100-token system block is shared: 1,024 read; 1,900 - 1,024 = 876 uncached.
    assert (after_cut.cache_read, after_cut.uncached) == (1024, 876)
    assert after_cut.cost == pytest.approx(876 + 102.4)


def test_a_changed_system_message_makes_everything_after_it_uncached() -> None:
    cache = PrefixCacheSimulator(OPENAI)
    cache.send(blocks(("system v1", 2000), ("a", 1000)))
    changed = cache.send(blocks(("system v2", 2000), ("a", 1000)))
    assert (changed.cache_read, changed.uncached, changed.cost) == (0, 3000, 3000)


def test_entries_expire_a_lifetime_after_their_last_use() -> None:
    cache = PrefixCacheSimulator(OPENAI)  # 300-second lifetime
    request = blocks(("a", 2048))
    assert cache.send(request, at=0).cache_read == 0
    assert cache.send(request, at=299).cache_read == 2048  # alive, and used again: lives until 599
    assert cache.send(request, at=598.5).cache_read == 2048  # refreshed: lives until 898.5
    assert cache.send(request, at=898.5).cache_read == 0  # expired exactly at its end


def test_no_lifetime_means_entries_never_expire() -> None:
    cache = PrefixCacheSimulator(PriceProfile("forever", lifetime_seconds=None))
    cache.send(blocks(("a", 2048)), at=0)
    assert cache.send(blocks(("a", 2048)), at=10**9).cache_read == 2048


@pytest.mark.parametrize(("tokens", "read"), [(1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (1279, 1152)])
def test_the_least_cacheable_prefix_and_the_step(tokens: int, read: int) -> None:
    cache = PrefixCacheSimulator(OPENAI)
    cache.send(blocks(("a", tokens)))
    repeat = cache.send(blocks(("a", tokens)))
    assert (repeat.cache_read, repeat.uncached) == (read, tokens - read)


# Anthropic's breakpoints ------------------------------------------------------------------------


def test_breakpoint_at_the_end_writes_the_request_and_the_next_one_reads_it() -> None:
    cache = PrefixCacheSimulator("anthropic")
    first = cache.send(blocks(("s", 1000), A))
    # Written whole at 1.25: 1,500 x 1.25 = 1,875.
    assert (first.cache_read, first.cache_write, first.cost) == (0, 1500, 1875)
    second = cache.send(blocks(("s", 1000), A, C))
    # The previous end is 1 block back (within 20): 1,500 read at 0.1, 300 written at 1.25.
    assert (second.cache_read, second.cache_write, second.uncached) == (1500, 300, 300)
    assert second.cost == pytest.approx(150 + 375)


def test_a_breakpoint_after_the_system_message_survives_a_cut_after_it() -> None:
    cache = PrefixCacheSimulator(ANTHROPIC)
    first = cache.send(blocks(("s", 1200), A), breakpoints=[1, 2])
    assert (first.cache_read, first.cache_write) == (0, 1700)
    cut = cache.send(blocks(("s", 1200), C), breakpoints=[1, 2])
    # The system entry (1,200) is read; the 300 after it are written.
    assert (cut.cache_read, cut.cache_write) == (1200, 300)
    assert cut.cost == pytest.approx(120 + 375)


def test_without_a_breakpoint_there_is_no_entry_to_read() -> None:
    cache = PrefixCacheSimulator(ANTHROPIC)
    cache.send(blocks(("s", 1200), A))  # written only at its end (1,700)
    cut = cache.send(blocks(("s", 1200), C))  # shares the system block, but nothing ends there
    assert (cut.cache_read, cut.cache_write) == (0, 1500)


def test_a_hit_is_looked_for_at_most_twenty_blocks_back() -> None:
    grown = [("s", 2000), *((f"m{n}", 10) for n in range(21))]
    cache = PrefixCacheSimulator(ANTHROPIC)
    cache.send(blocks(grown[0]))
    assert cache.send(blocks(*grown[:21])).cache_read == 2000  # 20 blocks after the entry: found
    cache = PrefixCacheSimulator(ANTHROPIC)
    cache.send(blocks(grown[0]))
    assert cache.send(blocks(*grown)).cache_read == 0  # 21 blocks after it: not found
    unlimited = PrefixCacheSimulator(PriceProfile("far", cache_mode="breakpoints", step_tokens=1, lookback_blocks=None))
    unlimited.send(blocks(grown[0]))
    assert unlimited.send(blocks(*grown)).cache_read == 2000


def test_breakpoints_below_the_least_cacheable_prefix_write_nothing() -> None:
    cache = PrefixCacheSimulator(ANTHROPIC)
    small = cache.send(blocks(("s", 1000)))
    assert (small.cache_write, small.cost) == (0, 1000)
    assert cache.send(blocks(("s", 1000))).cache_read == 0


def test_bad_breakpoints_and_times_are_refused_and_change_nothing() -> None:
    cache = PrefixCacheSimulator(ANTHROPIC)
    request = blocks(*((f"m{n}", 300) for n in range(6)))
    with pytest.raises(ConfigurationError, match="at most 4"):
        cache.send(request, breakpoints=[1, 2, 3, 4, 5])
    with pytest.raises(ConfigurationError, match="between 1 and 6"):
        cache.send(request, breakpoints=[7])
    cache.send(request, at=10)
    with pytest.raises(ConfigurationError, match="time order"):
        cache.send(request, at=5)
    assert len(cache.calls) == 1


# Without a cache, and the profiles themselves ---------------------------------------------------


def test_no_cache_bills_every_input_token_and_the_output() -> None:
    cache = PrefixCacheSimulator(NO_CACHE)
    cache.send(blocks(("a", 5000)), output_tokens=10)
    again = cache.send(blocks(("a", 5000)), output_tokens=10)
    assert (again.cache_read, again.cache_write, again.cost) == (0, 0, 5000 + 4 * 10)


def test_profiles_are_found_by_name_and_checked() -> None:
    assert price_profile("anthropic") is ANTHROPIC
    with pytest.raises(ConfigurationError, match="unknown price profile 'gemini'"):
        price_profile("gemini")
    with pytest.raises(ConfigurationError, match="cache_read_multiplier"):
        PriceProfile("bad", cache_read_multiplier=-0.1)
    with pytest.raises(ConfigurationError, match="step_tokens"):
        PriceProfile("bad", step_tokens=0)
    with pytest.raises(ConfigurationError, match="lifetime_seconds"):
        PriceProfile("bad", lifetime_seconds=math.nan)


# Requests built from messages -------------------------------------------------------------------


def test_request_blocks_are_the_same_for_the_same_message_in_any_request() -> None:
    system, question = Message.system("You answer questions."), Message.user("What is 2+2?")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    one = request_blocks([system, question], tools=tools)
    two = request_blocks([system, question, Message.assistant("4")], tools=[dict(reversed(tools[0].items()))])
    assert one == two[:3]  # the tool list's key order does not matter; each message is its own block
    assert len(two) == 4
    assert two[3] != two[2]
    assert request_blocks([Message.user("What is 2+2!")])[0] != one[2]


def test_a_growing_conversation_sent_whole_reads_almost_everything_from_the_cache() -> None:
    messages = [Message.system("s" * 8000)]
    cache = PrefixCacheSimulator(OPENAI)
    for turn in range(20):
        messages += [Message.user(f"question {turn} " + "q" * 400), Message.assistant(f"answer {turn} " + "a" * 400)]
        cache.send_messages(messages)
    totals = cache.totals()
    assert totals.calls == 20
    assert totals.hit_rate > 0.85
    assert totals.cost < 0.3 * totals.sent


sizes = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 900)), min_size=1, max_size=12)


@settings(max_examples=examples(300), deadline=None)
@given(
    requests=st.lists(sizes, min_size=1, max_size=8),
    profile=st.sampled_from([OPENAI, ANTHROPIC, NO_CACHE]),
    gaps=st.lists(st.floats(0, 400), min_size=8, max_size=8),
)
def test_every_bill_adds_up(requests: list[list[tuple[int, int]]], profile: PriceProfile, gaps: list[float]) -> None:
    cache = PrefixCacheSimulator(profile)
    now = 0.0
    for request, gap in zip(requests, gaps):
        now += gap
        call = cache.send([Block.of(str(name), tokens) for name, tokens in request], at=now, output_tokens=3)
        assert call.sent == call.cache_read + call.uncached == sum(tokens for _, tokens in request)
        assert 0 <= call.cache_write <= call.uncached
        assert call.cache_read == 0 or call.cache_read >= profile.min_cacheable_tokens
        assert call.cache_read % profile.step_tokens == 0
        low = profile.input_price * call.sent * min(1.0, profile.cache_read_multiplier)
        assert call.cost >= low + profile.output_price * 3 - 1e-9
    assert CostTotals.of(cache.calls).sent == sum(call.sent for call in cache.calls)


@settings(max_examples=examples(200), deadline=None)
@given(
    requests=st.lists(sizes, min_size=1, max_size=6),
    profile=st.sampled_from([OPENAI, ANTHROPIC, NO_CACHE]),
)
def test_a_request_sent_as_its_prefixes_costs_what_its_blocks_cost(
    requests: list[list[tuple[int, int]]], profile: PriceProfile
) -> None:
    """What the proxy's estimate replays (the previous request's prefixes, kept) prices as the
    blocks they were made of, and leaves the cache as they would."""
    by_blocks, by_prefixes = PrefixCacheSimulator(profile), PrefixCacheSimulator(profile)
    for number, request in enumerate(requests):
        made = [Block.of(str(name), tokens) for name, tokens in request]
        prefixes = RequestPrefixes.of(made)
        assert len(prefixes.chain) == len(made) + 1
        assert by_blocks.send(made, at=number * 10.0) == by_prefixes.send(prefixes, at=number * 10.0)


def test_prefixes_not_made_of_blocks_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"RequestPrefixes\.of\(blocks\)"):
        RequestPrefixes([0, 5], [b""])
    with pytest.raises(ConfigurationError, match=r"RequestPrefixes\.of\(blocks\)"):
        RequestPrefixes([1], [b""])
    with pytest.raises(ConfigurationError, match="a request is a sequence of Block"):
        RequestPrefixes.of(["not a block"])  # type: ignore[list-item]


def test_a_turn_answering_parallel_calls_is_priced_as_its_results() -> None:
    """An Anthropic user turn answering two parallel tool calls is one tool message holding two
    results, which OpenAI's format writes as two messages: it is priced (its block stable, and
    apart from either result alone) instead of failing the request's accounting."""
    from contextledger.messages import from_anthropic  # noqa: PLC0415

    def conversation(second: str) -> list[Message]:
        uses: list[dict[str, object]] = [
            {"type": "tool_use", "id": i, "name": "lookup", "input": {}} for i in ("toolu_a", "toolu_b")
        ]
        results = [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "first"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": second},
        ]
        return from_anthropic(
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": uses},
                {"role": "user", "content": results},
            ]
        )

    same, again, other = conversation("second"), conversation("second"), conversation("another")
    assert same[-1].role == "tool"
    assert len(same[-1].function_results) == 2
    assert request_blocks(same) == request_blocks(again)
    assert request_blocks(same)[-1] != request_blocks(other)[-1]
    assert request_blocks(same)[:-1] == request_blocks(other)[:-1]
