"""Where a conversation's messages live between turns: in memory, in a SQLite file, or in Redis.

All three implement :class:`HistoryProvider` and behave the same (one conformance suite runs
against each), so an agent moves from a demo to a durable or shared store by changing one
constructor.  Importing this package does not import ``redis``; only creating a
:class:`RedisHistoryProvider` does.
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
