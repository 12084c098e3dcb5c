"""History in one SQLite file: durable, embedded, shared safely by several processes on one machine."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Sequence

from contextledger.exceptions import ConfigurationError, HistoryCorruptError, HistoryError, HistoryUnavailableError
from contextledger.history._encoding import check_name, check_session_id, decode_message, encode_messages
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
        try:
            self.path: str = os.fspath(path)
        except TypeError:
            raise ConfigurationError(f"path must be a file path, got {path!r}") from None
        if not isinstance(self.path, str) or not self.path:
            raise ConfigurationError(f"path must be a non-empty file path, got {path!r}")
        self.source_id: str = check_name(source_id, "source_id")
        level = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if level not in _SYNCHRONOUS_LEVELS:
            raise ConfigurationError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS_LEVELS)}, got {synchronous!r}"
            )
        self._synchronous: str = level
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)) or not busy_timeout >= 0:
            raise ConfigurationError(f"busy_timeout must be a number of seconds >= 0, got {busy_timeout!r}")
        self._busy_timeout = float(busy_timeout)
        # One connection, guarded by a lock, rather than one per thread: SQLite lets one writer
        # at a time into a file anyway, and asyncio.to_thread runs on executor threads this class
        # does not own, so per-thread connections could not all be closed by close().
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteHistoryProvider({self.path!r}, source_id={self.source_id!r})"

    # Public API --------------------------------------------------------------------------

    async def load(self, session_id: str) -> list[Message]:
        key = check_session_id(session_id)
        return await asyncio.to_thread(self._load, key)

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        key, bodies, _ = encode_messages(session_id, messages, "append to")
        if bodies:
            await asyncio.to_thread(self._write, key, bodies, False)

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        key, bodies, _ = encode_messages(session_id, messages, "replace")
        await asyncio.to_thread(self._write, key, bodies, True)

    async def clear(self, session_id: str) -> None:
        key = check_session_id(session_id)
        await asyncio.to_thread(self._write, key, [], True)

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
                raise self._failure(error, f"load session {session_id!r}") from error
        return [
            decode_message(body, session_id=session_id, position=position, store=f"SQLite history {self.path}")
            for position, (body,) in enumerate(rows)
        ]

    def _write(self, session_id: str, bodies: list[str], replace: bool) -> None:
        """Append ``bodies`` (or make them the whole history) in one transaction."""
        with self._lock:
            try:
                connection = self._open()
                connection.execute("BEGIN IMMEDIATE")
                try:
                    if replace:
                        connection.execute("DELETE FROM contextledger_history WHERE session_id = ?", (session_id,))
                        first = 0
                    else:
                        (first,) = connection.execute(
                            "SELECT COALESCE(MAX(seq) + 1, 0) FROM contextledger_history WHERE session_id = ?",
                            (session_id,),
                        ).fetchone()
                    connection.executemany(
                        _INSERT, [(session_id, first + offset, body) for offset, body in enumerate(bodies)]
                    )
                    connection.execute("COMMIT")
                except BaseException:
                    self._roll_back(connection)
                    raise
            except sqlite3.Error as error:
                action = "replace" if replace and bodies else "clear" if replace else "append to"
                raise self._failure(error, f"{action} session {session_id!r}") from error

    def _open(self) -> sqlite3.Connection:
        """The connection, opened and set up on first use (the lock is held)."""
        if self._connection is not None:
            return self._connection
        # isolation_level=None: no implicit transactions; every write says BEGIN IMMEDIATE itself.
        connection = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._set_up(connection)
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection

    def _set_up(self, connection: sqlite3.Connection) -> None:
        connection.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        connection.execute(f"PRAGMA synchronous = {self._synchronous}")
        # Switching a new file to WAL needs an exclusive lock, and SQLite does not always wait for
        # it through the busy handler; several processes opening a new file at once retry here.
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    connection.execute("PRAGMA journal_mode = WAL")
                connection.execute(_SCHEMA)
                return
            except sqlite3.OperationalError as error:
                if not _is_busy(error) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

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
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    def _failure(self, error: sqlite3.Error, action: str) -> HistoryError:
        reason = str(error)
        if isinstance(error, sqlite3.OperationalError):
            if _is_busy(error):
                hint = f"another connection held the write lock for more than busy_timeout={self._busy_timeout:g}s"
            elif "unable to open" in reason:
                hint = "check that the directory exists and is writable"
            elif "readonly" in reason or "read-only" in reason:
                hint = "the file or its directory is read-only"
            else:
                hint = "the file could not be used"
            return HistoryUnavailableError(f"cannot {action}: SQLite history {self.path} ({reason}); {hint}")
        if type(error) is sqlite3.DatabaseError:
            # SQLITE_NOTADB and SQLITE_CORRUPT: the file holds something other than a sound database.
            return HistoryCorruptError(
                f"cannot {action}: SQLite history {self.path} is not a readable database ({reason})"
            )
        return HistoryError(f"cannot {action}: SQLite history {self.path} failed ({reason})")


def _is_busy(error: sqlite3.Error) -> bool:
    reason = str(error)
    return "locked" in reason or "busy" in reason
