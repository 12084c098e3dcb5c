"""A session's request view kept between model calls, so each call indexes only what is new.

What :class:`~contextledger.agents.CompactionProvider` keeps per session for its
``before_strategy``: the index of what may still be sent, the exclusions made on it, and the
prefix of the conversation excluded for good (frozen: never indexed again).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from contextledger.compaction import GroupKind, MessageIndex
from contextledger.messages import Message
from contextledger.messages._openai import message_to_openai
from contextledger.tokenizers import Tokenizer

__all__ = ["RequestView", "fingerprint", "same_count"]


def fingerprint(message: Message) -> str:
    body = json.dumps(message_to_openai(message, metadata=True), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def same_count(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many messages ``old`` and ``new`` have in common from the start (identity first, as
    list equality compares: the usual case costs a pointer comparison per message)."""
    for position, (before, now) in enumerate(zip(old, new)):
        if before is not now and before != now:
            return position
    return min(len(old), len(new))


class RequestView:
    """A session's request view, kept between calls so each call only indexes what is new.

    The index covers the provider-added context messages and the conversation from
    ``frozen_count`` on.  The frozen part is a prefix of the conversation that a strategy
    excluded outright, up to the start of a turn: exclusions persist, so it can never be sent
    again and need not be indexed, nor even kept.  Moving such a prefix out of the index now
    and then keeps the per-call cost in proportion to what is still sent, however long the
    history grows.  The view keeps only the prefix's length and its first and last message:
    a later call's conversation still starts with it when those sit where they were, which
    holds for a history that only grew or was rewritten after it (what a session itself does);
    a history rewritten over the prefix moves them, and the view is built again.
    """

    __slots__ = ("context", "frozen_count", "frozen_ends", "index")

    def __init__(
        self,
        index: MessageIndex,
        context: list[Message],
        frozen_count: int = 0,
        frozen_ends: tuple[Message, Message] | None = None,
    ) -> None:
        self.index = index
        self.context = context
        self.frozen_count = frozen_count
        self.frozen_ends = frozen_ends

    @property
    def indexed_conversation(self) -> list[Message]:
        return self.index.source_messages[len(self.context) :]

    def keeps_frozen(self, messages: Sequence[Message], base: int) -> bool:
        """Whether the conversation starting at ``messages[base]`` still starts with the frozen prefix."""
        count, ends = self.frozen_count, self.frozen_ends
        if not count or ends is None:
            return True
        return len(messages) >= base + count and messages[base] is ends[0] and messages[base + count - 1] is ends[1]

    def follows(self, messages: Sequence[Message], base: int) -> bool:
        """Whether this call's messages (context before ``base``, conversation after) only add to
        what the view indexed: the usual case."""
        context = self.context
        if base < len(context) or list(messages[base - len(context) : base]) != context:
            return False
        start = base + self.frozen_count
        indexed = self.indexed_conversation
        return (
            len(messages) >= start + len(indexed)
            and self.keeps_frozen(messages, base)
            and list(messages[start : start + len(indexed)]) == indexed
        )

    def _runs(self) -> list[list[int]]:
        """Index positions (context first, so negative for context) of groups dropped outright.

        Replaced groups are left out on purpose: carrying their exclusion over without the
        text that replaced them would lose information, so the strategy decides them again.
        """
        groups = self.index.groups
        written = {id(group) for group in groups if group.kind is GroupKind.SUMMARY and group.replaces}
        replaced = {id(old) for group in groups if id(group) in written for old in group.replaces}
        runs: list[list[int]] = []
        position = -len(self.context)
        for group in groups:
            if id(group) in written:  # written by a strategy: not a source message
                continue
            size = group.message_count
            if group.excluded and id(group) not in replaced:
                if runs and runs[-1][1] == position:
                    runs[-1][1] = position + size
                else:
                    runs.append([position, position + size])
            position += size
        return runs

    def excluded_runs(self) -> list[list[int]]:
        """Conversation positions of groups dropped outright, as [start, end) runs."""
        skip = self.frozen_count
        runs = [[max(start, 0) + skip, end + skip] for start, end in self._runs() if end > 0]
        if skip:
            if runs and runs[0][0] == skip:
                runs[0][0] = 0
            else:
                runs.insert(0, [0, skip])
        return runs

    def record(self) -> dict[str, Any]:
        """What a restored session needs to keep this view's exclusions (see ``excluded_runs``)."""
        indexed = self.indexed_conversation
        last = indexed[-1] if indexed else self.frozen_ends[1] if self.frozen_ends else None
        if last is None:
            return {}
        length = self.frozen_count + len(indexed)
        return {"length": length, "last": fingerprint(last), "excluded": self.excluded_runs()}

    def apply_runs(self, runs: Sequence[Sequence[int]], limit: int, *, offset: int = 0) -> None:
        """Exclude again the groups lying wholly inside ``runs`` (index positions plus ``offset``)."""
        wanted = [
            (start - offset, end - offset) for start, end in runs if end <= limit and end - offset > -len(self.context)
        ]
        if not wanted:
            return
        drop = []
        position = -len(self.context)
        cursor = 0
        for group in self.index.groups:
            if group.kind is GroupKind.SUMMARY and group.replaces:  # written by a strategy: not a source message
                continue
            start, end = position, position + group.message_count
            position = end
            while cursor < len(wanted) and wanted[cursor][1] <= start:
                cursor += 1
            if cursor == len(wanted):
                break  # past the last run: nothing after it is excluded here
            if wanted[cursor][0] <= start and end <= wanted[cursor][1]:
                drop.append(group)
        self.index.exclude_many(drop, "kept from an earlier call")

    def dropped_prefix(self) -> int:
        """How many of the indexed conversation's first messages are excluded turns that can be
        frozen: up to the first included group if a turn starts there, else up to the start of
        the last excluded user turn before it.

        0 when a group in the index stands in for others (a summary, a collapsed tool result):
        an index built again from source messages would lose it.
        """
        groups = self.index.groups
        if any(group.kind is GroupKind.SUMMARY and group.replaces for group in groups):
            return 0
        position = -len(self.context)
        cut = 0
        for group in groups:
            size = group.message_count
            if position < 0:
                if position + size > 0:
                    return 0  # a group spanning context and conversation: leave the index as it is
                position += size
                continue
            if group.kind is GroupKind.USER:
                cut = position
            if not group.excluded:
                break
            position += size
        return cut

    def freeze_dropped_prefix(self, tokenizer: Tokenizer | None, at_least: int) -> None:
        """Move the conversation's leading excluded turns out of the index (see the class docstring)."""
        index = self.index
        if index.total_messages - index.included_messages < at_least:
            return  # not that many excluded messages in the whole index: no need to look
        cut = self.dropped_prefix()
        if not cut or cut < at_least:
            return
        runs = self._runs()
        conversation = self.indexed_conversation
        first = self.frozen_ends[0] if self.frozen_ends else conversation[0]
        self.frozen_count += cut
        self.frozen_ends = (first, conversation[cut - 1])
        self.index = MessageIndex([*self.context, *conversation[cut:]], tokenizer=tokenizer)
        self.apply_runs(runs, len(conversation), offset=cut)
