"""The in-memory fact store: a few explicit counters and a dict, guarded by one lock.

Every operation takes the lock for a handful of dictionary steps and never awaits while holding
it, so the same store is safe to share between threads and between asyncio tasks (a task can
never be suspended half-way through an operation).  The expensive part of an extraction, the
writer and the checks against the user's message, runs before the lock is taken.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Protocol, runtime_checkable

from contextledger.exceptions import ConfigurationError, FactsError, StaleTicketError
from contextledger.facts._admission import check_batch, in_order, settle
from contextledger.facts._block import describe_facts, render_prompt_block
from contextledger.facts._parse import check_user_text, rejection
from contextledger.facts._records import ALLOWED_KEYS, Admission, Candidate, Fact, Forgotten, Ticket

__all__ = ["FactMemory", "FactStore", "check_forget_key", "stale_ticket", "utc_clock"]

Clock = Callable[[], datetime]


def utc_clock() -> datetime:
    return datetime.now(timezone.utc)


def recorded_now(clock: Clock) -> datetime:
    """The clock's time in UTC; a clock that gives a naive time is a configuration mistake."""
    moment = clock()
    if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
        raise ConfigurationError(f"the fact store's clock must return an aware datetime, got {moment!r}")
    return moment.astimezone(timezone.utc)


def check_forget_key(key: object) -> str:
    """The lower-case key to forget, or :class:`FactsError` when it cannot name a fact."""
    if not isinstance(key, str) or key.strip().lower() not in ALLOWED_KEYS:
        raise FactsError(
            f"cannot forget {key!r}: it is not a fact key; use one of {', '.join(sorted(ALLOWED_KEYS))}, "
            "or forget() with no key to remove every fact; nothing was changed"
        )
    return key.strip().lower()


def stale_ticket(ticket: Ticket, epoch: object, turn: object) -> StaleTicketError:
    reason = "a forget happened since" if ticket.epoch != epoch else "a newer turn has begun"
    return StaleTicketError(
        f"the extraction for turn {ticket.number} (epoch {ticket.epoch}) is stale: {reason} "
        f"(now epoch {epoch}, turn {turn}); nothing was admitted, so a late or pre-forget extraction "
        "cannot bring data back"
    )


def begin_text(user_text: object) -> str:
    """The user message, if it may start a turn; :class:`FactRejectedError` otherwise."""
    problems = check_user_text(user_text)
    if problems:
        raise rejection(problems, what="the new turn")
    assert isinstance(user_text, str)
    return user_text


@runtime_checkable
class FactMemory(Protocol):
    """What a fact store offers; :class:`FactStore` and ``RedisFactStore`` both implement it."""

    @property
    def epoch(self) -> int: ...

    @property
    def turn(self) -> int: ...

    def begin_turn(self, user_text: str) -> Ticket: ...

    def apply(self, ticket: Ticket, candidates: Sequence[Candidate]) -> Admission: ...

    def forget(self, key: str | None = None) -> Forgotten: ...

    def facts(self) -> list[Fact]: ...

    def get(self, key: str) -> Fact | None: ...

    def to_prompt_block(self) -> str: ...

    def describe(self) -> str: ...


class FactStore:
    """At most five controlled facts, in this process only (they vanish with it).

    ``begin_turn`` numbers each user turn and returns a :class:`Ticket`; ``apply`` admits a
    batch only with the current ticket and only if the batch is exactly the message's
    declarations; ``forget`` removes one key or all and starts a new epoch, which makes every
    ticket issued before it stale.  ``facts()`` lists the facts oldest turn first, then by key:
    the order in which they would be evicted.

    ``clock`` (for tests and replays) supplies ``recorded_at``; it must return aware datetimes.
    """

    def __init__(self, *, clock: Clock = utc_clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._facts: dict[str, Fact] = {}
        self._epoch = 0
        self._turn = 0

    def __repr__(self) -> str:
        return f"FactStore(epoch={self._epoch}, turn={self._turn}, keys={sorted(self._facts)})"

    @property
    def epoch(self) -> int:
        """Advanced by every ``forget``."""
        return self._epoch

    @property
    def turn(self) -> int:
        """The number of the latest turn begun (0 before the first)."""
        return self._turn

    def begin_turn(self, user_text: str) -> Ticket:
        """Start a user turn; the ticket stays valid until the next turn or ``forget``.

        A message over 4096 characters (or not text) is refused before anything changes.
        """
        text = begin_text(user_text)
        with self._lock:
            self._turn += 1
            return Ticket(self._epoch, self._turn, text)

    def apply(self, ticket: Ticket, candidates: Sequence[Candidate]) -> Admission:
        """Admit the whole batch or nothing.

        Raises :class:`FactRejectedError` (every problem listed) when the batch is not exactly
        the message's declarations or breaks a bound, and :class:`StaleTicketError` when the
        ticket's epoch or number is no longer current.  Either way the store is unchanged.
        """
        batch = check_batch(ticket, candidates)
        recorded_at = recorded_now(self._clock)
        with self._lock:
            if ticket.epoch != self._epoch or ticket.number != self._turn:
                raise stale_ticket(ticket, self._epoch, self._turn)
            if not batch:
                return Admission()
            self._facts, admission = settle(self._facts, batch, ticket.number, recorded_at)
            return admission

    def forget(self, key: str | None = None) -> Forgotten:
        """Remove one key (any case) or, with no key, every fact; either way start a new epoch,
        even when there was nothing to remove, so no extraction in flight can write it back."""
        name = None if key is None else check_forget_key(key)
        with self._lock:
            if name is None:
                removed = in_order(self._facts)
                self._facts = {}
            else:
                fact = self._facts.pop(name, None)
                removed = [] if fact is None else [fact]
            self._epoch += 1
            return Forgotten(removed, epoch=self._epoch, turn=self._turn)

    def facts(self) -> list[Fact]:
        with self._lock:
            return in_order(self._facts)

    def get(self, key: str) -> Fact | None:
        """The fact for ``key`` (any case), or ``None``."""
        if not isinstance(key, str):
            raise FactsError(f"a fact key is a str such as 'module', got {type(key).__name__}")
        with self._lock:
            return self._facts.get(key.strip().lower())

    def to_prompt_block(self) -> str:
        """The facts as labelled, quoted, unverified user data for a model's instructions."""
        return render_prompt_block(self.facts())

    def describe(self) -> str:
        """The listing a person reads (``mem``): key, value, turn, recorded time, evidence."""
        return describe_facts(self.facts())
