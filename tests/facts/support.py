"""Helpers shared by the facts tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from contextledger.facts import Fact, FactMemory

__all__ = ["Clock", "snapshot"]


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
