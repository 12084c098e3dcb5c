"""What one proxy process keeps of each session between its turns, so a turn costs what it adds.

Reading a long history from the store and indexing it again on every turn would make each turn
cost the whole session; instead the process keeps, per session, the history as it stood after
its last turn (with its token count) and the request view built on it (a
:class:`~contextledger.agents.CompactionProvider`, which indexes only what is new).  The copy is
used only while the store's version of the session is the one it was taken at: any proxy that
writes the session bumps the version (under the session's lock), so a turn served by another
process, a ``forget`` or a reduction makes the next turn here read the store again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TypeVar

from contextledger.agents import CompactionProvider
from contextledger.compaction import CompactionStrategy
from contextledger.messages import Message
from contextledger.serve._sessions import Sessions
from contextledger.tokenizers import Tokenizer

__all__ = ["Kept", "KeptSessions"]

_KEPT = 256
_Value = TypeVar("_Value")


@dataclass(frozen=True, slots=True)
class Kept:
    """A session's history as this process last saw it, valid while the store's version is ``version``."""

    version: int
    messages: list[Message]
    tokens: int


class KeptSessions:
    """The most recently used sessions' histories and request views (at most 256 of each)."""

    def __init__(self, sessions: Sessions, strategy: CompactionStrategy | None, tokenizer: Tokenizer) -> None:
        self._sessions = sessions
        self._strategy = strategy
        self._tokenizer = tokenizer
        self._histories: OrderedDict[str, Kept] = OrderedDict()
        self._views: OrderedDict[str, CompactionProvider] = OrderedDict()

    async def history(self, key: str) -> Kept:
        """The session's stored history: the copy kept here while no proxy has written the session
        since, else read from the store (and kept)."""
        version = await self._sessions.version(key)
        kept = self._histories.get(key)
        if kept is None or kept.version != version:
            messages = await self._sessions.history.load(key)
            kept = Kept(version, messages, self.tokens(messages))
            _remember(self._histories, key, kept)
        self._histories.move_to_end(key)
        return kept

    async def written(self, key: str, messages: list[Message] | None, tokens: int | None = None) -> None:
        """Record a write of the session's history: keep ``messages`` (``tokens`` long, counted if
        not given) as its copy, or with ``None`` (a rewrite this process does not hold, a write
        that failed half-way) drop the copy and the view, so the next turn reads the store."""
        version = await self._sessions.changed(key)
        self._histories.pop(key, None)
        if messages is None:
            self._views.pop(key, None)
            return
        _remember(self._histories, key, Kept(version, messages, self.tokens(messages) if tokens is None else tokens))

    async def request_view(self, key: str, conversation: list[Message]) -> list[Message]:
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
