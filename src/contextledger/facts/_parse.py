"""Reading the ``key=value`` declarations a user wrote, exactly as SPEC §8 defines them.

This is the single reading of a message the whole memory trusts: the rule writer proposes it,
and the host compares every writer's proposal against it, so a model writer can never admit
more, less or other than what the user wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contextledger.exceptions import FactRejectedError
from contextledger.facts._records import (
    ALLOWED_KEYS,
    MAX_EVIDENCE_CHARS,
    MAX_FACTS,
    MAX_MESSAGE_CHARS,
    MAX_VALUE_CHARS,
    Candidate,
)

__all__ = ["Declaration", "check_user_text", "declarations", "parse_assertions", "rejection"]

# Declarations end at a semicolon or a line break; nothing else separates them.
_SEPARATOR = re.compile(r";|\r\n|\r|\n")
_ALLOWED = ", ".join(sorted(ALLOWED_KEYS))


@dataclass(frozen=True, slots=True)
class Declaration:
    """A declaration that won (the last of its key), with where its value sits in the message,
    so the host can tell evidence quoting this declaration from evidence quoting another."""

    key: str
    value: str
    evidence: str
    value_start: int
    value_end: int

    def candidate(self) -> Candidate:
        return Candidate(self.key, self.value, self.evidence)


def rejection(problems: list[str], *, what: str) -> FactRejectedError:
    """The one way every refusal is worded: what was refused, every problem, and that nothing
    was admitted with no fallback, so a user never wonders whether part of it went through."""
    listed = "; ".join(f"({number}) {problem}" for number, problem in enumerate(problems, 1))
    message = (
        f"Rejected {what}: nothing was admitted, the previous facts are unchanged, and there is no fallback. {listed}"
    )
    return FactRejectedError(message, tuple(problems))


def check_user_text(text: object) -> list[str]:
    """Problems with a user message as a whole (its type and the 4096-character bound)."""
    if not isinstance(text, str):
        return [f"the user message must be a str, got {type(text).__name__}"]
    if len(text) > MAX_MESSAGE_CHARS:
        return [
            f"the user message is {len(text)} characters long, over the limit of {MAX_MESSAGE_CHARS}; "
            "send a shorter message (it is never truncated)"
        ]
    return []


def declarations(text: object) -> dict[str, Declaration]:
    """The message's winning declarations by key, in the order they were written.

    Raises :class:`FactRejectedError` listing every problem when any declaration is invalid
    (unknown key, empty value, a bound exceeded, more than five keys).
    """
    problems = check_user_text(text)
    if problems:
        raise rejection(problems, what="the message")
    assert isinstance(text, str)
    found: dict[str, Declaration] = {}
    position = 0
    for separator in [*_SEPARATOR.finditer(text), None]:
        end = separator.start() if separator is not None else len(text)
        segment_start, segment = position, text[position:end]
        position = separator.end() if separator is not None else len(text)
        raw_key, equals, raw_value = segment.partition("=")
        key = raw_key.strip()
        if not equals or not key.isidentifier():
            continue  # prose, a question, or a formula: not a declaration
        evidence = segment.strip()
        value = raw_value.strip()
        shown = evidence if len(evidence) <= 60 else evidence[:57] + "..."
        if key.lower() not in ALLOWED_KEYS:
            problems.append(f"{key!r} in {shown!r} is not an allowed key; the allowed keys are {_ALLOWED}")
            continue
        if not value:
            problems.append(f"{shown!r} has an empty value; write {key.lower()}=VALUE or leave the key out")
            continue
        if len(value) > MAX_VALUE_CHARS:
            problems.append(
                f"the value of {key.lower()!r} is {len(value)} characters long, over the limit of {MAX_VALUE_CHARS}"
            )
        if len(evidence) > MAX_EVIDENCE_CHARS:
            problems.append(
                f"the declaration of {key.lower()!r} is {len(evidence)} characters long, over the evidence limit of "
                f"{MAX_EVIDENCE_CHARS}"
            )
        value_start = segment_start + len(raw_key) + 1 + (len(raw_value) - len(raw_value.lstrip()))
        normalized = key.lower()
        found.pop(normalized, None)  # the last declaration of a key wins, and takes its place in the order
        found[normalized] = Declaration(normalized, value, evidence, value_start, value_start + len(value))
    if len(found) > MAX_FACTS:
        problems.append(
            f"the message declares {len(found)} different keys ({', '.join(found)}), over the limit of {MAX_FACTS} "
            "per message; declare at most five at a time"
        )
    if problems:
        raise rejection(problems, what="the message's declarations")
    return found


def parse_assertions(text: str) -> tuple[Candidate, ...]:
    """The ``key=value`` declarations of one user message, as candidates.

    Declarations are separated by ``;`` or a line break and split on the first ``=``; key and
    value are trimmed, inner spaces kept; keys are matched case-insensitively and returned in
    lower case; the last declaration of a key wins; each candidate's evidence is its
    declaration exactly as written (trimmed).  A segment without ``=``, or whose left side is
    not an identifier, is prose and ignored.  A message with no declaration gives ``()``.

    Raises :class:`FactRejectedError` (with every problem in ``.problems``) when a declaration
    names a key outside :data:`ALLOWED_KEYS`, has an empty value, or a bound is exceeded:
    then nothing from the message may be admitted.
    """
    return tuple(declaration.candidate() for declaration in declarations(text).values())
