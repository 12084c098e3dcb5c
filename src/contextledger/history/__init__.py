"""Where a conversation's messages live between turns: in memory, in a SQLite file, or in Redis.

All three implement :class:`HistoryProvider` and behave the same (one conformance suite runs
against each), so an agent moves from a demo to a durable or shared store by changing one
constructor.  Importing this package does not import ``redis``; only creating a
:class:`RedisHistoryProvider` does.

Where things live (every name is imported from here, ``contextledger.history``):

- the promises every store keeps, ``_protocol.py``: :class:`HistoryProvider`, the
  :class:`HistoryVersion` a store reports so a reader can tell what changed, the
  :class:`StoredTurn` recorded under a turn id (what makes a retried turn exactly-once), and
  :class:`TurnRewriter`, the optional ability to rewrite the stored list and append a turn in
  one atomic step, with the :class:`TurnWrite` that says what such a write did;
- the stores, one module each: ``_memory.py`` (:class:`InMemoryHistoryProvider`), ``_sqlite.py``
  (:class:`SQLiteHistoryProvider`), ``_redis.py`` (:class:`RedisHistoryProvider`, the ``redis``
  extra);
- what all three share, ``_encoding.py``: the checks on what is written and the text a message is
  stored as, so every store refuses and returns the same things.
"""

from contextledger.history._memory import InMemoryHistoryProvider
from contextledger.history._protocol import HistoryProvider, HistoryVersion, StoredTurn, TurnRewriter, TurnWrite
from contextledger.history._redis import RedisHistoryProvider
from contextledger.history._sqlite import SQLiteHistoryProvider

__all__ = [
    "HistoryProvider",
    "HistoryVersion",
    "InMemoryHistoryProvider",
    "RedisHistoryProvider",
    "SQLiteHistoryProvider",
    "StoredTurn",
    "TurnRewriter",
    "TurnWrite",
]
