"""Where a conversation's messages live between turns: in memory, in a SQLite file, in Redis or in
Postgres.

All four implement :class:`HistoryProvider` and behave the same (one conformance suite runs
against each), so an agent moves from a demo to a durable or shared store by changing one
constructor.  Importing this package imports neither ``redis`` nor ``psycopg``; only creating a
:class:`RedisHistoryProvider` or a :class:`PostgresHistoryProvider` does.

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.history``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

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

from typing import TYPE_CHECKING

from contextledger._deprecated import moved_name
from contextledger.history._memory import InMemoryHistoryProvider
from contextledger.history._postgres import PostgresHistoryProvider
from contextledger.history._protocol import (
    HistoryProvider,
    HistoryVersion,
    StoredTurn,
    TurnRewriter,
)
from contextledger.history._redis import RedisHistoryProvider
from contextledger.history._sqlite import SQLiteHistoryProvider
from contextledger.history._turns import (
    KeptHistory,
    RetainedRewrite,
    Turn,
    TurnOutcome,
    synced_history,
    write_turn,
)

__all__ = [
    "HistoryProvider",
    "HistoryVersion",
    "InMemoryHistoryProvider",
    "KeptHistory",
    "PostgresHistoryProvider",
    "RedisHistoryProvider",
    "RetainedRewrite",
    "SQLiteHistoryProvider",
    "StoredTurn",
    "Turn",
    "TurnOutcome",
    "TurnRewriter",
    "synced_history",
    "write_turn",
]

if not TYPE_CHECKING:
    # Names that were public here before and are internal now: still importable, with a
    # DeprecationWarning, until 0.6 (the release rule in CHANGELOG.md).
    _MOVED = {
        "FactsBesideTurns": "contextledger.history._protocol",
        "RedisTurnFacts": "contextledger.history._protocol",
        "TurnFacts": "contextledger.history._protocol",
        "TurnTarget": "contextledger.history._turns",
        "TurnWrite": "contextledger.history._protocol",
        "check_storable": "contextledger.history._encoding",
        "check_turn_id": "contextledger.history._encoding",
    }

    def __getattr__(name: str) -> object:
        return moved_name(__name__, name, _MOVED)
