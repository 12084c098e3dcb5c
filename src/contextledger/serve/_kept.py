"""What one proxy process keeps of each session between its turns, so a turn costs what it adds.

Reading a long history from the store and indexing it again on every turn would make each turn
cost the whole session; instead the process keeps, per session, the history as it stood after
its last turn (with its token count) and the request view built on it (a
:class:`~contextledger.agents.CompactionProvider`, which indexes only what is new).  The copy is
used only while the history store's own :class:`~contextledger.history.HistoryVersion` of the
session is the one the copy stands for: anything that writes the session (another proxy
process, an agent on the same store, a ``forget``, a reduction) moves the version, and the next
turn here reads the store again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from contextledger.agents import CompactionProvider
from contextledger.compaction import CompactionStrategy
from contextledger.history import HistoryProvider, HistoryVersion
from contextledger.messages import Message
from contextledger.tokenizers import Tokenizer

__all__ = ["Kept", "KeptSessions"]

_KEPT = 256
_Value = TypeVar("_Value")


@dataclass(frozen=True, slots=True)
class Kept:
    """A session's history as this process last saw it, valid while the store's version is ``version``."""

    version: HistoryVersion
    messages: list[Message]
    tokens: int


class KeptSessions:
    """The most recently used sessions' histories and request views (at most 256 of each)."""

    def __init__(self, history: HistoryProvider, strategy: CompactionStrategy | None, tokenizer: Tokenizer) -> None:
        self._history = history
        self._strategy = strategy
        self._tokenizer = tokenizer
        self._histories: OrderedDict[str, Kept] = OrderedDict()
        self._views: OrderedDict[str, CompactionProvider] = OrderedDict()

    async def history(self, key: str) -> Kept:
        """The session's stored history: the copy kept here while no proxy has written the session
        since, else read from the store (and kept)."""
        version = await self._history.version(key)
        kept = self._histories.get(key)
        if kept is None or kept.version != version:
            # Read after the version: a write in between makes the copy look older than it is
            # (read again next time), never newer.
            messages = await self._history.load(key)
            kept = Kept(version, messages, self.tokens(messages))
            _remember(self._histories, key, kept)
        self._histories.move_to_end(key)
        return kept

    def appended(self, key: str, before: Kept, added: list[Message], tokens: int) -> None:
        """Record that ``added`` was appended after ``before`` (the copy this turn was built on):
        the copy now stands for the version an append leaves, same generation and longer."""
        version = HistoryVersion(before.version.generation, before.version.length + len(added))
        _remember(self._histories, key, Kept(version, [*before.messages, *added], before.tokens + tokens))

    def rewritten(self, key: str) -> None:
        """Forget the copy and the request view of a session whose history was rewritten or
        whose write failed half-way: the next turn reads the store."""
        self._histories.pop(key, None)
        self._views.pop(key, None)

    async def request_view(self, key: str, conversation: list[Message]) -> Sequence[Message]:
        """What this turn sends of ``conversation``: the strategy's request view, or all of it."""
        if self._strategy is None:
            return conversation
        provider = self._views.get(key)
        if provider is None:
            provider = CompactionProvider(self._strategy, tokenizer=self._tokenizer)
            _remember(self._views, key, provider)
        self._views.move_to_end(key)
        return await provider.prepare_request(conversation, None)

    def tokens(self, messages: list[Message]) -> int:
        return sum(self._tokenizer.count_messages(messages))


def _remember(kept: OrderedDict[str, _Value], key: str, value: _Value) -> None:
    kept[key] = value
    while len(kept) > _KEPT:
        kept.popitem(last=False)
