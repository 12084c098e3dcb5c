"""Real processes on 127.0.0.1 for the proxy tests: a fake upstream, proxies, and a Redis server.

Every proxy is ``contextledger serve`` started as a child process, exactly as a user starts it,
with its log captured to a file so tests can check what it wrote there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.history.conftest import (
    _stop,
    redis_server,  # noqa: F401  (the session's redis-server fixture)
)
from tests.history.support import free_port
from tests.optional_imports import try_import

with try_import("serve") as serve_extra:
    import httpx  # noqa: F401
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
STORES = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]
"""The session stores a test runs the proxy on, as a ``store`` parameter."""


def store_args(request: pytest.FixtureRequest, store: str) -> tuple[str, ...]:
    """The ``--store`` flag of a :data:`STORES` parameter: the tests' own Redis, Redis Cluster or
    Postgres (a fresh database), or nothing for the default SQLite file."""
    if store == "redis":
        return ("--store", request.getfixturevalue("redis_server").url)
    if store == "redis-cluster":
        return ("--store", request.getfixturevalue("redis_cluster").url)
    if store == "postgres":
        return ("--store", request.getfixturevalue("postgres_server").fresh_database())
    return ()


_START_TIMEOUT = 30.0


def _wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{url} exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer within {_START_TIMEOUT}s:\n{log.read_text(errors='replace')[-3000:]}")


@contextmanager
def _process(
    command: list[str], health: str, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    if not serve_extra.installed:  # the proxy and the fake upstream are both starlette apps
        pytest.skip(serve_extra.reason)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    try:
        _wait_until_up(health, process, log)
        yield process
    finally:
        _stop(process)


@dataclass
class FakeUpstream:
    """The running fake upstream: its /v1 base URL and what it has received."""

    base_url: str

    def received(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/_received", timeout=5) as reply:
            result: list[dict[str, Any]] = json.loads(reply.read())
            return result

    def clear(self) -> None:
        request = urllib.request.Request(self.base_url.removesuffix("/v1") + "/_received", method="DELETE")
        with urllib.request.urlopen(request, timeout=5):
            pass

    def last_body(self) -> dict[str, Any]:
        body: dict[str, Any] = self.received()[-1]["body"]
        return body


@pytest.fixture(scope="session")
def fake_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeUpstream]:
    port = free_port()
    log = tmp_path_factory.mktemp("upstream") / "upstream.log"
    command = [sys.executable, "-m", "tests.serve.fake_upstream", str(port)]
    with _process(command, f"http://127.0.0.1:{port}/_received", log):
        yield FakeUpstream(f"http://127.0.0.1:{port}/v1")


@dataclass
class Proxy:
    """A running ``contextledger serve``: its /v1 base URL, its root, its log file and its process."""

    base_url: str
    root: str
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def get(self, path: str, key: str | None = None) -> tuple[int, Any]:
        return self.call("GET", path, None, key)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, Any]:
        """One HTTP request; the status and the decoded JSON (or text) answer."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.root + path, data=data, method=method)
        request.add_header("content-type", "application/json")
        if key is not None:
            request.add_header("authorization", f"Bearer {key}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                status, raw = reply.status, reply.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def create_session(self, session_id: str, key: str) -> None:
        status, body = self.call("POST", "/v1/contextledger/sessions", {"id": session_id}, key)
        assert status == 201, body

    def messages(self, session_id: str, key: str) -> list[dict[str, Any]]:
        status, body = self.get(f"/v1/contextledger/sessions/{session_id}/messages", key)
        assert status == 200, body
        data: list[dict[str, Any]] = body["data"]
        return data

    def facts(self, session_id: str, key: str) -> dict[str, str]:
        status, body = self.get(f"/v1/contextledger/sessions/{session_id}/facts", key)
        assert status == 200, body
        return {fact["key"]: fact["value"] for fact in body["data"]}


StartProxy = Callable[..., AbstractContextManager[Proxy]]


def _starter(fake_upstream: FakeUpstream, directory: Path) -> StartProxy:
    counter = iter(range(1000))

    @contextmanager
    def start(*args: str, env: dict[str, str] | None = None, upstream: str | None = None) -> Iterator[Proxy]:
        port = free_port()
        log = directory / f"proxy-{next(counter)}.log"
        command = [sys.executable, "-m", "contextledger.cli", "serve", "--port", str(port)]
        command += ["--upstream", upstream or fake_upstream.base_url]
        if "--store" not in args:
            command += ["--store", f"sqlite:{directory / 'sessions.db'}"]
        command += list(args)
        root = f"http://127.0.0.1:{port}"
        with _process(command, root + "/healthz", log, env) as process:
            yield Proxy(root + "/v1", root, log, process)

    return start


@pytest.fixture
def start_proxy(fake_upstream: FakeUpstream, tmp_path: Path) -> StartProxy:
    """Start ``contextledger serve ARGS`` in front of the fake upstream (SQLite in tmp_path by default)."""
    return _starter(fake_upstream, tmp_path)


@pytest.fixture(scope="module")
def start_proxy_module(fake_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> StartProxy:
    """:func:`start_proxy` for proxies a whole test module shares (SQLite in a directory of its own)."""
    return _starter(fake_upstream, tmp_path_factory.mktemp("proxy"))
