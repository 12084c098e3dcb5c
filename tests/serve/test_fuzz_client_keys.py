"""Near-valid bodies and near-valid credentials together, through a real proxy that spends its own
upstream key for the clients in a keys file: chat completions, Responses and Messages, stateless
and in sessions, from known keys in every header form, unknown keys, no key, malformed
``Authorization`` headers, hashes of known keys, keys too long or outside ASCII.

Whatever arrives: never a 500 or a traceback; every request without a known key a 401 and every
one with a known key never a 401, each in its route's error shape; a 429 always with
``Retry-After``; no keep-alive connection broken without saying so; only the server's key upstream,
and no client key in the log.  Seeded, so a failure names a request that can be sent again.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from tests.serve.conftest import FakeUpstream, StartProxy
from tests.serve.near_valid import Client, near_valid_bodies, strict_refusal
from tests.serve.test_fuzz_messages import mutated
from tests.sizes import sized

SERVER_KEY = "sk-server-fuzz-key-41"
ALPHA, BETA, GAMMA = "sk-alpha-fuzz-1", "sk-beta-fuzz-2", "sk-gamma-fuzz-3"
REQUESTS = sized(full=3_000, small=400)
CLIENT_RPM = REQUESTS * 2 // 15  # 400 at the full size: the busiest client passes it, so some answers are 429s
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(2)")

# Each way of presenting (or not) a key, and whether it names a known client.
IDENTITIES: list[tuple[dict[str, str], str | None]] = [
    ({"authorization": f"Bearer {ALPHA}"}, ALPHA),
    ({"x-api-key": BETA}, BETA),
    ({"authorization": f"bearer   {GAMMA}  "}, GAMMA),
    ({"authorization": f"Bearer {ALPHA}", "x-api-key": "sk-unknown"}, ALPHA),  # the bearer token is the key
    ({}, None),
    ({"authorization": "Bearer sk-unknown"}, None),
    ({"x-api-key": "sk-unknown"}, None),
    ({"authorization": "Bearer sk-unknown", "x-api-key": ALPHA}, None),
    ({"authorization": "Basic c2stYWxwaGEtZnV6ei0x"}, None),
    ({"authorization": "Bearer"}, None),
    ({"authorization": f"Bearer {ALPHA}x"}, None),
    ({"authorization": f"Bearer {ALPHA[:-1]}"}, None),
    ({"authorization": "Bearer sha256:" + hashlib.sha256(ALPHA.encode()).hexdigest()}, None),
    ({"authorization": "Bearer sk-" + "k" * 6000}, None),
    ({"x-api-key": "sk-alph\u00e1-fuzz-1"}, None),
]
WEIGHTS = [3 if known else 1 for _, known in IDENTITIES]  # about half the requests from known clients
ROUTES = ["/v1/chat/completions", "/v1/responses", "/v1/messages"]


def _body(route: str, chat: bytes, rng: random.Random) -> bytes:
    if route == "/v1/messages":
        return mutated(rng)
    if route == "/v1/responses":  # the same near-valid conversation as Responses input items
        return chat.replace(b'"messages":', b'"input":', 1)
    return chat


def test_near_valid_bodies_and_credentials_never_get_a_500_and_only_known_keys_pass(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    keys = tmp_path / "clients.keys"
    keys.write_text(f"{ALPHA} alpha\nsha256:{hashlib.sha256(BETA.encode()).hexdigest()}\n{GAMMA}\n")
    env = {"CONTEXTLEDGER_UPSTREAM_KEY": SERVER_KEY}
    root = fake_upstream.base_url.removesuffix("/v1")
    args = (
        "--host",
        "0.0.0.0",
        "--client-keys",
        str(keys),
        "--client-rpm",
        str(CLIENT_RPM),
        "--client-concurrency",
        "2",
    )
    rng = random.Random("client-keys")
    statuses: Counter[tuple[str, int]] = Counter()
    leaks: list[str] = []
    with start_proxy(*args, "--anthropic-upstream", root, *WINDOW, env=env) as proxy:
        for key in (ALPHA, BETA, GAMMA):
            proxy.create_session("fuzzed", key)
        fake_upstream.clear()
        clients = {route: Client(proxy.root, {}, route) for route in ROUTES}
        bodies = near_valid_bodies(REQUESTS, seed=4300)
        for number, chat in enumerate(bodies):
            route = ROUTES[number % len(ROUTES)]
            identity, known = rng.choices(IDENTITIES, WEIGHTS)[0]
            headers = {"content-type": "application/json", "anthropic-version": "2023-06-01", **identity}
            if rng.random() < 0.4:
                headers["X-Contextledger-Session"] = "fuzzed"
            client = clients[route]
            client.headers = headers
            status, raw = client.post(_body(route, chat, rng))
            statuses[(route, status)] += 1
            text = raw.decode("utf-8", "replace")
            if status >= 500 or "Traceback" in text:
                leaks.append(f"request {number} ({route}, {identity}): {status} {text[:200]}")
                continue
            assert (status == 401) == (known is None), (number, route, identity, status, text[:300])
            if status >= 400:
                error: Any = json.loads(raw)
                assert set(error) == ({"type", "error"} if route == "/v1/messages" else {"error"}), text[:300]
                assert isinstance(error["error"]["message"], str)
            if status == 429:
                assert client.answer_headers.get("retry-after", "").isdigit(), (number, client.answer_headers)
        log = proxy.log.read_text(errors="replace")
    summary = dict(sorted(statuses.items()))
    received = fake_upstream.received()
    print(f"{summary}; {len(received)} forwarded")
    assert not leaks, (summary, leaks[:5])
    assert "Traceback" not in log, log[log.index("Traceback") - 200 :][:2000]
    assert sum(client.broken for client in clients.values()) == 0, summary
    for secret in (SERVER_KEY, ALPHA, BETA, GAMMA):
        assert secret not in log
    for record in received:
        if record["path"] == "/v1/messages":
            assert record["x-api-key"] == SERVER_KEY, record
            assert record["authorization"] is None, record
        else:
            assert record["authorization"] == f"Bearer {SERVER_KEY}", record
    forwarded_chat = [item for item in received if item["path"] == "/v1/chat/completions"]
    refused = [why for item in forwarded_chat if (why := strict_refusal(item)) is not None]
    assert not refused, (len(refused), refused[:5])
    for route in ROUTES:  # some of each route's bodies were valid and from a known client
        assert statuses[(route, 200)] > REQUESTS // 100, summary
        assert statuses[(route, 401)] > REQUESTS // 15, summary
    assert sum(count for (_, status), count in statuses.items() if status == 429) > 0, summary
