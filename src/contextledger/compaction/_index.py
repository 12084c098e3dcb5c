"""The message index: a flat message list seen as atomic groups, with running metrics.

Strategies never delete anything.  They mark groups excluded (with a reason) or
insert summary groups, and the *projection* — the included messages, in
order — is what gets sent.  Every metric a trigger reads is a running total
kept up to date on each exclusion, so checking a trigger is O(1) and a
strategy that excludes k groups costs O(k), not O(k·n).

Appending messages to an indexed history groups and counts only what was
appended; if earlier messages changed, the index is rebuilt.

The groups are kept as columns (one list per attribute, indexed by a group id)
rather than as one object per group: indexing a long history then costs a few
list appends per message, and a strategy excluding or collapsing thousands of
groups works on whole columns at once.  :class:`MessageGroup` objects are made
on demand, as views of a group's row, and are the same object every time.
"""

from __future__ import annotations

import gc
import itertools
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from itertools import accumulate, compress, repeat
from operator import add, ne, sub
from typing import Any, cast, overload

from contextledger.exceptions import CompactionError, InvalidMessageError
from contextledger.messages import (
    SUMMARY_SOURCE_PROPERTY,
    FunctionCallContent,
    FunctionResultContent,
    Message,
    ReasoningContent,
    TextContent,
    answered_ids,
    assistant_text_message,
    opened_ids,
)
from contextledger.tokenizers import CALL_OVERHEAD, MESSAGE_OVERHEAD, CharacterEstimatorTokenizer, Tokenizer

__all__ = ["CompactionEvent", "GroupKind", "MessageGroup", "MessageIndex", "gc_paused"]


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
    """Every group's attributes, one column each, indexed by group id (ids in creation order).

    A group's messages are the run ``pool[first:first + size]``.  The pool holds
    the indexed messages in order (a call and its results are adjacent), then
    what strategies write, and copies of the rare group that had to grow where it
    was not at the end (see :meth:`relocate`).  Rare attributes are sparse: a
    dict or set holding only the groups that have them.
    """

    __slots__ = (
        "bytes",
        "call_ids",
        "first",
        "kind",
        "later",
        "later_memo",
        "later_properties",
        "origin",
        "orphan",
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
        self.call_ids: dict[int, str | frozenset[str]] = {}
        self.unanswered: dict[int, str | frozenset[str]] = {}  # calls still waiting for a result
        self.orphan: set[int] = set()
        # Groups of one unit that are not adjacent (a result after an approval note or a user
        # message, an approval and its response): each member -> the unit's members, one shared
        # list (SPEC §11).  Such members are excluded and included together, always.
        self.unit: dict[int, list[int]] = {}
        self.origin: list[str] = []  # "input", or what wrote a summary
        # What a summary group stands in for: one group's id, several ids, or None.
        self.replaces: list[int | tuple[int, ...] | None] = []
        self.bytes: dict[int, int] = {}  # byte counts computed so far
        self.views: dict[int, MessageGroup] = {}
        # Summaries whose one-text message is written only when it is first read (in a pipeline
        # most collapsed groups are excluded again right away): group id -> the text.  Their pool
        # entry is None until then; the message gets these properties and this tokenizer's memo.
        self.later: dict[int, str] = {}
        self.later_properties: Mapping[str, Any] = {}
        self.later_memo: object = None

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

    def write(self, groups: Iterable[int]) -> None:
        """Write deferred summaries' messages (see ``later``)."""
        pool, first, tokens, later = self.pool, self.first, self.tokens, self.later
        properties, name = self.later_properties, self.later_memo
        memos: dict[int, tuple[object, int]] = {}
        with gc_paused():  # thousands of small objects: one collector pass afterwards, not many
            for group in groups:
                count = tokens[group]
                memo = memos.get(count)
                if memo is None:
                    memo = memos[count] = (name, count)
                pool[first[group]] = assistant_text_message(later.pop(group), properties, memo)

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
    _replaced: tuple[MessageGroup, ...]  # only on a group built outside an index

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
            return getattr(self, "_replaced", ())
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
        than one when a call's results sit apart from it (SPEC §11)."""
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


def _asked(call_id: str, asked: str | frozenset[str]) -> bool:
    """Whether a call group's call ids (one id, or a set of them) include ``call_id``."""
    return call_id == asked if isinstance(asked, str) else call_id in asked


def _summary_turn(message: Message, turn: int) -> int | None:
    # Tool-result summaries stand in for a tool group and stay in its turn; a conversation
    # summary belongs to no turn, so it never keeps an old turn alive.
    return turn if message.additional_properties.get(SUMMARY_SOURCE_PROPERTY) == "tool_results" else None


class MessageIndex:
    """A flat message list grouped into atomic units, with included/excluded state and metrics.

    Build one from a message list (``MessageIndex(messages, tokenizer=...)``),
    let strategies mark it, then read :meth:`projection`.  Reuse it across calls
    with :meth:`update` so only new messages are grouped and counted.
    """

    def __init__(self, messages: Iterable[Message] = (), *, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else CharacterEstimatorTokenizer()
        self.events: list[CompactionEvent] = []
        self._reset()
        self.append(messages)

    # Building -------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._table = _Table()
        # The included groups, in conversation order: key -> group id.  A group's key is its own
        # id, except for a replacement, which holds the key of the group whose place it took.
        # Strategies, triggers and the projection read only this, so a call costs
        # O(included + appended), not O(whole history).
        self._live: dict[int, int] = {}
        self._live_key: dict[int, int] = {}  # replacement id -> the key it holds in _live
        self._order: list[int] = []  # every group id in conversation order, but for the insertions below
        # Groups inserted since the order was last read, each just before its anchor, in the order
        # they were inserted: two flat lists, so inserting thousands of summaries costs two extends.
        self._anchors: list[int] = []
        self._inserted: list[int] = []
        self._source: list[Message] = []
        self._turn = 0
        self._open_tool: int | None = None
        self._provisional: list[int] = []  # trailing reasoning-only groups that may still join a call
        self._waiting: dict[str, int] = {}  # call id -> the group whose call still waits for it
        self._linked: list[int] = []  # earlier groups the last append linked a new result to
        self.total_groups = 0
        self.total_messages = 0
        self.total_tokens = 0
        self.included_groups = 0
        self.included_messages = 0
        self.included_tokens = 0
        self.included_non_system_groups = 0
        self.included_non_system_messages = 0
        self.included_tool_call_groups = 0
        self.included_turns = 0
        # Included groups per turn, indexed by turn (turn 0 is never counted as a turn).
        self._turn_groups: list[int] = [0]
        self.total_turns = 0

    def _count(self, group: int, sign: int) -> None:
        """Add (sign=1) or remove (sign=-1) one group's contribution to the included metrics."""
        table = self._table
        size = sign * table.size[group]
        self.included_groups += sign
        self.included_messages += size
        self.included_tokens += sign * table.tokens[group]
        kind = table.kind[group]
        if kind is not _SYSTEM:
            self.included_non_system_groups += sign
            self.included_non_system_messages += size
            if kind is _TOOL_CALL:
                self.included_tool_call_groups += sign
        turn = table.turn[group]
        if turn:
            before = self._turn_groups[turn]
            after = before + sign
            self._turn_groups[turn] = after
            if before == 0 and after > 0:
                self.included_turns += 1
            elif before > 0 and after == 0:
                self.included_turns -= 1

    def _tally(
        self,
        groups: Iterable[int],
        sign: int,
        *,
        totals: bool = True,
        admit: bool = False,
        exclude: str | None = None,
        fresh: bool = False,
    ) -> list[int]:
        """Add (sign=1) or remove (sign=-1) many groups' contributions: totals, and the included
        metrics of the included ones.  With ``admit`` the included ones also join the ordered set
        of included groups; with ``exclude`` (a reason) they are excluded as they are counted out.
        Returns the included ones, each once, in order; ``fresh`` says the caller knows that is
        all of them.

        Every pass over the groups is a C-level loop over the columns (map, sum, Counter), so
        excluding thousands of groups costs little more than a Python loop over their turns.
        """
        table = self._table
        ids = groups if isinstance(groups, list) else list(groups)
        sizes, tokens = table.size, table.tokens
        if totals:
            self.total_groups += sign * len(ids)
            self.total_messages += sign * sum(map(sizes.__getitem__, ids))
            self.total_tokens += sign * sum(map(tokens.__getitem__, ids))
        reasons = table.reason
        if fresh:
            included = ids
        else:
            included = [group for group in dict.fromkeys(ids) if reasons[group] is None]
        if not included:
            return included
        live = self._live
        if exclude is not None:
            for group in included:
                reasons[group] = exclude
            deque(map(live.pop, self._keys(included)), maxlen=0)
        elif admit:
            live.update(zip(self._keys(included), included))
        counts = list(map(sizes.__getitem__, included))
        kinds = list(map(table.kind.__getitem__, included))
        messages = sum(counts)
        systems = kinds.count(_SYSTEM)
        system_messages = sum(size for size, kind in zip(counts, kinds) if kind is _SYSTEM) if systems else 0
        self.included_groups += sign * len(included)
        self.included_messages += sign * messages
        self.included_tokens += sign * sum(map(tokens.__getitem__, included))
        self.included_non_system_groups += sign * (len(included) - systems)
        self.included_non_system_messages += sign * (messages - system_messages)
        self.included_tool_call_groups += sign * kinds.count(_TOOL_CALL)
        self._add_turns(map(table.turn.__getitem__, included), sign)
        return included

    def _add_turns(self, turns: Iterable[int | None], sign: int) -> None:
        """Count groups of these turns in (sign=1) or out (sign=-1) of the per-turn counts."""
        per_turn = Counter(turns)
        per_turn.pop(None, None)
        per_turn.pop(0, None)
        if not per_turn:
            return
        turn_groups = self._turn_groups
        keys = cast(list[int], list(per_turn))
        before = list(map(turn_groups.__getitem__, keys))
        after = list(map(add, before, per_turn.values() if sign > 0 else [-count for count in per_turn.values()]))
        for turn, count in zip(keys, after):
            turn_groups[turn] = count
        # A turn counts while any of its groups is included.
        self.included_turns += before.count(0) if sign > 0 else -after.count(0)

    def _keys(self, groups: Iterable[int]) -> Iterator[int]:
        """Each group's key among the included groups (its own id, unless it is a replacement)."""
        return map(self._live_key.get, groups, groups)  # dict.get(id, default=id)

    def append(self, messages: Iterable[Message]) -> None:
        """Group and count ``messages`` as if they followed what is already indexed.

        Only the tail that can still change (an open tool-call group waiting for
        results, and reasoning messages that may belong to the next call) is
        re-examined; everything before it is left alone.
        """
        new = messages if isinstance(messages, list) else list(messages)
        if not new:
            return
        if not all(map(isinstance, new, repeat(Message))):
            for position, message in enumerate(new):
                if not isinstance(message, Message):
                    raise InvalidMessageError(
                        f"item {len(self._source) + position} is {type(message).__name__}, not a Message; "
                        "convert OpenAI dicts with contextledger.from_openai first"
                    )
        with gc_paused():
            self._append(new)

    # Plain batches: most histories are user text, assistant text, and calls answered right away.
    # Such a run is grouped by a lean loop that only records where each group starts; sizes and
    # tokens come afterwards from those starts, in C.  The first message it does not handle (or an
    # open tail from the last append) goes to the general loop, which continues from there.
    _plain_batches = True

    def _append(self, new: list[Message]) -> None:
        tokenizer = self.tokenizer
        done = 0
        if self._plain_batches and self._open_tool is None and not self._provisional:
            if type(tokenizer) is CharacterEstimatorTokenizer and [m._token_memo for m in new].count(None) == len(new):
                # The estimate is counted in the same pass (each message is read once, which
                # matters on a long history that does not fit the caches).
                done = self._append_plain(new, None, tokenizer)
                if done < len(new):
                    rest = new[done:]
                    self._append_any(rest, tokenizer.count_messages(rest))
                return
            counts = tokenizer.count_messages(new)
            done = self._append_plain(new, counts, None)
            if done < len(new):
                self._append_any(new[done:], counts[done:])
            return
        self._append_any(new, tokenizer.count_messages(new))

    def _append_plain(
        self, new: list[Message], counts: list[int] | None, estimator: CharacterEstimatorTokenizer | None
    ) -> int:
        """Group the plain run at the start of ``new``; returns how many messages it took.

        With ``estimator`` (and no ``counts``) it also counts each message it takes: then a plain
        message is also one content and no author name, which is what the estimate reads."""
        table = self._table
        base = len(table.pool)
        kinds: list[GroupKind] = []
        turns: list[int | None] = []
        starts: list[int] = []  # where each group starts in ``new``
        add_kind, add_turn, add_start = kinds.append, turns.append, starts.append
        calls: list[int] = []  # groups made by a call, as positions in ``kinds``
        asked: list[str] = []  # and the id of that call
        turn = first_turn = self._turn
        systems = 0
        open_call: str | None = None  # the id of a call still waiting for its result
        answered = False  # whether the last group is a call that got its result
        text_type, call_type, result_type = TextContent, FunctionCallContent, FunctionResultContent
        estimate = estimator is not None
        counted: list[int] = []
        add_count = counted.append
        per_token = estimator.characters_per_token if estimator is not None else 1
        rounding = per_token - 1
        overhead, call_overhead = MESSAGE_OVERHEAD, MESSAGE_OVERHEAD + CALL_OVERHEAD
        position = -1
        for message in new:
            position += 1
            if estimate and message.author_name is not None:
                break
            role = message.role
            if role == "assistant":
                try:
                    (content,) = message.contents
                except ValueError:
                    break
                if message.additional_properties:
                    break
                kind = type(content)
                if kind is text_type:
                    if open_call is not None:  # an assistant text while a call waits: not plain
                        break
                    if estimate:
                        add_count(overhead + (len(content.text) + rounding) // per_token)  # type: ignore[union-attr]
                    add_kind(_TEXT)
                elif kind is call_type:
                    if open_call is not None:  # a second call before the first is answered
                        break
                    call_id = content.call_id  # type: ignore[union-attr]
                    if estimate:
                        chars = len(content.name) + len(content.arguments)  # type: ignore[union-attr]
                        add_count(call_overhead + (chars + rounding) // per_token)
                    calls.append(len(kinds))
                    asked.append(call_id)
                    add_kind(_TOOL_CALL)
                    add_turn(turn)
                    add_start(position)
                    open_call = call_id
                    answered = False
                    continue
                else:
                    break
            elif role == "tool":
                if open_call is None:
                    break
                try:
                    (content,) = message.contents
                except ValueError:
                    break
                if type(content) is not result_type or content.call_id != open_call:
                    break
                if estimate:
                    add_count(overhead + (len(content.result) + rounding) // per_token)
                open_call = None
                answered = True
                continue
            else:
                if open_call is not None:
                    break
                try:
                    (content,) = message.contents
                except ValueError:
                    break
                if type(content) is not text_type:  # an approval response, say: the general loop
                    break
                if estimate:
                    add_count(overhead + (len(content.text) + rounding) // per_token)
                if role == "user":
                    turn += 1
                    add_kind(_USER)
                else:  # system
                    add_kind(_SYSTEM)
                    add_turn(None)
                    add_start(position)
                    systems += 1
                    answered = False
                    continue
            add_turn(turn)
            add_start(position)
            answered = False
        else:
            position += 1
        # ``position`` is now how many messages were taken.  A call left waiting stays open for the
        # general loop, which takes over from the same state.
        if position == 0:
            return 0
        count = len(kinds)
        ends = [*starts[1:], position]
        sizes = list(map(sub, ends, starts))
        if counts is None:
            counts = counted
            if estimator is not None:
                estimator._memoise(new[:position] if position < len(new) else new, counted)
        reached = list(accumulate(counts[:position], initial=0))
        tokens = list(map(sub, map(reached.__getitem__, ends), map(reached.__getitem__, starts)))
        first = len(table.kind)
        # One int object per id and per position, shared by every column that holds it (a long
        # history would otherwise make, and later free, several hundred thousand of them).
        ids = list(range(first, first + count))
        table.pool.extend(new[:position] if position < len(new) else new)
        table.kind.extend(kinds)
        table.turn.extend(turns)
        table.tokens.extend(tokens)
        table.first.extend(map(add, starts, repeat(base)) if base else starts)
        table.size.extend(sizes)
        table.reason.extend(repeat(None, count))
        table.origin.extend(repeat("input", count))
        table.replaces.extend(repeat(None, count))
        table.call_ids.update(zip(map(add, calls, repeat(first)), asked))
        if open_call is not None:
            table.unanswered[first + count - 1] = open_call
            self._waiting[open_call] = first + count - 1
        if open_call is not None or answered:
            self._open_tool = first + count - 1  # results may still join it, as in the general loop
        self._turn = self.total_turns = turn
        self._turn_groups.extend(repeat(0, turn - first_turn))
        self._source.extend(new[:position] if position < len(new) else new)
        self._order.extend(ids)
        self._live.update(zip(ids, ids))
        total = reached[position]
        self.total_groups += count
        self.total_messages += position
        self.total_tokens += total
        self.included_groups += count
        self.included_messages += position
        self.included_tokens += total
        self.included_non_system_groups += count - systems
        self.included_non_system_messages += position - systems
        self.included_tool_call_groups += len(calls)
        # Per-turn counts: the new turns are all new entries (each starts with its user group),
        # so they are written in one slice; the turn already open may gain groups too.
        per_turn = Counter(turns)
        if first_turn:
            added = per_turn.get(first_turn, 0)
            if added:
                before = self._turn_groups[first_turn]
                self._turn_groups[first_turn] = before + added
                self.included_turns += before == 0
        if turn > first_turn:
            self._turn_groups[first_turn + 1 :] = map(per_turn.__getitem__, range(first_turn + 1, turn + 1))
            self.included_turns += turn - first_turn
        return position

    def _append_any(self, new: list[Message], counts: list[int]) -> None:
        """The general loop (see :meth:`_group_any`); then a new result linked to a call that a
        strategy had excluded is excluded with it, for the same reason: exclusions survive an
        append, and a unit is never split (SPEC §11)."""
        self._linked = []
        self._group_any(new, counts)
        reasons = self._table.reason
        for group in self._linked:
            reason = reasons[group]
            if reason is not None:
                self._exclude([group], reason)

    def _link_answers(self, group: int, ids: Iterable[str]) -> bool:
        """Link ``group`` to the earlier groups whose waiting calls ``ids`` answer; True if every
        id answered such a call."""
        table, waiting = self._table, self._waiting
        matched = True
        for call_id in ids:
            call_group = waiting.pop(call_id, None)
            if call_group is None or call_group == group:
                matched = matched and call_group == group
                continue
            table.answer(call_group, (call_id,))
            table.link(call_group, group)
            self._linked.append(call_group)
        return matched

    def _group_any(self, new: list[Message], counts: list[int]) -> None:
        """The general loop: every grouping rule, and an open tail from the last append."""
        table = self._table
        waiting = self._waiting
        kinds, turns, tokens, firsts, sizes = table.kind, table.turn, table.tokens, table.first, table.size
        call_ids_of, unanswered, orphans = table.call_ids, table.unanswered, table.orphan
        open_tool = self._open_tool
        provisional = self._provisional
        if provisional and (
            any(table.reason[group] is not None for group in provisional)
            or (open_tool is not None and table.reason[open_tool] is not None)
        ):
            # A strategy already excluded some of these; merging them into a call group now could
            # flip a message's inclusion behind its back, so they stay the groups they were.
            provisional = []
        # The still-open tail (a call waiting for its results, reasoning that may precede a call)
        # is taken out of the metrics and counted again, as it ends up, below.  Otherwise every
        # group made here is new and included, and the metrics follow from a few sums.
        tail = ([open_tool] if open_tool is not None else []) + provisional
        reopened = bool(tail)
        if reopened:
            self._tally(tail, -1)
        dead: list[int] = []  # groups merged into a call group (reasoning before or between results)
        origins: dict[int, str] = {}  # summaries among the input, by what wrote them
        start = len(kinds)
        turn = first_turn = self._turn
        systems = tool_groups = 0
        text_type, call_type, result_type, reasoning_type = (
            TextContent,
            FunctionCallContent,
            FunctionResultContent,
            ReasoningContent,
        )
        add_kind, add_turn, add_tokens, add_first, add_size = (
            kinds.append,
            turns.append,
            tokens.append,
            firsts.append,
            sizes.append,
        )
        position = len(table.pool) - 1
        table.pool.extend(new)

        def join(group: int, message: Message, count: int, position: int, answers: list[str], belongs: bool) -> None:
            """Add a result message to the open call group ``group`` (``belongs``: it answers it)."""
            nonlocal provisional
            if provisional:  # reasoning between results joins the tool group
                table.merge(group, [group, *provisional])
                dead.extend(provisional)
                provisional = []
            tokens[group] += count
            if firsts[group] + sizes[group] == position:
                sizes[group] += 1
            else:  # not adjacent (something was added to the pool since): move the group
                table.relocate(group, [message])
            for call_id in answers:
                if waiting.get(call_id) == group:
                    del waiting[call_id]
            table.answer(group, answers)
            if not belongs:
                orphans.add(group)

        def answer_group(count: int, position: int, answers: list[str], turn: int) -> None:
            """A message answering earlier calls (not the open one): its own tool group, one
            unit with theirs (SPEC §11); flagged orphan if some id answers no waiting call."""
            group = len(kinds)
            kinds.append(_TOOL_CALL)
            turns.append(turn)
            tokens.append(count)
            firsts.append(position)
            sizes.append(1)
            if not self._link_answers(group, answers):
                orphans.add(group)

        for message, count in zip(new, counts):
            position += 1
            contents = message.contents
            only: type | None = type(contents[0]) if len(contents) == 1 else None
            role = message.role
            if role == "assistant":
                if only is text_type and not message.additional_properties:
                    # The common case, decided without scanning anything.
                    open_tool = None
                    group = len(kinds)
                    add_kind(_TEXT)
                    add_turn(turn)
                    add_tokens(count)
                    add_first(position)
                    add_size(1)
                    if provisional:  # reasoning right before a reply belongs to it
                        table.merge(group, [*provisional, group])
                        dead.extend(provisional)
                        provisional = []
                    continue
                asked: str | frozenset[str]
                answers: list[str] = []
                if only is call_type:
                    asked = contents[0].call_id  # type: ignore[union-attr]
                    opened = [asked]
                else:
                    opened = opened_ids(contents)
                    answers = answered_ids(contents)
                    asked = frozenset(opened)
                if opened:
                    group = len(kinds)
                    add_kind(_TOOL_CALL)
                    add_turn(turn)
                    add_tokens(count)
                    add_first(position)
                    add_size(1)
                    if provisional:  # reasoning right before a call belongs to it
                        table.merge(group, [*provisional, group])
                        dead.extend(provisional)
                        provisional = []
                    call_ids_of[group] = asked
                    left = [call_id for call_id in opened if call_id not in answers] if answers else opened
                    if left:
                        unanswered[group] = left[0] if len(left) == 1 else frozenset(left)
                        waiting.update(dict.fromkeys(left, group))
                    earlier = [call_id for call_id in answers if call_id not in asked]
                    if earlier and not self._link_answers(group, earlier):
                        orphans.add(group)
                    open_tool = group
                    tool_groups += 1
                    continue
                if answers:  # a hosted result or similar, with no call of its own
                    asked_open = call_ids_of.get(open_tool) if open_tool is not None else None
                    if (
                        open_tool is not None
                        and asked_open is not None
                        and all(_asked(call_id, asked_open) for call_id in answers)
                    ):
                        join(open_tool, message, count, position, answers, True)
                        continue
                    open_tool = None
                    provisional = []
                    answer_group(count, position, answers, turn)
                    tool_groups += 1
                    continue
                group = len(kinds)
                add_first(position)
                add_size(1)
                add_tokens(count)
                if message.is_summary:
                    open_tool = None
                    if provisional:
                        provisional = []
                    origin = message.additional_properties.get(SUMMARY_SOURCE_PROPERTY, "summarization")
                    origins[group] = str(origin)
                    add_kind(_SUMMARY)
                    add_turn(_summary_turn(message, turn))
                elif contents and all(type(c) is reasoning_type for c in contents):
                    add_kind(_TEXT)  # reasoning alone: may yet join the call that follows
                    add_turn(turn)
                    provisional.append(group)
                else:
                    open_tool = None
                    if provisional:
                        provisional = []
                    add_kind(_TEXT)
                    add_turn(turn)
            elif role == "user":
                open_tool = None
                if provisional:
                    provisional = []
                turn += 1
                if only is not text_type:  # an approval response answers its request, wherever it is
                    answers = answered_ids(contents)
                    if answers:
                        self._link_answers(len(kinds), answers)
                add_kind(_USER)
                add_turn(turn)
                add_tokens(count)
                add_first(position)
                add_size(1)
            elif role == "tool":
                asked_ids = call_ids_of.get(open_tool) if open_tool is not None else None
                if asked_ids is not None and only is result_type:
                    answers = [contents[0].call_id]  # type: ignore[union-attr]
                    belongs = answers[0] == asked_ids if type(asked_ids) is str else answers[0] in asked_ids
                else:
                    answers = answered_ids(contents)
                    belongs = (
                        asked_ids is not None
                        and bool(answers)
                        and all(_asked(call_id, asked_ids) for call_id in answers)
                    )
                if open_tool is not None and belongs:
                    join(open_tool, message, count, position, answers, True)
                    continue
                if answers and any(call_id in waiting for call_id in answers):
                    # A result of an earlier call, after other messages (an approval, a note, a
                    # user reply): its own group, one unit with its call (SPEC §11).
                    open_tool = None
                    provisional = []
                    answer_group(count, position, answers, turn)
                    tool_groups += 1
                    continue
                # A result nobody asked for, while a call still waits for its own, stays inside the
                # open group (flagged), so that call and its results are never split apart.
                if open_tool is not None and open_tool in unanswered:
                    join(open_tool, message, count, position, answers, False)
                else:
                    open_tool = None
                    if provisional:
                        provisional = []
                    orphans.add(len(kinds))
                    add_kind(_TOOL_CALL)
                    add_turn(turn)
                    add_tokens(count)
                    add_first(position)
                    add_size(1)
                    tool_groups += 1
            else:  # system
                open_tool = None
                if provisional:
                    provisional = []
                add_kind(_SYSTEM)
                add_turn(None)
                add_tokens(count)
                add_first(position)
                add_size(1)
                systems += 1
        made = len(kinds) - start
        table.reason.extend(repeat(None, made))
        table.origin.extend(repeat("input", made))
        table.replaces.extend(repeat(None, made))
        for group, origin in origins.items():
            table.origin[group] = origin
        self._open_tool = open_tool
        self._provisional = provisional
        self._turn = self.total_turns = turn
        self._turn_groups.extend(repeat(0, turn - first_turn))
        self._source.extend(new)
        if table.bytes and tail:
            table.bytes.pop(tail[0], None)  # an open group's byte count changes as results join
        fresh = list(range(start, len(kinds)))
        order, live = self._order, self._live
        if dead:
            gone = set(dead)
            fresh = [group for group in fresh if group not in gone]
            old = [group for group in tail if group in gone]
            if old:  # merged groups from the last append leave the order and the included set
                self._flush()
                self._order = order = [group for group in order if group not in gone]
                for group in old:
                    live.pop(group, None)
                tail = [group for group in tail if group not in gone]
        order.extend(fresh)
        if reopened:
            self._tally(tail + fresh, 1, admit=True)
            return
        live.update(zip(fresh, fresh))
        size = len(new)
        total = sum(counts)
        made = len(fresh)
        self.total_groups += made
        self.total_messages += size
        self.total_tokens += total
        self.included_groups += made
        self.included_messages += size
        self.included_tokens += total
        self.included_non_system_groups += made - systems
        self.included_non_system_messages += size - systems
        self.included_tool_call_groups += tool_groups
        self._add_turns(map(turns.__getitem__, fresh), 1)

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

    # Marking ----------------------------------------------------------------------------------

    def _id_of(self, group: MessageGroup) -> int:
        if group._table is not self._table:
            raise CompactionError(f"{group!r} is not a group of this index; read groups from index.groups")
        return group._id

    def exclude(self, group: MessageGroup, reason: str) -> bool:
        """Mark a group excluded; returns False if it already was."""
        return bool(self._exclude([self._id_of(group)], reason))

    def exclude_many(self, groups: Iterable[MessageGroup], reason: str) -> list[MessageGroup]:
        """Exclude several groups in one pass; returns those that were not already excluded."""
        return list(map(self._table.view, self._exclude(list(map(self._id_of, groups)), reason)))

    def _exclude(self, groups: list[int], reason: str, *, fresh: bool = False) -> list[int]:
        """Exclude groups by id; returns those that were not already excluded, in order.

        ``fresh`` says every group is included and listed once (the strategies' case), which
        saves checking.  A group in a unit with others (SPEC §11) takes them with it."""
        unit = self._table.unit
        if unit and not unit.keys().isdisjoint(groups):
            groups, fresh = self._table.with_units(groups), False
        if len(groups) == 1:  # the per-step path of strategies with an arbitrary target
            group = groups[0]
            if self._table.reason[group] is not None:
                return []
            self._count(group, -1)  # while still included, so its contribution is taken out
            self._table.reason[group] = reason
            del self._live[self._live_key.get(group, group)]
            return groups
        return self._tally(groups, -1, totals=False, exclude=reason, fresh=fresh)

    def include(self, group: MessageGroup) -> bool:
        """Undo an exclusion; returns False if the group was already included."""
        group_id = self._id_of(group)
        if self._table.reason[group_id] is None:
            return False
        self._include([group_id])
        return True

    def include_many(self, groups: Sequence[MessageGroup]) -> None:
        """Undo several exclusions (a failed summarisation restoring what it took)."""
        self._include(list(map(self._id_of, groups)))

    def _include(self, groups: Iterable[int]) -> None:
        table = self._table
        if table.unit:
            groups = table.with_units(groups)
        for group in groups:
            if table.reason[group] is not None:
                table.reason[group] = None
                self._count(group, 1)
        self._relive()

    def whole_units(self, groups: list[int], keep: set[int] | None = None) -> list[int]:
        """``groups`` without those in a unit with a group that must stay: when a boundary falls
        inside a unit, the unit is kept whole (a kept result keeps its call).  What must stay is
        ``keep``, or by default every included group not in ``groups``."""
        table = self._table
        unit = table.unit
        if not unit or unit.keys().isdisjoint(groups):
            return groups
        reasons = table.reason
        if keep is None:
            chosen = set(groups)
            return [
                group
                for group in groups
                if group not in unit or all(member in chosen or reasons[member] is not None for member in unit[group])
            ]
        return [group for group in groups if group not in unit or keep.isdisjoint(unit[group])]

    def _relive(self) -> None:
        """Rebuild the ordered set of included groups from the full order (O(n); only on restores)."""
        self._flush()
        reasons = self._table.reason
        self._live = {group: group for group in self._order if reasons[group] is None}
        self._live_key = {}

    def make_summary_groups(
        self,
        messages: Sequence[Message],
        *,
        turns: Sequence[int | None],
        origin: str,
        replaces: Sequence[tuple[MessageGroup, ...]],
    ) -> list[MessageGroup]:
        """Summary groups for many messages, counted in one tokenizer batch, not yet inserted."""
        counts = self.tokenizer.count_messages(messages)
        return [
            MessageGroup(_SUMMARY, [message], turn, tokens, origin=origin, replaces=source)
            for message, turn, tokens, source in zip(messages, turns, counts, replaces)
        ]

    def make_summary_group(
        self, message: Message, *, turn: int | None, origin: str, replaces: tuple[MessageGroup, ...]
    ) -> MessageGroup:
        """A summary group for ``message``, counted with this index's tokenizer, not yet inserted."""
        tokens = self.tokenizer.count_messages([message])[0]
        return MessageGroup(_SUMMARY, [message], turn, tokens, origin=origin, replaces=replaces)

    def _adopt(self, group: MessageGroup) -> int:
        """Take a group built outside the index (see :class:`MessageGroup`) into its table."""
        if group._table is self._table:
            return group._id
        own, row = group._table, group._id
        if len(own.kind) != 1 or own.views:
            raise CompactionError(f"{group!r} belongs to another index; build a new group for this one")
        replaced: tuple[MessageGroup, ...] = getattr(group, "_replaced", ())
        new = self._table.add(
            own.kind[row],
            own.messages(row),
            own.turn[row],
            own.tokens[row],
            reason=own.reason[row],
            origin=own.origin[row],
            replaces=tuple(map(self._id_of, replaced)),
        )
        if row in own.orphan:
            self._table.orphan.add(new)
        group._table, group._id = self._table, new
        self._table.views[new] = group
        return new

    def replace_many(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]], reason: str) -> None:
        """Exclude each original and insert its replacement just before it, in one pass.

        The replacements are new summary groups (see :meth:`make_summary_groups`).
        """
        self.account_replacements(pairs, reason)
        self.place_replacements(pairs)

    def account_replacements(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]], reason: str) -> None:
        """The metric half of :meth:`replace_many`: O(len(pairs)), so a strategy can check its
        target after every step.  Call :meth:`place_replacements` with all pairs before reading
        the groups or the projection."""
        originals = list(map(self._id_of, (original for original, _ in pairs)))
        if any(self._table.reason[original] is not None for original in originals):  # first: a refusal changes nothing
            raise CompactionError("replace_many: only included groups can be replaced")
        self._account(originals, [self._adopt(replacement) for _, replacement in pairs], reason)

    def place_replacements(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]]) -> None:
        """The structural half of :meth:`replace_many`: each replacement takes its original's
        place among the included groups (same key, same position), O(len(pairs))."""
        originals = list(map(self._id_of, (original for original, _ in pairs)))
        self._place(originals, [self._adopt(replacement) for _, replacement in pairs])

    def _replace(
        self,
        originals: list[int],
        messages: Sequence[Message | None],
        reason: str,
        *,
        origin: str,
        counts: list[int] | None = None,
    ) -> list[int]:
        """Replace each original (included, not a system group) by a one-message summary group in
        its turn, taking its place; the summaries are counted in one tokenizer batch unless
        ``counts`` are given (a None message is written later: see ``_Table.later``)."""
        replacements = self._summaries(originals, messages, origin, counts)
        self._account(originals, replacements, reason, usual=True)
        self._place(originals, replacements)
        return replacements

    def _summaries(
        self,
        originals: list[int],
        messages: Sequence[Message | None],
        origin: str,
        counts: list[int] | None = None,
    ) -> list[int]:
        """New summary groups (not yet placed) standing in for ``originals``, one message each."""
        table = self._table
        start, count = len(table.kind), len(messages)
        table.first.extend(range(len(table.pool), len(table.pool) + count))
        table.pool.extend(cast(Sequence[Message], messages))  # a None is written later
        table.size.extend(repeat(1, count))
        table.tokens.extend(counts if counts is not None else self.tokenizer.count_messages(messages))  # type: ignore[arg-type]
        table.kind.extend(repeat(_SUMMARY, count))
        table.turn.extend(map(table.turn.__getitem__, originals))
        table.reason.extend(repeat(None, count))
        table.origin.extend(repeat(origin, count))
        table.replaces.extend(originals)
        return list(range(start, start + count))

    def _defer(self, groups: list[int], texts: list[str], properties: Mapping[str, Any]) -> None:
        """Leave these summary groups' messages (one assistant text each, counted already) to be
        written when first read: the projection writes those it sends, a group view on demand."""
        table = self._table
        table.later.update(zip(groups, texts))
        table.later_properties = properties
        table.later_memo = self.tokenizer.name

    def _account(self, originals: list[int], replacements: list[int], reason: str, *, usual: bool = False) -> None:
        """Exclude the originals and count their replacements in (see account_replacements).

        ``usual`` says every pair is one non-system group for a one-message group of its turn
        (as :meth:`_summaries` makes them), which saves checking."""
        table = self._table
        kinds, turns, sizes, tokens = table.kind, table.turn, table.size, table.tokens
        plain = (
            [True]
            if usual
            else [
                turns[original] == turns[replacement] and kinds[original] is not _SYSTEM and sizes[replacement] == 1
                for original, replacement in zip(originals, replacements)
            ]
        )
        if all(plain):
            # The usual case, netted in one step: same turn, one non-system group for another,
            # so the turn and group counts do not move.
            added = sum(map(tokens.__getitem__, replacements))
            removed_messages = sum(map(sizes.__getitem__, originals))
            count = len(replacements)
            self.total_groups += count
            self.total_messages += count
            self.total_tokens += added
            self.included_messages += count - removed_messages
            self.included_non_system_messages += count - removed_messages
            self.included_tokens += added - sum(map(tokens.__getitem__, originals))
            replaced_kinds = list(map(kinds.__getitem__, originals))
            self.included_tool_call_groups += list(map(kinds.__getitem__, replacements)).count(
                _TOOL_CALL
            ) - replaced_kinds.count(_TOOL_CALL)
            reasons = table.reason
            for original in originals:
                reasons[original] = reason
            return
        for original, replacement, simple in zip(originals, replacements, plain):
            if simple:
                self._account([original], [replacement], reason)
            else:
                self._count(original, -1)
                table.reason[original] = reason
                self._tally([replacement], 1)

    def _place(self, originals: list[int], replacements: list[int]) -> None:
        """Each replacement takes its original's key (and so its position) among the included groups."""
        live, live_key = self._live, self._live_key
        keys = list(self._keys(originals))
        self._anchors.extend(originals)
        self._inserted.extend(replacements)
        live.update(zip(keys, replacements))
        live_key.update(zip(replacements, keys))

    def insert_before(self, anchor: MessageGroup, group: MessageGroup) -> None:
        """Insert ``group`` just before ``anchor``.

        Insertions are batched: the order is rebuilt once, the next time it is
        read, so inserting thousands of groups costs one pass, not one per group.
        """
        self._insert(self._id_of(anchor), self._adopt(group))

    def _insert(self, anchor: int, group: int) -> None:
        table = self._table
        self._anchors.append(anchor)
        self._inserted.append(group)
        self.total_groups += 1
        self.total_messages += table.size[group]
        self.total_tokens += table.tokens[group]
        if table.reason[group] is None:
            self._count(group, 1)
            self._relive()

    def _flush(self) -> None:
        """Put the groups inserted since the order was last read in their places."""
        if not self._inserted:
            return
        pending: dict[int, list[int]] = {}
        for anchor, group in zip(self._anchors, self._inserted):
            before = pending.get(anchor)
            if before is None:
                pending[anchor] = [group]
            else:
                before.append(group)
        self._anchors, self._inserted = [], []
        merged: list[int] = []

        def place(group: int) -> None:
            # A group inserted before another inserted group (a summary of summaries) lands first.
            inserted = pending.pop(group, None)
            if inserted is not None:
                for earlier in inserted:
                    place(earlier)
            merged.append(group)

        for group in self._order:
            if group in pending:
                place(group)
            else:
                merged.append(group)
        if pending:  # an anchor that is not in the index: a strategy bug, never silently dropped
            raise CompactionError("a summary group was anchored to a group that is not in this index")
        self._order = merged

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
        return sum(map(self._table.byte_count, self._live.values()))

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
        ids = self._live.values()
        if table.later:  # deferred summaries that are sent are written now, the others never
            table.write(table.later.keys() & ids)
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
        return list(map(self._table.view, self._live.values()))

    def newest_live(self) -> Iterator[MessageGroup]:
        """Included groups from the newest back; stop early to pay only for what you read."""
        return map(self._table.view, reversed(self._live.values()))

    def metrics(self) -> dict[str, int]:
        """Totals and included counts, for reports."""
        return {
            "groups": self.total_groups,
            "messages": self.total_messages,
            "tokens": self.total_tokens,
            "turns": self.total_turns,
            "included_groups": self.included_groups,
            "included_messages": self.included_messages,
            "included_tokens": self.included_tokens,
            "included_turns": self.included_turns,
        }

    def __len__(self) -> int:
        self._flush()
        return len(self._order)

    def __repr__(self) -> str:
        return (
            f"MessageIndex(groups={self.included_groups}/{self.total_groups}, "
            f"messages={self.included_messages}/{self.total_messages}, "
            f"tokens={self.included_tokens}/{self.total_tokens} ({self.tokenizer.name}))"
        )
