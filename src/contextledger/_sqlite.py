"""Opening an SQLite file shared by several threads and processes, the same way for every store.

The history, the persistent fact store and the proxy's session registry all keep one connection
per object, write with ``BEGIN IMMEDIATE`` themselves and read in WAL mode, so readers never wait
for a writer.  Setting that up has one trap worth writing once: switching a new file to WAL needs
an exclusive lock that SQLite does not always wait for through its busy handler, so several
processes opening a new file at once must retry it themselves.

Their errors read the same way too: :class:`SQLiteFailures` turns an ``sqlite3`` error into the
store's own exception, saying whether the file could not be used (and what to check), is not a
database, or failed otherwise.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence

from contextledger.exceptions import ConfigurationError, ContextLedgerError

__all__ = ["SQLiteFailures", "check_busy_timeout", "check_path", "is_busy", "open_wal"]


def check_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a string, or :class:`ConfigurationError` if it is not a file path."""
    try:
        checked = os.fspath(path)
    except TypeError:
        raise ConfigurationError(f"path must be a file path, got {path!r}") from None
    if not isinstance(checked, str) or not checked:
        raise ConfigurationError(f"path must be a non-empty file path, got {path!r}")
    return checked


def check_busy_timeout(busy_timeout: float) -> float:
    """``busy_timeout`` in seconds, or :class:`ConfigurationError` if it is not a number >= 0."""
    if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)) or not busy_timeout >= 0:
        raise ConfigurationError(f"busy_timeout must be a number of seconds >= 0, got {busy_timeout!r}")
    return float(busy_timeout)


def is_busy(error: sqlite3.Error) -> bool:
    """Whether ``error`` means another connection holds the lock (worth waiting for, not a fault)."""
    reason = str(error)
    return "locked" in reason or "busy" in reason


def open_wal(path: str, *, busy_timeout: float, synchronous: str, schema: Sequence[str]) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode with ``schema`` created, waiting up to ``busy_timeout``
    seconds for other processes; no implicit transactions (``isolation_level=None``)."""
    connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        connection.execute(f"PRAGMA synchronous = {synchronous}")
        deadline = time.monotonic() + busy_timeout
        while True:
            try:
                if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    connection.execute("PRAGMA journal_mode = WAL")
                for statement in schema:
                    connection.execute(statement)
                return connection
            except sqlite3.OperationalError as error:
                if not is_busy(error) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
    except BaseException:
        connection.close()
        raise


class SQLiteFailures:
    """How one store reports an ``sqlite3`` error: ``unavailable`` when the file cannot be used
    (locked past ``busy_timeout``, missing directory, read-only), ``corrupt`` when it is not a
    sound database, ``failed`` for anything else.  ``where`` names the store and its file."""

    def __init__(
        self,
        where: str,
        *,
        busy_timeout: float,
        unavailable: type[ContextLedgerError],
        corrupt: type[ContextLedgerError],
        failed: type[ContextLedgerError],
    ) -> None:
        self.where = where
        self._busy_timeout = busy_timeout
        self._unavailable = unavailable
        self._corrupt = corrupt
        self._failed = failed

    @contextlib.contextmanager
    def mapped(self, action: str) -> Iterator[None]:
        """Run the block, raising :meth:`error` for an ``sqlite3`` error from it."""
        try:
            yield
        except sqlite3.Error as error:
            raise self.error(error, action) from error

    def error(self, error: sqlite3.Error, action: str) -> ContextLedgerError:
        """The store's exception saying that ``action`` failed with ``error``, and what to do."""
        reason = str(error)
        if isinstance(error, sqlite3.OperationalError):
            if is_busy(error):
                hint = f"another connection held the write lock for more than busy_timeout={self._busy_timeout:g}s"
            elif "unable to open" in reason:
                hint = "check that the directory exists and is writable"
            elif "readonly" in reason or "read-only" in reason:
                hint = "the file or its directory is read-only"
            else:
                hint = "the file could not be used"
            return self._unavailable(f"cannot {action}: {self.where} ({reason}); {hint}")
        if type(error) is sqlite3.DatabaseError:
            # SQLITE_NOTADB and SQLITE_CORRUPT: the file holds something other than a sound database.
            return self._corrupt(f"cannot {action}: {self.where} is not a readable database ({reason})")
        return self._failed(f"cannot {action}: {self.where} failed ({reason})")
