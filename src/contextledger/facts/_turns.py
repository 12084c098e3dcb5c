"""One turn of controlled facts around a model call: the ticket before, the extraction after a success.

Every way of putting facts around a model (our :class:`FactsProvider`, the manual
:func:`run_with_facts`, Agent Framework's context provider) tracks turns with this one class,
so they cannot differ on when a ticket is taken, what a failed call admits (nothing), or how a
refusal is reported (never raised into a run that succeeded, never silent).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from contextledger.exceptions import FactsError
from contextledger.facts._diagnostics import Diagnostic, diagnose
from contextledger.facts._records import Admission, Ticket
from contextledger.facts._store import FactMemory
from contextledger.facts._writers import FactWriter, extract

__all__ = ["FactsTurn", "TurnTracker"]


@dataclass(frozen=True, slots=True)
class FactsTurn:
    """What one turn did to the facts.

    Exactly one of ``admission`` and ``rejection`` is set once an extraction ran; both are
    ``None`` when the turn had no user text to extract from.  ``rejection`` is a
    :class:`FactRejectedError` (the message's declarations or the writer's proposal were
    refused) or a :class:`StaleTicketError` (a ``forget`` or a newer turn came first); either
    way nothing was admitted.  ``diagnostics`` says what became of every ``=`` in the user's
    text; ``response`` is the reply of the run (whatever type the runtime returns).
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


class TurnTracker:
    """Tickets taken before each model call and applied after it, one per run.

    ``begin(run, text)`` takes the turn's ticket from the run's external user text (``run`` is
    any object standing for that call: a run context, a session context); ``finish(run,
    response)``, called only after a successful call, has ``writer`` propose from that text and
    applies the proposal with the ticket.  Runs are kept apart, so one tracker serves several
    agents and concurrent runs; ``last_turn`` is the latest outcome.
    """

    def __init__(self, store: FactMemory, writer: FactWriter) -> None:
        self.store = store
        self.writer = writer
        self.last_turn: FactsTurn | None = None
        self._begun: weakref.WeakKeyDictionary[Any, tuple[str, Ticket | None, FactsError | None]] = (
            weakref.WeakKeyDictionary()
        )

    def begin(self, run: Any, text: str | None) -> None:
        if text is None:
            return
        try:
            self._begun[run] = (text, self.store.begin_turn(text), None)
        except FactsError as error:  # a message over the bound: the run goes on, the facts cannot change
            self._begun[run] = (text, None, error)

    def forget_run(self, run: Any) -> None:
        """Drop what ``begin`` kept for a run that failed (nothing is extracted from it)."""
        self._begun.pop(run, None)

    async def finish(self, run: Any, response: Any) -> FactsTurn | None:
        begun = self._begun.pop(run, None)
        if begun is None:
            return None
        text, ticket, problem = begun
        admission: Admission | None = None
        if ticket is not None:
            try:
                admission = await extract(self.store, self.writer, ticket)
            except FactsError as error:  # refused or stale: reported, never raised into a run that succeeded
                problem = error
        diagnostics = diagnose(text, admission=admission, rejection=problem, schema=self.store.schema)
        self.last_turn = FactsTurn(ticket, admission, problem, response, diagnostics)
        return self.last_turn
