"""The one interface every history store implements, so an agent can switch stores without changing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from contextledger.messages import Message

__all__ = [
    "FactsBesideTurns",
    "HistoryProvider",
    "HistoryVersion",
    "RedisTurnFacts",
    "StoredTurn",
    "TurnFacts",
    "TurnRewriter",
    "TurnWrite",
]


@dataclass(frozen=True, slots=True)
class HistoryVersion:
    """Where a session's stored history stands: ``length`` messages, rewritten ``generation`` times.

    Appends keep the generation and add to the length; anything else that changes stored
    messages (``replace``, ``rewrite``, ``undo_turn``, ``clear``) moves the generation on.  So
    a reader that kept a copy of the history and the version it had knows, from one cheap
    ``version()`` call, whether its copy is still the stored history.
    """

    generation: int
    length: int


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """A turn a history recorded under its turn id: the input it answered and the reply it stored.

    Kept apart from the message list, so a retry finds the reply even after a reduction
    rewrote or dropped the turn's messages.
    """

    turn_id: str
    inputs: tuple[Message, ...]
    reply: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class TurnWrite:
    """What :meth:`TurnRewriter.rewrite_and_append_turn` did.

    ``stored``: the turn was stored now (False: its id was recorded already, and nothing was
    written).  ``version``: the history's version after the write when the rewrite was applied
    with it, None when it was not (the history had moved on from the version it expected, so
    only the turn was appended).
    """

    stored: bool
    version: HistoryVersion | None


@runtime_checkable
class HistoryProvider(Protocol):
    """Where a conversation's messages live between turns, keyed by session id.

    Every implementation promises the same behaviour (one conformance suite checks all of
    them): ``load`` returns the stored messages in order, equal to what was written, ids and
    ``additional_properties`` included; ``append`` and ``replace`` store a batch whole or not
    at all; bad input raises before anything is written; a store that fails raises a
    :class:`~contextledger.exceptions.HistoryError` and leaves the stored history as it was.

    Turns: ``append_turn`` stores a turn id at most once per session, in the same atomic step
    as the turn's messages, so a retried turn can never be stored twice.  A write whose outcome
    the store cannot know (sent, then no answer) raises
    :class:`~contextledger.exceptions.TurnOutcomeUnknownError` instead of a ``HistoryError``.
    """

    source_id: str
    """Names this store to components that act on "the history" (a compaction provider's
    ``history_source_id``), so an agent with several stores can say which one it means."""

    async def load(self, session_id: str) -> list[Message]:
        """The session's messages in the order they were stored; empty for an unknown session.

        The list is the caller's to change; changing it does not change the stored history.
        """
        ...

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        """Add messages after the stored ones, all of them or (on any error) none."""
        ...

    async def replace(self, session_id: str, messages: Sequence[Message]) -> None:
        """Atomically make ``messages`` the session's whole stored history.

        A reducer that keeps only a reduced history uses this; a reader never sees a mix of
        the old list and the new one.  Recorded turn ids are kept: a reduced turn was still
        stored, and retrying it must not store it again.
        """
        ...

    async def append_turn(
        self, session_id: str, turn_id: str, inputs: Sequence[Message], reply: Sequence[Message]
    ) -> bool:
        """Append ``[*inputs, *reply]`` and record ``turn_id`` with them, in one atomic step.

        Returns True if the turn was stored now, False if ``turn_id`` was already recorded for
        the session (then nothing is written).  Raises ``HistoryError`` when it is known that
        nothing was stored, ``TurnOutcomeUnknownError`` when it is not known.
        """
        ...

    async def load_turn(self, session_id: str, turn_id: str) -> StoredTurn | None:
        """The turn recorded under ``turn_id`` for the session, or None if there is none."""
        ...

    async def load_turns(self, session_id: str) -> list[StoredTurn]:
        """Every turn recorded for the session, each once; empty for an unknown session.

        The order is not promised (a Redis hash keeps none).  What ``forget`` reads to find a
        forgotten value that only a turn record still holds.
        """
        ...

    async def rewrite_turns(self, session_id: str, turns: Sequence[StoredTurn]) -> None:
        """Atomically give each recorded turn in ``turns`` the inputs and reply it carries.

        Turn ids stay as they are: a turn whose id is not recorded for the session (undone or
        cleared meanwhile) is skipped, never recorded anew, and the session's messages are not
        touched.  Bad input (not a StoredTurn, no input message, a turn id twice) raises before
        anything is written.  What ``forget`` uses, so a retried turn cannot hand back a
        forgotten value.
        """
        ...

    async def undo_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        """Take back a turn this caller has just stored: forget ``turn_id`` and remove the last
        stored run of ``messages`` (the turn's inputs and reply), in one atomic step.

        For an agent whose turn could not be stored in every one of its histories.
        """
        ...

    async def version(self, session_id: str) -> HistoryVersion:
        """The session's :class:`HistoryVersion`, read in one step (no message is read)."""
        ...

    async def rewrite(
        self, session_id: str, start: int, messages: Sequence[Message], expected: HistoryVersion
    ) -> HistoryVersion | None:
        """Keep the first ``start`` stored messages and put ``messages`` after them, atomically,
        if the history is still at ``expected``; return the new version, or None (and write
        nothing) if it was not.

        What a reducer uses to write only the part of a long history it changed.
        """
        ...

    async def clear(self, session_id: str) -> None:
        """Forget the session's messages and recorded turns; clearing an unknown session is not an error."""
        ...

    async def close(self) -> None:
        """Release connections and files; calling it twice is harmless, and a later call reopens them."""
        ...


@runtime_checkable
class TurnRewriter(Protocol):
    """A history that can rewrite its stored list and append a turn in one atomic step.

    Optional: the turn writer (:func:`~contextledger.history.write_turn`, which every host uses)
    writes a turn and the reduction of the retained history that the turn brings about (a
    compaction provider's ``after_strategy``, the proxy's retain strategy, a reduced history)
    with one atomic store operation instead of two, which on a networked store is also one
    round trip a turn fewer.  Histories without it get the two writes, with the same result
    once both are done.
    """

    async def rewrite_and_append_turn(
        self,
        session_id: str,
        start: int,
        messages: Sequence[Message],
        expected: HistoryVersion,
        turn_id: str,
        inputs: Sequence[Message],
        reply: Sequence[Message],
    ) -> TurnWrite:
        """Record ``turn_id`` and append ``[*inputs, *reply]``, as ``append_turn`` does, after first
        keeping the first ``start`` stored messages and putting ``messages`` after them if the
        history is still at ``expected`` (as ``rewrite`` does), all in one atomic step.

        A turn id recorded already writes nothing (``stored`` False).  A history that moved on
        from ``expected`` gets the turn appended and no rewrite (``version`` None).  Errors are
        those of ``append_turn``, checked before anything is written, plus ``rewrite``'s check of
        ``start``.
        """
        ...


@dataclass(frozen=True, slots=True)
class RedisTurnFacts:
    """A fact store's change, planned for a Redis turn script to make with the turn: the owner's
    hash and trail keys, the ``epoch``, ``turn`` (as the hash holds them, empty when missing) and
    trail ``length`` it was planned on, and the ``commands`` that make it.  The script runs them
    only if the owner is still where the plan saw it; every change to facts moves one of the three."""

    key: str
    trail_key: str
    epoch: str
    turn: str
    length: int
    commands: tuple[tuple[Any, ...], ...]


class TurnFacts(Protocol):
    """What a turn admits to a fact store, for a history that writes it in the turn's own atomic
    step when the facts live in its store (:class:`FactsBesideTurns`).  Made by
    :meth:`contextledger.facts.FactsHost.prepare`; :func:`~contextledger.history.write_turn`
    passes it on, and writes it after the turn (``alone``) where the history cannot take it.

    Each ``write_*`` runs the admission on the store's state inside the history's own step and
    keeps its outcome as pending; ``confirm`` says the turn carrying it was stored, so the
    outcome stands.  ``lives_in`` says whether the facts are in that store: ``("sqlite", path)``,
    ``("postgres", where)``, ``("redis", where)``, ``("memory", "")``.
    """

    @property
    def owner(self) -> str:
        """The fact store's owner (the proxy names it after the session)."""
        ...

    def lives_in(self, kind: str, where: str) -> bool: ...

    def write_sqlite(self, connection: Any) -> None: ...

    async def write_postgres(self, connection: Any, stored: Callable[[], Awaitable[bool]]) -> None:
        """Queue the facts' reads on ``connection`` (in the history's transaction), then write them
        if ``stored()`` (the turn's outcome, awaited after the reads were queued) says so."""
        ...

    async def plan_redis(self) -> RedisTurnFacts: ...

    def write_memory(self) -> None: ...

    def confirm(self) -> None: ...

    async def alone(self) -> None: ...


@runtime_checkable
class FactsBesideTurns(Protocol):
    """A history that can write a turn's facts in the turn's own atomic step (its ``append_turn``
    and ``rewrite_and_append_turn`` then take ``facts=``), when ``beside(facts)`` says the facts
    live in its store for a turn of ``session_id``: a crash leaves the turn and its facts both
    written or neither."""

    def beside(self, facts: TurnFacts, session_id: str) -> bool: ...
