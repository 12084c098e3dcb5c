"""A request read in place behaves as the list it stands for, and shows only what the run was built on.

Providers used to get each request as one list; they now get :class:`RequestMessages`, which
reads the providers' messages, the session's history and the input where they live.  Whatever a
provider does with a list it may do with this (index, slice, iterate, search) and get the same
answers; and messages stored after the request was made never show in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextledger.agents import Agent, ContextProvider, RequestMessages, RunContext
from contextledger.clients import ScriptedChatClient
from contextledger.history import InMemoryHistoryProvider
from contextledger.messages import Message

POOL = [Message.user(f"message {number}") for number in range(12)]

# Each part: a list of messages and how many of them the request reads (at most all of them).
parts = st.lists(
    st.lists(st.sampled_from(POOL), max_size=6).flatmap(
        lambda items: st.tuples(st.just(items), st.integers(0, len(items)))
    ),
    max_size=4,
)
steps = st.sampled_from([None, 1, 2, 3, -1, -2])


def as_list(given_parts: Sequence[tuple[list[Message], int]]) -> list[Message]:
    return [message for items, count in given_parts for message in items[:count]]


@given(given_parts=parts, step=steps)
def test_reads_as_the_list_it_stands_for(given_parts: list[tuple[list[Message], int]], step: int | None) -> None:
    request = RequestMessages(*given_parts)
    expected = as_list(given_parts)
    assert len(request) == len(expected)
    assert list(request) == expected
    assert list(reversed(request)) == expected[::-1]
    bounds = [None, *range(-len(expected) - 2, len(expected) + 3)]
    for start in bounds:
        for stop in bounds:
            assert request[start:stop:step] == expected[start:stop:step], (start, stop, step)
    for position in range(-len(expected), len(expected)):
        assert request[position] is expected[position]
    for message in POOL:
        assert (message in request) == (message in expected)
        assert request.count(message) == expected.count(message)


@pytest.mark.parametrize("position", [3, -4, 100])
def test_a_position_past_either_end_is_an_index_error(position: int) -> None:
    request = RequestMessages((POOL[:2], 2), (POOL[2:3], 1))
    with pytest.raises(IndexError, match=f"request position {position} out of range for 3 messages"):
        request[position]


def test_messages_added_to_a_part_later_do_not_show() -> None:
    history = POOL[:3]
    request = RequestMessages((history, len(history)), ((POOL[5],), 1))
    history.append(POOL[4])  # the turn is stored after the request was made
    assert list(request) == [*POOL[:3], POOL[5]]
    assert request[:] == [*POOL[:3], POOL[5]]
    assert request[3] is POOL[5]


class Recording(ContextProvider):
    """Keeps what each call's request held, as a list (the way a provider keeps it past the call)."""

    def __init__(self) -> None:
        self.seen: list[list[Message]] = []

    async def prepare_request(self, messages: Sequence[Message], context: RunContext | None) -> Sequence[Message]:
        self.seen.append(list(messages))
        return messages


class Adding(ContextProvider):
    source_id = "notes"

    async def before_run(self, context: RunContext) -> None:
        context.add_messages(self.source_id, [Message.user("a note")])


def test_a_provider_sees_context_history_and_input_in_order_and_the_model_gets_the_same() -> None:
    async def scenario() -> tuple[list[list[Message]], list[list[Message]]]:
        recording = Recording()
        client = ScriptedChatClient(["first answer", "second answer"])
        agent = Agent(client, name="a", context_providers=[InMemoryHistoryProvider(), Adding(), recording])
        session = agent.create_session()
        await agent.run("first question", session=session)
        await agent.run("second question", session=session)
        return recording.seen, [list(request) for request in client.requests]

    seen, sent = asyncio.run(scenario())
    assert [[message.text for message in request] for request in seen] == [
        ["a note", "first question"],
        ["a note", "first question", "first answer", "second question"],
    ]
    assert sent == seen
