"""Two proxy processes on one real Redis serving the same sessions: nothing lost, turns serialised."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from tests.history.support import RedisServer
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream, Proxy, StartProxy

with try_import("openai") as openai_extra:
    import openai

pytestmark = [openai_extra.skip, pytest.mark.redis]


KEY = "sk-redis-tenant-0042"
CLIENTS = 8
TURNS = 20


def client_for(proxy: Proxy, session_id: str) -> openai.OpenAI:
    headers = {"X-Contextledger-Session": session_id}
    return openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0, default_headers=headers, timeout=60)


def ask(client: openai.OpenAI, text: str) -> str:
    reply = client.chat.completions.create(model="fake", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content or ""


@pytest.fixture
def two_proxies(start_proxy: StartProxy, redis_server: RedisServer) -> Iterator[tuple[Proxy, Proxy, str]]:
    """Two proxy processes on the same Redis, and a new session created through the first."""
    store = ("--store", f"redis://127.0.0.1:{redis_server.port}/4")
    session = f"s-{uuid.uuid4().hex[:8]}"
    with start_proxy(*store) as first, start_proxy(*store) as second:
        first.create_session(session, KEY)
        yield first, second, session


def test_a_session_continued_alternately_through_two_processes_loses_nothing(
    two_proxies: tuple[Proxy, Proxy, str], fake_upstream: FakeUpstream
) -> None:
    first, second, session = two_proxies
    proxies = [first, second]
    for number in range(10):
        text = f"module=M{number}" if number % 3 == 0 else f"question {number}"
        assert ask(client_for(proxies[number % 2], session), text) == f"echo: {text}"
        sent = fake_upstream.last_body()["messages"]
        users = [m["content"] for m in sent if m["role"] == "user"]
        assert users == [f"module=M{n}" if n % 3 == 0 else f"question {n}" for n in range(number + 1)]
    assert first.messages(session, KEY) == second.messages(session, KEY)
    assert len(first.messages(session, KEY)) == 20
    assert first.facts(session, KEY) == second.facts(session, KEY) == {"module": "M9"}
    status, _ = second.call("POST", f"/v1/contextledger/sessions/{session}/forget", {"key": "module"}, KEY)
    assert status == 200
    assert first.facts(session, KEY) == {}


def test_eight_clients_twenty_turns_each_on_one_session_are_serialised_and_stored_whole(
    two_proxies: tuple[Proxy, Proxy, str], fake_upstream: FakeUpstream
) -> None:
    first, second, session = two_proxies
    fake_upstream.clear()

    def client_run(number: int) -> list[str]:
        client = client_for((first, second)[number % 2], session)
        return [ask(client, f"client {number} turn {turn}") for turn in range(TURNS)]

    with ThreadPoolExecutor(CLIENTS) as pool:
        replies = list(pool.map(client_run, range(CLIENTS)))
    stored = first.messages(session, KEY)
    sent = [[m for m in r["body"]["messages"] if m["role"] != "system"] for r in fake_upstream.received()]
    assert replies == [[f"echo: client {c} turn {t}" for t in range(TURNS)] for c in range(CLIENTS)]
    assert len(stored) == 2 * CLIENTS * TURNS
    turns = [(stored[i], stored[i + 1]) for i in range(0, len(stored), 2)]
    for user, reply in turns:  # every turn whole: its question, then the answer to that question
        assert user["role"] == "user"
        assert reply == {"role": "assistant", "content": "echo: " + user["content"]}
    for number in range(CLIENTS):  # and each client's turns in the order it sent them
        mine = [user["content"] for user, _ in turns if user["content"].startswith(f"client {number} ")]
        assert mine == [f"client {number} turn {t}" for t in range(TURNS)]
    # Serialised: each turn was sent with every turn stored before it, so the 160 requests the
    # upstream saw are the stored history's 160 prefixes (two turns run at once would share one).
    assert sorted(len(messages) for messages in sent) == list(range(1, 2 * CLIENTS * TURNS, 2))
    for messages in sent:
        assert messages == stored[: len(messages)]


def test_a_retry_with_the_same_idempotency_key_on_the_other_process_is_stored_once(
    two_proxies: tuple[Proxy, Proxy, str], fake_upstream: FakeUpstream
) -> None:
    first, second, session = two_proxies
    headers = {"X-Contextledger-Session": session, "Idempotency-Key": "turn-0001"}
    body = {"model": "fake", "messages": [{"role": "user", "content": "version=2.4"}]}
    calls = len(fake_upstream.received())
    status, original = first.call("POST", "/v1/chat/completions", body, KEY, headers)
    assert status == 200
    status, retried = second.call("POST", "/v1/chat/completions", body, KEY, headers)
    assert status == 200
    assert len(fake_upstream.received()) == calls + 1  # the retry never reached the upstream
    assert retried["id"] == original["id"]
    assert retried["choices"][0]["message"]["content"] == original["choices"][0]["message"]["content"]
    assert len(first.messages(session, KEY)) == 2
    assert second.facts(session, KEY) == {"version": "2.4"}
