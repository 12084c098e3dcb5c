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
images, pasted files) cannot make it grow: the least recently used messages go first.  The
stateless bodies it splits are kept within the same bound (:meth:`MessageReader.split`, with
:mod:`contextledger.serve._bodies`), so the next body of a conversation costs what it adds.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from contextledger._json import MAX_DEPTH, UnwritableJSONError, strict_loads
from contextledger.exceptions import InvalidMessageError, ProxyError
from contextledger.messages import Message, Problem, validate
from contextledger.messages._openai import message_from_openai
from contextledger.serve._bodies import (
    HEAD_BYTES,
    PER_HEAD,
    KeptBody,
    SplitBody,
    body_size,
    continued,
    read_before,
    split_whole,
)

__all__ = [
    "REMEMBERED_BYTES",
    "MessageReader",
    "RawInput",
    "bad_request",
    "check_payload",
    "json_object",
    "kept_places",
    "open_block",
    "parse_payload",
    "refuse_invalid",
    "rules_refusal",
    "turn_id_of",
    "user_text",
    "without_metadata",
]

REMEMBERED_BYTES = 32 * 1024 * 1024
"""The most memory the messages a :class:`MessageReader` remembers may hold (their strings and
containers, as ``sys.getsizeof`` counts them); a single message larger than that is not remembered."""

_METADATA_KEY = "_contextledger"  # where ``to_openai(..., metadata=True)`` keeps the library's own fields

_BODIES = object()  # the reader's key for the bodies it keeps (see ``MessageReader.split``)

_NODE_BYTES = 64  # a container, number or key tuple: roughly what the key and the message add for it


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


_API_NAMES = {"chat": "chat completions API", "responses": "Responses API", "anthropic": "Messages API"}
_PLACES = {"chat": "message", "responses": "input item", "anthropic": "message"}


def rules_refusal(api: str, problems: Sequence[Problem]) -> ProxyError:
    """The 400 for a body that breaks its API's structural rules: the first rule broken, by its
    code, and where, as the provider would refuse it (after a round trip the client waits for)."""
    first = problems[0]
    where = f"{_PLACES.get(api, 'item')} {first.index}" if first.index >= 0 else "the body"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return bad_request(
        f"the body breaks the {_API_NAMES.get(api, api)}'s rules: {where}: {first.detail}{more}", first.code
    )


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
        key = (_BODIES, field, body[:HEAD_BYTES])
        held = self._made.pop(key, None)
        bucket: list[KeptBody] = []
        if held is not None:
            bucket = held[0]
            self._held -= held[1]
        found: tuple[SplitBody, KeptBody | None] | None = None
        for place, prior in enumerate(bucket):
            found = continued(body, field, prior)
            if found is not None:
                del bucket[place]
                break
        else:
            found = split_whole(body, field)
        kept = found[1] if found is not None else None
        if kept is not None and kept.end >= HEAD_BYTES:  # else the next body is not found by this key
            bucket.insert(0, kept)
        size = 0
        for count, prior in enumerate(bucket):
            if count == PER_HEAD or size + body_size(prior.body) > self.limit // 4:
                del bucket[count:]
                break
            size += body_size(prior.body)
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
        found = read_before(split)
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
        found = read_before(split)
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
