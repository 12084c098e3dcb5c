"""Marking: the one way groups change after grouping — excluded, included, replaced, inserted.

Strategies never delete anything.  They mark groups excluded (with a reason) or put summary
groups in, and the projection (the included messages, in order) is what gets sent.

Every change is made by group id, through the index's methods (``exclude_ids``,
``include_ids``, ``replace_ids``, ``collapse_ids``, ``insert_summary``), which hand it to the
:class:`Marking` part each :class:`MessageIndex` owns.  The built-in strategies use exactly
these, and so can a strategy of your own; the methods that take :class:`MessageGroup` objects
(``exclude``, ``replace_many``, ``insert_before``...) are thin wrappers over them.  Each keeps
the unit rule (design.md#units: a group in a unit takes the others with it) and tells the metrics
what changed.  Marking also keeps the order of the groups and which of them are included:
grouping hands it each appended batch.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import is_
from typing import Any, TypeVar, cast

from contextledger.compaction._metrics import Metrics
from contextledger.compaction._table import _SUMMARY, _SYSTEM, MessageGroup, _Table, gather
from contextledger.exceptions import CompactionError
from contextledger.messages import Message
from contextledger.messages._message import assistant_text_message
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer

__all__ = ["Marking"]

_V = TypeVar("_V")


class Marking:
    """Changing which groups are included, by id, with the metrics kept in step; and the order of
    the groups, which only grouping (appending) and marking (inserting) change."""

    def __init__(self, table: _Table, metrics: Metrics, tokenizer: Tokenizer) -> None:
        self._table = table
        self._metrics = metrics
        self._tokenizer = tokenizer
        # The included groups, in conversation order: key -> group id.  A group's key is its own
        # id, except for a replacement, which holds the key of the group whose place it took.
        self._live: dict[int, int] = {}
        # Included groups after every one in _live, in order, each its own key: appended groups not
        # yet put in _live.  A window over a long history excludes most of them again at once, and
        # cutting a run out of a list costs far less than a dict entry made and removed per group.
        self._tail: list[int] = []
        self._live_key: dict[int, int] = {}  # replacement id -> the key it holds in _live
        self._order: list[int] = []  # every group id in conversation order, but for pending insertions
        # Groups inserted since the order was last read, each just before its anchor, in the order
        # they were inserted: two flat lists, so inserting thousands of summaries costs two extends.
        self._anchors: list[int] = []
        self._inserted: list[int] = []
        # Groups no change may take while a strategy runs (a provider's compaction item and the
        # user message before it, whole units: see _boundary); empty but for that time.
        self.pinned: frozenset[int] | set[int] = frozenset()

    # Reading the order -------------------------------------------------------------------------

    def live_ids(self) -> list[int]:
        """The included groups' ids, in order."""
        return [*self._live.values(), *self._tail] if self._live else list(self._tail)

    def newest_ids(self) -> Iterator[int]:
        """The included groups' ids from the newest back."""
        tail = self._tail
        return chain(reversed(tail), reversed(self._live.values())) if tail else reversed(self._live.values())

    def order(self) -> list[int]:
        """Every group's id in conversation order, excluded ones included (the list itself: read only)."""
        self._flush()
        return self._order

    # Groups appended by grouping ---------------------------------------------------------------

    def append_included(self, groups: list[int]) -> None:
        """Put new groups, all included, after every group (the lean grouping loop's batch)."""
        self._order.extend(groups)
        self._tail.extend(groups)

    def append(self, fresh: list[int], included: list[int]) -> None:
        """Put ``fresh`` groups after every group, and count ``included`` (fresh ones, and groups of
        the last append's open tail already in place) among the included groups."""
        live = self._settled()
        self._order.extend(fresh)
        live.update(zip(self._keys(included), included) if self._live_key else zip(included, included))

    def drop_merged(self, gone: set[int]) -> None:
        """Take groups merged into a call group (reasoning of the last append's open tail) out of
        the order and the included groups."""
        self._flush()
        self._order = [group for group in self._order if group not in gone]
        live = self._settled()
        for group in gone:
            live.pop(group, None)

    def exclude_with(self, group: int, reason: str) -> None:
        """Exclude ``group`` (a new result linked to a call excluded for ``reason``) and its unit."""
        self._exclude([group], reason)

    def _settled(self) -> dict[int, int]:
        """The included groups as one ordered dict (the tail put in it), for changes by key."""
        tail = self._tail
        if tail:
            self._live.update(zip(tail, tail))
            self._tail = []
        return self._live

    def _keys(self, groups: Iterable[int]) -> Iterator[int]:
        """Each group's key among the included groups (its own id, unless it is a replacement)."""
        return map(self._live_key.get, groups, groups)  # dict.get(id, default=id)

    def checked_ids(self, groups: Iterable[int], what: str) -> list[int]:
        """Group ids from a caller, checked: a wrong id must fail here, not corrupt the metrics."""
        ids = groups if isinstance(groups, list) else list(groups)
        # Three C-level passes, so checking thousands of ids costs little next to using them.
        if ids and (not set(map(type, ids)) <= {int} or min(ids) < 0 or max(ids) >= len(self._table.kind)):
            raise self._bad_id(ids, what)
        return ids

    def _bad_id(self, ids: list[int], what: str) -> CompactionError:
        count = len(self._table.kind)
        bad = next((repr(g) for g in ids if type(g) is not int or not 0 <= g < count), "an id given")
        return CompactionError(f"{what}: {bad} is not a group id of this index; read ids from index.live_ids()")

    def id_of(self, group: MessageGroup) -> int:
        """The id of one of this index's groups (what the ``*_ids`` methods take)."""
        if group._table is not self._table:
            raise CompactionError(f"{group!r} is not a group of this index; read groups from index.groups")
        return group._id

    # Excluding and including ------------------------------------------------------------------

    def exclude_ids(self, groups: Iterable[int], reason: str) -> list[int]:
        """Exclude groups by id, with the whole unit of each; returns those that were included,
        in order.  ``reason`` is what reports show (``"truncation"``, ``"sliding_window"``...)."""
        if not isinstance(reason, str) or not reason:
            raise CompactionError(f"an exclusion needs a reason (non-empty text), got {reason!r}")
        ids = groups if isinstance(groups, list) else list(groups)
        try:
            # Checked by using them, before anything changes: a window excludes most of a long
            # history at once, and a separate pass per check would cost as much as the work.
            # Reading a column accepts a negative id, a bool and, in a run of ids (see
            # _Table.run, which compares them by value), an integral float: those are checked.
            if ids and not set(map(type, ids)) <= {int}:
                raise TypeError(ids)
            run = self._table.run(ids)
            if ids and run is None and min(ids) < 0:
                raise IndexError(min(ids))
            if self.pinned and not self.pinned.isdisjoint(ids):
                ids, run = self._unpinned(ids), None
            included, run = self._included(ids, run)
        except (TypeError, IndexError):
            raise self._bad_id(ids, "exclude_ids") from None
        return self._mark(included, reason, run)

    def hold(self, groups: Iterable[int]) -> frozenset[int] | set[int]:
        """Pin ``groups`` (already whole units) besides those pinned; returns the pins before, for
        :meth:`release`."""
        previous = self.pinned
        self.pinned = previous | set(groups)
        return previous

    def release(self, previous: frozenset[int] | set[int]) -> None:
        """Put back the pins :meth:`hold` returned."""
        self.pinned = previous

    def _unpinned(self, ids: list[int]) -> list[int]:
        """``ids`` without the held groups (a strategy's arithmetic that counted on one simply
        stops short of its target; the held group is sent)."""
        pinned = self.pinned
        return [group for group in ids if group not in pinned]

    def _exclude(self, groups: list[int], reason: str) -> list[int]:
        included, run = self._included(groups, self._table.run(groups))
        return self._mark(included, reason, run)

    def _included(self, groups: list[int], run: slice | None) -> tuple[list[int], slice | None]:
        """``groups`` (``run`` if they are one: see ``_Table.run``) and the rest of their units,
        but only those still included (a repeat may stay), with the run they still are, if any;
        one C-level pass over the reason column."""
        table = self._table
        if table.unit and not table.unit.keys().isdisjoint(groups):
            groups = table.with_units(groups)
            run = table.run(groups)
        reasons = gather(table.reason, groups, run)
        if reasons.count(None) == len(reasons):  # the usual case: strategies pick from live_ids()
            return groups, run
        return list(compress(groups, map(is_, reasons, repeat(None)))), None

    def _mark(self, included: list[int], reason: str, run: slice | None) -> list[int]:
        """Exclude ``included`` (all of them included; ``run`` if they are one) for ``reason``;
        returns them, each once."""
        table = self._table
        if len(included) == 1:  # the per-step path of strategies with an arbitrary target
            group = included[0]
            self._metrics.count(group, -1)  # while still included, so its contribution is taken out
            table.reason[group] = reason
            del self._settled()[self._live_key.get(group, group)]
            return included
        # Thousands of groups at a time: C-level passes, not a Python loop.
        if run is None or run.step != 1 or not self._cut_from_tail(included):
            # A repeated id is found by its second removal from the included set finding nothing.
            keys = self._keys(included) if self._live_key else included
            if None in list(map(self._settled().pop, keys, repeat(None))):
                included = list(dict.fromkeys(included))
        if run is not None:  # a run of ids: its columns are written and read in slices
            table.reason[run] = [reason] * len(included)
        else:
            deque(map(table.reason.__setitem__, included, repeat(reason)), maxlen=0)
        self._metrics.tally(included, -1, totals=False, fresh=True, run=run)
        return included

    def _cut_from_tail(self, run: list[int]) -> bool:
        """Take consecutive ids (see ``_Table.run``) out of the tail if they are one stretch of it; the
        tail is in increasing id order, so where the stretch would start is found by bisection."""
        tail = self._tail
        start = bisect_left(tail, run[0])
        stop = start + len(run)
        if tail[start:stop] != run:
            return False
        del tail[start:stop]
        return True

    def include_ids(self, groups: Iterable[int]) -> list[int]:
        """Undo exclusions by id (a failed summarisation restoring what it took), with the whole
        unit of each; returns those that were excluded, in order."""
        table = self._table
        ids = self.checked_ids(groups, "include_ids")
        if table.unit:
            ids = table.with_units(ids)
        restored = []
        for group in ids:
            if table.reason[group] is not None:
                table.reason[group] = None
                self._metrics.count(group, 1)
                restored.append(group)
        if restored:
            self._relive()
        return restored

    def exclude(self, group: MessageGroup, reason: str) -> bool:
        """Mark a group excluded; returns False if it already was."""
        return bool(self.exclude_ids([self.id_of(group)], reason))

    def exclude_many(self, groups: Iterable[MessageGroup], reason: str) -> list[MessageGroup]:
        """Exclude several groups in one pass; returns those that were not already excluded."""
        return list(map(self._table.view, self.exclude_ids(map(self.id_of, groups), reason)))

    def include(self, group: MessageGroup) -> bool:
        """Undo an exclusion; returns False if the group was already included."""
        return bool(self.include_ids([self.id_of(group)]))

    def include_many(self, groups: Sequence[MessageGroup]) -> None:
        """Undo several exclusions."""
        self.include_ids(map(self.id_of, groups))

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
        self._tail = []
        self._live_key = {}

    # Replacing ---------------------------------------------------------------------------------

    def replace_ids(
        self, originals: Iterable[int], messages: Sequence[Message], reason: str, *, origin: str
    ) -> list[int]:
        """Replace each original (included, not a system group, not in a unit with others) by a
        one-message summary group of its turn that takes its place; returns the new ids.  The
        messages are counted with the index's tokenizer in one batch."""
        if self.pinned:
            originals, messages = self._unpinned_pairs(originals, messages)
        ids, run = self._replaceable(originals, len(messages), reason)
        return self._replace(ids, run, messages, reason, origin=origin)

    def _unpinned_pairs(self, originals: Iterable[int], values: Sequence[_V]) -> tuple[list[int], Sequence[_V]]:
        """Originals and their replacements, the held groups' pairs left out (kept as they are)."""
        ids = originals if isinstance(originals, list) else list(originals)
        if len(ids) != len(values) or self.pinned.isdisjoint(ids):
            return ids, values  # a count mismatch is for _replaceable to refuse
        keep = [group not in self.pinned for group in ids]
        return list(compress(ids, keep)), list(compress(values, keep))

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
        if self.pinned:
            originals, texts = self._unpinned_pairs(originals, texts)
        ids, run = self._replaceable(originals, len(texts), reason)
        tokenizer = self._tokenizer
        if type(tokenizer) is not CharacterEstimatorTokenizer:
            messages = [assistant_text_message(t, properties) for t in texts]
            return self._replace(ids, run, messages, reason, origin=origin)
        counts = tokenizer.count_plain_texts(list(map(len, texts)))
        replacements = self._replace(ids, run, [None] * len(ids), reason, origin=origin, counts=counts)
        self._table.defer(replacements, texts, properties)
        return replacements

    def _replaceable(self, originals: Iterable[int], count: int, reason: str) -> tuple[list[int], slice | None]:
        """The originals' ids, checked, and their run (see ``_Table.run``), if they are one."""
        if not isinstance(reason, str) or not reason:
            raise CompactionError(f"a replacement needs a reason (non-empty text), got {reason!r}")
        ids = self.checked_ids(originals, "replace_ids")
        table = self._table
        if count != len(ids):
            raise CompactionError(f"replace_ids: {len(ids)} groups but {count} replacements; give one each")
        run = table.run(ids)  # ids in a run are increasing, so never repeated
        if (  # each check a C-level pass: a collapse replaces thousands of groups at once
            (run is None and len(set(ids)) != len(ids))
            or gather(table.reason, ids, run).count(None) != len(ids)
            or _SYSTEM in gather(table.kind, ids, run)
            or (table.unit and not table.unit.keys().isdisjoint(ids))
        ):
            raise CompactionError(
                "replace_ids replaces included non-system groups, each once, that are not part of a unit "
                "with other groups; exclude those instead"
            )
        return ids, run

    def _replace(
        self,
        originals: list[int],
        run: slice | None,
        messages: Sequence[Message | None],
        reason: str,
        *,
        origin: str,
        counts: list[int] | None = None,
    ) -> list[int]:
        """New one-message summary groups of the originals' turns (``run`` if they are one) take
        their places (a None message is written later: see ``_Table.later``)."""
        table = self._table
        start, count = len(table.kind), len(messages)
        table.first.extend(range(len(table.pool), len(table.pool) + count))
        table.pool.extend(cast(Sequence[Message], messages))
        table.size.extend(repeat(1, count))
        table.tokens.extend(counts if counts is not None else self._tokenizer.count_messages(messages))  # type: ignore[arg-type]
        table.kind.extend(repeat(_SUMMARY, count))
        table.turn.extend(gather(table.turn, originals, run))
        table.reason.extend(repeat(None, count))
        table.origin.extend(repeat(origin, count))
        table.replaces.extend(originals)
        replacements = list(range(start, start + count))
        self._metrics.count_replaced(originals, replacements, run, slice(start, start + count))
        if run is not None:
            table.reason[run] = [reason] * count
        else:
            deque(map(table.reason.__setitem__, originals, repeat(reason)), maxlen=0)
        self._place(originals, replacements)
        return replacements

    def _place(self, originals: list[int], replacements: list[int]) -> None:
        """Each replacement takes its original's key (and so its position) among the included groups."""
        keys = list(self._keys(originals)) if self._live_key else originals
        self._anchors.extend(originals)
        self._inserted.extend(replacements)
        self._settled().update(zip(keys, replacements))
        self._live_key.update(zip(replacements, keys))

    def make_summary_groups(
        self,
        messages: Sequence[Message],
        *,
        turns: Sequence[int | None],
        origin: str,
        replaces: Sequence[tuple[MessageGroup, ...]],
    ) -> list[MessageGroup]:
        """Summary groups for many messages, counted in one tokenizer batch, not yet inserted."""
        counts = self._tokenizer.count_messages(messages)
        return [
            MessageGroup(_SUMMARY, [message], turn, tokens, origin=origin, replaces=source)
            for message, turn, tokens, source in zip(messages, turns, counts, replaces)
        ]

    def replace_many(self, pairs: Sequence[tuple[MessageGroup, MessageGroup]], reason: str) -> None:
        """Exclude each original and put its replacement (see :meth:`make_summary_groups`) in its place."""
        if self.pinned:
            pairs = [pair for pair in pairs if self.id_of(pair[0]) not in self.pinned]
        originals = [self.id_of(original) for original, _ in pairs]
        if any(self._table.reason[original] is not None for original in originals):  # a refusal changes nothing
            raise CompactionError("replace_many: only included groups can be replaced")
        for original, (_, replacement) in zip(originals, pairs):
            self._account(original, self._adopt(replacement), reason)
        self._place(originals, [self.id_of(replacement) for _, replacement in pairs])

    def _account(self, original: int, replacement: int, reason: str) -> None:
        """Exclude ``original`` and count ``replacement`` (adopted, placed by the caller) in."""
        table = self._table
        if (
            table.turn[original] == table.turn[replacement]
            and table.kind[original] is not _SYSTEM
            and table.size[replacement] == 1
            and table.reason[replacement] is None
        ):
            self._metrics.count_replaced([original], [replacement])
            table.reason[original] = reason
            return
        self._metrics.count(original, -1)
        table.reason[original] = reason
        self._metrics.tally([replacement], 1)

    def _adopt(self, group: MessageGroup) -> int:
        """Take a group built outside the index (see :class:`MessageGroup`) into its table."""
        return self._table.adopt(group, self.id_of)

    # Inserting ---------------------------------------------------------------------------------

    def insert_summary(self, before: int, message: Message, *, replaces: Sequence[int], origin: str) -> int:
        """Insert a summary group of no turn just before group ``before`` (what summarisation
        writes for the groups it excluded); returns its id."""
        self.checked_ids([before, *replaces], "insert_summary")
        tokens = self._tokenizer.count_messages([message])[0]
        group = self._table.add(_SUMMARY, [message], None, tokens, origin=origin, replaces=tuple(replaces))
        self._insert(before, group)
        return group

    def insert_before(self, anchor: MessageGroup, group: MessageGroup) -> None:
        """Insert ``group`` just before ``anchor``.

        Insertions are batched: the order is rebuilt once, the next time it is
        read, so inserting thousands of groups costs one pass, not one per group.
        """
        self._insert(self.id_of(anchor), self._adopt(group))

    def _insert(self, anchor: int, group: int) -> None:
        self._anchors.append(anchor)
        self._inserted.append(group)
        self._metrics.count_total(group)
        if self._table.reason[group] is None:
            self._metrics.count(group, 1)
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
