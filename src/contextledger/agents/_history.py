"""A session's own copy of a history, so a turn reads only what changed since the last one.

Loading a long history every turn (and decoding it, for SQLite and Redis) costs in proportion
to everything ever said.  Instead the session keeps the messages it last loaded, with the
:class:`~contextledger.history.HistoryVersion` they match; a turn asks the store for its version
(one small read) and loads again only if something other than this session's own turns and
reductions changed it.  The copy lives in :meth:`Session.cache`, so a failed run drops it.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextledger.agents._session import Session
from contextledger.history import HistoryProvider, HistoryVersion
from contextledger.messages import Message

__all__ = ["SessionHistory", "kept_history", "synced_history"]


class SessionHistory:
    """The messages of one history as this session last knew them, and the version they match."""

    __slots__ = ("messages", "version")

    def __init__(self, messages: list[Message], version: HistoryVersion) -> None:
        self.messages = messages
        self.version = version

    def appended(self, messages: Sequence[Message]) -> None:
        """This session stored ``messages`` after the ones it had (a turn)."""
        self.messages.extend(messages)
        self.version = HistoryVersion(self.version.generation, self.version.length + len(messages))

    def rewritten(self, start: int, messages: Sequence[Message], version: HistoryVersion) -> None:
        """This session rewrote the history from ``start`` on, and the store is now at ``version``."""
        del self.messages[start:]
        self.messages.extend(messages)
        self.version = version


def kept_history(session: Session, history: HistoryProvider) -> SessionHistory | None:
    """The session's copy of ``history``, unchecked, if it has one."""
    kept: SessionHistory | None = session.cache(history).get("history")
    return kept


async def synced_history(session: Session, history: HistoryProvider) -> SessionHistory:
    """The session's copy of ``history``, loaded again only if the store's version moved on."""
    kept = kept_history(session, history)
    version = await history.version(session.session_id)
    if kept is not None and kept.version == version:
        return kept
    # The version is read before the messages: a write landing in between makes the copy newer
    # than its version says, so the next check reloads, never the reverse.
    kept = SessionHistory(await history.load(session.session_id), version)
    session.cache(history)["history"] = kept
    return kept
