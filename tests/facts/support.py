"""Helpers shared by the facts tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from contextledger.facts import Fact, FactSchema
from contextledger.facts._store import FactMemory

__all__ = ["CUSTOM_SCHEMA", "Clock", "snapshot"]

CUSTOM_SCHEMA = FactSchema(
    frozenset({"team", "service", "region", "tier", "owner", "site", "stage", "queue", "vendor"}),
    max_facts=4,
    max_value_chars=40,
    max_evidence_chars=90,
    max_message_chars=300,
)
"""A schema sharing no key and no bound with the seed's, small enough that every bound is reached
in a few words.  Four facts, not fewer: with three, the second eviction of the tie-break case
would evict every remaining fact and the smallest-key rule would choose nothing."""


class Clock:
    """A clock that ticks one second per reading, so every recorded time is known in advance."""

    def __init__(self, start: datetime = datetime(2025, 3, 1, 9, 30, tzinfo=timezone.utc)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        moment = self.now
        self.now += timedelta(seconds=1)
        return moment


def snapshot(store: FactMemory) -> tuple[int, int, tuple[Fact, ...]]:
    """Everything a failed operation must leave as it was: the epoch, the turn, every fact."""
    return store.epoch, store.turn, tuple(store.facts())
