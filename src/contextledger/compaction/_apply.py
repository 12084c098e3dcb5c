"""Running a strategy on a plain message list, without an agent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from contextledger._tracing import traced_compaction
from contextledger.compaction._base import CompactionStrategy
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._table import CompactionEvent
from contextledger.exceptions import ConfigurationError, InvalidMessageError
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer, OpenAITokenizer, Tokenizer

__all__ = [
    "CompactionResult",
    "apply_compaction",
    "apply_compaction_sync",
    "compact_with_report",
    "resolve_tokenizer",
]


@dataclass(frozen=True, slots=True, repr=False)
class CompactionResult:
    """The projection and how it was reached: before/after metrics and every step taken."""

    messages: list[Message]
    index: MessageIndex
    before: dict[str, int]
    after: dict[str, int]
    events: list[CompactionEvent] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.events)

    def __repr__(self) -> str:
        # Short on purpose: asyncio formats a finished task's result, and a full dump of a
        # long history here would cost more than the compaction itself.
        return (
            f"CompactionResult(messages={len(self.messages)}, "
            f"tokens={self.before['included_tokens']}->{self.after['included_tokens']}, events={len(self.events)})"
        )


_OWN_TOKENIZERS = frozenset({CharacterEstimatorTokenizer, OpenAITokenizer})


def resolve_tokenizer(strategy: CompactionStrategy | None, tokenizer: Tokenizer | None) -> Tokenizer:
    """The tokenizer to index with: the one given, else the strategy's, else the estimate.

    A strategy built with a tokenizer measures its thresholds in that
    tokenizer's units, so counting the index with a different vocabulary would
    silently compare apples with pears: that is rejected.
    """
    declared = list(strategy.tokenizers) if strategy is not None else []
    chosen = tokenizer if tokenizer is not None else (declared[0] if declared else CharacterEstimatorTokenizer())
    # The library's own tokenizers are known to qualify; the protocol's check reads every member
    # and costs more than grouping a short history.
    if type(chosen) not in _OWN_TOKENIZERS and not isinstance(chosen, Tokenizer):
        raise ConfigurationError(f"tokenizer must implement the Tokenizer protocol, got {chosen!r}")
    for other in declared:
        if other.name != chosen.name:
            raise ConfigurationError(
                f"the strategy counts with tokenizer {other.name!r} but compaction runs with {chosen.name!r}; "
                "pass the same tokenizer to both"
            )
    return chosen


def _check_messages(messages: Sequence[Message]) -> list[Message]:
    # Each item's type is checked as the index takes it in; here only the container.
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(f"messages must be a list of Message objects, got {type(messages).__name__}")
    return messages if isinstance(messages, list) else list(messages)


@traced_compaction
async def compact_with_report(
    messages: Sequence[Message],
    *,
    strategy: CompactionStrategy | None,
    tokenizer: Tokenizer | None = None,
) -> CompactionResult:
    """Index ``messages``, apply ``strategy``, and return the projection with a report.

    The input list and its messages are never modified.
    """
    items = _check_messages(messages)
    if strategy is not None and not isinstance(strategy, CompactionStrategy):
        raise ConfigurationError(f"strategy must be a CompactionStrategy, got {strategy!r}")
    index = MessageIndex(items, tokenizer=resolve_tokenizer(strategy, tokenizer))
    before = index.metrics()
    if strategy is not None:
        await strategy.compact(index)
    return CompactionResult(index.projection(), index, before, index.metrics(), list(index.events))


async def apply_compaction(
    messages: Sequence[Message],
    *,
    strategy: CompactionStrategy | None,
    tokenizer: Tokenizer | None = None,
) -> list[Message]:
    """Return the messages ``strategy`` would send, leaving ``messages`` untouched."""
    return (await compact_with_report(messages, strategy=strategy, tokenizer=tokenizer)).messages


def apply_compaction_sync(
    messages: Sequence[Message],
    *,
    strategy: CompactionStrategy | None,
    tokenizer: Tokenizer | None = None,
) -> list[Message]:
    """:func:`apply_compaction` for scripts with no event loop running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(apply_compaction(messages, strategy=strategy, tokenizer=tokenizer))
    raise RuntimeError("apply_compaction_sync was called inside a running event loop; await apply_compaction instead")
