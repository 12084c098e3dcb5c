"""The one interface every history store implements, so an agent can switch stores without changing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from contextledger.messages import Message

__all__ = ["HistoryProvider"]


@runtime_checkable
class HistoryProvider(Protocol):
    """Where a conversation's messages live between turns, keyed by session id.

    Every implementation promises the same behaviour (one conformance suite checks all of
    them): ``load`` returns the stored messages in order, equal to what was written, ids and
    ``additional_properties`` included; ``append`` and ``replace`` store a batch whole or not
    at all; bad input raises before anything is written; a store that fails raises a
    :class:`~contextledger.exceptions.HistoryError` and leaves the stored history as it was.
    """

    source_id: str
    """Names this store to components that act on "the history" (a compaction provider's
    ``history_source_id``), so an agent with several stores can say which one it means."""

    async def load(self, session_id: str) -> list[Message]:
        """The session's messages in the order they were stored; empty for an unknown session.

        The list is the caller's to change; changing it does not change the stored history.
        """
        ...

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        """Add messages after the stored ones, all of them or (on any error) none."""
        ...

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        """Atomically make ``messages`` the session's whole stored history.

        A reducer that keeps only a reduced history uses this; a reader never sees a mix of
        the old list and the new one.
        """
        ...

    async def clear(self, session_id: str) -> None:
        """Forget the session's messages; clearing an unknown session is not an error."""
        ...

    async def close(self) -> None:
        """Release connections and files; calling it twice is harmless, and a later call reopens them."""
        ...
