"""Where a conversation's messages live between turns: in memory, in a SQLite file, in Redis or in
Postgres.

All four implement :class:`HistoryProvider` and behave the same (one conformance suite runs
against each), so an agent moves from a demo to a durable or shared store by changing one
constructor.  Importing this package imports neither ``redis`` nor ``psycopg``; only creating a
:class:`RedisHistoryProvider` or a :class:`PostgresHistoryProvider` does.

Where things live (every name is imported from here, ``contextledger.history``):

- the promises of a store: ``_protocol.py`` (:class:`HistoryProvider`, :class:`TurnRewriter`,
  :class:`HistoryVersion`, :class:`StoredTurn`, :class:`TurnWrite`, and for a turn's facts written
  in its own atomic step :class:`TurnFacts`, :class:`FactsBesideTurns`, :class:`RedisTurnFacts`);
- the stores: ``_memory.py`` (:class:`InMemoryHistoryProvider`), ``_sqlite.py``
  (:class:`SQLiteHistoryProvider`), ``_redis.py`` (:class:`RedisHistoryProvider`), ``_postgres.py``
  (:class:`PostgresHistoryProvider`, its tables and functions in ``contextledger._postgres_schema``), with the
  checks and the stored form they share in ``_encoding.py``;
- writing a turn, the one path every host takes: ``_turns.py`` (:func:`write_turn` stores a
  :class:`Turn` in its :class:`TurnTarget` histories with the :class:`RetainedRewrite` a reducer
  asked for, exactly once by turn id, and says what it did in a :class:`TurnOutcome`;
  :class:`KeptHistory` is a host's versioned copy of a history, kept current by
  :func:`synced_history` and the writer; :func:`check_turn_id` is the one rule a turn id
  follows, and :func:`check_storable` says whether a turn's messages can be stored, for a host to
  check both before it runs the turn and pays for the model's call).
"""

from contextledger.history._encoding import check_storable, check_turn_id
from contextledger.history._memory import InMemoryHistoryProvider
from contextledger.history._postgres import PostgresHistoryProvider
from contextledger.history._protocol import (
    FactsBesideTurns,
    HistoryProvider,
    HistoryVersion,
    RedisTurnFacts,
    StoredTurn,
    TurnFacts,
    TurnRewriter,
    TurnWrite,
)
from contextledger.history._redis import RedisHistoryProvider
from contextledger.history._sqlite import SQLiteHistoryProvider
from contextledger.history._turns import (
    KeptHistory,
    RetainedRewrite,
    Turn,
    TurnOutcome,
    TurnTarget,
    synced_history,
    write_turn,
)

__all__ = [
    "FactsBesideTurns",
    "HistoryProvider",
    "HistoryVersion",
    "InMemoryHistoryProvider",
    "KeptHistory",
    "PostgresHistoryProvider",
    "RedisHistoryProvider",
    "RedisTurnFacts",
    "RetainedRewrite",
    "SQLiteHistoryProvider",
    "StoredTurn",
    "Turn",
    "TurnFacts",
    "TurnOutcome",
    "TurnRewriter",
    "TurnTarget",
    "TurnWrite",
    "check_storable",
    "check_turn_id",
    "synced_history",
    "write_turn",
]
