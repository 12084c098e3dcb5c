"""History kept in the process's memory: the default, for tests, demos and short-lived agents."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress

from contextledger.history._encoding import (
    RecentEncodings,
    check_name,
    check_session_id,
    check_start,
    check_turn_id,
    encode_messages,
    encode_rewritten_turn,
    encode_turn,
    encode_turns,
    last_run,
)
from contextledger.history._protocol import HistoryVersion, StoredTurn, TurnFacts, TurnWrite
from contextledger.messages import Message

__all__ = ["InMemoryHistoryProvider"]


def _common_prefix(old: list[Message], new: list[Message]) -> int:
    """Length of the longest common prefix, by bisection over list comparisons (each done in C)."""
    low, high = 0, min(len(old), len(new))
    while low < high:
        middle = (low + high + 1) // 2
        if new[:middle] == old[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _materialise(messages: object) -> object:
    """A list of an iterable batch (so a generator is read once); anything else as it came, for the checks to refuse."""
    if isinstance(messages, Iterable) and not isinstance(messages, (str, bytes, Mapping, Message)):
        return list(messages)
    return messages


class InMemoryHistoryProvider:
    """Messages per session in a dict, lost when the process ends.

    Messages go through the same checks and JSON round trip as in the durable stores, so code
    that works against this provider keeps working against SQLite or Redis.  Safe to share
    between asyncio tasks and threads: each operation holds a lock for a few list operations
    and never awaits while holding it.
    """

    def __init__(self, source_id: str = "in_memory") -> None:
        self.source_id: str = check_name(source_id, "source_id")
        # A rewrite writes again messages this history has just stored: encoded once, not twice.
        self._encoded = RecentEncodings()
        self._lock = threading.Lock()
        self._sessions: dict[str, list[Message]] = {}
        self._turns: dict[str, dict[str, StoredTurn]] = {}
        self._generations: dict[str, int] = {}

    def _rewritten(self, key: str) -> None:
        """Move the session's generation on (the lock is held); see :class:`HistoryVersion`."""
        self._generations[key] = self._generations.get(key, 0) + 1

    def __repr__(self) -> str:
        return f"InMemoryHistoryProvider(source_id={self.source_id!r})"

    async def load(self, session_id: str) -> list[Message]:
        key = check_session_id(session_id)
        with self._lock:
            return list(self._sessions.get(key, ()))

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        items = _materialise(messages)
        key, _, decoded = encode_messages(session_id, items, "append to", self._encoded)
        if not decoded:
            return
        checked: list[Message] = items  # type: ignore[assignment]  # every item was just checked to be a Message
        # Messages are immutable and were just shown to read back equal from their stored form,
        # so the objects themselves are kept: a later load hands back the very objects an agent
        # indexed, and its caches (token counts, a request view) stay valid.
        with self._lock:
            self._sessions.setdefault(key, []).extend(checked)

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        items = _materialise(messages)
        current = check_session_id(session_id)
        fresh: object = items
        if isinstance(items, list):
            # A reduction rewrites a long history but keeps most of its messages: only the new
            # ones need the storage check (found with set operations, as this runs every turn).
            with self._lock:
                stored_now = self._sessions.get(current, [])
            same = _common_prefix(stored_now, items)
            tail = items[same:]
            new_ids = set(map(id, tail)).difference(map(id, stored_now[same:]))
            fresh = list(compress(tail, map(new_ids.__contains__, map(id, tail)))) if new_ids else []
        key, _, _ = encode_messages(session_id, fresh, "replace", self._encoded)
        stored = items if isinstance(items, list) else []
        with self._lock:
            if stored:
                self._sessions[key] = stored
            else:
                self._sessions.pop(key, None)
            self._rewritten(key)

    def beside(self, facts: TurnFacts, session_id: str) -> bool:
        """Whether ``facts`` live in this process too (a ``FactStore``), so that a turn writes
        them under the same lock (:class:`FactsBesideTurns`)."""
        return facts.lives_in("memory", "")

    async def append_turn(
        self,
        session_id: str,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
        *,
        facts: TurnFacts | None = None,
    ) -> bool:
        input_items, reply_items = _materialise(inputs), _materialise(reply)
        key, turn, _, _, _ = encode_turn(session_id, turn_id, input_items, reply_items, self._encoded)
        # Checked to be lists of Messages just now; the objects are kept, as in append().
        stored = StoredTurn(turn, tuple(input_items), tuple(reply_items))  # type: ignore[arg-type]
        return self._write_turn(key, stored, None, facts).stored

    async def rewrite_and_append_turn(
        self,
        session_id: str,
        start: int,
        messages: Sequence[Message],
        expected: HistoryVersion,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
        *,
        facts: TurnFacts | None = None,
    ) -> TurnWrite:
        """See :meth:`TurnRewriter.rewrite_and_append_turn`; everything is checked before the lock."""
        input_items, reply_items, items = _materialise(inputs), _materialise(reply), _materialise(messages)
        key, turn, *_ = encode_rewritten_turn(
            session_id, start, items, expected, turn_id, input_items, reply_items, self._encoded
        )
        stored = StoredTurn(turn, tuple(input_items), tuple(reply_items))  # type: ignore[arg-type]
        return self._write_turn(key, stored, (start, items, expected), facts)  # type: ignore[arg-type]

    def _write_turn(
        self,
        key: str,
        stored: StoredTurn,
        rewrite: tuple[int, list[Message], HistoryVersion] | None = None,
        facts: TurnFacts | None = None,
    ) -> TurnWrite:
        """Record the turn and append its messages under the lock, unless it is recorded already;
        with ``rewrite`` (start, messages, expected version), first replace the stored messages
        from ``start`` on if the version is the one expected."""
        with self._lock:
            turns = self._turns.setdefault(key, {})
            if stored.turn_id in turns:
                return TurnWrite(False, None)
            turns[stored.turn_id] = stored
            history = self._sessions.setdefault(key, [])
            rewritten = (
                rewrite is not None and HistoryVersion(self._generations.get(key, 0), len(history)) == rewrite[2]
            )
            if rewrite is not None and rewritten:
                del history[rewrite[0] :]
                history.extend(rewrite[1])
                self._rewritten(key)
            history.extend([*stored.inputs, *stored.reply])
            if facts is not None:
                facts.write_memory()
            return TurnWrite(True, HistoryVersion(self._generations[key], len(history)) if rewritten else None)

    async def load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        key, turn = check_session_id(session_id), check_turn_id(turn_id)
        with self._lock:
            return self._turns.get(key, {}).get(turn)

    async def load_turns(self, session_id: str) -> list[StoredTurn]:
        key = check_session_id(session_id)
        with self._lock:
            return list(self._turns.get(key, {}).values())

    async def rewrite_turns(self, session_id: str, turns: Sequence[StoredTurn]) -> None:
        key, _, checked = encode_turns(session_id, _materialise(turns))
        with self._lock:
            recorded = self._turns.get(key, {})
            for turn in checked:
                if turn.turn_id in recorded:
                    recorded[turn.turn_id] = turn

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        items = _materialise(messages)
        key, turn = check_session_id(session_id), check_turn_id(turn_id)
        encode_messages(key, items, "undo a turn in")
        run: list[Message] = items  # type: ignore[assignment]  # checked just now
        with self._lock:
            self._turns.get(key, {}).pop(turn, None)
            stored = self._sessions.get(key, [])
            start = last_run(stored, run) if run else None
            if start is not None:
                del stored[start : start + len(run)]
            self._rewritten(key)

    async def clear(self, session_id: str) -> None:
        key = check_session_id(session_id)
        with self._lock:
            self._sessions.pop(key, None)
            self._turns.pop(key, None)
            self._rewritten(key)

    async def version(self, session_id: str) -> HistoryVersion:
        key = check_session_id(session_id)
        with self._lock:
            return HistoryVersion(self._generations.get(key, 0), len(self._sessions.get(key, ())))

    async def rewrite(
        self, session_id: str, start: int, messages: Sequence[Message], expected: HistoryVersion
    ) -> HistoryVersion | None:
        items = _materialise(messages)
        key, _, _ = encode_messages(session_id, items, "rewrite", self._encoded)
        check_start(start, expected)
        suffix: list[Message] = items  # type: ignore[assignment]  # checked just now
        with self._lock:
            stored = self._sessions.setdefault(key, [])
            if HistoryVersion(self._generations.get(key, 0), len(stored)) != expected:
                return None
            del stored[start:]
            stored.extend(suffix)
            self._rewritten(key)
            return HistoryVersion(self._generations[key], len(stored))

    async def close(self) -> None:
        """Nothing to release; the stored sessions stay readable."""
