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
from collections.abc import Awaitable, Callable
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

    @property
    def location(self) -> str:
        """The database the facts are in (a history there can write them with a turn)."""
        return str(self._postgres.conninfo)

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
        for sql, rows in self._changes(before, state):
            if len(rows) == 1:
                connection.execute(sql, rows[0])
            else:
                connection.cursor().executemany(sql, rows)
        if state.erase is not None:
            sql, parameters = self._erasing(state.erase)
            rows = connection.execute(sql, parameters).fetchall()
            if rows:
                connection.cursor().executemany(*self._erased(rows))
        if state.events:
            connection.cursor().executemany(*self._events(state))

    async def write_in(
        self, connection: Any, step: Callable[[State], _T], proceed: Callable[[], Awaitable[bool]]
    ) -> _T | None:
        """Run ``step`` on the owner's facts inside a transaction the caller holds on an asyncio
        connection to this store's database (a history's turn, so that both commit together or
        neither does), if ``proceed()``, awaited once the reads are sent, says so (else None).
        Taking the owner's row first makes other writers of the owner wait; the tables must
        exist (:meth:`prepare_tables`, called off the event loop, makes sure)."""
        taken = await connection.execute(self._sql(_TAKE), (self._owner,))
        listed = await connection.execute(self._sql(_FACTS), (self._owner,))
        if not await proceed():
            return None
        epoch, turn = await taken.fetchone()
        try:
            facts = {key: decode_fact(body) for key, body in await listed.fetchall()}
        except (ValueError, KeyError, TypeError) as error:
            raise self._not_facts(error, "write the facts") from error
        before = State(int(epoch), int(turn), facts)
        state = State(before.epoch, before.turn, dict(before.facts))
        result = step(state)
        for sql, rows in self._changes(before, state):
            if len(rows) == 1:
                await connection.execute(sql, rows[0])
            else:
                await connection.cursor().executemany(sql, rows)
        if state.erase is not None:
            sql, parameters = self._erasing(state.erase)
            erased = await (await connection.execute(sql, parameters)).fetchall()
            if erased:
                await connection.cursor().executemany(*self._erased(erased))
        if state.events:
            await connection.cursor().executemany(*self._events(state))
        return result

    def prepare_tables(self) -> None:
        """Create or migrate the namespace's tables if that was not done yet (once per store)."""
        with self._failures.mapped("open the facts"):
            self._opened()

    def _changes(self, before: State, state: State) -> list[tuple[Any, list[tuple[Any, ...]]]]:
        """The statements (each with its rows of parameters) that write the owner's counters and facts."""
        owner = self._owner
        changes: list[tuple[Any, list[tuple[Any, ...]]]] = []
        if (state.epoch, state.turn) != (before.epoch, before.turn):
            changes.append(
                (
                    self._sql("UPDATE {ns}.contextledger_fact_owners SET epoch = %s, turn = %s WHERE owner = %s"),
                    [(state.epoch, state.turn, owner)],
                )
            )
        gone = [key for key in before.facts if key not in state.facts]
        if gone:
            changes.append(
                (
                    self._sql("DELETE FROM {ns}.contextledger_facts WHERE owner = %s AND key = ANY(%s::text[])"),
                    [(owner, gone)],
                )
            )
        changed = [fact for key, fact in state.facts.items() if before.facts.get(key) != fact]
        if changed:
            changes.append(
                (
                    self._sql(
                        "INSERT INTO {ns}.contextledger_facts (owner, key, body) VALUES (%s, %s, %s) "
                        "ON CONFLICT (owner, key) DO UPDATE SET body = excluded.body"
                    ),
                    [(owner, fact.key, encode_fact(fact)) for fact in changed],
                )
            )
        return changes

    def _erasing(self, key: str) -> tuple[Any, tuple[str, ...]]:
        """The query of the trail events whose values and evidence a forget of ``key`` (every
        key: ``ALL_KEYS``) takes out."""
        sql = "SELECT seq, body FROM {ns}.contextledger_fact_trail WHERE owner = %s AND has_value"
        if key == ALL_KEYS:
            return self._sql(sql), (self._owner,)
        return self._sql(sql + " AND key = %s"), (self._owner, key)

    def _erased(self, rows: list[tuple[Any, ...]]) -> tuple[Any, list[tuple[Any, ...]]]:
        return (
            self._sql("UPDATE {ns}.contextledger_fact_trail SET body = %s, has_value = false WHERE seq = %s"),
            [(encode_event(erase(decode_event(body))), seq) for seq, body in rows],
        )

    def _events(self, state: State) -> tuple[Any, list[tuple[Any, ...]]]:
        return (
            self._sql(
                "INSERT INTO {ns}.contextledger_fact_trail (owner, key, has_value, body) VALUES (%s, %s, %s, %s)"
            ),
            [
                (self._owner, event.key, event.value is not None or event.evidence is not None, encode_event(event))
                for event in state.events
            ],
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
