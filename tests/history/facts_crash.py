"""A child process that stores one turn with the facts it admits, and dies (``os._exit``) at a
chosen step of the store's driver: the crash tests of ``test_facts_with_turns.py`` run it once
per step, then check that the turn and its facts are both stored or neither.

A step is one call into the store's client library once the turn's write has begun: a statement
given to SQLite, a statement queued or sent on a Postgres connection (and the end of a pipeline,
where what was queued is waited for), a command sent to Redis.
``before`` dies as the step is about to run, ``after`` as soon as it returned.

    python -m tests.history.facts_crash BACKEND TARGET NAMESPACE SESSION STEP before|after

Exits 0 when the write ended before the step came (the step number is past the last one).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any

from contextledger.facts import FactsHost, PostgresFactStore, RedisFactStore, SQLiteFactStore
from contextledger.facts._store import LedgerStore
from contextledger.history import (
    HistoryProvider,
    PostgresHistoryProvider,
    RedisHistoryProvider,
    SQLiteHistoryProvider,
    Turn,
    write_turn,
)
from contextledger.history._turns import TurnTarget
from contextledger.messages import Message

USER_TEXT = "module=Billing; database=Postgres 16"
CRASHED = 9


async def off_loop(operation: Callable[[], Any]) -> Any:
    """How the proxy calls a fact store: off the event loop."""
    return await asyncio.to_thread(operation)


class Steps:
    """Counts the steps once armed, and dies at the chosen one."""

    def __init__(self, at: int, when: str) -> None:
        self.at, self.when, self.count, self.armed = at, when, 0, False

    def around(self, call: Callable[[], Any]) -> Any:
        if not self.armed:
            return call()
        self.count += 1
        if self.count == self.at and self.when == "before":
            os._exit(CRASHED)
        result = call()
        if self.count == self.at:
            os._exit(CRASHED)
        return result

    async def around_async(self, call: Callable[[], Any]) -> Any:
        if not self.armed:
            return await call()
        self.count += 1
        if self.count == self.at and self.when == "before":
            os._exit(CRASHED)
        result = await call()
        if self.count == self.at:
            os._exit(CRASHED)
        return result


class CountedConnection:
    """A sqlite3 connection whose statements are steps."""

    def __init__(self, inner: Any, steps: Steps) -> None:
        self._inner, self._steps = inner, steps

    def execute(self, *arguments: Any) -> Any:
        return self._steps.around(lambda: self._inner.execute(*arguments))

    def executemany(self, *arguments: Any) -> Any:
        return self._steps.around(lambda: self._inner.executemany(*arguments))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def stores(backend: str, target: str, namespace: str, session: str) -> tuple[HistoryProvider, LedgerStore]:
    """The history and, beside it, the session's fact store (owned by the session)."""
    if backend == "sqlite":
        return SQLiteHistoryProvider(target), SQLiteFactStore(target, owner=session)
    if backend == "postgres":
        return (
            PostgresHistoryProvider(target, namespace=namespace),
            PostgresFactStore(target, owner=session, namespace=namespace),
        )
    return RedisHistoryProvider(target, namespace=namespace), RedisFactStore(target, owner=session, namespace=namespace)


def instrument(backend: str, history: HistoryProvider, steps: Steps) -> None:
    if backend == "sqlite":
        assert isinstance(history, SQLiteHistoryProvider)
        opened = history._open

        def counted_open() -> Any:
            return CountedConnection(opened(), steps)

        history._open = counted_open  # type: ignore[method-assign]
    elif backend == "postgres":
        import psycopg  # noqa: PLC0415

        execute, executemany = psycopg.AsyncConnection.execute, psycopg.AsyncCursor.executemany

        async def counted_execute(self: Any, *arguments: Any, **options: Any) -> Any:
            if arguments and arguments[0] == "":
                # The pool's health check of a connection it hands out: it runs only when the server
                # spoke on the idle connection, which timing decides, so it is no step of the write
                # (counted, it would move every later step by one in some runs and not in others).
                return await execute(self, *arguments, **options)
            return await steps.around_async(lambda: execute(self, *arguments, **options))

        async def counted_executemany(self: Any, *arguments: Any, **options: Any) -> Any:
            return await steps.around_async(lambda: executemany(self, *arguments, **options))

        # A statement in a pipeline is only queued when ``execute`` returns; the pipeline's end is
        # where the server's answers, the commit's among them, are waited for.  It is a step too:
        # dying right after it leaves a commit the server confirmed, dying after the queued COMMIT
        # leaves one that may or may not have reached the server, as a real crash would.
        pipeline_exit = psycopg.AsyncPipeline.__aexit__

        async def counted_pipeline_exit(self: Any, *arguments: Any) -> Any:
            return await steps.around_async(lambda: pipeline_exit(self, *arguments))

        psycopg.AsyncPipeline.__aexit__ = counted_pipeline_exit  # type: ignore[method-assign,assignment]

        psycopg.AsyncConnection.execute = counted_execute  # type: ignore[method-assign]
        psycopg.AsyncCursor.executemany = counted_executemany  # type: ignore[method-assign]
    else:
        import redis.asyncio.connection  # noqa: PLC0415
        import redis.connection  # noqa: PLC0415

        sync_send: Callable[..., Any] = redis.connection.AbstractConnection.send_packed_command
        async_send = redis.asyncio.connection.AbstractConnection.send_packed_command

        def counted_send(self: Any, *arguments: Any, **options: Any) -> Any:
            return steps.around(lambda: sync_send(self, *arguments, **options))

        async def counted_async_send(self: Any, *arguments: Any, **options: Any) -> Any:
            return await steps.around_async(lambda: async_send(self, *arguments, **options))

        redis.connection.AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]
        redis.asyncio.connection.AbstractConnection.send_packed_command = counted_async_send  # type: ignore[method-assign]


async def main(backend: str, target: str, namespace: str, session: str, at: int, when: str) -> int:
    history, store = stores(backend, target, namespace, session)
    steps = Steps(at, when)
    instrument(backend, history, steps)
    host = FactsHost(store, call=off_loop)
    begun = host.begin(USER_TEXT)
    write = await host.prepare(begun)
    await history.version(session)  # connections open before the count starts
    turn = Turn(session, "turn-1", (Message.user(USER_TEXT),), (Message.assistant("Noted."),))
    steps.armed = True
    outcome = await write_turn(turn, [TurnTarget(history)], facts=write)
    steps.armed = False
    assert outcome.stored
    print(f"steps {steps.count}", flush=True)
    # Closed, as a program that ends closes its stores: an open pool may be retrying a connection
    # in the background (one that timed out on a busy machine), which leaves asyncio.run waiting.
    await history.close()
    store.close()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    backend, target, namespace, session, at, when = sys.argv[1:7]
    sys.exit(asyncio.run(main(backend, target, namespace, session, int(at), when)))
