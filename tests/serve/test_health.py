"""``/healthz`` says the process lives, ``/readyz`` whether it can serve (its store, and its upstream
when asked), and ``/metrics`` asks for its bearer token when one is set; all through real proxies."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from tests.history.conftest import own_redis_server  # noqa: F401  (a Redis this test may stop)
from tests.history.support import RedisServer, free_port
from tests.serve.conftest import StartProxy
from tests.serve.test_failures import assert_openai_error

KEY = "sk-health-tenant-91b2"
TOKEN = "metrics-token-7d2e19"


@pytest.mark.redis
def test_redis_stopped_makes_the_proxy_unready_but_still_alive(
    start_proxy: StartProxy, request: pytest.FixtureRequest
) -> None:
    started: tuple[RedisServer, subprocess.Popen[bytes]] = request.getfixturevalue("own_redis_server")
    server, process = started
    with start_proxy("--store", server.url) as proxy:
        assert proxy.get("/readyz") == (200, {"status": "ready", "down": [], "checks": {"store": "ok"}})
        process.terminate()
        process.wait(timeout=10)
        status, body = proxy.get("/readyz")
        assert status == 503
        assert body["status"] == "unavailable"
        assert body["down"] == ["store"]
        assert "unreachable" in body["checks"]["store"]
        assert proxy.get("/healthz") == (200, {"status": "ok"})


def test_a_sqlite_file_removed_with_its_directory_makes_the_proxy_unready(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    with start_proxy("--store", f"sqlite:{directory / 'sessions.db'}") as proxy:
        assert proxy.get("/readyz")[0] == 200  # before the file exists: the first session makes it
        proxy.create_session("kept", KEY)
        assert proxy.get("/readyz")[0] == 200
        shutil.rmtree(directory)
        status, body = proxy.get("/readyz")
        assert status == 503
        assert body["down"] == ["store"]
        assert "sessions.db is missing" in body["checks"]["store"]
        assert proxy.get("/healthz") == (200, {"status": "ok"})


def test_readiness_asks_the_upstream_only_when_told_to(start_proxy: StartProxy) -> None:
    with start_proxy("--ready-checks-upstream") as proxy:
        assert proxy.get("/readyz") == (
            200,
            {"status": "ready", "down": [], "checks": {"store": "ok", "upstream": "ok"}},
        )
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    with start_proxy(upstream=nowhere) as proxy:
        assert proxy.get("/readyz")[0] == 200  # not asked: the store alone decides
    with start_proxy("--ready-checks-upstream", upstream=nowhere) as proxy:
        status, body = proxy.get("/readyz")
        assert status == 503
        assert body["down"] == ["upstream"]
        assert body["checks"]["store"] == "ok"
        assert "did not answer" in body["checks"]["upstream"]
        assert proxy.get("/healthz") == (200, {"status": "ok"})


def test_metrics_ask_for_the_token_set_in_the_environment(start_proxy: StartProxy) -> None:
    with start_proxy(env={"CONTEXTLEDGER_METRICS_TOKEN": TOKEN}) as proxy:
        for key in (None, "wrong-token", TOKEN + "x"):
            status, body = proxy.get("/metrics", key)
            assert status == 401
            assert assert_openai_error(body, "invalid_metrics_token")["type"] == "authentication_error"
        status, text = proxy.get("/metrics", TOKEN)
        assert status == 200
        assert "contextledger_requests_total" in text
        assert proxy.get("/healthz") == (200, {"status": "ok"})  # the probes need no token
        assert proxy.get("/readyz")[0] == 200
        assert TOKEN not in proxy.log.read_text()
    with start_proxy() as proxy:
        assert proxy.get("/metrics")[0] == 200  # no token set: open, as before
