"""Reading the ``key=value`` declarations a user wrote, as design.md#declarations defines them.

This is the single reading of a message the whole memory trusts: the rule writer proposes it,
the host compares every writer's proposal against it, ``forget`` finds declarations with it,
and every ``=`` of a message gets its explanation from it.

A message is cut into segments at ``;`` and line breaks.  In each segment that holds an ``=``:

- a segment that starts with an identifier (``database=SQL Server 2022``) is a declaration of
  that key, split on its first ``=``; a key outside the schema or an empty value makes the
  whole message's declarations invalid.  A segment with several ``=`` that does not start with
  an allowed key (``level=info module=billing``, a pasted log line) is prose;
- otherwise the segment is prose, unless it holds exactly one ``=`` and the word right before
  it is an allowed key that follows the start of the segment, a space, ``:``, ``,`` or ``(``:
  then the declaration starts at that word (``Sorry: database=SQL Server 2022``).  Any other
  ``=`` after prose (an unknown word, a URL, a pasted log line) stays prose and refuses nothing;
- once a segment has begun a declaration of an allowed key (either way above), an allowed key
  right after a ``,`` starts the next one: ``database=Postgres, module=Billing`` declares two
  keys, as a person reading it would.  A ``,`` before any other word stays in the value
  (``constraint=read only, no writes``);
- an allowed key and its ``=`` after a space inside such a declaration's value
  (``module=Billing database=SQL Server 2022``) is never read as part of the value nor as a
  second declaration: both are refused with the whole message, and the reason names ``;`` and
  a line break as the separators.  Storing one of them would keep a value the user plainly
  meant as two facts; guessing the cut would admit what nobody wrote.  Any other word before
  that ``=`` stays in the value (``constraint=x y=z``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal

from contextledger.exceptions import FactRejectedError
from contextledger.facts._records import Candidate
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema

__all__ = [
    "Declaration",
    "Reading",
    "Sign",
    "check_user_text",
    "declarations",
    "parse_assertions",
    "read_message",
    "rejection",
]

# Declarations end at a semicolon or a line break; nothing else separates them.
_SEPARATOR = re.compile(r";|\r\n|\r|\n")
_WORD_BEFORE = re.compile(r"[A-Za-z0-9_]+\Z")
_AFTER_PROSE = frozenset(" \t:,(")
_NEXT_DECLARATION = re.compile(r",\s*([A-Za-z][A-Za-z0-9_]*)\s*=")
_RUN_ON_DECLARATION = re.compile(r"\s([A-Za-z][A-Za-z0-9_]*)\s*=")

SignKind = Literal["declaration", "replaced", "invalid", "prose"]


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


@dataclass(frozen=True, slots=True)
class Sign:
    """How one ``=`` of a message reads: the winning ``declaration`` of its key, a declaration
    ``replaced`` by a later one of the same key, an ``invalid`` declaration (which refuses the
    message), or ``prose``.  ``reason`` never quotes a value, so it may be kept in a review trail."""

    position: int
    kind: SignKind
    segment: str
    reason: str = ""
    key: str | None = None
    value: str | None = None
    evidence: str | None = None
    start: int = -1
    """Where ``evidence`` starts in the message (-1 for prose)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """A message read once: every ``=`` explained, the winning declarations by key (in the order
    written), and the problems that make its declarations invalid (none when they are valid)."""

    signs: tuple[Sign, ...]
    declarations: dict[str, Declaration] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    message_problems: tuple[str, ...] = ()


def rejection(problems: list[str], *, what: str) -> FactRejectedError:
    """The one way every refusal is worded: what was refused, every problem, and that nothing
    was admitted with no fallback, so a user never wonders whether part of it went through."""
    listed = "; ".join(f"({number}) {problem}" for number, problem in enumerate(problems, 1))
    message = (
        f"Rejected {what}: nothing was admitted, the previous facts are unchanged, and there is no fallback. {listed}"
    )
    return FactRejectedError(message, tuple(problems))


def check_user_text(text: object, schema: FactSchema = DEFAULT_SCHEMA) -> list[str]:
    """Problems with a user message as a whole (its type and the schema's message bound)."""
    if not isinstance(text, str):
        return [f"the user message must be a str, got {type(text).__name__}"]
    if len(text) > schema.max_message_chars:
        return [
            f"the user message is {len(text)} characters long, over the limit of {schema.max_message_chars}; "
            "send a shorter message (it is never truncated)"
        ]
    return []


def _bounds(key: str, value: str, evidence: str, schema: FactSchema) -> str:
    if not value:
        return f"the declaration of {key!r} has an empty value; write {key}=VALUE or leave the key out"
    if len(value) > schema.max_value_chars:
        return f"the value of {key!r} is {len(value)} characters long, over the limit of {schema.max_value_chars}"
    if len(evidence) > schema.max_evidence_chars:
        return (
            f"the declaration of {key!r} is {len(evidence)} characters long, over the evidence limit of "
            f"{schema.max_evidence_chars}"
        )
    return ""


def _read_segment(text: str, start: int, segment: str, schema: FactSchema) -> list[tuple[Sign, int]]:
    """The signs of one segment, each with the offset of its value (-1 when not a declaration).

    A segment that begins a declaration of an allowed key is cut before every ``, KEY=`` naming
    another allowed key, and each piece is read as a segment of its own.
    """
    commas = [found.start() for found in _NEXT_DECLARATION.finditer(segment) if found.group(1).lower() in schema.keys]
    if commas:
        first = _read_run_on(text, start, segment[: commas[0]], schema)
        if first and first[0][0].kind != "prose" and first[0][0].key in schema.keys:
            for begin, end in zip(commas, [*commas[1:], len(segment)]):
                first.extend(_read_run_on(text, start + begin + 1, segment[begin + 1 : end], schema))
            return first
    return _read_run_on(text, start, segment, schema)


def _read_run_on(text: str, start: int, piece: str, schema: FactSchema) -> list[tuple[Sign, int]]:
    """The signs of a piece, refusing a declaration whose value holds another allowed ``KEY=`` after a
    space, and that ``KEY=`` with it.

    ``module=Billing database=SQL Server 2022`` is two facts to its writer; kept as one value it
    would put a wrong module in the memory, and cut by a guess it would admit what nobody wrote.
    Each piece is read on its own, so the diagnostics (and ``forget``) know both declarations.
    """
    read = _read_piece(text, start, piece, schema)
    if not read or read[0][0].kind == "prose" or read[0][0].key not in schema.keys:
        return read
    after_key = piece.index("=") + 1
    cuts = [
        found.start() + 1
        for found in _RUN_ON_DECLARATION.finditer(piece, after_key)
        if found.group(1).lower() in schema.keys
    ]
    if not cuts:
        return read
    read = []
    for begin, end in zip([0, *cuts], [*cuts, len(piece)]):
        read.extend(_read_piece(text, start + begin, piece[begin:end], schema))
    keys = [str(sign.key) for sign, _ in read if sign.kind != "prose"]
    refused: list[tuple[Sign, int]] = []
    index = -1
    for sign, value_start in read:
        if sign.kind == "prose":
            refused.append((sign, value_start))
            continue
        index += 1
        if sign.kind == "invalid":
            refused.append((sign, -1))
            continue
        key = keys[index]
        before, after = (key, keys[1]) if index == 0 else (keys[index - 1], key)
        if index == 0:
            reason = f"the value of {key!r} holds '{after}=' after a space"
        else:
            reason = f"'{key}=' follows the value of {before!r} after only a space"
        reason += f": write two declarations separated by ';' or a line break ({before}=...; {after}=...)"
        refused.append((dataclasses.replace(sign, kind="invalid", reason=reason), -1))
    return refused


def _read_piece(text: str, start: int, segment: str, schema: FactSchema) -> list[tuple[Sign, int]]:
    """The signs of a segment (or a piece of one cut at a comma), read by the rules above."""
    equals = [start + offset for offset, character in enumerate(segment) if character == "="]
    if not equals:
        return []
    raw_key, _, raw_value = segment.partition("=")
    shown = segment.strip()
    key = raw_key.strip()
    if key.isidentifier() and (len(equals) == 1 or key.lower() in schema.keys):
        name = key.lower()
        value = raw_value.strip()
        evidence = shown
        begins = start + len(segment) - len(segment.lstrip())
        rest = [
            Sign(p, "prose", shown, f"part of the value of {name!r}: a declaration splits on its first '='")
            for p in equals[1:]
        ]
        if name not in schema.keys:
            reason = f"{key!r} is not an allowed key; the allowed keys are {schema.listed_keys}"
            sign = Sign(equals[0], "invalid", shown, reason, name, value, evidence, begins)
            return [(sign, -1), *((s, -1) for s in rest)]
        problem = _bounds(name, value, evidence, schema)
        value_start = start + len(raw_key) + 1 + (len(raw_value) - len(raw_value.lstrip()))
        kind: SignKind = "invalid" if problem else "declaration"
        sign = Sign(equals[0], kind, shown, problem, name, value, evidence, begins)
        return [(sign, value_start), *((s, -1) for s in rest)]
    if len(equals) > 1:
        reason = (
            f"prose: this segment holds {len(equals)} '=' signs (a log line or an expression); a declaration after "
            "prose must be its segment's only '='"
        )
        return [(Sign(position, "prose", shown, reason), -1) for position in equals]
    word = _WORD_BEFORE.search(raw_key)
    if word is None:
        return [(Sign(equals[0], "prose", shown, "prose: no word right before '='"), -1)]
    name = word.group()
    before = raw_key[word.start() - 1] if word.start() > 0 else ""
    if not name[0].isalpha():
        reason = f"prose: the word {name!r} before '=' does not start with a letter"
    elif before and before not in _AFTER_PROSE:
        reason = f"prose: the word {name!r} before '=' follows {before!r}, as in a URL, a path or an expression"
    elif name.lower() not in schema.keys:
        reason = f"prose: {name!r} is not an allowed key, and an unknown word after prose refuses nothing"
    else:
        key_start = start + word.start()
        value = raw_value.strip()
        evidence = text[key_start : start + len(segment)].strip()
        problem = _bounds(name.lower(), value, evidence, schema)
        value_start = start + len(raw_key) + 1 + (len(raw_value) - len(raw_value.lstrip()))
        kind = "invalid" if problem else "declaration"
        return [(Sign(equals[0], kind, shown, problem, name.lower(), value, evidence, key_start), value_start)]
    return [(Sign(equals[0], "prose", shown, reason), -1)]


def read_message(text: str, schema: FactSchema = DEFAULT_SCHEMA) -> Reading:
    """Read ``text`` once: every ``=`` with what it is and why, and the declarations that win.

    Never raises for what a user wrote; a message over the schema's bound is still read, and
    its problem is in ``message_problems``.
    """
    message_problems = check_user_text(text, schema)
    if not isinstance(text, str):
        return Reading((), {}, tuple(message_problems), tuple(message_problems))
    read: list[tuple[Sign, int]] = []
    position = 0
    for separator in [*_SEPARATOR.finditer(text), None]:
        end = separator.start() if separator is not None else len(text)
        read.extend(_read_segment(text, position, text[position:end], schema))
        position = separator.end() if separator is not None else len(text)
    winners: dict[str, int] = {}
    for index, (sign, _) in enumerate(read):
        if sign.kind in ("declaration", "invalid") and sign.key is not None:
            winners[sign.key] = index
    signs: list[Sign] = []
    found: dict[str, Declaration] = {}
    problems: list[str] = []
    for index, (sign, value_start) in enumerate(read):
        key = sign.key
        if sign.kind == "invalid":
            problems.append(sign.reason)
        if key is not None and sign.kind in ("declaration", "invalid") and winners[key] != index:
            reason = f"replaced by a later declaration of {key!r} in this message (the last one wins)"
            signs.append(
                Sign(sign.position, "replaced", sign.segment, reason, key, sign.value, sign.evidence, sign.start)
            )
            continue
        signs.append(sign)
        if sign.kind == "declaration" and key is not None and sign.value is not None and sign.evidence is not None:
            found.pop(key, None)  # the last declaration of a key wins, and takes its place in the order
            found[key] = Declaration(key, sign.value, sign.evidence, value_start, value_start + len(sign.value))
    keys = list(winners)
    if len(keys) > schema.max_facts:
        message_problems.append(
            f"the message declares {len(keys)} different keys ({', '.join(keys)}), over the limit of "
            f"{schema.max_facts} per message; declare at most {schema.max_facts} at a time"
        )
    return Reading(tuple(signs), found, tuple(problems + message_problems), tuple(message_problems))


def declarations(text: object, schema: FactSchema = DEFAULT_SCHEMA) -> dict[str, Declaration]:
    """The message's winning declarations by key, in the order they were written.

    Raises :class:`FactRejectedError` listing every problem when any declaration is invalid
    (unknown key, empty value, two declarations run together, a bound exceeded, more keys than
    the schema allows).
    """
    problems = check_user_text(text, schema)
    if problems:
        raise rejection(problems, what="the message")
    assert isinstance(text, str)
    reading = read_message(text, schema)
    if reading.problems:
        raise rejection(list(reading.problems), what="the message's declarations")
    return reading.declarations


def parse_assertions(text: str, schema: FactSchema = DEFAULT_SCHEMA) -> tuple[Candidate, ...]:
    """The ``key=value`` declarations of one user message, as candidates.

    Declarations are separated by ``;`` or a line break and split on the first ``=``; key and
    value are trimmed, inner spaces kept; keys are matched case-insensitively and returned in
    lower case; the last declaration of a key wins.  A declaration may follow prose in its
    segment (``Sorry, I was wrong: database=SQL Server 2022``) when the word right before its
    ``=`` is an allowed key (see the module docstring); its evidence starts at the key.  Each
    candidate's evidence is its declaration exactly as written (trimmed).  A message with no
    declaration gives ``()``.

    Raises :class:`FactRejectedError` (with every problem in ``.problems``) when a declaration
    names a key outside the schema, has an empty value, holds another allowed ``KEY=`` after a
    space (two declarations run together), or a bound is exceeded: then nothing from the
    message may be admitted.
    """
    return tuple(declaration.candidate() for declaration in declarations(text, schema).values())
