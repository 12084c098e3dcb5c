"""Summaries that do not change: a summary of a given run of messages is written once and reused.

A provider bills the prefix a request shares with an earlier one at a fraction of the price
(design.md#stable-summaries).  A summary sits near the start of the request, so a summary written afresh for every
request (a model replies with different words each time) moves everything after it out of the
cache, and costs a model call per request besides.  :class:`SummarizationStrategy` therefore asks
a :class:`SummaryCache` before it calls its model: the key names exactly what the summary depends
on, so a hit can be returned byte for byte and a miss is the only time the model is asked.

The key (:func:`summary_key`) is the SHA-256 of one canonical JSON document holding the run of
messages summarised (each as :func:`~contextledger.messages.to_openai` writes it, metadata
included), the summarisation prompt and the summariser's identity (:func:`summarizer_identity`).
Change one character of any of them and the key changes.  The value is the summary's text as the
strategy inserts it; the summary message is rebuilt from it the same way every time.

Three stores keep the same two promises (``get`` returns what ``put`` stored under the key, or
``None``; neither changes anything else): :class:`InMemorySummaryCache`, bounded by entries and
bytes, least recently used first out; :class:`SQLiteSummaryCache`, a table in a file shared by
processes; :class:`RedisSummaryCache`, keys under a prefix with an optional time to live.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from contextledger._keys import storage_key
from contextledger._redis import RedisFailures, open_redis
from contextledger._sqlite import SQLiteFailures, check_busy_timeout, check_path, open_wal
from contextledger.exceptions import ConfigurationError, SummaryCacheError
from contextledger.messages import Message, to_openai

__all__ = [
    "InMemorySummaryCache",
    "RedisSummaryCache",
    "SQLiteSummaryCache",
    "SummaryCache",
    "summarizer_identity",
    "summary_key",
]

KEY_FORMAT = 1
"""Part of every key: a change to what a key covers changes this, so old entries are never misread."""


@runtime_checkable
class SummaryCache(Protocol):
    """Where summaries are kept between requests, by :func:`summary_key`.

    ``get`` returns the text stored under ``key`` or ``None``; ``put`` stores it (replacing what
    was there).  A store that cannot be reached raises :class:`SummaryCacheError`; the strategy
    then calls its model as if the cache were empty.
    """

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, summary: str) -> None: ...


def summarizer_identity(client: object) -> str:
    """What names a summariser in a key: its class (module and name) and, when it says, its model.

    The model is read from a non-empty string attribute ``model_id`` or else ``model`` (the
    OpenAI-compatible and local clients have ``model``).  A client that says neither is named by
    its class alone: give the strategy ``summarizer_id=`` when two such clients would write
    different summaries.
    """
    kind = type(client)
    name = f"{kind.__module__}.{kind.__qualname__}"
    for attribute in ("model_id", "model"):
        value = getattr(client, attribute, None)
        if isinstance(value, str) and value:
            return f"{name}:{value}"
    return name


def summary_key(messages: Sequence[Message], *, prompt: str, summarizer: str) -> str:
    """The hex SHA-256 naming the summary of ``messages`` written by ``summarizer`` under ``prompt``."""
    document = {
        "format": KEY_FORMAT,
        "summarizer": summarizer,
        "prompt": prompt,
        "messages": to_openai(messages, metadata=True),
    }
    # repr() for a value JSON cannot write (an unusual metadata value): stable for plain values,
    # and an unstable one only costs a miss.
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"a summary cache key must be non-empty text (see summary_key), got {key!r}")
    return key


def _check_summary(summary: object) -> str:
    if not isinstance(summary, str) or not summary:
        raise ConfigurationError(f"a cached summary must be non-empty text, got {summary!r}")
    return summary


def _limit(value: int | None, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what} must be a whole number >= 1 or None, got {value!r}")
    return value


class InMemorySummaryCache:
    """Summaries in this process, the least recently used dropped first past either bound.

    ``max_entries`` counts summaries, ``max_bytes`` their keys and texts in UTF-8 (``None`` lifts
    a bound).  A summary larger than ``max_bytes`` on its own is not kept.  It is what a
    :class:`SummarizationStrategy` uses when given no cache, one per strategy.
    """

    def __init__(self, max_entries: int | None = 1024, max_bytes: int | None = 16 * 1024 * 1024) -> None:
        self.max_entries = _limit(max_entries, "max_entries")
        self.max_bytes = _limit(max_bytes, "max_bytes")
        self._entries: OrderedDict[str, str] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"InMemorySummaryCache({len(self)} entries, {self.bytes} bytes)"

    async def get(self, key: str) -> str | None:
        found = self._entries.get(_check_key(key))
        if found is not None:
            self._entries.move_to_end(key)
        return found

    async def put(self, key: str, summary: str) -> None:
        _check_key(key)
        size = len(key.encode("utf-8", "surrogatepass")) + len(_check_summary(summary).encode("utf-8", "surrogatepass"))
        self._drop(key)
        if self.max_bytes is not None and size > self.max_bytes:
            return
        self._entries[key] = summary
        self._sizes[key] = size
        self.bytes += size
        while (self.max_entries is not None and len(self._entries) > self.max_entries) or (
            self.max_bytes is not None and self.bytes > self.max_bytes
        ):
            self._drop(next(iter(self._entries)))

    def _drop(self, key: str) -> None:
        if self._entries.pop(key, None) is not None:
            self.bytes -= self._sizes.pop(key)


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS contextledger_summaries "
    "(key TEXT PRIMARY KEY, summary TEXT NOT NULL, used INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS contextledger_summaries_used ON contextledger_summaries (used)",
)


class SQLiteSummaryCache:
    """Summaries in a table of an SQLite file, shared by every process that opens the file.

    The file may be the one a history or the proxy keeps (the table is its own).  Calls run in a
    worker thread on one connection; :meth:`close` closes it.  Past ``max_entries`` summaries
    (``None``: no bound) the least recently used go when the next one is stored: the file stays
    bounded however many conversations write to it.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_entries: int | None = 100_000, busy_timeout: float = 5.0
    ) -> None:
        self.path = check_path(path)
        self.max_entries = _limit(max_entries, "max_entries")
        self._busy_timeout = check_busy_timeout(busy_timeout)
        self._failures = SQLiteFailures(
            f"SQLite summary cache {self.path}",
            busy_timeout=self._busy_timeout,
            unavailable=SummaryCacheError,
            corrupt=SummaryCacheError,
            failed=SummaryCacheError,
        )
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SQLiteSummaryCache({self.path!r})"

    def _connected(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = open_wal(
                self.path, busy_timeout=self._busy_timeout, synchronous="NORMAL", schema=_SCHEMA
            )
        return self._connection

    async def get(self, key: str) -> str | None:
        return await asyncio.to_thread(self._get, _check_key(key))

    async def put(self, key: str, summary: str) -> None:
        await asyncio.to_thread(self._put, _check_key(key), _check_summary(summary))

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _get(self, key: str) -> str | None:
        with self._lock, self._failures.mapped("read a summary"):
            connection = self._connected()
            row = connection.execute("SELECT summary FROM contextledger_summaries WHERE key = ?", (key,)).fetchone()
            if row is not None and self.max_entries is not None:
                connection.execute(
                    "UPDATE contextledger_summaries SET used = "
                    "(SELECT COALESCE(MAX(used), 0) + 1 FROM contextledger_summaries) WHERE key = ?",
                    (key,),
                )
        if row is None:
            return None
        if not isinstance(row[0], str) or not row[0]:
            raise SummaryCacheError(f"SQLite summary cache {self.path}: the entry for {key} is not a summary")
        return row[0]

    def _put(self, key: str, summary: str) -> None:
        with self._lock, self._failures.mapped("store a summary"):
            connection = self._connected()
            # One transaction: the entry, its place in the order of use, and the eviction past the bound.
            connection.execute("BEGIN IMMEDIATE")
            try:
                self._store(connection, key, summary)
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def _store(self, connection: sqlite3.Connection, key: str, summary: str) -> None:
        connection.execute(
            "INSERT OR REPLACE INTO contextledger_summaries (key, summary, used) "
            "VALUES (?, ?, (SELECT COALESCE(MAX(used), 0) + 1 FROM contextledger_summaries))",
            (key, summary),
        )
        if self.max_entries is not None:
            connection.execute(
                "DELETE FROM contextledger_summaries WHERE key IN (SELECT key FROM contextledger_summaries "
                "ORDER BY used DESC LIMIT -1 OFFSET ?)",
                (self.max_entries,),
            )

    def _close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class RedisSummaryCache:
    """Summaries in Redis, one string per key under ``prefix``, optionally expiring.

    ``target`` is a ``redis://`` URL or a ``redis.asyncio.Redis`` client (used as configured and
    left open).  ``ttl`` is seconds each entry lives from its last write (``None``: until removed
    or evicted by the server's own policy).  Needs the ``redis`` extra.
    """

    def __init__(
        self,
        target: Any,
        *,
        prefix: str = "contextledger",
        ttl: float | None = None,
        socket_timeout: float | None = 5.0,
    ) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"prefix must be non-empty text, got {prefix!r}")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
            raise ConfigurationError(f"ttl must be a number of seconds > 0 or None, got {ttl!r}")
        self.prefix = prefix
        self.ttl = ttl
        self._connection = open_redis(
            target,
            feature="RedisSummaryCache",
            asynchronous=True,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
        )
        self._failures = RedisFailures(
            self._connection,
            unavailable=SummaryCacheError,
            foreign=SummaryCacheError,
            holds="a summary",
            remedy="choose another prefix",
        )

    def __repr__(self) -> str:
        return f"RedisSummaryCache({self._connection.where}, prefix={self.prefix!r})"

    def redis_key(self, key: str) -> str:
        """The Redis key a summary is stored under."""
        return storage_key(self.prefix, "summary", _check_key(key))

    async def get(self, key: str) -> str | None:
        where = self.redis_key(key)
        with self._failures.mapped("read a summary", where):
            found = await self._connection.client.get(where)
        if found is None:
            return None
        try:
            text = found.decode("utf-8") if isinstance(found, bytes) else found
        except UnicodeDecodeError:
            text = None
        if not isinstance(text, str) or not text:
            raise SummaryCacheError(f"{self._connection.where}: key {where!r} does not hold a summary")
        return text

    async def put(self, key: str, summary: str) -> None:
        where = self.redis_key(key)
        data = _check_summary(summary).encode("utf-8", "surrogatepass")
        expiry = None if self.ttl is None else max(1, round(self.ttl * 1000))
        with self._failures.mapped("store a summary", where):
            await self._connection.client.set(where, data, px=expiry)

    async def close(self) -> None:
        await self._connection.aclose()
