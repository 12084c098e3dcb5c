"""The values the facts memory trades in, and the bounds every one of them must respect.

They are frozen so that a fact handed to a caller (the REPL's ``mem``, a prompt block, an
:class:`Admission`) can never be edited behind the store's back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "ALLOWED_KEYS",
    "MAX_EVIDENCE_CHARS",
    "MAX_FACTS",
    "MAX_MESSAGE_CHARS",
    "MAX_VALUE_CHARS",
    "Admission",
    "Candidate",
    "Fact",
    "Forgotten",
    "Ticket",
]

ALLOWED_KEYS: frozenset[str] = frozenset(
    {"product", "module", "priority", "database", "constraint", "customer", "version", "environment", "symptom", "log"}
)
"""The only keys a user can declare; anything else makes the message's declarations invalid."""

MAX_FACTS = 5
"""At most this many facts in a store, and in one extraction."""

MAX_VALUE_CHARS = 256
MAX_EVIDENCE_CHARS = 512
MAX_MESSAGE_CHARS = 4096
"""Bounds in Python characters (code points).  Over a bound is an error, never a truncation."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A fact a writer proposes: nothing more than a claim until the host admits it.

    ``evidence`` must be an exact quote of the current user message that contains ``value``;
    the host checks that, so a writer cannot invent or paraphrase its way into the store.
    """

    key: str
    value: str
    evidence: str


@dataclass(frozen=True, slots=True)
class Fact:
    """An admitted fact with its provenance: the quote that proves the user wrote it, the turn
    it was written in and when it was recorded (UTC).  It proves the user said it, not that it
    is true."""

    key: str
    value: str
    evidence: str
    turn: int
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class Ticket:
    """Permission to apply one extraction: valid only while the store's epoch and turn number
    are still these, so an extraction that finishes late, or after a ``forget``, is refused."""

    epoch: int
    number: int
    user_text: str


@dataclass(frozen=True, slots=True)
class Admission:
    """What one successful extraction changed.

    ``admitted`` are the facts written, in the writer's order; ``replaced`` the facts they
    corrected (same key, older value); ``evicted`` the oldest facts dropped to stay within
    :data:`MAX_FACTS`.  All three are empty when the message declared nothing.
    """

    admitted: tuple[Fact, ...] = ()
    evicted: tuple[Fact, ...] = ()
    replaced: tuple[Fact, ...] = ()


class Forgotten(tuple[Fact, ...]):
    """The facts a ``forget`` removed (a tuple, possibly empty), and where it left the store.

    ``epoch`` is the new epoch the forget started and ``turn`` the turn number at that moment:
    every ticket issued before it carries an older epoch and will be refused.
    """

    epoch: int
    turn: int

    def __new__(cls, removed: tuple[Fact, ...] | list[Fact], *, epoch: int, turn: int) -> Forgotten:
        forgotten = super().__new__(cls, removed)
        forgotten.epoch = epoch
        forgotten.turn = turn
        return forgotten

    def __repr__(self) -> str:
        return f"Forgotten({tuple(self)!r}, epoch={self.epoch}, turn={self.turn})"
