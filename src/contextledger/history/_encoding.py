"""How every history backend checks its input and turns messages into stored text and back.

All backends go through these functions, even the in-memory one that could keep the objects
as they are, so the three behave the same: the same input is refused everywhere, and what
``load()`` returns is what a durable store would give back after a restart.  A message that
would not read back equal to itself from its JSON form is refused when it is written, not
discovered when it is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from contextledger.exceptions import ConfigurationError, HistoryCorruptError, InvalidMessageError
from contextledger.history._protocol import HistoryVersion, StoredTurn
from contextledger.messages import Message
from contextledger.messages._openai import message_from_openai, message_to_openai

__all__ = [
    "RecentEncodings",
    "check_name",
    "check_session_id",
    "check_start",
    "check_storable",
    "check_turn_id",
    "decode_message",
    "decode_turn",
    "encode_messages",
    "encode_turn",
    "encode_turns",
    "last_run",
]

_TURN_ID_LIMIT = 256


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_name(value: object, what: str) -> str:
    """A constructor argument that names something (a source id, a namespace) must be non-empty text."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{what} must be a non-empty string, got {_short(value)}")
    return value


def check_session_id(session_id: object) -> str:
    """Refuse a session id that could silently address the wrong conversation."""
    if not isinstance(session_id, str) or not session_id:
        raise ConfigurationError(
            f"session_id must be a non-empty string, got {_short(session_id)}; "
            "pass the id of the conversation whose history this is"
        )
    return session_id


def check_turn_id(turn_id: object) -> str:
    """A turn id is printable text of 1 to 256 characters (an HTTP ``Idempotency-Key`` fits)."""
    if not isinstance(turn_id, str) or not turn_id or len(turn_id) > _TURN_ID_LIMIT or not turn_id.isprintable():
        raise ConfigurationError(
            f"turn_id must be printable text of 1 to {_TURN_ID_LIMIT} characters, got {_short(turn_id)}; "
            "pass your own id for the turn (to retry it safely) or leave it out to have one generated"
        )
    return turn_id


def check_start(start: object, expected: object) -> None:
    """A rewrite keeps ``start`` messages of a history at version ``expected``: 0 to its length."""
    if not isinstance(expected, HistoryVersion):
        raise ConfigurationError(f"expected must be a HistoryVersion from version(), got {_short(expected)}")
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= expected.length:
        raise ConfigurationError(
            f"start must be an int from 0 to the history's length {expected.length}, got {_short(start)}"
        )


def _dump(message: Message) -> str:
    return json.dumps(message_to_openai(message, metadata=True), ensure_ascii=False, allow_nan=False)


def _read_back(body: str) -> Message | None:
    try:
        return message_from_openai(json.loads(body))
    except (TypeError, ValueError):  # InvalidMessageError is a ValueError
        return None


def _encode(message: Message, where: str) -> tuple[str, Message]:
    try:
        body = _dump(message)
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(
            f"{where} cannot be stored as JSON ({error}); keep additional_properties and extra to JSON "
            "values (strings, numbers, booleans, None, lists and string-keyed mappings)"
        ) from None
    stored = _read_back(body)
    if stored == message:
        return body, stored
    raise InvalidMessageError(
        f"{where} would not read back unchanged from storage ({_short(message, 160)}); "
        "check that mapping keys are strings and that a tool message carries its function result"
    )


def check_storable(messages: Sequence[Message]) -> None:
    """Raise :class:`InvalidMessageError` for the first message that would not read back unchanged
    from any store.  A host checks a turn's input with it before calling the model, so that no
    call is made (and paid for) for a turn that could not then be kept."""
    for position, message in enumerate(messages):
        _encode(message, f"message {position} of the turn")


class RecentEncodings:
    """The stored form of the messages a history encoded lately, found by identity.

    A reduction writes again messages its history has just stored (a rewrite from a collapsed
    tool call on takes the turn after it along); encoding them and checking that they read back
    a second time would double the storage work of such a turn.  A message is immutable, so an
    object encodes the same way every time, and an entry holds the object, so its id cannot
    name another message while it is remembered.  Two generations of at most ``size`` entries:
    when the newer fills up the older is dropped whole, so nothing is ever walked or evicted
    one by one, and a message stays known for at least ``size`` further encodings.

    A generation also holds at most ``max_bytes`` of encoded text (and a longer one is not
    remembered): a client sending large distinct messages must not make a history hold 128 of
    them, each twice (the message and its text), in memory nothing else bounds.
    """

    __slots__ = ("_max_bytes", "_newer", "_newer_bytes", "_older", "_size")

    def __init__(self, size: int = 64, max_bytes: int = 2 * 1024 * 1024) -> None:
        self._size = size
        self._max_bytes = max_bytes
        self._newer: dict[int, tuple[Message, str]] = {}
        self._older: dict[int, tuple[Message, str]] = {}
        self._newer_bytes = 0

    def body(self, message: Message) -> str | None:
        """The JSON text ``message`` was encoded to, if this very object was encoded lately."""
        entry = self._newer.get(id(message)) or self._older.get(id(message))
        return entry[1] if entry is not None and entry[0] is message else None

    def remember(self, message: Message, body: str) -> None:
        if len(body) > self._max_bytes:
            return
        if len(self._newer) >= self._size or self._newer_bytes + len(body) > self._max_bytes:
            self._older, self._newer, self._newer_bytes = self._newer, {}, 0
        self._newer[id(message)] = (message, body)
        self._newer_bytes += len(body)


def encode_messages(
    session_id: object, messages: object, action: str, recent: RecentEncodings | None = None
) -> tuple[str, list[str], list[Message]]:
    """Check a whole batch before anything is written.

    Returns the session id, the JSON text of each message and the message as it will read back
    (equal to the one given).  The first bad item raises, naming the session and its position,
    so a batch is stored whole or not at all.  A message found in ``recent`` (the very object,
    encoded lately) is not encoded again; every other one is remembered there.
    """
    checked_session = check_session_id(session_id)
    if isinstance(messages, Message):
        raise InvalidMessageError(
            f"cannot {action} session {checked_session!r}: got a single Message; pass a list such as [message]"
        )
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(
            f"cannot {action} session {checked_session!r}: expected a sequence of Message objects, "
            f"got {type(messages).__name__} {_short(messages)}"
        )
    items: Sequence[object] = list(messages)
    bodies: list[str] = []
    stored: list[Message] = []
    for position, item in enumerate(items):
        if not isinstance(item, Message):
            raise InvalidMessageError(
                f"cannot {action} session {checked_session!r}: item {position} is {type(item).__name__} "
                f"{_short(item)}, not a Message; convert OpenAI dicts with contextledger.from_openai first"
            )
        known = recent.body(item) if recent is not None else None
        if known is not None:
            bodies.append(known)
            stored.append(item)
            continue
        body, message = _encode(item, f"cannot {action} session {checked_session!r}: message {position}")
        bodies.append(body)
        stored.append(message)
        if recent is not None:
            recent.remember(item, body)
    return checked_session, bodies, stored


def _text(stored: object, where: str) -> object:
    """Bytes a store handed back (Redis without decoding, a BLOB) as text; anything else as is."""
    if isinstance(stored, (bytes, bytearray, memoryview)):
        try:
            return bytes(stored).decode("utf-8")
        except UnicodeDecodeError as error:
            raise HistoryCorruptError(f"{where} is not UTF-8 text ({error.reason})") from None
    return stored


def decode_message(body: object, *, session_id: str, position: int, store: str) -> Message:
    """Read one stored message back; anything unreadable raises :class:`HistoryCorruptError` saying where."""
    where = f"{store}: session {session_id!r}, message {position}"
    body = _text(body, where)
    if not isinstance(body, str):
        raise HistoryCorruptError(f"{where} is stored as {type(body).__name__}, not JSON text")
    try:
        data = json.loads(body)
    except ValueError as error:
        raise HistoryCorruptError(f"{where} is not valid JSON ({error}): {_short(body)}") from None
    try:
        return message_from_openai(data)
    except (TypeError, ValueError) as error:  # InvalidMessageError is a ValueError
        raise HistoryCorruptError(f"{where} is not a readable message: {error}") from None


def encode_turn(
    session_id: object, turn_id: object, inputs: object, reply: object, recent: RecentEncodings | None = None
) -> tuple[str, str, list[str], list[Message], str]:
    """Check a turn before anything is written.

    Returns the session id, the turn id, the JSON text of each message (inputs then reply),
    the messages as they will read back, and the turn's record: the text a store keeps under
    the turn id, from which :func:`decode_turn` rebuilds the :class:`StoredTurn`.
    """
    checked_turn = check_turn_id(turn_id)
    checked_session, input_bodies, input_messages = encode_messages(session_id, inputs, "append a turn to", recent)
    if not input_bodies:
        raise InvalidMessageError(
            f"cannot append turn {checked_turn!r} to session {checked_session!r}: it has no input message"
        )
    _, reply_bodies, reply_messages = encode_messages(session_id, reply, "append a turn to", recent)
    bodies = [*input_bodies, *reply_bodies]
    record = f'{{"inputs":{len(input_bodies)},"messages":[{",".join(bodies)}]}}'
    return checked_session, checked_turn, bodies, [*input_messages, *reply_messages], record


def encode_rewritten_turn(
    session_id: object,
    start: object,
    messages: object,
    expected: object,
    turn_id: object,
    inputs: object,
    reply: object,
    recent: RecentEncodings | None = None,
) -> tuple[str, str, list[str], str, list[str], list[Message]]:
    """Check a turn and the rewrite to make with it (``rewrite_and_append_turn``) before anything
    is written: :func:`encode_turn`'s session id, turn id, bodies and record, then the rewrite's
    bodies and its messages as they will read back."""
    checked, turn, bodies, _, record = encode_turn(session_id, turn_id, inputs, reply, recent)
    _, suffix, decoded = encode_messages(checked, messages, "rewrite", recent)
    check_start(start, expected)
    return checked, turn, bodies, record, suffix, decoded


def encode_turns(session_id: object, turns: object) -> tuple[str, list[tuple[str, str]], list[StoredTurn]]:
    """Check a batch of turn records for ``rewrite_turns`` before anything is written.

    Returns the session id, each turn's id and record text (as :func:`encode_turn` makes it),
    and the turns as they will read back.  Each item must be a :class:`StoredTurn` with at least
    one input message, and no turn id may come twice: the first bad item raises, so a batch is
    written whole or not at all.
    """
    checked_session = check_session_id(session_id)
    if isinstance(turns, (str, bytes, Mapping, StoredTurn)) or not isinstance(turns, Iterable):
        raise InvalidMessageError(
            f"cannot rewrite the turns of session {checked_session!r}: expected a sequence of StoredTurn "
            f"objects (as load_turns returns them), got {type(turns).__name__} {_short(turns)}"
        )
    records: list[tuple[str, str]] = []
    stored: list[StoredTurn] = []
    seen: set[str] = set()
    for position, item in enumerate(list(turns)):
        if not isinstance(item, StoredTurn):
            raise InvalidMessageError(
                f"cannot rewrite the turns of session {checked_session!r}: item {position} is "
                f"{type(item).__name__} {_short(item)}, not a StoredTurn; change the turns load_turns returned"
            )
        _, turn, _, messages, record = encode_turn(checked_session, item.turn_id, item.inputs, item.reply)
        if turn in seen:
            raise InvalidMessageError(
                f"cannot rewrite the turns of session {checked_session!r}: turn {turn!r} is given twice; "
                "pass each turn once"
            )
        seen.add(turn)
        records.append((turn, record))
        stored.append(StoredTurn(turn, tuple(messages[: len(item.inputs)]), tuple(messages[len(item.inputs) :])))
    return checked_session, records, stored


def decode_turn(record: object, *, session_id: str, turn_id: str, store: str) -> StoredTurn:
    """Read a turn's record back; anything unreadable raises :class:`HistoryCorruptError` saying where."""
    where = f"{store}: session {session_id!r}, turn {turn_id!r}"
    record = _text(record, where)
    try:
        data = json.loads(record) if isinstance(record, str) else None
        inputs, items = data["inputs"], data["messages"]  # type: ignore[index]
        if not isinstance(inputs, int) or not isinstance(items, list) or not 0 < inputs <= len(items):
            raise ValueError("the record has no inputs count or message list")
        messages = [message_from_openai(item) for item in items]
    except (TypeError, ValueError, KeyError) as error:
        raise HistoryCorruptError(f"{where} is not a readable turn record: {error}") from None
    return StoredTurn(turn_id, tuple(messages[:inputs]), tuple(messages[inputs:]))


def last_run(stored: Sequence[object], run: Sequence[object]) -> int | None:
    """Where the last contiguous copy of ``run`` starts in ``stored`` (by equality), or None."""
    size = len(run)
    for start in range(len(stored) - size, -1, -1):
        if all(stored[start + offset] == item for offset, item in enumerate(run)):
            return start
    return None
