"""Thousands of near-valid bodies through a real proxy, on SQLite and on Redis, in every mode.

Whatever a client sends, the proxy answers in the protocol: never a 500, never a traceback (in
the answer or in its log), never a keep-alive connection it breaks without saying so, and never a
body upstream that a strict upstream would refuse (not strict JSON, no model, a conversation
``validate()`` rejects, the library's private key).  The bodies are seeded
(``tests/serve/near_valid.py``), so a failure names one that can be sent again.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.serve.conftest import FakeUpstream, StartProxy
from tests.serve.near_valid import FUZZ_KEY, Client, near_valid_bodies, strict_refusal
from tests.sizes import sized

KEY = FUZZ_KEY
BODIES = sized(full=2_000, small=300)
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(2)")


@pytest.mark.parametrize(
    "store",
    [
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_near_valid_bodies_never_get_a_500_a_traceback_or_a_broken_connection(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, request: pytest.FixtureRequest, tmp_path: Path, store: str
) -> None:
    def where(name: str) -> tuple[str, ...]:
        if store == "redis":
            return ("--store", f"redis://127.0.0.1:{request.getfixturevalue('redis_server').port}/11")
        if store == "redis-cluster":
            return ("--store", request.getfixturevalue("redis_cluster").url)
        if store == "postgres":
            return ("--store", request.getfixturevalue("postgres_server").fresh_database())
        return ("--store", f"sqlite:{tmp_path / name}")

    fake_upstream.clear()
    statuses: Counter[tuple[str, int]] = Counter()
    leaks: list[str] = []
    with (
        start_proxy(*WINDOW, *where("window.db")) as compacting,
        start_proxy("--strategy", "none", *where("plain.db")) as plain,
    ):
        compacting.create_session(f"fuzzed-{store}", KEY)
        clients = {
            "stateless": Client(plain.root, {}),
            "stateless with a strategy": Client(compacting.root, {}),
            "session": Client(compacting.root, {"X-Contextledger-Session": f"fuzzed-{store}"}),
        }
        modes = list(clients)
        for number, body in enumerate(near_valid_bodies(BODIES, seed=1000 + len(store))):
            mode = modes[number % len(modes)]
            status, raw = clients[mode].post(body)
            statuses[(mode, status)] += 1
            text = raw.decode("utf-8", "replace")
            if status >= 500 or "Traceback" in text:
                leaks.append(f"body {number} ({mode}): {status} {text[:200]}")
            elif status >= 400:
                error: Any = json.loads(raw)
                assert set(error) == {"error"}, (number, text[:200])
        logs = compacting.log.read_text(errors="replace") + plain.log.read_text(errors="replace")
    received = [item for item in fake_upstream.received() if item["path"] == "/v1/chat/completions"]
    refused = [why for item in received if (why := strict_refusal(item)) is not None]
    summary = dict(sorted(statuses.items()))
    print(f"{store}: {summary}; {len(received)} forwarded, {len(refused)} a strict upstream would refuse")
    assert not leaks, (summary, leaks[:5])
    assert "Traceback" not in logs, logs[logs.index("Traceback") - 200 :][:2000]
    assert sum(client.broken for client in clients.values()) == 0, summary
    assert not refused, (len(refused), refused[:5])
    assert sum(statuses.values()) == BODIES
    for mode in modes:  # the valid tenth (and the mutations a model takes) pass, in every mode
        assert statuses[(mode, 200)] > BODIES // 60, summary
