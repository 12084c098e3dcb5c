"""Writing a turn: the one place where every host (the agent runtime, the proxy, the Agent
Framework adapter, :class:`~contextledger.agents.ReducedHistoryProvider`) stores one.

A turn is its id, the input it answered and its reply, and, when a reducer keeps the retained
history small, the rewrite of the stored history the turn brings about.  :func:`write_turn`
stores all of it in one atomic step where the store can (a :class:`TurnRewriter`, as the three
built-in stores are), so no reader ever sees the turn without its reduction or the reduction
without its turn, and a kill in between leaves one or the other state, never a mix.  The turn id
is recorded in the same step, so a turn is stored at most once: a retried id writes nothing and
hands back the turn stored under it.

A host that runs many turns of one session keeps a :class:`KeptHistory`, its copy of the stored
history with the :class:`HistoryVersion` it matches.  :func:`synced_history` reads the version
(one small read) and loads the messages again only when someone else moved it; the writer
brings the copy up to date after each write, so a host's own turns never make it read or decode
the whole history again.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextledger.exceptions import HistoryError
from contextledger.history._protocol import (
    FactsBesideTurns,
    HistoryProvider,
    HistoryVersion,
    StoredTurn,
    TurnFacts,
    TurnRewriter,
)
from contextledger.messages import Message

__all__ = [
    "KeptHistory",
    "RetainedRewrite",
    "Turn",
    "TurnOutcome",
    "TurnTarget",
    "synced_history",
    "write_turn",
]


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a session: its id, the messages it answered and the reply it stores."""

    session_id: str
    turn_id: str
    inputs: tuple[Message, ...]
    reply: tuple[Message, ...]

    @property
    def messages(self) -> tuple[Message, ...]:
        """What the turn adds to the stored history: its inputs, then its reply."""
        return (*self.inputs, *self.reply)


@dataclass(frozen=True, slots=True)
class RetainedRewrite:
    """The retained history as the turn leaves it: the first ``start`` stored messages kept, then
    ``messages``, which end with the turn's own messages (as stored, or as a reducer changed them).

    ``start`` counts the messages of the history the turn was built on (a :class:`KeptHistory`).
    """

    start: int
    messages: tuple[Message, ...]


class KeptHistory:
    """A host's copy of one session's stored history, and the version of the store it matches.

    The copy is changed only by :func:`write_turn` (after a write) and :func:`synced_history`
    (after a read), so it is never newer than the store's version says; the list is changed in
    place, which is what lets a run read the history without copying it.
    """

    __slots__ = ("messages", "version")

    def __init__(self, messages: list[Message], version: HistoryVersion) -> None:
        self.messages = messages
        self.version = version

    def __repr__(self) -> str:
        return f"KeptHistory({len(self.messages)} messages, {self.version})"

    def appended(self, messages: Sequence[Message]) -> None:
        """``messages`` were stored after the ones kept (a turn)."""
        self.messages.extend(messages)
        self.version = HistoryVersion(self.version.generation, self.version.length + len(messages))

    def rewritten(self, start: int, messages: Sequence[Message], version: HistoryVersion) -> None:
        """The history was rewritten from ``start`` on, and the store is now at ``version``."""
        del self.messages[start:]
        self.messages.extend(messages)
        self.version = version


async def synced_history(history: HistoryProvider, session_id: str, kept: KeptHistory | None) -> KeptHistory:
    """``kept`` if the store is still at its version, else the history read again (a new copy)."""
    version = await history.version(session_id)
    if kept is not None and kept.version == version:
        return kept
    # The version is read before the messages: a write landing in between makes the copy newer
    # than its version says, so the next check reads again, never the reverse.
    return KeptHistory(await history.load(session_id), version)


@dataclass(frozen=True, slots=True)
class TurnTarget:
    """A history to store the turn in, with the host's copy of it (if it keeps one) and the rewrite
    of the retained history to make with the turn (if a reducer asked for one)."""

    history: HistoryProvider
    kept: KeptHistory | None = None
    rewrite: RetainedRewrite | None = None


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """What :func:`write_turn` did.

    ``stored``: this call stored the turn.  ``earlier``: when it did not, the turn stored before
    under the same id (its reply is the turn's reply; None only if it was undone meanwhile).
    ``rewritten``: the history's version after the rewrite asked for was written, None when it
    was not (none asked, or the history had moved on from the kept copy's version: then the
    reducer must start again from the store).
    """

    stored: bool
    earlier: StoredTurn | None = None
    rewritten: HistoryVersion | None = None


async def write_turn(turn: Turn, targets: Sequence[TurnTarget], *, facts: TurnFacts | None = None) -> TurnOutcome:
    """Store ``turn`` in every target history, all of them or (taking back what it can) none.

    The first target decides: if it holds the turn id already, nothing is written and the stored
    turn is returned in ``earlier``.  A later target that holds it already (a mirror that stored
    it on an earlier try) is left as it is.  A :class:`HistoryError` on any target takes the turn
    back from the ones written before it (``undo_turn``) and propagates: nothing is stored.  A
    :class:`~contextledger.exceptions.TurnOutcomeUnknownError` propagates with nothing taken back:
    a retry with the same turn id completes the turn.

    A rewrite is made with the turn only when the turn goes to one history: ``undo_turn`` can
    take a turn back, not what a rewrite replaced.  With more targets the rewrites are not made
    (``rewritten`` is None) and the caller writes them after, if it still wants them.

    ``facts``, the user's facts the turn admits (:meth:`~contextledger.facts.FactsHost.prepare`),
    are written only if the turn is stored now: in the turn's own atomic step when the turn goes
    to one history that holds the facts too (:class:`FactsBesideTurns`: the built-in stores,
    with the fact store of the same kind on the same file, server or database), so that a crash
    leaves both or neither; otherwise right after the turn.
    """
    single = len(targets) == 1
    first = targets[0].history if single else None
    together = (
        facts is not None
        and isinstance(first, FactsBesideTurns)
        and _takes_facts(type(first))
        and first.beside(facts, turn.session_id)
    )
    done: list[HistoryProvider] = []
    rewritten: HistoryVersion | None = None
    for target in targets:
        try:
            stored, version = await _write_one(turn, target, with_rewrite=single, facts=facts if together else None)
        except HistoryError:
            for history in done:
                await history.undo_turn(turn.session_id, turn.turn_id, turn.messages)
            raise
        if not stored and not done:
            return TurnOutcome(False, await target.history.load_turn(turn.session_id, turn.turn_id))
        if stored:
            done.append(target.history)
            rewritten = version
    if facts is not None:
        if together:
            facts.confirm()
        else:
            await facts.alone()
    return TurnOutcome(True, None, rewritten)


@functools.cache
def _takes_facts(kind: type) -> bool:
    """Whether a history class's turn writes take ``facts=`` (a subclass of a built-in store that
    overrides one without it inherits ``beside`` all the same: it gets the facts after the turn)."""
    methods = [getattr(kind, name, None) for name in ("append_turn", "rewrite_and_append_turn")]
    return all(method is not None and "facts" in inspect.signature(method).parameters for method in methods)


def _ends_with(messages: Sequence[Message], tail: Sequence[Message]) -> bool:
    """Whether ``messages`` end with the very objects of ``tail`` (a reducer that left the turn as it is)."""
    size = len(tail)
    return len(messages) >= size and all(map(operator.is_, messages[len(messages) - size :], tail))


async def _write_one(
    turn: Turn, target: TurnTarget, *, with_rewrite: bool, facts: TurnFacts | None
) -> tuple[bool, HistoryVersion | None]:
    """Store the turn in one history, with ``facts`` in the same step if given (the history takes
    them: :class:`FactsBesideTurns`); (stored now, the version after the rewrite if one was made)."""
    history, kept, rewrite = target.history, target.kept, target.rewrite
    session, added = turn.session_id, turn.messages
    # Given only to a history that declared it takes them, so a provider of another's making
    # never sees an argument its protocol does not have.
    extra: dict[str, Any] = {} if facts is None else {"facts": facts}
    if not with_rewrite or rewrite is None or kept is None:
        stored = await history.append_turn(session, turn.turn_id, turn.inputs, turn.reply, **extra)
        if stored and kept is not None:
            # Right after the write, with no await in between: another writer's turn landing
            # first makes the store's version differ from the copy's, and the next sync reads.
            kept.appended(added)
        return stored, None
    if isinstance(history, TurnRewriter) and _ends_with(rewrite.messages, added):
        # The usual case: the reduction is of what came before the turn, so both go in one step.
        before = rewrite.messages[: len(rewrite.messages) - len(added)]
        written = await history.rewrite_and_append_turn(
            session, rewrite.start, before, kept.version, turn.turn_id, turn.inputs, turn.reply, **extra
        )
        if written.stored and written.version is not None:
            kept.rewritten(rewrite.start, rewrite.messages, written.version)
            return True, written.version
        if written.stored:
            kept.appended(added)  # the store had moved on: the copy's version no longer matches
        return written.stored, None
    # A store that cannot take both at once, or a reduction of the turn's own messages: the turn,
    # then the rewrite if nothing else wrote in between.  Between the two the history holds the
    # turn unreduced, which a later reduction takes up again.
    if not await history.append_turn(session, turn.turn_id, turn.inputs, turn.reply, **extra):
        return False, None
    kept.appended(added)
    try:
        version = await history.rewrite(session, rewrite.start, rewrite.messages, kept.version)
    except HistoryError:
        return True, None  # the turn is stored; a reduction not written is made again next turn
    if version is not None:
        kept.rewritten(rewrite.start, rewrite.messages, version)
    return True, version
