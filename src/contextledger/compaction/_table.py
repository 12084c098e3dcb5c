"""The group table: every group's attributes as columns, and the objects that view its rows.

This is the core the rest of the package stands on.  Grouping (``_grouping``, ``_plain``)
appends rows, marking (``_marking``) sets exclusion reasons and adds summary rows, the metrics
(``_metrics``) read the columns, and :class:`MessageGroup` objects are views of one row,
made on demand.  Keeping groups as columns rather than one object each lets a long history
be indexed with a few list appends per message, and lets a strategy exclude or collapse
thousands of groups with whole-column passes in C.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from itertools import repeat
from operator import add
from typing import Any, TypeVar, overload

from contextledger.exceptions import CompactionError
from contextledger.messages import Message
from contextledger.messages._message import assistant_text_message

__all__ = [
    "CompactionEvent",
    "GroupColumns",
    "GroupKind",
    "MessageGroup",
    "gather",
    "gc_paused",
]

_T = TypeVar("_T")


def gather(column: list[_T], groups: list[int], run: slice | None) -> list[_T]:
    """``column``'s entries for ``groups``: one slice when they are a run (see ``_Table.run``),
    else one C-level pass of lookups."""
    return column[run] if run is not None else list(map(column.__getitem__, groups))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector during a burst of allocations that creates no cycles.

    Compacting a long history allocates many small objects; with the collector
    running, each young-generation pass re-walks them.  Reference counting
    still frees everything.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class GroupKind(str, Enum):
    """What a group is, which decides what each strategy may do with it."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT_TEXT = "assistant_text"
    TOOL_CALL = "tool_call"
    SUMMARY = "summary"

    def __str__(self) -> str:
        return self.value


# Reading an enum member through its class costs a lookup each time; the hot loops use these.
_SYSTEM = GroupKind.SYSTEM
_USER = GroupKind.USER
_TEXT = GroupKind.ASSISTANT_TEXT
_TOOL_CALL = GroupKind.TOOL_CALL
_SUMMARY = GroupKind.SUMMARY


class _Table:
    """Every group's attributes, one column each, indexed by group id.

    Invariants (grouping and marking keep them; everything else only reads):

    - Ids are dense and in creation order; each column has one entry per id.
    - A group's messages are the run ``pool[first:first + size]``, ``size >= 1``.  The pool
      holds the indexed messages in order (a call and its results are adjacent), then what
      strategies write, and copies of the rare group that had to grow where it was not at the
      end (see :meth:`relocate`).  A deferred summary's entry is None until it is read (``later``).
    - ``reason[g] is None`` exactly when ``g`` is included.
    - ``tokens[g]`` is the index's tokenizer count of ``g``'s messages.
    - Members of a unit whose groups are not adjacent (a call and a result that sits apart)
      all map, in ``unit``, to one shared sorted list of the members; they are included or
      excluded together, never one without the others (design.md#units).
    - ``call_ids`` holds the calls a tool-call group opened; ``unanswered`` those still
      waiting for a result.  Rare attributes are sparse (a dict or set of the groups that have
      them), so indexing a long history makes no container per group.
    """

    __slots__ = (
        "_call_ids",
        "bytes",
        "first",
        "ids",
        "kind",
        "later",
        "later_properties",
        "origin",
        "orphan",
        "pending_calls",
        "pool",
        "reason",
        "replaces",
        "size",
        "tokens",
        "turn",
        "unanswered",
        "unit",
        "views",
    )

    def __init__(self) -> None:
        self.pool: list[Message] = []
        self.kind: list[GroupKind] = []
        self.turn: list[int | None] = []
        self.tokens: list[int] = []
        self.first: list[int] = []
        self.size: list[int] = []
        self.reason: list[str | None] = []  # why a group is excluded; None while it is included
        # Call ids of tool-call groups: the id itself for the usual single call, so indexing a long
        # history makes no container per group for the garbage collector to walk.
        self._call_ids: dict[int, str | frozenset[str]] = {}
        # Calls the plain grouping loop found, not yet in ``call_ids``: (first id of the batch,
        # positions of its call groups in the batch, their call ids).  Read far less often than a
        # long history is indexed, so the dict is made when first read.
        self.pending_calls: list[tuple[int, list[int], list[str | frozenset[str]]]] = []
        self.unanswered: dict[int, str | frozenset[str]] = {}  # calls still waiting for a result
        self.orphan: set[int] = set()
        # Groups of one unit that are not adjacent (a result after an approval note or a user
        # message, an approval and its response): each member -> the unit's members, one shared
        # list (design.md#units).  Such members are excluded and included together, always.
        self.unit: dict[int, list[int]] = {}
        self.origin: list[str] = []  # "input", or what wrote a summary
        # What a summary group stands in for: one group's id, several ids, or None.
        self.replaces: list[int | tuple[int, ...] | None] = []
        self.bytes: dict[int, int] = {}  # byte counts computed so far
        self.views: dict[int, MessageGroup] = {}
        # Summaries whose one-text message is written only when it is first read (in a pipeline
        # most collapsed groups are excluded again right away): group id -> the text.  Their pool
        # entry is None until then; the message gets these properties.
        self.later: dict[int, str] = {}
        self.later_properties: Mapping[str, Any] = {}
        # Every id, in order, brought up to date when read (see :meth:`run`): the same int objects
        # as in the other containers where grouping made them, so comparing with it is a pointer
        # comparison per id.
        self.ids: list[int] = []

    @property
    def call_ids(self) -> dict[int, str | frozenset[str]]:
        """The calls each tool-call group opened: the call id itself for the usual single call."""
        if self.pending_calls:
            for first, positions, asked in self.pending_calls:
                self._call_ids.update(zip(map(add, positions, repeat(first)), asked))
            self.pending_calls = []
        return self._call_ids

    def run(self, groups: list[int]) -> slice | None:
        """``groups`` as a slice of the columns when they are evenly spaced ids in increasing order
        (``first, first + step, ... last``), else None.  A window or a truncation at cold usually
        takes consecutive ids, a collapse or a selective removal every tool-call group of a
        history whose turns have one shape (every third id, say); such a batch's columns are read
        and written in slices, at C speed, instead of id by id."""
        count = len(groups)
        if count < 32:  # a slice saves nothing on a few ids
            return None
        start, last = groups[0], groups[-1]
        if type(start) is not int or type(last) is not int or start < 0 or last <= start:
            return None
        step, left = divmod(last - start, count - 1)
        if left:
            return None
        ids = self.ids
        if len(ids) < len(self.kind):
            ids.extend(range(len(ids), len(self.kind)))
        if last >= len(ids) or groups != ids[start : last + 1 : step]:
            return None
        return slice(start, last + 1, step)

    def add(
        self,
        kind: GroupKind,
        messages: Sequence[Message],
        turn: int | None,
        tokens: int,
        *,
        reason: str | None = None,
        origin: str = "input",
        replaces: tuple[int, ...] = (),
    ) -> int:
        """Add a group whose messages are not in the pool yet; returns its id."""
        group = len(self.kind)
        self.first.append(len(self.pool))
        self.pool.extend(messages)
        self.size.append(len(messages))
        self.kind.append(kind)
        self.turn.append(turn)
        self.tokens.append(tokens)
        self.reason.append(reason)
        self.origin.append(origin)
        self.replaces.append(replaces or None)
        return group

    def messages(self, group: int) -> list[Message]:
        if group in self.later:
            self.write((group,))
        start = self.first[group]
        return self.pool[start : start + self.size[group]]

    def defer(self, groups: list[int], texts: Sequence[str], properties: Mapping[str, Any]) -> None:
        """Make ``groups`` (whose pool entries are None) deferred summaries of ``texts``, written
        with ``properties`` when first read (see ``later``)."""
        self.later.update(zip(groups, texts))
        self.later_properties = properties

    def adopt(self, group: MessageGroup, id_of: Callable[[MessageGroup], int]) -> int:
        """Take a group built outside an index (see :class:`MessageGroup`) into this table (``id_of``
        finds the ids of what it stands in for); returns its id, and the object is from then on the
        view of that row."""
        if group._table is self:
            return group._id
        own, row = group._table, group._id
        if len(own.kind) != 1 or own.views:
            raise CompactionError(f"{group!r} belongs to another index; build a new group for this one")
        new = self.add(
            own.kind[row],
            own.messages(row),
            own.turn[row],
            own.tokens[row],
            reason=own.reason[row],
            origin=own.origin[row],
            replaces=tuple(map(id_of, group._replaced)),
        )
        if row in own.orphan:
            self.orphan.add(new)
        group._table, group._id = self, new
        self.views[new] = group
        return new

    def write(self, groups: Iterable[int]) -> None:
        """Write deferred summaries' messages (see ``later``)."""
        pool, first, later, properties = self.pool, self.first, self.later, self.later_properties
        with gc_paused():  # thousands of small objects: one collector pass afterwards, not many
            for group in groups:
                pool[first[group]] = assistant_text_message(later.pop(group), properties)

    def relocate(self, group: int, extra: Sequence[Message] = ()) -> None:
        """Copy a group's messages (and ``extra`` after them) to the end of the pool, where it can
        grow: a group's messages must stay one run of the pool."""
        messages = self.messages(group)
        self.first[group] = len(self.pool)
        self.pool.extend(messages)
        self.pool.extend(extra)
        self.size[group] += len(extra)

    def merge(self, target: int, groups: list[int]) -> None:
        """Make ``target`` hold the messages of ``groups`` (which include it), in their order, and
        take the others' tokens."""
        first, size = self.first, self.size
        start = first[groups[0]]
        end = start + size[groups[0]]
        adjacent = True
        for group in groups[1:]:
            adjacent = adjacent and first[group] == end
            end = first[group] + size[group]
        if adjacent:
            first[target], size[target] = start, end - start
        else:
            messages = [message for group in groups for message in self.messages(group)]
            first[target], size[target] = len(self.pool), len(messages)
            self.pool.extend(messages)
        self.tokens[target] += sum(self.tokens[group] for group in groups if group != target)

    def link(self, call_group: int, answer_group: int) -> None:
        """Make two groups one unit (and so every group already in a unit with either)."""
        unit = self.unit
        first = unit.get(call_group) or [call_group]
        second = unit.get(answer_group) or [answer_group]
        if first is second:
            return
        members = sorted(set(first).union(second))
        for member in members:
            unit[member] = members

    def answer(self, group: int, ids: Iterable[str]) -> None:
        """Record that ``ids`` of ``group``'s waiting calls got a result."""
        waiting = self.unanswered.get(group)
        if waiting is None:
            return
        left = (
            (frozenset() if waiting in ids else frozenset((waiting,)))
            if isinstance(waiting, str)
            else waiting.difference(ids)
        )
        if left:
            self.unanswered[group] = left
        else:
            del self.unanswered[group]

    def with_units(self, groups: Iterable[int]) -> list[int]:
        """``groups`` and every group in a unit with one of them, each once, in the given order."""
        unit = self.unit
        out: dict[int, None] = {}
        for group in groups:
            out[group] = None
            members = unit.get(group)
            if members is not None:
                out.update(dict.fromkeys(members))
        return list(out)

    def view(self, group: int) -> MessageGroup:
        found = self.views.get(group)
        if found is None:
            found = self.views[group] = MessageGroup._of(self, group)
        return found

    def byte_count(self, group: int) -> int:
        found = self.bytes.get(group)
        if found is None:
            found = 0
            for message in self.messages(group):
                for text in message.payload_texts():
                    found += len(text) if text.isascii() else len(text.encode("utf-8"))
            self.bytes[group] = found
        return found


class MessageGroup:
    """Messages that are kept or excluded together.

    A tool-call group holds the assistant message that made the calls and every
    result that answers them, so excluding it can never separate a call from its
    result.  ``orphan`` flags a group holding a tool result that answers no call
    in it (input that was already broken); such a group is never collapsed into
    text.  ``turn`` is ``None`` for system groups and for summaries written by
    summarisation (they belong to no turn); messages before the first user
    message are turn 0.

    An index hands out one object per group, always the same, reading the
    group's current state; a group built directly (to insert into an index) holds
    its own state until an index takes it in.
    """

    __slots__ = ("_id", "_replaced", "_table")

    _table: _Table
    _id: int
    _replaced: tuple[MessageGroup, ...]  # what a group built outside an index stands in for

    def __init__(
        self,
        kind: GroupKind,
        messages: Sequence[Message],
        turn: int | None,
        token_count: int,
        *,
        orphan: bool = False,
        origin: str = "input",
        replaces: tuple[MessageGroup, ...] = (),
    ) -> None:
        # A detached group: a one-row table of its own until an index adopts it.
        table = _Table()
        self._table = table
        self._id = table.add(kind, list(messages), turn, token_count, origin=origin)
        if orphan:
            table.orphan.add(self._id)
        self._replaced = tuple(replaces)

    @classmethod
    def _of(cls, table: _Table, group: int) -> MessageGroup:
        view = cls.__new__(cls)
        view._table = table
        view._id = group
        view._replaced = ()  # set, so reading ``replaces`` never raises and catches on the way
        return view

    @property
    def kind(self) -> GroupKind:
        return self._table.kind[self._id]

    @property
    def turn(self) -> int | None:
        return self._table.turn[self._id]

    @property
    def messages(self) -> list[Message]:
        """The group's messages, in order (a new list on every read)."""
        return self._table.messages(self._id)

    @property
    def token_count(self) -> int:
        return self._table.tokens[self._id]

    @property
    def excluded(self) -> bool:
        return self._table.reason[self._id] is not None

    @property
    def exclusion_reason(self) -> str | None:
        return self._table.reason[self._id]

    @property
    def orphan(self) -> bool:
        return self._id in self._table.orphan

    @property
    def origin(self) -> str:
        return self._table.origin[self._id]

    @property
    def replaces(self) -> tuple[MessageGroup, ...]:
        """The groups a summary stands in for (empty for other groups)."""
        table = self._table
        replaced = table.replaces[self._id]
        if replaced is None:
            return self._replaced
        if isinstance(replaced, int):
            return (table.view(replaced),)
        return tuple(map(table.view, replaced))

    @property
    def call_ids(self) -> frozenset[str] | None:
        asked = self._table.call_ids.get(self._id)
        return frozenset((asked,)) if isinstance(asked, str) else asked

    @property
    def unit(self) -> tuple[MessageGroup, ...]:
        """The groups kept or excluded together with this one, itself included, in order: more
        than one when a call's results sit apart from it (design.md#units)."""
        members = self._table.unit.get(self._id)
        return (self,) if members is None else tuple(map(self._table.view, members))

    @property
    def message_count(self) -> int:
        return self._table.size[self._id]

    @property
    def byte_count(self) -> int:
        """UTF-8 bytes of the payload (text, reasoning, call names and arguments, results)."""
        return self._table.byte_count(self._id)

    @property
    def included(self) -> bool:
        return not self.excluded

    @property
    def is_complete(self) -> bool:
        """For a tool-call group: every call has a result.  Other groups are always complete."""
        return self._id not in self._table.unanswered

    def __repr__(self) -> str:
        state = f"excluded:{self.exclusion_reason}" if self.excluded else "included"
        return (
            f"MessageGroup({self.kind.value}, turn={self.turn}, messages={self.message_count}, "
            f"tokens={self.token_count}, {state})"
        )


class _Groups(Sequence[MessageGroup]):
    """Groups of an index by id, made into objects only when read (an event lists thousands)."""

    __slots__ = ("_ids", "_table")

    def __init__(self, table: _Table, ids: Sequence[int]) -> None:
        self._table = table
        self._ids = tuple(ids)

    @overload
    def __getitem__(self, item: int) -> MessageGroup: ...

    @overload
    def __getitem__(self, item: slice) -> tuple[MessageGroup, ...]: ...

    def __getitem__(self, item: int | slice) -> MessageGroup | tuple[MessageGroup, ...]:
        if isinstance(item, slice):
            return tuple(map(self._table.view, self._ids[item]))
        return self._table.view(self._ids[item])

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[MessageGroup]:
        return map(self._table.view, self._ids)

    def __repr__(self) -> str:
        return f"<{len(self._ids)} groups>"


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """One thing a strategy did, for reports and the CLI."""

    strategy: str
    action: str  # "excluded", "collapsed", "summarized", "restored", "failed", "fallback"
    kind: str | None = None
    turn: int | None = None
    messages: int = 0
    tokens: int = 0
    detail: str = ""
    usage: Any = field(default=None, compare=False)
    groups: Sequence[MessageGroup] = field(default=(), compare=False, repr=False)


class GroupColumns:
    """The group table's columns, read-only, by group id: what a strategy working by id reads.

    The built-in strategies read groups this way, and a strategy of your own can too (see
    :meth:`MessageIndex.live_ids`).  These are the table's own lists, not copies, so reading
    them costs nothing however long the history is; change groups only through the index
    (:meth:`MessageIndex.exclude_ids` and the methods beside it), which keeps the metrics right.
    """

    __slots__ = ("_table", "kind", "orphan", "reason", "size", "tokens", "turn", "unanswered", "unit")

    def __init__(self, table: _Table) -> None:
        self.kind: Sequence[GroupKind] = table.kind
        self.turn: Sequence[int | None] = table.turn
        self.tokens: Sequence[int] = table.tokens
        self.size: Sequence[int] = table.size
        self.reason: Sequence[str | None] = table.reason  # None while the group is included
        # Groups kept or excluded together although not adjacent: each member -> all members.
        self.unit: Mapping[int, Sequence[int]] = table.unit
        self.orphan: AbstractSet[int] = table.orphan  # groups holding a result no call of theirs asked for
        self.unanswered: Mapping[int, str | frozenset[str]] = table.unanswered  # calls still waiting
        self._table = table

    @property
    def call_ids(self) -> Mapping[int, str | frozenset[str]]:
        """The calls each tool-call group opened (the id itself for a single call)."""
        return self._table.call_ids
