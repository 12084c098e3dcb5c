"""History kept in the process's memory: the default, for tests, demos and short-lived agents."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from contextledger.history._encoding import check_name, check_session_id, encode_messages
from contextledger.messages import Message

__all__ = ["InMemoryHistoryProvider"]


class InMemoryHistoryProvider:
    """Messages per session in a dict, lost when the process ends.

    Messages go through the same checks and JSON round trip as in the durable stores, so code
    that works against this provider keeps working against SQLite or Redis.  Safe to share
    between asyncio tasks and threads: each operation holds a lock for a few list operations
    and never awaits while holding it.
    """

    def __init__(self, source_id: str = "in_memory") -> None:
        self.source_id: str = check_name(source_id, "source_id")
        self._lock = threading.Lock()
        self._sessions: dict[str, list[Message]] = {}

    def __repr__(self) -> str:
        return f"InMemoryHistoryProvider(source_id={self.source_id!r})"

    async def load(self, session_id: str) -> list[Message]:
        key = check_session_id(session_id)
        with self._lock:
            return list(self._sessions.get(key, ()))

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        key, _, stored = encode_messages(session_id, messages, "append to")
        if not stored:
            return
        with self._lock:
            self._sessions.setdefault(key, []).extend(stored)

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        key, _, stored = encode_messages(session_id, messages, "replace")
        with self._lock:
            if stored:
                self._sessions[key] = stored
            else:
                self._sessions.pop(key, None)

    async def clear(self, session_id: str) -> None:
        key = check_session_id(session_id)
        with self._lock:
            self._sessions.pop(key, None)

    async def close(self) -> None:
        """Nothing to release; the stored sessions stay readable."""
