"""History in one SQLite file: durable, embedded, shared safely by several processes on one machine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence

from contextledger._sqlite import SQLiteFailures, check_busy_timeout, check_path, open_wal
from contextledger.exceptions import ConfigurationError, HistoryCorruptError, HistoryError, HistoryUnavailableError
from contextledger.history._encoding import (
    RecentEncodings,
    check_name,
    check_session_id,
    check_start,
    check_turn_id,
    decode_message,
    decode_turn,
    encode_messages,
    encode_rewritten_turn,
    encode_turn,
    encode_turns,
    last_run,
)
from contextledger.history._protocol import HistoryVersion, StoredTurn, TurnFacts, TurnWrite
from contextledger.messages import Message

__all__ = ["SQLiteHistoryProvider"]

_SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")

# A row per message; ``seq`` orders a session's messages and the primary key makes a duplicate
# position impossible even if two writers raced (they cannot: appends run under BEGIN IMMEDIATE).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS contextledger_history (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
)
"""
_INSERT = "INSERT INTO contextledger_history (session_id, seq, body) VALUES (?, ?, ?)"
# A session's generation (see HistoryVersion): moved on by every write but an append.
_SESSIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS contextledger_sessions (
    session_id TEXT NOT NULL PRIMARY KEY,
    generation INTEGER NOT NULL
)
"""
_BUMP = (
    "INSERT INTO contextledger_sessions (session_id, generation) VALUES (?, 1) "
    "ON CONFLICT (session_id) DO UPDATE SET generation = generation + 1"
)
# One statement, so one snapshot: a session's generation and length (positions are 0..length-1).
_VERSION = (
    "SELECT (SELECT generation FROM contextledger_sessions WHERE session_id = ?), "
    "(SELECT COALESCE(MAX(seq) + 1, 0) FROM contextledger_history WHERE session_id = ?)"
)
# A row per recorded turn id: the primary key is what stores a turn id at most once, and the row
# is written in the same transaction as the turn's messages.
_TURNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS contextledger_turns (
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (session_id, turn_id)
)
"""


class SQLiteHistoryProvider:
    """Messages in a single SQLite file, one row per message, in WAL mode.

    Every write is one transaction: an append is stored whole or not at all, even if the process
    is killed in the middle of it, and a reader never sees half of a ``replace``.  Writers take
    the database's write lock up front (``BEGIN IMMEDIATE``) and compute the next position inside
    the transaction, so several processes appending to the same session interleave whole turns
    and never collide; a writer that finds the lock taken waits up to ``busy_timeout`` seconds
    before raising :class:`HistoryUnavailableError`.

    ``synchronous="NORMAL"`` (the default) keeps every acknowledged write across a crash or kill
    of the process; only a power loss or OS crash can lose the last few.  Use ``"FULL"`` when
    those must survive too, at the cost of an fsync per write.

    The file is opened on first use, in a worker thread, so neither construction nor any
    operation blocks the event loop.  If a call is cancelled while its write is in flight, the
    write still completes or rolls back as a whole.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        source_id: str = "sqlite",
        synchronous: str = "NORMAL",
        *,
        busy_timeout: float = 10.0,
    ) -> None:
        self.path: str = check_path(path)
        self.source_id: str = check_name(source_id, "source_id")
        # A rewrite writes again messages this history has just stored: encoded once, not twice.
        self._encoded = RecentEncodings()
        level = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if level not in _SYNCHRONOUS_LEVELS:
            raise ConfigurationError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS_LEVELS)}, got {synchronous!r}"
            )
        self._synchronous: str = level
        self._busy_timeout = check_busy_timeout(busy_timeout)
        self._failures = SQLiteFailures(
            f"SQLite history {self.path}",
            busy_timeout=self._busy_timeout,
            unavailable=HistoryUnavailableError,
            corrupt=HistoryCorruptError,
            failed=HistoryError,
        )
        # One connection, guarded by a lock, rather than one per thread: SQLite lets one writer
        # at a time into a file anyway, and asyncio.to_thread runs on executor threads this class
        # does not own, so per-thread connections could not all be closed by close().
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        # A second connection, for version reads on the caller's thread (see _peek_version).
        self._peek_lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteHistoryProvider({self.path!r}, source_id={self.source_id!r})"

    # Public API --------------------------------------------------------------------------

    async def load(self, session_id: str) -> list[Message]:
        key = check_session_id(session_id)
        return await asyncio.to_thread(self._load, key)

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        key, bodies, _ = encode_messages(session_id, messages, "append to", self._encoded)
        if bodies:
            await asyncio.to_thread(self._write, key, bodies, False)

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        key, bodies, _ = encode_messages(session_id, messages, "replace", self._encoded)
        await asyncio.to_thread(self._write, key, bodies, True)

    def beside(self, facts: TurnFacts, session_id: str) -> bool:
        """Whether ``facts`` live in this file (a ``SQLiteFactStore`` on the same path), so that a
        turn writes them in its own transaction (:class:`FactsBesideTurns`)."""
        return self.path != ":memory:" and facts.lives_in("sqlite", self.path)

    async def append_turn(
        self,
        session_id: str,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
        *,
        facts: TurnFacts | None = None,
    ) -> bool:
        """See :meth:`HistoryProvider.append_turn`; ``facts`` (see :meth:`beside`) are written in
        the same transaction if the turn is stored.

        A caller cancelled while this waits for the write lock (``asyncio.wait_for``) does not
        stop the write: it is committed when the lock frees, once, and a retry with the same
        turn id finds it.
        """
        key, turn, bodies, _, record = encode_turn(session_id, turn_id, inputs, reply, self._encoded)
        return (await asyncio.to_thread(self._write_turn, key, turn, bodies, record, None, facts)).stored

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
        """See :meth:`TurnRewriter.rewrite_and_append_turn`: one transaction, as ``append_turn``'s."""
        key, turn, bodies, record, suffix, _ = encode_rewritten_turn(
            session_id, start, messages, expected, turn_id, inputs, reply, self._encoded
        )
        return await asyncio.to_thread(self._write_turn, key, turn, bodies, record, (start, suffix, expected), facts)

    async def load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        key, turn = check_session_id(session_id), check_turn_id(turn_id)
        return await asyncio.to_thread(self._load_turn, key, turn)

    async def load_turns(self, session_id: str) -> list[StoredTurn]:
        key = check_session_id(session_id)
        return await asyncio.to_thread(self._load_turns, key)

    async def rewrite_turns(self, session_id: str, turns: Sequence[StoredTurn]) -> None:
        key, records, _ = encode_turns(session_id, turns)
        if records:
            await asyncio.to_thread(self._rewrite_turns, key, records)

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        turn = check_turn_id(turn_id)
        key, bodies, _ = encode_messages(session_id, messages, "undo a turn in")
        await asyncio.to_thread(self._undo_turn, key, turn, bodies)

    async def version(self, session_id: str) -> HistoryVersion:
        key = check_session_id(session_id)
        # Asked before every turn of an agent: read at once on this thread when that cannot wait
        # (see _peek_version), which spares a worker-thread hop costing ten times the read.
        found = self._peek_version(key)
        return found if found is not None else await asyncio.to_thread(self._version, key)

    async def rewrite(
        self, session_id: str, start: int, messages: Sequence[Message], expected: HistoryVersion
    ) -> HistoryVersion | None:
        key, bodies, _ = encode_messages(session_id, messages, "rewrite", self._encoded)
        check_start(start, expected)
        return await asyncio.to_thread(self._rewrite, key, start, bodies, expected)

    async def clear(self, session_id: str) -> None:
        key = check_session_id(session_id)
        await asyncio.to_thread(self._write, key, [], True, True)

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    # Work done on a worker thread ---------------------------------------------------------

    def _load(self, session_id: str) -> list[Message]:
        with self._lock:
            try:
                # One statement outside a transaction reads one consistent snapshot.
                rows = (
                    self._open()
                    .execute("SELECT body FROM contextledger_history WHERE session_id = ? ORDER BY seq", (session_id,))
                    .fetchall()
                )
            except sqlite3.Error as error:
                raise self._failures.error(error, f"load session {session_id!r}") from error
        return [
            decode_message(body, session_id=session_id, position=position, store=f"SQLite history {self.path}")
            for position, (body,) in enumerate(rows)
        ]

    def _write(self, session_id: str, bodies: list[str], replace: bool, forget_turns: bool = False) -> None:
        """Append ``bodies`` (or make them the whole history) in one transaction."""
        action = "replace" if replace and bodies else "clear" if replace else "append to"
        with self._transaction(f"{action} session {session_id!r}") as connection:
            if forget_turns:
                connection.execute("DELETE FROM contextledger_turns WHERE session_id = ?", (session_id,))
            if replace:
                connection.execute(_BUMP, (session_id,))
            self._put(connection, session_id, bodies, replace)

    @staticmethod
    def _put(connection: sqlite3.Connection, session_id: str, bodies: list[str], replace: bool) -> None:
        if replace:
            connection.execute("DELETE FROM contextledger_history WHERE session_id = ?", (session_id,))
            first = 0
        else:
            (first,) = connection.execute(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM contextledger_history WHERE session_id = ?", (session_id,)
            ).fetchone()
        connection.executemany(_INSERT, [(session_id, first + offset, body) for offset, body in enumerate(bodies)])

    def _write_turn(
        self,
        session_id: str,
        turn_id: str,
        bodies: list[str],
        record: str,
        rewrite: tuple[int, list[str], HistoryVersion] | None = None,
        facts: TurnFacts | None = None,
    ) -> TurnWrite:
        """Record ``turn_id`` and append its messages in one transaction, unless it is recorded
        already; with ``rewrite`` (start, bodies, expected version), first replace the rows from
        ``start`` on if the version is the one expected; with ``facts``, write them too."""
        with self._transaction(f"append turn {turn_id!r} to session {session_id!r} (nothing was stored)") as connection:
            inserted = connection.execute(
                "INSERT OR IGNORE INTO contextledger_turns (session_id, turn_id, record) VALUES (?, ?, ?)",
                (session_id, turn_id, record),
            ).rowcount
            if not inserted:
                return TurnWrite(False, None)
            written = TurnWrite(True, None)
            if rewrite is None:
                self._put(connection, session_id, bodies, False)
            else:
                start, suffix, expected = rewrite
                generation, length = connection.execute(_VERSION, (session_id, session_id)).fetchone()
                if HistoryVersion(generation or 0, length) != expected:
                    self._put(connection, session_id, bodies, False)
                else:
                    connection.execute(
                        "DELETE FROM contextledger_history WHERE session_id = ? AND seq >= ?", (session_id, start)
                    )
                    connection.execute(_BUMP, (session_id,))
                    rows = [*suffix, *bodies]
                    connection.executemany(
                        _INSERT, [(session_id, start + offset, body) for offset, body in enumerate(rows)]
                    )
                    written = TurnWrite(True, HistoryVersion(expected.generation + 1, start + len(rows)))
            if facts is not None:
                facts.write_sqlite(connection)
        return written

    def _peek_version(self, session_id: str) -> HistoryVersion | None:
        """The version read on the caller's thread over a reader connection that never waits (no
        busy timeout), or None if reading might have to wait or failed: the file is not open yet,
        another thread is using the reader, or SQLite answered busy.  A reader in WAL mode does
        not wait for writers, so this is the usual case; the worker thread handles the rest and
        reports any real failure."""
        if self._connection is None or self.path == ":memory:" or not self._peek_lock.acquire(blocking=False):
            return None
        try:
            if self._reader is None:
                self._reader = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
            generation, length = self._reader.execute(_VERSION, (session_id, session_id)).fetchone()
        except sqlite3.Error:
            return None
        finally:
            self._peek_lock.release()
        return HistoryVersion(generation or 0, length)

    def _version(self, session_id: str) -> HistoryVersion:
        with self._lock:
            try:
                generation, length = self._open().execute(_VERSION, (session_id, session_id)).fetchone()
            except sqlite3.Error as error:
                raise self._failures.error(error, f"read the version of session {session_id!r}") from error
        return HistoryVersion(generation or 0, length)

    def _rewrite(
        self, session_id: str, start: int, bodies: list[str], expected: HistoryVersion
    ) -> HistoryVersion | None:
        """Replace the rows from position ``start`` on, in one transaction, if the version is ``expected``."""
        with self._transaction(f"rewrite session {session_id!r}") as connection:
            generation, length = connection.execute(_VERSION, (session_id, session_id)).fetchone()
            if HistoryVersion(generation or 0, length) != expected:
                return None  # nothing written: the read-only transaction just ends
            connection.execute(
                "DELETE FROM contextledger_history WHERE session_id = ? AND seq >= ?", (session_id, start)
            )
            connection.executemany(_INSERT, [(session_id, start + offset, body) for offset, body in enumerate(bodies)])
            connection.execute(_BUMP, (session_id,))
        return HistoryVersion(expected.generation + 1, start + len(bodies))

    def _load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        with self._lock:
            try:
                row = (
                    self._open()
                    .execute(
                        "SELECT record FROM contextledger_turns WHERE session_id = ? AND turn_id = ?",
                        (session_id, turn_id),
                    )
                    .fetchone()
                )
            except sqlite3.Error as error:
                raise self._failures.error(error, f"load turn {turn_id!r} of session {session_id!r}") from error
        if row is None:
            return None
        return decode_turn(row[0], session_id=session_id, turn_id=turn_id, store=f"SQLite history {self.path}")

    def _load_turns(self, session_id: str) -> list[StoredTurn]:
        with self._lock:
            try:
                # One statement, one snapshot; rowid is the order the turns were recorded in.
                rows = (
                    self._open()
                    .execute(
                        "SELECT turn_id, record FROM contextledger_turns WHERE session_id = ? ORDER BY rowid",
                        (session_id,),
                    )
                    .fetchall()
                )
            except sqlite3.Error as error:
                raise self._failures.error(error, f"load the turns of session {session_id!r}") from error
        store = f"SQLite history {self.path}"
        return [decode_turn(record, session_id=session_id, turn_id=turn, store=store) for turn, record in rows]

    def _rewrite_turns(self, session_id: str, records: list[tuple[str, str]]) -> None:
        """Update the records of the turns still recorded, in one transaction (others are skipped)."""
        with self._transaction(f"rewrite the turns of session {session_id!r}") as connection:
            connection.executemany(
                "UPDATE contextledger_turns SET record = ? WHERE session_id = ? AND turn_id = ?",
                [(record, session_id, turn) for turn, record in records],
            )

    def _undo_turn(self, session_id: str, turn_id: str, bodies: list[str]) -> None:
        with self._transaction(f"undo turn {turn_id!r} of session {session_id!r}") as connection:
            connection.execute(
                "DELETE FROM contextledger_turns WHERE session_id = ? AND turn_id = ?", (session_id, turn_id)
            )
            if bodies:
                rows = connection.execute(
                    "SELECT seq, body FROM contextledger_history WHERE session_id = ? ORDER BY seq",
                    (session_id,),
                ).fetchall()
                start = last_run([body for _, body in rows], bodies)
                if start is not None:
                    # Positions stay 0..length-1 (a rewrite addresses them): write the rest again.
                    kept = [body for _, body in rows[:start] + rows[start + len(bodies) :]]
                    self._put(connection, session_id, kept, True)
            connection.execute(_BUMP, (session_id,))

    @contextlib.contextmanager
    def _transaction(self, action: str) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock: ``BEGIN IMMEDIATE`` (the write lock up front),
        ``COMMIT`` when the block ends, a roll-back on any error or cancellation; an SQLite error
        becomes the :class:`HistoryError` saying what ``action`` could not do."""
        with self._lock:
            try:
                connection = self._open()
                connection.execute("BEGIN IMMEDIATE")
                try:
                    yield connection
                    connection.execute("COMMIT")
                except BaseException:
                    self._roll_back(connection)
                    raise
            except sqlite3.Error as error:
                raise self._failures.error(error, action) from error

    def _open(self) -> sqlite3.Connection:
        """The connection, opened and set up on first use (the lock is held)."""
        if self._connection is None:
            self._connection = open_wal(
                self.path,
                busy_timeout=self._busy_timeout,
                synchronous=self._synchronous,
                schema=(_SCHEMA, _TURNS_SCHEMA, _SESSIONS_SCHEMA),
            )
        return self._connection

    def _roll_back(self, connection: sqlite3.Connection) -> None:
        try:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        except sqlite3.Error:
            # The connection is in an unknown state; drop it so the next call starts clean.
            # SQLite rolls back whatever was not committed when the connection closes.
            self._connection = None
            connection.close()

    def _close(self) -> None:
        with self._lock, self._peek_lock:
            for connection in (self._connection, self._reader):
                if connection is not None:
                    connection.close()
            self._connection = self._reader = None
