"""Facts in Postgres, for agents in several processes (or machines) sharing one memory on a
database the deployment already runs.

The same opt-in persistence as :class:`SQLiteFactStore` (owner, expiry, revocation, review
trail; see its module), in the tables ``contextledger_fact_owners`` (an owner's epoch and turn
counter), ``contextledger_facts`` and ``contextledger_fact_trail`` of the Postgres schema
``namespace``, created and migrated on first use (:mod:`contextledger._postgres`).

Every operation is one transaction that starts by taking the owner's row (``INSERT … ON
CONFLICT DO UPDATE``, which locks it), then reads the facts, runs the very same rules as the
in-memory store and writes the changes: several processes sharing an owner take turns on that
row, so a write never lands after a newer turn or a ``forget``, and a write that returned is
committed.  The statements go in a pipeline, so an operation costs two round trips (begin, take
and read; write and commit), three when a forget erases values from the trail.

The API is synchronous, like :class:`FactStore`: from asyncio code, call it through
``asyncio.to_thread`` if those round trips must not hold up the event loop.  The ``psycopg``
package is imported when a store is created.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from contextledger._postgres import PostgresFailures, check_namespace, ensure_schema, open_pool, quoted
from contextledger.exceptions import FactsError
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._store import ALL_KEYS, Clock, LedgerStore, State, utc_clock
from contextledger.facts._trail import ReviewEvent, decode_event, decode_fact, encode_event, encode_fact, erase

__all__ = ["PostgresFactStore"]

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="PostgresFactStore")

_TAKE = (
    "INSERT INTO {ns}.contextledger_fact_owners AS o (owner, epoch, turn) VALUES (%s, 0, 0) "
    "ON CONFLICT (owner) DO UPDATE SET epoch = o.epoch RETURNING o.epoch, o.turn"
)
_FACTS = "SELECT key, body FROM {ns}.contextledger_facts WHERE owner = %s"
# One statement, one snapshot: the owner's counters (key NULL) and its facts.
_PEEK = (
    "SELECT NULL, NULL, epoch, turn FROM {ns}.contextledger_fact_owners WHERE owner = %s "
    "UNION ALL SELECT key, body, NULL, NULL FROM {ns}.contextledger_facts WHERE owner = %s"
)


class PostgresFactStore(LedgerStore):
    """The fact store contract with one owner's facts and trail in Postgres (see the module docstring).

    ``url`` is a ``postgresql://`` URL, or a ``psycopg_pool.ConnectionPool`` (of autocommit
    connections) that the store uses as it is and leaves open, as the proxy shares one between
    its sessions' stores; ``namespace`` is the Postgres schema of the tables.  Stores
    with different owners never see each other's facts.  A server that cannot be reached raises
    :class:`FactsError` with nothing changed; a connection that breaks while a write is being
    committed raises :class:`FactsError` saying the write was applied whole or not at all (read
    the facts to see which): it is never sent again.
    """

    def __init__(
        self,
        url: Any,
        *,
        owner: str,
        schema: FactSchema = DEFAULT_SCHEMA,
        ttl_seconds: float | None = None,
        namespace: str = "contextledger",
        clock: Clock = utc_clock,
        connect_timeout: float = 5.0,
        max_connections: int = 4,
    ) -> None:
        super().__init__(schema=schema, owner=owner, ttl_seconds=ttl_seconds, clock=clock)
        self.namespace = check_namespace(namespace)
        self._options: dict[str, Any] = {"connect_timeout": connect_timeout, "max_size": max_connections}
        # Made here so a bad URL or a missing extra stops the constructor; opened on first use.
        self._postgres = open_pool(url, feature="PostgresFactStore", asynchronous=False, **self._options)
        self._where = self._postgres.where
        self._failures = PostgresFailures(self._postgres, unavailable=FactsError, failed=FactsError)
        self._ns = quoted(self.namespace)
        self._lock = threading.Lock()
        self._pool: Any = None

    def __repr__(self) -> str:
        return f"PostgresFactStore({self._where!r}, owner={self.owner!r})"

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store's connections (it opens new ones if used after); a pool passed in stays open."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._postgres.owned:
            pool.close()

    # The backend -------------------------------------------------------------------------------

    def _opened(self) -> Any:
        with self._lock:
            if self._pool is None and not self._postgres.owned:
                ensure_schema(self._postgres, self.namespace)
                self._pool = self._postgres.pool
            elif self._pool is None:
                ensure_schema(self._postgres, self.namespace)
                # A closed pool cannot be opened again: a store used after close() makes another.
                postgres = open_pool(
                    self._postgres.conninfo, feature="PostgresFactStore", asynchronous=False, **self._options
                )
                postgres.pool.open(wait=False)
                self._pool = postgres.pool
            return self._pool

    def _sql(self, text: str) -> Any:
        return text.replace("{ns}", self._ns)

    def _unconfirmed(self, error: Exception) -> FactsError:
        return FactsError(
            f"cannot write the facts: {self._where} took the write but did not confirm it "
            f"({type(error).__name__}: {error}); it was applied whole or not at all, read the facts to see which"
        )

    def _not_facts(self, error: Exception, action: str) -> FactsError:
        return FactsError(
            f"cannot {action}: {self._where}, namespace {self.namespace!r}, holds rows that are not facts "
            f"({error}); another program wrote them, so use another namespace"
        )

    def _transact(self, step: Callable[[State], _T]) -> _T:
        with self._failures.mapped("write the facts"):
            pool = self._opened()  # a failure here is before anything was sent
        with self._failures.mapped("write the facts", outcome_unknown=self._unconfirmed):
            with pool.connection() as connection:
                try:
                    # BEGIN and COMMIT written out rather than psycopg's transaction block, which
                    # syncs the pipeline on entering and leaving it: two round trips in all, not five.
                    with connection.pipeline():
                        connection.execute("BEGIN")
                        taken = connection.execute(self._sql(_TAKE), (self._owner,))
                        listed = connection.execute(self._sql(_FACTS), (self._owner,))
                        epoch, turn = taken.fetchone()
                        try:
                            facts = {key: decode_fact(body) for key, body in listed.fetchall()}
                        except (ValueError, KeyError, TypeError) as error:
                            raise self._not_facts(error, "write the facts") from error
                        before = State(int(epoch), int(turn), facts)
                        state = State(before.epoch, before.turn, dict(before.facts))
                        result = step(state)
                        self._write(connection, before, state)
                        connection.execute("COMMIT")
                except BaseException:
                    self._roll_back(connection)
                    raise
            return result

    def _roll_back(self, connection: Any) -> None:
        """End a transaction a failure left open (a broken connection is the pool's to drop)."""
        psycopg = self._postgres.errors
        if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                connection.execute("ROLLBACK")

    def _write(self, connection: Any, before: State, state: State) -> None:
        owner = self._owner
        if (state.epoch, state.turn) != (before.epoch, before.turn):
            connection.execute(
                self._sql("UPDATE {ns}.contextledger_fact_owners SET epoch = %s, turn = %s WHERE owner = %s"),
                (state.epoch, state.turn, owner),
            )
        gone = [key for key in before.facts if key not in state.facts]
        if gone:
            connection.execute(
                self._sql("DELETE FROM {ns}.contextledger_facts WHERE owner = %s AND key = ANY(%s::text[])"),
                (owner, gone),
            )
        changed = [fact for key, fact in state.facts.items() if before.facts.get(key) != fact]
        if changed:
            connection.cursor().executemany(
                self._sql(
                    "INSERT INTO {ns}.contextledger_facts (owner, key, body) VALUES (%s, %s, %s) "
                    "ON CONFLICT (owner, key) DO UPDATE SET body = excluded.body"
                ),
                [(owner, fact.key, encode_fact(fact)) for fact in changed],
            )
        if state.erase is not None:
            self._erase(connection, state.erase)
        if state.events:
            connection.cursor().executemany(
                self._sql(
                    "INSERT INTO {ns}.contextledger_fact_trail (owner, key, has_value, body) VALUES (%s, %s, %s, %s)"
                ),
                [
                    (owner, event.key, event.value is not None or event.evidence is not None, encode_event(event))
                    for event in state.events
                ],
            )

    def _erase(self, connection: Any, key: str) -> None:
        """Take the values and evidence out of every trail event of ``key`` (every key: ``ALL_KEYS``)."""
        sql = "SELECT seq, body FROM {ns}.contextledger_fact_trail WHERE owner = %s AND has_value"
        parameters: tuple[str, ...] = (self._owner,)
        if key != ALL_KEYS:
            sql, parameters = sql + " AND key = %s", (self._owner, key)
        rows = connection.execute(self._sql(sql), parameters).fetchall()
        if rows:
            connection.cursor().executemany(
                self._sql("UPDATE {ns}.contextledger_fact_trail SET body = %s, has_value = false WHERE seq = %s"),
                [(encode_event(erase(decode_event(body))), seq) for seq, body in rows],
            )

    def _peek(self) -> State:
        with self._failures.mapped("read the facts"), self._opened().connection() as connection:
            rows = connection.execute(self._sql(_PEEK), (self._owner, self._owner)).fetchall()
        state = State(0, 0, {})
        try:
            for key, body, epoch, turn in rows:
                if key is None:
                    state.epoch, state.turn = int(epoch), int(turn)
                else:
                    state.facts[key] = decode_fact(body)
        except (ValueError, KeyError, TypeError) as error:
            raise self._not_facts(error, "read the facts") from error
        return state

    def _trail(self) -> list[ReviewEvent]:
        with self._failures.mapped("read the review trail"), self._opened().connection() as connection:
            rows = connection.execute(
                self._sql("SELECT body FROM {ns}.contextledger_fact_trail WHERE owner = %s ORDER BY seq"),
                (self._owner,),
            ).fetchall()
        try:
            return [decode_event(body) for (body,) in rows]
        except (ValueError, KeyError, TypeError) as error:
            raise self._not_facts(error, "read the review trail") from error
