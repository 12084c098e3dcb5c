"""History in Postgres, for conversations shared by several processes or machines on a database
the deployment already runs.

The ``psycopg`` package is imported when a provider is created, never when contextledger is
imported, so the core keeps working without the ``postgres`` extra installed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from contextledger._postgres import (
    PostgresFailures,
    check_namespace,
    ensure_schema,
    open_pool,
    quoted,
)
from contextledger.exceptions import HistoryError, HistoryUnavailableError, LeaseLostError, TurnOutcomeUnknownError
from contextledger.history._encoding import (
    RecentEncodings,
    check_name,
    check_session_id,
    check_start,
    check_turn_id,
    decode_message,
    decode_turn,
    encode_messages,
    encode_rewritten_turn,
    encode_turn,
    encode_turns,
)
from contextledger.history._protocol import HistoryVersion, StoredTurn, TurnFacts, TurnWrite
from contextledger.messages import Message

__all__ = ["PostgresHistoryProvider"]

_LOCK_LOST = -1


class PostgresHistoryProvider:
    """Each session's messages as rows of ``contextledger_history`` in the Postgres schema
    ``namespace`` (created and migrated on first use, see :mod:`contextledger._postgres`).

    Every write is one statement, most of them one call of a PL/pgSQL function, so it is one
    transaction and one round trip: an append is stored whole or not at all, a reader never sees
    half of a ``replace``, and a turn (:meth:`append_turn`) records its id in
    ``contextledger_turns`` in the same transaction as its messages, after checking that the id
    is not there yet.  A session's writers take turns on its row in
    ``contextledger_history_sessions`` (which also holds the :class:`HistoryVersion`), so turns
    from several processes interleave whole and in order while other sessions go on.

    Nothing is ever sent twice: a connection that breaks once a turn's statement was sent raises
    :class:`TurnOutcomeUnknownError`, and a retry with the same turn id settles it; a server that
    cannot be reached raises :class:`HistoryUnavailableError` with nothing written.

    The connections come from a ``psycopg_pool`` pool of at most ``max_connections``, opened in
    the event loop of the first call; ``connect_timeout`` bounds the wait for one (seconds).  A
    ``psycopg_pool.AsyncConnectionPool`` passed as ``url`` is used instead, as it is (its
    connections in autocommit mode), and left open by :meth:`close`.
    ``fence``: as for :class:`~contextledger.history.RedisHistoryProvider`, given a session id,
    the key of the lock (a row of ``contextledger_locks``) and the token this writer holds it
    with, or ``None``; a turn is then stored only while that lock holds the token and its lease
    runs, checked in the turn's own transaction, else :class:`LeaseLostError` with nothing written.
    """

    def __init__(
        self,
        url: Any = "postgresql://127.0.0.1:5432/postgres",
        namespace: str = "contextledger",
        source_id: str = "postgres",
        *,
        connect_timeout: float = 5.0,
        max_connections: int = 10,
        fence: Callable[[str], tuple[str, str] | None] | None = None,
    ) -> None:
        self.source_id: str = check_name(source_id, "source_id")
        self.namespace: str = check_namespace(namespace)
        self._fence = fence
        # A rewrite writes again messages this history has just stored: encoded once, not twice.
        self._encoded = RecentEncodings()
        self._url = url
        self._options: dict[str, Any] = {"connect_timeout": connect_timeout, "max_size": max_connections}
        self._postgres = open_pool(url, feature="PostgresHistoryProvider", asynchronous=True, **self._options)
        self._where = self._postgres.where
        self._failures = PostgresFailures(self._postgres, unavailable=HistoryUnavailableError, failed=HistoryError)
        self._ns = quoted(self.namespace)
        self._pool: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._schema_ready = False

    def __repr__(self) -> str:
        return f"PostgresHistoryProvider({self._where!r}, namespace={self.namespace!r}, source_id={self.source_id!r})"

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A connection (autocommit) from this history's pool, its namespace migrated: what the
        proxy's session registry and locks use, so one pool serves a whole session store."""
        loop = asyncio.get_running_loop()
        if not self._schema_ready:
            # Before the pool opens (the check has a connection of its own): a namespace this
            # release must refuse leaves no pool behind.
            try:
                await asyncio.to_thread(ensure_schema, self._postgres, self.namespace)
            except (self._postgres.errors.Error, OSError) as error:
                # Before any statement of the caller's was sent: nothing of it ran.
                raise self._failures.error(error, "prepare the namespace " + repr(self.namespace)) from error
            self._schema_ready = True
        if not self._postgres.owned:
            self._pool = self._postgres.pool
        elif self._pool is None or self._loop is not loop:
            # An asyncio pool belongs to the loop that opened it; a closed one cannot be opened again.
            postgres = open_pool(self._url, feature="PostgresHistoryProvider", asynchronous=True, **self._options)
            self._pool, self._loop = postgres.pool, loop
            await self._pool.open(wait=False)
        async with self._pool.connection() as connection:
            yield connection

    async def _fetch(self, action: str, sql: str, parameters: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of one statement, a driver failure mapped to a ``HistoryError`` for ``action``."""
        with self._failures.mapped(action):
            async with self.connection() as connection:
                cursor = await connection.execute(sql.replace("{ns}", self._ns), parameters)
                return await cursor.fetchall() if cursor.description is not None else []

    async def load(self, session_id: str) -> list[Message]:
        key = check_session_id(session_id)
        rows = await self._fetch(
            f"load session {key!r}",
            "SELECT body FROM {ns}.contextledger_history WHERE session_id = %s ORDER BY seq",
            (key,),
        )
        store = f"{self._where}, namespace {self.namespace!r}"
        return [
            decode_message(body, session_id=key, position=position, store=store)
            for position, (body,) in enumerate(rows)
        ]

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        key, bodies, _ = encode_messages(session_id, messages, "append to", self._encoded)
        if bodies:
            await self._fetch(
                f"append to session {key!r}", "SELECT {ns}.contextledger_write(%s, %s::text[], false)", (key, bodies)
            )

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        key, bodies, _ = encode_messages(session_id, messages, "replace", self._encoded)
        await self._fetch(
            f"replace session {key!r}", "SELECT {ns}.contextledger_write(%s, %s::text[], true)", (key, bodies)
        )

    def beside(self, facts: TurnFacts, session_id: str) -> bool:
        """Whether ``facts`` live in this database (a ``PostgresFactStore`` on the same server and
        database), so that a turn writes them in its own transaction (:class:`FactsBesideTurns`)."""
        return facts.lives_in("postgres", str(self._postgres.conninfo))

    async def append_turn(
        self,
        session_id: str,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
        *,
        facts: TurnFacts | None = None,
    ) -> bool:
        """See :meth:`HistoryProvider.append_turn`: one function call checks the turn id and writes.

        No connection to be had means nothing was sent: ``HistoryUnavailableError``.  A connection
        that breaks once the call was sent leaves the outcome to the server:
        ``TurnOutcomeUnknownError``.
        """
        key, turn, bodies, _, record = encode_turn(session_id, turn_id, inputs, reply, self._encoded)
        result = await self._turn(key, turn, record, bodies, None, facts)
        return result[0] == 1

    async def rewrite_and_append_turn(
        self,
        session_id: str,
        start: int,
        messages: Sequence[Message],
        expected: HistoryVersion,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
        *,
        facts: TurnFacts | None = None,
    ) -> TurnWrite:
        """See :meth:`TurnRewriter.rewrite_and_append_turn`: one function call, failing as ``append_turn``'s."""
        key, turn, bodies, record, suffix, _ = encode_rewritten_turn(
            session_id, start, messages, expected, turn_id, inputs, reply, self._encoded
        )
        result = await self._turn(key, turn, record, bodies, (start, suffix, expected), facts)
        if result[0] != 1:
            return TurnWrite(False, None)
        return TurnWrite(True, HistoryVersion(int(result[1]), int(result[2])) if len(result) == 3 else None)

    async def _turn(
        self,
        session_id: str,
        turn: str,
        record: str,
        bodies: list[str],
        rewrite: tuple[int, list[str], HistoryVersion] | None,
        facts: TurnFacts | None = None,
    ) -> list[int]:
        """Call ``contextledger_append_turn``, fenced by the writer's lock when it holds one; with
        ``facts``, in a transaction that writes them too when the turn is stored, else rolls back
        (two round trips: the turn and the facts' reads, then the facts' writes and the commit)."""
        held = None if self._fence is None else self._fence(session_id)
        lock, token = held if held is not None else (None, None)
        start, suffix, expected = rewrite if rewrite is not None else (None, None, HistoryVersion(0, 0))

        def outcome_unknown(error: Exception) -> TurnOutcomeUnknownError:
            return TurnOutcomeUnknownError(
                f"turn {turn!r} of session {session_id!r}: {self._where} took the write but did not confirm it "
                f"({type(error).__name__}: {error}); it is stored once or not at all. Retry with the same "
                f"turn_id={turn!r}: a stored turn is returned as it is, a missing one is run again",
                turn_id=turn,
                session_id=session_id,
            )

        sql = f"SELECT {self._ns}.contextledger_append_turn(%s, %s, %s, %s::text[], %s, %s, %s, %s::text[], %s, %s)"
        parameters = (
            session_id,
            turn,
            record,
            bodies,
            lock,
            token,
            start,
            suffix,
            expected.generation,
            expected.length,
        )
        action = f"append turn {turn!r} to session {session_id!r} (nothing was stored)"
        with self._failures.mapped(action, outcome_unknown=outcome_unknown):
            async with self.connection() as connection:
                if facts is None:
                    cursor = await connection.execute(sql, parameters)
                    row = await cursor.fetchone()
                else:
                    row = await self._turn_with_facts(connection, sql, parameters, facts)
        result: list[int] = list(row[0]) if row is not None else []
        if result and result[0] == _LOCK_LOST:
            raise LeaseLostError(
                f"turn {turn!r} of session {session_id!r} was not stored: the lock {lock!r} no longer holds "
                "this writer's token (its lease ran out and another writer may have taken it); nothing was "
                "written, so run the turn again under the lock"
            )
        return result

    async def _turn_with_facts(
        self, connection: Any, sql: str, parameters: tuple[Any, ...], facts: TurnFacts
    ) -> tuple[Any, ...] | None:
        """The turn's statement and the facts' writes in one transaction, sent in a pipeline: the
        facts' reads go with the turn, and their writes and the commit follow only if it was stored."""
        row: tuple[Any, ...] | None = None
        try:
            async with connection.pipeline():
                await connection.execute("BEGIN")
                cursor = await connection.execute(sql, parameters)

                async def stored() -> bool:
                    nonlocal row
                    row = await cursor.fetchone()
                    return row is not None and list(row[0])[:1] == [1]

                await facts.write_postgres(connection, stored)
                if row is None:
                    await stored()  # the facts did not ask: the turn's answer is still wanted
                await connection.execute("COMMIT" if row is not None and list(row[0])[:1] == [1] else "ROLLBACK")
        except BaseException:
            psycopg = self._postgres.errors
            status = connection.info.transaction_status
            if status in (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR):
                with contextlib.suppress(psycopg.Error):
                    await connection.execute("ROLLBACK")
            raise
        return row

    async def load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        key, turn = check_session_id(session_id), check_turn_id(turn_id)
        rows = await self._fetch(
            f"load turn {turn!r} of session {key!r}",
            "SELECT record FROM {ns}.contextledger_turns WHERE session_id = %s AND turn_id = %s",
            (key, turn),
        )
        if not rows:
            return None
        return decode_turn(
            rows[0][0], session_id=key, turn_id=turn, store=f"{self._where}, namespace {self.namespace!r}"
        )

    async def load_turns(self, session_id: str) -> list[StoredTurn]:
        key = check_session_id(session_id)
        rows = await self._fetch(
            f"load the turns of session {key!r}",
            "SELECT turn_id, record FROM {ns}.contextledger_turns WHERE session_id = %s ORDER BY recorded",
            (key,),
        )
        store = f"{self._where}, namespace {self.namespace!r}"
        return [decode_turn(record, session_id=key, turn_id=turn, store=store) for turn, record in rows]

    async def rewrite_turns(self, session_id: str, turns: Sequence[StoredTurn]) -> None:
        """See :meth:`HistoryProvider.rewrite_turns`: one statement, so all or none are written."""
        key, records, _ = encode_turns(session_id, turns)
        if not records:
            return
        await self._fetch(
            f"rewrite the turns of session {key!r}",
            "UPDATE {ns}.contextledger_turns AS t SET record = v.record "
            "FROM unnest(%s::text[], %s::text[]) AS v(turn_id, record) "
            "WHERE t.session_id = %s AND t.turn_id = v.turn_id",
            ([turn for turn, _ in records], [record for _, record in records], key),
        )

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        turn = check_turn_id(turn_id)
        key, bodies, _ = encode_messages(session_id, messages, "undo a turn in")
        await self._fetch(
            f"undo turn {turn!r} of session {key!r}",
            "SELECT {ns}.contextledger_undo_turn(%s, %s, %s::text[])",
            (key, turn, bodies),
        )

    async def version(self, session_id: str) -> HistoryVersion:
        key = check_session_id(session_id)
        rows = await self._fetch(
            f"read the version of session {key!r}",
            "SELECT generation, length FROM {ns}.contextledger_history_sessions WHERE session_id = %s",
            (key,),
        )
        return HistoryVersion(int(rows[0][0]), int(rows[0][1])) if rows else HistoryVersion(0, 0)

    async def rewrite(
        self, session_id: str, start: int, messages: Sequence[Message], expected: HistoryVersion
    ) -> HistoryVersion | None:
        """See :meth:`HistoryProvider.rewrite`: one function call checks the version and writes."""
        key, bodies, _ = encode_messages(session_id, messages, "rewrite", self._encoded)
        check_start(start, expected)
        rows = await self._fetch(
            f"rewrite session {key!r}",
            "SELECT {ns}.contextledger_rewrite(%s, %s, %s::text[], %s, %s)",
            (key, start, bodies, expected.generation, expected.length),
        )
        result = rows[0][0] if rows else None
        return None if result is None else HistoryVersion(int(result[0]), int(result[1]))

    async def clear(self, session_id: str) -> None:
        key = check_session_id(session_id)
        await self._fetch(f"clear session {key!r}", "SELECT {ns}.contextledger_clear(%s)", (key,))

    async def close(self) -> None:
        pool, self._pool, self._loop = self._pool, None, None
        if pool is not None and self._postgres.owned:
            with contextlib.suppress(Exception):
                await pool.close()
