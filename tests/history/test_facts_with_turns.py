"""A turn's facts are written in the turn's own atomic step: a crash leaves both or neither.

The crash tests run ``facts_crash.py`` once per step of the store's driver during the write
(every SQLite statement, every Postgres statement queued or sent, every command sent to Redis
or to a Redis Cluster), killing the process as the step is about to run and as soon as it
returned, and then read the store from here: the turn is stored exactly when its facts are.
The other tests are the ways the write can go that are not a crash: a turn already stored (no
fact admitted twice), a stale ticket (the turn stored, nothing admitted, the refusal in the
trail), facts that moved between the plan and the script (planned again), a facts key that
holds something else (neither written), and a history that cannot hold the facts (written
right after, as before).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from contextledger.exceptions import HistoryError, StaleTicketError
from contextledger.facts import Admission, FactsHost, FactStore, SQLiteFactStore
from contextledger.history import InMemoryHistoryProvider, Turn, write_turn
from contextledger.history._turns import TurnTarget
from contextledger.messages import Message
from tests.history.facts_crash import CRASHED, USER_TEXT, off_loop, stores
from tests.history.support import RedisServer
from tests.postgres_server import PostgresServer
from tests.redis_cluster import RedisCluster

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    """(backend, target, namespace): an empty store in which the history and the facts live."""
    namespace = f"crash_{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "store.sqlite3"), namespace
    if request.param == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        return "postgres", postgres.url, namespace
    if request.param == "redis-cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return "redis", cluster.url, namespace
    server: RedisServer = request.getfixturevalue("redis_server")
    return "redis", server.url, namespace


async def written(backend: str, target: str, namespace: str, session: str) -> tuple[bool, bool]:
    """(the turn is stored, its facts are admitted), read by stores opened afresh."""
    history, store = stores(backend, target, namespace, session)
    try:
        turn = await history.load_turn(session, "turn-1")
        facts = await asyncio.to_thread(store.facts)
        trail = await asyncio.to_thread(store.review)
    finally:
        await history.close()
        store.close()  # type: ignore[attr-defined]
    admitted = {fact.key: fact.value for fact in facts} == {"module": "Billing", "database": "Postgres 16"}
    recorded = [event.kind for event in trail if event.kind == "admitted"]
    assert admitted == bool(recorded), f"facts {facts} but a trail of {trail}"
    if turn is not None:
        assert [message.text for message in turn.inputs] == [USER_TEXT]
    return turn is not None, admitted


def crash(backend: str, target: str, namespace: str, session: str, step: int, when: str) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "tests.history.facts_crash", backend, target, namespace, session, str(step), when],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, CRASHED), done.stderr
    return done.returncode


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_any_step_of_the_write_leaves_the_turn_and_its_facts_both_or_neither(
    durable: tuple[str, str, str], when: str
) -> None:
    backend, target, namespace = durable
    outcomes: list[tuple[bool, bool]] = []
    for step in range(1, 60):
        session = f"s{step}-{uuid.uuid4().hex[:6]}"
        code = crash(backend, target, namespace, session, step, when)
        stored, admitted = asyncio.run(written(backend, target, namespace, session))
        assert stored == admitted, f"a crash {when} step {step}: turn stored {stored}, facts admitted {admitted}"
        if code == 0:
            assert stored, "the write that ran to its end stored nothing"
            break
        outcomes.append((stored, admitted))
    else:
        pytest.fail("the write never ended within 59 steps")
    # The crashes did cut the write: some left nothing, and (after the step that commits) some left both.
    assert (False, False) in outcomes
    if when == "after":
        assert (True, True) in outcomes
    assert len(outcomes) >= 2


def run_turn(
    history: object, store: object, turn_id: str = "turn-1", text: str = USER_TEXT
) -> tuple[bool, FactsHost, object]:
    async def go() -> tuple[bool, FactsHost, object]:
        host = FactsHost(store, call=off_loop)  # type: ignore[arg-type]
        write = await host.prepare(host.begin(text))
        turn = Turn("session", turn_id, (Message.user(text),), (Message.assistant("Noted."),))
        outcome = await write_turn(turn, [TurnTarget(history)], facts=write)  # type: ignore[arg-type]
        return outcome.stored, host, host.settled(write)

    return asyncio.run(go())


def test_a_retried_turn_admits_nothing_and_writes_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "store.sqlite3")
    history, store = stores("sqlite", path, "", "session")
    stored, _, settled = run_turn(history, store)
    assert stored
    assert isinstance(settled.admission, Admission)  # type: ignore[attr-defined]
    trail = len(store.review())
    # The same turn id again, declaring something else: the stored turn stands, nothing is admitted.
    again, _, retried = run_turn(history, store, text="module=Payroll")
    assert not again
    assert retried is None
    assert store.get("module").value == "Billing"  # type: ignore[union-attr]
    assert len(store.review()) == trail


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forget_between_the_ticket_and_the_write_stores_the_turn_and_admits_nothing(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    kind, target, namespace = durable_for(backend, request, tmp_path)
    history, store = stores(kind, target, namespace, "session")

    async def go() -> object:
        host = FactsHost(store, call=off_loop)
        write = await host.prepare(host.begin(USER_TEXT))
        await asyncio.to_thread(store.forget)  # the ticket is stale now
        turn = Turn("session", "turn-1", (Message.user(USER_TEXT),), (Message.assistant("Noted."),))
        outcome = await write_turn(turn, [TurnTarget(history)], facts=write)
        assert outcome.stored
        stored = await history.load_turn("session", "turn-1")
        await history.close()
        assert stored is not None
        return host.settled(write)

    settled = asyncio.run(go())
    assert isinstance(settled.rejection, StaleTicketError)  # type: ignore[attr-defined]
    assert store.facts() == []
    assert "the turn is stale" in settled.describe()  # type: ignore[attr-defined]
    assert [event.kind for event in store.review()][-1] == "rejected"
    store.close()  # type: ignore[attr-defined]


def durable_for(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    namespace = f"facts_{uuid.uuid4().hex[:8]}"
    if backend == "sqlite":
        return "sqlite", str(tmp_path / "store.sqlite3"), namespace
    if backend == "postgres":
        return "postgres", request.getfixturevalue("postgres_server").url, namespace
    if backend == "redis-cluster":
        return "redis", request.getfixturevalue("redis_cluster").url, namespace
    return "redis", request.getfixturevalue("redis_server").url, namespace


@pytest.mark.redis
def test_facts_that_move_between_the_plan_and_the_script_are_planned_again(redis_server: RedisServer) -> None:
    namespace = f"facts_{uuid.uuid4().hex[:8]}"
    history, store = stores("redis", redis_server.url, namespace, "session")
    other = stores("redis", redis_server.url, namespace, "session")[1]
    plan = store.plan  # type: ignore[attr-defined]
    plans = []

    def moved_once(step: object) -> object:
        planned = plan(step)
        plans.append(planned)
        if len(plans) == 1:
            other.expire()  # nothing to expire: no change, the plan still holds ...
            other.reject(ticket, StaleTicketError("a refusal recorded meanwhile"))  # ... this moves the trail
        return planned

    store.plan = moved_once  # type: ignore[attr-defined]
    host = FactsHost(store, call=off_loop)
    begun = host.begin(USER_TEXT)
    assert begun is not None
    assert begun.ticket is not None
    ticket = begun.ticket

    async def go() -> object:
        write = await host.prepare(begun)
        turn = Turn("session", "turn-1", (Message.user(USER_TEXT),), (Message.assistant("Noted."),))
        outcome = await write_turn(turn, [TurnTarget(history)], facts=write)
        await history.close()
        assert outcome.stored
        return host.settled(write)

    settled = asyncio.run(go())
    assert len(plans) == 2
    assert isinstance(settled.admission, Admission)  # type: ignore[attr-defined]
    kinds = [event.kind for event in store.review()]
    assert kinds.count("admitted") == 2  # two facts, admitted once each
    assert {fact.key for fact in store.facts()} == {"module", "database"}


@pytest.mark.redis
def test_a_facts_key_holding_something_else_fails_the_turn_with_nothing_written(redis_server: RedisServer) -> None:
    namespace = f"facts_{uuid.uuid4().hex[:8]}"
    history, store = stores("redis", redis_server.url, namespace, "session")
    host = FactsHost(store, call=off_loop)
    begun = host.begin(USER_TEXT)
    client = store._client  # type: ignore[attr-defined]
    client.set(store.valued_keys, "not a set")  # type: ignore[attr-defined]

    async def go() -> None:
        write = await host.prepare(begun)
        turn = Turn("session", "turn-1", (Message.user(USER_TEXT),), (Message.assistant("Noted."),))
        with pytest.raises(HistoryError):
            await write_turn(turn, [TurnTarget(history)], facts=write)
        assert await history.load_turn("session", "turn-1") is None
        assert await history.load("session") == []
        await history.close()

    asyncio.run(go())
    assert store.facts() == []


def test_a_fact_table_holding_rows_that_are_not_facts_fails_the_turn_with_nothing_written(tmp_path: Path) -> None:
    path = str(tmp_path / "store.sqlite3")
    history, store = stores("sqlite", path, "", "session")
    host = FactsHost(store)
    begun = host.begin(USER_TEXT)
    import sqlite3  # noqa: PLC0415

    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO contextledger_facts (owner, key, body) VALUES ('session', 'module', 'garbage')")

    async def go() -> None:
        write = await host.prepare(begun)
        turn = Turn("session", "turn-1", (Message.user(USER_TEXT),), (Message.assistant("Noted."),))
        with pytest.raises(HistoryError, match="facts could not be written"):
            await write_turn(turn, [TurnTarget(history)], facts=write)
        assert await history.load_turn("session", "turn-1") is None
        await history.close()

    asyncio.run(go())


def test_in_memory_the_facts_go_with_the_turn_and_elsewhere_right_after_it(tmp_path: Path) -> None:
    store = FactStore(owner="session")
    stored, _, settled = run_turn(InMemoryHistoryProvider(), store)
    assert stored
    assert isinstance(settled.admission, Admission)  # type: ignore[attr-defined]
    # A history that cannot hold these facts (a file of its own, not theirs): written after the turn.
    other = SQLiteFactStore(str(tmp_path / "facts.sqlite3"), owner="session")
    history = stores("sqlite", str(tmp_path / "history.sqlite3"), "", "session")[0]

    async def go() -> object:
        host = FactsHost(other)
        write = await host.prepare(host.begin(USER_TEXT))
        assert write is not None
        assert not history.beside(write, "session")  # type: ignore[attr-defined]
        assert write.lives_in("sqlite", str(tmp_path / "facts.sqlite3"))
        turn = Turn("session", "turn-1", (Message.user(USER_TEXT),), (Message.assistant("Noted."),))
        outcome = await write_turn(turn, [TurnTarget(history)], facts=write)
        await history.close()
        assert outcome.stored
        return host.settled(write)

    settled = asyncio.run(go())
    assert isinstance(settled.admission, Admission)  # type: ignore[attr-defined]
    assert other.get("module").value == "Billing"  # type: ignore[union-attr]
