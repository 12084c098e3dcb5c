"""The host's side of an extraction: the checks a batch must pass, and what admitting it does.

Every store calls these functions, so the in-memory, SQLite and Redis stores cannot disagree on
what is admitted, what a correction replaces or which fact is evicted.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from contextledger.exceptions import FactRejectedError
from contextledger.facts._parse import Declaration, check_user_text, declarations, rejection
from contextledger.facts._records import Admission, Candidate, Fact, Ticket
from contextledger.facts._schema import FactSchema

__all__ = ["check_batch", "in_order", "settle"]


def _quotes_declaration(text: str, evidence: str, declaration: Declaration) -> bool:
    """Whether some occurrence of ``evidence`` in ``text`` covers the declaration's value.

    Being a substring that contains the value is not enough: in ``module=Billing;
    customer=Billing Ltd`` the quote ``customer=Billing Ltd`` contains ``Billing`` but is
    evidence for another declaration.
    """
    lowest = max(0, declaration.value_end - len(evidence))
    return text.find(evidence, lowest, declaration.value_start + len(evidence)) != -1


def check_batch(ticket: Ticket, candidates: object, schema: FactSchema) -> tuple[Candidate, ...]:
    """The batch, keys in lower case, if it is exactly the message's declarations; otherwise
    :class:`FactRejectedError` naming every problem found (never only the first)."""
    if not isinstance(ticket, Ticket):
        raise FactRejectedError(
            f"apply() needs the Ticket that begin_turn() returned, got {type(ticket).__name__}; "
            "nothing was admitted and there is no fallback",
            ("the ticket is not a Ticket",),
        )
    what = f"the extraction for turn {ticket.number}"
    problems = check_user_text(ticket.user_text, schema)
    if problems:
        raise rejection(problems, what=what)
    try:
        declared = declarations(ticket.user_text, schema)
    except FactRejectedError as error:
        raise rejection(list(error.problems), what=what) from None
    if not isinstance(candidates, (list, tuple)):
        raise rejection(
            [f"candidates must be a list or tuple of Candidate, got {type(candidates).__name__}"], what=what
        )
    text = ticket.user_text
    if len(candidates) > schema.max_facts:
        problems.append(
            f"{len(candidates)} candidates were proposed, over the limit of {schema.max_facts} per extraction"
        )
    seen: set[str] = set()
    accepted: list[Candidate] = []
    for number, candidate in enumerate(candidates, 1):
        if not isinstance(candidate, Candidate):
            problems.append(f"candidate {number} is a {type(candidate).__name__}, not a Candidate")
            continue
        key, value, evidence = candidate.key, candidate.value, candidate.evidence
        if not isinstance(key, str) or key.lower() not in schema.keys:
            problems.append(f"candidate {number} has key {key!r}, which is not an allowed key")
            continue
        key = key.lower()
        label = f"candidate {number} ({key})"
        if key in seen:
            problems.append(f"{label} is a duplicate: the key {key!r} was already proposed in this batch")
            continue
        seen.add(key)
        faults_before = len(problems)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{label} has an empty or non-text value {value!r}")
        elif len(value) > schema.max_value_chars:
            problems.append(f"{label} has a {len(value)}-character value, over the limit of {schema.max_value_chars}")
        if not isinstance(evidence, str) or not evidence.strip():
            problems.append(f"{label} has no evidence: it must quote the user's declaration exactly")
        elif len(evidence) > schema.max_evidence_chars:
            problems.append(
                f"{label} has {len(evidence)} characters of evidence, over the limit of {schema.max_evidence_chars}"
            )
        elif evidence not in text:
            problems.append(f"{label}: the evidence {evidence!r} is not an exact quote of the user message")
        elif isinstance(value, str) and value not in evidence:
            problems.append(f"{label}: the evidence {evidence!r} does not contain the value {value!r}")
        declaration = declared.get(key)
        if declaration is None:
            problems.append(f"{label}: the user message declares no {key!r}; a writer may not add a key")
            continue
        if value != declaration.value:
            problems.append(
                f"{label}: the value {value!r} is not what the user wrote ({declaration.value!r}); "
                "no paraphrase or semantic guess is admitted"
            )
        elif len(problems) == faults_before and not _quotes_declaration(text, evidence, declaration):
            problems.append(
                f"{label}: the evidence {evidence!r} quotes another part of the message, not the declaration "
                f"{declaration.evidence!r}"
            )
        accepted.append(Candidate(key, value, evidence))
    dropped = [key for key in declared if key not in seen]
    if dropped:
        problems.append(
            f"the user declared {', '.join(dropped)} but no candidate carries it; a writer may not drop a key"
        )
    if len(candidates) != len(declared):
        problems.append(
            f"{len(candidates)} candidates for {len(declared)} declarations; the batch must be exactly the "
            "message's key=value declarations"
        )
    if problems:
        raise rejection(problems, what=what)
    return tuple(accepted)


def settle(
    current: Mapping[str, Fact],
    batch: tuple[Candidate, ...],
    turn: int,
    recorded_at: datetime,
    schema: FactSchema,
    expires_at: datetime | None = None,
) -> tuple[dict[str, Fact], Admission]:
    """The facts after admitting a checked batch at ``turn``, and what changed.

    A candidate replaces any fact with its key; then, while more than ``schema.max_facts`` remain,
    the fact with the oldest turn goes, the smallest key first among equals.  The batch itself is
    never evicted: it is the newest turn, and holds at most ``schema.max_facts`` keys.
    """
    facts = dict(current)
    admitted: list[Fact] = []
    replaced: list[Fact] = []
    for candidate in batch:
        fact = Fact(candidate.key, candidate.value, candidate.evidence, turn, recorded_at, expires_at)
        previous = facts.get(candidate.key)
        if previous is not None:
            replaced.append(previous)
        facts[candidate.key] = fact
        admitted.append(fact)
    written = {candidate.key for candidate in batch}
    evicted: list[Fact] = []
    while len(facts) > schema.max_facts:
        oldest = min((fact for fact in facts.values() if fact.key not in written), key=lambda f: (f.turn, f.key))
        del facts[oldest.key]
        evicted.append(oldest)
    return facts, Admission(tuple(admitted), tuple(evicted), tuple(replaced))


def in_order(facts: Mapping[str, Fact]) -> list[Fact]:
    """The documented order of ``facts()``: oldest turn first, then by key, which is also the
    order in which they would be evicted."""
    return sorted(facts.values(), key=lambda fact: (fact.turn, fact.key))
