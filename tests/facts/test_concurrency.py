"""Many writers on one store: 8 asyncio tasks and 4 threads on an in-memory store, and 4 processes
on one Redis store, each checked operation by operation against a sequential model.

The check (``history_check.check``) is shown to fail on stores with the classic bugs (a ticket
check skipped, a forget that does not advance the epoch, a forget that leaves the fact, a write
that drops a fact), so a pass means something.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from contextledger.facts import Admission, FactStore, Forgotten, RedisFactStore, SQLiteFactStore
from contextledger.facts._records import Candidate, Ticket
from contextledger.facts._store import FactMemory, State
from tests.facts.fact_worker import open_store, run, run_async
from tests.facts.history_check import Operation, Recorder, Report, check
from tests.history.support import RedisServer, running
from tests.sizes import sized

REPOSITORY = Path(__file__).resolve().parents[2]
TURNS = sized(full=1000, small=250)


def run_mixed(store: FactMemory, *, tasks: int, threads: int, turns: int) -> list[Recorder]:
    """``threads`` threads and ``tasks`` asyncio tasks (in this thread's event loop) at once.

    Threads are switched every 10 microseconds instead of every 5 milliseconds, so that a
    switch can land inside any store operation that is not properly locked.
    """
    recorders: list[Recorder] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def thread_main(index: int) -> None:
        try:
            start.wait()
            recorder = run(store, f"thread{index}", turns, seed=1000 + index)
            with lock:
                recorders.append(recorder)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    async def tasks_main() -> list[Recorder]:
        start.wait()
        return list(await asyncio.gather(*(run_async(store, f"task{i}", turns, seed=i) for i in range(tasks))))

    workers = [threading.Thread(target=thread_main, args=(index,)) for index in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for worker in workers:
            worker.start()
        task_recorders = asyncio.run(tasks_main())
    finally:
        for worker in workers:
            worker.join()
        sys.setswitchinterval(interval)
    assert not errors, errors
    return recorders + task_recorders


def operations_of(recorders: Sequence[Recorder]) -> list[Operation]:
    return [operation for recorder in recorders for operation in recorder.operations]


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FactMemory]:
    """One store of each backend, shared by every worker of a test."""
    if request.param == "memory":
        yield FactStore()
    elif request.param == "sqlite":
        with SQLiteFactStore(tmp_path / "facts.sqlite3", owner="mixed") as store:
            yield store
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        with RedisFactStore(server.url, owner=f"mixed-{uuid.uuid4().hex[:12]}") as store:
            store.begin_turn("setup")  # creates the owner's hash, so the initial state is known
            yield store


def test_8_tasks_and_4_threads_1000_turns_each_lose_and_resurrect_nothing(shared_store: FactMemory) -> None:
    store = shared_store
    initial = (store.epoch, store.turn)
    recorders = run_mixed(store, tasks=8, threads=4, turns=TURNS)
    operations = operations_of(recorders)
    assert sum(op.kind == "begin" for op in operations) == 12 * TURNS
    report = check(operations, initial, store.facts())
    assert report.violations == [], report.summary()
    assert (report.facts_lost, report.facts_back_after_forget, report.stale_accepted) == (0, 0, 0)
    # The run exercised what it claims to: admissions, stale tickets and forgets, from every worker.
    assert report.admitted_batches > TURNS
    assert report.stale_rejections > TURNS
    assert report.forgets > 3 * TURNS // 10
    assert {op.worker for op in operations if op.kind == "apply" and not op.stale} == {r.worker for r in recorders}
    assert (store.epoch, store.turn) == (initial[0] + report.forgets, initial[1] + 12 * TURNS)


# The check can fail -----------------------------------------------------------------------------


class SkipsTicketCheck(FactStore):
    """Applies every extraction as if its ticket were current (the bug tickets exist to prevent)."""

    def apply(self, ticket: Ticket, candidates: Sequence[Candidate]) -> Admission:
        return super().apply(Ticket(self.epoch, self.turn, ticket.user_text), candidates)


class ForgetKeepsEpoch(FactStore):
    """Forgets without starting a new epoch, so a pre-forget extraction can still land."""

    def forget(self, key: str | None = None) -> Forgotten:
        removed = super().forget(key)
        state = self._state
        self._state = State(state.epoch - 1, state.turn, state.facts)
        return Forgotten(tuple(removed), epoch=state.epoch - 1, turn=removed.turn)


class ForgetKeepsFact(FactStore):
    """Reports a forgotten key as removed but leaves it in the store."""

    def forget(self, key: str | None = None) -> Forgotten:
        kept = dict(self._state.facts)
        removed = super().forget(key)
        if key is not None:
            self._state = State(self._state.epoch, self._state.turn, kept)
        return removed


class DropsAWrite(FactStore):
    """Admits a batch but loses the write of its last key, now and then."""

    calls = 0

    def apply(self, ticket: Ticket, candidates: Sequence[Candidate]) -> Admission:
        admission = super().apply(ticket, candidates)
        self.calls += 1
        if self.calls % 7 == 0 and admission.admitted:
            self._state.facts.pop(admission.admitted[-1].key, None)
        return admission


@pytest.mark.parametrize(
    ("broken", "counter"),
    [
        (SkipsTicketCheck, "stale_accepted"),
        (ForgetKeepsEpoch, None),
        (ForgetKeepsFact, "facts_back_after_forget"),
        (DropsAWrite, "facts_lost"),
    ],
)
def test_the_check_catches_a_broken_store(broken: type[FactStore], counter: str | None) -> None:
    store = broken()
    recorders = asyncio.run(_tasks_only(store, tasks=4, turns=150))
    report = check(operations_of(recorders), (0, 0), store.facts())
    assert report.violations, f"{broken.__name__} went unnoticed"
    if counter is not None:
        assert getattr(report, counter) > 0, report.summary()


async def _tasks_only(store: FactMemory, *, tasks: int, turns: int) -> list[Recorder]:
    return list(await asyncio.gather(*(run_async(store, f"task{i}", turns, seed=i) for i in range(tasks))))


class Unlocked(FactStore):
    """The in-memory store with its lock removed."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = contextlib.nullcontext()  # type: ignore[assignment]


def test_the_mixed_run_catches_a_store_without_its_lock() -> None:
    store = Unlocked()
    recorders = run_mixed(store, tasks=8, threads=4, turns=1000)  # enough switches to lose a fact, at any size
    report = check(operations_of(recorders), (0, 0), store.facts())
    assert report.violations, "threads switched inside unlocked operations and nothing was noticed"
    assert report.facts_lost > 0


def test_the_check_catches_a_stale_refusal_that_was_not_stale() -> None:
    store = FactStore()
    recorder = Recorder("only")
    ticket = recorder.begin(store, "hello")
    # A forged ticket is refused as stale; the recording then shows a refusal of the real ticket,
    # which nothing had made stale.
    recorder.apply(store, Ticket(ticket.epoch + 1, ticket.number, ticket.user_text), [])
    recorder.operations[-1].state = (ticket.epoch, ticket.number)
    report = check(recorder.operations, (0, 0), store.facts())
    assert report.fresh_rejected == 1


def test_the_same_workload_on_a_correct_store_passes_the_check() -> None:
    store = FactStore()
    recorders = asyncio.run(_tasks_only(store, tasks=4, turns=150))
    report = check(operations_of(recorders), (0, 0), store.facts())
    assert report.violations == [], report.summary()
    assert report.forgets > 0
    assert report.stale_rejections > 0


# Four processes on one store ---------------------------------------------------------------------


def test_4_processes_on_one_store_lose_and_resurrect_nothing(
    persistent_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = f"processes-{uuid.uuid4().hex[:12]}"
    with open_store(persistent_location, owner) as store:
        store.begin_turn("setup")  # creates the owner's state, so the initial state is known
        initial = (store.epoch, store.turn)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])))
        commands = [
            [
                sys.executable,
                "-m",
                "tests.facts.fact_worker",
                persistent_location,
                owner,
                f"process{index}",
                "--turns",
                str(TURNS),
                "--seed",
                str(index),
            ]
            for index in range(4)
        ]
        operations: list[Operation] = []
        with running(commands, timeout=600) as children:
            for child in children:
                assert child.stdout is not None
                assert child.stdout.readline() == "ready\n", child.stderr.read() if child.stderr else ""
            for child in children:
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            for child in children:
                assert child.stdout is not None
                assert child.stderr is not None
                lines = child.stdout.read().splitlines()
                errors = child.stderr.read()
                assert child.wait() == 0, errors
                operations.extend(Operation.from_json(json.loads(line)) for line in lines)
        final = store.facts()
        report: Report = check(operations, initial, final)
        assert report.violations == [], report.summary()
        assert (report.facts_lost, report.facts_back_after_forget, report.stale_accepted) == (0, 0, 0)
        assert sum(op.kind == "begin" for op in operations) == 4 * TURNS
        assert report.admitted_batches > TURNS // 10
        assert report.stale_rejections > 0
        assert report.forgets > TURNS // 10
        assert (store.epoch, store.turn) == (initial[0] + report.forgets, initial[1] + 4 * TURNS)
