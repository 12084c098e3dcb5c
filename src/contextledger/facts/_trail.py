"""The review trail: every admission, correction, eviction, rejection, forget, revocation and expiry,
with its reason and time, kept by every store in the same shape.

A forget must leave nothing, and the trail is no exception: events name their key and carry a
value and evidence only in their own fields (a reason never quotes a value), so forgetting a
key erases those two fields from every event of that key and keeps only that it happened.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, overload

from contextledger.exceptions import ConfigurationError, FactsError
from contextledger.facts._diagnostics import diagnose_reading
from contextledger.facts._parse import read_message
from contextledger.facts._records import Admission, Fact
from contextledger.facts._schema import FactSchema

__all__ = [
    "EventKind",
    "ReviewEvent",
    "admission_events",
    "check_ttl",
    "decode_event",
    "decode_fact",
    "encode_event",
    "encode_fact",
    "erase",
    "expiry_events",
    "expiry_of",
    "rejection_events",
    "removal_events",
    "split_expired",
    "within",
]

EventKind = Literal["admitted", "corrected", "evicted", "rejected", "forgotten", "revoked", "expired"]
ERASED = "value and evidence erased when the key was forgotten"
CUT = " [cut: {count} more characters not kept]"
"""Follows what the trail keeps of a rejected value or evidence longer than the schema allows."""


@dataclass(frozen=True, slots=True)
class ReviewEvent:
    """One entry of a store's review trail.

    ``kind`` is what happened; ``reason`` says why (never quoting a value); ``key``, ``turn``,
    ``value`` and ``evidence`` say to what (``None`` where they do not apply).  ``erased`` is
    true once a forget or revocation has removed ``value`` and ``evidence``.
    """

    at: datetime
    kind: EventKind
    reason: str
    key: str | None = None
    turn: int | None = None
    value: str | None = None
    evidence: str | None = None
    erased: bool = False

    def describe(self) -> str:
        """One line for a person."""
        when = self.at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        what = self.kind if self.key is None else f"{self.kind} {self.key}"
        if self.value is not None:
            what += f"={self.value!r}"
        turn = "" if self.turn is None else f" (turn {self.turn})"
        erased = f" [{ERASED}]" if self.erased else ""
        return f"{when}  {what}{turn}: {self.reason}{erased}"


def erase(event: ReviewEvent) -> ReviewEvent:
    """``event`` without its value and evidence: what a forget keeps of it."""
    if event.value is None and event.evidence is None:
        return event
    return replace(event, value=None, evidence=None, erased=True)


def admission_events(admission: Admission, at: datetime) -> list[ReviewEvent]:
    replaced = {fact.key: fact for fact in admission.replaced}
    events: list[ReviewEvent] = []
    for fact in admission.admitted:
        previous = replaced.get(fact.key)
        if previous is None:
            events.append(ReviewEvent(at, "admitted", "a new fact", fact.key, fact.turn, fact.value, fact.evidence))
        else:
            reason = f"corrects the value admitted at turn {previous.turn}"
            events.append(ReviewEvent(at, "corrected", reason, fact.key, fact.turn, fact.value, fact.evidence))
    for fact in admission.evicted:
        reason = "evicted: the oldest fact, to stay within the limit"
        events.append(ReviewEvent(at, "evicted", reason, fact.key, fact.turn, fact.value, fact.evidence))
    return events


def within(text: str | None, bound: int) -> str | None:
    """``text`` as the trail keeps it: whole up to ``bound`` characters, otherwise its first
    ``bound`` characters and a marker saying how many more were not kept."""
    if text is None or len(text) <= bound:
        return text
    return text[:bound] + CUT.format(count=len(text) - bound)


def rejection_events(
    user_text: str, error: FactsError, at: datetime, schema: FactSchema, turn: int | None, *, with_values: bool = True
) -> list[ReviewEvent]:
    """One ``rejected`` event per declaration the message held (or one for the message when it
    held none); ``with_values=False`` keeps the values out (a refusal that arrives after a forget).

    A value or evidence over the schema's bound (the very reason of many refusals) is kept only
    as far as the bound allows, with a marker: the trail never holds more than the memory would.
    """
    reading = read_message(user_text, schema)
    events = [
        ReviewEvent(
            at,
            "rejected",
            diagnostic.reason,
            diagnostic.key,
            turn,
            within(diagnostic.value, schema.max_value_chars) if with_values else None,
            within(diagnostic.evidence, schema.max_evidence_chars) if with_values else None,
        )
        for diagnostic in diagnose_reading(reading, rejection=error)
        if diagnostic.outcome == "rejected"
    ]
    if not events:
        reason = "; ".join(reading.message_problems) or "the writer's proposal did not match the message's declarations"
        events.append(ReviewEvent(at, "rejected", "the message was refused: " + reason, None, turn))
    return events


def removal_events(
    removed: Iterable[Fact], key: str | None, kind: EventKind, reason: str, at: datetime
) -> list[ReviewEvent]:
    """The event a forget or revocation leaves: which key (or all), how many facts, no value."""
    count = len(list(removed))
    what = "every fact" if key is None else f"the key {key!r}"
    return [ReviewEvent(at, kind, f"{reason} ({what}; {count} fact(s) removed)", key)]


def check_ttl(ttl_seconds: object) -> timedelta | None:
    if ttl_seconds is None:
        return None
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float)) or not ttl_seconds > 0:
        raise ConfigurationError(f"ttl_seconds must be None (no expiry) or a positive number, got {ttl_seconds!r}")
    return timedelta(seconds=ttl_seconds)


def expiry_of(recorded_at: datetime, ttl: timedelta | None) -> datetime | None:
    return None if ttl is None else recorded_at + ttl


def split_expired(facts: Mapping[str, Fact], now: datetime) -> tuple[dict[str, Fact], list[Fact]]:
    """The facts still live at ``now``, and those whose expiry has passed."""
    live: dict[str, Fact] = {}
    expired: list[Fact] = []
    for key, fact in facts.items():
        if fact.expires_at is not None and fact.expires_at <= now:
            expired.append(fact)
        else:
            live[key] = fact
    return live, expired


def expiry_events(expired: Iterable[Fact], at: datetime) -> list[ReviewEvent]:
    return [
        ReviewEvent(at, "expired", "its expiry time passed; the fact was removed", fact.key, fact.turn)
        for fact in expired
    ]


# Encoding (SQLite and Redis keep facts and events as JSON) ----------------------------------------


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"a stored time has no time zone: {text!r}")
    return moment


def encode_fact(fact: Fact) -> str:
    record = {
        "key": fact.key,
        "value": fact.value,
        "evidence": fact.evidence,
        "turn": fact.turn,
        "recorded_at": fact.recorded_at.isoformat(),
        "expires_at": None if fact.expires_at is None else fact.expires_at.isoformat(),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def decode_fact(body: str) -> Fact:
    """A stored fact; ``ValueError``/``KeyError``/``TypeError`` when it is not one."""
    record = json.loads(body)
    recorded_at = _time(record["recorded_at"])
    assert recorded_at is not None
    return Fact(
        str(record["key"]),
        str(record["value"]),
        str(record["evidence"]),
        int(record["turn"]),
        recorded_at,
        _time(record.get("expires_at")),
    )


def encode_event(event: ReviewEvent, *, detached: bool = False) -> str:
    """``event`` as JSON; ``detached`` marks an event whose value is stored elsewhere (Redis)."""
    record: dict[str, Any] = {"at": event.at.isoformat(), "kind": event.kind, "reason": event.reason}
    if detached:
        record["detached"] = True
    for name in ("key", "turn", "value", "evidence"):
        if getattr(event, name) is not None:
            record[name] = getattr(event, name)
    if event.erased and not detached:
        record["erased"] = True
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


@overload
def decode_event(body: str) -> ReviewEvent: ...


@overload
def decode_event(body: str, *, with_detached: Literal[True]) -> tuple[ReviewEvent, bool]: ...


def decode_event(body: str, *, with_detached: bool = False) -> ReviewEvent | tuple[ReviewEvent, bool]:
    """The event in ``body``; with ``with_detached``, also whether its value was stored apart
    (it is then marked erased until the value is attached again)."""
    record = json.loads(body)
    at = _time(record["at"])
    assert at is not None
    turn = record.get("turn")
    event = ReviewEvent(
        at,
        record["kind"],
        str(record["reason"]),
        record.get("key"),
        None if turn is None else int(turn),
        record.get("value"),
        record.get("evidence"),
        bool(record.get("erased", False)) or bool(record.get("detached", False)),
    )
    return (event, bool(record.get("detached", False))) if with_detached else event
