"""What only the Redis store has to promise: keys of its own per owner, tickets that survive a deleted hash,
and clear errors for a missing, wrong or unreachable server."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from contextledger.exceptions import ConfigurationError, FactsError, MissingExtraError, StaleTicketError
from contextledger.facts import FactStore, RedisFactStore, parse_assertions
from tests.facts.support import snapshot
from tests.history.support import RedisServer, free_port
from tests.optional_imports import try_import
from tests.redis_relay import ReplyLosingRelay

with try_import("redis") as redis_extra:
    import redis
    import redis.asyncio

pytestmark = [redis_extra.skip, pytest.mark.redis]


@pytest.fixture
def owner() -> str:
    return f"owner-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_server.url)
    yield connection
    connection.close()


def declare(store: RedisFactStore, text: str) -> None:
    store.apply(store.begin_turn(text), parse_assertions(text))


def test_owners_are_kept_apart(redis_server: RedisServer, owner: str) -> None:
    with (
        RedisFactStore(redis_server.url, owner=owner) as ada,
        RedisFactStore(redis_server.url, owner=owner + "-other") as bob,
    ):
        declare(ada, "module=Billing")
        declare(bob, "module=Reporting; database=Oracle")
        assert [f.value for f in ada.facts()] == ["Billing"]
        bob.forget()
        assert [f.value for f in ada.facts()] == ["Billing"]
        assert bob.facts() == []


def test_the_hash_is_named_by_namespace_and_owner(redis_server: RedisServer, owner: str, client: redis.Redis) -> None:
    with RedisFactStore(redis_server.url, owner=owner, namespace="tenant-7") as store:
        declare(store, "module=Billing")
        assert store.key == f"tenant-7:facts:{owner}"
        fields = {name.decode() if isinstance(name, bytes) else name for name in client.hkeys(store.key)}
        assert fields == {"epoch", "turn", "fact:module"}


def test_facts_outlive_the_store_object_but_not_a_forget(redis_server: RedisServer, owner: str) -> None:
    with RedisFactStore(redis_server.url, owner=owner) as first:
        declare(first, "module=Billing; database=SQL Server 2022")
        facts = first.facts()
    with RedisFactStore(redis_server.url, owner=owner) as second:
        assert second.facts() == facts
        second.forget("database")
    with RedisFactStore(redis_server.url, owner=owner) as third:
        assert [f.key for f in third.facts()] == ["module"]


def test_without_a_ttl_nothing_expires(redis_server: RedisServer, owner: str, client: redis.Redis) -> None:
    with RedisFactStore(redis_server.url, owner=owner) as store:
        declare(store, "module=Billing")
        assert client.pttl(store.key) == -1


def test_a_ticket_cannot_outlive_a_deleted_store_even_with_the_same_turn_number(
    redis_server: RedisServer, owner: str, client: redis.Redis
) -> None:
    with RedisFactStore(redis_server.url, owner=owner) as store:
        before = store.begin_turn("module=Billing")
        client.delete(store.key)  # revoked by an operator, say
        after = store.begin_turn("module=Billing")
        assert after.number == before.number == 1
        assert after.epoch != before.epoch
        with pytest.raises(StaleTicketError):
            store.apply(before, parse_assertions(before.user_text))


def test_a_client_passed_in_is_used_and_left_open(client: redis.Redis, owner: str) -> None:
    store = RedisFactStore(client, owner=owner)
    declare(store, "module=Billing")
    store.close()
    assert client.ping()
    assert client.exists(store.key)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"owner": ""}, "owner must be printable text"),
        ({"owner": None}, "owner must be printable text"),
        ({"owner": "ada\nbob"}, "owner must be printable text"),
        ({"owner": "x" * 257}, "1 to 256 characters"),
        ({"owner": "ada", "namespace": ""}, "namespace must be printable text"),
        ({"owner": "ada", "ttl_seconds": 0}, "ttl_seconds"),
        ({"owner": "ada", "ttl_seconds": -5}, "ttl_seconds"),
        ({"owner": "ada", "ttl_seconds": True}, "ttl_seconds"),
        ({"owner": "ada", "ttl_seconds": "60"}, "ttl_seconds"),
    ],
)
def test_bad_configuration_is_refused(redis_server: RedisServer, arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RedisFactStore(redis_server.url, **arguments)  # type: ignore[arg-type]


def test_an_async_client_or_a_bad_url_is_refused(redis_server: RedisServer) -> None:
    with pytest.raises(ConfigurationError, match="synchronous"):
        RedisFactStore(redis.asyncio.Redis.from_url(redis_server.url), owner="ada")
    with pytest.raises(ConfigurationError, match="not a Redis URL"):
        RedisFactStore("http://127.0.0.1/", owner="ada")


def test_a_missing_redis_package_is_a_missing_extra_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'contextledger\[redis\]'"):
        RedisFactStore("redis://127.0.0.1:6379/0", owner="ada")
    assert FactStore().facts() == []  # the core does not need it


def test_an_unreachable_server_is_a_facts_error_naming_it() -> None:
    port = free_port()
    store = RedisFactStore(f"redis://127.0.0.1:{port}/0", owner="ada", socket_connect_timeout=1)
    for action in (store.facts, lambda: store.begin_turn("module=Billing"), store.forget):
        with pytest.raises(FactsError, match=f"127.0.0.1:{port}/0 is unreachable"):
            action()


def test_a_write_whose_reply_was_lost_is_reported_not_run_again(redis_server: RedisServer, owner: str) -> None:
    # redis-py answers a connection lost under WATCH with a WatchError, as it does a conflict;
    # taking it for one would run the transaction again on top of the one that did run.
    with ReplyLosingRelay(redis_server.port) as relay, RedisFactStore(relay.url, owner=owner) as store:
        declare(store, "module=Billing")
        relay.lose_reply_to("EXEC")
        with pytest.raises(FactsError, match=r"did not confirm it .* read the facts to see which"):
            store.begin_turn("database=Oracle")
        ticket = store.begin_turn("database=Oracle")
        relay.lose_reply_to("EXEC")
        with pytest.raises(FactsError, match=r"did not confirm it"):
            store.apply(ticket, parse_assertions("database=Oracle"))
    with RedisFactStore(redis_server.url, owner=owner) as direct:
        assert direct.turn == 3  # the turn whose reply was lost ran once
        assert [event.kind for event in direct.review()] == ["admitted", "admitted"]  # the lost admission once


def test_a_key_used_by_another_program_is_reported(client: redis.Redis, redis_server: RedisServer, owner: str) -> None:
    store = RedisFactStore(redis_server.url, owner=owner)
    client.set(store.key, "not a hash")
    for action in (store.facts, lambda: store.begin_turn("module=Billing"), lambda: store.forget("module")):
        with pytest.raises(FactsError, match="another program uses this key"):
            action()
    assert client.get(store.key) == b"not a hash"


def test_a_damaged_fact_is_reported_and_nothing_is_written(
    client: redis.Redis, redis_server: RedisServer, owner: str
) -> None:
    with RedisFactStore(redis_server.url, owner=owner) as store:
        declare(store, "module=Billing")
        client.hset(store.key, "fact:database", "{not json")
        with pytest.raises(FactsError, match="not a fact store"):
            store.facts()
        with pytest.raises(FactsError, match="not a fact store"):
            store.begin_turn("version=2")
        assert client.hget(store.key, "fact:version") is None


def test_refusals_leave_the_hash_byte_for_byte(client: redis.Redis, redis_server: RedisServer, owner: str) -> None:
    with RedisFactStore(redis_server.url, owner=owner, ttl_seconds=60) as store:
        declare(store, "module=Billing; database=Oracle")
        stale = store.begin_turn("module=Reporting")
        ticket = store.begin_turn("module=Reporting")
        raw = client.hgetall(store.key)
        state = snapshot(store)
        with pytest.raises(StaleTicketError):
            store.apply(stale, parse_assertions(stale.user_text))
        with pytest.raises(FactsError):
            store.apply(ticket, [])
        with pytest.raises(FactsError):
            store.forget("team")
        assert client.hgetall(store.key) == raw
        assert snapshot(store) == state


class Interrupted(RedisFactStore):
    """Runs ``interruption`` (once) right after ``apply`` has read the hash under WATCH, the
    moment another process's write would do the most harm."""

    interruption: Callable[[], object] | None = None
    reads = 0

    def _decode(self, raw: Mapping[Any, Any]) -> Any:
        self.reads += 1
        state = super()._decode(raw)
        if self.interruption is not None:
            interruption, self.interruption = self.interruption, None
            interruption()
        return state


def test_a_forget_between_the_ticket_check_and_the_write_wins(redis_server: RedisServer, owner: str) -> None:
    with Interrupted(redis_server.url, owner=owner) as store, RedisFactStore(redis_server.url, owner=owner) as other:
        declare(store, "module=Reporting")
        ticket = store.begin_turn("module=Billing; database=Oracle")
        store.interruption = other.forget
        with pytest.raises(StaleTicketError, match="a forget happened since"):
            store.apply(ticket, parse_assertions(ticket.user_text))
        assert store.facts() == []


def test_an_unrelated_write_during_apply_is_retried_not_lost(
    redis_server: RedisServer, owner: str, client: redis.Redis
) -> None:
    with Interrupted(redis_server.url, owner=owner) as store:
        ticket = store.begin_turn("module=Billing")
        turn = client.hget(store.key, "turn")
        store.interruption = lambda: client.hset(store.key, "turn", turn)  # same value, still a write
        reads = store.reads
        (fact,) = store.apply(ticket, parse_assertions(ticket.user_text)).admitted
        assert store.reads == reads + 2, "the first transaction was dropped and the apply tried again"
        assert store.facts() == [fact]
