"""Near-valid Messages API bodies through a real proxy, on SQLite and on Redis, stateless and in a
session: never a 500, every refusal in Anthropic's error shape, and nothing forwarded that breaks
the Messages API's structural rules (``anthropic_problems``: a ``tool_result`` paired with
anything but the ``tool_use`` right before it, an assistant first, an empty text block...), or
that is not strict JSON.
The bodies are drawn from a seeded generator, so a failure names one that can be sent again."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from tests.history.support import RedisServer
from tests.serve.conftest import FakeUpstream, StartProxy
from tests.sizes import sized

from contextledger.messages import anthropic_problems

KEY = "sk-ant-fuzz-tenant-3"
BODIES = sized(full=400, small=100)
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(2)")


def valid_body(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"turn {turn}: use the tool"})
        thinking = {"type": "thinking", "thinking": f"thought {turn}", "signature": f"sig-{turn}"}
        call = {"type": "tool_use", "id": f"toolu_{turn}", "name": "lookup", "input": {"n": turn}}
        messages.append({"role": "assistant", "content": [thinking, call]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": [{"type": "text", "text": "ok"}]}
        messages.append({"role": "user", "content": [result, {"type": "text", "text": "and?"}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"done {turn}"}]})
    messages.append({"role": "user", "content": "last"})
    return {"model": "fake", "max_tokens": 64, "system": [{"type": "text", "text": "sys"}], "messages": messages}


ODD_VALUES: list[Any] = [None, 0, -1, 1.5, True, "", "x", [], {}, [1], {"type": 3}, "\u2028", "\ud800"[:0]]


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    places = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            places += _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            places += _places(item, (*path, index))
    return places


def mutated(rng: random.Random) -> bytes:
    body: Any = valid_body(rng.randint(1, 4))
    for _ in range(rng.randint(1, 3)):
        places = [p for p in _places(body) if p]
        path = rng.choice(places)
        parent = body
        for step in path[:-1]:
            parent = parent[step]
        action = rng.random()
        if action < 0.4:
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
        elif action < 0.7:
            del parent[path[-1]]
        elif isinstance(parent, list):
            parent.insert(rng.randrange(len(parent) + 1), copy.deepcopy(parent[rng.randrange(len(parent))]))
        else:
            parent[rng.choice(["type", "role", "content", "id", "tool_use_id", "cache_control"])] = rng.choice(
                ODD_VALUES
            )
    raw = json.dumps(body).encode()
    if rng.random() < 0.05:
        raw = raw[: rng.randrange(len(raw))]
    return raw


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_near_valid_messages_bodies_never_fail_the_proxy(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, redis_server: RedisServer, store: str
) -> None:
    args = ("--store", redis_server.url) if store == "redis" else ()
    rng = random.Random(f"messages-{store}")
    root = fake_upstream.base_url.removesuffix("/v1")
    with start_proxy("--anthropic-upstream", root, *WINDOW, *args) as proxy:
        fake_upstream.clear()
        statuses: dict[int, int] = {}
        for number in range(BODIES):
            raw = mutated(rng)
            headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
            if number % 2:
                session = f"fuzz-{number}"
                proxy.create_session(session, KEY)
                headers["X-Contextledger-Session"] = session
            status, answer = proxy.call("POST", "/v1/messages", raw, headers=headers)
            statuses[status] = statuses.get(status, 0) + 1
            assert status != 500, (number, raw[:400], answer)
            if status >= 400:
                assert isinstance(answer, dict), (number, answer)
                assert answer["type"] == "error", (number, answer)
                assert isinstance(answer["error"]["type"], str)
                assert isinstance(answer["error"]["message"], str)
    assert "Traceback" not in proxy.log.read_text(errors="replace")
    forwarded = [r for r in fake_upstream.received() if r["path"] == "/v1/messages"]
    assert forwarded, statuses
    assert statuses.get(400, 0) > 0
    broken = [(problems, record["body"]) for record in forwarded if (problems := anthropic_problems(record["body"]))]
    print(f"{store}: {statuses}; {len(forwarded)} forwarded, {len(broken)} breaking the Messages API's rules")
    assert broken == [], (len(broken), broken[:3])
    for record in forwarded:
        assert record["strict"] is None, record
        paired = [p for p in record["problems"] if "tool_" in p]
        assert paired == [], (paired, record["body"])
