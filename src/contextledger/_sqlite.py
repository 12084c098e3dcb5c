"""Opening an SQLite file shared by several threads and processes, the same way for every store.

The history and the persistent fact store both keep one connection per object, write with
``BEGIN IMMEDIATE`` themselves and read in WAL mode, so readers never wait for a writer.  Setting
that up has one trap worth writing once: switching a new file to WAL needs an exclusive lock that
SQLite does not always wait for through its busy handler, so several processes opening a new file
at once must retry it themselves.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

__all__ = ["is_busy", "open_wal"]


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
