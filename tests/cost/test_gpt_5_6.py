"""The GPT-5.6 family's cache rules in the estimate, against bills worked out by hand.

Writes at 1.25x, reads at 0.1x, one breakpoint the provider places at the end of every request,
explicit breakpoints beside it (at most four writes in all), no 128-token rounding, no look-back
limit.  The case the family is known for: a stable prefix followed by a message that changes is
never read unless a breakpoint sits at the prefix's end.
"""

from __future__ import annotations

import pytest

from contextledger.cost import GPT_5_6, OPENAI, Block, PrefixCacheSimulator, PriceProfile, price_profile
from contextledger.exceptions import ConfigurationError


def block(name: str, tokens: int) -> Block:
    return Block.of(name, tokens)


PREFIX = block("instructions", 9000)


def test_the_profile_is_found_by_name_beside_the_earlier_one() -> None:
    assert price_profile("gpt-5.6") is GPT_5_6
    assert price_profile("openai") is OPENAI
    assert (GPT_5_6.cache_write_multiplier, GPT_5_6.cache_read_multiplier, GPT_5_6.step_tokens) == (1.25, 0.1, 1)
    assert GPT_5_6.managed_breakpoint
    assert GPT_5_6.lookback_blocks is None
    assert OPENAI.cache_write_multiplier == 1.0
    assert not OPENAI.managed_breakpoint


def test_a_stable_prefix_with_a_changing_last_message_is_never_read_without_a_breakpoint() -> None:
    cache = PrefixCacheSimulator("gpt-5.6")
    for n in range(3):
        call = cache.send([PREFIX, block(f"question {n}", 50)])
        # Only the provider's breakpoint, at the end: 9,050 written at 1.25x every time.
        assert (call.cache_read, call.cache_write) == (0, 9050)
        assert call.cost == pytest.approx(9050 * 1.25)


def test_an_explicit_breakpoint_at_the_prefix_end_is_read_from_the_second_request() -> None:
    cache = PrefixCacheSimulator("gpt-5.6")
    first = cache.send([PREFIX, block("question 0", 50)], breakpoints=[1])
    assert (first.cache_read, first.cache_write) == (0, 9050)
    second = cache.send([PREFIX, block("question 1", 50)], breakpoints=[1])
    # 9,000 read at 0.1x; the 50 new tokens written at 1.25x (the provider's breakpoint).
    assert (second.cache_read, second.cache_write, second.uncached) == (9000, 50, 50)
    assert second.cost == pytest.approx(900 + 62.5)


def test_a_growing_conversation_reads_the_previous_request_whole_with_no_rounding() -> None:
    cache = PrefixCacheSimulator("gpt-5.6")
    cache.send([block("s", 1100), block("u", 7)])
    call = cache.send([block("s", 1100), block("u", 7), block("a", 3), block("t", 5)])
    assert (call.cache_read, call.cache_write) == (1107, 8)  # 1,107, not 1,024 (no 128-token steps)


def test_an_entry_far_back_is_still_read() -> None:
    cache = PrefixCacheSimulator("gpt-5.6")
    cache.send([PREFIX, block("u", 10)], breakpoints=[1])
    grown = [PREFIX, *(block(f"m{n}", 10) for n in range(60))]
    call = cache.send(grown)
    assert call.cache_read == 9000  # sixty blocks back: no look-back limit


def test_at_most_four_writes_the_providers_own_breakpoint_among_them() -> None:
    cache = PrefixCacheSimulator("gpt-5.6")
    request = [block(f"b{n}", 400) for n in range(6)]
    cache.send(request, breakpoints=[2, 3, 4])  # three marks and the provider's: four writes
    cache.send(request, breakpoints=[2, 3, 4, 6])  # the end marked too: still four
    with pytest.raises(ConfigurationError, match="at most 3 besides it"):
        cache.send(request, breakpoints=[1, 2, 3, 4])
    assert len(cache.calls) == 2  # the refused request changed nothing


def test_a_managed_breakpoint_needs_breakpoint_caching() -> None:
    with pytest.raises(ConfigurationError, match="managed_breakpoint"):
        PriceProfile("x", managed_breakpoint=True)


def test_a_breakpoint_inside_what_was_read_keeps_an_entry_there() -> None:
    cache = PrefixCacheSimulator("gpt-5.6")
    grown = [PREFIX, block("a", 500), block("b", 500), block("c", 500)]
    cache.send(grown)  # written whole, at its end
    again = cache.send([*grown, block("d", 50)], breakpoints=[2])  # reads all four; marks after "a"
    assert (again.cache_read, again.cache_write) == (10500, 50)  # the mark inside the read writes nothing
    branch = cache.send([PREFIX, block("a", 500), block("other", 50)])
    assert branch.cache_read == 9500  # and a request that parts after "a" reads up to it
