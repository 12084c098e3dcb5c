"""The message index: a flat message list seen as atomic groups, with running metrics.

:class:`MessageIndex` is assembled from the package's parts, one concern per module:

- ``_table`` — the group table (one column per attribute, invariants in ``_Table``'s
  docstring) and :class:`MessageGroup`, a view of one row;
- ``_grouping`` — SPEC §3 and §11 turned into groups as messages are appended, and ``_plain``,
  a lean loop that groups plain runs the same way before handing over to it;
- ``_metrics`` — the running counts triggers read, kept in one place;
- ``_marking`` — excluding, including, replacing and inserting, by group id;
- this module — building, updating and reading (the projection, groups, ids).

A strategy reads the index by id (:meth:`MessageIndex.live_ids`, :attr:`MessageIndex.columns`)
and changes it only through the marking methods, the built-in strategies as much as yours.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, compress, repeat
from operator import add, ne
from typing import cast

from contextledger.compaction._plain import PlainRuns
from contextledger.compaction._table import (
    _TOOL_CALL,
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


class MessageIndex(PlainRuns):
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
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
        self.events: list[CompactionEvent] = []
        self._reset()
        self.append(messages)

    def _reset(self) -> None:
        self._table = _Table()
        self._columns = GroupColumns(self._table)
        self._source: list[Message] = []
        self._reset_metrics()
        self._reset_marking()
        self._reset_grouping()

    def update(self, messages: Sequence[Message]) -> bool:
        """Bring the index in line with ``messages``: append what is new, or rebuild if the
        already-indexed prefix changed.  Exclusions survive an append; a rebuild clears them.
        Returns True if it had to rebuild."""
        indexed = len(self._source)
        if len(messages) >= indexed and (indexed == 0 or list(messages[:indexed]) == self._source):
            self.append(list(messages[indexed:]))
            return False
        self._reset()
        self.append(list(messages))
        return True

    # Reading by id ----------------------------------------------------------------------------

    @property
    def columns(self) -> GroupColumns:
        """Every group's attributes by id, read-only (kind, turn, tokens, size, reason, units...)."""
        return self._columns

    def live_ids(self) -> list[int]:
        """The included groups' ids, in conversation order (a snapshot: safe to mark while iterating)."""
        return self._included_ids()

    def newest_ids(self) -> Iterator[int]:
        """Included groups' ids from the newest back; stop early to pay only for what you read."""
        tail = self._tail
        return chain(reversed(tail), reversed(self._live.values())) if tail else reversed(self._live.values())

    def tool_call_ids(self) -> list[int]:
        """The included tool-call groups' ids, in order, read from the newest back only as far as
        the oldest of them (the index counts them): a long session pays for the groups that can
        still change, not for the whole history."""
        wanted = self.included_tool_call_groups
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
        return self._table.view(self._ids([group], "group")[0])

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

    # Reading ----------------------------------------------------------------------------------

    @property
    def groups(self) -> list[MessageGroup]:
        """Every group in order, excluded ones included."""
        self._flush()
        return list(map(self._table.view, self._order))

    @property
    def source_messages(self) -> list[Message]:
        """The messages that were indexed, as given (summaries written by strategies are not here)."""
        return self._source

    @property
    def included_bytes(self) -> int:
        return sum(map(self._table.byte_count, self._included_ids()))

    @property
    def total_bytes(self) -> int:
        self._flush()
        return sum(map(self._table.byte_count, self._order))

    def projection(self) -> list[Message]:
        """The included messages, in order: what is sent to the model."""
        source = self._source
        if self.included_messages == self.total_messages == len(source):
            # Every group included and nothing inserted: the groups hold exactly the indexed
            # messages, in order (a group never has fewer than one message).
            return list(source)
        table = self._table
        ids = self._included_ids()
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
        return list(map(self._table.view, self._included_ids()))

    def newest_live(self) -> Iterator[MessageGroup]:
        """Included groups from the newest back; stop early to pay only for what you read."""
        return map(self._table.view, self.newest_ids())

    def __len__(self) -> int:
        self._flush()
        return len(self._order)

    def __repr__(self) -> str:
        return (
            f"MessageIndex(groups={self.included_groups}/{self.total_groups}, "
            f"messages={self.included_messages}/{self.total_messages}, "
            f"tokens={self.included_tokens}/{self.total_tokens} ({self.tokenizer.name}))"
        )
