"""ScriptedChatClient, the one model double of the tests: each kind of reply, and the script's order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from contextledger.clients import ChatClient, ChatResponse, OfflineModel, ScriptedChatClient, Usage
from contextledger.exceptions import ConfigurationError, ModelTimeoutError
from contextledger.messages import FunctionCallContent, Message

PRICE_TOOL = {"type": "function", "function": {"name": "lookup_price", "parameters": {"type": "object"}}}


def ask(client: ChatClient, text: str = "hello", **options: Any) -> ChatResponse:
    return asyncio.run(client.get_response([Message.user(text)], **options))


def test_text_and_messages_become_the_reply_with_an_estimated_usage() -> None:
    call = Message.assistant(calls=[FunctionCallContent("c1", "lookup_price", '{"item": "pen"}')])
    client = ScriptedChatClient(["first", call])
    first, second = ask(client), ask(client)
    assert (first.text, first.messages) == ("first", (Message.assistant("first"),))
    assert second.messages == (call,)
    assert first.usage is not None
    assert first.usage.is_estimate
    assert isinstance(client, ChatClient)


def test_the_last_reply_repeats_and_every_request_is_recorded_with_its_tools_and_options() -> None:
    client = ScriptedChatClient(["only"])
    replies = [ask(client, f"q{n}", tools=[PRICE_TOOL], temperature=n).text for n in range(3)]
    assert replies == ["only", "only", "only"]
    assert [request[-1].text for request in client.requests] == ["q0", "q1", "q2"]
    assert client.tools == [[PRICE_TOOL]] * 3
    assert client.options == [{"temperature": 0}, {"temperature": 1}, {"temperature": 2}]
    assert client.calls == 3


def test_a_response_is_returned_as_it_is_and_an_exception_is_raised() -> None:
    response = ChatResponse("", (Message.user("not an assistant"),), Usage(1, None))
    client = ScriptedChatClient([response, ModelTimeoutError("late")])
    assert ask(client) is response
    with pytest.raises(ModelTimeoutError, match="late"):
        ask(client)


def test_another_client_answers_the_call_with_its_tools_and_options() -> None:
    client = ScriptedChatClient([OfflineModel()])
    reply = ask(client, "What is the price of a pen?", tools=[PRICE_TOOL])
    (call,) = reply.messages[0].function_calls
    assert call.name == "lookup_price"  # the offline model saw the tools
    assert (
        ask(client, "summarise this", max_chars=20).text
        == asyncio.run(OfflineModel().get_response([Message.user("summarise this")], max_chars=20)).text
    )
    assert len(client.requests) == 2


def test_a_function_answers_from_the_request_sync_or_async() -> None:
    async def later(messages: Sequence[Message]) -> str:
        await asyncio.sleep(0)
        return f"async {len(messages)}"

    client = ScriptedChatClient([lambda messages: f"echo {messages[-1].text}", later], report_usage=False)
    first, second = ask(client, "one"), ask(client, "two")
    assert (first.text, second.text) == ("echo one", "async 1")
    assert first.usage is None
    assert second.usage is None


def test_what_a_function_returns_outside_the_protocol_is_handed_back_unchanged() -> None:
    garbage: Any = {"content": "raw provider JSON"}
    client = ScriptedChatClient([lambda messages: garbage])
    assert ask(client) is garbage


def test_the_script_can_grow_between_calls_and_clearing_the_record_replays_nothing() -> None:
    client = ScriptedChatClient()
    with pytest.raises(ConfigurationError, match="no reply scripted"):
        ask(client)
    assert (client.calls, client.requests) == (0, [])
    client.replies.extend(["a", "b"])
    assert ask(client).text == "a"
    client.requests.clear()
    assert ask(client).text == "b"
    client.replies.append("c")
    assert ask(client).text == "c"
    assert client.calls == 3
    assert len(client.requests) == 2
