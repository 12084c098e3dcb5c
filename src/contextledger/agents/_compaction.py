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
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from contextledger.agents._context import INSTRUCTIONS_PROPERTY, ContextProvider, RunContext, current_run
from contextledger.clients._protocol import ChatClient, ChatResponse
from contextledger.compaction import CompactionStrategy, GroupKind, MessageIndex, apply_compaction
from contextledger.compaction._apply import resolve_tokenizer
from contextledger.exceptions import ConfigurationError
from contextledger.history import HistoryProvider, StoredTurn
from contextledger.messages import Message, message_to_openai
from contextledger.tokenizers import Tokenizer

if TYPE_CHECKING:
    from contextledger.agents._agent import Agent

__all__ = ["CompactionProvider", "ReducedHistoryProvider", "use_context_providers"]


# Leading excluded messages worth moving out of a request view's index: small enough that the
# index stays near the size of what is sent, large enough that rebuilding it is rare.
_FREEZE_AT = 256


def _strategy(value: object, what: str) -> CompactionStrategy | None:
    if value is not None and not isinstance(value, CompactionStrategy):
        raise ConfigurationError(f"{what} must be a compaction strategy, got {value!r}")
    return value


def _fingerprint(message: Message) -> str:
    body = json.dumps(message_to_openai(message, metadata=True), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def _same_prefix(old: Sequence[Message], new: Sequence[Message]) -> bool:
    # List equality checks identity first, element by element, in C: the usual case (the very
    # objects indexed last time) costs a pointer comparison per message.
    return len(new) >= len(old) and new[: len(old)] == old


class _View:
    """A session's request view, kept between calls so each call only indexes what is new.

    The index covers the provider-added context messages and the conversation from
    ``len(frozen)`` on.  ``frozen`` is a prefix of the conversation that a strategy excluded
    outright, up to the start of a turn: exclusions persist, so it can never be sent again and
    need not be indexed again.  Moving such a prefix out of the index now and then keeps the
    per-call cost in proportion to what is still sent, however long the history grows.
    """

    __slots__ = ("context", "frozen", "index")

    def __init__(self, index: MessageIndex, context: list[Message], frozen: list[Message]) -> None:
        self.index = index
        self.context = context
        self.frozen = frozen

    @property
    def indexed_conversation(self) -> list[Message]:
        return self.index.source_messages[len(self.context) :]

    def follows(self, extra: list[Message], conversation: list[Message]) -> bool:
        """Whether this call's messages only add to what the view indexed (the usual case)."""
        skip = len(self.frozen)
        indexed = self.indexed_conversation
        return (
            len(extra) == len(self.context)
            and extra == self.context
            and len(conversation) >= skip + len(indexed)
            and conversation[:skip] == self.frozen
            and conversation[skip : skip + len(indexed)] == indexed
        )

    def _runs(self) -> list[list[int]]:
        """Index positions (context first, so negative for context) of groups dropped outright.

        Replaced groups are left out on purpose: carrying their exclusion over without the
        text that replaced them would lose information, so the strategy decides them again.
        """
        groups = self.index.groups
        replaced = {id(old) for group in groups if group.replaces for old in group.replaces}
        runs: list[list[int]] = []
        position = -len(self.context)
        for group in groups:
            if group.replaces:  # written by a strategy: not a source message
                continue
            size = len(group.messages)
            if group.excluded and id(group) not in replaced:
                if runs and runs[-1][1] == position:
                    runs[-1][1] = position + size
                else:
                    runs.append([position, position + size])
            position += size
        return runs

    def excluded_runs(self) -> list[list[int]]:
        """Conversation positions of groups dropped outright, as [start, end) runs."""
        skip = len(self.frozen)
        runs = [[max(start, 0) + skip, end + skip] for start, end in self._runs() if end > 0]
        if skip:
            if runs and runs[0][0] == skip:
                runs[0][0] = 0
            else:
                runs.insert(0, [0, skip])
        return runs

    def record(self) -> dict[str, Any]:
        """What a restored session needs to keep this view's exclusions (see ``excluded_runs``)."""
        conversation = [*self.frozen, *self.indexed_conversation]
        return {"length": len(conversation), "last": _fingerprint(conversation[-1]), "excluded": self.excluded_runs()}

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
            if group.replaces:  # written by a strategy: not a source message
                continue
            start, end = position, position + len(group.messages)
            position = end
            while cursor < len(wanted) and wanted[cursor][1] <= start:
                cursor += 1
            if cursor < len(wanted) and wanted[cursor][0] <= start and end <= wanted[cursor][1]:
                drop.append(group)
        self.index.exclude_many(drop, "kept from an earlier call")

    def freeze_dropped_prefix(self, tokenizer: Tokenizer | None, at_least: int) -> None:
        """Move the conversation's leading excluded turns out of the index (see the class docstring).

        Only done when no group in the index stands in for others (a summary, a collapsed tool
        result): the new index is built from source messages, and those would be lost.
        """
        groups = self.index.groups
        if any(group.replaces for group in groups):
            return
        position = -len(self.context)
        cut = 0
        for group in groups:
            size = len(group.messages)
            if position < 0:
                if position + size > 0:
                    return  # a group spanning context and conversation: leave the index as it is
                position += size
                continue
            if not group.excluded:
                break
            if group.kind is GroupKind.USER:
                cut = position
            position += size
        if cut < at_least:
            return
        runs = self._runs()
        conversation = self.indexed_conversation
        self.frozen = [*self.frozen, *conversation[:cut]]
        self.index = MessageIndex([*self.context, *conversation[cut:]], tokenizer=tokenizer)
        self.apply_runs(runs, len(conversation), offset=cut)


class CompactionProvider(ContextProvider):
    """Runs compaction strategies around an agent's model calls (see the module docstring).

    ``before_strategy`` compacts the request view.  Registered in an agent's
    ``context_providers`` it runs once per run, before the first model call;
    wrapped around the client with :func:`use_context_providers` it runs
    before every call of the tool loop.  ``after_strategy`` compacts the
    stored history of the provider named ``history_source_id`` after each
    successful run and stores the reduced list.
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

    def bind(self, agent: Agent) -> None:
        if self.after_strategy is not None and self.history_source_id not in agent.history_providers:
            known = ", ".join(repr(k) for k in agent.history_providers)
            raise ConfigurationError(
                f"CompactionProvider compacts history {self.history_source_id!r} after each run, but agent "
                f"{agent.name!r} has no history provider with that source_id (it has {known}); "
                "pass history_source_id=history.source_id"
            )

    @staticmethod
    async def compact(
        strategy: CompactionStrategy, messages: Sequence[Message], *, tokenizer: Tokenizer | None = None
    ) -> list[Message]:
        """Apply ``strategy`` to any message list, outside an agent (same as :func:`apply_compaction`)."""
        return await apply_compaction(messages, strategy=strategy, tokenizer=tokenizer)

    # The request view ------------------------------------------------------------------------

    async def prepare_request(self, messages: list[Message], context: RunContext | None) -> list[Message]:
        if self.before_strategy is None:
            return messages
        head = 0
        while head < len(messages) and messages[head].additional_properties.get(INSTRUCTIONS_PROPERTY) is True:
            head += 1
        body = messages[head:]
        context_count = 0
        if context is not None:
            added = context.context_messages
            if len(added) <= len(body) and all(a is b for a, b in zip(added, body)):
                context_count = len(added)
        view = self._view(body, context_count, context)
        await self.before_strategy.compact(view.index)
        projection = view.index.projection()
        view.freeze_dropped_prefix(self._before_tokenizer, _FREEZE_AT)
        return [*messages[:head], *projection]

    def _view(self, body: list[Message], context_count: int, context: RunContext | None) -> _View:
        extra = body[:context_count]
        conversation = body[context_count:]
        cache: dict[object, Any] | None = context.session._cache if context is not None else None
        old: _View | None = cache.get(self) if cache is not None else self._loose_view
        if old is not None and old.follows(extra, conversation):
            old.index.update([*extra, *conversation[len(old.frozen) :]])  # exclusions made earlier stay
            return old
        skip = 0
        if old is not None and len(conversation) >= len(old.frozen) and conversation[: len(old.frozen)] == old.frozen:
            skip = len(old.frozen)  # the history changed after the frozen prefix (a reduction, new context)
        view = _View(
            MessageIndex([*extra, *conversation[skip:]], tokenizer=self._before_tokenizer),
            list(extra),
            conversation[:skip],
        )
        if old is not None:
            old_conversation = [*old.frozen, *old.indexed_conversation]
            if _same_prefix(old_conversation, conversation):
                view.apply_runs(old.excluded_runs(), len(old_conversation), offset=skip)
        elif context is not None:
            record = context.session.state.get(self._state_key)
            if isinstance(record, dict) and self._record_matches(record, conversation):
                view.apply_runs(record.get("excluded", []), int(record["length"]))
        if cache is not None:
            cache[self] = view
        else:
            self._loose_view = view
        return view

    @staticmethod
    def _record_matches(record: Mapping[str, Any], conversation: Sequence[Message]) -> bool:
        length = record.get("length")
        if not isinstance(length, int) or length <= 0 or length > len(conversation):
            return False
        return record.get("last") == _fingerprint(conversation[length - 1])

    # After a successful run -------------------------------------------------------------------

    async def after_run(self, context: RunContext) -> None:
        session = context.session
        view: _View | None = session._cache.get(self)
        if view is not None and (view.frozen or len(view.index.source_messages) > len(view.context)):
            # Cheap: the view's index holds little more than what is still sent (see _View).
            session.state[self._state_key] = view.record()
        if self.after_strategy is None:
            return
        history = context.agent.history_providers[self.history_source_id]
        stored = await history.load(session.session_id)
        # The retained history is the projection of an index over everything ever stored, kept
        # between runs: a run adds a few messages, so only those are grouped and counted, and the
        # strategy's earlier decisions stand.  If the store no longer starts with the projection
        # written last time (another writer, a restart), the index is rebuilt from the store.
        key = (self, "after")
        kept: tuple[MessageIndex, list[Message]] | None = session._cache.get(key)
        if kept is not None and _same_prefix(kept[1], stored):
            index = kept[0]
            index.append(stored[len(kept[1]) :])
            changed = await self.after_strategy.compact(index)
        else:
            index = MessageIndex(stored, tokenizer=self._after_tokenizer)
            changed = await self.after_strategy.compact(index) or bool(index.events)
        # Only a compaction that changed something can have cut a turn in two.
        reduced = index.projection() if changed else stored
        if changed and _starts_mid_turn(reduced) and _drop_stranded(index):
            reduced = index.projection()
        if reduced != stored:
            await history.replace(session.session_id, reduced)
        session._cache[key] = (index, reduced)


def _starts_mid_turn(messages: Sequence[Message]) -> bool:
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

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        await self.inner.undo_turn(session_id, turn_id, messages)

    async def clear(self, session_id: str) -> None:
        await self.inner.clear(session_id)

    async def close(self) -> None:
        await self.inner.close()


class _ProvidedClient:
    """A chat client whose providers rewrite every request before it is sent."""

    def __init__(self, client: ChatClient, providers: Sequence[ContextProvider]) -> None:
        self.client = client
        self.providers = tuple(providers)

    def __repr__(self) -> str:
        return f"use_context_providers({self.client!r}, {', '.join(map(repr, self.providers))})"

    async def get_response(self, messages: Sequence[Message], **kwargs: Any) -> ChatResponse:
        request = list(messages)
        context = current_run.get()
        for provider in self.providers:
            request = await provider.prepare_request(request, context)
        return await self.client.get_response(request, **kwargs)


def use_context_providers(client: ChatClient, *providers: ContextProvider) -> ChatClient:
    """Wrap ``client`` so each provider's ``prepare_request`` runs before every call, tool loop included.

    This is the registration on the chat client: a compaction provider wrapped
    this way compacts before each model call of a run, not only the first.
    """
    if not callable(getattr(client, "get_response", None)):
        raise ConfigurationError(f"use_context_providers needs a chat client, got {client!r}")
    if not providers:
        raise ConfigurationError("use_context_providers needs at least one provider")
    for provider in providers:
        if not isinstance(provider, ContextProvider):
            raise ConfigurationError(f"{provider!r} is not a ContextProvider")
    return _ProvidedClient(client, providers)
