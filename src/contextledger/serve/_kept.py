"""What one proxy process keeps of each session between its turns, so a turn costs what it adds.

Reading a long history from the store and indexing it again on every turn would make each turn
cost the whole session; instead the process keeps, per session, the history as it stood after
its last turn (a :class:`~contextledger.history.KeptHistory`, with its token count), the request
view built on it (a :class:`~contextledger.agents.CompactionProvider`, which indexes only what is
new) and, with a retain strategy, the retained history's index
(a :class:`~contextledger.agents.HistoryReducer`).  A turn is stored through the one turn writer
(:func:`~contextledger.history.write_turn`): the turn and the reduction it brings about in one
atomic write, after which the copy is brought up to date, not dropped.  The copy is used only
while the history store's own version of the session is the one the copy stands for: anything
else that writes the session (another proxy process, an agent on the same store, a ``forget``)
moves the version, and the next turn here reads the store again.

What is kept is bounded by the memory its messages hold (``kept_session_bytes``, 32 MiB by
default), counted as the proxy's message reader counts what it remembers: the strings as
``sys.getsizeof`` sizes them, and a fixed amount for each message, content and container (the
message objects and the rows the indexes built on them hold).  The least recently used sessions
go first, whatever their number, so clients that fill many sessions with large distinct turns
cannot make the process grow past it; a session dropped is read from the store at its next turn.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextledger.agents import CompactionProvider, HistoryReducer, RequestMessages
from contextledger.compaction import CompactionStrategy
from contextledger.compaction._apply import resolve_tokenizer
from contextledger.history import HistoryProvider, KeptHistory, Turn, TurnOutcome, synced_history, write_turn
from contextledger.history._protocol import TurnFacts
from contextledger.history._turns import TurnTarget
from contextledger.messages import Message
from contextledger.tokenizers import Tokenizer

__all__ = ["KEPT_SESSION_BYTES", "KeptSessions", "held_bytes"]

KEPT_SESSION_BYTES = 32 * 1024 * 1024
"""The most memory the sessions a process keeps between turns may hold, by default."""

_NODE_BYTES = 64  # a content, container or number: what the message reader counts for one
_MESSAGE_BYTES = 512  # a message object and its rows in the request view's and the reducer's indexes


def held_bytes(messages: Sequence[Message]) -> int:
    """The memory ``messages`` hold, as counted against the bound on kept sessions."""
    return sum(_MESSAGE_BYTES + _size(message.contents) + _size(message.extra) for message in messages)


def _size(value: Any) -> int:
    if isinstance(value, (str, bytes)):
        return sys.getsizeof(value)
    if isinstance(value, Mapping):
        return _NODE_BYTES + sum(_size(key) + _size(item) for key, item in value.items())
    if isinstance(value, (tuple, list)):
        return _NODE_BYTES + sum(_size(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _NODE_BYTES + sum(_size(getattr(value, f.name)) for f in dataclasses.fields(value))
    return _NODE_BYTES if value is not None else 0


@dataclass(slots=True)
class _Kept:
    """One session as this process last saw it: its history and that history's token count, the
    request view and the retained history's reducer built on it."""

    history: KeptHistory | None = None
    tokens: int = 0
    bytes: int = 0  # what ``history`` holds, as :func:`held_bytes` counts it
    view: CompactionProvider | None = None
    reducer: HistoryReducer | None = field(default=None)


class KeptSessions:
    """The most recently used sessions, within ``limit`` bytes, as this process keeps them between turns."""

    def __init__(
        self,
        history: HistoryProvider,
        strategy: CompactionStrategy | None,
        tokenizer: Tokenizer,
        retain: CompactionStrategy | None = None,
        *,
        limit: int = KEPT_SESSION_BYTES,
    ) -> None:
        self._history = history
        self._strategy = strategy
        self._tokenizer = tokenizer
        self._retain = retain
        self._retain_tokenizer = resolve_tokenizer(retain, None) if retain is not None else None
        self._sessions: OrderedDict[str, _Kept] = OrderedDict()
        self.limit = limit
        self._held = 0

    @property
    def held(self) -> int:
        """The bytes the kept sessions hold, as counted against :attr:`limit`."""
        return self._held

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def strategy(self) -> CompactionStrategy | None:
        """The request view's strategy (``None``: everything is sent)."""
        return self._strategy

    def _entry(self, key: str) -> _Kept:
        entry = self._sessions.get(key)
        if entry is None:
            entry = self._sessions[key] = _Kept()
        self._sessions.move_to_end(key)
        return entry

    def _counted(self, key: str, entry: _Kept, size: int) -> None:
        """``entry`` (the session ``key``, just used) now holds ``size`` bytes: the least recently
        used other sessions go until the kept ones fit the limit again.  The one just used stays
        even when it alone is over the limit: its turn holds all of it in memory anyway."""
        if self._sessions.get(key) is not entry:  # dropped while the store was read or written
            replaced = self._sessions.pop(key, None)
            self._held -= replaced.bytes if replaced is not None else 0
            self._sessions[key] = entry
            entry.bytes = 0
        self._sessions.move_to_end(key)
        self._held += size - entry.bytes
        entry.bytes = size
        while self._held > self.limit and len(self._sessions) > 1:
            _, dropped = self._sessions.popitem(last=False)
            self._held -= dropped.bytes

    async def history(self, key: str) -> KeptHistory:
        """The session's stored history: the copy kept here while nothing else wrote the session
        since, else read from the store (and kept)."""
        entry = self._entry(key)
        synced = await synced_history(self._history, key, entry.history)
        if synced is not entry.history:
            entry.history, entry.tokens = synced, self.tokens(synced.messages)
            if entry.reducer is not None:
                entry.reducer.reset()  # someone else wrote the session: its index starts again
            self._counted(key, entry, held_bytes(synced.messages))
        return synced

    def stored_tokens(self, key: str) -> int:
        """The token count of the session's kept history (after :meth:`history`)."""
        return self._entry(key).tokens

    def rewritten(self, key: str) -> None:
        """Forget what is kept of a session whose history was rewritten elsewhere (a ``forget``, a
        deletion) or whose write failed half-way: the next turn reads the store."""
        dropped = self._sessions.pop(key, None)
        if dropped is not None:
            self._held -= dropped.bytes

    async def request_view(self, key: str, stored: list[Message], new: list[Message]) -> Sequence[Message]:
        """What this turn sends of the stored history and the new messages: the strategy's request
        view, or all of it.  Read in place, never copied into one list."""
        conversation = RequestMessages((stored, len(stored)), (new, len(new)))
        if self._strategy is None:
            return conversation
        entry = self._entry(key)
        if entry.view is None:
            entry.view = CompactionProvider(self._strategy, tokenizer=self._tokenizer)
        return await entry.view.prepare_request(conversation, None)

    async def store_turn(self, turn: Turn, kept: KeptHistory, facts: TurnFacts | None = None) -> TurnOutcome:
        """Store ``turn`` after ``kept`` (the history it was built on) through the one turn writer,
        with the retained history's reduction and the turn's ``facts`` in the same atomic write,
        and keep the result.

        Any error leaves nothing kept of the session (the next turn reads the store) and
        propagates: a ``HistoryError`` means nothing was stored, a ``TurnOutcomeUnknownError``
        that a retry with the same turn id settles it.
        """
        entry = self._entry(turn.session_id)
        added = turn.messages
        rewrite = None
        reducer = entry.reducer
        if self._retain is not None and self._retain_tokenizer is not None:
            if reducer is None:
                reducer = entry.reducer = HistoryReducer(self._retain, self._retain_tokenizer)
            grown = RequestMessages((kept.messages, len(kept.messages)), (added, len(added)))
            rewrite = await reducer.plan(grown, kept.version.generation)
        # The part a rewrite replaces, counted before the writer changes the copy in place.
        replaced = kept.messages[rewrite.start :] if rewrite is not None else []
        try:
            outcome = await write_turn(turn, [TurnTarget(self._history, kept, rewrite)], facts=facts)
        except BaseException:
            self.rewritten(turn.session_id)
            raise
        if not outcome.stored:
            if reducer is not None:
                reducer.reset()
            return outcome
        if entry.history is not kept:  # dropped meanwhile (others filled the bound): count again
            tokens, size = self.tokens(kept.messages), held_bytes(kept.messages)
        elif rewrite is not None and outcome.rewritten is not None:
            tokens = entry.tokens + self.tokens(rewrite.messages) - self.tokens(replaced)
            size = entry.bytes + held_bytes(rewrite.messages) - held_bytes(replaced)
        else:
            tokens, size = entry.tokens + self.tokens(added), entry.bytes + held_bytes(added)
        entry.history, entry.tokens = kept, tokens
        self._counted(turn.session_id, entry, size)
        if reducer is not None:
            if rewrite is None or outcome.rewritten is not None:
                reducer.written(rewrite, kept.version.generation, kept.messages)
            else:
                reducer.reset()  # the store had moved on: the reduction was not written
        return outcome

    def tokens(self, messages: Sequence[Message]) -> int:
        return sum(self._tokenizer.count_messages(list(messages)))
