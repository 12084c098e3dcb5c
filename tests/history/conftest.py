"""Fixtures for the history tests: a real redis-server and a real Postgres for the session, and one
fresh provider per test for each backend the conformance suite runs against."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from contextledger.history import (
    InMemoryHistoryProvider,
    PostgresHistoryProvider,
    RedisHistoryProvider,
    SQLiteHistoryProvider,
)
from tests.history.support import Backend, RedisServer, free_port
from tests.optional_imports import try_import
from tests.postgres_server import PostgresServer
from tests.redis_cluster import RedisCluster

with try_import("redis") as redis_extra:
    import redis  # noqa: F401  (what every Redis store here talks through)

_START_ATTEMPTS = 3
_START_TIMEOUT = 10.0


def answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def redis_binary() -> str:
    """The redis-server binary; skipped on a developer's machine without it (or without the ``redis``
    package that talks to it), a failure under ``CI=true``, where a silent skip would hide that the
    Redis tests never ran."""
    binary = shutil.which("redis-server")
    if binary is None:
        reason = "redis-server is not installed; the Redis history tests start their own (apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the Redis tests, not skip them", pytrace=False)
        pytest.skip(reason)
    if not redis_extra.installed:
        pytest.skip(redis_extra.reason)  # tests/ci_skips.py fails it under CI=true
    return binary


@contextmanager
def started_redis(directory: Path) -> Iterator[tuple[RedisServer, subprocess.Popen[bytes]]]:
    """A redis-server on 127.0.0.1 with no persistence, writing its files in ``directory``."""
    binary = redis_binary()
    log = directory / "redis.log"
    for _ in range(_START_ATTEMPTS):
        port = free_port()
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--dir", str(directory), "--logfile", str(log)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + _START_TIMEOUT
            while process.poll() is None and time.monotonic() < deadline and not answers_ping(port):
                time.sleep(0.02)
            if process.poll() is None and answers_ping(port):
                yield RedisServer(port), process
                return
        finally:
            _stop(process)
    details = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    pytest.fail(f"redis-server did not start on 127.0.0.1 after {_START_ATTEMPTS} attempts:\n{details}")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A throwaway redis-server on 127.0.0.1 (no persistence), stopped when the test session ends."""
    with started_redis(tmp_path_factory.mktemp("redis")) as (server, _):
        yield server


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[tuple[RedisServer, subprocess.Popen[bytes]]]:
    """A redis-server for one test alone, with its process, for tests that pause or stop it."""
    directory = tmp_path / "redis"
    directory.mkdir()
    with started_redis(directory) as started:
        try:
            yield started
        finally:
            started[1].send_signal(signal.SIGCONT)  # a test that paused it and failed must not hang the stop


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each backend with empty storage of its own: one in-memory store, a new SQLite file, or a
    Redis or Postgres namespace no other test uses."""
    name: str = request.param
    if name == "memory":
        store = InMemoryHistoryProvider()
        return Backend(name, lambda: store)
    if name == "sqlite":
        path = tmp_path / "history.sqlite3"
        return Backend(name, lambda: SQLiteHistoryProvider(path))
    if name == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        schema = unique_name("test")
        return Backend(name, lambda: PostgresHistoryProvider(postgres.url, namespace=schema))
    namespace = unique_name("test")
    if name == "redis-cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return Backend(name, lambda: RedisHistoryProvider(cluster.url, namespace=namespace))
    server: RedisServer = request.getfixturevalue("redis_server")
    return Backend(name, lambda: RedisHistoryProvider(server.url, namespace=namespace))
