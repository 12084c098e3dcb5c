"""A Redis history that cannot reach its server, or finds foreign data under its keys, says so
with a specific error and leaves what is stored as it was."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from contextledger.exceptions import ConfigurationError, HistoryCorruptError, HistoryUnavailableError, MissingExtraError
from contextledger.history import HistoryProvider, RedisHistoryProvider
from contextledger.messages import Message
from tests.history.support import RedisServer, free_port
from tests.optional_imports import try_import

with try_import("redis") as redis_extra:
    import redis.asyncio

pytestmark = redis_extra.skip

MESSAGES = [Message.user("hello", message_id="1"), Message.assistant("hi", message_id="2")]

OPERATIONS: list[Any] = [
    pytest.param(lambda history: history.load("s"), id="load"),
    pytest.param(lambda history: history.append("s", MESSAGES), id="append"),
    pytest.param(lambda history: history.replace("s", MESSAGES), id="replace"),
    pytest.param(lambda history: history.clear("s"), id="clear"),
]
Operation = Callable[[HistoryProvider], Awaitable[Any]]


class DroppableProxy:
    """A TCP relay to the test server that can be cut off, as a network failure or server crash would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [client_writer, server_writer]

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except OSError:
                pass
            finally:
                sink.close()

        await asyncio.gather(pump(client_reader, server_writer), pump(server_reader, client_writer))

    async def drop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        await self._server.wait_closed()


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(scenario())


@pytest.mark.parametrize("operation", OPERATIONS)
def test_closed_port_is_unavailable_quickly(operation: Operation) -> None:
    port = free_port()
    url = f"redis://reader:s3cret@127.0.0.1:{port}/0"

    async def scenario() -> None:
        history = RedisHistoryProvider(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        started = time.monotonic()
        with pytest.raises(HistoryUnavailableError, match=f"127.0.0.1:{port}") as caught:
            await operation(history)
        assert time.monotonic() - started < 2.0  # no retry loop hides behind the error
        assert "s3cret" not in str(caught.value)
        await history.close()

    run(scenario)


@pytest.mark.redis
@pytest.mark.parametrize("operation", OPERATIONS)
def test_lost_connection_is_unavailable_and_changes_nothing(redis_server: RedisServer, operation: Operation) -> None:
    namespace = f"drop-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        proxy = DroppableProxy(redis_server.port)
        await proxy.start()
        history = RedisHistoryProvider(
            f"redis://127.0.0.1:{proxy.port}/0", namespace=namespace, socket_timeout=1, socket_connect_timeout=1
        )
        await history.append("s", MESSAGES[:1])
        await proxy.drop()
        with pytest.raises(HistoryUnavailableError, match="unreachable"):
            await operation(history)
        await history.close()
        direct = RedisHistoryProvider(redis_server.url, namespace=namespace)
        assert await direct.load("s") == MESSAGES[:1]
        await direct.close()

    run(scenario)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_server_that_never_answers_times_out_as_unavailable(operation: Operation) -> None:
    async def scenario() -> None:
        async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # reads until the client gives up; never replies
            writer.close()

        server = await asyncio.start_server(swallow, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        history = RedisHistoryProvider(f"redis://127.0.0.1:{port}/0", socket_timeout=0.3, socket_connect_timeout=0.3)
        started = time.monotonic()
        with pytest.raises(HistoryUnavailableError, match="Timeout"):
            await operation(history)
        assert time.monotonic() - started < 2.0
        await history.close()
        server.close()

    run(scenario)


@pytest.mark.redis
def test_key_holding_another_type_is_corrupt_and_left_alone(redis_server: RedisServer) -> None:
    namespace = f"foreign-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        raw = redis.asyncio.Redis.from_url(redis_server.url)
        history = RedisHistoryProvider(redis_server.url, namespace=namespace)
        key = history.key("s")
        assert key == f"{namespace}:history:s"
        await raw.set(key, "someone else's value")
        with pytest.raises(HistoryCorruptError, match="holds something other than a list"):
            await history.load("s")
        with pytest.raises(HistoryCorruptError, match="choose another namespace"):
            await history.append("s", MESSAGES)
        assert await raw.get(key) == b"someone else's value"
        await history.close()
        await raw.aclose()

    run(scenario)


@pytest.mark.redis
@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"role": "wizard"}', "not a readable message"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
)
def test_unreadable_entry_is_corrupt_naming_session_and_position(
    redis_server: RedisServer, body: bytes, problem: str
) -> None:
    namespace = f"garbage-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        raw = redis.asyncio.Redis.from_url(redis_server.url)
        history = RedisHistoryProvider(redis_server.url, namespace=namespace)
        await history.append("s", MESSAGES)
        await raw.rpush(history.key("s"), body)
        with pytest.raises(HistoryCorruptError, match=f"session 's', message 2 .*{problem}"):
            await history.load("s")
        await history.close()
        await raw.aclose()

    run(scenario)


@pytest.mark.redis
def test_a_client_passed_in_is_used_and_left_open(redis_server: RedisServer) -> None:
    namespace = f"client-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, decode_responses=True)
        history = RedisHistoryProvider(client=client, namespace=namespace, source_id="shared")
        await history.append("s", MESSAGES)
        assert await history.load("s") == MESSAGES
        await history.close()
        assert await client.llen(f"{namespace}:history:s") == 2  # still usable: close() left it open
        await client.aclose()

    run(scenario)


@pytest.mark.parametrize(
    "arguments",
    [
        {"url": "http://127.0.0.1:6379"},
        {"url": ""},
        {"namespace": ""},
        {"namespace": 5},
        {"source_id": ""},
    ],
)
def test_bad_configuration_is_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        RedisHistoryProvider(**arguments)


def test_missing_redis_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name == "redis" or name.startswith("redis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'contextledger\[redis\]'"):
        RedisHistoryProvider()


def test_importing_contextledger_does_not_import_redis() -> None:
    check = (
        "import sys, contextledger, contextledger.history; "
        "from contextledger.history import RedisHistoryProvider; "
        "loaded = sorted(m for m in sys.modules if m == 'redis' or m.startswith('redis.')); "
        "assert not loaded, loaded"
    )
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
