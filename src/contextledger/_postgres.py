"""Reaching Postgres the same way from every store: a connection pool, the schema, the failures.

The Postgres history (asyncio), the Postgres fact store (synchronous) and the proxy's Postgres
sessions all get their connections from a pool made by :func:`open_pool`, bring their namespace
up to the schema this release knows with :func:`ensure_schema`, and read a failure through
:class:`PostgresFailures`, so three promises hold for each of them:

* **A statement is sent once.**  Nothing here runs a statement again after an error: when a
  connection breaks after a statement was sent, the server may have run it, and a second run
  would store a turn twice.  The failure says so instead, and the caller settles the outcome (a
  retry with the same turn id, a read).
* **A failure says what it proves.**  A statement the server answered with an error (an
  SQLSTATE) was rolled back whole; a connection that could not be had from the pool was never
  used; a connection that broke while a statement was out leaves the outcome to the server.
* **The schema is the project's.**  A namespace (a Postgres schema, ``contextledger`` unless
  told otherwise) is created and migrated by :func:`ensure_schema` on a store's first use; its
  version table says which migration it is at, and a namespace a newer release migrated is
  refused rather than written to with an older idea of its tables.

Connections are in autocommit mode: a store's single statement is its own transaction (a turn
is one call of a function, see :mod:`contextledger._postgres_schema`), and a store that needs
several statements opens a transaction itself, sent in one pipeline where it can.

``psycopg`` and ``psycopg_pool`` are imported when a pool is opened, never when contextledger
is, and a missing one raises :class:`~contextledger.exceptions.MissingExtraError` naming the
``postgres`` extra.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from contextledger._extras import require_extra
from contextledger._postgres_schema import MIGRATIONS, SCHEMA_VERSION, VERSION_TABLE
from contextledger._redis import redact
from contextledger.exceptions import ConfigurationError, ContextLedgerError, MissingExtraError

__all__ = [
    "PostgresFailures",
    "PostgresPool",
    "check_namespace",
    "ensure_schema",
    "is_postgres_url",
    "open_pool",
]

_SCHEMES = ("postgresql://", "postgres://")
_IDENTIFIER_BYTES = 63  # Postgres cuts longer identifiers short, which could merge two namespaces
# The advisory lock taken while a namespace is migrated, so processes starting together take turns.
_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext('contextledger schema ' || %s))"


def is_postgres_url(url: object) -> bool:
    return isinstance(url, str) and url.startswith(_SCHEMES)


def check_namespace(namespace: object) -> str:
    """A namespace is the Postgres schema a store keeps its tables in: text of 1 to 63 bytes."""
    if (
        not isinstance(namespace, str)
        or not namespace
        or len(namespace.encode("utf-8", "surrogatepass")) > _IDENTIFIER_BYTES
        or "\x00" in namespace
    ):
        raise ConfigurationError(
            f"namespace must be the name of a Postgres schema, 1 to {_IDENTIFIER_BYTES} bytes of text, "
            f"got {namespace!r}"
        )
    return namespace


def quoted(namespace: str) -> str:
    return '"' + namespace.replace('"', '""') + '"'


@dataclass(frozen=True)
class PostgresPool:
    """A pool ready for a store: ``pool`` is a ``psycopg_pool`` (async) ``ConnectionPool``.

    ``where`` names the server in messages (never with its password); ``owned`` says whether
    :func:`open_pool` made the pool, in which case the store closes it; ``conninfo`` is what a
    connection of its own (the migration, a readiness check) is opened with.
    """

    pool: Any
    where: str
    owned: bool
    conninfo: str
    errors: Any  # the psycopg module, whose exception classes the failures are read with
    pool_errors: Any  # psycopg_pool


def _import(feature: str) -> tuple[Any, Any]:
    psycopg = require_extra("psycopg", extra="postgres", feature=feature)
    pool = require_extra("psycopg_pool", extra="postgres", feature=feature)
    return psycopg, pool


def open_pool(
    target: Any,
    *,
    feature: str,
    asynchronous: bool,
    connect_timeout: float = 5.0,
    max_size: int = 10,
) -> PostgresPool:
    """A pool for ``target``: a ``postgresql://`` URL, or a pool the caller made.

    From a URL: a pool of autocommit connections, not opened yet (an asyncio pool must be opened
    inside the event loop that uses it, so the store opens it on first use); ``connect_timeout``
    bounds the wait for a connection (seconds).  A pool passed in (``psycopg_pool``'s
    ``AsyncConnectionPool`` when ``asynchronous``, else ``ConnectionPool``) is used as it is and
    left open; its connections must be in autocommit mode (``kwargs={"autocommit": True}``).
    """
    try:
        psycopg, pools = _import(feature)
    except ImportError as error:
        if isinstance(error, MissingExtraError):
            raise
        # psycopg is there but found no libpq to talk through: the system's or psycopg[binary]'s.
        raise MissingExtraError(
            f"{feature} needs libpq, which psycopg found neither on the system nor in psycopg-binary ({error}); "
            "install the system's (apt-get install libpq5) or pip install 'psycopg[binary]'",
            feature=feature,
            extra="postgres",
            module="psycopg",
        ) from error
    flavour = pools.AsyncConnectionPool if asynchronous else pools.ConnectionPool
    if isinstance(target, flavour):
        if not (target.kwargs or {}).get("autocommit"):
            raise ConfigurationError(
                f"{feature} needs a pool of autocommit connections (kwargs={{'autocommit': True}}): its single "
                "statements are transactions of their own, and a pool rolls back what a connection left open"
            )
        return PostgresPool(target, f"Postgres pool {target.name!r}", False, target.conninfo, psycopg, pools)
    if not is_postgres_url(target):
        kind = "an asyncio psycopg_pool.AsyncConnectionPool" if asynchronous else "a psycopg_pool.ConnectionPool"
        given = repr(target) if isinstance(target, str) else type(target).__name__
        raise ConfigurationError(f"{feature} needs a postgresql:// URL or {kind}, got {given}")
    try:
        psycopg.conninfo.conninfo_to_dict(target)
    except psycopg.ProgrammingError as error:
        raise ConfigurationError(
            f"url {redact(target)!r} is not a Postgres URL ({error}); use postgresql://user:password@host:port/database"
        ) from None
    pool = flavour(
        target,
        open=False,
        min_size=1,
        max_size=max_size,
        timeout=connect_timeout,
        kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout))},
        name=feature,
        check=_checked_async(flavour) if asynchronous else _checked(flavour),
    )
    return PostgresPool(pool, f"Postgres at {redact(target)}", True, target, psycopg, pools)


def _spoke_unasked(connection: Any) -> bool:
    """Whether an idle connection has something to read: the server spoke unasked, which on a
    connection between statements means it is going away (a restarted server's farewell, or its
    socket closed).  A look at the socket, no round trip."""
    try:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _checked(flavour: Any) -> Callable[[Any], None]:
    """The pool's check of a connection handed out: a round trip only for one the server spoke on
    while it sat in the pool; one that fails it is thrown away and another one handed out, so a
    restarted server costs no request its dead connections."""

    def check(connection: Any) -> None:
        if connection.closed or _spoke_unasked(connection):
            flavour.check_connection(connection)

    return check


def _checked_async(flavour: Any) -> Callable[[Any], Awaitable[None]]:
    """:func:`_checked` for an asyncio pool."""

    async def check(connection: Any) -> None:
        if connection.closed or _spoke_unasked(connection):
            await flavour.check_connection(connection)

    return check


def ensure_schema(postgres: PostgresPool, namespace: str) -> None:
    """Bring ``namespace`` up to :data:`SCHEMA_VERSION`, on a connection of its own (blocking:
    an asyncio store runs it in a thread, once).  A namespace at that version costs one query;
    otherwise every missing migration runs in one transaction, under an advisory lock that makes
    processes starting together take turns; a namespace seen ready by this process is not asked
    again.  Raises ``ConfigurationError`` for a namespace a
    newer release migrated, and the driver's own error for a server it cannot reach (the
    caller's :class:`PostgresFailures` reads it)."""
    if (postgres.conninfo, namespace) in _READY:
        return
    psycopg = postgres.errors
    name = quoted(namespace)
    with psycopg.connect(postgres.conninfo, autocommit=True, connect_timeout=5) as connection:
        try:
            row = connection.execute(f"SELECT version FROM {name}.{VERSION_TABLE}").fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            row = None
        if row is not None:
            _check_version(int(row[0]), namespace, postgres.where)
            if int(row[0]) == SCHEMA_VERSION:
                _READY.add((postgres.conninfo, namespace))
                return
        with connection.transaction():
            connection.execute(_MIGRATION_LOCK, (namespace,))
            connection.execute(f"CREATE SCHEMA IF NOT EXISTS {name}")
            connection.execute(f"CREATE TABLE IF NOT EXISTS {name}.{VERSION_TABLE} (version INTEGER NOT NULL)")
            row = connection.execute(f"SELECT version FROM {name}.{VERSION_TABLE} FOR UPDATE").fetchone()
            found = 0 if row is None else int(row[0])
            _check_version(found, namespace, postgres.where)
            if row is None:
                connection.execute(f"INSERT INTO {name}.{VERSION_TABLE} (version) VALUES (0)")
            for version in range(found + 1, SCHEMA_VERSION + 1):
                connection.execute(MIGRATIONS[version - 1].replace("{ns}", name))
            connection.execute(f"UPDATE {name}.{VERSION_TABLE} SET version = %s", (SCHEMA_VERSION,))
    _READY.add((postgres.conninfo, namespace))


# The (server, namespace) pairs this process has seen at SCHEMA_VERSION: a store opened again (the
# proxy opens a fact store per session) does not open a connection to ask again.
_READY: set[tuple[str, str]] = set()


def _check_version(found: int, namespace: str, where: str) -> None:
    if found > SCHEMA_VERSION:
        raise ConfigurationError(
            f"{where}, namespace {namespace!r}, is at schema version {found}, made by a newer contextledger "
            f"(this one knows up to {SCHEMA_VERSION}); upgrade contextledger, or choose another namespace"
        )


class PostgresFailures:
    """How one store reports a Postgres failure (see the module docstring): ``unavailable`` for a
    server that cannot be reached or refused a statement (nothing was changed), ``failed`` for
    anything else the driver raised.  Errors that are not the driver's propagate as they are."""

    def __init__(
        self,
        postgres: PostgresPool,
        *,
        unavailable: type[ContextLedgerError],
        failed: type[ContextLedgerError],
    ) -> None:
        self.where = postgres.where
        self._errors = postgres.errors
        self._pool_errors = postgres.pool_errors
        self._unavailable = unavailable
        self._failed = failed

    @contextlib.contextmanager
    def mapped(
        self, action: str, *, outcome_unknown: Callable[[Exception], ContextLedgerError] | None = None
    ) -> Iterator[None]:
        """Run the block, turning a driver failure into the store's exception for ``action``.  With
        ``outcome_unknown``, a connection that broke while a statement was out raises what it
        returns instead: the server may have run the statement."""
        try:
            yield
        except ContextLedgerError:
            raise
        except (self._errors.Error, OSError) as error:
            if outcome_unknown is not None and not self.never_ran(error):
                raise outcome_unknown(error) from error
            raise self.error(error, action) from error

    def never_ran(self, error: BaseException) -> bool:
        """Whether ``error`` proves the statement changed nothing: the server answered it with an
        error (it rolled back), or no connection could be had to send it on."""
        if isinstance(error, (self._pool_errors.PoolTimeout, self._pool_errors.PoolClosed)):
            return True
        if getattr(error, "sqlstate", None) is not None:
            return True
        return not isinstance(error, (self._errors.OperationalError, OSError))

    def error(self, error: BaseException, action: str) -> ContextLedgerError:
        reason = f"{type(error).__name__}: {str(error).strip()}"
        if isinstance(error, (self._pool_errors.PoolTimeout, OSError)) or (
            isinstance(error, self._errors.OperationalError) and getattr(error, "sqlstate", None) is None
        ):
            return self._unavailable(
                f"cannot {action}: {self.where} is unreachable ({reason}); check that the server is running and "
                "the URL is right"
            )
        if getattr(error, "sqlstate", None) is not None:
            return self._unavailable(f"cannot {action}: {self.where} refused the statement ({reason})")
        return self._failed(f"cannot {action}: {self.where} failed ({reason})")
