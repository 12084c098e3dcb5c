"""Client keys through a real ``contextledger serve`` listening on every address, as an operator
runs it: no key, an unknown key and a key revoked by ``SIGHUP`` are refused on every route; a known
key is served in its own tenant, with the server's upstream key (never its own) sent upstream; a
client past its limit is answered 429 while the others are served; and a server key off loopback
without client keys does not start."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from tests.serve.conftest import ROOT, FakeUpstream, Proxy, StartProxy

SERVER_KEY = "sk-server-upstream-key-31"
ALPHA, ALPHA_ROTATED, BETA, GAMMA = "sk-alpha-1", "sk-alpha-rotated-1", "sk-beta-2", "sk-gamma-3"
CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}
MESSAGES = {"model": "fake", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
SESSION = "/v1/contextledger/sessions/shared-name"

# Every API route, with a body it would serve.
ROUTES: list[tuple[str, str, Any, dict[str, str]]] = [
    ("POST", "/v1/chat/completions", CHAT, {}),
    ("POST", "/v1/chat/completions", CHAT, {"X-Contextledger-Session": "shared-name"}),
    ("POST", "/v1/responses", {"model": "fake", "input": "hello"}, {}),
    ("POST", "/v1/messages", MESSAGES, {"anthropic-version": "2023-06-01"}),
    ("POST", "/v1/messages/count_tokens", MESSAGES, {"anthropic-version": "2023-06-01"}),
    ("GET", "/v1/models", None, {}),
    ("POST", "/v1/contextledger/sessions", {"id": "another"}, {}),
    ("GET", SESSION, None, {}),
    ("GET", SESSION + "/messages", None, {}),
    ("GET", SESSION + "/facts", None, {}),
    ("POST", SESSION + "/forget", {}, {}),
    ("DELETE", SESSION, None, {}),
]


def assert_refused(proxy: Proxy, identity: dict[str, str], code: str) -> None:
    for method, path, body, headers in ROUTES:
        status, answer = proxy.call(method, path, body, headers={**headers, **identity})
        assert status == 401, (method, path, identity, answer)
        assert isinstance(answer, dict), answer
        assert set(answer) == ({"type", "error"} if path.startswith("/v1/messages") else {"error"}), answer
        assert answer["error"]["type"] == "authentication_error"
        assert answer["error"]["code"] == code


def reload_keys(proxy: Proxy, text: str, keys: Path) -> None:
    """Write the keys file and send SIGHUP; return once the proxy has read it."""
    keys.write_text(text)
    before = proxy.log.read_text().count("client keys reloaded")
    assert proxy.process is not None
    proxy.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while proxy.log.read_text().count("client keys reloaded") == before:
        assert time.monotonic() < deadline, proxy.log.read_text()[-2000:]
        time.sleep(0.05)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    path = tmp_path / "clients.keys"
    beta = hashlib.sha256(BETA.encode()).hexdigest()
    path.write_text(f"# clients of this proxy\n{ALPHA} alpha\nsha256:{beta}\n{GAMMA} gamma  # revoked below\n")
    return path


def guarded_proxy(start_proxy: StartProxy, fake_upstream: FakeUpstream, keys: Path) -> AbstractContextManager[Proxy]:
    """A proxy on every address spending the server's key, for the clients in ``keys``."""
    root = fake_upstream.base_url.removesuffix("/v1")
    env = {"CONTEXTLEDGER_UPSTREAM_KEY": SERVER_KEY, "CONTEXTLEDGER_CLIENT_KEYS": str(keys)}
    return start_proxy("--host", "0.0.0.0", "--anthropic-upstream", root, env=env)


@pytest.fixture
def guarded(start_proxy: StartProxy, fake_upstream: FakeUpstream, keys: Path) -> Iterator[Proxy]:
    with guarded_proxy(start_proxy, fake_upstream, keys) as proxy:
        yield proxy


def test_no_key_an_unknown_key_and_a_revoked_key_are_refused_on_every_route(
    guarded: Proxy, fake_upstream: FakeUpstream, keys: Path
) -> None:
    fake_upstream.clear()
    assert_refused(guarded, {}, "missing_api_key")
    assert_refused(guarded, {"Authorization": "Bearer sk-nobody"}, "invalid_api_key")
    assert_refused(guarded, {"x-api-key": "sk-nobody"}, "invalid_api_key")
    assert fake_upstream.received() == []  # nothing reached the upstream

    status, _ = guarded.call("POST", "/v1/chat/completions", CHAT, GAMMA)
    assert status == 200
    reload_keys(guarded, f"{ALPHA} alpha\n", keys)
    assert_refused(guarded, {"Authorization": f"Bearer {GAMMA}"}, "invalid_api_key")
    assert_refused(guarded, {"x-api-key": GAMMA}, "invalid_api_key")

    status, metrics = guarded.get("/metrics")
    assert status == 200
    assert f'contextledger_client_refused_total{{reason="missing_key"}} {len(ROUTES)}' in metrics
    assert f'contextledger_client_refused_total{{reason="unknown_key"}} {4 * len(ROUTES)}' in metrics
    log = guarded.log.read_text()
    for secret in (SERVER_KEY, ALPHA, BETA, GAMMA, "sk-nobody"):
        assert secret not in log
        assert secret not in metrics


def test_a_known_key_is_served_in_its_tenant_and_the_server_key_goes_upstream(
    guarded: Proxy, fake_upstream: FakeUpstream, keys: Path
) -> None:
    fake_upstream.clear()
    for key in (ALPHA, BETA):
        status, answer = guarded.call("POST", "/v1/chat/completions", CHAT, key)
        assert status == 200, answer
        status, answer = guarded.call("POST", "/v1/responses", {"model": "fake", "input": "hi"}, key)
        assert status == 200, answer
        status, answer = guarded.call(
            "POST", "/v1/messages", MESSAGES, headers={"x-api-key": key, "anthropic-version": "2023-06-01"}
        )
        assert status == 200, answer
    received = fake_upstream.received()
    assert len(received) == 6
    for record in received:
        sent = record.get("x-api-key") if record["path"] == "/v1/messages" else record["authorization"]
        assert sent in (SERVER_KEY, f"Bearer {SERVER_KEY}"), record
        assert ALPHA not in str(record)
        assert BETA not in str(record)

    # Each key in its own tenant: the same session name is two sessions.
    guarded.create_session("shared-name", ALPHA)
    guarded.create_session("shared-name", BETA)
    turn = {"X-Contextledger-Session": "shared-name"}
    status, _ = guarded.call("POST", "/v1/chat/completions", CHAT, ALPHA, turn)
    assert status == 200
    assert len(guarded.messages("shared-name", ALPHA)) == 2
    assert guarded.messages("shared-name", BETA) == []

    # A key rotated under the same name keeps the tenant's sessions; the old key is refused.
    reload_keys(guarded, keys.read_text().replace(f"{ALPHA} alpha", f"{ALPHA_ROTATED} alpha"), keys)
    assert len(guarded.messages("shared-name", ALPHA_ROTATED)) == 2
    status, _ = guarded.get(SESSION + "/messages", ALPHA)
    assert status == 401

    # A malformed file on SIGHUP keeps the keys in force, saying so in one line without a key.
    keys.write_text(f"{ALPHA} alpha\nsha256:12\n")
    assert guarded.process is not None
    guarded.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "client keys not reloaded" not in guarded.log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert len(guarded.messages("shared-name", ALPHA_ROTATED)) == 2
    status, _ = guarded.get(SESSION + "/messages", ALPHA)
    assert status == 401
    assert ALPHA not in guarded.log.read_text()


def test_an_unnamed_key_keeps_the_sessions_it_made_before_client_keys(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, keys: Path
) -> None:
    with start_proxy() as open_proxy:  # clients bring their own upstream key: any key is a tenant
        open_proxy.create_session("from-before", BETA)
    with guarded_proxy(start_proxy, fake_upstream, keys) as guarded:
        assert guarded.messages("from-before", BETA) == []  # found: 200 with its (empty) history
        status, _ = guarded.get("/v1/contextledger/sessions/from-before", ALPHA)
        assert status == 404


def test_a_client_past_its_minute_gets_429_with_retry_after_while_others_are_served(
    start_proxy: StartProxy, keys: Path
) -> None:
    env = {"CONTEXTLEDGER_UPSTREAM_KEY": SERVER_KEY}
    with start_proxy("--host", "0.0.0.0", "--client-keys", str(keys), "--client-rpm", "3", env=env) as proxy:
        for _ in range(3):
            status, _ = proxy.call("POST", "/v1/chat/completions", CHAT, ALPHA)
            assert status == 200
        request = urllib.request.Request(
            proxy.base_url + "/chat/completions",
            data=json.dumps(CHAT).encode(),
            headers={"authorization": f"Bearer {ALPHA}", "content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 429
        retry_after = refused.value.headers["retry-after"]
        body = json.loads(refused.value.read())
        assert retry_after.isdigit()
        assert 1 <= int(retry_after) <= 20
        assert body["error"]["code"] == "rate_limit_exceeded"
        for _ in range(3):  # the other clients are served meanwhile
            assert proxy.call("POST", "/v1/chat/completions", CHAT, BETA)[0] == 200
            assert proxy.call("POST", "/v1/chat/completions", CHAT, GAMMA)[0] == 200
        assert proxy.call("POST", "/v1/chat/completions", CHAT, ALPHA)[0] == 429
        status, metrics = proxy.get("/metrics")
        assert 'contextledger_client_limited_total{limit="rate"} 2' in metrics


def test_a_server_key_on_every_address_without_client_keys_does_not_start(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "contextledger.cli", "serve", "--upstream", "http://127.0.0.1:9/v1"]
    command += ["--host", "0.0.0.0", "--store", f"sqlite:{tmp_path / 's.db'}"]
    env = {**os.environ, "CONTEXTLEDGER_UPSTREAM_KEY": SERVER_KEY}
    env.pop("CONTEXTLEDGER_CLIENT_KEYS", None)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("contextledger: error: refusing to spend $CONTEXTLEDGER_UPSTREAM_KEY")
    for option in ("--client-keys FILE", "127.0.0.1", "--trust-tenant-header"):
        assert option in line
    assert SERVER_KEY not in line
