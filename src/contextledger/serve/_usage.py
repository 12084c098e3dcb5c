"""What the proxy's traffic cost: the upstream's own usage figures, beside the prefix-cache estimate.

Tokens sent are not what a user pays for once the provider caches request prefixes (design.md#cost),
so for every request the upstream answered the proxy counts two things on ``/metrics``:

- what the upstream reported (``contextledger_upstream_*``): input tokens (every token sent),
  of which read from its cache, written to it, and not read from it, plus output tokens, read
  from the reply's ``usage`` in any vendor's shape (:func:`~contextledger.clients.read_usage`),
  streamed or not.  A streamed request that did not ask for usage is sent upstream with
  ``stream_options.include_usage`` so the upstream reports it, and the extra usage chunk is not
  passed on to the client, which sees the stream it asked for;
- what the upstream billed for compacting the conversation on its own servers
  (``contextledger_upstream_compactions_total`` and ``contextledger_upstream_compaction_*``):
  Anthropic's ``usage.iterations`` of type ``compaction``, billed on top of the counts above, and
  the compaction items a Responses reply returned (OpenAI counts their tokens in the reply's
  own usage, so only the passes are counted apart);
- what :class:`~contextledger.cost.PrefixCacheSimulator` predicts under the configured price
  profile (``contextledger_estimated_*``, labelled estimates).  To price a request's prefix it
  needs the request before it in the same conversation: the proxy keeps, per conversation (a
  session, or a stateless conversation known by its start: tools, system messages and first
  user message, and the model), the previous request's blocks as 24 bytes each (a digest and a
  token count).  Those are bounded twice, by conversations and by bytes, the least recently used
  going first, so no client can make them grow; a conversation that was dropped is priced as a
  first request.  Token counts come from the tokenizer's memo on each message, which compaction
  has already filled: nothing is tokenised twice.  A message's block (its serialisation's digest)
  is remembered too, by message identity (the proxy's reader hands back the same message for the
  same JSON), up to :data:`BLOCKS_BYTES_KEPT` of serialisations: a stateless client's repeated
  history is serialised once, not on every request (on a 201-message history the estimate takes
  0.7 ms a request with this memo, 1.7 ms without).

The estimate replays only the conversation's previous request, not every request the provider
has seen, so it cannot predict a hit on a prefix shared between conversations.
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contextledger.clients import Usage, read_reply_usage, read_usage
from contextledger.cost import Block, CallCost, PrefixCacheSimulator, PriceProfile, RequestPrefixes, request_blocks
from contextledger.cost._simulator import message_block
from contextledger.messages import Message
from contextledger.serve._metrics import Metrics
from contextledger.tokenizers import Tokenizer

if TYPE_CHECKING:
    from starlette.background import BackgroundTask

__all__ = [
    "BLOCKS_BYTES_KEPT",
    "CONVERSATIONS_KEPT",
    "PREFIX_BYTES_KEPT",
    "CostMeter",
    "Expected",
    "with_usage_requested",
]

CONVERSATIONS_KEPT = 10_000
"""The most conversations whose previous request the estimate remembers."""

PREFIX_BYTES_KEPT = 16 * 1024 * 1024
"""The most memory those previous requests may hold (24 bytes a block, plus a little per conversation)."""

BLOCKS_BYTES_KEPT = 8 * 1024 * 1024
"""The most serialised bytes of the messages whose blocks are remembered (it holds those messages)."""

_ENTRY_BYTES = 200  # the key, the tuple and the two buffers' headers, roughly
_DIGEST_BYTES = 16


def with_usage_requested(payload: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A streamed request asking for usage in its last chunk, and whether the client had not asked
    (the proxy then keeps that chunk to itself)."""
    if payload.get("stream") is not True:
        return payload, False
    options = payload.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return payload, False
    options = dict(options) if isinstance(options, dict) else {}
    return {**payload, "stream_options": {**options, "include_usage": True}}, True


@dataclass(frozen=True, slots=True)
class Expected:
    """A request on its way upstream, as the estimate will price it once the upstream answers."""

    mode: str
    conversation: bytes
    blocks: tuple[Block, ...]


@dataclass(slots=True)
class _Previous:
    """A conversation's previous request as the cache read it: its prefixes' chained digests and
    running token sums (entry 0, the empty prefix, left out), kept packed."""

    chain: bytes
    cumulative: array[int]
    at: float

    @property
    def size(self) -> int:
        return len(self.chain) + self.cumulative.itemsize * len(self.cumulative) + _ENTRY_BYTES

    @classmethod
    def of(cls, prefixes: RequestPrefixes, at: float) -> _Previous:
        return cls(b"".join(prefixes.chain), array("q", prefixes.cumulative[1:]), at)

    def prefixes(self) -> RequestPrefixes:
        step, chain = _DIGEST_BYTES, self.chain
        return RequestPrefixes([0, *self.cumulative], [b"", *(chain[i : i + step] for i in range(0, len(chain), step))])


class CostMeter:
    """Counts each answered request's reported usage and its estimate on the proxy's metrics."""

    def __init__(
        self,
        metrics: Metrics,
        profile: PriceProfile,
        tokenizer: Tokenizer,
        *,
        conversations: int = CONVERSATIONS_KEPT,
        held_bytes: int = PREFIX_BYTES_KEPT,
        block_bytes: int = BLOCKS_BYTES_KEPT,
    ) -> None:
        self.metrics = metrics
        self.profile = profile
        self.tokenizer = tokenizer
        self.conversations = conversations
        self.held_bytes_limit = held_bytes
        self._previous: OrderedDict[bytes, _Previous] = OrderedDict()
        self._held = 0
        self.block_bytes_limit = block_bytes
        self._blocks: OrderedDict[int, tuple[Message, Block, int]] = OrderedDict()
        self._blocks_held = 0
        reported, estimated = ("mode",), ("mode", "profile")
        self._reported = {
            part: metrics.counter(f"contextledger_upstream_{part}_tokens_total", text, reported)
            for part, text in (
                ("input", "Input tokens the upstream reported (every token sent, cache reads and writes included)."),
                ("cache_read", "Input tokens the upstream reported reading from its prompt cache."),
                ("cache_write", "Input tokens the upstream reported writing to its prompt cache."),
                ("uncached_input", "Input tokens the upstream reported not reading from its cache."),
                ("output", "Output tokens the upstream reported."),
            )
        }
        self._compaction = {
            part: metrics.counter(f"contextledger_upstream_{part}_total", text, reported)
            for part, text in (
                (
                    "compactions",
                    "Times the upstream compacted the conversation on its own servers (its own compaction).",
                ),
                (
                    "compaction_input_tokens",
                    "Input tokens the upstream billed for its own compaction, apart from the request's input.",
                ),
                (
                    "compaction_output_tokens",
                    "Output tokens (the summary) the upstream billed for its own compaction, apart from the request's.",
                ),
            )
        }
        self._reports = metrics.counter(
            "contextledger_upstream_usage_reports_total",
            "Upstream answers by what their usage held: cache figures, token counts only, or nothing usable.",
            ("mode", "reported"),
        )
        self._estimated = {
            part: metrics.counter(f"contextledger_estimated_{part}_total", text, estimated)
            for part, text in (
                ("input_tokens", "Estimated input tokens sent (the proxy's tokenizer)."),
                ("cache_read_tokens", "Estimated input tokens read from the provider's cache (prefix-cache estimate)."),
                ("cache_write_tokens", "Estimated input tokens written to the provider's cache (estimate)."),
                ("uncached_input_tokens", "Estimated input tokens not read from the provider's cache (estimate)."),
                ("cost", "Estimated cost under the price profile, in uncached input tokens' worth."),
            )
        }

    @property
    def held_bytes(self) -> int:
        """The memory the remembered previous requests hold, as counted against the limit."""
        return self._held

    def expect(
        self, mode: str, payload: Mapping[str, Any], messages: Sequence[Message], session: str | None = None
    ) -> Expected:
        """The request about to be sent (``messages`` as they go upstream, with the payload's tools);
        ``session`` names its conversation in session mode."""
        tools = payload.get("tools")
        if not (isinstance(tools, list) and all(isinstance(tool, dict) for tool in tools)):
            tools = None
        blocks = (*(request_blocks((), tokenizer=self.tokenizer, tools=tools) if tools else ()), *self._made(messages))
        hasher = hashlib.blake2b(repr(payload.get("model")).encode("utf-8", "replace"), digest_size=_DIGEST_BYTES)
        if session is not None:
            hasher.update(b"\0session\0" + session.encode("utf-8", "replace"))
        else:
            first_user = next((i for i, message in enumerate(messages) if message.role == "user"), len(messages) - 1)
            for block in blocks[: first_user + 1 + (1 if tools else 0)]:
                hasher.update(block.digest)
        return Expected(mode, hasher.digest(), blocks)

    def _made(self, messages: Sequence[Message]) -> list[Block]:
        """Each message's block, from the memo when the same message was sent before."""
        made: list[Block] = []
        remembered = self._blocks
        for message in messages:
            entry = remembered.pop(id(message), None)
            if entry is None or entry[0] is not message:
                if entry is not None:
                    self._blocks_held -= entry[2]
                block, length = message_block(message, self.tokenizer.count_message(message))
                entry = (message, block, length + _ENTRY_BYTES)
                self._blocks_held += entry[2]
            remembered[id(message)] = entry  # now the most recently used
            made.append(entry[1])
        while self._blocks_held > self.block_bytes_limit:
            self._blocks_held -= remembered.popitem(last=False)[1][2]
        return made

    def after_answer(
        self,
        mode: str,
        payload: Mapping[str, Any],
        messages: Sequence[Message],
        raw_usage: object,
        session: str | None = None,
        *,
        reply: Mapping[str, Any] | None = None,
    ) -> BackgroundTask:
        """:meth:`expect` and :meth:`answered` for a whole answer, run once the answer has been
        sent: the estimate is for the metrics, not the client, and it is a good part of the
        proxy's own work on a request, so the client does not wait for it.  (``payload`` and
        ``messages`` are not changed after the request, so they are read as they were sent.)"""

        from starlette.background import BackgroundTask  # noqa: PLC0415  (the meter itself needs no extra)

        async def count() -> None:
            self.answered(self.expect(mode, payload, messages, session), raw_usage, reply=reply)

        return BackgroundTask(count)

    def answered(
        self, expected: Expected, raw_usage: object, *, reply: Mapping[str, Any] | None = None
    ) -> Usage | None:
        """Count what the upstream reported for ``expected`` and what the estimate predicted;
        ``reply``, the whole answer when there is one, shows the compaction items it returned."""
        usage = read_reply_usage(reply) if isinstance(reply, Mapping) else read_usage(raw_usage)
        mode = expected.mode
        count = self.metrics.count
        if usage is not None and usage.compactions:
            count(self._compaction["compactions"], mode, amount=usage.compactions)
            if usage.compaction is not None:
                for part, value in (
                    ("compaction_input_tokens", usage.compaction.input_tokens),
                    ("compaction_output_tokens", usage.compaction.output_tokens),
                ):
                    if value:
                        count(self._compaction[part], mode, amount=value)
        if usage is None or usage.input_tokens is None:
            count(self._reports, mode, "none")
        else:
            count(self._reports, mode, "cache" if usage.cache_read_tokens is not None else "tokens")
            for part, value in (
                ("input", usage.input_tokens),
                ("cache_read", usage.cache_read_tokens),
                ("cache_write", usage.cache_write_tokens),
                ("uncached_input", usage.uncached_input_tokens),
                ("output", usage.output_tokens),
            ):
                if value is not None:
                    count(self._reported[part], mode, amount=value)
        output = usage.output_tokens if usage is not None and usage.output_tokens is not None else 0
        call = self._predict(expected, output)
        labels = (mode, self.profile.name)
        for part, amount in (
            ("input_tokens", call.sent),
            ("cache_read_tokens", call.cache_read),
            ("cache_write_tokens", call.cache_write),
            ("uncached_input_tokens", call.uncached),
            ("cost", call.cost),
        ):
            count(self._estimated[part], *labels, amount=amount)
        return usage

    def _predict(self, expected: Expected, output: int) -> CallCost:
        simulator = PrefixCacheSimulator(self.profile)
        now = time.monotonic()
        if self.profile.cache_mode == "none":
            return simulator.send(expected.blocks, output_tokens=output, at=now)
        previous = self._previous.pop(expected.conversation, None)
        if previous is not None:
            self._held -= previous.size
            simulator.send(previous.prefixes(), at=previous.at)  # hashed when it was sent: not again
            now = max(now, previous.at)
        prefixes = RequestPrefixes.of(expected.blocks)
        call = simulator.send(prefixes, output_tokens=output, at=now)
        kept = _Previous.of(prefixes, now)
        if kept.size <= self.held_bytes_limit:
            self._previous[expected.conversation] = kept
            self._held += kept.size
            while self._held > self.held_bytes_limit or len(self._previous) > self.conversations:
                self._held -= self._previous.popitem(last=False)[1].size
        return call
