"""Opening a Redis client and reading its failures, the same way for every store.

The Redis history (asyncio), the Redis fact store (synchronous) and the proxy's session registry
all reach Redis through a client made by :func:`open_redis`, and read its failures through
:class:`RedisFailures`, so two promises hold for every one of them:

* **A command is sent once.**  redis-py may retry a command after a dropped connection or a
  timeout (a client built with ``redis.Redis(...)`` does, three times, and the defaults have
  changed between versions).  When the first attempt did reach the server and only its reply was
  lost, the retry runs the command a second time: a turn stored twice, a turn number taken twice.
  The client made here is told never to retry, so a lost reply surfaces as an error and the
  caller settles the outcome (a retry with the same turn id, a read).
* **A failure says what it proves.**  A command that never reached the server (no connection
  could be made, or the server refused it before running it) changed nothing; any later failure
  leaves the outcome to the server; a key holding another type is someone else's data, not an
  outage.  redis-py reports a connection lost while keys are watched as a ``WatchError``, as it
  does a watched key that changed; only the second may be answered by running the transaction
  again, so the mapping tells them apart.  Each store states once which of its exceptions stands
  for each case, and wraps its calls in :meth:`RedisFailures.mapped`, as httpx maps its
  transport's errors in one place.

The ``redis`` package is imported when a client is opened, never when contextledger is, and a
missing one raises :class:`~contextledger.exceptions.MissingExtraError` naming the store.  Replies
are parsed by ``hiredis`` when it is installed (the ``redis`` extra installs it): redis-py picks
it by itself, so nothing here names a parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from contextledger._extras import require_extra
from contextledger._keys import slot_key, storage_key
from contextledger.exceptions import ConfigurationError, ContextLedgerError

__all__ = ["CLUSTER_SCHEMES", "RedisConnection", "RedisFailures", "open_redis", "redact", "replicas_available"]


def redact(url: str) -> str:
    """The URL without its password, fit for an error message or a log."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<unparseable URL>"


@dataclass(frozen=True)
class RedisConnection:
    """A client ready for a store.

    ``where`` names the server in messages (never with its password); ``owned`` says whether
    :func:`open_redis` made the client, in which case the store closes it, while a client the
    caller passed in stays open for the caller.  ``errors`` is ``redis.exceptions``.
    """

    client: Any
    where: str
    owned: bool
    errors: ModuleType
    cluster: bool = False  # a Redis Cluster client: a session's keys carry its hash tag

    def key(self, *parts: str, session: str) -> str:
        """The key of ``parts`` for ``session``: its hash tag on a cluster (see :mod:`contextledger._keys`)."""
        return slot_key(*parts, tag=session) if self.cluster else storage_key(*parts, session)

    @functools.cached_property
    def location(self) -> str:
        """The server (host, port and database) or the cluster (its startup nodes) the client
        talks to, whichever way it was made: two stores with the same location can share a
        script's atomic step."""
        if self.cluster:
            return "cluster " + ",".join(sorted(self.client.nodes_manager.startup_nodes))
        settings = self.client.connection_pool.connection_kwargs
        return f"{settings.get('path') or settings.get('host')}:{settings.get('port')}/{settings.get('db') or 0}"

    def close(self) -> None:
        """Close a synchronous client made here; the connections are gone even if closing raised."""
        if self.owned:
            with contextlib.suppress(OSError, self.errors.RedisError):
                self.client.close()

    async def aclose(self) -> None:
        """Close an asyncio client made here, as :meth:`close` does a synchronous one."""
        if self.owned:
            with contextlib.suppress(OSError, self.errors.RedisError):
                await self.client.aclose()


def open_redis(
    target: Any,
    *,
    feature: str,
    asynchronous: bool,
    socket_timeout: float | None = 5.0,
    socket_connect_timeout: float | None = 5.0,
) -> RedisConnection:
    """A client for ``target``, a ``redis://`` URL, a ``redis+cluster://`` URL (any node of a
    Redis Cluster, whose other nodes the client discovers) or a client the caller made.

    From a URL: a client that never retries a command, gives up after the timeouts (seconds, or
    ``None`` to wait for ever) and returns replies as bytes, which the stores decode themselves
    so that damaged data is reported, not guessed at.  A client passed in is used as configured
    (its retry policy is the caller's to check, for the reason in the module docstring); it must
    be ``redis.asyncio.Redis`` when ``asynchronous``, else ``redis.Redis``.  ``feature`` names
    the store in the errors.
    """
    redis = require_extra("redis", extra="redis", feature=feature)
    import redis.exceptions as errors  # noqa: PLC0415
    from redis.asyncio import Redis as AsyncRedis  # noqa: PLC0415
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster  # noqa: PLC0415
    from redis.asyncio.retry import Retry as AsyncRetry  # noqa: PLC0415
    from redis.backoff import NoBackoff  # noqa: PLC0415
    from redis.cluster import RedisCluster  # noqa: PLC0415
    from redis.retry import Retry  # noqa: PLC0415

    flavour: Any = AsyncRedis if asynchronous else redis.Redis
    cluster_flavour: Any = _ready_cluster() if asynchronous else RedisCluster
    kind = "an asyncio redis.asyncio.Redis" if asynchronous else "a synchronous redis.Redis"
    never_retry = AsyncRetry(NoBackoff(), 0) if asynchronous else Retry(NoBackoff(), 0)
    if isinstance(target, flavour):
        return RedisConnection(target, f"Redis client {target!r}", False, errors)
    if isinstance(target, (AsyncRedisCluster if asynchronous else RedisCluster)):
        return RedisConnection(target, f"Redis Cluster client {target!r}", False, errors, cluster=True)
    if not isinstance(target, str) or not target.strip():
        given = repr(target) if isinstance(target, str) else type(target).__name__
        raise ConfigurationError(f"{feature} needs a redis:// URL or {kind} client, got {given}")
    cluster = target.startswith(CLUSTER_SCHEMES)
    try:
        if cluster:
            client = _cluster_client(cluster_flavour, target, socket_timeout, socket_connect_timeout, asynchronous)
        else:
            client = flavour.from_url(
                target,
                socket_timeout=socket_timeout,
                socket_connect_timeout=socket_connect_timeout,
                retry=never_retry,
                decode_responses=False,
            )
    except (ValueError, errors.RedisClusterException) as error:
        raise ConfigurationError(
            f"url {redact(target)!r} is not a Redis URL ({error}); use redis://host:port/db, or "
            "redis+cluster://host:port for any node of a Redis Cluster"
        ) from None
    where = f"Redis Cluster at {redact(target)}" if cluster else f"Redis at {redact(target)}"
    return RedisConnection(client, where, True, errors, cluster=cluster)


@functools.cache
def _ready_cluster() -> Any:
    """redis-py's asyncio cluster client, initialised before its first command runs.  Commands
    started together on a client that has not yet read the cluster's layout break one another's
    connections ("Connection closed by server": 20 tasks appending at once on a new client); with
    retries off, as here, that fails the commands, and with retries on it would run some twice.
    Every command waits here for the one initialisation (redis-py's own lock) before it starts.
    A command written to a pooled connection whose node died (the event loop's ``RuntimeError``
    on a closed transport, which redis-py lets through) is a connection failure here, as it is."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster  # noqa: PLC0415
    from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: PLC0415

    class ReadyRedisCluster(AsyncRedisCluster):
        async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
            if self._initialize:
                await self.initialize()
            try:
                return await super().execute_command(*args, **kwargs)
            except RuntimeError as error:
                # A pooled connection to a node that died is written to after its transport closed:
                # the event loop refuses before anything is sent.  That is a connection failure
                # (the command never ran), and the layout is read again before the next command.
                if "closed" not in str(error):
                    raise
                self._initialize = True
                raise RedisConnectionError(f"Error connecting to a cluster node: {error}") from error

    return ReadyRedisCluster


CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
"""URL schemes naming a node of a Redis Cluster (``rediss`` with TLS)."""


def replicas_available(target: str, *, timeout: float = 3.0) -> int:
    """The fewest replicas connected to a master of the Redis ``target`` names, now: on a Redis
    Cluster, counted per master serving slots in ``CLUSTER NODES`` (failed nodes left out); on one
    server, its ``connected_slaves``.

    A write confirmed with ``WAIT N`` needs N replicas of the master that took it, so a store asked
    for more than this could confirm no turn at all.  A :class:`ConfigurationError` for a URL that
    is not Redis's; the client's own error when the server does not answer within ``timeout``.
    """
    redis = require_extra("redis", extra="redis", feature="reading a Redis store's replicas")
    plain = target.replace("+cluster", "", 1)
    try:
        client = redis.Redis.from_url(plain, socket_timeout=timeout, socket_connect_timeout=timeout)
    except ValueError as error:
        raise ConfigurationError(f"url {redact(target)!r} is not a Redis URL ({error})") from None
    try:
        if not target.startswith(CLUSTER_SCHEMES):
            return int(client.info("replication").get("connected_slaves", 0))
        nodes = client.execute_command("CLUSTER NODES")
    finally:
        client.close()
    serving: dict[str, int] = {}
    replicas: list[str] = []
    for node in nodes.values():
        flags = set(str(node.get("flags", "")).split(","))
        if flags & {"fail", "fail?", "handshake", "noaddr"}:
            continue
        if "master" in flags and node.get("slots"):
            serving[str(node["node_id"])] = 0
        elif "slave" in flags and node.get("connected", True):
            replicas.append(str(node.get("master_id")))
    for master in replicas:
        if master in serving:
            serving[master] += 1
    return min(serving.values(), default=0)


def _cluster_client(
    flavour: Any, target: str, socket_timeout: float | None, connect_timeout: float | None, asynchronous: bool
) -> Any:
    """A cluster client from a ``redis+cluster://`` URL that, like the single-server client, never
    sends a command twice: no retry on a dropped connection (it may have run), while a ``MOVED``
    or ``ASK`` redirection, which proves the command did not run where it was sent, is followed.
    A cluster has one database: a path other than ``/0`` is refused."""
    plain = target.replace("+cluster", "", 1)
    parts = urlsplit(plain)
    if parts.path not in ("", "/", "/0"):
        raise ValueError("a Redis Cluster has only database 0")
    from redis.asyncio.retry import Retry as AsyncRetry  # noqa: PLC0415
    from redis.backoff import NoBackoff  # noqa: PLC0415
    from redis.retry import Retry  # noqa: PLC0415

    never_retry = AsyncRetry(NoBackoff(), 0) if asynchronous else Retry(NoBackoff(), 0)
    return flavour.from_url(
        plain,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        retry=never_retry,
        decode_responses=False,
    )


class RedisFailures:
    """How one store reports a Redis failure (see the module docstring).

    ``unavailable`` is raised for a server that cannot be reached or refused a command,
    ``foreign`` for a key holding another type than the store's (``holds`` says what the key
    should hold, ``remedy`` what the user can do).  Anything that is not a Redis or socket error
    propagates as it is.
    """

    def __init__(
        self,
        connection: RedisConnection,
        *,
        unavailable: type[ContextLedgerError],
        foreign: type[ContextLedgerError],
        holds: str,
        remedy: str,
    ) -> None:
        self.where = connection.where
        self._errors = connection.errors
        self._unavailable = unavailable
        self._foreign = foreign
        self._holds = holds
        self._remedy = remedy

    @contextlib.contextmanager
    def mapped(
        self, action: str, key: str, *, outcome_unknown: Callable[[Exception], ContextLedgerError] | None = None
    ) -> Iterator[None]:
        """Run the block, turning a Redis failure into the store's exception for ``action`` on
        ``key``.  With ``outcome_unknown``, a failure that may have come after the server took
        the command raises what it returns instead.  A ``WatchError`` for a watched key that
        changed propagates as it is: the caller runs its transaction again."""
        try:
            yield
        except Exception as error:
            cause = self._dropped_under_watch(error) or error
            if isinstance(cause, self._errors.WatchError) or not self._is_redis_failure(cause):
                raise  # a watched key changed (the caller's to run again), or not a Redis failure
            if outcome_unknown is not None and not self._never_sent(cause):
                raise outcome_unknown(cause) from error
            raise self._failure(cause, action, key) from error

    def _never_sent(self, error: BaseException) -> bool:
        """Whether ``error`` proves the command never ran: it failed to connect, or the server
        refused it before running it (``NOSCRIPT``, ``WRONGTYPE`` on a script's first reads, OOM)."""
        if isinstance(error, self._errors.ResponseError):
            return True
        unsent = (self._errors.ConnectionError, self._errors.TimeoutError, OSError)
        return isinstance(error, unsent) and "connecting to" in str(error)

    def _dropped_under_watch(self, error: Exception) -> Exception | None:
        """The connection error behind a ``WatchError`` that redis-py raises when a connection
        drops while keys are watched (the watch is lost, not broken by a write), else None."""
        context = error.__context__
        if isinstance(error, self._errors.WatchError) and isinstance(context, Exception):
            # redis-py raises it while handling the connection error, so that error is its context.
            return context if self._is_redis_failure(context) else None
        return None

    def _is_redis_failure(self, error: BaseException | None) -> bool:
        return isinstance(error, (self._errors.RedisError, OSError, asyncio.TimeoutError))

    def _failure(self, error: BaseException, action: str, key: str) -> ContextLedgerError:
        errors = self._errors
        if isinstance(error, errors.ResponseError) and "WRONGTYPE" in str(error):
            return self._foreign(
                f"cannot {action}: {self.where}, key {key!r} holds something other than {self._holds}; "
                f"another program uses this key, so {self._remedy}"
            )
        if isinstance(error, (errors.ConnectionError, errors.TimeoutError, OSError, asyncio.TimeoutError)):
            return self._unavailable(
                f"cannot {action}: {self.where} is unreachable ({type(error).__name__}: {error}); "
                "check that the server is running and the URL is right"
            )
        return self._unavailable(f"cannot {action}: {self.where} refused the command ({type(error).__name__}: {error})")
