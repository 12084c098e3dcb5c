"""One turn of controlled facts around a model call: the ticket before, the extraction after a success.

Every host that puts facts around a model (the agent runtime's provider and the manual helper,
Agent Framework's context provider, LangChain's middleware, the Agents SDK's runner, the proxy)
goes through one :class:`FactsHost`, so they cannot differ on when a ticket is taken, what a
failed call admits (nothing), which schema the writer reads (the store's own), how a refusal
is reported (never raised into a run that succeeded, never silent) or what the diagnostics say.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from contextledger._tracing import trace_written_admission
from contextledger.exceptions import ConfigurationError, FactsError, HistoryUnavailableError
from contextledger.facts._diagnostics import Diagnostic, diagnose
from contextledger.facts._postgres import PostgresFactStore
from contextledger.facts._records import Admission, Candidate, Ticket
from contextledger.facts._redis import RedisFactStore
from contextledger.facts._sqlite import SQLiteFactStore
from contextledger.facts._store import FactMemory, FactStore, LedgerStore
from contextledger.facts._writers import FactWriter, RuleWriter, StoreCall, directly, extract, propose
from contextledger.history._protocol import RedisTurnFacts

__all__ = [
    "FactsHost",
    "FactsTurn",
    "FactsWrite",
]

_T = TypeVar("_T")


class FactsWrite:
    """A turn's admission, ready to be written with the turn (see :meth:`FactsHost.prepare`).

    It is :class:`~contextledger.history._protocol.TurnFacts` for the built-in histories: the history
    runs the admission on the store's state in its own atomic step (``write_*``; on Redis, a
    plan its script checks and runs) and :func:`~contextledger.history.write_turn` confirms it
    once the turn is stored; ``outcome`` is then the :class:`Admission`, or the refusal (a
    rejected batch, a stale ticket) recorded in the trail.  A history that cannot hold the facts
    has them written right after the turn (``alone``).  A failure to write the facts with the
    turn fails the turn: nothing of either is written.
    """

    def __init__(
        self,
        store: FactMemory,
        ticket: Ticket,
        proposed: Sequence[Candidate] | FactsError,
        call: StoreCall,
        *,
        started_ns: int | None = None,
    ) -> None:
        self.store = store
        self.started_ns = time.time_ns() if started_ns is None else started_ns  # when the writer was asked
        self.ticket = ticket
        self.proposed = proposed
        self.outcome: Admission | FactsError | None = None
        self._call = call
        self._step = store.admission_step(ticket, proposed) if isinstance(store, LedgerStore) else None
        self._pending: Admission | FactsError | None = None

    def __repr__(self) -> str:
        return f"FactsWrite({self.store!r}, turn {self.ticket.number}, outcome={self.outcome!r})"

    @property
    def owner(self) -> str:
        return self.store.owner

    def lives_in(self, kind: str, where: str) -> bool:
        store = self.store
        if self._step is None:
            return False
        if kind == "memory":
            return isinstance(store, FactStore)
        if kind == "sqlite":
            return isinstance(store, SQLiteFactStore) and os.path.realpath(store.path) == os.path.realpath(where)
        if kind == "postgres":
            return isinstance(store, PostgresFactStore) and store.location == where
        return kind == "redis" and isinstance(store, RedisFactStore) and store.location == where

    def write_sqlite(self, connection: Any) -> None:
        assert isinstance(self.store, SQLiteFactStore)
        assert self._step is not None
        store, step = self.store, self._step
        self._pending = self._with_turn(lambda: store.write_in(connection, step))

    async def write_postgres(self, connection: Any, stored: Callable[[], Awaitable[bool]]) -> None:
        assert isinstance(self.store, PostgresFactStore)
        assert self._step is not None
        try:
            self._pending = await self.store.write_in(connection, self._step, stored)
        except FactsError as error:
            raise self._failed(error) from error

    async def plan_redis(self) -> RedisTurnFacts:
        assert isinstance(self.store, RedisFactStore)
        assert self._step is not None
        store, step = self.store, self._step
        try:
            plan, self._pending = await self._call(lambda: store.plan(step))
        except FactsError as error:
            raise self._failed(error) from error
        return plan

    def write_memory(self) -> None:
        assert isinstance(self.store, FactStore)
        assert self._step is not None
        store, step = self.store, self._step
        self._pending = self._with_turn(lambda: store._transact(step))

    def confirm(self) -> None:
        self.outcome = self._pending

    async def alone(self) -> None:
        """Write the admission after the turn, by itself (a refusal or an unreachable store is
        the outcome, never raised: the turn is stored)."""
        store, ticket, proposed = self.store, self.ticket, self.proposed
        try:
            if isinstance(proposed, FactsError):
                await self._call(lambda: store.reject(ticket, proposed))
                self.outcome = proposed
            else:
                self.outcome = await self._call(lambda: store.apply(ticket, proposed))
        except FactsError as error:
            self.outcome = error

    def _with_turn(self, write: Callable[[], _T]) -> _T:
        try:
            return write()
        except FactsError as error:
            raise self._failed(error) from error

    def _failed(self, error: FactsError) -> HistoryUnavailableError:
        return HistoryUnavailableError(
            f"the turn's facts could not be written with it, so neither was stored ({error}); run the turn again"
        )


@dataclass(frozen=True, slots=True)
class FactsTurn:
    """What one turn did to the facts.

    Exactly one of ``admission`` and ``rejection`` is set once an extraction ran; both are
    ``None`` when the turn had no user text to extract from, or while it waits for its
    extraction (then ``ticket`` is set).  ``rejection`` is a :class:`FactRejectedError` (the
    message's declarations or the writer's proposal were refused) or a
    :class:`StaleTicketError` (a ``forget`` or a newer turn came first); either way nothing was
    admitted.  ``diagnostics`` says what became of every ``=`` in the user's text;
    ``response`` is the reply of the run (whatever type the host returns).
    """

    ticket: Ticket | None
    admission: Admission | None = None
    rejection: FactsError | None = None
    response: Any = None
    diagnostics: tuple[Diagnostic, ...] = ()

    def describe(self) -> str:
        """What a person reads after the reply: one line per ``=``, then what was evicted."""
        if not self.diagnostics:
            if self.rejection is not None:
                return f"facts: {self.rejection}"
            return "facts: no '=' in this message; facts unchanged"
        lines = ["facts:"]
        lines.extend(f"  {diagnostic.describe()}" for diagnostic in self.diagnostics)
        if self.rejection is not None:
            lines.append("  nothing from this message was admitted; the facts are as they were (see mem)")
        elif self.admission is not None and self.admission.evicted:
            evicted = ", ".join(f"{fact.key}={fact.value!r}" for fact in self.admission.evicted)
            lines.append(f"  evicted {evicted} (the oldest) to stay within the limit")
        return "\n".join(lines)


class FactsHost:
    """The facts side of a host: the block before each call, the ticket before, the extraction after.

    ``writer`` defaults to a :class:`RuleWriter` on the store's own schema, so a custom
    :class:`FactSchema` holds on every host.  ``host`` names the caller in configuration errors.

    Two ways to keep a turn between its start and its end:

    - :meth:`begin` returns the started :class:`FactsTurn` and :meth:`finish` takes it back
      (a host that carries the turn itself: LangChain, the Agents SDK, the proxy);
    - :meth:`begin_run` / :meth:`finish_run` keep it per run object (a run or session context,
      held weakly, so a run that fails and is never finished leaves nothing behind); one host
      then serves several agents and concurrent runs.

    ``last_turn`` is the latest finished turn.  ``call`` is how the store is called (the proxy
    passes one that runs a store doing network I/O off the event loop).
    """

    def __init__(
        self,
        store: FactMemory,
        writer: FactWriter | None = None,
        *,
        host: str = "FactsHost",
        call: StoreCall | None = None,
    ) -> None:
        # Our own stores first: before Python 3.12 a protocol check reads every property, and the
        # epoch and turn of a store on a server are a round trip each.
        if not isinstance(store, LedgerStore) and not isinstance(store, FactMemory):
            raise ConfigurationError(
                f"{host} needs a fact store (FactStore, SQLiteFactStore or RedisFactStore), got {store!r}"
            )
        if writer is not None and not isinstance(writer, FactWriter):
            raise ConfigurationError(f"writer must have async propose(user_text), got {writer!r}")
        self.store = store
        self.writer: FactWriter = writer if writer is not None else RuleWriter(store.schema)
        self.call = call
        self.last_turn: FactsTurn | None = None
        self._runs: weakref.WeakKeyDictionary[Any, FactsTurn] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"FactsHost(store={self.store!r}, writer={self.writer!r})"

    def block(self) -> str:
        """The facts block for the next model call (labelled, quoted, unverified user data)."""
        return self.store.to_prompt_block()

    def begin(self, text: str | None) -> FactsTurn | None:
        """Start the turn of the user's own ``text`` (``None``: nothing to extract from).

        A message the store refuses to start (over the schema's bound) gives a finished turn
        carrying the refusal and its diagnostics: the run goes on, the facts cannot change.
        """
        if text is None:
            return None
        try:
            return FactsTurn(self.store.begin_turn(text))
        except FactsError as error:
            return FactsTurn(None, rejection=error, diagnostics=self._diagnose(text, None, error))

    async def finish(self, begun: FactsTurn | None, response: Any = None) -> FactsTurn | None:
        """After a successful call: extract with ``begun``'s ticket, never raising a refusal.

        Returns the finished turn (also kept on ``last_turn``), or ``None`` for no turn.
        """
        if begun is None:
            return None
        if begun.ticket is None:
            finished = replace(begun, response=response)
        else:
            admission: Admission | None = None
            problem: FactsError | None = None
            try:
                admission = await extract(self.store, self.writer, begun.ticket, call=self.call)
            except FactsError as error:  # refused or stale: reported, never raised into a run that succeeded
                problem = error
            diagnostics = self._diagnose(begun.ticket.user_text, admission, problem)
            finished = FactsTurn(begun.ticket, admission, problem, response, diagnostics)
        self.last_turn = finished
        return finished

    async def prepare(self, begun: FactsTurn | None) -> FactsWrite | None:
        """The end of ``begun`` made ready to be written with its turn
        (:func:`~contextledger.history.write_turn`'s ``facts``): the writer proposes now, before
        the turn is stored, and the admission is written in the turn's own atomic step where the
        history holds the facts too, so that a crash leaves both or neither.  :meth:`settled`
        tells what it did.  ``None`` when there is nothing to admit (no turn, or one refused at
        its start)."""
        if begun is None or begun.ticket is None:
            return None
        call: StoreCall = self.call if self.call is not None else directly
        store = self.store
        started = time.time_ns()
        if isinstance(store, (SQLiteFactStore, PostgresFactStore)):
            await call(store.prepare_tables)  # so that the history's own connection finds them
        proposed = await propose(self.writer, begun.ticket)
        return FactsWrite(store, begun.ticket, proposed, call, started_ns=started)

    def settled(self, write: FactsWrite | None, response: Any = None) -> FactsTurn | None:
        """What :meth:`prepare`'s write did once its turn was written: a finished turn (also
        kept on ``last_turn``), or ``None`` when nothing was written (the turn was not stored
        now, as a retried one is not)."""
        if write is None or write.outcome is None:
            return None
        admission = write.outcome if isinstance(write.outcome, Admission) else None
        problem = write.outcome if isinstance(write.outcome, FactsError) else None
        trace_written_admission(self.writer, write.started_ns, admission, problem)
        diagnostics = self._diagnose(write.ticket.user_text, admission, problem)
        finished = FactsTurn(write.ticket, admission, problem, response, diagnostics)
        self.last_turn = finished
        return finished

    def begin_run(self, run: Any, text: str | None) -> None:
        """:meth:`begin`, kept for ``run`` (any object standing for one call) until :meth:`finish_run`."""
        begun = self.begin(text)
        if begun is not None:
            self._runs[run] = begun

    def drop_run(self, run: Any) -> None:
        """Forget what :meth:`begin_run` kept for a run that failed (nothing is extracted from it)."""
        self._runs.pop(run, None)

    async def finish_run(self, run: Any, response: Any = None) -> FactsTurn | None:
        """:meth:`finish` for the turn :meth:`begin_run` kept for ``run``."""
        return await self.finish(self._runs.pop(run, None), response)

    def _diagnose(self, text: str, admission: Admission | None, problem: FactsError | None) -> tuple[Diagnostic, ...]:
        return diagnose(text, admission=admission, rejection=problem, schema=self.store.schema)
