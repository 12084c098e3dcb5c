"""The one Redis opener and error mapping every store uses (``contextledger._redis``), against a
real redis-server on 127.0.0.1: stopped, paused past the timeout, holding foreign data, or
cutting a watched connection."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("redis", reason="the 'redis' extra")

import redis

from contextledger._redis import RedisConnection, RedisFailures, open_redis
from contextledger.exceptions import (
    ConfigurationError,
    ContextLedgerError,
    HistoryCorruptError,
    HistoryUnavailableError,
    MissingExtraError,
    TurnOutcomeUnknownError,
)
from tests.history.conftest import own_redis_server, redis_server
from tests.history.support import RedisServer, free_port

__all__ = ["own_redis_server", "redis_server"]

pytestmark = pytest.mark.redis

OwnServer = tuple[RedisServer, "subprocess.Popen[bytes]"]


def failures(connection: RedisConnection) -> RedisFailures:
    return RedisFailures(
        connection,
        unavailable=HistoryUnavailableError,
        foreign=HistoryCorruptError,
        holds="a list of messages",
        remedy="choose another namespace",
    )


def unknown(error: Exception) -> ContextLedgerError:
    return TurnOutcomeUnknownError(f"sent, not confirmed ({error})", turn_id="t", session_id="s")


def mapped(
    connection: RedisConnection,
    action: str,
    key: str,
    command: Callable[[], object],
    *,
    outcome_unknown: Callable[[Exception], ContextLedgerError] | None = None,
) -> object:
    """Run a synchronous client's ``command`` under the mapping, as a store does."""
    with failures(connection).mapped(action, key, outcome_unknown=outcome_unknown):
        return command()


@pytest.fixture
def key() -> str:
    return f"test-redis-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


# The opener --------------------------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_url_gives_an_owned_client_that_never_retries(asynchronous: bool) -> None:
    connection = open_redis(
        "redis://ada:s3cret@127.0.0.1:6379/2", feature="a test", asynchronous=asynchronous, socket_timeout=1.5
    )
    client = connection.client
    kinds = (redis.asyncio.Redis if asynchronous else redis.Redis,)
    assert isinstance(client, kinds)
    assert connection.owned
    assert connection.where == "Redis at redis://ada:***@127.0.0.1:6379/2"
    settings = client.connection_pool.connection_kwargs
    assert settings["retry"].get_retries() == 0
    assert settings["socket_timeout"] == 1.5
    assert settings["decode_responses"] is False


def test_replies_are_parsed_by_hiredis_when_it_is_installed() -> None:
    pytest.importorskip("hiredis", reason="hiredis, in the 'redis' extra")
    connection = open_redis("redis://127.0.0.1:6379/0", feature="a test", asynchronous=False)
    assert "Hiredis" in type(connection.client.connection_pool.make_connection()._parser).__name__


def test_a_client_passed_in_is_used_as_it_is_and_left_open(redis_server: RedisServer, key: str) -> None:
    client = redis.Redis.from_url(redis_server.url)
    connection = open_redis(client, feature="a test", asynchronous=False)
    assert connection.client is client
    assert not connection.owned
    connection.close()
    assert client.set(key, "still open")  # close() left it alone
    client.close()


@pytest.mark.parametrize(
    ("target", "asynchronous", "problem"),
    [
        ("http://ada:s3cret@127.0.0.1/", False, "is not a Redis URL"),
        ("", False, "needs a redis:// URL"),
        (5, True, "needs a redis:// URL or an asyncio"),
        (redis.Redis(), True, "needs a redis:// URL or an asyncio"),
        (redis.asyncio.Redis(), False, "needs a redis:// URL or a synchronous"),
    ],
)
def test_a_bad_target_is_refused_without_its_password(target: object, asynchronous: bool, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as caught:
        open_redis(target, feature="a test", asynchronous=asynchronous)
    assert "s3cret" not in str(caught.value)


def test_a_missing_redis_package_names_the_store_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name == "redis" or name.startswith("redis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingExtraError, match=r"the store under test needs .*pip install 'contextledger\[redis\]'"):
        open_redis("redis://127.0.0.1:6379/0", feature="the store under test", asynchronous=False)


# The error mapping -------------------------------------------------------------------------------


def test_a_stopped_server_is_unavailable_at_once_even_for_a_write(own_redis_server: OwnServer) -> None:
    server, process = own_redis_server
    connection = open_redis(server.url, feature="a test", asynchronous=False, socket_connect_timeout=1)
    process.terminate()
    process.wait()
    started = time.monotonic()
    # A refused connection proves the command never ran: not an unknown outcome.
    with pytest.raises(HistoryUnavailableError, match=f"Redis at {server.url} is unreachable"):
        mapped(connection, "append to session 's'", "k", lambda: connection.client.incr("k"), outcome_unknown=unknown)
    assert time.monotonic() - started < 1.0  # no retry hides behind the error
    connection.close()


def test_a_write_timed_out_after_it_was_sent_is_an_unknown_outcome_and_runs_once(
    own_redis_server: OwnServer, key: str
) -> None:
    server, process = own_redis_server
    connection = open_redis(server.url, feature="a test", asynchronous=False, socket_timeout=0.3)
    assert connection.client.ping()
    process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(TurnOutcomeUnknownError, match="Timeout"):
            mapped(connection, "store turn 't'", key, lambda: connection.client.incr(key), outcome_unknown=unknown)
        with pytest.raises(HistoryUnavailableError, match=r"cannot read 't': .* is unreachable \(TimeoutError"):
            mapped(connection, "read 't'", key, lambda: connection.client.get(key))
    finally:
        process.send_signal(signal.SIGCONT)
    time.sleep(0.2)  # the server reads what was sent before the client gave up
    checker = redis.Redis.from_url(server.url)
    assert checker.get(key) == b"1"  # sent once: a retrying client would have sent it four times
    checker.close()
    connection.close()


def test_an_asyncio_client_timed_out_after_sending_is_an_unknown_outcome(own_redis_server: OwnServer, key: str) -> None:
    server, process = own_redis_server

    async def store_turn(connection: RedisConnection) -> None:
        with failures(connection).mapped("store turn 't'", key, outcome_unknown=unknown):
            await connection.client.incr(key)

    async def scenario() -> None:
        connection = open_redis(server.url, feature="a test", asynchronous=True, socket_timeout=0.3)
        assert await connection.client.ping()
        process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(TurnOutcomeUnknownError):
                await store_turn(connection)
        finally:
            process.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.2)
        await connection.aclose()
        checker = open_redis(server.url, feature="a test", asynchronous=True)
        assert await checker.client.get(key) == b"1"
        await checker.aclose()

    asyncio.run(scenario())


def test_a_key_of_another_type_is_foreign_data_named_with_its_key(
    raw: redis.Redis, redis_server: RedisServer, key: str
) -> None:
    raw.set(key, "someone else's")
    connection = open_redis(redis_server.url, feature="a test", asynchronous=False)
    # A WRONGTYPE refusal ran nothing, so it is not an unknown outcome either.
    expected = f"key {key!r} holds something other than a list of messages; another program uses this key, so choose"
    with pytest.raises(HistoryCorruptError, match=expected):
        mapped(
            connection, "append to session 's'", key, lambda: connection.client.rpush(key, "x"), outcome_unknown=unknown
        )
    assert raw.get(key) == b"someone else's"
    connection.close()


def test_a_command_the_server_refuses_is_unavailable_not_unknown(redis_server: RedisServer) -> None:
    connection = open_redis(redis_server.url, feature="a test", asynchronous=False)
    script = "return redis.call('NOSUCHCOMMAND')"
    with pytest.raises(HistoryUnavailableError, match=r"refused the command \(ResponseError"):
        mapped(connection, "run a script", "k", lambda: connection.client.eval(script, 0), outcome_unknown=unknown)
    connection.close()


def test_errors_that_are_not_redis_errors_pass_through() -> None:
    connection = open_redis(f"redis://127.0.0.1:{free_port()}/0", feature="a test", asynchronous=False)
    with pytest.raises(KeyError, match="not a Redis failure"), failures(connection).mapped("read", "k"):
        raise KeyError("not a Redis failure")
    with pytest.raises(TurnOutcomeUnknownError, match="already mapped"), failures(connection).mapped("read", "k"):
        raise unknown(ValueError("already mapped"))


def test_a_watched_key_that_changed_is_left_to_the_caller(
    raw: redis.Redis, redis_server: RedisServer, key: str
) -> None:
    connection = open_redis(redis_server.url, feature="a test", asynchronous=False)

    def write() -> None:
        with connection.client.pipeline(transaction=True) as transaction:
            transaction.watch(key)
            raw.set(key, "changed meanwhile")
            transaction.multi()
            transaction.set(key, "mine")
            transaction.execute()

    with pytest.raises(redis.WatchError):
        mapped(connection, "write", key, write, outcome_unknown=unknown)
    assert raw.get(key) == b"changed meanwhile"
    connection.close()


def test_a_watched_connection_killed_is_a_failure_not_a_conflict(
    raw: redis.Redis, redis_server: RedisServer, key: str
) -> None:
    connection = open_redis(redis_server.url, feature="a test", asynchronous=False)

    def read_while_watching() -> None:
        with connection.client.pipeline(transaction=True) as transaction:
            transaction.watch(key)
            raw.client_kill_filter(_id=transaction.client_id())
            transaction.get(key)

    with pytest.raises(HistoryUnavailableError, match=r"is unreachable \(ConnectionError") as caught:
        mapped(connection, "write", key, read_while_watching)
    assert isinstance(caught.value.__cause__, redis.WatchError)  # what redis-py raised, mapped
    connection.close()
