"""The controlled-facts contract replayed on plain values: what each turn's context should and should not hold.

The expectations are derived from a timeline's declarations and host commands
alone: a later declaration of a key replaces it, at most five facts are kept
(the one with the oldest turn is evicted first, ties broken by the smaller
key), ``forget`` removes what it names, and a message whose declarations are
rejected changes nothing.  They are computed independently of any policy, so
the bounded-facts policy is measured against the contract rather than against
itself, and independently of the facts package's internals.

What a turn's expectations mean, for the context sent on turn ``t``:

- *current*: each key's value as the contract holds it after the earlier turns
  and this turn's host commands, overridden by this turn's own declarations;
- *superseded*: a value an earlier turn replaced with a different one;
- *prohibition*: the current ``constraint`` value, if any;
- *forgotten*: a value removed by ``forget`` (and not declared again since);
- *evicted*: a value dropped by the five-fact bound though never retracted;
- *rejected*: a value a message tried to declare in a batch the contract
  refused (an unknown key beside it, say), never admitted since.

A value replaced (or refused) in the current message itself is probed from the
next turn on: the message and the old value travel together in that one
request under every policy.

This module knows nothing of timeline files: it reads anything shaped like a
:class:`ContractTurn`, so timelines can check their probes at load time
without an import cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from contextledger.facts import MAX_FACTS

__all__ = ["PROHIBITION_KEY", "ContractTurn", "Expectation", "Pair", "expectations", "final_state"]

Status = Literal["superseded", "forgotten", "evicted", "rejected"]
Pair = tuple[str, str]
PROHIBITION_KEY = "constraint"


class ContractTurn(Protocol):
    """What the contract reads of a turn: its number, admitted declarations, refused ones and forgets."""

    @property
    def number(self) -> int: ...

    @property
    def declarations(self) -> Mapping[str, str]: ...

    @property
    def rejected(self) -> Mapping[str, str]: ...

    @property
    def forget_keys(self) -> Sequence[str | None]: ...


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the context sent on one turn is probed for; pairs are (key, value), in key order."""

    turn: int
    current: tuple[Pair, ...]
    superseded: tuple[Pair, ...]
    forgotten: tuple[Pair, ...]
    evicted: tuple[Pair, ...]
    rejected: tuple[Pair, ...] = ()

    @property
    def prohibition(self) -> str | None:
        for key, value in self.current:
            if key == PROHIBITION_KEY:
                return value
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "turn": self.turn,
            "current": [list(p) for p in self.current],
            "superseded": [list(p) for p in self.superseded],
            "forgotten": [list(p) for p in self.forgotten],
            "evicted": [list(p) for p in self.evicted],
            "rejected": [list(p) for p in self.rejected],
        }


class _Contract:
    """Current facts with their turn, and every old value's status."""

    def __init__(self) -> None:
        self.facts: dict[str, tuple[str, int]] = {}
        self.old: dict[Pair, Status] = {}

    def forget(self, key: str | None) -> None:
        for pair in [p for p in self.old if key is None or p[0] == key]:
            self.old[pair] = "forgotten"
        for name in [k for k in self.facts if key is None or k == key]:
            value, _ = self.facts.pop(name)
            self.old[(name, value)] = "forgotten"

    def refuse(self, attempted: Mapping[str, str]) -> None:
        for key, value in attempted.items():
            held = self.facts.get(key)
            if (held is None or held[0] != value) and (key, value) not in self.old:
                self.old[(key, value)] = "rejected"

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

    def read(self, turn: ContractTurn) -> None:
        self.declare(turn.number, turn.declarations)
        self.refuse(turn.rejected)

    def expectation(self, turn: ContractTurn) -> Expectation:
        current = {key: value for key, (value, _) in self.facts.items()}
        current.update(turn.declarations)
        in_message = {(k, v) for k, (v, _) in self.facts.items() if k in turn.declarations}

        def having(status: Status) -> tuple[Pair, ...]:
            return tuple(
                sorted(
                    pair
                    for pair, found in self.old.items()
                    if found == status and current.get(pair[0]) != pair[1] and pair not in in_message
                )
            )

        return Expectation(
            turn=turn.number,
            current=tuple(sorted(current.items())),
            superseded=having("superseded"),
            forgotten=having("forgotten"),
            evicted=having("evicted"),
            rejected=having("rejected"),
        )


def expectations(turns: Iterable[ContractTurn]) -> tuple[Expectation, ...]:
    """One :class:`Expectation` per turn, in order."""
    contract = _Contract()
    found: list[Expectation] = []
    for turn in turns:
        for key in turn.forget_keys:
            contract.forget(key)
        found.append(contract.expectation(turn))
        contract.read(turn)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class FinalState:
    """The contract once every turn has been read: what is current and what each old value became."""

    current: tuple[Pair, ...]
    superseded: tuple[Pair, ...]
    forgotten: tuple[Pair, ...]
    evicted: tuple[Pair, ...]
    rejected: tuple[Pair, ...]

    def old_values(self, key: str) -> tuple[str, ...]:
        """Every value of ``key`` that must not be given as current any more."""
        pairs = self.superseded + self.forgotten + self.evicted + self.rejected
        return tuple(value for name, value in pairs if name == key)


def final_state(turns: Iterable[ContractTurn]) -> FinalState:
    """The contract's facts and old values after the last turn."""
    contract = _Contract()
    for turn in turns:
        for key in turn.forget_keys:
            contract.forget(key)
        contract.read(turn)

    def having(status: Status) -> tuple[Pair, ...]:
        return tuple(sorted(pair for pair, found in contract.old.items() if found == status))

    return FinalState(
        current=tuple(sorted((key, value) for key, (value, _) in contract.facts.items())),
        superseded=having("superseded"),
        forgotten=having("forgotten"),
        evicted=having("evicted"),
        rejected=having("rejected"),
    )
