"""Reading what a client sent: JSON bodies, chat-completions payloads, messages, header values.

Every refusal is a :class:`ProxyError` with status 400 and a code, so it reaches the client in
OpenAI's error shape, and every one is decided before anything goes upstream.  A body is read
by :func:`~contextledger._json.strict_loads`: strict JSON that the proxy can write again as it
read it (no ``NaN``, no overflowing number, no lone surrogate, no nesting past 128 levels).

A stateless client sends its whole history on every call, and nearly all of it was in its
previous call too; :class:`MessageReader` therefore remembers the messages it
has converted, keyed by their exact JSON values, and converts only what it has not seen.  A
remembered message is the same immutable object as before, so its token count (memoised on it)
is not computed again either (on a 201-message history this halves the proxy's reading and
compaction time, 2.9 to 1.4 ms).  What it remembers is bounded by the memory its strings take
(:data:`REMEMBERED_BYTES`), not by a count, so a client sending large distinct content (base64
images, pasted files) cannot make it grow: the least recently used messages go first.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import sys
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any, Generic, TypeVar, cast

from contextledger._json import MAX_DEPTH, UnwritableJSONError, strict_loads
from contextledger.compaction import CompactionResult
from contextledger.exceptions import InvalidMessageError, ProxyError
from contextledger.messages import Message, message_from_openai, validate

__all__ = [
    "REMEMBERED_BYTES",
    "BodyMemo",
    "Compacted",
    "MessageReader",
    "RawInput",
    "SplitBody",
    "bad_request",
    "check_payload",
    "joined",
    "json_object",
    "kept_places",
    "open_block",
    "parse_payload",
    "refuse_invalid",
    "split_array",
    "turn_id_of",
    "user_text",
    "without_metadata",
]

REMEMBERED_BYTES = 32 * 1024 * 1024
"""The most memory the messages a :class:`MessageReader` remembers may hold (their strings and
containers, as ``sys.getsizeof`` counts them); a single message larger than that is not remembered."""

_METADATA_KEY = "_contextledger"  # where ``to_openai(..., metadata=True)`` keeps the library's own fields

_Forwarded = TypeVar("_Forwarded")

_BODIES = object()  # the reader's key for the bodies it keeps (see ``MessageReader.split``)
_HEAD = 256  # the first bytes of a body, by which the body it continues is found
_PER_HEAD = 8  # the most bodies kept of conversations starting with the same bytes


def _body_size(body: bytes) -> int:
    """What keeping a split body holds: the body, its items' bytes, and (kept alive by them) the
    values and messages made of them: about twice the items again."""
    return 4 * sys.getsizeof(body)


_NODE_BYTES = 64  # a container, number or key tuple: roughly what the key and the message add for it

try:  # in the serve extra; without it, bodies are read whole (slower, the same answers)
    import msgspec

    _OBJECT: Any = msgspec.json.Decoder(dict[str, msgspec.Raw])
    _ITEMS: Any = msgspec.json.Decoder(list[msgspec.Raw])
except ImportError:  # pragma: no cover - the serve extra brings it
    _OBJECT = _ITEMS = None


def bad_request(message: str, code: str) -> ProxyError:
    return ProxyError(message, status=400, code=code)


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``), or 400 saying what was expected."""
    if not body.strip():
        return {}
    try:
        data = strict_loads(body)
    except UnwritableJSONError as error:
        raise bad_request(f"the request body is not strict JSON: {error}; send {what}", "invalid_json") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(f"the request body is not valid JSON ({error}); send {what}", "invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request(f"the request body must be {what}, got {type(data).__name__}", "invalid_body")
    return data


def parse_payload(body: bytes) -> dict[str, Any]:
    """A chat-completions request: a JSON object with a non-empty ``messages`` list."""
    payload = json_object(body, "a chat-completions JSON object")
    return check_payload(payload, payload.get("messages"))


def check_payload(payload: dict[str, Any], messages: object) -> dict[str, Any]:
    """``payload`` if it is a chat-completions request whose ``messages`` (as read, or as split
    apart by :func:`split_array`) is a non-empty list; 400 saying what is wrong otherwise."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of chat messages", "invalid_messages")
    model = payload.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request(
            f"'model' must name the model as a non-empty string, got {model!r}"
            if "model" in payload
            else "'model' is missing: name the model to call, as the upstream expects",
            "invalid_model",
        )
    if "stream" in payload and not isinstance(payload["stream"], bool):
        raise bad_request(f"'stream' must be true or false, got {payload['stream']!r}", "invalid_stream")
    return payload


class BodyMemo:
    """What a caller made of a split body's messages (validated them, compacted them, chose what
    to forward), kept with the body by :meth:`MessageReader.split` for the next body with the same
    messages: a client sending the same history again (a retry, a second sample) is answered
    from it.  Recalled only for the very same message objects, which the reader gives for the same
    items: what is made of them is a function of them alone, so it is the same."""

    __slots__ = ("_made", "_messages", "reading")

    def __init__(self) -> None:
        self._messages: tuple[Message, ...] | None = None
        self._made: Any = None
        # The body's items and what reading them gave (see ``MessageReader.read_split``).
        self.reading: tuple[list[bytes], Any] | None = None

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


@dataclass(frozen=True, slots=True)
class RawInput:
    """A body's array read apart (see :meth:`MessageReader.read_raw_runs`): each item's bytes, its
    value, the messages made of them and the slice of items each message came from."""

    items: list[bytes]
    values: list[Any]
    messages: list[Message]
    spans: list[tuple[int, int]]
    one_each: bool = False  # each item made one message of its own (``spans[i]`` is ``(i, i + 1)``)
    marked: bool = False  # some item's value is one the reader was asked to mark (``marks``)


def kept_places(kept: Sequence[Message], messages: Sequence[Message]) -> list[int | None]:
    """Where each message of a compaction ``kept`` of ``messages`` is in ``messages``, found by
    identity (a strategy keeps the objects it was given) and in order, each after the one before
    (a reader gives the same object for two equal messages); None for one a strategy wrote."""
    only = {id(message): place for place, message in enumerate(messages)}
    if len(only) == len(messages):  # no message twice: each is where this says
        found = [only.get(id(message)) for message in kept]
        places_in_order = [place for place in found if place is not None]
        if all(one < other for one, other in itertools.pairwise(places_in_order)):
            return found
    places: dict[int, list[int]] = {}
    for index, message in enumerate(messages):
        places.setdefault(id(message), []).append(index)
    cursors: dict[int, int] = {}
    found = []  # the kept messages' places, now found one after another
    after = -1
    for message in kept:
        key = id(message)
        candidates = places.get(key, ())
        cursor = cursors.get(key, 0)
        while cursor < len(candidates) and candidates[cursor] <= after:
            cursor += 1
        if cursor == len(candidates):
            found.append(None)
            continue
        after = candidates[cursor]
        cursors[key] = cursor + 1
        found.append(after)
    return found


def split_array(body: bytes, field: str) -> SplitBody | None:
    """``body`` with its top-level ``field`` array split into its items' bytes, or ``None`` when it
    is not an object holding such an array (or ``msgspec`` is missing): the caller then reads the
    body whole, which refuses a bad one with its own message.

    What the items do not hold is read strictly here, all but the array (duplicate keys, numbers,
    nesting); the items are checked when first read, so a history sent again costs a lookup per
    message instead of a parse.  ``msgspec`` only finds where the values start and end.
    """
    found = _split_whole(body, field)
    return found[0] if found is not None else None


def _split_whole(body: bytes, field: str) -> tuple[SplitBody, _Split | None] | None:
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
    kept = _Split(body, start, _before_space(body, close), items, BodyMemo()) if items else None
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
class _Split:
    """A body split apart, kept for the next body of its conversation: that body starts with the
    same bytes up to ``end`` (where the array's last item ends) when it only adds items."""

    body: bytes
    opening: int  # where the array opens
    end: int  # just past the array's last item
    items: list[bytes]
    memo: BodyMemo


def _continued(body: bytes, field: str, prior: _Split) -> tuple[SplitBody, _Split] | None:
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
    kept = _Split(body, prior.opening, _before_space(body, close), items, BodyMemo())
    return SplitBody(payload, field, items, kept.memo, prior.memo), kept


def _read_before(split: SplitBody) -> tuple[int, Any] | None:
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


def refuse_invalid(messages: Sequence[Message], *, before: Sequence[Message] = ()) -> None:
    """400 with :func:`~contextledger.messages.validate`'s first reason if ``messages`` (after
    ``before``, the stored messages they continue) is not a conversation a model takes: a tool
    result without its call, a call without its results, a call id used twice.  Refused here, it is
    neither sent upstream nor stored, where it would break every later turn of the session."""
    problems = validate([*before, *messages])
    if problems:
        # A problem of the new messages first: the stored history was valid until they came.
        first = next((problem for problem in problems if problem.index >= len(before)), problems[0])
        where = first.index - len(before)
        place = f"message {where}" if where >= 0 else "the stored history"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise bad_request(f"'messages' is not a valid conversation: {place}: {first.detail}{more}", "invalid_messages")


def open_block(stored: Sequence[Message]) -> Sequence[Message]:
    """The stored messages a new turn's first messages may answer: the last call and whatever
    results and reasoning follow it (the only block :func:`refuse_invalid` needs to look back at)."""
    for index in range(len(stored) - 1, -1, -1):
        message = stored[index]
        if message.role != "tool" and not message.is_reasoning_only:
            return stored[index:]
    return stored


def without_metadata(items: list[Any]) -> list[Any] | None:
    """The messages without the library's private key (``_contextledger``, kept by
    ``to_openai(..., metadata=True)``), or ``None`` when none has it: it is the library's, never
    the upstream's."""
    if not any(isinstance(item, dict) and _METADATA_KEY in item for item in items):
        return None
    return [
        {name: value for name, value in item.items() if name != _METADATA_KEY} if isinstance(item, dict) else item
        for item in items
    ]


def turn_id_of(value: str | None) -> str | None:
    """The ``Idempotency-Key`` header as a turn id: printable text of 1 to 256 characters."""
    if value is None:
        return None
    if not value or len(value) > 256 or not value.isprintable():
        raise bad_request(
            f"Idempotency-Key {value[:80]!r} is not valid: use 1 to 256 printable characters", "invalid_idempotency_key"
        )
    return value


def user_text(messages: Sequence[Message]) -> str | None:
    """The turn's own user text, one message per line (a line break separates declarations)."""
    texts = [message.text for message in messages if message.role == "user" and message.text.strip()]
    return "\n".join(texts) if texts else None


_encode = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":")).encode


def _key(value: Any, size: list[int]) -> Hashable:
    """``value`` as a hashable key that only an equal JSON value shares: its JSON text, which tells
    ``1``, ``1.0`` and ``true`` apart, and a list from an object (``value`` came from
    :func:`~contextledger._json.strict_loads`, so it is plain JSON and writes without error).  Adds
    the memory the key and the message made from it hold to ``size[0]``: about twice the text."""
    text = _encode(value)
    size[0] += 2 * sys.getsizeof(text) + _NODE_BYTES
    return text


def _made_run(convert: Callable[[list[Any]], list[Message]], items: list[Any], size: int) -> tuple[Any, int]:
    return tuple(convert(items)), size


class _Unreadable(Exception):
    """An item a body read apart cannot take: the caller reads the body whole instead."""


def _strict_item(item: bytes) -> Any:
    """An item of a body's array read strictly, within the nesting the body's object and array leave."""
    try:
        return strict_loads(item, depth=MAX_DEPTH - 2)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _Unreadable from None


class MessageReader:
    """Converts OpenAI message dicts to :class:`Message` objects, remembering the most recently used
    ones it made up to ``limit`` bytes (:data:`REMEMBERED_BYTES` by default)."""

    def __init__(self, limit: int = REMEMBERED_BYTES) -> None:
        self.limit = limit
        self._made: dict[Hashable, tuple[Any, int]] = {}  # a message, or a run's messages
        self._held = 0

    @property
    def held_bytes(self) -> int:
        """The memory the remembered messages and bodies hold, as counted against the limit."""
        return self._held

    def split(self, body: bytes, field: str) -> SplitBody | None:
        """:func:`split_array`, remembering what it split (within the reader's limit) for the next
        body of the conversation, whose ``memo`` it gives again.  A body that repeats a remembered
        one's array and adds items is compared with it in place and only the items added are
        scanned; the items it repeats are the same bytes objects (hashed once), whose messages
        are looked up as before.  Bodies are found by their first bytes; of conversations that
        start alike (one system prompt), the most recently used few are kept."""
        key = (_BODIES, field, body[:_HEAD])
        held = self._made.pop(key, None)
        bucket: list[_Split] = []
        if held is not None:
            bucket = held[0]
            self._held -= held[1]
        found: tuple[SplitBody, _Split | None] | None = None
        for place, prior in enumerate(bucket):
            found = _continued(body, field, prior)
            if found is not None:
                del bucket[place]
                break
        else:
            found = _split_whole(body, field)
        kept = found[1] if found is not None else None
        if kept is not None and kept.end >= _HEAD:  # else the next body is not found by this key
            bucket.insert(0, kept)
        size = 0
        for count, prior in enumerate(bucket):
            if count == _PER_HEAD or size + _body_size(prior.body) > self.limit // 4:
                del bucket[count:]
                break
            size += _body_size(prior.body)
        if bucket:
            self._made[key] = (bucket, size)
            self._remember(size)
        return found[0] if found is not None else None

    def read(self, items: list[Any]) -> list[Message]:
        """The messages, or 400 naming the first malformed one."""
        messages: list[Message] = []

        def made(item: Any, position: int, size: int) -> tuple[Any, int]:
            try:
                return message_from_openai(item, position=position), size
            except InvalidMessageError as error:
                raise bad_request(f"'messages' is malformed: {error}", "invalid_messages") from None

        for position, item in enumerate(items):
            size = [0]
            key = _key(item, size)
            messages.append(self._recall(key, functools.partial(made, item, position, size[0])))
        return messages

    def read_raw(self, items: list[bytes]) -> list[Message] | None:
        """The messages of a :class:`SplitBody`'s items, keyed by their bytes: an item not seen
        before is read strictly and converted, a known one is looked up.  ``None`` when an item is
        not strict JSON or not a message (the caller reads the body whole, for the error it gives),
        or holds the library's private key (which the caller takes out, reading the body whole)."""

        def made(item: bytes, position: int) -> tuple[Any, int]:
            value = _strict_item(item)
            if type(value) is dict and _METADATA_KEY in value:
                raise _Unreadable
            return message_from_openai(value, position=position), 2 * sys.getsizeof(item) + _NODE_BYTES

        try:
            return [self._recall(item, functools.partial(made, item, position)) for position, item in enumerate(items)]
        except (_Unreadable, InvalidMessageError):
            return None

    def read_split(self, split: SplitBody) -> list[Message] | None:
        """:meth:`read_raw` of ``split``'s items, given again for the same body and read only
        past the items of the body it continues (each makes its message alone, the message
        being the same whatever follows)."""
        found = _read_before(split)
        if found is not None and found[0] == len(split.items):
            return cast("list[Message]", found[1])
        count, head = found if found is not None else (0, [])
        tail = self.read_raw(split.items[count:])
        if tail is None:
            return None
        messages = [*head, *tail]
        if split.memo is not None:
            split.memo.reading = (split.items, messages)
        return messages

    def read_split_runs(
        self,
        split: SplitBody,
        joins: Callable[[Any], bool] | None,
        convert: Callable[[list[Any]], list[Message]],
        marks: Callable[[Any], bool] | None = None,
    ) -> RawInput | None:
        """:meth:`read_raw_runs` of ``split``'s items, given again for the same body and read only
        from the last run of the body it continues (a run may go on into the items added; those
        before it end where they ended)."""
        found = _read_before(split)
        if found is not None and found[0] == len(split.items):
            return cast("RawInput", found[1])
        items = split.items
        if found is None:
            read = self.read_raw_runs(items, joins, convert, marks)
        else:
            prior = cast("RawInput", found[1])
            start = prior.spans[-1][0] if prior.spans else 0
            tail = self.read_raw_runs(items[start:], joins, convert, marks)
            if tail is None:
                return None
            cut = bisect.bisect_left(prior.spans, (start,))  # the messages of the runs before ``start``
            spans = [*prior.spans[:cut], *((begin + start, end + start) for begin, end in tail.spans)]
            one_each = tail.one_each and (
                prior.one_each or (cut == start and all(span == (i, i + 1) for i, span in enumerate(spans[:cut])))
            )
            read = RawInput(
                items,
                [*prior.values[:start], *tail.values],
                [*prior.messages[:cut], *tail.messages],
                spans,
                one_each,
                prior.marked or tail.marked,  # an item before ``start`` is marked only if ``prior`` was
            )
        if read is not None and split.memo is not None:
            split.memo.reading = (items, read)
        return read

    def read_raw_runs(
        self,
        items: list[bytes],
        joins: Callable[[Any], bool] | None,
        convert: Callable[[list[Any]], list[Message]],
        marks: Callable[[Any], bool] | None = None,
    ) -> RawInput | None:
        """:meth:`read_runs` for a :class:`SplitBody`'s items: each item read strictly when first
        seen, and remembered with whether it ``joins`` the items beside it that also do (the runs
        ``convert`` makes one message of; None: every item makes its messages alone) and with the
        messages it makes when a run of its own (most items are: one lookup each); a run of
        several items is keyed by their bytes.  ``marks`` tells of a value whether it is one the
        caller looks for (told once per item seen: :attr:`RawInput.marked`).  What they made is
        remembered with the item, so a reader is always called with the same ``joins``,
        ``convert`` and ``marks`` (the proxy has one reader per API).  ``None`` when an item is
        not strict JSON or a run not messages: the caller reads the body whole, for its error."""

        def entry(item: bytes) -> tuple[list[Any], int]:
            # The value, the messages it makes alone (made when first needed: about twice the
            # text), whether it joins its neighbours, and whether it is marked.
            value = _strict_item(item)
            noted = [value, None, joins is not None and joins(value), marks is not None and marks(value)]
            return noted, 4 * sys.getsizeof(item) + _NODE_BYTES

        recall = self._recall
        try:
            # Keyed by the item's bytes in a tuple, apart from a run of several items.
            entries = [recall((item,), functools.partial(entry, item)) for item in items]
            values = [found[0] for found in entries]
            messages: list[Message] = []
            spans: list[tuple[int, int]] = []
            one_each = True
            start, count = 0, len(entries)
            while start < count:
                alone = entries[start]
                end = start + 1
                if alone[2]:
                    while end < count and entries[end][2]:
                        end += 1
                if end - start == 1:
                    if alone[1] is None:
                        alone[1] = tuple(convert([alone[0]]))
                    made = alone[1]
                else:
                    key = b",".join(items[start:end])
                    size = 2 * sum(map(sys.getsizeof, items[start:end]))
                    made = recall(key, functools.partial(_made_run, convert, values[start:end], size))
                messages += made
                if len(made) == 1:
                    spans.append((start, end))
                else:
                    spans += [(start, end)] * len(made)
                one_each = one_each and end - start == 1 and len(made) == 1
                start = end
        except (_Unreadable, InvalidMessageError):
            return None
        marked = marks is not None and any(found[3] for found in entries)
        return RawInput(items, values, messages, spans, one_each, marked)

    def read_runs(
        self, items: list[Any], runs: Sequence[tuple[int, int]], convert: Callable[[list[Any]], list[Message]]
    ) -> tuple[list[Message], list[tuple[int, int]]]:
        """``items`` converted run by run (``runs``: the slices ``convert`` makes messages of, each
        independently of the others), a run's messages remembered as :meth:`read` remembers one
        message; with each message, the slice of ``items`` it came from.  ``convert``'s
        :class:`InvalidMessageError` reaches the caller as converting the whole input raises it,
        so it names the item by its place in the input, not in its run."""

        def key_of(start: int, end: int) -> tuple[Hashable, int]:
            size = [0]
            return _key(items[start:end], size), size[0]

        try:
            return self._runs(items, runs, convert, key_of)
        except InvalidMessageError:
            convert(items)  # raises the same problem, named by its place in the whole input
            raise

    def _runs(
        self,
        items: list[Any],
        runs: Sequence[tuple[int, int]],
        convert: Callable[[list[Any]], list[Message]],
        key_of: Callable[[int, int], tuple[Hashable, int]],
    ) -> tuple[list[Message], list[tuple[int, int]]]:
        messages: list[Message] = []
        spans: list[tuple[int, int]] = []
        for start, end in runs:
            key, size = key_of(start, end)
            kept = self._recall(key, functools.partial(_made_run, convert, items[start:end], size))
            messages += kept
            spans += [(start, end)] * len(kept)
        return messages, spans

    def _recall(self, key: Hashable, make: Callable[[], tuple[Any, int]]) -> Any:
        """What is remembered under ``key`` (now the most recently used), or what ``make`` makes
        (with the bytes it holds), remembered unless it alone is over the limit."""
        made = self._made.pop(key, None)
        if made is None:
            made = make()
            if made[1] > self.limit:
                return made[0]
            self._remember(made[1])
        self._made[key] = made  # at the end: the most recently used
        return made[0]

    def _remember(self, size: int) -> None:
        """Count ``size`` more bytes held, letting the least recently used go past the limit."""
        self._held += size
        while self._held > self.limit:
            self._held -= self._made.pop(next(iter(self._made)))[1]
