"""The values the facts memory trades in, and the seed's bounds every one of them must respect.

They are frozen so that a fact handed to a caller (the chat's ``mem``, a prompt block, an
:class:`Admission`) can never be edited behind the store's back.  The bounds below are the
default schema's (:data:`~contextledger.facts.DEFAULT_SCHEMA`); a store built with another
:class:`~contextledger.facts.FactSchema` uses that schema's instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from contextledger.facts._schema import DEFAULT_SCHEMA

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

ALLOWED_KEYS: frozenset[str] = DEFAULT_SCHEMA.keys
"""The seed's keys: product, module, priority, database, constraint, customer, version, environment, symptom, log."""

MAX_FACTS = DEFAULT_SCHEMA.max_facts
"""At most this many facts in a store, and in one extraction (the seed's schema)."""

MAX_VALUE_CHARS = DEFAULT_SCHEMA.max_value_chars
MAX_EVIDENCE_CHARS = DEFAULT_SCHEMA.max_evidence_chars
MAX_MESSAGE_CHARS = DEFAULT_SCHEMA.max_message_chars
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
    is true.  ``expires_at`` is set by a store with an expiry; the fact is gone after it."""

    key: str
    value: str
    evidence: str
    turn: int
    recorded_at: datetime
    expires_at: datetime | None = None


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
    corrected (same key, older value); ``evicted`` the oldest facts dropped to stay within the
    schema's ``max_facts``.  All three are empty when the message declared nothing.
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
