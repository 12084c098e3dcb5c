"""An estimate of what a sequence of requests costs once the provider's prefix cache is counted.

Providers bill the part of a request that repeats the start of an earlier one at a fraction of
the input price, so what a compaction policy costs depends on whether it keeps the start of its
requests the same from one call to the next, not only on how much it sends.  This module replays
the requests of a conversation, as the provider would see them, through a model of that cache.

The model, and what it assumes (it is an estimate, labelled so wherever it is shown):

- A request is a sequence of blocks (the tool list, then each message), each serialised
  deterministically; two blocks are the same when their serialisations are byte for byte equal.
  A prefix is matched block by block, so a request that differs from an earlier one inside a
  block is counted as sharing nothing from that block on (the provider may match a few tokens
  more: the estimate errs towards paying).
- ``automatic`` caching (OpenAI): every request's prefix is cached once it is at least
  ``min_cacheable_tokens`` long; a hit is the longest cached prefix, counted down to a multiple of
  ``step_tokens``.
- ``breakpoints`` caching (Anthropic): only prefixes ending at a breakpoint are written (the end
  of the request unless the caller says otherwise, at most ``max_breakpoints``); a request reads
  the longest live entry ending at one of its breakpoints or up to ``lookback_blocks`` blocks
  before one; the tokens between that hit and the last breakpoint are written, at the write price.
- ``breakpoints`` caching with a ``managed_breakpoint`` (OpenAI from GPT-5.6): the same, with the
  provider's own breakpoint at the end of every request added to those the request marks (together
  at most ``max_breakpoints`` writes); the profile looks back without limit, and a breakpoint
  inside the prefix a request read keeps an entry there too (the provider matches any breakpoint
  the conversation placed; its tokens were cached already, so nothing is written).
- An entry lives ``lifetime_seconds`` after it was last written or read.  Calls without a time
  happen at the time of the call before them (so nothing expires).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextledger.cost._profiles import PriceProfile, price_profile
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.messages import Message
from contextledger.messages._openai import message_to_openai
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = [
    "Block",
    "BlockMemo",
    "CallCost",
    "CostTotals",
    "PrefixCacheSimulator",
    "RequestPrefixes",
    "message_block",
    "request_blocks",
]

_DIGEST_SIZE = 16


@dataclass(frozen=True, slots=True)
class Block:
    """One unit of a request as the provider caches it: its serialisation's digest and its tokens."""

    digest: bytes
    tokens: int

    @classmethod
    def of(cls, serialised: str | bytes, tokens: int) -> Block:
        data = serialised.encode("utf-8") if isinstance(serialised, str) else serialised
        return cls(hashlib.blake2b(data, digest_size=_DIGEST_SIZE).digest(), tokens)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _wire(message: Message) -> Any:
    """The message as OpenAI's format writes it, which stands for what any provider caches; a
    message that format writes as several (an Anthropic user turn answering parallel tool calls
    holds several results) as the list of them."""
    try:
        return message_to_openai(message)
    except InvalidMessageError:
        parts: list[Any] = []
        for content in message.contents:
            try:
                parts.append(message_to_openai(Message(message.role, (content,))))
            except InvalidMessageError:
                parts.append(repr(content))  # still stable: contents are frozen values
        return parts


def message_block(message: Message, tokens: int) -> tuple[Block, int]:
    """One message's block (its serialisation as :func:`request_blocks` makes it), and that
    serialisation's length, for a caller that keeps blocks and must know what they hold."""
    serialised = _canonical(_wire(message))
    return Block.of(serialised, tokens), len(serialised)


BlockMemo = dict[int, tuple[Message, Block]]
"""Blocks already built, by message identity (the message is kept so its id cannot be reused)."""


def request_blocks(
    messages: Sequence[Message],
    *,
    tokenizer: Tokenizer | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    memo: BlockMemo | None = None,
) -> tuple[Block, ...]:
    """The blocks of a chat request: the tool list (if any) as one block, then each message.

    Each message is serialised as the OpenAI dict it is sent as, keys sorted, so the same message
    gives the same block in every request.  Tokens come from ``tokenizer`` (the character
    estimate by default): the whole message, framing and tool calls included.  A ``memo`` shared
    by the requests of one conversation serialises each message once, however often it is sent.
    """
    counter = tokenizer or CharacterEstimatorTokenizer()
    blocks: list[Block] = []
    if tools:
        serialised = _canonical(list(tools))
        blocks.append(Block.of(serialised, counter.count_text(serialised)))
    known = memo if memo is not None else {}
    fresh = [message for message in messages if known.get(id(message), (None,))[0] is not message]
    if fresh:
        for message, tokens in zip(fresh, counter.count_messages(fresh)):
            known[id(message)] = (message, message_block(message, tokens)[0])
    blocks.extend(known[id(message)][1] for message in messages)
    return tuple(blocks)


@dataclass(frozen=True, slots=True)
class CallCost:
    """What one request cost under a profile (an estimate).

    ``sent`` input tokens, of which ``cache_read`` came from the cache and ``uncached`` did not
    (``sent = cache_read + uncached``); ``cache_write`` of the uncached tokens were written to the
    cache (billed at the write price where the profile charges one).  ``cost`` is in the profile's
    price units, output included.
    """

    sent: int
    cache_read: int
    cache_write: int
    uncached: int
    output: int
    cost: float
    at: float


@dataclass(frozen=True, slots=True)
class CostTotals:
    """The sums over several calls, and the share of input tokens read from the cache."""

    calls: int
    sent: int
    cache_read: int
    cache_write: int
    uncached: int
    output: int
    cost: float

    @property
    def hit_rate(self) -> float:
        return self.cache_read / self.sent if self.sent else 0.0

    @classmethod
    def of(cls, calls: Iterable[CallCost]) -> CostTotals:
        listed = list(calls)
        return cls(
            calls=len(listed),
            sent=sum(call.sent for call in listed),
            cache_read=sum(call.cache_read for call in listed),
            cache_write=sum(call.cache_write for call in listed),
            uncached=sum(call.uncached for call in listed),
            output=sum(call.output for call in listed),
            cost=math.fsum(call.cost for call in listed),
        )


class PrefixCacheSimulator:
    """A provider's prompt cache, replayed: send requests in order, read what each one cost.

    One simulator stands for one cache (one provider account and model); send the requests of
    every conversation that shares it.  The entries it holds grow with the distinct prefixes sent
    and are dropped once expired.
    """

    def __init__(self, profile: PriceProfile | str = "openai") -> None:
        self.profile = price_profile(profile)
        self.calls: list[CallCost] = []
        self._entries: dict[bytes, float] = {}
        self._now = 0.0
        self._since_prune = 0

    def send(
        self,
        blocks: Sequence[Block] | RequestPrefixes,
        *,
        output_tokens: int = 0,
        at: float | None = None,
        breakpoints: Sequence[int] | None = None,
    ) -> CallCost:
        """Price one request and update the cache as the provider would after serving it.

        ``blocks`` is the request, or its :class:`RequestPrefixes` (made once, for a request
        sent again).  ``at`` is the call's time in seconds (on any clock, never going back);
        ``breakpoints`` are block counts (a breakpoint after the first ``b`` blocks) for a
        ``breakpoints`` profile, the end of the request by default.
        """
        profile = self.profile
        now = self._advance(at)
        if output_tokens < 0:
            raise ConfigurationError(f"output_tokens must be >= 0, got {output_tokens!r}")
        prefixes = blocks if isinstance(blocks, RequestPrefixes) else RequestPrefixes.of(blocks)
        cumulative, chain = prefixes.cumulative, prefixes.chain
        sent = cumulative[-1]
        read = written = 0
        if profile.cache_mode == "automatic":
            read, written = self._automatic(cumulative, chain, now)
        elif profile.cache_mode == "breakpoints":
            marks = _checked_breakpoints(
                breakpoints, len(chain) - 1, profile.max_breakpoints, managed=profile.managed_breakpoint
            )
            read, written = self._breakpoints(cumulative, chain, marks, now)
        uncached = sent - read
        cost = (
            profile.input_price
            * ((uncached - written) + written * profile.cache_write_multiplier + read * profile.cache_read_multiplier)
            + profile.output_price * output_tokens
        )
        call = CallCost(sent, read, written, uncached, output_tokens, cost, now)
        self.calls.append(call)
        self._prune(now)
        return call

    def send_messages(
        self,
        messages: Sequence[Message],
        *,
        tokenizer: Tokenizer | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        output_tokens: int = 0,
        at: float | None = None,
    ) -> CallCost:
        """:meth:`send` for a chat request given as messages (see :func:`request_blocks`)."""
        return self.send(request_blocks(messages, tokenizer=tokenizer, tools=tools), output_tokens=output_tokens, at=at)

    def totals(self) -> CostTotals:
        return CostTotals.of(self.calls)

    # The two cache rules ---------------------------------------------------------------------

    def _alive(self, key: bytes, now: float) -> bool:
        expires = self._entries.get(key)
        return expires is not None and expires > now

    def _expiry(self, now: float) -> float:
        lifetime = self.profile.lifetime_seconds
        return math.inf if lifetime is None else now + lifetime

    def _automatic(self, cumulative: Sequence[int], chain: Sequence[bytes], now: float) -> tuple[int, int]:
        profile = self.profile
        least, step = profile.min_cacheable_tokens, profile.step_tokens
        matched = 0
        for position in range(len(chain) - 1, 0, -1):
            if self._alive(chain[position], now):
                matched = cumulative[position]
                break
        read = matched // step * step if matched >= least else 0
        sent = cumulative[-1]
        cacheable = sent // step * step if sent >= least else 0
        expires = self._expiry(now)
        entries = self._entries
        for position in range(1, len(chain)):
            if cumulative[position] >= least:
                entries[chain[position]] = expires
        return read, max(0, cacheable - read)

    def _breakpoints(
        self, cumulative: Sequence[int], chain: Sequence[bytes], marks: list[int], now: float
    ) -> tuple[int, int]:
        profile = self.profile
        least, lookback = profile.min_cacheable_tokens, profile.lookback_blocks
        hit = 0
        for mark in marks:
            lowest = 1 if lookback is None else max(1, mark - lookback)
            for position in range(mark, lowest - 1, -1):
                if position <= hit:
                    break
                if self._alive(chain[position], now):
                    hit = position
                    break
        read = cumulative[hit] if cumulative[hit] >= least else 0
        expires = self._expiry(now)
        if hit:
            self._entries[chain[hit]] = expires  # a read refreshes the entry it used
        written_to = 0
        for mark in marks:
            if cumulative[mark] >= least and mark > hit:
                self._entries[chain[mark]] = expires
                written_to = max(written_to, cumulative[mark])
            elif mark <= hit and (profile.managed_breakpoint or self._alive(chain[mark], now)):
                # Within what was read: no token is written, but a provider that matches any of
                # the conversation's breakpoints (OpenAI's rule) keeps an entry there from now on.
                self._entries[chain[mark]] = expires
        return read, max(0, written_to - read)

    # Bookkeeping ------------------------------------------------------------------------------

    def _advance(self, at: float | None) -> float:
        if at is None:
            return self._now
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
            raise ConfigurationError(f"a call's time must be a finite number of seconds, got {at!r}")
        if at < self._now:
            raise ConfigurationError(
                f"calls must be sent in time order: {at!r} is before the previous call at {self._now!r}"
            )
        self._now = float(at)
        return self._now

    def _prune(self, now: float) -> None:
        self._since_prune += 1
        if self._since_prune < 256 or self.profile.lifetime_seconds is None:
            return
        self._since_prune = 0
        self._entries = {key: expires for key, expires in self._entries.items() if expires > now}


@dataclass(frozen=True, slots=True)
class RequestPrefixes:
    """A request as the cache reads it: the running token sums and the chained digests of its
    prefixes (entry ``i`` stands for the first ``i`` blocks, entry 0 for none).

    :meth:`PrefixCacheSimulator.send` makes them from the blocks; a caller that replays a request
    it sent before (the proxy's estimate warms a fresh cache with the conversation's previous
    request) keeps these instead of the blocks, and hashes each prefix once rather than on every
    replay.
    """

    cumulative: Sequence[int]
    chain: Sequence[bytes]

    def __post_init__(self) -> None:
        if len(self.cumulative) != len(self.chain) or not self.chain or self.cumulative[0] != 0 or self.chain[0]:
            raise ConfigurationError(
                "RequestPrefixes holds one running token sum and one digest per prefix, the empty prefix "
                "first (0 and b''); make them with RequestPrefixes.of(blocks)"
            )

    @classmethod
    def of(cls, blocks: Sequence[Block]) -> RequestPrefixes:
        cumulative = [0]
        chain = [b""]
        total = 0
        previous = b""
        blake2b = hashlib.blake2b
        for block in blocks:
            if type(block) is not Block and not isinstance(block, Block):
                raise ConfigurationError(
                    f"a request is a sequence of Block, got {block!r}; build one with request_blocks"
                )
            if block.tokens < 0:
                raise ConfigurationError(f"a block cannot have {block.tokens} tokens")
            total += block.tokens
            previous = blake2b(previous + block.digest, digest_size=_DIGEST_SIZE).digest()
            cumulative.append(total)
            chain.append(previous)
        return cls(cumulative, chain)


def _checked_breakpoints(
    breakpoints: Sequence[int] | None, count: int, most: int, *, managed: bool = False
) -> list[int]:
    """The request's breakpoints, checked; with a ``managed`` breakpoint, the provider's own at the
    end of the request joins them and counts among the ``most`` writes."""
    if breakpoints is None:
        return [count] if count else []
    marks = sorted(set(breakpoints))
    if managed and count and count not in marks:
        if len(marks) >= most:
            raise ConfigurationError(
                f"a request may make at most {most} cache writes and the provider's own breakpoint is one of "
                f"them: mark at most {most - 1} besides it, got {len(marks)}"
            )
    elif len(marks) > most:
        raise ConfigurationError(f"a request may mark at most {most} cache breakpoints, got {len(marks)}")
    for mark in marks:
        if not isinstance(mark, int) or isinstance(mark, bool) or not 1 <= mark <= count:
            raise ConfigurationError(
                f"a breakpoint is a block count between 1 and {count} (the request's length), got {mark!r}"
            )
    if managed and count and count not in marks:
        marks.append(count)
    return marks
