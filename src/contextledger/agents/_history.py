"""A session's copy of a history, so a turn reads only what changed since the last one.

Loading a long history every turn (and decoding it, for SQLite and Redis) costs in proportion
to everything ever said.  Instead the session keeps a :class:`~contextledger.history.KeptHistory`
(the messages it last loaded, with the version they match) in :meth:`Session.cache`, so a
failed run drops it; a turn asks the store for its version (one small read) and loads again
only if something other than this session's own turns and reductions changed it.
"""

from __future__ import annotations

from contextledger.agents._session import Session
from contextledger.history import HistoryProvider, KeptHistory, synced_history

__all__ = ["kept_history", "session_history"]


def kept_history(session: Session, history: HistoryProvider) -> KeptHistory | None:
    """The session's copy of ``history``, unchecked, if it has one."""
    kept: KeptHistory | None = session.cache(history).get("history")
    return kept


async def session_history(session: Session, history: HistoryProvider) -> KeptHistory:
    """The session's copy of ``history``, loaded again only if the store's version moved on."""
    kept = await synced_history(history, session.session_id, kept_history(session, history))
    session.cache(history)["history"] = kept
    return kept
