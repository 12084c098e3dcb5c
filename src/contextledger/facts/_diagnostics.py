"""What became of every ``=`` in a message: the answer a user (or the lab) reads after each turn.

A message can hold declarations, prose that merely contains ``=``, and declarations that were
refused; people need to know which was which without reading the parser.  :func:`diagnose`
gives one :class:`Diagnostic` per ``=``, in the order they appear, from the same reading the
store admits by, and from the outcome of the extraction (an :class:`Admission` or the error
that refused it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contextledger.exceptions import FactsError, StaleTicketError
from contextledger.facts._parse import Reading, read_message
from contextledger.facts._records import Admission
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema

__all__ = ["Diagnostic", "Outcome", "diagnose", "diagnose_reading"]

Outcome = Literal["admitted", "replaced", "rejected", "prose", "pending"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """What became of one ``=`` of a user message.

    ``position``
        the offset of the ``=`` in the message.
    ``outcome``
        ``admitted`` (the declaration is now the fact for ``key``), ``replaced`` (a later
        declaration of the same key in the message won), ``rejected`` (refused, see ``reason``;
        nothing from the message was admitted), ``prose`` (not a declaration, see ``reason``),
        or ``pending`` (a valid declaration that no extraction has applied yet: what
        :func:`diagnose` says when given no outcome).
    ``reason``
        why, in words; it names keys and lengths but never quotes a value.
    ``key``, ``value``, ``evidence``
        the declaration (key in lower case, value trimmed, evidence from the key on), or
        ``None`` for prose.
    ``segment``
        the segment (between ``;`` and line breaks) the ``=`` is in, trimmed.
    """

    position: int
    outcome: Outcome
    reason: str
    key: str | None = None
    value: str | None = None
    evidence: str | None = None
    segment: str = ""

    def describe(self) -> str:
        """One line for a person."""
        if self.key is None or self.outcome == "prose":
            shown = self.segment if len(self.segment) <= 60 else self.segment[:57] + "..."
            return f"'=' at {self.position} in {shown!r}: {self.reason}"
        return f"{self.outcome} {self.key}={self.value!r} (evidence {self.evidence!r}): {self.reason}"


def _refusal(error: FactsError, reading: Reading) -> str:
    if isinstance(error, StaleTicketError):
        return "not admitted: the turn is stale (a forget or a newer turn came first), so nothing was written"
    if reading.message_problems:
        return "not admitted: " + "; ".join(reading.message_problems)
    invalid = [sign for sign in reading.signs if sign.kind == "invalid"]
    if invalid:
        names = ", ".join(repr(sign.key) for sign in invalid)
        return (
            f"not admitted: the declaration of {names} in this message was refused, and a message's declarations "
            "are admitted together or not at all"
        )
    return "not admitted: the writer's proposal did not match the message's declarations word for word"


def diagnose_reading(
    reading: Reading, *, admission: Admission | None = None, rejection: FactsError | None = None
) -> tuple[Diagnostic, ...]:
    """:func:`diagnose` on a message already read."""
    admitted = {} if admission is None else {fact.key: fact for fact in admission.admitted}
    replaced = {} if admission is None else {fact.key: fact for fact in admission.replaced}
    evicted = [] if admission is None else [fact.key for fact in admission.evicted]
    found: list[Diagnostic] = []
    for sign in reading.signs:
        outcome: Outcome
        if sign.kind == "prose":
            outcome, reason = "prose", sign.reason
        elif sign.kind == "replaced":
            outcome, reason = "replaced", sign.reason
        elif sign.kind == "invalid":
            outcome, reason = "rejected", sign.reason
        elif rejection is not None:
            outcome, reason = "rejected", _refusal(rejection, reading)
        elif sign.key in admitted:
            fact = admitted[sign.key]
            outcome = "admitted"
            previous = replaced.get(sign.key)
            reason = "a new fact" if previous is None else f"corrects the value admitted at turn {previous.turn}"
            reason += f", at turn {fact.turn}"
            if evicted:
                reason += f"; {', '.join(evicted)} evicted (the oldest) to stay within the limit"
        elif admission is not None:
            outcome, reason = "rejected", "not admitted: the writer proposed no fact for this declaration"
        else:
            outcome, reason = "pending", "a valid declaration, not applied yet"
        found.append(Diagnostic(sign.position, outcome, reason, sign.key, sign.value, sign.evidence, sign.segment))
    return tuple(found)


def diagnose(
    text: str,
    *,
    admission: Admission | None = None,
    rejection: FactsError | None = None,
    schema: FactSchema = DEFAULT_SCHEMA,
) -> tuple[Diagnostic, ...]:
    """One :class:`Diagnostic` per ``=`` of ``text``, in order.

    Give the extraction's outcome: the :class:`Admission` it returned, or the
    :class:`FactsError` that refused it.  Given neither, valid declarations are ``pending``.
    A message without ``=`` gives ``()``.
    """
    return diagnose_reading(read_message(text, schema), admission=admission, rejection=rejection)
