"""Provider compaction: older groups replaced by the item a provider's own compaction returns.

OpenAI's ``POST /responses/compact`` and Anthropic's ``compact_20260112`` context edit each turn a
conversation into an item of their own (OpenAI's opaque ``compaction`` item, Anthropic's
``compaction`` block) that the provider reads in place of everything before it.  This strategy
chooses what to compact exactly as :class:`SummarizationStrategy` chooses what to summarise, asks a
:class:`~contextledger.clients.ProviderCompactor` for the item, and puts what the provider returned
where the compacted groups were, byte for byte: the summary group is the provider's own, never text
of ours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Literal

from contextledger.clients import ChatResponse, ProviderCompaction, ProviderCompactor
from contextledger.compaction._base import SYSTEM
from contextledger.compaction._boundary import PROVIDER_COMPACTION_REASON
from contextledger.compaction._index import MessageIndex
from contextledger.compaction._summarization import SummarizationStrategy
from contextledger.compaction._summary_cache import SummaryCache, summarizer_identity, summary_key
from contextledger.compaction._table import CompactionEvent, GroupKind
from contextledger.compaction._triggers import Trigger
from contextledger.exceptions import CompactionError, ConfigurationError, TranscriptError
from contextledger.messages import Message, dump_jsonl, load_jsonl
from contextledger.tokenizers import Tokenizer

__all__ = ["PROVIDER_COMPACTION_ORIGIN", "ProviderCompactionStrategy"]

logger = logging.getLogger("contextledger.compaction")

PROVIDER_COMPACTION_ORIGIN = "provider_compaction"
"""The ``origin`` of the groups this strategy inserts (what the provider returned)."""

_COMPACTED = "compacted by the provider"

# What names the provider's own prompt in a cache key when no instructions replace it.
_PROVIDER_PROMPT = "(the provider's own compaction prompt)"


class _ProviderWrites:
    """Stands in for the chat model :class:`SummarizationStrategy` would ask: here the provider
    writes the summary (see :meth:`ProviderCompactionStrategy._run`), so no chat model is called."""

    async def get_response(self, messages: Sequence[Message], **options: object) -> ChatResponse:
        raise CompactionError("ProviderCompactionStrategy asks its provider compactor, never a chat model")


def _holds_item(message: Message) -> bool:
    return message.is_provider_compaction


class ProviderCompactionStrategy(SummarizationStrategy):
    """Replace older groups with the compaction item a provider returns for them.

    What is compacted is chosen as :class:`SummarizationStrategy` chooses what to summarise (both
    argument styles: ``trigger``/``minimum_preserved``/``target`` or
    ``target_count``/``threshold``; a call and its results are never split).  The provider is sent
    every included group up to the last of them, an earlier compaction window included (the new
    item then stands for all of it).  What the provider returns (see
    :class:`~contextledger.clients.ProviderCompaction`) is inserted in their place exactly as it
    came, and every older group it covers is excluded.  When the compactor's API wants a user
    message first (``opening_stays``, Anthropic's), the conversation's opening user message is
    sent and kept in front of the item.

    It fails closed, as :class:`SummarizationStrategy` does: if the compactor raises, or returns no
    compaction item, every group is restored, nothing is inserted, the failure is logged and
    recorded as an event, and with ``on_error="raise"`` raised as
    :class:`~contextledger.exceptions.SummarizationError`.  Cancellation restores and propagates.
    A provider's compaction does not change either: the window it returned is kept in ``cache``
    (keyed by what was sent, ``instructions`` and ``compactor_id``), so applying the strategy afresh
    to each request of a growing conversation calls the provider once per step.

    No input budget applies: the provider compacts what its context holds (Anthropic compacts only
    inputs above its trigger, at least 50,000 tokens, and otherwise answers without an item, which
    fails closed).
    """

    name = "provider_compaction"
    calls_model = True

    def __init__(
        self,
        compactor: ProviderCompactor,
        trigger: Trigger | None = None,
        minimum_preserved: int | None = None,
        *,
        target: Trigger | None = None,
        target_count: int | None = None,
        threshold: int | None = None,
        instructions: str | None = None,
        tokenizer: Tokenizer | None = None,
        on_error: Literal["report", "raise"] = "report",
        cache: SummaryCache | None = None,
        compactor_id: str | None = None,
        prefix_stable: bool = True,
    ) -> None:
        if compactor is None or not callable(getattr(compactor, "compact", None)):
            raise ConfigurationError(
                "ProviderCompactionStrategy needs a provider compactor with an async compact(messages) "
                f"(OpenAIResponsesClient, AnthropicChatClient, OfflineCompactor), got {compactor!r}"
            )
        if instructions is not None and (not isinstance(instructions, str) or not instructions.strip()):
            raise ConfigurationError(
                f"ProviderCompactionStrategy instructions must be non-empty text, got {instructions!r}"
            )
        if compactor_id is not None and (not isinstance(compactor_id, str) or not compactor_id):
            raise ConfigurationError(f"compactor_id must be non-empty text, got {compactor_id!r}")
        super().__init__(
            _ProviderWrites(),
            trigger,
            minimum_preserved,
            target=target,
            target_count=target_count,
            threshold=threshold,
            prompt=instructions or _PROVIDER_PROMPT,
            max_input_tokens=None,
            tokenizer=tokenizer,
            on_error=on_error,
            cache=cache,
            summarizer_id=compactor_id if compactor_id is not None else summarizer_identity(compactor),
            prefix_stable=prefix_stable,
            form="transcript",
        )
        self.compactor = compactor
        self.instructions = instructions

    def _window(self, text: str | None) -> tuple[Message, ...] | None:
        """A cached window back as messages (``None``: a miss, or a cached value that is not one)."""
        if text is None:
            return None
        try:
            window = tuple(load_jsonl(text.splitlines()))
        except TranscriptError as error:
            logger.warning("cached provider compaction unreadable, asking the provider: %s", error)
            return None
        return window if any(map(_holds_item, window)) else None

    def _covered(self, index: MessageIndex, live: Sequence[int], chosen: list[int]) -> tuple[list[int], int | None]:
        """The non-system groups the new item stands for (every live one up to the last chosen) and
        the opening user group to keep in front of it, if the compactor's API wants one."""
        last = chosen[-1]
        kind_of = index.columns.kind
        covered: list[int] = []
        for group in live:
            if kind_of[group] is not SYSTEM:
                covered.append(group)
            if group == last:
                break
        opening = None
        if getattr(self.compactor, "opening_stays", False) and covered:
            first = index.messages_of(covered[0])
            if first and first[0].role == "user":
                opening = covered[0]
        return covered, opening

    async def compact(self, index: MessageIndex, *, force: bool = False) -> bool:
        """Apply the strategy (see :meth:`CompactionStrategy.compact`); when it made a new item, the
        earlier item it covers goes at once, not at the strategy's next run.

        While the strategy runs, the earlier item (with the user message opening its turn) is held
        as every strategy holds it, so the new window goes after it; once the run is over nothing
        holds it any more, and it is excluded as covered (its turn's user message too, unless the
        compactor's API wants the conversation's opening user message kept)."""
        held = index.provider_compaction_ids()
        reason_of = index.columns.reason
        held = [group for group in held if reason_of[group] is None]
        seen = len(index.events)
        changed = await super().compact(index, force=force)
        made = any(e.strategy == self.name and e.action == _COMPACTED for e in index.events[seen:])
        if made and held:
            stale = held[:1] if getattr(self.compactor, "opening_stays", False) else held
            gone = index.exclude_ids(stale, PROVIDER_COMPACTION_REASON)
            index.record(self.name, "excluded", gone, "covered by the provider's new compaction item")
        return changed

    async def _run(self, index: MessageIndex) -> bool:
        live = index.live_ids()
        chosen, _ = self._select(index)
        if not chosen:
            return False
        covered, opening = self._covered(index, live, chosen)
        # A held earlier item (and the user message before it) stays where it is while this run
        # lasts: the new window goes after it, and the next run drops it as covered by the new one.
        pinned = index.pinned_ids
        replaced = [group for group in covered if group != opening and group not in pinned]
        after = max((at for at, group in enumerate(live) if group in pinned), default=-1)
        position = {group: at for at, group in enumerate(live)}
        anchor = next((group for group in replaced if position[group] > after), None)
        if anchor is None:
            index.include_ids(chosen)
            return False
        # The provider is sent every covered group: an earlier window it returned (its item, and
        # the user messages OpenAI keeps beside it) is compacted again with what followed.
        sent = [message for group in covered for message in index.messages_of(group)]
        # Everything covered goes (the chosen groups already are); the opening stays in front.
        chosen_ids = set(chosen)
        excluded = [*chosen, *index.exclude_ids([g for g in replaced if g not in chosen_ids], "provider_compaction")]
        if opening is not None and opening in chosen_ids:
            index.include_ids([opening])
            excluded.remove(opening)
        key = summary_key(sent, prompt=self.prompt, summarizer=self.summarizer_id)
        try:
            window = self._window(await self._cached(key))
        except asyncio.CancelledError:
            self._restore(index, excluded)
            raise
        reused = window is not None
        if window is None:
            try:
                result = await self.compactor.compact(sent, instructions=self.instructions)
            except asyncio.CancelledError:
                self._restore(index, excluded)
                raise
            except Exception as error:  # any provider failure fails closed
                return self._fail(index, excluded, f"the provider compactor raised {type(error).__name__}: {error}")
            window = self._checked(result)
            if window is None:
                return self._fail(index, excluded, "the provider returned no compaction item")
            usage = result.usage
            try:
                await self._remember(key, dump_jsonl(window))
            except asyncio.CancelledError:
                self._restore(index, excluded)
                raise
        else:
            usage = None  # no call was made
        self._succeeded(usage)
        inserted = [
            index.insert_summary(anchor, message, replaces=replaced, origin=PROVIDER_COMPACTION_ORIGIN)
            for message in window
        ]
        tokens = index.columns.tokens
        index.events.append(
            CompactionEvent(
                self.name,
                _COMPACTED,
                GroupKind.SUMMARY.value,
                None,
                sum(map(index.columns.size.__getitem__, replaced)),
                sum(map(tokens.__getitem__, replaced)),
                f"{len(replaced)} groups -> {len(window)} message(s) from the provider, "
                f"{sum(map(tokens.__getitem__, inserted))} tokens" + (" (reused)" if reused else ""),
                usage=self.last_usage,
            )
        )
        return True

    @staticmethod
    def _checked(result: object) -> tuple[Message, ...] | None:
        """The returned window, when it is messages holding a compaction item; else ``None``."""
        messages = result.messages if isinstance(result, ProviderCompaction) else None
        if not isinstance(messages, tuple) or not messages or not all(isinstance(m, Message) for m in messages):
            return None
        return messages if any(map(_holds_item, messages)) else None

    def __repr__(self) -> str:
        if self.target_count is not None:
            return (
                f"ProviderCompactionStrategy({self.compactor!r}, target_count={self.target_count}, "
                f"threshold={self.threshold})"
            )
        return (
            f"ProviderCompactionStrategy({self.compactor!r}, trigger={self.trigger!r}, "
            f"minimum_preserved={self.minimum_preserved})"
        )
