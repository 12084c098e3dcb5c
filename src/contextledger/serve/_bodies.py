"""Stateless bodies read apart: a JSON object body with its messages array split into each
message's bytes, and what the proxy keeps of a body for the next one of its conversation.

A stateless client sends its whole history on every call, and nearly all of it was in its
previous call too.  :func:`split_array` finds where each item of the array starts and ends
(``msgspec`` only scans; the rest of the body is read strictly) so each message can be looked up
by its bytes and forwarded as the bytes that came in (:func:`joined`).  :func:`continued` splits a
body that starts as a kept one did and only adds items, comparing what it repeats in place and
scanning only what it adds, and :class:`BodyMemo` keeps with a body what its messages made, for
the same messages again.  Every answer is what reading the body alone gives.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any, Generic, TypeVar

from contextledger._json import strict_loads
from contextledger.compaction import CompactionResult
from contextledger.messages import Message

__all__ = [
    "HEAD_BYTES",
    "PER_HEAD",
    "BodyMemo",
    "Compacted",
    "KeptBody",
    "SplitBody",
    "body_size",
    "continued",
    "item_values",
    "joined",
    "read_before",
    "split_array",
    "split_whole",
]

_Forwarded = TypeVar("_Forwarded")

HEAD_BYTES = 256  # the first bytes of a body, by which the body it continues is found
PER_HEAD = 8  # the most bodies kept of conversations starting with the same bytes


def body_size(body: bytes) -> int:
    """What keeping a split body holds: the body, its items' bytes, and (kept alive by them) the
    values and messages made of them: about twice the items again."""
    return 4 * sys.getsizeof(body)


try:  # in the serve extra; without it, bodies are read whole (slower, the same answers)
    import msgspec

    _OBJECT: Any = msgspec.json.Decoder(dict[str, msgspec.Raw])
    _ITEMS: Any = msgspec.json.Decoder(list[msgspec.Raw])
    _VALUE: Any = msgspec.json.Decoder()
except ImportError:  # pragma: no cover - the serve extra brings it
    _OBJECT = _ITEMS = _VALUE = None


def item_values(items: Sequence[bytes]) -> list[Any]:
    """The values of items a reader has already read strictly (each is valid JSON), decoded again
    for a check that needs them: several times faster than the standard library's parser."""
    if _VALUE is None:  # pragma: no cover - the serve extra brings msgspec
        return [json.loads(item) for item in items]
    return [_VALUE.decode(item) for item in items]


class BodyMemo:
    """What a caller made of a split body's messages (validated them, compacted them, chose what
    to forward), kept with the body by :meth:`MessageReader.split` for the next body with the same
    messages: a client sending the same history again (a retry, a second sample) is answered
    from it.  Recalled only for the very same message objects, which the reader gives for the same
    items: what is made of them is a function of them alone, so it is the same."""

    __slots__ = ("_made", "_messages", "reading", "rules")

    def __init__(self) -> None:
        self._messages: tuple[Message, ...] | None = None
        self._made: Any = None
        # The body's items and what reading them gave (see ``MessageReader.read_split``).
        self.reading: tuple[list[bytes], Any] | None = None
        # How many items the API's rules were fed, and their state after them: a body continuing
        # this one is checked for what it adds (never fed again: copied first).
        self.rules: tuple[int, Any] | None = None

    def recall(self, messages: Sequence[Message]) -> Any:
        """What was kept for ``messages``, or None."""
        kept = self._messages
        if kept is not None and len(kept) == len(messages) and all(map(is_, kept, messages)):
            return self._made
        return None

    def keep(self, messages: Sequence[Message], made: Any) -> None:
        """Keep ``made`` for ``messages`` (not None), in place of what was kept."""
        self._messages, self._made = tuple(messages), made


@dataclass(frozen=True, slots=True)
class Compacted(Generic[_Forwarded]):
    """What a stateless request's messages make, whatever else its body holds (kept in its
    :class:`BodyMemo`): the strategy's compaction (None with no strategy), and the messages it
    keeps as they go upstream, in the API's own terms (None unless it changed a split body)."""

    result: CompactionResult | None
    forwarded: _Forwarded | None


@dataclass(frozen=True, slots=True)
class SplitBody:
    """A JSON object body with one array read apart, item by item, as the bytes that came in.

    ``payload`` is the object with that array empty, read strictly; ``items`` are the array's
    items, not read yet (each is read strictly when first seen, see :meth:`MessageReader.read_raw`).
    """

    payload: dict[str, Any]
    field: str
    items: list[bytes]
    memo: BodyMemo | None = None  # kept with the body by :meth:`MessageReader.split`
    before: BodyMemo | None = None  # the memo of the body this one continues (its items come first)


def split_array(body: bytes, field: str) -> SplitBody | None:
    """``body`` with its top-level ``field`` array split into its items' bytes, or ``None`` when it
    is not an object holding such an array (or ``msgspec`` is missing): the caller then reads the
    body whole, which refuses a bad one with its own message.

    What the items do not hold is read strictly here, all but the array (duplicate keys, numbers,
    nesting); the items are checked when first read, so a history sent again costs a lookup per
    message instead of a parse.  ``msgspec`` only finds where the values start and end.
    """
    found = split_whole(body, field)
    return found[0] if found is not None else None


def split_whole(body: bytes, field: str) -> tuple[SplitBody, KeptBody | None] | None:
    """:func:`split_array`, with what a later body continuing this one is compared with (None
    when the array is empty: there is nothing to continue)."""
    if _OBJECT is None or _ITEMS is None:
        return None
    try:
        found = _OBJECT.decode(body).get(field)
        if found is None:
            return None
        # Read where it lies, never copied: a copy of a large body costs more than the search
        # (fresh memory the system must map, page by page).
        items = [bytes(item) for item in _ITEMS.decode(found)]
    except (ValueError, TypeError, RecursionError):  # msgspec's DecodeError is a ValueError
        return None
    start = _find(body, found)  # the same bytes earlier would be an equal array: the check below sees it
    if start < 0:
        return None
    close = start + len(found) - 1
    payload = _skeleton(body, field, start, close)
    if payload is None:
        return None
    kept = KeptBody(body, start, _before_space(body, close), items, BodyMemo()) if items else None
    return SplitBody(payload, field, items, kept.memo if kept is not None else None), kept


def _skeleton(body: bytes, field: str, opening: int, close: int) -> dict[str, Any] | None:
    """What lies around ``body``'s ``field`` array (opening at ``opening``, closing at ``close``),
    read strictly, with the array empty: None unless it is an object whose only ``field`` is
    that array."""
    try:
        payload = strict_loads(body[:opening] + b"[]" + body[close + 1 :])
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if type(payload) is not dict or payload.get(field) != []:
        return None
    return payload


_SPACE = frozenset(b" \t\n\r")  # JSON's whitespace
_CLOSE, _COMMA = ord("]"), ord(",")


def _before_space(body: bytes, end: int) -> int:
    """Where the whitespace that ends before ``end`` starts (``end`` when there is none)."""
    while end > 0 and body[end - 1] in _SPACE:
        end -= 1
    return end


def _after_space(body: bytes, start: int) -> int:
    """The first place at or after ``start`` that is not whitespace (``len(body)`` if none)."""
    while start < len(body) and body[start] in _SPACE:
        start += 1
    return start


@dataclass(slots=True, eq=False)
class KeptBody:
    """A body split apart, kept for the next body of its conversation: that body starts with the
    same bytes up to ``end`` (where the array's last item ends) when it only adds items."""

    body: bytes
    opening: int  # where the array opens
    end: int  # just past the array's last item
    items: list[bytes]
    memo: BodyMemo


def continued(body: bytes, field: str, prior: KeptBody) -> tuple[SplitBody, KeptBody] | None:
    """``body`` split as ``prior`` continued: the same bytes up to the end of its array's last
    item, compared in place, then either the array's end or more items, of which only those are
    read.  None when ``body`` is not so (the caller splits it whole)."""
    if not body.startswith(memoryview(prior.body)[: prior.end]):
        return None
    at = _after_space(body, prior.end)
    if at == len(body):
        return None
    if body[at] == _CLOSE:  # the same items: what they make is what ``prior`` made
        payload = _skeleton(body, field, prior.opening, at)
        return (SplitBody(payload, field, prior.items, prior.memo), prior) if payload is not None else None
    if body[at] != _COMMA:
        return None  # the last item goes on (a longer number): not the same item
    # What follows the comma, read as an object whose first member is the array of the new items
    # (and the rest the body's members after the array): only the new bytes are scanned.
    lead = b"{" + json.dumps(field).encode("utf-8") + b":["
    rest = lead + body[at + 1 :]
    try:
        found = _OBJECT.decode(rest).get(field)
        if found is None or not rest.startswith(found, len(lead) - 1):
            return None
        added = [bytes(item) for item in _ITEMS.decode(found)]
    except (ValueError, TypeError, RecursionError):
        return None
    if not added:
        return None  # a comma before the closing bracket
    close = at + len(found) - 1  # ``rest``'s opening bracket stands where the comma is
    payload = _skeleton(body, field, prior.opening, close)
    if payload is None:
        return None
    items = [*prior.items, *added]
    kept = KeptBody(body, prior.opening, _before_space(body, close), items, BodyMemo())
    return SplitBody(payload, field, items, kept.memo, prior.memo), kept


def read_before(split: SplitBody) -> tuple[int, Any] | None:
    """How many of ``split``'s first items were read already, and what reading them gave: all of
    them (the same body again) or those of the body it continues.  None if neither was read."""
    for memo in (split.memo, split.before):
        reading = memo.reading if memo is not None else None
        if reading is None:
            continue
        read, made = reading
        if read is split.items or (len(read) <= len(split.items) and all(map(is_, read, split.items))):
            return len(read), made
    return None


def _find(body: bytes, part: Any) -> int:
    """Where ``part`` (bytes-like) first occurs in ``body`` (-1 if nowhere): found by its first
    bytes, then compared whole in place, which is several times faster than searching for a long
    ``part`` at once."""
    head = bytes(memoryview(part)[:64])
    start = body.find(head)
    while start >= 0 and not body.startswith(part, start):
        start = body.find(head, start + 1)
    return start


def joined(payload: dict[str, Any], field: str, items: Sequence[bytes]) -> bytes:
    """``payload`` written as JSON with ``items`` (each a JSON value's bytes) as its ``field``
    array, in the place the field has in ``payload``."""
    marker = f"contextledger-{uuid.uuid4().hex}"
    text = json.dumps({**payload, field: marker}, ensure_ascii=False).encode("utf-8")
    head, _, tail = text.partition(json.dumps(marker).encode())
    # One join, so the body is made once: each large copy costs fresh memory the system maps.
    parts = [head, b"["]
    for item in items:
        parts += (item, b",")
    if items:
        parts.pop()
    parts += (b"]", tail)
    return b"".join(parts)
