"""The fact store contract, and the in-memory store: a few counters, a dict and a trail, guarded by one lock.

Every operation takes the lock for a handful of dictionary steps and never awaits while holding
it, so the same store is safe to share between threads and between asyncio tasks (a task can
never be suspended half-way through an operation).  The expensive part of an extraction, the
writer and the checks against the user's message, runs before the lock is taken.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol, TypeVar, runtime_checkable

from contextledger.exceptions import ConfigurationError, FactRejectedError, FactsError, StaleTicketError
from contextledger.facts._admission import check_batch, in_order, settle
from contextledger.facts._block import describe_facts, render_prompt_block
from contextledger.facts._parse import check_user_text, rejection
from contextledger.facts._records import Admission, Candidate, Fact, Forgotten, Ticket
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._trail import (
    EventKind,
    ReviewEvent,
    admission_events,
    check_ttl,
    erase,
    expiry_events,
    expiry_of,
    rejection_events,
    removal_events,
    split_expired,
)

__all__ = [
    "ALL_KEYS",
    "Clock",
    "FactMemory",
    "FactStore",
    "LedgerStore",
    "State",
    "check_forget_key",
    "check_name",
    "check_schema",
    "stale_ticket",
    "utc_clock",
]

Clock = Callable[[], datetime]


def utc_clock() -> datetime:
    return datetime.now(timezone.utc)


def recorded_now(clock: Clock) -> datetime:
    """The clock's time in UTC; a clock that gives a naive time is a configuration mistake."""
    moment = clock()
    if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
        raise ConfigurationError(f"the fact store's clock must return an aware datetime, got {moment!r}")
    return moment.astimezone(timezone.utc)


def check_schema(schema: object) -> FactSchema:
    if not isinstance(schema, FactSchema):
        raise ConfigurationError(f"schema must be a FactSchema, got {schema!r}")
    return schema


def check_name(value: object, what: str) -> str:
    """An owner or namespace: printable text of 1 to 256 characters."""
    if not isinstance(value, str) or not value or len(value) > 256 or not value.isprintable():
        raise ConfigurationError(f"{what} must be printable text of 1 to 256 characters, got {value!r}")
    return value


def check_forget_key(key: object, schema: FactSchema = DEFAULT_SCHEMA) -> str:
    """The lower-case key to forget, or :class:`FactsError` when it cannot name a fact."""
    if not isinstance(key, str) or key.strip().lower() not in schema.keys:
        raise FactsError(
            f"cannot forget {key!r}: it is not a fact key; use one of {schema.listed_keys}, "
            "or forget with no key to remove every fact; nothing was changed"
        )
    return key.strip().lower()


def stale_ticket(ticket: Ticket, epoch: object, turn: object) -> StaleTicketError:
    reason = "a forget happened since" if ticket.epoch != epoch else "a newer turn has begun"
    return StaleTicketError(
        f"the extraction for turn {ticket.number} (epoch {ticket.epoch}) is stale: {reason} "
        f"(now epoch {epoch}, turn {turn}); nothing was admitted, so a late or pre-forget extraction "
        "cannot bring data back"
    )


def begin_text(user_text: object, schema: FactSchema) -> str:
    """The user message, if it may start a turn; :class:`FactRejectedError` otherwise."""
    problems = check_user_text(user_text, schema)
    if problems:
        raise rejection(problems, what="the new turn")
    assert isinstance(user_text, str)
    return user_text


@runtime_checkable
class FactMemory(Protocol):
    """What a fact store offers; :class:`FactStore`, ``SQLiteFactStore`` and ``RedisFactStore``
    implement it with the same behaviour, proven by one test suite.

    ``forget`` is the user's removal, ``revoke`` an operator's (with a reason); both remove the
    data, start a new epoch and leave only that they happened in the trail.  ``expire`` removes
    the facts whose expiry passed (they are never shown or sent after it in any case).
    """

    @property
    def schema(self) -> FactSchema: ...

    @property
    def owner(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def turn(self) -> int: ...

    def begin_turn(self, user_text: str) -> Ticket: ...

    def apply(self, ticket: Ticket, candidates: Sequence[Candidate]) -> Admission: ...

    def reject(self, ticket: Ticket, error: FactsError) -> None: ...

    def forget(self, key: str | None = None) -> Forgotten: ...

    def revoke(self, key: str | None = None, *, reason: str) -> Forgotten: ...

    def expire(self) -> tuple[Fact, ...]: ...

    def facts(self) -> list[Fact]: ...

    def get(self, key: str) -> Fact | None: ...

    def review(self) -> list[ReviewEvent]: ...

    def to_prompt_block(self) -> str: ...

    def describe(self) -> str: ...


def check_reason(reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise FactsError(f"a revocation needs a reason (non-empty text), got {reason!r}; nothing was changed")
    return reason.strip()


@dataclass
class State:
    """One owner's facts as a store operation sees them, and what the operation changes.

    A backend reads it inside its transaction, one of :class:`LedgerStore`'s steps edits it,
    and the backend writes the changes back atomically: the facts, the counters, the events to
    append to the trail, and the keys whose trail values to erase (``ALL_KEYS`` for every key).
    """

    epoch: int
    turn: int
    facts: dict[str, Fact]
    events: list[ReviewEvent] = field(default_factory=list)
    erase: str | None = None


ALL_KEYS = "*"
_T = TypeVar("_T")


class LedgerStore(abc.ABC):
    """Every rule of a fact store, written once; a backend only says how to run a step atomically.

    ``_transact(step)`` must read the owner's :class:`State`, run ``step`` on it (which may
    raise, and then nothing is written) and write the result back as one atomic change;
    ``_peek()`` reads the state without writing; ``_trail()`` reads the review trail.
    """

    def __init__(self, *, schema: FactSchema, owner: str, ttl_seconds: float | None, clock: Clock) -> None:
        self._schema = check_schema(schema)
        self._owner = check_name(owner, "owner")
        self._ttl = check_ttl(ttl_seconds)
        self._clock = clock

    @abc.abstractmethod
    def _transact(self, step: Callable[[State], _T]) -> _T: ...

    @abc.abstractmethod
    def _peek(self) -> State: ...

    @abc.abstractmethod
    def _trail(self) -> list[ReviewEvent]: ...

    @property
    def schema(self) -> FactSchema:
        return self._schema

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def epoch(self) -> int:
        """Advanced by every ``forget`` and ``revoke``."""
        return self._peek().epoch

    @property
    def turn(self) -> int:
        """The number of the latest turn begun (0 before the first)."""
        return self._peek().turn

    def _now(self) -> datetime:
        return recorded_now(self._clock)

    def begin_turn(self, user_text: str) -> Ticket:
        """Start a user turn; the ticket stays valid until the next turn or ``forget``.

        A message over the schema's bound (or not text) is refused before anything changes
        but the refusal, which the trail records.
        """
        try:
            text = begin_text(user_text, self._schema)
        except FactRejectedError as error:
            if isinstance(user_text, str):
                refused, now = error, self._now()
                self._transact(
                    lambda state: state.events.extend(rejection_events(user_text, refused, now, self._schema, None))
                )
            raise

        def step(state: State) -> Ticket:
            state.turn += 1
            return Ticket(state.epoch, state.turn, text)

        return self._transact(step)

    def apply(self, ticket: Ticket, candidates: Sequence[Candidate]) -> Admission:
        """Admit the whole batch or nothing.

        Raises :class:`FactRejectedError` (every problem listed) when the batch is not exactly
        the message's declarations or breaks a bound, and :class:`StaleTicketError` when the
        ticket's epoch or number is no longer current.  Either way the facts are unchanged and
        the refusal is in the trail (without its values if a forget came in between).
        """
        outcome = self._transact(self.admission_step(ticket, candidates))
        if isinstance(outcome, FactsError):
            raise outcome
        return outcome

    def reject(self, ticket: Ticket, error: FactsError) -> None:
        """Record that the extraction for ``ticket`` was refused before it reached :meth:`apply`.

        A writer refuses a message whose declarations are invalid (an unknown key, a value too
        long) by raising, so ``apply`` never sees it; :func:`extract` calls this so the trail
        holds every refusal all the same.  Nothing but the trail changes.
        """
        if not isinstance(ticket, Ticket) or not isinstance(ticket.user_text, str):
            raise FactsError(
                f"reject() needs the Ticket that begin_turn() returned, got {ticket!r}; nothing was recorded"
            )
        if not isinstance(error, FactsError):
            raise FactsError(f"reject() needs the FactsError that refused the extraction, got {error!r}")
        self._transact(self.admission_step(ticket, error))

    def admission_step(
        self, ticket: Ticket, proposed: Sequence[Candidate] | FactsError
    ) -> Callable[[State], Admission | FactsError]:
        """The end of a facts turn as one step on the owner's state: what :meth:`apply` and
        :meth:`reject` run, and what a history writes in a turn's own atomic step.

        ``proposed`` is the writer's batch, or the error that refused it.  The step admits the
        batch, or records the refusal in the trail and returns it (a refused batch, a stale
        ticket): it never raises, so the write it is part of goes through either way.  The
        batch is checked against the message here, before any store is touched; a ``ticket``
        that is no ticket at all raises :class:`FactRejectedError` at once, recording nothing.
        """
        now = self._now()
        refused: FactsError | None = proposed if isinstance(proposed, FactsError) else None
        batch: tuple[Candidate, ...] = ()
        if refused is None:
            try:
                batch = check_batch(ticket, proposed, self._schema)
            except FactRejectedError as error:
                if not isinstance(ticket, Ticket) or not isinstance(ticket.user_text, str):
                    raise
                refused = error

        def refusal(state: State, error: FactsError) -> FactsError:
            state.events.extend(
                rejection_events(
                    ticket.user_text, error, now, self._schema, ticket.number, with_values=ticket.epoch == state.epoch
                )
            )
            return error

        def step(state: State) -> Admission | FactsError:
            if refused is not None:
                return refusal(state, refused)
            if ticket.epoch != state.epoch or ticket.number != state.turn:
                stale = stale_ticket(ticket, state.epoch, state.turn)
                return refusal(state, stale) if batch else stale
            self._expire(state, now)
            if not batch:
                return Admission()
            state.facts, admission = settle(
                state.facts, batch, ticket.number, now, self._schema, expiry_of(now, self._ttl)
            )
            state.events.extend(admission_events(admission, now))
            return admission

        return step

    @staticmethod
    def _expire(state: State, now: datetime) -> list[Fact]:
        state.facts, expired = split_expired(state.facts, now)
        state.events.extend(expiry_events(expired, now))
        return expired

    def _remove(self, key: str | None, kind: EventKind, reason: str) -> Forgotten:
        name = None if key is None else check_forget_key(key, self._schema)
        now = self._now()

        def step(state: State) -> Forgotten:
            self._expire(state, now)
            if name is None:
                removed = in_order(state.facts)
                state.facts = {}
            else:
                fact = state.facts.pop(name, None)
                removed = [] if fact is None else [fact]
            state.erase = ALL_KEYS if name is None else name
            state.events.extend(removal_events(removed, name, kind, reason, now))
            state.epoch += 1
            return Forgotten(removed, epoch=state.epoch, turn=state.turn)

        return self._transact(step)

    def forget(self, key: str | None = None) -> Forgotten:
        """Remove one key (any case) or, with no key, every fact; either way start a new epoch,
        even when there was nothing to remove, so no extraction in flight can write it back.
        The trail keeps that it happened and loses every value and evidence of the key."""
        return self._remove(key, "forgotten", "forgotten at the user's request")

    def revoke(self, key: str | None = None, *, reason: str) -> Forgotten:
        """An operator's forget: the same removal, recorded as a revocation with ``reason``."""
        return self._remove(key, "revoked", "revoked: " + check_reason(reason))

    def expire(self) -> tuple[Fact, ...]:
        """Remove the facts whose expiry has passed, recording each in the trail."""
        now = self._now()
        return tuple(self._transact(lambda state: self._expire(state, now)))

    def facts(self) -> list[Fact]:
        """The live facts (an expired fact is never shown), oldest turn first, then by key:
        the order in which they would be evicted."""
        facts = self._peek().facts
        if any(fact.expires_at is not None for fact in facts.values()):
            facts = split_expired(facts, self._now())[0]
        return in_order(facts)

    def get(self, key: str) -> Fact | None:
        """The live fact for ``key`` (any case), or ``None``."""
        if not isinstance(key, str):
            raise FactsError(f"a fact key is a str such as 'module', got {type(key).__name__}")
        name = key.strip().lower()
        return next((fact for fact in self.facts() if fact.key == name), None)

    def review(self) -> list[ReviewEvent]:
        """The review trail, oldest first."""
        return self._trail()

    def to_prompt_block(self) -> str:
        """The facts as labelled, quoted, unverified user data for a model's instructions."""
        return render_prompt_block(self.facts(), self._schema)

    def describe(self) -> str:
        """The listing a person reads (``mem``): key, value, turn, recorded time, evidence."""
        return describe_facts(self.facts(), self._schema)


class FactStore(LedgerStore):
    """At most ``schema.max_facts`` controlled facts, in this process only (they vanish with it).

    ``begin_turn`` numbers each user turn and returns a :class:`Ticket`; ``apply`` admits a
    batch only with the current ticket and only if the batch is exactly the message's
    declarations; ``forget`` removes one key or all and starts a new epoch, which makes every
    ticket issued before it stale.  ``review()`` is the trail of what happened.

    ``clock`` (for tests and replays) supplies every time; it must return aware datetimes.
    ``ttl_seconds`` gives each fact an expiry that long after it was recorded.
    """

    def __init__(
        self,
        *,
        schema: FactSchema = DEFAULT_SCHEMA,
        owner: str = "local",
        ttl_seconds: float | None = None,
        clock: Clock = utc_clock,
    ) -> None:
        super().__init__(schema=schema, owner=owner, ttl_seconds=ttl_seconds, clock=clock)
        self._lock = threading.Lock()
        self._state = State(0, 0, {})
        self._events: list[ReviewEvent] = []
        self._events_by_key: dict[str, list[int]] = {}

    def __repr__(self) -> str:
        state = self._state
        return f"FactStore(owner={self._owner!r}, epoch={state.epoch}, turn={state.turn}, keys={sorted(state.facts)})"

    def _transact(self, step: Callable[[State], _T]) -> _T:
        with self._lock:
            current = self._state
            working = State(current.epoch, current.turn, dict(current.facts))
            result = step(working)
            if working.erase is not None:
                indexes = (
                    range(len(self._events))
                    if working.erase == ALL_KEYS
                    else self._events_by_key.pop(working.erase, [])
                )
                for index in indexes:
                    self._events[index] = erase(self._events[index])
            for event in working.events:
                if event.key is not None and event.value is not None:
                    self._events_by_key.setdefault(event.key, []).append(len(self._events))
                self._events.append(event)
            self._state = State(working.epoch, working.turn, working.facts)
            return result

    def _peek(self) -> State:
        return self._state

    def _trail(self) -> list[ReviewEvent]:
        with self._lock:
            return list(self._events)
