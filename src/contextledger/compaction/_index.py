"""The message index: a flat message list seen as atomic groups, with running metrics.

:class:`MessageIndex` is assembled from parts it builds and owns, one concern per module:

- ``_table`` — the group table (one column per attribute, invariants in ``_Table``'s
  docstring) and :class:`MessageGroup`, a view of one row;
- ``_metrics`` — :class:`Metrics`, the running counts triggers read, kept in one place;
- ``_marking`` — :class:`Marking`, excluding, including, replacing and inserting by group id,
  and the order of the groups;
- ``_grouping`` — :class:`Grouper`, design.md#compaction-groups and design.md#units turned into groups as messages are
  appended, with ``_plain``, a lean loop that reads plain runs the same way first;
- this module — building, updating and reading (the projection, groups, ids), and the public
  face of the parts: each method below hands its work to the part that does it.

A strategy reads the index by id (:meth:`MessageIndex.live_ids`, :attr:`MessageIndex.columns`)
and changes it only through the marking methods, the built-in strategies as much as yours.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import compress, repeat
from operator import add, ne
from typing import Any, cast

from contextledger.compaction._grouping import Grouper
from contextledger.compaction._marking import Marking
from contextledger.compaction._metrics import Metrics
from contextledger.compaction._table import (
    _TOOL_CALL,
    _USER,
    CompactionEvent,
    GroupColumns,
    MessageGroup,
    _Groups,
    _Table,
    gather,
)
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = ["MessageIndex"]


class MessageIndex:
    """A flat message list grouped into atomic units, with included/excluded state and metrics.

    Build one from a message list (``MessageIndex(messages, tokenizer=...)``),
    let strategies mark it, then read :meth:`projection`.  Reuse it across calls
    with :meth:`update` so only new messages are grouped and counted.

    Groups have ids (ints, in creation order).  A strategy of your own works the way the
    built-in ones do: read :meth:`live_ids` and :attr:`columns`, change groups with
    :meth:`exclude_ids`, :meth:`include_ids`, :meth:`replace_ids`, :meth:`collapse_ids` or
    :meth:`insert_summary`, and say what it did with :meth:`record`.
    """

    def __init__(self, messages: Iterable[Message] = (), *, tokenizer: Tokenizer | None = None) -> None:
        self._tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
        self.events: list[CompactionEvent] = []
        self._build()
        self._grouper.append(messages)

    def _build(self) -> None:
        """Make the parts afresh, each given the parts it works with: the table they all share,
        the metrics marking and grouping report to, and the order grouping appends to."""
        self._table = _Table()
        self._columns = GroupColumns(self._table)
        self._metrics = Metrics(self._table)
        self._marking = Marking(self._table, self._metrics, self._tokenizer)
        self._grouper = Grouper(self._table, self._metrics, self._marking, self._tokenizer)

    @property
    def tokenizer(self) -> Tokenizer:
        """What the index counts tokens with (every group's count and every summary's)."""
        return self._tokenizer

    def append(self, messages: Iterable[Message]) -> None:
        """Group and count ``messages`` as if they followed what is already indexed.

        Only the tail that can still change (an open tool-call group waiting for
        results, and reasoning messages that may belong to the next call) is
        re-examined; everything before it is left alone.
        """
        self._grouper.append(messages)

    def update(self, messages: Sequence[Message]) -> bool:
        """Bring the index in line with ``messages``: append what is new, or rebuild if the
        already-indexed prefix changed.  Exclusions survive an append; a rebuild clears them.
        Returns True if it had to rebuild."""
        source = self._grouper.source
        indexed = len(source)
        if len(messages) >= indexed and (indexed == 0 or list(messages[:indexed]) == source):
            self._grouper.append(list(messages[indexed:]))
            return False
        self._build()
        self._grouper.append(list(messages))
        return True

    # Metrics ----------------------------------------------------------------------------------
    # Read from the metrics part: what triggers compare with their limits.

    @property
    def total_groups(self) -> int:
        return self._metrics.total_groups

    @property
    def total_messages(self) -> int:
        return self._metrics.total_messages

    @property
    def total_tokens(self) -> int:
        return self._metrics.total_tokens

    @property
    def total_turns(self) -> int:
        return self._metrics.total_turns

    @property
    def included_groups(self) -> int:
        return self._metrics.included_groups

    @property
    def included_messages(self) -> int:
        return self._metrics.included_messages

    @property
    def included_tokens(self) -> int:
        return self._metrics.included_tokens

    @property
    def included_non_system_groups(self) -> int:
        return self._metrics.included_non_system_groups

    @property
    def included_non_system_messages(self) -> int:
        return self._metrics.included_non_system_messages

    @property
    def included_tool_call_groups(self) -> int:
        return self._metrics.included_tool_call_groups

    @property
    def included_turns(self) -> int:
        """User turns with at least one included group (turn 0 is not a turn)."""
        return self._metrics.included_turns(self._marking.live_ids, len(self._grouper.source))

    def metrics(self) -> dict[str, int]:
        """Totals and included counts, for reports."""
        metrics = self._metrics
        return {
            "groups": metrics.total_groups,
            "messages": metrics.total_messages,
            "tokens": metrics.total_tokens,
            "turns": metrics.total_turns,
            "included_groups": metrics.included_groups,
            "included_messages": metrics.included_messages,
            "included_tokens": metrics.included_tokens,
            "included_turns": self.included_turns,
        }

    # Reading by id ----------------------------------------------------------------------------

    @property
    def columns(self) -> GroupColumns:
        """Every group's attributes by id, read-only (kind, turn, tokens, size, reason, units...)."""
        return self._columns

    def live_ids(self) -> list[int]:
        """The included groups' ids, in conversation order (a snapshot: safe to mark while iterating)."""
        return self._marking.live_ids()

    def newest_ids(self) -> Iterator[int]:
        """Included groups' ids from the newest back; stop early to pay only for what you read."""
        return self._marking.newest_ids()

    def tool_call_ids(self) -> list[int]:
        """The included tool-call groups' ids, in order, read from the newest back only as far as
        the oldest of them (the index counts them): a long session pays for the groups that can
        still change, not for the whole history."""
        wanted = self._metrics.included_tool_call_groups
        found: list[int] = []
        if wanted:
            kind_of = self._table.kind
            for group in self.newest_ids():
                if kind_of[group] is _TOOL_CALL:
                    found.append(group)
                    if len(found) == wanted:
                        break
        found.reverse()
        return found

    def run_of(self, groups: list[int]) -> slice | None:
        """``groups`` as a slice of the :attr:`columns` when they are evenly spaced ids in
        increasing order (else None), so ``sum(index.columns.tokens[run])`` reads them in C, not
        id by id: at cold, a window or a truncation usually takes consecutive ids, and a collapse
        every tool-call group of a history whose turns have one shape."""
        return self._table.run(groups)

    def messages_of(self, group: int) -> list[Message]:
        """One group's messages, in order (a new list).  Reading cannot harm the index, so the id
        is not checked beyond what indexing a list does: a collapse reads thousands."""
        return self._table.messages(group)

    def messages_of_groups(self, groups: list[int]) -> Iterable[Sequence[Message]]:
        """Each group's messages, for many groups at once (what a collapse reads): when every
        group is one call and its result, the pairs are made in C, not a slice per group."""
        table = self._table
        sizes = list(map(table.size.__getitem__, groups))
        if sizes.count(2) != len(sizes):  # (a deferred summary is one message: never on this path)
            return map(table.messages, groups)
        starts = list(map(table.first.__getitem__, groups))
        pool = table.pool
        return zip(map(pool.__getitem__, starts), map(pool.__getitem__, map(add, starts, repeat(1))))

    def group(self, group: int) -> MessageGroup:
        """The :class:`MessageGroup` object for an id (always the same object)."""
        return self._table.view(self._marking.checked_ids([group], "group")[0])

    def record(self, strategy: str, action: str, groups: list[int], detail: str) -> bool:
        """Add one event to :attr:`events` for what ``strategy`` did to ``groups`` (``action``:
        "excluded", "collapsed"...); True if there were any groups."""
        if not groups:
            return False
        # Thousands of groups per call on a long history: every pass here runs in C, on slices of
        # the columns when the groups are a run of ids (see _Table.run).
        table = self._table
        run = table.run(groups)
        every_turn, kinds = gather(table.turn, groups, run), gather(table.kind, groups, run)
        messages, tokens = sum(gather(table.size, groups, run)), sum(gather(table.tokens, groups, run))
        turns = cast(list[int], every_turn if None not in every_turn else [t for t in every_turn if t is not None])
        first, last = (min(turns), max(turns)) if turns else (None, None)
        span = f", turns {first}-{last}" if turns else ""
        self.events.append(
            CompactionEvent(
                strategy,
                action,
                kinds[0].value if kinds.count(kinds[0]) == len(kinds) else None,
                first if first == last else None,
                messages,
                tokens,
                f"{len(groups)} group{'s' if len(groups) != 1 else ''}{span}: {detail}",
                groups=_Groups(table, groups),
            )
        )
        return True

    @property
    def pinned_ids(self) -> frozenset[int] | set[int]:
        """Groups no change may take while a strategy runs: a provider's compaction item and the
        user message before it (see ``_boundary``); a strategy leaves them out of its candidates
        so that its arithmetic counts them as sent.  Empty outside a strategy's run."""
        return self._marking.pinned

    @contextmanager
    def holding(self, groups: Iterable[int]) -> Iterator[None]:
        """Pin ``groups`` (with their whole units) for the time of the ``with`` block: no exclusion
        or replacement takes them (see :attr:`pinned_ids`); the pins before are restored after."""
        marking, table = self._marking, self._table
        ids = marking.checked_ids(groups, "holding")
        previous = marking.hold(table.with_units(ids) if table.unit else ids)
        try:
            yield
        finally:
            marking.release(previous)

    def provider_compaction_ids(self) -> list[int]:
        """The group holding the newest indexed message with a provider compaction item (see
        :attr:`Message.is_provider_compaction`) and, when it has one, the user group that opened
        its turn; empty when no message holds one.  Excluded groups are found too.

        The messages are read once per index: a later call reads only those appended since."""
        grouper, table = self._grouper, self._table
        found = grouper.newest_provider_compaction()
        if found is None:
            return []
        target = grouper.source[found]
        pool, first, size, kind, turn = table.pool, table.first, table.size, table.kind, table.turn
        order = self._marking.order()
        for at in range(len(order) - 1, -1, -1):
            group = order[at]
            start = first[group]
            if any(pool[p] is target for p in range(start, start + size[group])):
                break
        else:
            return []
        own = turn[group]
        if not own:
            return [group]
        for earlier in reversed(order[:at]):  # back through its turn to the user message opening it
            if kind[earlier] is _USER and turn[earlier] == own:
                return [group, earlier]
            if turn[earlier] is not None and turn[earlier] != own:
                break
        return [group]

    # Changing groups, by id (the marking part does it) ------------------------------------------

    def exclude_ids(self, groups: Iterable[int], reason: str) -> list[int]:
        """Exclude groups by id, with the whole unit of each; returns those that were included,
        in order.  ``reason`` is what reports show (``"truncation"``, ``"sliding_window"``...)."""
        return self._marking.exclude_ids(groups, reason)

    def include_ids(self, groups: Iterable[int]) -> list[int]:
        """Undo exclusions by id (a failed summarisation restoring what it took), with the whole
        unit of each; returns those that were excluded, in order."""
        return self._marking.include_ids(groups)

    def whole_units(self, groups: list[int], keep: set[int] | None = None) -> list[int]:
        """``groups`` without those in a unit with a group that must stay: when a boundary falls
        inside a unit, the unit is kept whole (a kept result keeps its call).  What must stay is
        ``keep``, or by default every included group not in ``groups``."""
        return self._marking.whole_units(groups, keep)

    def replace_ids(
        self, originals: Iterable[int], messages: Sequence[Message], reason: str, *, origin: str
    ) -> list[int]:
        """Replace each original (included, not a system group, not in a unit with others) by a
        one-message summary group of its turn that takes its place; returns the new ids.  The
        messages are counted with the index's tokenizer in one batch."""
        return self._marking.replace_ids(originals, messages, reason, origin=origin)

    def collapse_ids(
        self,
        originals: Iterable[int],
        texts: Sequence[str],
        reason: str,
        *,
        origin: str,
        properties: Mapping[str, Any],
    ) -> list[int]:
        """:meth:`replace_ids` with one assistant text (with ``properties``) for each original.

        With the character estimate each text is counted from its length and its message is
        written only when first read: in a pipeline most collapsed groups are excluded again
        right away, and thousands of messages never built is most of a collapse's cost."""
        return self._marking.collapse_ids(originals, texts, reason, origin=origin, properties=properties)

    def insert_summary(self, before: int, message: Message, *, replaces: Sequence[int], origin: str) -> int:
        """Insert a summary group of no turn just before group ``before`` (what summarisation
        writes for the groups it excluded); returns its id."""
        return self._marking.insert_summary(before, message, replaces=replaces, origin=origin)

    # Changing groups, by object ---------------------------------------------------------------

    def id_of(self, group: MessageGroup) -> int:
        """The id of one of this index's groups (what the ``*_ids`` methods take)."""
        return self._marking.id_of(group)

    def exclude(self, group: MessageGroup, reason: str) -> bool:
        """Mark a group excluded; returns False if it already was."""
        return bool(self._marking.exclude_ids([self._marking.id_of(group)], reason))

    def exclude_many(self, groups: Iterable[MessageGroup], reason: str) -> list[MessageGroup]:
        """Exclude several groups in one pass; returns those that were not already excluded."""
        marking = self._marking
        return list(map(self._table.view, marking.exclude_ids(map(marking.id_of, groups), reason)))

    def include(self, group: MessageGroup) -> bool:
        """Undo an exclusion; returns False if the group was already included."""
        return bool(self._marking.include_ids([self._marking.id_of(group)]))

    def include_many(self, groups: Sequence[MessageGroup]) -> None:
        """Undo several exclusions."""
        self._marking.include_ids(map(self._marking.id_of, groups))

    def make_summary_groups(
        self,
        messages: Sequence[Message],
        *,
        turns: Sequence[int | None],
        origin: str,
        replaces: Sequence[tuple[MessageGroup, ...]],
    ) -> list[MessageGroup]:
        """Summary groups for many messages, counted in one tokenizer batch, not yet inserted."""
        return self._marking.make_summary_groups(messages, turns=turns, origin=origin, replaces=replaces)

    def make_summary_group(
        self, message: Message, *, turn: int | None, origin: str, replaces: tuple[MessageGroup, ...]
    ) -> MessageGroup:
        """A summary group for ``message``, counted with this index's tokenizer, not yet inserted."""
        return self._marking.make_summary_groups([message], turns=[turn], origin=origin, replaces=[replaces])[0]

    def replace_many(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]], reason: str) -> None:
        """Exclude each original and put its replacement (see :meth:`make_summary_groups`) in its place."""
        self._marking.replace_many(pairs, reason)

    def insert_before(self, anchor: MessageGroup, group: MessageGroup) -> None:
        """Insert ``group`` just before ``anchor``.

        Insertions are batched: the order is rebuilt once, the next time it is
        read, so inserting thousands of groups costs one pass, not one per group.
        """
        self._marking.insert_before(anchor, group)

    # Reading ----------------------------------------------------------------------------------

    @property
    def groups(self) -> list[MessageGroup]:
        """Every group in order, excluded ones included."""
        return list(map(self._table.view, self._marking.order()))

    @property
    def source_messages(self) -> list[Message]:
        """The messages that were indexed, as given (summaries written by strategies are not here)."""
        return self._grouper.source

    @property
    def included_bytes(self) -> int:
        return sum(map(self._table.byte_count, self._marking.live_ids()))

    @property
    def total_bytes(self) -> int:
        return sum(map(self._table.byte_count, self._marking.order()))

    def projection(self) -> list[Message]:
        """The included messages, in order: what is sent to the model."""
        source = self._grouper.source
        metrics = self._metrics
        if metrics.included_messages == metrics.total_messages == len(source):
            # Every group included and nothing inserted: the groups hold exactly the indexed
            # messages, in order (a group never has fewer than one message).
            return list(source)
        table = self._table
        ids = self._marking.live_ids()
        if table.later:  # deferred summaries that are sent are written now, the others never
            # In conversation order: the new messages then lie in memory in the order they are sent.
            table.write(filter(table.later.__contains__, ids))
        starts = list(map(table.first.__getitem__, ids))
        sizes = list(map(table.size.__getitem__, ids))
        pool = table.pool
        larger = len(sizes) - sizes.count(1)
        if larger <= 16:  # one message a group but a few (after a collapse, say): mostly in C
            out = list(map(pool.__getitem__, starts))
            if larger:
                # The rest of each larger group's messages, inserted from the back so that the
                # positions still to come stay where they are.
                for position in reversed(list(compress(itertools.count(), map(ne, sizes, repeat(1))))):
                    start = starts[position]
                    out[position + 1 : position + 1] = pool[start + 1 : start + sizes[position]]
            return out
        out = []
        append, extend = out.append, out.extend
        for start, size in zip(starts, sizes):
            if size == 1:
                append(pool[start])
            else:
                extend(pool[start : start + size])
        return out

    @property
    def live(self) -> list[MessageGroup]:
        """The included groups, in order (a snapshot: safe to exclude while iterating)."""
        return list(map(self._table.view, self._marking.live_ids()))

    def newest_live(self) -> Iterator[MessageGroup]:
        """Included groups from the newest back; stop early to pay only for what you read."""
        return map(self._table.view, self._marking.newest_ids())

    def __len__(self) -> int:
        return len(self._marking.order())

    def __repr__(self) -> str:
        metrics = self._metrics
        return (
            f"MessageIndex(groups={metrics.included_groups}/{metrics.total_groups}, "
            f"messages={metrics.included_messages}/{metrics.total_messages}, "
            f"tokens={metrics.included_tokens}/{metrics.total_tokens} ({self._tokenizer.name}))"
        )
