"""A history encodes a message it has just stored once, however often it writes it again.

A reduction rewrites the stored list from the tool call it collapsed, taking along the turn the
history has just stored.  Each history remembers, by identity, the stored form of the messages it
encoded lately, so those are neither encoded nor checked again; anything else (an equal message
that is another object, a message it has forgotten, a bad message) goes through the full check.
"""

from __future__ import annotations

import pytest

from contextledger.exceptions import InvalidMessageError
from contextledger.history import HistoryProvider, _encoding
from contextledger.history._encoding import RecentEncodings
from contextledger.messages import FunctionCallContent, Message
from tests.history.support import Backend


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """Every message the histories encode and check, in order."""
    seen: list[Message] = []
    real = _encoding._encode

    def counting(message: Message, where: str) -> tuple[str, Message]:
        seen.append(message)
        return real(message, where)

    monkeypatch.setattr(_encoding, "_encode", counting)
    return seen


def tool_turn(number: int) -> tuple[list[Message], list[Message]]:
    call = FunctionCallContent(f"call-{number}", "lookup", '{"item": "pen"}')
    return [Message.user(f"check {number}")], [
        Message.assistant(calls=[call]),
        Message.tool(f"call-{number}", "pen: 3 left. " * 40),
        Message.assistant(f"answer {number}"),
    ]


def test_a_rewrite_of_messages_just_stored_encodes_only_the_new_one(backend: Backend, encoded: list[Message]) -> None:
    inputs, reply = tool_turn(1)
    summary = Message.assistant("[tool results] lookup: pen: 3 left.")

    async def scenario(history: HistoryProvider) -> list[Message]:
        assert await history.append_turn("s", "t1", inputs, reply)
        suffix = [*inputs, summary, reply[-1]]  # the call and its result collapsed into one message
        assert await history.rewrite("s", 0, suffix, await history.version("s")) is not None
        return await history.load("s")

    stored = backend.run(scenario)
    assert stored == [*inputs, summary, reply[-1]]
    assert encoded == [*inputs, *reply, summary]  # the turn once, then the summary alone


def test_an_equal_message_that_is_another_object_is_checked_again(backend: Backend, encoded: list[Message]) -> None:
    inputs, reply = tool_turn(2)
    copies = [Message.user(inputs[0].text), *(Message.assistant(message.text) for message in reply[-1:])]

    async def scenario(history: HistoryProvider) -> list[Message]:
        assert await history.append_turn("s", "t2", inputs, reply)
        await history.rewrite("s", 0, copies, await history.version("s"))
        return await history.load("s")

    assert backend.run(scenario) == copies
    assert encoded[len(inputs) + len(reply) :] == copies
    assert all(again is copy for again, copy in zip(encoded[len(inputs) + len(reply) :], copies))


def test_a_bad_message_is_refused_beside_remembered_ones_and_nothing_is_written(backend: Backend) -> None:
    inputs, reply = tool_turn(3)
    bad = Message.user("bad", additional_properties={"value": float("nan")})

    async def scenario(history: HistoryProvider) -> list[Message]:
        assert await history.append_turn("s", "t3", inputs, reply)
        version = await history.version("s")
        with pytest.raises(InvalidMessageError, match="message 2 cannot be stored as JSON"):
            await history.rewrite("s", 0, [*inputs, reply[0], bad], version)
        assert await history.version("s") == version
        return await history.load("s")

    assert backend.run(scenario) == [*inputs, *reply]


def test_what_is_remembered_is_bounded_and_the_oldest_is_forgotten_first() -> None:
    recent = RecentEncodings(size=4)
    messages = [Message.user(f"m{number}") for number in range(13)]
    for message in messages[:12]:
        recent.remember(message, message.text)
    # Two generations of at most four: the newest eight are known, the four before them are not.
    assert [recent.body(message) for message in messages[:4]] == [None] * 4
    assert [recent.body(message) for message in messages[4:12]] == [message.text for message in messages[4:12]]
    recent.remember(messages[12], "m12")  # the newer generation was full: the older one goes whole
    assert [recent.body(message) for message in messages[4:8]] == [None] * 4
    assert [recent.body(message) for message in messages[8:]] == [message.text for message in messages[8:]]
    assert recent.body(Message.user("m12")) is None  # equal is not enough: it must be the very object
