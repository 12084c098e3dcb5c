"""Facts in one SQLite file: the embedded default when facts must outlive the process.

Persistence is opt-in and defines what design.md#fact-persistence asks of it: an **owner** per fact set (every
row names its owner, and a store reads and writes only its own), an **expiry** (``ttl_seconds``
after a fact is recorded it is no longer shown, sent or kept), **revocation** (``revoke``, an
operator's forget with a reason) and a **review trail** of every admission, correction,
eviction, rejection, forget, revocation and expiry.

Every operation is one transaction taken with ``BEGIN IMMEDIATE``: the ticket is checked and
the facts written under the file's write lock, so several processes sharing the file never lose
or resurrect a fact, and an operation that returned is on disk (WAL mode) even if the process
is killed the next instant.  The API is synchronous like :class:`FactStore`'s; each operation
is a few milliseconds of local file work.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

from contextledger._sqlite import SQLiteFailures, check_busy_timeout, check_path, open_wal
from contextledger.exceptions import ContextLedgerError, FactsError
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._store import ALL_KEYS, Clock, LedgerStore, State, utc_clock
from contextledger.facts._trail import ReviewEvent, decode_event, decode_fact, encode_event, encode_fact, erase

__all__ = ["SQLiteFactStore"]

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="SQLiteFactStore")
_TABLES = (
    """CREATE TABLE IF NOT EXISTS contextledger_fact_owners (
        owner TEXT PRIMARY KEY, epoch INTEGER NOT NULL, turn INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS contextledger_facts (
        owner TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (owner, key))""",
    """CREATE TABLE IF NOT EXISTS contextledger_fact_trail (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL, key TEXT, has_value INTEGER NOT NULL,
        body TEXT NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS contextledger_fact_trail_owner_key
        ON contextledger_fact_trail (owner, key, has_value)""",
)


class SQLiteFactStore(LedgerStore):
    """The fact store contract with one owner's facts and trail in a SQLite file (see the module docstring).

    ``path`` is the file (created if missing; its directory must exist).  Stores opened on the
    same file with different owners never see each other's facts.  A file that cannot be
    opened or read raises :class:`FactsError` naming it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        owner: str,
        schema: FactSchema = DEFAULT_SCHEMA,
        ttl_seconds: float | None = None,
        clock: Clock = utc_clock,
        busy_timeout: float = 30.0,
    ) -> None:
        super().__init__(schema=schema, owner=owner, ttl_seconds=ttl_seconds, clock=clock)
        self.path = check_path(path)
        self._busy_timeout = check_busy_timeout(busy_timeout)
        self._failures = SQLiteFailures(
            f"SQLite fact store {self.path}",
            busy_timeout=self._busy_timeout,
            unavailable=FactsError,
            corrupt=FactsError,
            failed=FactsError,
        )
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteFactStore({self.path!r}, owner={self._owner!r})"

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (the store opens it again if used after)."""
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    # The backend -------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = open_wal(
                self.path, busy_timeout=self._busy_timeout, synchronous="NORMAL", schema=_TABLES
            )
        return self._connection

    def _read_state(self, connection: sqlite3.Connection) -> State:
        row = connection.execute(
            "SELECT epoch, turn FROM contextledger_fact_owners WHERE owner = ?", (self._owner,)
        ).fetchone()
        epoch, turn = (0, 0) if row is None else (int(row[0]), int(row[1]))
        facts = {}
        for key, body in connection.execute(
            "SELECT key, body FROM contextledger_facts WHERE owner = ?", (self._owner,)
        ):
            facts[key] = decode_fact(body)
        return State(epoch, turn, facts)

    def _failure(self, error: Exception, action: str) -> ContextLedgerError:
        if isinstance(error, sqlite3.Error):
            return self._failures.error(error, action)
        return FactsError(
            f"cannot {action}: SQLite fact store {self.path} holds rows that are not facts ({error}); "
            "another program wrote them, so use another file"
        )

    def _transact(self, step: Callable[[State], _T]) -> _T:
        with self._lock:
            try:
                connection = self._open()
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise self._failure(error, "write the facts") from error
            try:
                result = self.write_in(connection, step)
                connection.execute("COMMIT")
            except BaseException as error:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                if isinstance(error, (sqlite3.Error, ValueError, KeyError, TypeError)) and not isinstance(
                    error, FactsError
                ):
                    raise self._failure(error, "write the facts") from error
                raise
            return result

    def write_in(self, connection: sqlite3.Connection, step: Callable[[State], _T]) -> _T:
        """Run ``step`` on the owner's facts inside a transaction the caller holds on this store's
        file (a history's turn, so that both commit together or neither does)."""
        try:
            before = self._read_state(connection)
        except (ValueError, KeyError, TypeError) as error:
            raise self._failure(error, "write the facts") from error
        state = State(before.epoch, before.turn, dict(before.facts))
        result = step(state)
        self._write(connection, before, state)
        return result

    def prepare_tables(self) -> None:
        """Create the fact tables if missing, so another connection to the file can write them."""
        with self._lock:
            try:
                self._open()
            except sqlite3.Error as error:
                raise self._failure(error, "open the facts") from error

    def _write(self, connection: sqlite3.Connection, before: State, state: State) -> None:
        owner = self._owner
        if (state.epoch, state.turn) != (before.epoch, before.turn):
            connection.execute(
                "INSERT INTO contextledger_fact_owners (owner, epoch, turn) VALUES (?, ?, ?) "
                "ON CONFLICT (owner) DO UPDATE SET epoch = excluded.epoch, turn = excluded.turn",
                (owner, state.epoch, state.turn),
            )
        gone = [key for key in before.facts if key not in state.facts]
        connection.executemany(
            "DELETE FROM contextledger_facts WHERE owner = ? AND key = ?", [(owner, key) for key in gone]
        )
        changed = [fact for key, fact in state.facts.items() if before.facts.get(key) != fact]
        connection.executemany(
            "INSERT INTO contextledger_facts (owner, key, body) VALUES (?, ?, ?) "
            "ON CONFLICT (owner, key) DO UPDATE SET body = excluded.body",
            [(owner, fact.key, encode_fact(fact)) for fact in changed],
        )
        if state.erase is not None:
            if state.erase == ALL_KEYS:
                rows = connection.execute(
                    "SELECT seq, body FROM contextledger_fact_trail WHERE owner = ? AND has_value = 1", (owner,)
                ).fetchall()
            else:
                rows = connection.execute(
                    "SELECT seq, body FROM contextledger_fact_trail WHERE owner = ? AND key = ? AND has_value = 1",
                    (owner, state.erase),
                ).fetchall()
            connection.executemany(
                "UPDATE contextledger_fact_trail SET body = ?, has_value = 0 WHERE seq = ?",
                [(encode_event(erase(decode_event(body))), seq) for seq, body in rows],
            )
        connection.executemany(
            "INSERT INTO contextledger_fact_trail (owner, key, has_value, body) VALUES (?, ?, ?, ?)",
            [
                (owner, event.key, int(event.value is not None or event.evidence is not None), encode_event(event))
                for event in state.events
            ],
        )

    def _peek(self) -> State:
        with self._lock:
            try:
                connection = self._open()
                connection.execute("BEGIN")
                try:
                    return self._read_state(connection)
                finally:
                    connection.execute("COMMIT")
            except (sqlite3.Error, ValueError, KeyError, TypeError) as error:
                raise self._failure(error, "read the facts") from error

    def _trail(self) -> list[ReviewEvent]:
        with self._lock:
            try:
                rows = (
                    self._open()
                    .execute("SELECT body FROM contextledger_fact_trail WHERE owner = ? ORDER BY seq", (self._owner,))
                    .fetchall()
                )
                return [decode_event(body) for (body,) in rows]
            except (sqlite3.Error, ValueError, KeyError, TypeError) as error:
                raise self._failure(error, "read the review trail") from error
