"""Compaction around an agent: the request view, the retained history, and the stateless reducer.

Two different promises, and the drift lab exists to compare them:

* the *request view* (``before_strategy``) changes only what a model call
  sends; the stored history stays complete and serialisable, and what was
  excluded stays excluded on the next call of the session;
* the *retained history* (``after_strategy``, or :class:`ReducedHistoryProvider`)
  rewrites what is stored, so later turns start smaller and whatever was
  dropped is gone for good.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextledger.agents._context import (
    INSTRUCTIONS_PROPERTY,
    AgentView,
    ContextProvider,
    RequestMessages,
    RunContext,
)
from contextledger.agents._history import kept_history, synced_history
from contextledger.agents._session import Session
from contextledger.compaction import CompactionStrategy, GroupKind, MessageIndex
from contextledger.compaction._apply import resolve_tokenizer
from contextledger.exceptions import ConfigurationError
from contextledger.history import HistoryProvider, HistoryVersion, StoredTurn
from contextledger.messages import Message, message_to_openai
from contextledger.tokenizers import Tokenizer

__all__ = ["CompactionProvider", "ReducedHistoryProvider"]


# Leading excluded messages worth moving out of a request view's index: small enough that the
# index stays near the size of what is sent, large enough that rebuilding it is rare.
_FREEZE_AT = 32
# Whether a view built again (the history changed under it) leaves out the excluded turns it
# starts with at once; off only to check that doing so changes no request.
_FREEZE_ON_REBUILD = True


def _strategy(value: object, what: str) -> CompactionStrategy | None:
    if value is not None and not isinstance(value, CompactionStrategy):
        raise ConfigurationError(f"{what} must be a compaction strategy, got {value!r}")
    return value


def _fingerprint(message: Message) -> str:
    body = json.dumps(message_to_openai(message, metadata=True), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def _same_count(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many messages ``old`` and ``new`` have in common from the start (identity first, as
    list equality compares: the usual case costs a pointer comparison per message)."""
    for position, (before, now) in enumerate(zip(old, new)):
        if before is not now and before != now:
            return position
    return min(len(old), len(new))


class _View:
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
        return {"length": length, "last": _fingerprint(last), "excluded": self.excluded_runs()}

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


class CompactionProvider(ContextProvider):
    """Runs compaction strategies around an agent's model calls (see the module docstring).

    ``before_strategy`` compacts the request view.  Registered in an agent's
    ``context_providers`` it runs once per run, before the first model call;
    wrapped around the client with :func:`use_context_providers` it runs
    before every call of the tool loop.  ``after_strategy`` compacts the
    stored history of the provider named ``history_source_id`` as each
    successful run leaves it, and stores the reduced list: in the same atomic
    write as the turn when that history is the agent's only one and a
    :class:`~contextledger.history.TurnRewriter` (the built-in ones are), else
    right after the turn is stored.
    """

    def __init__(
        self,
        before_strategy: CompactionStrategy | None = None,
        after_strategy: CompactionStrategy | None = None,
        *,
        history_source_id: str = "in_memory",
        tokenizer: Tokenizer | None = None,
        source_id: str = "compaction",
    ) -> None:
        self.before_strategy = _strategy(before_strategy, "before_strategy")
        self.after_strategy = _strategy(after_strategy, "after_strategy")
        if self.before_strategy is None and self.after_strategy is None:
            raise ConfigurationError("CompactionProvider needs before_strategy, after_strategy or both")
        if not isinstance(history_source_id, str) or not history_source_id:
            raise ConfigurationError(f"history_source_id must be a non-empty string, got {history_source_id!r}")
        if not isinstance(source_id, str) or not source_id:
            raise ConfigurationError(f"source_id must be a non-empty string, got {source_id!r}")
        self.history_source_id = history_source_id
        self.source_id = source_id
        self._before_tokenizer = resolve_tokenizer(self.before_strategy, tokenizer) if self.before_strategy else None
        self._after_tokenizer = resolve_tokenizer(self.after_strategy, tokenizer) if self.after_strategy else None
        self._loose_view: _View | None = None  # for calls made outside any agent run
        self._state_key = f"compaction:{source_id}"

    def __repr__(self) -> str:
        return (
            f"CompactionProvider(before_strategy={self.before_strategy!r}, after_strategy={self.after_strategy!r}, "
            f"history_source_id={self.history_source_id!r})"
        )

    def bind(self, agent: AgentView) -> None:
        if self.after_strategy is not None and self.history_source_id not in agent.history_providers:
            known = ", ".join(repr(k) for k in agent.history_providers)
            raise ConfigurationError(
                f"CompactionProvider compacts history {self.history_source_id!r} after each run, but agent "
                f"{agent.name!r} has no history provider with that source_id (it has {known}); "
                "pass history_source_id=history.source_id"
            )

    # The request view ------------------------------------------------------------------------

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        if self.before_strategy is None:
            return messages
        head = 0
        while head < len(messages) and messages[head].additional_properties.get(INSTRUCTIONS_PROPERTY) is True:
            head += 1
        base = head  # where the conversation starts, after the instructions and the providers' messages
        if context is not None:
            added = context.context_messages
            if len(added) <= len(messages) - head and all(
                a is b for a, b in zip(added, messages[head : head + len(added)])
            ):
                base = head + len(added)
        view = self._view(messages, head, base, context)
        await self.before_strategy.compact(view.index)
        projection = view.index.projection()
        view.freeze_dropped_prefix(self._before_tokenizer, _FREEZE_AT)
        return [*messages[:head], *projection]

    def _view(self, messages: Sequence[Message], head: int, base: int, context: RunContext | None) -> _View:
        """The session's view, brought up to ``messages``; positions are offsets, so that no
        call copies or compares the whole history."""
        extra = list(messages[head:base])
        cache: dict[str, Any] | None = context.session.cache(self) if context is not None else None
        old: _View | None = cache.get("view") if cache is not None else self._loose_view
        if old is not None and old.follows(messages, base):
            old.index.update([*extra, *messages[base + old.frozen_count :]])  # exclusions made earlier stay
            return old
        # The history changed after the frozen prefix (a reduction, new context): index again
        # what follows the prefix.  The part that did not change keeps its exclusions, and the
        # turns excluded from its start are frozen now, since the index is built anew anyway:
        # after a reduction every turn, the index stays the size of what is sent.
        keep = old is not None and old.keeps_frozen(messages, base)
        skip = old.frozen_count if old is not None and keep else 0
        ends = old.frozen_ends if old is not None and keep else None
        carried: list[list[int]] = []  # exclusions of the unchanged part, in conversation positions
        if old is not None and keep:
            indexed = old.indexed_conversation
            unchanged = skip + _same_count(indexed, messages[base + skip : base + skip + len(indexed)])
            cut = old.dropped_prefix() if _FREEZE_ON_REBUILD else 0
            cut = cut if skip + cut <= unchanged else 0
            if old.index.total_messages - old.index.included_messages > cut:  # more excluded than is frozen now
                carried = [run for run in old.excluded_runs() if run[1] <= unchanged]
            if cut:
                first = ends[0] if ends else messages[base + skip]
                skip += cut
                ends = (first, messages[base + skip - 1])
        view = _View(
            MessageIndex([*extra, *messages[base + skip :]], tokenizer=self._before_tokenizer), extra, skip, ends
        )
        if carried:
            # Conversation runs only, clipped to what is still indexed: the context is new.
            clipped = [[max(start, skip), end] for start, end in carried if end > skip]
            view.apply_runs(clipped, skip + len(messages), offset=skip)
        elif old is None and context is not None:
            record = context.session.state.get(self._state_key)
            if isinstance(record, dict) and self._record_matches(record, messages, base):
                view.apply_runs(record.get("excluded", []), int(record["length"]))
        if cache is not None:
            cache["view"] = view
        else:
            self._loose_view = view
        return view

    @staticmethod
    def _record_matches(record: Mapping[str, Any], messages: Sequence[Message], base: int) -> bool:
        length = record.get("length")
        if not isinstance(length, int) or length <= 0 or length > len(messages) - base:
            return False
        return record.get("last") == _fingerprint(messages[base + length - 1])

    # The retained history, reduced with each turn ------------------------------------------------

    async def before_store(self, context: RunContext) -> None:
        """Reduce the retained history as it will be once this turn is stored, and ask for the
        reduction to be written with the turn: one store operation a turn instead of two."""
        if self.after_strategy is None:
            return
        history = context.agent.history_providers[self.history_source_id]
        # Only the history this run was built on has a copy checked against the store this run;
        # another one (a mirror) is read and reduced in after_run, as before.
        copy = kept_history(context.session, history) if history is context.agent.history else None
        if copy is None:
            return
        turn = [*context.input_messages, *context.generated]
        stored = copy.messages
        full = RequestMessages((stored, len(stored)), (turn, len(turn)))
        plan = await self._reduce(context.session, full, copy.version.generation)
        cache = context.session.cache(self)
        cache["reduced"] = True
        if plan is None:
            return
        cache["plan"] = plan
        start, suffix, _ = plan
        size = len(turn)
        if start <= len(stored) and len(suffix) >= size and all(map(operator.is_, suffix[len(suffix) - size :], turn)):
            # The turn's own messages are stored as they are: the reduction is of what came before.
            context.rewrite_with_turn(history.source_id, start, suffix[: len(suffix) - size])

    async def after_run(self, context: RunContext) -> None:
        session = context.session
        cache = session.cache(self)
        view: _View | None = cache.get("view")
        if view is not None and (view.frozen_count or len(view.index.source_messages) > len(view.context)):
            # Cheap: the view's index holds little more than what is still sent (see _View).
            session.state[self._state_key] = view.record()
        if self.after_strategy is None:
            return
        history = context.agent.history_providers[self.history_source_id]
        copy = kept_history(session, history)
        reduced, plan = cache.pop("reduced", False), cache.pop("plan", None)
        written: HistoryVersion | None = None
        if reduced and copy is not None:
            written = context.rewritten_with_turn(history.source_id)
        else:
            # Not reduced before the store (not the history this run was built on): read it now.
            copy = copy or await synced_history(session, history)
            plan = await self._reduce(session, copy.messages, copy.version.generation)
        retained: _Retained = cache["after"]
        if plan is None:
            retained.synced(copy.version.generation, copy.messages)
            return
        start, suffix, replaced = plan
        if written is None:  # not written with the turn: write it now
            try:
                written = await history.rewrite(session.session_id, start, suffix, copy.version)
            except BaseException:
                cache.pop("after", None)  # the index holds a reduction the store may not have
                raise
            if written is None:  # the store changed under this run: read it again next time
                cache.pop("after", None)
                session.cache(history).pop("history", None)
                return
            context._keep_history_from(start)
            copy.rewritten(start, suffix, written)
        retained.forget(replaced)
        retained.place(suffix, start)
        retained.synced(written.generation, copy.messages)

    async def _reduce(self, session: Session, stored: Sequence[Message], generation: int) -> _Plan | None:
        """Run the after-strategy on the retained index brought up to ``stored`` (the history as it
        is, or as it will be once the turn is stored), and return what to write: the first
        position it changed, the messages from there on, and the ones they replace; None if
        nothing is to be written.

        The retained history is the projection of an index over everything ever stored, kept
        between runs: a run adds a few messages, so only those are grouped and counted, the
        strategy's earlier decisions stand, and only the part of the stored list it changed is
        written again.  If the store moved on otherwise (another writer, a restart), the index is
        rebuilt from the store.
        """
        assert self.after_strategy is not None
        cache = session.cache(self)
        retained: _Retained | None = cache.get("after")
        if retained is not None and retained.follows(generation, stored):
            index = retained.index
            appended = stored[retained.length :]
            retained.place(appended, retained.length)
            index.append(appended)
            seen = len(index.events)
            changed = await self.after_strategy.compact(index)
        else:
            index = MessageIndex(list(stored), tokenizer=self._after_tokenizer)
            retained = _Retained(index)
            retained.place(stored, 0)
            seen = 0
            changed = await self.after_strategy.compact(index) or bool(index.events)
        cache["after"] = retained
        if not changed:
            return None
        found = retained.changed_suffix(index, seen, len(stored))
        start, suffix = found if found is not None else (0, index.projection())
        # Only a compaction that changed something can have cut a turn in two.
        if _starts_mid_turn(itertools.chain(itertools.islice(stored, start), suffix)) and _drop_stranded(index):
            start, suffix = 0, index.projection()
        replaced = list(stored[start:])
        if replaced == suffix:
            return None
        return start, suffix, replaced


_Plan = tuple[int, list[Message], list[Message]]


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


def _starts_mid_turn(messages: Iterable[Message]) -> bool:
    """Whether the first message after any system messages is something other than a user's."""
    return next((m.role for m in messages if m.role != "system"), "user") != "user"


def _drop_stranded(index: MessageIndex) -> bool:
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
    """A history provider that keeps only the reduced list: every append is followed by a reduction.

    The reducer is stateless: each time, ``strategy`` is applied to the whole
    stored list from scratch and the result replaces it.  What it drops (or
    summarises) is gone from the store, which is exactly the difference from
    a request view.  Meant for one writer per session: the load, reduce and
    replace are not one transaction across processes.
    """

    def __init__(
        self, inner: HistoryProvider, strategy: CompactionStrategy, *, tokenizer: Tokenizer | None = None
    ) -> None:
        if not isinstance(inner, HistoryProvider):
            raise ConfigurationError(f"ReducedHistoryProvider wraps a history provider, got {inner!r}")
        checked = _strategy(strategy, "strategy")
        if checked is None:
            raise ConfigurationError("ReducedHistoryProvider needs a strategy")
        self.inner = inner
        self.strategy = checked
        self.tokenizer = resolve_tokenizer(checked, tokenizer)
        self.source_id: str = inner.source_id

    def __repr__(self) -> str:
        return f"ReducedHistoryProvider({self.inner!r}, {self.strategy!r})"

    async def reduce(self, messages: Sequence[Message]) -> list[Message]:
        index = MessageIndex(messages, tokenizer=self.tokenizer)
        await self.strategy.compact(index)
        reduced = index.projection()
        if _starts_mid_turn(reduced) and _drop_stranded(index):
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
        """The turn is stored (once) by the inner history, then the history is reduced."""
        if not await self.inner.append_turn(session_id, turn_id, inputs, reply):
            return False
        await self.inner.replace(session_id, await self.reduce(await self.inner.load(session_id)))
        return True

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
        await self.inner.clear(session_id)

    async def close(self) -> None:
        await self.inner.close()
