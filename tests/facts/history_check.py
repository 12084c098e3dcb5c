"""Recording concurrent operations on a fact store, and checking them against a sequential model.

Workers (threads, asyncio tasks or processes) record every operation with the real time it
started and ended and what the store answered.  The store's own answers then give a total
order: every ``begin_turn`` moves the state ``(epoch, turn)`` one turn forward and every
``forget`` one epoch forward, so sorting those transitions by the state they produced must give
an unbroken chain from the initial state, and each admitted extraction sits in the state its
ticket names.  :func:`check` rebuilds that order, verifies it is consistent with real time
(nothing placed before an operation that had finished before it started), replays it through
a plain model of the store (a dict and the eviction rule, written here independently), and
compares every answer and the final facts.  A lost write, a fact back after a ``forget``, a
stale ticket accepted or a fresh one refused all show up as violations.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextledger.exceptions import StaleTicketError
from contextledger.facts import Admission, Fact, FactWriter, extract
from contextledger.facts._records import Candidate, Ticket
from contextledger.facts._store import FactMemory

__all__ = ["Operation", "Recorder", "Report", "check", "fact_tuple"]

FactTuple = tuple[str, str, str, int]
State = tuple[int, int]
MAX_FACTS = 5


def fact_tuple(fact: Fact) -> FactTuple:
    return (fact.key, fact.value, fact.evidence, fact.turn)


@dataclass
class Operation:
    """One call as a worker saw it; JSON-friendly so child processes can send it back."""

    worker: str
    kind: str  # "begin", "apply" or "forget"
    start: int
    end: int
    state: State  # begin: the ticket; apply: its ticket; forget: the state it produced
    key: str | None = None  # forget: the key, or None for all
    candidates: list[tuple[str, str, str]] = field(default_factory=list)
    stale: bool = False
    admitted: list[FactTuple] = field(default_factory=list)
    evicted: list[FactTuple] = field(default_factory=list)
    replaced: list[FactTuple] = field(default_factory=list)
    removed: list[FactTuple] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Operation:
        def facts(name: str) -> list[FactTuple]:
            return [(k, v, e, int(t)) for k, v, e, t in data[name]]

        return cls(
            worker=data["worker"],
            kind=data["kind"],
            start=int(data["start"]),
            end=int(data["end"]),
            state=(int(data["state"][0]), int(data["state"][1])),
            key=data["key"],
            candidates=[(k, v, e) for k, v, e in data["candidates"]],
            stale=bool(data["stale"]),
            admitted=facts("admitted"),
            evicted=facts("evicted"),
            replaced=facts("replaced"),
            removed=facts("removed"),
        )


class Recorder:
    """Wraps a worker's calls on a store, recording each as an :class:`Operation`."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.operations: list[Operation] = []

    def begin(self, store: FactMemory, text: str) -> Ticket:
        start = time.monotonic_ns()
        ticket = store.begin_turn(text)
        self.operations.append(
            Operation(self.worker, "begin", start, time.monotonic_ns(), (ticket.epoch, ticket.number))
        )
        return ticket

    def apply(self, store: FactMemory, ticket: Ticket, candidates: Sequence[Candidate]) -> None:
        start = time.monotonic_ns()
        try:
            admission = store.apply(ticket, candidates)
        except StaleTicketError:
            self._applied(ticket, candidates, start, None)
        else:
            self._applied(ticket, candidates, start, admission)

    async def extract(
        self, store: FactMemory, writer: FactWriter, ticket: Ticket, candidates: Sequence[Candidate]
    ) -> None:
        start = time.monotonic_ns()
        try:
            admission = await extract(store, writer, ticket)
        except StaleTicketError:
            self._applied(ticket, candidates, start, None)
        else:
            self._applied(ticket, candidates, start, admission)

    def forget(self, store: FactMemory, key: str | None) -> None:
        start = time.monotonic_ns()
        removed = store.forget(key)
        self.operations.append(
            Operation(
                self.worker,
                "forget",
                start,
                time.monotonic_ns(),
                (removed.epoch, removed.turn),
                key=key,
                removed=[fact_tuple(f) for f in removed],
            )
        )

    def _applied(
        self, ticket: Ticket, candidates: Sequence[Candidate], start: int, admission: Admission | None
    ) -> None:
        end = time.monotonic_ns()
        operation = Operation(
            self.worker,
            "apply",
            start,
            end,
            (ticket.epoch, ticket.number),
            candidates=[(c.key, c.value, c.evidence) for c in candidates],
            stale=admission is None,
        )
        if admission is not None:
            operation.admitted = [fact_tuple(f) for f in admission.admitted]
            operation.evicted = [fact_tuple(f) for f in admission.evicted]
            operation.replaced = [fact_tuple(f) for f in admission.replaced]
        self.operations.append(operation)


@dataclass
class Report:
    """What the check found; ``violations`` is empty when the history is linearisable."""

    violations: list[str] = field(default_factory=list)
    admitted_batches: int = 0
    stale_rejections: int = 0
    forgets: int = 0
    facts_lost: int = 0
    facts_back_after_forget: int = 0
    stale_accepted: int = 0
    fresh_rejected: int = 0

    def summary(self) -> str:
        shown = "\n".join(self.violations[:20])
        return (
            f"{len(self.violations)} violations (lost {self.facts_lost}, back after forget "
            f"{self.facts_back_after_forget}, stale accepted {self.stale_accepted}, fresh rejected "
            f"{self.fresh_rejected}); {self.admitted_batches} batches admitted, {self.stale_rejections} stale "
            f"rejections, {self.forgets} forgets\n{shown}"
        )


def _model_apply(
    model: dict[str, FactTuple], candidates: list[tuple[str, str, str]], turn: int
) -> tuple[set[FactTuple], set[FactTuple], set[FactTuple]]:
    admitted: set[FactTuple] = set()
    replaced: set[FactTuple] = set()
    for spelled, value, evidence in candidates:
        key = spelled.lower()
        if key in model:
            replaced.add(model[key])
        model[key] = (key, value, evidence, turn)
        admitted.add(model[key])
    batch = {key.lower() for key, _, _ in candidates}
    evicted: set[FactTuple] = set()
    while len(model) > MAX_FACTS:
        oldest = min((fact for fact in model.values() if fact[0] not in batch), key=lambda fact: (fact[3], fact[0]))
        evicted.add(model.pop(oldest[0]))
    return admitted, evicted, replaced


def check(operations: Iterable[Operation], initial: State, final_facts: Sequence[Fact]) -> Report:
    report = Report()
    operations = list(operations)
    transitions = sorted((op for op in operations if op.kind != "apply"), key=lambda op: op.state)
    applies = [op for op in operations if op.kind == "apply"]
    report.forgets = sum(op.kind == "forget" for op in operations)

    # 1. The transitions must form one unbroken chain of states from the initial one.
    position: dict[State, int] = {initial: -1}
    previous = initial
    for index, op in enumerate(transitions):
        expected = (previous[0], previous[1] + 1) if op.kind == "begin" else (previous[0] + 1, previous[1])
        if op.state != expected:
            report.violations.append(
                f"{op.kind} by {op.worker} produced state {op.state} but the chain expects {expected} after "
                f"{previous}: an update was lost or a number was issued twice"
            )
        position[op.state] = index
        previous = op.state

    # 2. Place each admitted extraction in the state its ticket names.
    placed: dict[int, Operation] = {}
    for op in applies:
        if op.state not in position:
            report.violations.append(f"apply by {op.worker} used ticket {op.state}, which no begin_turn issued")
            continue
        after = position[op.state] + 1  # the index of the transition that ends the ticket's state
        leaving = transitions[after] if after < len(transitions) else None
        if op.stale:
            report.stale_rejections += 1
            if leaving is None or leaving.start > op.end:
                report.fresh_rejected += 1
                report.violations.append(
                    f"apply by {op.worker} with ticket {op.state} was refused as stale, but nothing had left that "
                    "state before the apply returned"
                )
            continue
        report.admitted_batches += 1
        if position[op.state] in placed:
            report.violations.append(f"two extractions were admitted with the same ticket {op.state}")
        placed[position[op.state]] = op
        if leaving is not None and leaving.end < op.start:
            report.stale_accepted += 1
            report.violations.append(
                f"apply by {op.worker} with ticket {op.state} was admitted although the {leaving.kind} that ended "
                f"that state (by {leaving.worker}) had returned before the apply started"
            )

    # 3. The order must agree with real time: no operation placed earlier may have started after
    #    a later-placed one had already returned.
    sequence: list[Operation] = []
    for index in range(-1, len(transitions)):
        if index >= 0:
            sequence.append(transitions[index])
        if index in placed:
            sequence.append(placed[index])
    latest_start, latest = -1, None
    for op in sequence:
        if latest is not None and latest_start > op.end:
            report.violations.append(
                f"{op.kind} by {op.worker} at state {op.state} is ordered after {latest.kind} by {latest.worker} at "
                f"{latest.state}, which started only after it had returned"
            )
        if op.start > latest_start:
            latest_start, latest = op.start, op

    # 4. Replay the order through the model and compare every answer.
    model: dict[str, FactTuple] = {}
    forgotten: set[FactTuple] = set()
    for op in sequence:
        if op.kind == "forget":
            expected_removed = {f for f in model.values() if op.key is None or f[0] == op.key}
            for fact in expected_removed:
                del model[fact[0]]
            forgotten |= expected_removed
            if set(op.removed) != expected_removed:
                report.facts_lost += len(expected_removed - set(op.removed))
                report.facts_back_after_forget += len(set(op.removed) & (forgotten - expected_removed))
                report.violations.append(
                    f"forget({op.key!r}) at {op.state} removed {sorted(op.removed)}, the model expected "
                    f"{sorted(expected_removed)}"
                )
        elif op.kind == "apply":
            admitted, evicted, replaced = _model_apply(model, op.candidates, op.state[1])
            for name, got, want in (
                ("admitted", set(op.admitted), admitted),
                ("evicted", set(op.evicted), evicted),
                ("replaced", set(op.replaced), replaced),
            ):
                if got != want:
                    if name != "admitted":
                        report.facts_lost += len(want - got)
                        report.facts_back_after_forget += len(got & forgotten)
                    report.violations.append(
                        f"apply by {op.worker} at {op.state}: {name} {sorted(got)}, the model expected {sorted(want)}"
                    )

    # 5. The store must end holding exactly what the model holds.
    final = {fact_tuple(f) for f in final_facts}
    expected_final = set(model.values())
    if final != expected_final:
        report.facts_lost += len(expected_final - final)
        report.facts_back_after_forget += len((final - expected_final) & forgotten)
        report.violations.append(f"the store ends with {sorted(final)}, the model with {sorted(expected_final)}")
    return report
