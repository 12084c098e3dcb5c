"""Deterministic probes: what the context sent on a turn should and should not contain.

The expectations are derived from the timeline alone, by replaying the
controlled-facts contract over its declarations and host commands: a later
declaration of a key replaces it, at most five facts are kept (the one with
the oldest turn is evicted first, ties broken by the smaller key), and
``forget`` removes what it names.  They are computed independently of any
policy, so the bounded-facts policy is measured against the contract rather
than against itself.

What a turn's expectations mean, for the context sent on turn ``t``:

- *current*: each key's value as the contract holds it after the earlier turns
  and this turn's host commands, overridden by this turn's own declarations;
- *superseded*: a value an earlier turn replaced with a different one;
- *prohibition*: the current ``constraint`` value, if any;
- *forgotten*: a value removed by ``forget`` (and not declared again since);
- *evicted*: a value dropped by the five-fact bound though never retracted.

A value replaced by the current message itself is probed from the next turn
on: the correction and the old value travel together in that one request
under every policy.  Presence is an exact, case-sensitive substring match on
the text the model receives (JSON-escaped forms count as present).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from contextledger.exceptions import TimelineError
from contextledger.facts import MAX_FACTS
from contextledger.lab._timeline import Timeline, Turn
from contextledger.messages import Message

__all__ = [
    "Expectation",
    "ProbeOutcome",
    "check_context",
    "check_probeable",
    "context_text",
    "expectations",
    "final_state",
    "is_present",
]

Status = Literal["superseded", "forgotten", "evicted"]
Pair = tuple[str, str]
PROHIBITION_KEY = "constraint"


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the context sent on one turn is probed for; pairs are (key, value), in key order."""

    turn: int
    current: tuple[Pair, ...]
    superseded: tuple[Pair, ...]
    forgotten: tuple[Pair, ...]
    evicted: tuple[Pair, ...]

    @property
    def prohibition(self) -> str | None:
        for key, value in self.current:
            if key == PROHIBITION_KEY:
                return value
        return None


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """The probes of one turn's context: which expected pairs were found in it."""

    current_present: tuple[Pair, ...]
    current_missing: tuple[Pair, ...]
    superseded_present: tuple[Pair, ...]
    forgotten_present: tuple[Pair, ...]
    evicted_present: tuple[Pair, ...]
    prohibition_present: bool | None  # None: no prohibition is in force on this turn

    def to_json(self, expectation: Expectation) -> dict[str, object]:
        def pairs(items: Iterable[Pair]) -> list[list[str]]:
            return [[key, value] for key, value in items]

        return {
            "current": {
                "expected": len(expectation.current),
                "present": pairs(self.current_present),
                "missing": pairs(self.current_missing),
            },
            "superseded": {"expected": len(expectation.superseded), "present": pairs(self.superseded_present)},
            "prohibition": None if self.prohibition_present is None else self.prohibition_present,
            "forgotten": {"expected": len(expectation.forgotten), "present": pairs(self.forgotten_present)},
            "evicted": {"expected": len(expectation.evicted), "present": pairs(self.evicted_present)},
        }


class _Contract:
    """The facts contract replayed on plain values: current facts with their turn, and every old value's status."""

    def __init__(self) -> None:
        self.facts: dict[str, tuple[str, int]] = {}
        self.old: dict[Pair, Status] = {}

    def forget(self, key: str | None) -> None:
        for pair in [p for p in self.old if key is None or p[0] == key]:
            self.old[pair] = "forgotten"
        for name in [k for k in self.facts if key is None or k == key]:
            value, _ = self.facts.pop(name)
            self.old[(name, value)] = "forgotten"

    def declare(self, turn: int, declarations: Mapping[str, str]) -> None:
        for key, value in declarations.items():
            if key in self.facts and self.facts[key][0] != value:
                self.old[(key, self.facts[key][0])] = "superseded"
            for pair, status in list(self.old.items()):
                if pair[0] == key and status == "evicted":
                    self.old[pair] = "superseded"  # a newer value of the key exists now
            self.old.pop((key, value), None)
            self.facts[key] = (value, turn)
        while len(self.facts) > MAX_FACTS:
            oldest = min(self.facts, key=lambda name: (self.facts[name][1], name))
            value, _ = self.facts.pop(oldest)
            self.old[(oldest, value)] = "evicted"

    def expectation(self, turn: Turn) -> Expectation:
        current = {key: value for key, (value, _) in self.facts.items()}
        current.update(turn.declarations)
        replaced_now = {(k, v) for k, (v, _) in self.facts.items() if k in turn.declarations}

        def having(status: Status) -> tuple[Pair, ...]:
            return tuple(
                sorted(
                    pair
                    for pair, found in self.old.items()
                    if found == status and current.get(pair[0]) != pair[1] and pair not in replaced_now
                )
            )

        return Expectation(
            turn=turn.number,
            current=tuple(sorted(current.items())),
            superseded=having("superseded"),
            forgotten=having("forgotten"),
            evicted=having("evicted"),
        )


def expectations(timeline: Timeline) -> tuple[Expectation, ...]:
    """One :class:`Expectation` per turn of ``timeline``, in order."""
    contract = _Contract()
    found: list[Expectation] = []
    for turn in timeline.turns:
        for command in turn.host_commands:
            contract.forget(command.key)
        found.append(contract.expectation(turn))
        contract.declare(turn.number, turn.declarations)
    return tuple(found)


def final_state(timeline: Timeline) -> tuple[tuple[Pair, ...], tuple[Pair, ...]]:
    """The contract's current facts and superseded values once the whole timeline has been read."""
    contract = _Contract()
    for turn in timeline.turns:
        for command in turn.host_commands:
            contract.forget(command.key)
        contract.declare(turn.number, turn.declarations)
    current = tuple(sorted((key, value) for key, (value, _) in contract.facts.items()))
    superseded = tuple(sorted(pair for pair, status in contract.old.items() if status == "superseded"))
    return current, superseded


def check_probeable(timeline: Timeline) -> None:
    """Refuse a timeline whose probes could not fail or could not be told apart.

    A value the instructions already mention would always be "present"; an
    old value contained in a current one (``SQL`` and ``SQL Server``) would be
    found whenever the current one is.
    """
    declared = {value for turn in timeline.turns for value in turn.declarations.values()}
    for value in sorted(declared):
        if value in timeline.instructions:
            raise TimelineError(
                f"mentions {value!r}, a declared value the probes look for, so its probe could never fail; "
                "keep declared values out of the instructions",
                path=timeline.source,
                entry="instructions",
            )
    for expectation in expectations(timeline):
        old = expectation.superseded + expectation.forgotten + expectation.evicted
        for old_key, old_value in old:
            for key, value in expectation.current:
                if old_value in value:
                    # Name the later of the two declarations: that is where the clash was written.
                    turn = max(
                        _declared_at(timeline, key, value, expectation.turn),
                        _declared_at(timeline, old_key, old_value, expectation.turn),
                    )
                    raise TimelineError(
                        f"the current {key} value {value!r} contains the old {old_key} value {old_value!r}, so a "
                        "probe could not tell them apart; choose values that do not contain one another",
                        path=timeline.source,
                        entry=f"turns[{turn - 1}].user",
                    )


def _declared_at(timeline: Timeline, key: str, value: str, last: int) -> int:
    """The number of the latest turn up to ``last`` that declared ``key=value``."""
    for turn in reversed(timeline.turns[:last]):
        if turn.declarations.get(key) == value:
            return turn.number
    return last


def is_present(value: str, text: str) -> bool:
    """Exact presence of ``value`` in ``text``, as written or JSON-escaped."""
    if value in text:
        return True
    escaped = json.dumps(value, ensure_ascii=False)[1:-1]
    return escaped != value and escaped in text


def context_text(requests: Iterable[Iterable[Message]]) -> str:
    """Everything the model read on a turn, one payload string per line."""
    return "\n".join(text for request in requests for message in request for text in message.payload_texts())


def check_context(expectation: Expectation, text: str) -> ProbeOutcome:
    """Probe the text of a turn's requests against its expectation."""

    def present(pairs: Iterable[Pair]) -> tuple[Pair, ...]:
        return tuple(pair for pair in pairs if is_present(pair[1], text))

    current_present = present(expectation.current)
    prohibition = expectation.prohibition
    return ProbeOutcome(
        current_present=current_present,
        current_missing=tuple(pair for pair in expectation.current if pair not in current_present),
        superseded_present=present(expectation.superseded),
        forgotten_present=present(expectation.forgotten),
        evicted_present=present(expectation.evicted),
        prohibition_present=None if prohibition is None else is_present(prohibition, text),
    )
