"""Distinct (namespace, kind, id) triples never map to one storage key: not in the pure function,
not in the Redis history, not in the Redis fact store, checked against a real server."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger._keys import escape_key_part, slot_key, storage_key
from contextledger.facts import RedisFactStore, parse_assertions
from contextledger.history import RedisHistoryProvider
from contextledger.messages import Message
from tests.history.conftest import redis_server
from tests.history.support import RedisServer
from tests.sizes import examples

__all__ = ["redis_server"]

# Names as tenants write them: printable, with the separators and escape characters that matter.
names = st.text(alphabet=st.sampled_from("ab:%3A5_-history"), min_size=1, max_size=12)


@given(st.tuples(names, names, names), st.tuples(names, names, names))
def test_distinct_parts_never_share_a_key(first: tuple[str, str, str], second: tuple[str, str, str]) -> None:
    assert (storage_key(*first) == storage_key(*second)) == (first == second)


@given(names)
def test_an_escaped_part_holds_no_separator_and_reads_back(part: str) -> None:
    escaped = escape_key_part(part)
    assert ":" not in escaped
    assert escaped.replace("%3A", ":").replace("%25", "%") == part


def test_ids_without_separators_keep_their_old_key() -> None:
    assert storage_key("contextledger", "history", "session-1") == "contextledger:history:session-1"


def test_the_reported_collision_is_gone() -> None:
    pytest.importorskip("redis", reason="the redis extra")
    for url in ("redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1/0"):  # clients connect on first use
        history_a = RedisHistoryProvider(url, namespace="a")
        history_b = RedisHistoryProvider(url, namespace="a:history:b")
        assert history_a.key("b:history:c") != history_b.key("c")


@given(st.lists(st.text(alphabet="ab:%{}", max_size=4), min_size=3, max_size=3), st.text(alphabet="ab:%{}", max_size=4))
def test_slot_keys_are_one_to_one_and_tag_the_session(parts: list[str], other: str) -> None:
    key = slot_key(*parts[:2], tag=parts[2])
    assert key.count("{") == 1  # the one hash tag is the session, whatever it holds
    assert key.endswith("}")
    assert (slot_key(*parts[:2], tag=other) == key) == (other == parts[2])
    assert slot_key(parts[0], parts[1] + ":x", tag=parts[2]) != slot_key(parts[0], parts[1], tag="x:" + parts[2])


@pytest.mark.redis
@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(names, names), min_size=2, max_size=5, unique=True))
def test_redis_histories_of_distinct_namespace_and_session_stay_apart(
    redis_server: RedisServer, pairs: list[tuple[str, str]]
) -> None:
    run = uuid.uuid4().hex[:8]

    async def scenario() -> list[list[Message]]:
        histories = [RedisHistoryProvider(redis_server.url, namespace=f"{run}{ns}") for ns, _ in pairs]
        try:
            for index, (history, (_, session)) in enumerate(zip(histories, pairs)):
                await history.append(session, [Message.user(f"message {index}")])
            return [await history.load(session) for history, (_, session) in zip(histories, pairs)]
        finally:
            for history in histories:
                await history.close()

    loaded = asyncio.run(scenario())
    assert [[message.text for message in messages] for messages in loaded] == [
        [f"message {index}"] for index in range(len(pairs))
    ]


@pytest.mark.redis
@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.tuples(names, names), min_size=2, max_size=4, unique=True))
def test_redis_fact_stores_of_distinct_namespace_and_owner_stay_apart(
    redis_server: RedisServer, pairs: list[tuple[str, str]]
) -> None:
    run = uuid.uuid4().hex[:8]
    stores = [RedisFactStore(redis_server.url, owner=owner, namespace=f"{run}{ns}") for ns, owner in pairs]
    try:
        assert len({store.key for store in stores}) == len(stores)
        for index, store in enumerate(stores):
            text = f"module=M{index}"
            store.apply(store.begin_turn(text), parse_assertions(text))
        assert [[fact.value for fact in store.facts()] for store in stores] == [
            [f"M{index}"] for index in range(len(stores))
        ]
    finally:
        for store in stores:
            store.forget()
            store.close()
