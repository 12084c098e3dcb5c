"""ProviderCompactionStrategy: what the provider returns replaces older groups byte for byte, and any
failure leaves the history exactly as it was (fail closed, as SummarizationStrategy does).

The offline compactor plays the provider in-process; the Responses and Anthropic clients are driven
against the real HTTP server of tests/clients/provider_fakes.py, which refuses what each API would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from contextledger.agents import Agent, CompactionProvider, Session
from contextledger.clients import OfflineCompactor, OfflineModel, ProviderCompaction, ScriptedChatClient
from contextledger.compaction import ProviderCompactionStrategy, compact_with_report, messages_exceed
from contextledger.exceptions import ConfigurationError, ModelResponseError, SummarizationError
from contextledger.messages import Message, anthropic_problems, from_anthropic, newest_provider_compaction, to_anthropic
from tests.clients.provider_fakes import API_KEY, serving
from tests.optional_imports import try_import

with try_import("openai") as openai_extra:
    from contextledger.clients.openai_responses import OpenAIResponsesClient

with try_import("anthropic") as anthropic_extra:
    from contextledger.clients.anthropic import AnthropicChatClient


def conversation(turns: int, *, filler: str = "") -> list[Message]:
    messages = [Message.system("You help with orders.")]
    for turn in range(turns):
        messages.append(Message.user(f"turn {turn}: color=c{turn}{filler}"))
        messages.append(Message.assistant(f"noted {turn}"))
    return messages


def block(text: str) -> Message:
    return from_anthropic([{"role": "assistant", "content": [{"type": "compaction", "content": text}]}])[0]


class Compactor:
    """A compactor double: returns ``window`` (or raises ``error``) and records what it was sent."""

    def __init__(
        self, window: Sequence[Message] = (), *, error: BaseException | None = None, opening_stays: bool = False
    ) -> None:
        self.window = tuple(window)
        self.error = error
        self.opening_stays = opening_stays
        self.sent: list[list[Message]] = []

    async def compact(self, messages: Sequence[Message], *, instructions: str | None = None) -> ProviderCompaction:
        self.sent.append(list(messages))
        if self.error is not None:
            raise self.error
        return ProviderCompaction(self.window)


def run(messages: list[Message], strategy: ProviderCompactionStrategy) -> Any:
    return asyncio.run(compact_with_report(messages, strategy=strategy))


def test_the_item_replaces_older_groups_byte_for_byte() -> None:
    item = block("Summary: color=c5.")
    compactor = Compactor([item])
    strategy = ProviderCompactionStrategy(compactor, messages_exceed(6), minimum_preserved=2)
    messages = conversation(8)
    result = run(messages, strategy)
    assert item in result.messages
    assert next(m for m in result.messages if m.is_provider_compaction) is item  # the very object returned
    (sent,) = compactor.sent
    assert sent == [m for m in messages[1:] if m in sent]  # the oldest messages, in order, no system
    assert result.messages[0] == messages[0]  # the system prompt is never compacted
    assert result.messages[-2:] == messages[-2:]
    (event,) = [e for e in result.events if e.strategy == "provider_compaction"]
    assert event.action == "compacted by the provider"


def test_anthropic_opening_stays_and_the_body_is_valid() -> None:
    strategy = ProviderCompactionStrategy(OfflineCompactor(), messages_exceed(6), minimum_preserved=2)
    result = run(conversation(8), strategy)
    system, wire = to_anthropic(result.messages)
    assert anthropic_problems({"system": system, "messages": wire}) == []
    assert wire[0]["role"] == "user"
    assert wire[1]["content"][0]["type"] == "compaction"
    assert "color=c" in wire[1]["content"][0]["content"]  # the offline model's summary, as the block's content


@pytest.mark.parametrize(
    "failure",
    [
        {"error": ModelResponseError("HTTP 500")},
        {"error": RuntimeError("boom")},
        {"window": [Message.assistant("plain text, no item")]},
        {"window": []},
    ],
)
def test_fails_closed(failure: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    messages = conversation(8)
    compactor = Compactor(failure.get("window", ()), error=failure.get("error"))
    result = run(messages, ProviderCompactionStrategy(compactor, messages_exceed(6), minimum_preserved=2))
    assert list(result.messages) == messages
    assert all(a is b for a, b in zip(result.messages, messages, strict=True))
    failed = [e for e in result.events if e.action == "failed"]
    assert len(failed) == 1
    assert "nothing was replaced" in failed[0].detail
    assert "history is unchanged" in caplog.text


def test_fails_closed_and_raises_when_asked() -> None:
    messages = conversation(8)
    strategy = ProviderCompactionStrategy(
        Compactor(error=ModelResponseError("HTTP 500")), messages_exceed(6), minimum_preserved=2, on_error="raise"
    )
    with pytest.raises(SummarizationError, match="history is unchanged"):
        run(messages, strategy)


def test_cancellation_restores_and_propagates() -> None:
    messages = conversation(8)
    strategy = ProviderCompactionStrategy(
        Compactor(error=asyncio.CancelledError()), messages_exceed(6), minimum_preserved=2
    )
    with pytest.raises(asyncio.CancelledError):
        run(messages, strategy)


def test_the_window_is_kept_so_the_provider_is_asked_once_per_step() -> None:
    compactor = Compactor([block("Summary.")])
    strategy = ProviderCompactionStrategy(compactor, messages_exceed(6), minimum_preserved=2)
    messages = conversation(8)
    first = run(messages, strategy)
    again = run(messages, strategy)
    assert len(compactor.sent) == 1
    assert list(again.messages) == list(first.messages)


def test_a_second_compaction_covers_the_first() -> None:
    strategy = ProviderCompactionStrategy(OfflineCompactor(), messages_exceed(6), minimum_preserved=2)
    first = run(conversation(8), strategy)
    grown = [*first.messages, *conversation(12)[17:]]
    second = run(grown, strategy)
    newest = newest_provider_compaction(second.messages)
    assert newest is not None
    assert "color=c" in second.messages[newest].contents[0].data["content"]
    first_item = next(m for m in first.messages if m.is_provider_compaction)
    # The earlier item is covered by the new one and goes; the opening user message stays (Anthropic).
    assert [m for m in second.messages if m.is_provider_compaction] == [second.messages[newest]]
    assert first_item not in second.messages
    assert second.messages[1] == first.messages[1]
    assert second.messages[1].role == "user"
    third = run([*second.messages, Message.user("turn 99: color=c99"), Message.assistant("ok")], strategy)
    assert len([m for m in third.messages if m.is_provider_compaction]) == 1
    system, wire = to_anthropic(third.messages)
    assert anthropic_problems({"system": system, "messages": wire}) == []


def test_bad_arguments() -> None:
    with pytest.raises(ConfigurationError, match="provider compactor"):
        ProviderCompactionStrategy(ScriptedChatClient(["x"]))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="instructions"):
        ProviderCompactionStrategy(OfflineCompactor(), instructions=" ")
    with pytest.raises(ConfigurationError, match="on_error"):
        ProviderCompactionStrategy(OfflineCompactor(), on_error="ignore")  # type: ignore[arg-type]


# Against the providers, over HTTP ------------------------------------------------------------------


@openai_extra.skip
def test_responses_growing_conversation_keeps_the_item_in_every_request() -> None:
    with serving() as provider:
        client = OpenAIResponsesClient("gpt-test", base_url=f"{provider.url}/v1", api_key=API_KEY, max_retries=0)
        strategy = ProviderCompactionStrategy(client, messages_exceed(8), minimum_preserved=2)
        history: list[Message] = [Message.system("You help with orders.")]
        for turn in range(10):
            history.append(Message.user(f"turn {turn}: color=c{turn}"))
            projected = run(history, strategy).messages
            reply = asyncio.run(client.get_response(projected))
            history = [*projected, *reply.messages]
            if turn >= 4:
                assert any(m.is_provider_compaction for m in projected)
        assert provider.refused == []
        compacts = provider.bodies("/v1/responses/compact")
        assert compacts
        assert all(set(body) == {"model", "input"} for body in compacts)
        later = provider.bodies("/v1/responses")[-1]["input"]
        assert any(item.get("type") == "compaction" for item in later)


@openai_extra.skip
def test_responses_server_failure_fails_closed() -> None:
    with serving() as provider:
        provider.fail["/v1/responses/compact"] = 500
        client = OpenAIResponsesClient("gpt-test", base_url=f"{provider.url}/v1", api_key=API_KEY, max_retries=0)
        messages = conversation(8)
        result = run(messages, ProviderCompactionStrategy(client, messages_exceed(6), minimum_preserved=2))
        assert list(result.messages) == messages
        assert [e.action for e in result.events if e.strategy == "provider_compaction"] == ["failed"]


@anthropic_extra.skip
def test_anthropic_compaction_over_http_keeps_the_body_valid() -> None:
    with serving() as provider:
        client = AnthropicChatClient("claude-test", base_url=provider.url, api_key=API_KEY, max_retries=0)
        messages = conversation(8, filler=" " + "y" * 40_000)  # past the 50,000-token trigger
        result = run(messages, ProviderCompactionStrategy(client, messages_exceed(6), minimum_preserved=2))
        assert any(m.is_provider_compaction for m in result.messages)
        reply = asyncio.run(client.get_response([*result.messages, Message.user("what color?")]))
        assert reply.text == "echo: what color?"
        assert provider.refused == []


@anthropic_extra.skip
def test_anthropic_below_the_trigger_fails_closed() -> None:
    with serving() as provider:
        client = AnthropicChatClient("claude-test", base_url=provider.url, api_key=API_KEY, max_retries=0)
        messages = conversation(8)
        result = run(messages, ProviderCompactionStrategy(client, messages_exceed(6), minimum_preserved=2))
        assert list(result.messages) == messages
        (failed,) = [e for e in result.events if e.action == "failed"]
        assert "without compacting" in failed.detail


def test_the_offline_model_reads_the_block_it_wrote() -> None:
    """In the lab the offline model plays the provider: it answers from its block's summary as a
    provider's model does from its own."""
    strategy = ProviderCompactionStrategy(OfflineCompactor(), messages_exceed(6), minimum_preserved=2)
    kept = run(conversation(8), strategy).messages
    assert not any("color=c4" in m.text for m in kept)  # the turn that said it was compacted
    reply = asyncio.run(OfflineModel().get_response([*kept, Message.user("Which color?")]))
    assert reply.text == "From this conversation: color: c7."
    item = next(m for m in kept if m.is_provider_compaction)
    alone = asyncio.run(OfflineModel().get_response([Message.user("hi"), item, Message.user("Which color?")]))
    assert "color: c5" in alone.text


def test_an_agent_sends_the_item_and_asks_the_provider_only_when_its_trigger_fires() -> None:
    """In the agent runtime, as the request view: every request after the first compaction holds
    the item, the provider is asked only when the trigger fires again, and each body is valid."""
    compactor = Compactor([block("Summary: color=c0.")], opening_stays=True)  # Anthropic's rule
    strategy = ProviderCompactionStrategy(compactor, target_count=2, threshold=6)
    model = ScriptedChatClient(["Noted."] * 16)
    agent = Agent(model, instructions="You help with orders.", context_providers=[CompactionProvider(strategy)])
    session = Session("provider")

    async def turns() -> None:
        for turn in range(8):
            await agent.run(f"turn {turn}: color=c{turn}", session=session)

    asyncio.run(turns())
    requests = [list(call) for call in model.requests]
    assert not any(m.is_provider_compaction for m in requests[0])
    later = [request for request in requests if any(m.is_provider_compaction for m in request)]
    assert later
    assert later[-1] == requests[-1]
    assert len(compactor.sent) < len(later)  # the item is sent again between steps, not asked for
    for request in requests:
        system, wire = to_anthropic(request)
        assert anthropic_problems({"system": system, "messages": wire}) == []


def test_applied_afresh_to_a_growing_conversation_the_provider_is_asked_once_per_step() -> None:
    """As the proxy applies a strategy: each request compacted from the whole history again.  The
    cut moves in whole steps of ``threshold`` messages, and between two steps the kept window is
    sent again, so the provider is called once per step."""
    compactor = Compactor([block("Summary.")], opening_stays=True)
    strategy = ProviderCompactionStrategy(compactor, target_count=2, threshold=4)
    history = conversation(12)
    calls = []
    for size in range(3, len(history) + 1):
        kept = run(history[:size], strategy).messages
        calls.append(len(compactor.sent))
        if size > 7:
            assert kept[2].is_provider_compaction
    assert calls[-1] == 5  # 25 messages: steps at 8, 12, 16, 20 and 24
    assert calls == sorted(calls)
