"""The retained history: what a reducer keeps of a session's stored history, turn after turn.

:class:`HistoryReducer` keeps the index of a session's stored history between turns and says,
for each turn, which part of the stored list its strategy rewrote
(a :class:`~contextledger.history.RetainedRewrite`), so the rewrite is written with the turn in
one step (:func:`~contextledger.history.write_turn`) and costs what it changed, not the whole
history.  Whatever reduces a history here never leaves one that starts in the middle of a turn.
:class:`ReducedHistoryProvider` is the stateless form: a history whose every turn is reduced
from scratch.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from contextledger.compaction import CompactionStrategy, GroupKind, MessageIndex
from contextledger.compaction._apply import resolve_tokenizer
from contextledger.exceptions import ConfigurationError
from contextledger.history import (
    HistoryProvider,
    HistoryVersion,
    KeptHistory,
    RetainedRewrite,
    StoredTurn,
    Turn,
    TurnOutcome,
    synced_history,
    write_turn,
)
from contextledger.history._turns import TurnTarget
from contextledger.messages import Message
from contextledger.tokenizers import Tokenizer

__all__ = ["HistoryReducer", "ReducedHistoryProvider", "check_strategy"]

# Sessions a ReducedHistoryProvider keeps a copy of (the most recently written).
_KEPT = 256


def check_strategy(value: object, what: str) -> CompactionStrategy | None:
    if value is not None and not isinstance(value, CompactionStrategy):
        raise ConfigurationError(f"{what} must be a compaction strategy, got {value!r}")
    return value


class HistoryReducer:
    """One session's retained history, reduced turn by turn by ``strategy``.

    The retained history is the projection of an index over everything ever stored, kept between
    turns: a turn adds a few messages, so only those are grouped and counted, the strategy's
    earlier decisions stand, and only the part of the stored list it changed is written again.
    If the store moved on otherwise (another writer, a restart), the index is built again from
    the store.  A host keeps one per session (a compaction provider in the session's cache, the
    proxy beside its copy of the session) and tells it, after each write, what the store holds.
    """

    def __init__(self, strategy: CompactionStrategy, tokenizer: Tokenizer) -> None:
        self.strategy = strategy
        self.tokenizer = tokenizer
        self._retained: _Retained | None = None
        self._replaced: list[Message] = []

    def __repr__(self) -> str:
        return f"HistoryReducer({self.strategy!r})"

    async def plan(self, stored: Sequence[Message], generation: int) -> RetainedRewrite | None:
        """Run the strategy on the index brought up to ``stored`` (the history as it is, or as it
        will be once the turn is stored, at the store's ``generation``) and return what to write:
        the first position it changed and the messages from there on; None if nothing is to be
        written.  Then :meth:`written` (or :meth:`reset`, if the rewrite was not written)."""
        retained = self._retained
        if retained is not None and retained.follows(generation, stored):
            index = retained.index
            appended = stored[retained.length :]
            retained.place(appended, retained.length)
            index.append(appended)
            seen = len(index.events)
            changed = await self.strategy.compact(index)
        else:
            index = MessageIndex(list(stored), tokenizer=self.tokenizer)
            retained = self._retained = _Retained(index)
            retained.place(stored, 0)
            seen = 0
            changed = await self.strategy.compact(index) or bool(index.events)
        self._replaced = []
        if not changed:
            return None
        found = retained.changed_suffix(index, seen, len(stored))
        start, suffix = found if found is not None else (0, index.projection())
        # Only a compaction that changed something can have cut a turn in two.
        if starts_mid_turn(itertools.chain(itertools.islice(stored, start), suffix)) and drop_stranded(index):
            start, suffix = 0, index.projection()
        replaced = list(stored[start:])
        if replaced == suffix:
            return None
        self._replaced = replaced
        return RetainedRewrite(start, tuple(suffix))

    def written(self, rewrite: RetainedRewrite | None, generation: int, stored: Sequence[Message]) -> None:
        """The store now holds ``stored`` at ``generation``, with ``rewrite`` (the last plan)
        written, or None when there was nothing to write."""
        retained = self._retained
        if retained is None:
            return
        if rewrite is not None:
            retained.forget(self._replaced)
            retained.place(rewrite.messages, rewrite.start)
        self._replaced = []
        retained.synced(generation, stored)

    def reset(self) -> None:
        """Forget the index (a plan that was not written, a history changed by someone else):
        the next plan builds it again from what the store holds."""
        self._retained = None
        self._replaced = []


class _Retained:
    """The retained history's index between runs, and where each stored message sits.

    ``positions`` maps each message of the stored list (by identity) to its position, so the
    first position a compaction changed is found from the groups it touched, and only the
    stored list from there on is written again.
    """

    __slots__ = ("generation", "index", "last", "length", "positions")

    def __init__(self, index: MessageIndex) -> None:
        self.index = index
        self.positions: dict[int, int] = {}
        self.generation: int | None = None
        self.length = 0
        self.last: Message | None = None

    def follows(self, generation: int, stored: Sequence[Message]) -> bool:
        """Whether the stored list only grew since this index last matched it.

        The generation and the length say so for this session's own turns; the last message the
        index matched, still in its place (the same object: a list loaded again holds new ones),
        rules out another writer's messages landing before the turn this session appended.
        """
        length = self.length
        return (
            generation == self.generation and len(stored) >= length and (length == 0 or stored[length - 1] is self.last)
        )

    def synced(self, generation: int, stored: Sequence[Message]) -> None:
        """The index matches ``stored``, at ``generation``."""
        self.generation, self.length = generation, len(stored)
        self.last = stored[-1] if stored else None

    def place(self, messages: Sequence[Message], start: int) -> None:
        self.positions.update(zip(map(id, messages), range(start, start + len(messages))))

    def forget(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.positions.pop(id(message), None)

    def changed_suffix(self, index: MessageIndex, seen: int, length: int) -> tuple[int, list[Message]] | None:
        """The first stored position the compaction changed and the projection from there on.

        Read from the events after ``seen`` and the newest included groups back to that
        position, so the cost is in proportion to what changed.  None when the events are of a
        kind this cannot place (a restore, a summary of many turns): the caller writes it all.
        """
        positions = self.positions
        first = length
        for event in index.events[seen:]:
            if event.action not in ("collapsed", "excluded"):
                return None
            for group in event.groups:
                for message in group.messages:
                    position = positions.get(id(message))
                    if position is not None and position < first:
                        first = position
        newest: list[list[Message]] = []
        for group in index.newest_live():
            messages = group.messages
            position = positions.get(id(messages[0]))
            if position is not None and position < first:
                if position + len(messages) != first:
                    return None  # the stored list is not the projection it should be
                break
            newest.append(messages)
        else:
            if first:
                return None
        return first, [message for messages in reversed(newest) for message in messages]


def starts_mid_turn(messages: Iterable[Message]) -> bool:
    """Whether the first message after any system messages is something other than a user's."""
    return next((m.role for m in messages if m.role != "system"), "user") != "user"


def drop_stranded(index: MessageIndex) -> bool:
    """Exclude what a window left of a turn whose user message it dropped, before the first kept turn.

    A stored history that started with such a remnant (an answer, a tool exchange) would read
    back as the preamble before the first user message, which every window keeps: reduced
    again from the store it would never go, and each reduction would strand another.  A retained
    history therefore starts at a turn's beginning; the request view is not affected.
    """
    stranded = []
    for group in index.live:
        if group.kind is GroupKind.USER:
            break
        if group.kind is GroupKind.SYSTEM or not group.turn:
            continue  # system messages and the real preamble (turn 0) stay
        stranded.append(group)
    if not stranded:
        return False
    index.exclude_many(stranded, "stranded by a reduction")
    return True


class ReducedHistoryProvider:
    """A history provider that keeps only the reduced list: every turn is stored with its reduction.

    The reducer is stateless: each time, ``strategy`` is applied to the whole stored list (and
    the turn) from scratch.  What it drops (or summarises) is gone from the store, which is
    exactly the difference from a request view.  :meth:`append_turn` stores the turn and the
    reduction it brings about through :func:`~contextledger.history.write_turn`: in one atomic
    step on a store that can (the built-in ones), exactly once by turn id, and only if no other
    writer moved the history since it was read (then the turn is stored unreduced, and the next
    turn reduces it).  ``append`` and ``replace`` (no turn id) load, reduce and replace: meant
    for one writer per session.
    """

    def __init__(
        self, inner: HistoryProvider, strategy: CompactionStrategy, *, tokenizer: Tokenizer | None = None
    ) -> None:
        if not isinstance(inner, HistoryProvider):
            raise ConfigurationError(f"ReducedHistoryProvider wraps a history provider, got {inner!r}")
        checked = check_strategy(strategy, "strategy")
        if checked is None:
            raise ConfigurationError("ReducedHistoryProvider needs a strategy")
        self.inner = inner
        self.strategy = checked
        self.tokenizer = resolve_tokenizer(checked, tokenizer)
        self.source_id: str = inner.source_id
        # The history as this provider last wrote it, per session, so a turn reads the store's
        # version only and not the whole list (again only when another writer moved it).
        self._kept: OrderedDict[str, KeptHistory] = OrderedDict()

    def __repr__(self) -> str:
        return f"ReducedHistoryProvider({self.inner!r}, {self.strategy!r})"

    async def reduce(self, messages: Sequence[Message]) -> list[Message]:
        """``messages`` as the strategy leaves them, never starting in the middle of a turn."""
        index = MessageIndex(messages, tokenizer=self.tokenizer)
        await self.strategy.compact(index)
        reduced = index.projection()
        if starts_mid_turn(reduced) and drop_stranded(index):
            reduced = index.projection()
        return reduced

    async def load(self, session_id: str) -> list[Message]:
        return await self.inner.load(session_id)

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        stored = await self.inner.load(session_id)
        await self.inner.replace(session_id, await self.reduce([*stored, *messages]))

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        await self.inner.replace(session_id, await self.reduce(messages))

    async def append_turn(
        self, session_id: str, turn_id: str, inputs: Sequence[Message], reply: Sequence[Message]
    ) -> bool:
        """The turn and the reduction of the history with it, in one write (see the class docstring)."""
        if not all(
            isinstance(part, Sequence)
            and not isinstance(part, (str, bytes))
            and all(isinstance(m, Message) for m in part)
            for part in (inputs, reply)
        ):
            # Not a turn of messages: the store's own checks name what is wrong.
            return await self.inner.append_turn(session_id, turn_id, inputs, reply)
        kept = await synced_history(self.inner, session_id, self._kept.get(session_id))
        outcome = await self.write(Turn(session_id, turn_id, tuple(inputs), tuple(reply)), kept)
        self._kept[session_id] = kept
        self._kept.move_to_end(session_id)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)
        return outcome.stored

    async def write(self, turn: Turn, kept: KeptHistory) -> TurnOutcome:
        """Store ``turn`` after ``kept`` (the inner history as the caller last read it) with the
        reduction it brings about, through the one turn writer, and bring ``kept`` up to date.

        What :meth:`append_turn` does with a copy of its own; a host that keeps its own copy of
        the history (the Agent Framework adapter) calls this with it.
        """
        grown = [*kept.messages, *turn.messages]
        reduced = await self.reduce(grown)
        same = _same_objects(grown, reduced)
        # A rewrite starts within the stored list (at its end when only the turn's own messages changed).
        start = min(same, len(kept.messages))
        rewrite = None if same == len(grown) == len(reduced) else RetainedRewrite(start, tuple(reduced[start:]))
        return await write_turn(turn, [TurnTarget(self.inner, kept, rewrite)])

    async def load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        return await self.inner.load_turn(session_id, turn_id)

    async def load_turns(self, session_id: str) -> list[StoredTurn]:
        return await self.inner.load_turns(session_id)

    async def rewrite_turns(self, session_id: str, turns: Sequence[StoredTurn]) -> None:
        """Written as given: turn records are kept whole, never reduced."""
        await self.inner.rewrite_turns(session_id, turns)

    async def version(self, session_id: str) -> HistoryVersion:
        return await self.inner.version(session_id)

    async def rewrite(
        self, session_id: str, start: int, messages: Sequence[Message], expected: HistoryVersion
    ) -> HistoryVersion | None:
        """Written as given: a rewrite comes from a reducer already."""
        return await self.inner.rewrite(session_id, start, messages, expected)

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        await self.inner.undo_turn(session_id, turn_id, messages)

    async def clear(self, session_id: str) -> None:
        self._kept.pop(session_id, None)
        await self.inner.clear(session_id)

    async def close(self) -> None:
        self._kept.clear()
        await self.inner.close()


def _same_objects(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many messages ``old`` and ``new`` share from the start, as the very same objects."""
    for position, (before, now) in enumerate(zip(old, new)):
        if before is not now:
            return position
    return min(len(old), len(new))
